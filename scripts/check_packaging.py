#!/usr/bin/env python3
"""Checks of the packaging that no generic validator makes (run by check-packaging.sh).

  check_packaging.py kinds CRS_LOG FILE...  every object is of a kind some check validates, and
                                            validate_crs.py said OK for every custom resource
  check_packaging.py chart RENDER_DIR       the chart's promises: probes, native sidecar, RBAC,
                                            the helper's default image at Chart.yaml's appVersion,
                                            pod labels without the chart's version, the helm
                                            test Pod (through the pooler, else /readyz)
  check_packaging.py parent RENDER          tests/helm/parent-chart rendered: the sidecar helper
                                            used from another chart, its defaults (image)
  check_packaging.py parent-classic RENDER  the same rendered for Kubernetes 1.20: the sidecar
                                            a classic first container, no init container
  check_packaging.py netpol FILE...         the NetworkPolicies of the operator, its poolers and
                                            sidecar pods in FILEs (netpol_check.py); with
                                            --expect-failure: FILEs must fail (the check can tell)
  check_packaging.py chaos FILE...          the game-day NetworkChaos: partition, to, 20s
  check_packaging.py extract FILE OUTDIR    the NetworkPolicy and script inside the Job's ConfigMap
  check_packaging.py can-i                   the operator's permissions as "yes|no NAMESPACE VERB
                                            RESOURCE" lines, from deploy/operator/clusterrole.yaml
  check_packaging.py dockerfile DOCKERFILE BIN...
                                            the image's promises; BIN: the cargo bin targets
  check_packaging.py alerts                 every alert of RULES: severity, summary, description,
                                            runbook_url into docs/runbooks.md; promtool-tested
                                            firing and quiet (deploy/prometheus/*.test.yaml)
  check_packaging.py dashboard FILE         the Grafana dashboard: namespace and poolconfig
                                            variables that filter every query, $__rate_interval
  check_packaging.py restricted FILE...     every pod template complies with the Pod Security
                                            Standards' restricted profile (pod_security.py)
  check_packaging.py restricted --self-test the checker refuses the bad fixtures of
                                            scripts/testdata/restricted/ and passes the good one

Exit 1 with one line per failure.
"""
import os
import sys

import yaml

import chart_pods
import check_monitoring
import netpol_check
import pod_security

# apiVersions whose kinds kubernetes-validate has schemas for (built into Kubernetes 1.29).
BUILTIN = {"v1", "apps/v1", "batch/v1", "policy/v1", "rbac.authorization.k8s.io/v1",
           "networking.k8s.io/v1", "apiextensions.k8s.io/v1", "coordination.k8s.io/v1"}
# Custom kinds and what validates them.
CUSTOM = {
    ("droidpool.io/v1alpha1", "PoolConfig"): "validate_crs.py against deploy/crds/poolconfig.yaml",
    ("chaos-mesh.org/v1alpha1", "NetworkChaos"): "validate_crs.py against Chaos Mesh's CRD",
    # No Prometheus Operator CRD is available offline: their shape is asserted in `chart`.
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "check_packaging.py chart",
    ("monitoring.coreos.com/v1", "PodMonitor"): "check_packaging.py chart",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "check_packaging.py chart (promtool-tested rules)",
}
RULES = "deploy/prometheus/droid-pool-rules.yaml"
CHART_DIR = chart_pods.CHART_DIR

# The operator's rules: deploy/operator/clusterrole.yaml, which the operator's own tests prove
# sufficient by running the controller bound to nothing else. The chart splits the Lease rule
# into a Role in the release namespace. A change there is a change of every installation.
CLUSTERROLE = "deploy/operator/clusterrole.yaml"


def normalized(rules):
    return sorted((tuple(g), tuple(r), tuple(sorted(v))) for g, r, v in rules)


def reference_rules():
    """(operator rules, lease rules) of CLUSTERROLE, normalized."""
    with open(CLUSTERROLE) as f:
        role = yaml.safe_load(f)
    rules = rules_of(role)
    lease = [r for r in rules if r[0] == ["coordination.k8s.io"]]
    rest = [r for r in rules if r[0] != ["coordination.k8s.io"]]
    return normalized(rest), normalized(lease)


failures = []


def fail(msg):
    failures.append(msg)


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def load_dir(d):
    out = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".yaml"):
            out[name] = load(os.path.join(d, name))
    return out


