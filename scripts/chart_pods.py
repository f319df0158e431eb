"""Checks of the pods the chart renders and of its sidecar helper (used by check_packaging.py
chart and parent). Each function reports through fail(message)."""
import re

import yaml

import pod_security

CHART_DIR = "charts/droid-pool"
SIDECAR_TPL = CHART_DIR + "/templates/_sidecar.tpl"


def probes_ok(fail, where, c, paths):
    for probe, path in paths.items():
        got = (c.get(probe) or {}).get("httpGet", {}).get("path")
        if got != path:
            fail(f"{where}: {probe} path is {got!r}, want {path!r}")


def default_image(fail):
    """The sidecar helper's default image (a literal in _sidecar.tpl, since in a parent chart
    .Chart is the parent's), after checking it is the chart's own image at its appVersion."""
    with open(CHART_DIR + "/Chart.yaml") as f:
        app_version = str(yaml.safe_load(f)["appVersion"])
    with open(CHART_DIR + "/values.yaml") as f:
        repository = yaml.safe_load(f)["image"]["repository"]
    with open(SIDECAR_TPL) as f:
        tpl = f.read()
    got = {}
    for key in ("Repository", "Tag"):
        m = re.search(r'define "droid-pool\.sidecarDefault%s" -}}([^{]*){{' % key, tpl)
        got[key] = m.group(1).strip() if m else None
    if got["Tag"] != app_version:
        fail(f"{SIDECAR_TPL}: droid-pool.sidecarDefaultTag is {got['Tag']!r}, Chart.yaml's appVersion {app_version!r}")
    if got["Repository"] != repository:
        fail(f"{SIDECAR_TPL}: droid-pool.sidecarDefaultRepository is {got['Repository']!r}, "
             f"values.yaml's image.repository {repository!r}")
    return f"{repository}:{app_version}"


def sidecar_container(fail, where, pod, image, name="droid-pool", native=True):
    """The one init container of pod is the native sidecar droid-pool.sidecar renders; with
    native=False (Kubernetes before 1.29), pod has no init container and the sidecar is its
    first container, a classic one."""
    inits = pod.get("initContainers") or []
    if native and len(inits) != 1:
        fail(f"{where}: want one init container (the sidecar), found {len(inits)}")
        return
    if not native and (inits or len(pod.get("containers") or []) < 2):
        fail(f"{where}: before 1.29 want no init container and the sidecar first of the containers, "
             f"found {len(inits)} init containers and {len(pod.get('containers') or [])} containers")
        return
    c = inits[0] if native else pod["containers"][0]
    if c.get("name") != name:
        fail(f"{where}: the sidecar is named {c.get('name')!r}, want {name!r}")
    if native and c.get("restartPolicy") != "Always":
        fail(f"{where}: the sidecar is not native (restartPolicy {c.get('restartPolicy')!r})")
    if not native and "restartPolicy" in c:
        fail(f"{where}: a classic container with restartPolicy {c['restartPolicy']!r} (1.29+ only)")
    if c.get("image") != image:
        fail(f"{where}: the sidecar's image is {c.get('image')!r}, want {image!r}")
    probes_ok(fail, where + " sidecar", c,
              {"startupProbe": "/startupz", "livenessProbe": "/livez", "readinessProbe": "/readyz"})
    if (c.get("readinessProbe") or {}).get("failureThreshold", 3) < 3:
        fail(f"{where}: the sidecar's readinessProbe failureThreshold is under 3 (one slow probe "
             "would take the application pod out of its endpoints)")
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    cfg = mounts.get("/etc/droid-pool")
    if not cfg or "subPath" in cfg:
        fail(f"{where}: the config must be mounted at /etc/droid-pool without subPath (hot reload)")
    if "/var/run/droid-pool/server" not in mounts:
        fail(f"{where}: the server password Secret is not at /var/run/droid-pool/server")
    admin = mounts.get("/var/run/droid-pool/admin")
    if not admin or not admin.get("readOnly") or "subPath" in admin:
        fail(f"{where}: the admin Secret (token, mock-secret) is not mounted read-only at /var/run/droid-pool/admin")
    volumes = {v["name"] for v in pod.get("volumes", [])}
    if not {m["name"] for m in c.get("volumeMounts", [])} <= volumes:
        fail(f"{where}: the sidecar mounts volumes the pod does not have ({sorted(volumes)})")
    if not c.get("resources", {}).get("requests"):
        fail(f"{where}: the sidecar has no resource requests")
    sc = c.get("securityContext", {})
    if not (sc.get("runAsNonRoot") and sc.get("readOnlyRootFilesystem") and sc.get("allowPrivilegeEscalation") is False
            and "ALL" in sc.get("capabilities", {}).get("drop", [])
            and sc.get("seccompProfile", {}).get("type") == "RuntimeDefault"):
        fail(f"{where}: the sidecar is not locked down: {sc}")


