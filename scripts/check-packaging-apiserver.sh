#!/usr/bin/env bash
# The part of the packaging checks that needs a real API server (../shared/tools/kube-apiserver:
# kube-apiserver 1.20 and etcd on loopback; no kubelet, so no pod ever runs). Called by
# scripts/check-packaging.sh with the rendered chart in target/packaging/chart/.
#   1. helm install of the chart (default values), then its RBAC through the real RBAC
#      authorizer: the operator's ServiceAccount may do exactly what the controller needs
#      (kubectl auth can-i), and not more;
#   2. the PoolConfig CRD installs, and every PoolConfig we ship is accepted by the server
#      (create with --dry-run=server);
#   3. the NetworkPolicy game-day script (chaos/kubernetes/block-postgres-20s-netpol.yaml) runs
#      against the server with a token of its own ServiceAccount: the policy exists during the
#      fault and is gone after it, and the ServiceAccount may do nothing else;
#   4. the operator itself (cargo build --bin droid-pool-operator), authenticated as the chart's
#      ServiceAccount, reconciles the PoolConfigs we ship (deploy/examples, the chart's pooler
#      and sidecar example) into their ConfigMaps, Deployments, Services and PDBs: the RBAC is
#      enough and the examples render; then SIGTERM stops it cleanly.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# shellcheck source=scripts/lib/shared.sh
source scripts/lib/shared.sh
KUBECTL=$ROOT/target/k8s-bin/kubectl
PY=$ROOT/target/k8s-venv/bin/python
OUT=$ROOT/target/packaging
RUN=$OUT/apiserver
TOOLS=$DROID_POOL_SHARED/tools/kube-apiserver

die() {
  echo "check-packaging: FAIL: $*" >&2
  exit 1
}
# Two free ports: one for the API server, and N such that etcd can have N and N+1 (peer).
free_ports() {
  python3 - <<'PY'
import socket
def free(*ports):
    socks = []
    try:
        for p in ports:
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    except OSError:
        return None
    finally:
        for s in socks:
            s.close()
(api,) = free(0)
while True:
    (etcd,) = free(0)
    if etcd < 65535 and free(etcd, etcd + 1) and etcd != api and etcd + 1 != api:
        break
print(api, etcd)
PY
}

[[ -f $TOOLS/start.sh ]] || die "missing $TOOLS (the shared tools beside the repository)"
script_pid=""
stop() {
  [[ -n $script_pid ]] && kill "$script_pid" 2>/dev/null
  bash "$TOOLS/stop.sh" "$RUN" >/dev/null 2>&1 || true
}
trap stop EXIT
# Free ports can be taken by someone else before etcd or the API server binds them: retry.
kubeconfig=""
for attempt in 1 2 3; do
  read -r api_port etcd_port < <(free_ports)
  if kubeconfig=$(bash "$TOOLS/start.sh" "$RUN" "$api_port" "$etcd_port" 2>"$OUT/apiserver-start.log" | tail -n1) \
    && [[ -f $kubeconfig ]]; then
    break
  fi
  cp -r "$RUN" "$OUT/apiserver-failed-$attempt" 2>/dev/null || true
  stop
  kubeconfig=""
done
[[ -n $kubeconfig ]] \
  || die "the test API server did not start in 3 attempts (see $OUT/apiserver-failed-*/*.log)"
k() { "$KUBECTL" --kubeconfig "$kubeconfig" "$@"; }

# --- 1. helm install, then the RBAC ----------------------------------------------
# The chart with its default values, as a user installs it: the CRD from crds/ (a 1.20 server
# drops the CEL rules it does not know), the ServiceAccount, RBAC, the operator's Deployment
# (stored; no kubelet runs it) and its metrics Service.
"$ROOT/target/k8s-bin/helm" --kubeconfig "$kubeconfig" install droid-pool charts/droid-pool \
  --namespace droid-pool-system --create-namespace >"$OUT/helm-install.log" 2>&1 \
  || die "helm install against the API server: $(cat "$OUT/helm-install.log")"
