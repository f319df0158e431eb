"""NetworkPolicy checks of what we ship (check_packaging.py netpol, and chart): every pod that
serves one of droid-pool's ports is selected by an Ingress policy that admits that port only
from narrow peers, and no policy selecting it opens a port to everyone.

  operator pods          (a Deployment running droid-pool-operator): the metrics port only,
                         only from Prometheus (and the chart's helm test Pod)
  operator-made poolers  (each PoolConfig with a deployment target; in a namespace-scoped
                         install, every watched namespace): 6432 from clients and poolers,
                         9127 from Prometheus and the operator, nothing else
  sidecar pods           (a container port named pooler-admin): 9127 from Prometheus and the
                         operator

A peer is narrow when it names pods (a podSelector with matchLabels) or an ipBlock: a
namespaceSelector alone, or an empty rule, admits whole namespaces or everyone. Each function
reports through fail(message)."""

POOLER_LABELS = {"app.kubernetes.io/managed-by": "droid-pool-operator",
                 "app.kubernetes.io/component": "pooler"}
PG_PORT, ADMIN_PORT = 6432, 9127


def _labels_match(selector, labels):
    sel = selector or {}
    if sel.get("matchExpressions"):
        return False  # not used by us; a policy that needs them is not what we ship
    return all(labels.get(k) == v for k, v in (sel.get("matchLabels") or {}).items())


def selecting(policies, ns, labels):
    """The Ingress policies of namespace ns whose podSelector selects labels."""
    return [p for p in policies
            if p["metadata"].get("namespace") == ns
            and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])
            and _labels_match(p["spec"].get("podSelector"), labels)]


def _narrow(peer):
    pods = (peer.get("podSelector") or {}).get("matchLabels")
    return bool(pods) or "ipBlock" in peer


def admitted(fail, what, policies, ports):
    """{port: [peers]} for each of ports, after checking no rule of policies is open to all or
    to a port outside ports."""
    out = {p: [] for p in ports}
    for pol in policies:
        name = pol["metadata"]["name"]
        for rule in pol["spec"].get("ingress") or []:
            peers = rule.get("from") or []
            numbers = [p.get("port") for p in rule.get("ports") or []]
            if not numbers:
                fail(f"{what}: NetworkPolicy {name} has a rule for every port")
                continue
            if not peers:
                fail(f"{what}: NetworkPolicy {name} admits everyone to {numbers}")
                continue
            for n in numbers:
                if n not in out:
                    fail(f"{what}: NetworkPolicy {name} opens port {n!r} (only {sorted(out)} are served)")
                    continue
                for peer in peers:
                    if not _narrow(peer):
                        fail(f"{what}: NetworkPolicy {name} admits a whole namespace or more to {n}: {peer}")
                out[n].extend(peers)
    return out


def _is_operator_peer(peer):
    return (peer.get("podSelector") or {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "operator"


def _is_prometheus_peer(peer, prometheus):
    return prometheus is None or (peer.get("podSelector") == prometheus.get("podSelector")
                                  and peer.get("namespaceSelector") == prometheus.get("namespaceSelector"))


def _is_test_peer(peer):
    return (peer.get("podSelector") or {}).get("matchLabels", {}).get("app.kubernetes.io/component") == "test"


def check_admin(fail, what, peers, prometheus):
    if not any(_is_operator_peer(p) for p in peers):
        fail(f"{what}: the operator may not reach the admin port {ADMIN_PORT}: {peers}")
    if not any(_is_prometheus_peer(p, prometheus) for p in peers):
        fail(f"{what}: Prometheus may not reach the admin port {ADMIN_PORT}: {peers}")


def _pod(d):
    t = (d.get("spec") or {}).get("template") or {}
    return (t.get("metadata") or {}).get("labels") or {}, t.get("spec") or {}


def _ports(spec):
    cs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    return {p.get("name"): p.get("containerPort") for c in cs for p in c.get("ports") or []}


def _env(spec, name):
    for c in spec.get("containers") or []:
        for e in c.get("env") or []:
            if e["name"] == name:
                return e.get("value")
    return None


def check(fail, where, docs, prometheus=None):
    """All of the above over one render or manifest file; prometheus: the peer the values
    configure (None: any narrow peer)."""
    policies = [d for d in docs if d["kind"] == "NetworkPolicy"]
    for d in docs:
        if d["kind"] != "Deployment":
            continue
        labels, spec = _pod(d)
        ns = d["metadata"].get("namespace")
        what = f"{where}: Deployment {d['metadata']['name']}"
        ports = _ports(spec)
        if any(c.get("command") == ["/usr/local/bin/droid-pool-operator"] for c in spec.get("containers", [])):
            sel = selecting(policies, ns, labels)
            if not sel:
                fail(f"{what}: no NetworkPolicy selects the operator's pods")
                continue
            peers = admitted(fail, what, sel, [ports.get("metrics")])[ports.get("metrics")]
            bad = [p for p in peers if not (_is_prometheus_peer(p, prometheus) or _is_test_peer(p))]
            if not peers or bad:
                fail(f"{what}: the metrics port admits more than Prometheus: {bad or 'nobody'}")
            for watched in filter(None, (_env(spec, "WATCH_NAMESPACE") or "").split(",")):
                if not selecting(policies, watched, dict(POOLER_LABELS)):
                    fail(f"{what}: watched namespace {watched} has no NetworkPolicy for its poolers")
        elif "pooler-admin" in ports:
            _sidecar(fail, what, selecting(policies, ns, labels), prometheus)
    for pc in docs:
        if pc["kind"] != "PoolConfig" or "deployment" not in pc["spec"].get("target", {}):
            continue
        name, ns = pc["metadata"]["name"], pc["metadata"].get("namespace")
        labels = dict(POOLER_LABELS, **{"app.kubernetes.io/name": "droid-pool", "app.kubernetes.io/instance": name})
        what = f"{where}: the poolers of PoolConfig {name}"
        sel = selecting(policies, ns, labels)
        if not sel:
            fail(f"{what}: no NetworkPolicy selects them")
            continue
        got = admitted(fail, what, sel, [PG_PORT, ADMIN_PORT])
        if not got[PG_PORT]:
            fail(f"{what}: no client may reach {PG_PORT}")
        check_admin(fail, what, got[ADMIN_PORT], prometheus)


def _sidecar(fail, what, sel, prometheus):
    if not sel:
        fail(f"{what}: no NetworkPolicy selects the pods with the sidecar")
        return
    # The application's own ports are its chart's business; the admin port is ours.
    peers = []
    for pol in sel:
        for rule in pol["spec"].get("ingress") or []:
            numbers = [p.get("port") for p in rule.get("ports") or []]
            if not numbers or not rule.get("from"):
                fail(f"{what}: NetworkPolicy {pol['metadata']['name']} has a rule open to every port or peer")
            elif ADMIN_PORT in numbers:
                bad = [p for p in rule["from"] if not _narrow(p)]
                if bad:
                    fail(f"{what}: the admin port admits whole namespaces: {bad}")
                peers.extend(rule["from"])
    check_admin(fail, what, peers, prometheus)