def parent(fail, path, docs, native=True):
    """tests/helm/parent-chart rendered: the helper works from a chart whose values have no
    sidecar or image keys, with the arguments given and the defaults for the rest; native=False
    for a render for Kubernetes before 1.29 (the classic container)."""
    deps = [d for d in docs if d["kind"] == "Deployment"]
    if len(deps) != 1 or len(docs) != 1:
        fail(f"{path}: want the parent's one Deployment and nothing else, got "
             f"{[(d['kind'], d['metadata']['name']) for d in docs]}")
        return
    template = deps[0]["spec"]["template"]
    sidecar_container(fail, path, template["spec"], default_image(fail), name="pooler", native=native)
    if template["metadata"]["labels"].get("droidpool.io/poolconfig") != "orders":
        fail(f"{path}: the pod has no droidpool.io/poolconfig label from droid-pool.sidecarPodLabels")
    sidecar = (template["spec"].get("initContainers") or template["spec"]["containers"])[0]
    mounts = {m["mountPath"]: m["name"] for m in sidecar.get("volumeMounts", [])}
    if "/var/run/droid-pool/client-passwords" not in mounts:
        fail(f"{path}: clientPasswordsSecret given, but no client passwords mount")
    volumes = {v["name"]: v for v in template["spec"].get("volumes", [])}
    admin = volumes.get(mounts.get("/var/run/droid-pool/admin"), {}).get("secret", {})
    items = sorted(i["key"] for i in admin.get("items", []))
    if admin.get("secretName") != "orders-admin" or items != ["mock-secret", "token"]:
        fail(f"{path}: poolConfig orders given, but the admin volume is not Secret orders-admin's "
             f"token and mock-secret: {admin}")


NAME, INSTANCE, COMPONENT = (f"app.kubernetes.io/{k}" for k in ("name", "instance", "component"))
VERSION_LABELS = ("helm.sh/chart", "app.kubernetes.io/version")


def pod_labels(fail, where, docs):
    """Pod templates carry name and instance and nothing that changes with the chart's version
    (an upgrade of the chart alone must not restart pods); selectors use only stable labels."""
    for d in docs:
        found = pod_security.pod_templates(d)
        if found is None:
            continue
        what = f"{where}: {d['kind']}/{d['metadata']['name']}"
        labels = found[0].get("labels") or {}
        missing = [k for k in (NAME, INSTANCE) if not labels.get(k)]
        if missing:
            fail(f"{what}: the pod template lacks {missing}")
        bad = [k for k in VERSION_LABELS if k in labels]
        if bad:
            fail(f"{what}: the pod template carries version labels {bad}")
        selector = ((d.get("spec") or {}).get("selector") or {}).get("matchLabels")
        if selector is not None:
            if not set(selector) <= {NAME, INSTANCE, COMPONENT}:
                fail(f"{what}: the selector uses {sorted(set(selector) - {NAME, INSTANCE, COMPONENT})}")
            if any(labels.get(k) != v for k, v in selector.items()):
                fail(f"{what}: the selector {selector} does not match the pod labels {labels}")


def test_hook(fail, where, docs):
    """The `helm test` Pod: a psql login through the pooler's Service when the render has an
    operator-deployed pooler, else the operator's /readyz through its metrics Service."""
    tests = [d for d in docs if d["kind"] == "Pod"
             and (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"]
    poolers = [d for d in docs if d["kind"] == "PoolConfig" and "deployment" in d["spec"].get("target", {})]
    services = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-operator-metrics")]
    if not poolers and not services:
        if tests:
            fail(f"{where}: a test Pod with neither a pooler nor the operator's metrics Service to test")
        return
    if len(tests) != 1:
        fail(f"{where}: want one helm test Pod, found {len(tests)}")
        return
    t = tests[0]
    policy = set(t["metadata"]["annotations"].get("helm.sh/hook-delete-policy", "").split(","))
    if policy != {"before-hook-creation", "hook-succeeded"}:
        fail(f"{where}: test Pod hook-delete-policy is {policy}")
    if t["spec"].get("restartPolicy") != "Never":
        fail(f"{where}: test Pod restartPolicy is not Never")
    c = t["spec"]["containers"][0]
    script = " ".join(c.get("command", []))
    if poolers:
        pc = poolers[0]
        port = pc["spec"]["target"]["deployment"].get("service", {}).get("port", 6432)
        want = f"host={pc['metadata']['name']} port={port} "
        env = {e["name"] for e in c.get("env", [])}
        if "psql" not in script or want not in script or "PGCONNECT_TIMEOUT" not in env:
            fail(f"{where}: the test does not psql through the pooler's Service ({want!r}, "
                 f"PGCONNECT_TIMEOUT): {script!r}")
    else:
        svc = services[0]
        url = f"http://{svc['metadata']['name']}:{svc['spec']['ports'][0]['port']}/readyz"
        if url not in script:
            fail(f"{where}: the test does not ask {url}: {script!r}")
    if "seq " not in script:
        fail(f"{where}: the test does not retry: {script!r}")