k wait --for=condition=Established crd/poolconfigs.droidpool.io --timeout=60s >/dev/null \
  || die "the PoolConfig CRD is not established"
k -n droid-pool-system get deployment/droid-pool-operator service/droid-pool-operator-metrics >/dev/null \
  || die "helm install made no operator Deployment or metrics Service"
for ns in apps droid-pool-demo; do
  k create namespace "$ns" >/dev/null
done
# CloudNativePG's Cluster (the stand-in CRD a 1.20 server accepts), so that kubectl can name
# clusters.postgresql.cnpg.io in the checks below, as on a cluster that runs CloudNativePG.
k create -f tests/operator/cnpg-cluster-crd-minimal.yaml >/dev/null \
  || die "installing the stand-in CloudNativePG Cluster CRD"
k wait --for=condition=Established crd/clusters.postgresql.cnpg.io --timeout=60s >/dev/null \
  || die "the Cluster CRD is not established"
sa=system:serviceaccount:droid-pool-system:droid-pool-operator
can() {
  local want=$1 ns=$2
  shift 2
  local got
  got=$(k auth can-i "$@" -n "$ns" --as "$sa" 2>/dev/null || true)
  [[ $got == "$want" ]] || die "operator: can-i $* in $ns: got '$got', want '$want'"
}
# Every verb on every resource of deploy/operator/clusterrole.yaml: granted ones yes, the
# others no; the Lease only in the release namespace ...
"$PY" scripts/check_packaging.py can-i >"$OUT/can-i.txt" || die "listing the operator's permissions"
[[ $(grep -c . "$OUT/can-i.txt") -ge 50 ]] || die "too few permissions to check: $OUT/can-i.txt"
while read -r want ns verb resource subresource; do
  # shellcheck disable=SC2086 # an optional --subresource=... argument
  can "$want" "$ns" "$verb" "$resource" $subresource
done <"$OUT/can-i.txt"
# ... and nothing outside it.
# It makes the poolers' ServiceAccounts, but can mint no token for any.
can no apps create serviceaccounts --subresource=token
can no apps create rolebindings.rbac.authorization.k8s.io
can no apps create pods --subresource=exec
can no default list nodes
can no default create clusterrolebindings.rbac.authorization.k8s.io
can no apps get events
echo "check-packaging: RBAC: the operator may do exactly what deploy/operator/clusterrole.yaml says ($(grep -c . "$OUT/can-i.txt") verbs checked, real authorizer)"

