"""The Pod Security Standards' `restricted` profile (baseline + restricted controls), checked on
manifests: https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the v1.29
lists, the version the manifests are validated against).

Our test kube-apiserver is 1.20, which has no Pod Security admission, so nothing in CI would
refuse a pod a restricted namespace refuses: these checks stand in for the admission plugin.
Used by `check_packaging.py restricted`.
"""
import os

# Kinds whose objects carry a pod template, and where it is.
TEMPLATE_PATHS = {
    "Pod": (),
    "PodTemplate": ("template",),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}
# Baseline "Capabilities": what may be added at all; restricted narrows it to NET_BIND_SERVICE.
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                 "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}
RESTRICTED_CAPS = {"NET_BIND_SERVICE"}
# Restricted "Volume Types".
VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                "projected", "secret"}
# Baseline "Sysctls": the safe set (1.29).
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
# Baseline "SELinux": these types only, and no user or role.
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}
SECCOMP_OK = {"RuntimeDefault", "Localhost"}
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
SECCOMP_ANNOTATIONS = ("seccomp.security.alpha.kubernetes.io/pod",
                       "container.seccomp.security.alpha.kubernetes.io/")


def pod_templates(doc):
    """(metadata, spec) of the pod template doc carries, or None if its kind has none."""
    path = TEMPLATE_PATHS.get(doc.get("kind"))
    if path is None:
        return None
    node = doc
    for key in path:
        node = (node or {}).get(key)
    node = node or {}
    return node.get("metadata") or {}, node.get("spec") or {}


def _selinux(opts, where, out):
    if not opts:
        return
    if opts.get("type", "") not in SELINUX_TYPES:
        out.append(f"{where}seLinuxOptions.type {opts['type']!r} (allowed: {sorted(SELINUX_TYPES - {''})})")
    for key in ("user", "role"):
        if opts.get(key):
            out.append(f"{where}seLinuxOptions.{key} is set")


def _common(sc, where, out):
    """Controls checked alike on the pod's and a container's securityContext."""
    if (sc.get("windowsOptions") or {}).get("hostProcess"):
        out.append(f"{where}windowsOptions.hostProcess is true")
    _selinux(sc.get("seLinuxOptions"), where, out)
    if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append(f"{where}seccompProfile.type is Unconfined")
    if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append(f"{where}appArmorProfile.type is Unconfined")
    if sc.get("runAsUser") == 0:
        out.append(f"{where}runAsUser is 0")


def _container(c, pod_sc, out):
    where = f"container {c.get('name')}: "
    sc = c.get("securityContext") or {}
    _common(sc, where, out)
    if sc.get("privileged"):
        out.append(f"{where}privileged")
    caps = sc.get("capabilities") or {}
    for cap in caps.get("add") or []:
        if cap not in BASELINE_CAPS:
            out.append(f"{where}capabilities.add {cap} (not even baseline allows it)")
        elif cap not in RESTRICTED_CAPS:
            out.append(f"{where}capabilities.add {cap} (restricted allows only NET_BIND_SERVICE)")
    if "ALL" not in (caps.get("drop") or []):
        out.append(f"{where}capabilities.drop does not include ALL")
    for p in c.get("ports") or []:
        if p.get("hostPort"):
            out.append(f"{where}hostPort {p['hostPort']}")
    if sc.get("procMount", "Default") != "Default":
        out.append(f"{where}procMount {sc['procMount']!r}, want Default")
    if sc.get("allowPrivilegeEscalation") is not False:
        out.append(f"{where}allowPrivilegeEscalation is not false")
    # runAsNonRoot and seccompProfile: the pod's value counts for a container that sets none.
    if sc.get("runAsNonRoot") is False:
        out.append(f"{where}runAsNonRoot is false")
    elif sc.get("runAsNonRoot") is None and pod_sc.get("runAsNonRoot") is not True:
        out.append(f"{where}runAsNonRoot is true neither on the pod nor on this container")
    seccomp = (sc.get("seccompProfile") or {}).get("type")
    pod_seccomp = (pod_sc.get("seccompProfile") or {}).get("type")
    if seccomp is None and pod_seccomp not in SECCOMP_OK:
        out.append(f"{where}no seccompProfile RuntimeDefault or Localhost on the pod or this container")
    elif seccomp is not None and seccomp not in SECCOMP_OK and seccomp != "Unconfined":
        out.append(f"{where}seccompProfile.type {seccomp!r}")


def check_pod(meta, spec):
    """The violations of one pod template, as strings."""
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            out.append(f"{key} is true")
    sc = spec.get("securityContext") or {}
    _common(sc, "pod securityContext: ", out)
    for s in sc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"pod securityContext: sysctl {s.get('name')} is not in the safe set")
    seccomp = (sc.get("seccompProfile") or {}).get("type")
    if seccomp is not None and seccomp not in SECCOMP_OK | {"Unconfined"}:
        out.append(f"pod securityContext: seccompProfile.type {seccomp!r}")
    for v in spec.get("volumes") or []:
        kinds = set(v) - {"name"}
        if "hostPath" in kinds:
            out.append(f"volume {v.get('name')}: hostPath")
        elif not kinds <= VOLUME_TYPES:
            out.append(f"volume {v.get('name')}: type {sorted(kinds - VOLUME_TYPES)} not allowed")
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith(APPARMOR_ANNOTATION) and value != "runtime/default" \
                and not str(value).startswith("localhost/"):
            out.append(f"annotation {key}: {value!r}")
        if key.startswith(SECCOMP_ANNOTATIONS) and value == "unconfined":
            out.append(f"annotation {key}: unconfined")
    containers = [c for key in ("initContainers", "containers", "ephemeralContainers")
                  for c in spec.get(key) or []]
    if not containers:
        out.append("no containers")
    for c in containers:
        _container(c, sc, out)
    return out


def check_docs(path, docs):
    """'PATH: KIND/NAME: violation' for every violation of every pod template in docs."""
    out = []
    for d in docs:
        found = pod_templates(d)
        if found is None:
            continue
        name = f"{d['kind']}/{(d.get('metadata') or {}).get('name')}"
        out += [f"{path}: {name}: {v}" for v in check_pod(*found)]
    return out


def self_test(load, testdata):
    """Each testdata/restricted fixture: a good one yields no violation; a bad one yields exactly
    the violations its '# expect: ' lines name (substrings), so a checker that refuses nothing
    (or everything) fails here. Returns failure messages."""
    failures = []
    files = sorted(f for f in os.listdir(testdata) if f.endswith(".yaml"))
    if not any(f.startswith("bad-") for f in files) or not any(f.startswith("good") for f in files):
        return [f"{testdata}: want good*.yaml and bad-*.yaml fixtures, found {files}"]
    for f in files:
        path = os.path.join(testdata, f)
        with open(path) as fh:
            expect = [l.split("# expect:", 1)[1].strip() for l in fh if l.startswith("# expect:")]
        got = check_docs(path, load(path))
        for e in expect:
            if not any(e in g for g in got):
                failures.append(f"self-test {path}: no violation says {e!r}; got {got}")
        if len(got) != len(expect):
            failures.append(f"self-test {path}: want {len(expect)} violations, got {len(got)}: {got}")
    return failures