def kinds(crs_log, files):
    with open(crs_log) as f:
        ok = {tuple(line.split()[1:3]) for line in f if line.startswith("OK")}
    for path in files:
        for d in load(path):
            key = (d.get("apiVersion"), d.get("kind"))
            name = d.get("metadata", {}).get("name")
            if key[0] not in BUILTIN and key not in CUSTOM:
                fail(f"{path}: {key[1]}/{name} ({key[0]}) is of a kind no check validates")
            if "validate_crs" in CUSTOM.get(key, "") and (path, f"{key[1]}/{name}") not in ok:
                fail(f"{path}: {key[1]}/{name} was not validated by validate_crs.py (no schema for {key[0]}?)")


def rules_of(role):
    return [(r.get("apiGroups"), r.get("resources"), r.get("verbs")) for r in role.get("rules", [])]


def pod_of(where, docs, suffix):
    """The pod spec of the one Deployment whose name ends with suffix, or None (a failure)."""
    deps = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith(suffix)]
    if len(deps) != 1:
        fail(f"{where}: want one Deployment named *{suffix}, found {len(deps)}")
        return None
    return deps[0]["spec"]["template"]["spec"]


def check_operator(where, docs):
    pod = pod_of(where, docs, "-operator")
    if pod is None:
        return
    c = pod["containers"][0]
    if c.get("command") != ["/usr/local/bin/droid-pool-operator"]:
        fail(f"{where}: operator command is {c.get('command')}")
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") for e in c.get("env", [])}
    if env.get("POD_NAMESPACE") != "metadata.namespace" or env.get("POD_NAME") != "metadata.name":
        fail(f"{where}: POD_NAMESPACE/POD_NAME must come from the downward API, got {env}")
    chart_pods.probes_ok(fail, where + " operator", c, {"livenessProbe": "/livez", "readinessProbe": "/readyz"})
    sc = c.get("securityContext", {})
    if not (sc.get("runAsNonRoot") and sc.get("readOnlyRootFilesystem")
            and sc.get("allowPrivilegeEscalation") is False):
        fail(f"{where}: operator container is not locked down: {sc}")


def watched(docs):
    """The operator's WATCH_NAMESPACE as a list (empty: every namespace), from its Deployment."""
    for d in docs:
        if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                for e in c.get("env", []):
                    if e["name"] == "WATCH_NAMESPACE":
                        return [n for n in e.get("value", "").split(",") if n]
    return []