# --- 2. our PoolConfigs ----------------------------------------------------------
"$PY" - "$OUT"/chart/*.yaml "$OUT/kustomize/examples.yaml" "$OUT/kustomize/kind-e2e.yaml" deploy/examples/poolconfig-production.yaml \
  >"$OUT/poolconfigs.yaml" <<'PY'
import sys, yaml
docs = []
for path in sys.argv[1:]:
    for d in yaml.safe_load_all(open(path)):
        if d and d.get("kind") == "PoolConfig":
            d["metadata"]["namespace"] = "apps"
            d["metadata"]["name"] = f"{d['metadata']['name']}-{len(docs)}"
            docs.append(d)
print(yaml.safe_dump_all(docs))
PY
count=$(grep -c '^kind: PoolConfig' "$OUT/poolconfigs.yaml" || true)
[[ $count -ge 5 ]] || die "found only $count PoolConfigs to send to the API server"
k create --dry-run=server -f "$OUT/poolconfigs.yaml" >/dev/null \
  || die "the API server refused a PoolConfig we ship"
# A bad one must be refused: the check can tell.
sed 's/^  mode: transaction$/  mode: sometimes/' "$OUT/poolconfigs.yaml" >"$OUT/poolconfigs-bad.yaml"
if k create --dry-run=server -f "$OUT/poolconfigs-bad.yaml" >/dev/null 2>&1; then
  die "the API server accepted a PoolConfig with mode: sometimes"
fi
echo "check-packaging: CRD: installed; the $count PoolConfigs we ship are accepted, a bad one is refused"

# --- 3. the NetworkPolicy game day's script ---------------------------------------
netpol=chaos/kubernetes/block-postgres-20s-netpol.yaml
"$PY" - "$netpol" >"$OUT/netpol-rbac.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] != "Job"]
print(yaml.safe_dump_all(docs))
PY
k apply -f "$OUT/netpol-rbac.yaml" >/dev/null || die "the game day's RBAC and ConfigMap were refused"
sadir=$OUT/netpol-sa
gameday=$OUT/netpol-gameday
mkdir -p "$sadir" "$gameday"
k -n droid-pool-demo create token block-postgres-20s >"$sadir/token" || die "no token for block-postgres-20s"
cp "$RUN/certs/apiserver.crt" "$sadir/ca.crt"
echo droid-pool-demo >"$sadir/namespace"
cp "$OUT/chaos/networkpolicy.yaml" "$gameday/"
echo 3 >"$gameday/duration-seconds" # the manifest says 20; 3 s keeps CI short
SA_DIR=$sadir GAMEDAY_DIR=$gameday KUBERNETES_API=https://127.0.0.1:$api_port \
  sh "$OUT/chaos/run.sh" >"$OUT/netpol-run.log" 2>&1 &
script_pid=$!
seen=0
for _ in $(seq 20); do
  if k -n droid-pool-demo get networkpolicy block-postgres-20s >/dev/null 2>&1; then
    seen=1
    break
  fi
  sleep 0.1
done
wait "$script_pid" || die "the game day script failed: $(cat "$OUT/netpol-run.log")"
script_pid=""
[[ $seen -eq 1 ]] || die "the NetworkPolicy never appeared during the fault: $(cat "$OUT/netpol-run.log")"
if k -n droid-pool-demo get networkpolicy block-postgres-20s >/dev/null 2>&1; then
  die "the NetworkPolicy is still there after the fault"
fi
gsa=system:serviceaccount:droid-pool-demo:block-postgres-20s
for check in "yes droid-pool-demo create networkpolicies.networking.k8s.io" \
  "yes droid-pool-demo delete networkpolicies.networking.k8s.io" \
  "no droid-pool-demo update networkpolicies.networking.k8s.io" \
  "no apps create networkpolicies.networking.k8s.io" \
  "no droid-pool-demo delete pods"; do
  read -r want ns verb res <<<"$check"
  got=$(k auth can-i "$verb" "$res" -n "$ns" --as "$gsa" 2>/dev/null || true)
  [[ $got == "$want" ]] || die "game day: can-i $verb $res in $ns: got '$got', want '$want'"
done
echo "check-packaging: game day script: policy created, held, deleted; its ServiceAccount may do nothing else"

# --- 4. the operator under the chart's RBAC -------------------------------------
if ! cargo metadata --no-deps --format-version 1 --offline \
  | "$PY" -c 'import json,sys; sys.exit(0 if any(t["name"] == "droid-pool-operator" for p in json.load(sys.stdin)["packages"] for t in p["targets"]) else 1)'; then
  if [[ -d src/operator ]]; then
    die "src/operator exists but Cargo.toml has no droid-pool-operator bin"
  fi
  echo "NOTE  operator under RBAC: not run, this tree has no droid-pool-operator yet (issue 8 adds it)"
  exit 0
fi
cargo build --quiet --bin droid-pool-operator || die "cargo build --bin droid-pool-operator"
target_dir=$(cargo metadata --no-deps --format-version 1 --offline | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
operator=$target_dir/debug/droid-pool-operator
token=$(k -n droid-pool-system create token droid-pool-operator --duration=1h) \
  || die "no token for the operator's ServiceAccount"
cat >"$OUT/operator-kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:$api_port", certificate-authority: "$RUN/certs/apiserver.crt"}}]
users: [{name: operator, user: {token: "$token"}}]
contexts: [{name: test, context: {cluster: test, user: operator, namespace: droid-pool-system}}]
current-context: test
KC
for secret in postgres-credentials:password orders-db:password pooler-users:app orders-pooler-users:orders; do
  k -n apps create secret generic "${secret%%:*}" --from-literal="${secret#*:}=not-a-real-password" >/dev/null
done
k -n apps create serviceaccount default >/dev/null # no controller-manager here to make it
metrics_port=$(free_ports | cut -d' ' -f1)
KUBECONFIG=$OUT/operator-kubeconfig POD_NAMESPACE=droid-pool-system POD_NAME=operator-0 RUST_LOG=info \
  "$operator" --metrics-addr "127.0.0.1:$metrics_port" >"$OUT/operator.log" 2>&1 &
operator_pid=$!
stop_operator() {
  kill -TERM "$operator_pid" 2>/dev/null || true
  wait "$operator_pid" 2>/dev/null || true
}
trap 'stop_operator; stop' EXIT
# The PoolConfigs users apply: deploy/examples and the chart's, all into namespace apps.
"$PY" - "$OUT/kustomize/examples.yaml" "$OUT/chart/pooler.yaml" "$OUT/chart/sidecar-example.yaml" \
  >"$OUT/operator-poolconfigs.yaml" <<'PY'
import sys, yaml
docs = []
for path in sys.argv[1:]:
    for d in yaml.safe_load_all(open(path)):
        if d and d.get("kind") == "PoolConfig":
            d["metadata"]["namespace"] = "apps"
            docs.append(d)
print(yaml.safe_dump_all(docs))
PY
k apply -f "$OUT/operator-poolconfigs.yaml" >/dev/null || die "PoolConfigs refused"
# Each must render (ConfigRendered=True); sidecar targets are then Ready, deployment targets get
# their Deployment, Service and PodDisruptionBudget (no kubelet: their pods never run).
"$PY" - "$OUT/operator-poolconfigs.yaml" >"$OUT/operator-expect.txt" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if not d:
        continue
    name, target = d["metadata"]["name"], d["spec"]["target"]
    if "sidecar" in target:
        print(name, "sidecar", target["sidecar"]["configMapName"])
    else:
        print(name, "deployment", name)
PY
while read -r name kind object; do
  rendered=""
  for _ in $(seq 60); do
    rendered=$(k -n apps get poolconfig "$name" \
      -o jsonpath='{.status.conditions[?(@.type=="ConfigRendered")].status}' 2>/dev/null || true)
    [[ $rendered == True ]] && break
    sleep 0.5
  done
  if [[ $rendered != True ]]; then
    k -n apps get poolconfig "$name" -o jsonpath='{.status.conditions}' >&2 || true
    tail -n 20 "$OUT/operator.log" >&2
    die "operator: PoolConfig $name did not render (ConfigRendered '$rendered')"
  fi
  if [[ $kind == sidecar ]]; then
    k -n apps get configmap "$object" -o jsonpath='{.data.droid-pool\.yaml}' | grep -q '^pool:' \
      || die "operator: ConfigMap $object of PoolConfig $name holds no pooler config"
    ready=$(k -n apps get poolconfig "$name" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')
    [[ $ready == True ]] || die "operator: sidecar PoolConfig $name is not Ready"
  else
    for res in deployment service poddisruptionbudget; do
      k -n apps get "$res" "$object" >/dev/null 2>&1 || die "operator: no $res $object for PoolConfig $name"
    done
  fi
done <"$OUT/operator-expect.txt"
grep -qi forbidden "$OUT/operator.log" && die "operator: forbidden by the chart's RBAC: $(grep -i -m3 forbidden "$OUT/operator.log")"
kill -TERM "$operator_pid"
status=0
for _ in $(seq 100); do
  kill -0 "$operator_pid" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$operator_pid" 2>/dev/null && die "operator: still running 10 s after SIGTERM"
wait "$operator_pid" || status=$?
[[ $status -eq 0 ]] || die "operator: exit status $status after SIGTERM"
trap stop EXIT
echo "check-packaging: operator: $(wc -l <"$OUT/operator-expect.txt") shipped PoolConfigs reconciled under the chart's RBAC, nothing forbidden, clean SIGTERM"