def check_rbac(where, docs):
    # The operator's rules are a ClusterRole, or (namespace scope) a Role in each watched
    # namespace and nothing cluster-wide.
    crs = [d for d in docs if d["kind"] == "ClusterRole"]
    leases = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader-election")]
    scoped = [d for d in docs if d["kind"] == "Role" and d not in leases]
    ops = crs + scoped
    operator_rules, lease_rules = reference_rules()
    namespaces = watched(docs)
    has_operator = any(d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator") for d in docs)
    if namespaces:
        if crs or sorted(d["metadata"].get("namespace") for d in scoped) != sorted(namespaces):
            fail(f"{where}: watching {namespaces}, want one Role in each and no ClusterRole; got "
                 f"{[(d['kind'], d['metadata'].get('namespace')) for d in ops]}")
    elif has_operator and (len(crs) != 1 or scoped):
        fail(f"{where}: watching every namespace, want one ClusterRole and no Role; got "
             f"{[(d['kind'], d['metadata'].get('namespace')) for d in ops]}")
    for op in ops:
        if normalized(rules_of(op)) != operator_rules:
            fail(f"{where}: the operator's {op['kind']} differs from {CLUSTERROLE}: {rules_of(op)}")
    if len(leases) != 1 or normalized(rules_of(leases[0])) != lease_rules:
        fail(f"{where}: the leader-election Role differs from {CLUSTERROLE}: {[rules_of(r) for r in leases]}")
    bindings = [d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    bound = {(b["roleRef"]["kind"], b["roleRef"]["name"], b.get("metadata", {}).get("namespace")) for b in bindings}
    for d in ops + leases:
        ns = d["metadata"].get("namespace") if d["kind"] == "Role" else None
        if (d["kind"], d["metadata"]["name"], ns) not in bound:
            fail(f"{where}: {d['kind']}/{d['metadata']['name']} is bound by nothing in its namespace")
    for d in ops + leases:
        for groups, resources, verbs in rules_of(d):
            if "*" in groups + resources + verbs:
                fail(f"{where}: wildcard in {d['kind']}/{d['metadata']['name']}")


def check_sidecar(where, docs):
    pod = pod_of(where, docs, "-sidecar-example")
    if pod is None:
        return
    chart_pods.sidecar_container(fail, where, pod, chart_pods.default_image(fail))
    if "terminationGracePeriodSeconds" not in pod:
        fail(f"{where}: the example sets no terminationGracePeriodSeconds")


def check_monitors(where, docs):
    with open(RULES) as f:
        rules = yaml.safe_load(f)
    for d in docs:
        if d["kind"] == "PrometheusRule" and d["spec"] != rules:
            fail(f"{where}: PrometheusRule {d['metadata']['name']} differs from {RULES}")
        if d["kind"] == "ServiceMonitor":
            eps = d["spec"].get("endpoints", [])
            if not d["spec"].get("selector", {}).get("matchLabels") or [e.get("port") for e in eps] != ["metrics"]:
                fail(f"{where}: ServiceMonitor {d['metadata']['name']} does not select the metrics port")
        if d["kind"] == "PodMonitor":
            eps = d["spec"].get("podMetricsEndpoints", [])
            if not d["spec"].get("selector", {}).get("matchLabels") or \
                    [e.get("port") for e in eps] not in (["admin"], ["pooler-admin"]) or \
                    any(e.get("path") != "/metrics" for e in eps):
                fail(f"{where}: PodMonitor {d['metadata']['name']} does not scrape the admin port's /metrics")
            # The PoolConfig's name from the pod label each kind of pooler carries.
            source = {"admin": "__meta_kubernetes_pod_label_app_kubernetes_io_instance",
                      "pooler-admin": "__meta_kubernetes_pod_label_droidpool_io_poolconfig"}
            for e in eps:
                got = [r.get("sourceLabels") for r in e.get("relabelings", []) if r.get("targetLabel") == "poolconfig"]
                if got != [[source.get(e.get("port"))]]:
                    fail(f"{where}: PodMonitor {d['metadata']['name']} does not set poolconfig from "
                         f"{source.get(e.get('port'))}: {got}")


def chart(render_dir):
    renders = load_dir(render_dir)
    if not renders:
        fail(f"{render_dir}: no rendered chart")
    for name, docs in renders.items():
        where = f"{render_dir}/{name}"
        has_operator = any(d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-operator") for d in docs)
        if has_operator:
            check_operator(where, docs)
        if any(d["kind"] in ("ClusterRole", "Role") for d in docs):
            check_rbac(where, docs)
        if "sidecar-example" in name:
            check_sidecar(where, docs)
        check_monitors(where, docs)
        chart_pods.pod_labels(fail, where, docs)
        chart_pods.test_hook(fail, where, docs)
        if "networkpolicy-off" not in name:
            netpol_check.check(fail, where, docs, prometheus_peer())
        if name.startswith("default") and not has_operator:
            fail(f"{where}: the default values render no operator")


def prometheus_peer():
    """The Prometheus peer of the chart's default values."""
    with open(CHART_DIR + "/values.yaml") as f:
        return yaml.safe_load(f)["networkPolicy"]["prometheus"]


def netpol(files):
    expect_failure = files[:1] == ["--expect-failure"]
    files = files[1:] if expect_failure else files
    before = len(failures)
    for path in files:
        netpol_check.check(fail, path, load(path), prometheus_peer())
    if expect_failure:
        found = failures[before:]
        del failures[before:]
        if not found:
            fail(f"netpol: {files} passed, but must fail (the check cannot tell?)")
        else:
            print(f"NOTE  netpol refuses {files} as it must: {found[0]}")


def chaos(files):
    for path in files:
        for d in load(path):
            if d.get("kind") != "NetworkChaos":
                continue
            s = d["spec"]
            got = (s.get("action"), s.get("direction"), s.get("duration"))
            if got != ("partition", "to", "20s"):
                fail(f"{path}: want action partition, direction to, duration 20s; got {got}")
            if not (s.get("target") or s.get("externalTargets")):
                fail(f"{path}: no target and no externalTargets")


def extract(path, outdir):
    cms = [d for d in load(path) if d["kind"] == "ConfigMap"]
    if len(cms) != 1:
        fail(f"{path}: want one ConfigMap")
        return
    for key in ("networkpolicy.yaml", "run.sh"):
        if key not in cms[0]["data"]:
            fail(f"{path}: ConfigMap has no {key}")
            continue
        with open(os.path.join(outdir, key), "w") as f:
            f.write(cms[0]["data"][key])


def dockerfile(path, bins):
    with open(path) as f:
        lines = [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
    stages = [i for i, l in enumerate(lines) if l.upper().startswith("FROM ")]
    if len(stages) < 2:
        fail(f"{path}: not multi-stage")
        return
    final = lines[stages[-1]:]
    text = "\n".join(lines)
    for binary in ("droid-pool", "droid-pool-operator"):
        # droid-pool may come from scripts/build-pgo.sh (cargo build --bin droid-pool inside).
        built = f"--bin {binary}" in text or (binary == "droid-pool" and "scripts/build-pgo.sh" in text)
        if not built or f"/usr/local/bin/{binary}" not in text \
                and not any(l.startswith("COPY") and binary in l and "/usr/local/bin/" in l for l in final):
            fail(f"{path}: {binary} is not built and copied to /usr/local/bin")
    for want in ("STOPSIGNAL SIGTERM", 'ENTRYPOINT ["/usr/local/bin/droid-pool"]'):
        if want not in final:
            fail(f"{path}: the runtime stage lacks {want!r}")
    exposed = {p for l in final if l.startswith("EXPOSE") for p in l.split()[1:]}
    if not {"6432", "9127"} <= exposed:
        fail(f"{path}: EXPOSE {sorted(exposed)} lacks 6432 or 9127")
    users = [l.split()[1] for l in final if l.startswith("USER")]
    if not users or not users[-1].split(":")[0].isdigit() or users[-1].split(":")[0] == "0":
        fail(f"{path}: the runtime stage must end with a numeric non-root USER, got {users}")
    if any(l.startswith(("RUN", "SHELL")) for l in final):
        fail(f"{path}: the runtime stage runs commands (it has no shell)")
    # Every --bin the build asks for must be a bin target of the package (cargo metadata).
    # droid-pool-operator comes with the operator (issue 8): tolerated only while src/operator/
    # does not exist yet, i.e. before that branch is merged.
    asked = [w for i, w in enumerate(text.split()) if i and text.split()[i - 1] == "--bin"]
    for b in asked:
        if b in bins:
            continue
        if b == "droid-pool-operator" and not os.path.isdir("src/operator"):
            print(f"NOTE  {path}: bin {b} is not in this tree yet (the operator branch adds it)")
            continue
        fail(f"{path}: --bin {b} is not a bin target of Cargo.toml ({bins})")


def alerts():
    with open(CHART_DIR + "/Chart.yaml") as f:
        home = yaml.safe_load(f)["home"]
    for f in check_monitoring.alerts(RULES, RULES.replace(".yaml", ".test.yaml"), "docs/runbooks.md", home):
        fail(f)


def restricted(files):
    if files == ["--self-test"]:
        for f in pod_security.self_test(load, os.path.join(os.path.dirname(__file__), "testdata", "restricted")):
            fail(f)
        return
    if not files:
        fail("restricted: no files")
    for path in files:
        docs = load(path)
        if not any(pod_security.pod_templates(d) for d in docs):
            print(f"NOTE  {path}: no pod templates")
        for v in pod_security.check_docs(path, docs):
            fail(f"restricted: {v}")


VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]


def can_i():
    """What the operator's ServiceAccount may and may not do: every verb of every rule of
    CLUSTERROLE (the Lease only in the release namespace), and none of the other verbs."""
    operator_rules, lease_rules = reference_rules()
    for rules, ns in ((operator_rules, "apps"), (lease_rules, "droid-pool-system")):
        for groups, resources, verbs in rules:
            for group in groups:
                for res in resources:
                    name, _, sub = res.partition("/")
                    full = f"{name}.{group}" if group else name
                    extra = f" --subresource={sub}" if sub else ""
                    for verb in VERBS:
                        print("yes" if verb in verbs else "no", ns, verb, full + extra)
    for groups, resources, verbs in lease_rules:
        for verb in verbs:
            print("no apps", verb, "leases.coordination.k8s.io")


def main(argv):
    cmd, args = argv[1], argv[2:]
    {"kinds": lambda: kinds(args[0], args[1:]), "chart": lambda: chart(args[0]), "chaos": lambda: chaos(args),
     "netpol": lambda: netpol(args),
     "extract": lambda: extract(args[0], args[1]),
     "dockerfile": lambda: dockerfile(args[0], args[1:]), "can-i": can_i,
     "restricted": lambda: restricted(args), "parent": lambda: chart_pods.parent(fail, args[0], load(args[0])),
     "parent-classic": lambda: chart_pods.parent(fail, args[0], load(args[0]), native=False),
     "alerts": alerts, "dashboard": lambda: [fail(f) for f in check_monitoring.dashboard(args[0])]}[cmd]()
    for f in failures:
        print(f"FAIL {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
