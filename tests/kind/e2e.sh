#!/usr/bin/env bash
# End to end in a kind cluster (issue 9). Needs Docker (or another engine kind supports), kind,
# python3, and the network to pull base images; helm and kubectl come from
# scripts/ensure-k8s-tools.sh when they are not on PATH. Where no container engine exists, CI
# runs only `bash -n` and shellcheck on this script, and validates everything it applies
# (scripts/check-packaging.sh).
#
#   tests/kind/e2e.sh            create cluster "droid-pool-e2e", run every stage, delete it
#   KEEP_CLUSTER=1               keep the cluster afterwards (and reuse it on the next run)
#   KIND_NODE_IMAGE=kindest/node:v1.30.0   another node image (Kubernetes >= 1.29)
#   CHAOS=netpol                 without Chaos Mesh, run the NetworkPolicy game day instead
#
# Stages, each one line PASS or FAIL (exit 1 at the first FAIL):
#   1. cluster, image (docker build + kind load), helm install of the chart (operator), and
#      its helm test (the operator's /readyz through its metrics Service)
#   2. deploy PostgreSQL, the sidecar app, the operator-deployed pooler and a client pod
#      (tests/kind/manifests: deploy/examples adjusted for the checks)
#   3. the prepared-statement stage checks through the operator-deployed pooler and through
#      a sidecar (tests/kind/prepared_checks.py over kubectl port-forward)
#   4. PoolConfig changes reach running poolers without a restart: poolSize of the deployed
#      pooler, and the sidecars' share of maxServerConnections when the app is scaled
#   5. rolling restart of the pooler Deployment under pgbench load: zero failed transactions
#   6. the chaos manifest (Chaos Mesh present, or CHAOS=netpol): 20 s partition, the pooler
#      stays live, fails fast, and serves again within 10 s of the heal
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD

CLUSTER=${CLUSTER:-droid-pool-e2e}
NS=droid-pool-demo
OP_NS=droid-pool-system
IMAGE=droid-pool:e2e
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.29.2}
WORK=$ROOT/target/kind-e2e
mkdir -p "$WORK"
PIDS=()

log() { echo "kind-e2e: $*" >&2; }
pass() { echo "PASS $*"; }
fail() {
  echo "FAIL $*"
  exit 1
}

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  if [[ ${KEEP_CLUSTER:-0} != 1 ]] && kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "deleting cluster $CLUSTER (KEEP_CLUSTER=1 keeps it)"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

# --- tools --------------------------------------------------------------------
for tool in docker kind python3; do
  command -v "$tool" >/dev/null 2>&1 \
    || { log "needs $tool (a container engine and kind): cannot run here"; exit 2; }
done
if ! command -v helm >/dev/null 2>&1 || ! command -v kubectl >/dev/null 2>&1; then
  bash scripts/ensure-k8s-tools.sh
  PATH=$ROOT/target/k8s-bin:$PATH
fi
k() { kubectl --context "kind-$CLUSTER" "$@"; }
kn() { k -n "$NS" "$@"; }

# Forwards a local port to NAME:PORT in $NS in the background; prints the local port.
forward() {
  local target=$1 port=$2 local_port
  local_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  kn port-forward "$target" "$local_port:$port" >"$WORK/forward-$local_port.log" 2>&1 &
  PIDS+=("$!")
  for _ in $(seq 50); do
    if python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $local_port), 1)" 2>/dev/null; then
      echo "$local_port"
      return 0
    fi
    sleep 0.2
  done
  fail "port-forward to $target:$port did not come up ($(cat "$WORK/forward-$local_port.log"))"
}

# A gauge from a pooler's /metrics, read through a port-forward to its admin port.
metric() {
  local admin_port=$1 name=$2
  python3 - "$admin_port" "$name" <<'PY'
import sys, urllib.request
port, name = sys.argv[1], sys.argv[2]
text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
values = [l.split()[-1] for l in text.splitlines() if l.startswith(name + "{") or l.startswith(name + " ")]
print(values[0] if values else "")
PY
}

# Waits until metric NAME on ADMIN_PORT equals WANT (at most 60 s, the ConfigMap volume update
# delay of the kubelet included).
wait_metric() {
  local admin_port=$1 name=$2 want=$3 got=""
  for _ in $(seq 60); do
    got=$(metric "$admin_port" "$name" || true)
    [[ $got == "$want" ]] && return 0
    sleep 1
  done
  fail "$name is '$got', want '$want'"
}

restarts() { kn get pod "$1" -o jsonpath='{.status.initContainerStatuses[*].restartCount} {.status.containerStatuses[*].restartCount}'; }

# --- 1. cluster, image, chart -------------------------------------------------
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "creating cluster $CLUSTER ($KIND_NODE_IMAGE)"
  kind create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" \
    --config tests/kind/kind-config.yaml --wait 120s
fi
log "building $IMAGE"
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"
helm --kube-context "kind-$CLUSTER" upgrade --install droid-pool charts/droid-pool \
  --namespace "$OP_NS" --create-namespace \
  --set image.repository=droid-pool --set image.tag=e2e --set image.pullPolicy=Never \
  --wait --timeout 3m
k -n "$OP_NS" rollout status deploy/droid-pool-operator --timeout 2m
helm --kube-context "kind-$CLUSTER" test droid-pool --namespace "$OP_NS" --timeout 2m >/dev/null \
  || fail "helm test droid-pool (the operator's /readyz through its metrics Service)"
pass "cluster, image, helm install and helm test (operator ready)"

# --- 2. PostgreSQL, the poolers, the client -----------------------------------
k apply -k tests/kind/manifests
kn rollout status statefulset/postgres --timeout 3m
kn wait pod/client --for=condition=Ready --timeout 2m
for pc in app-pooler demo-app; do
  kn wait "poolconfig/$pc" --for=condition=Ready --timeout 3m \
    || fail "PoolConfig $pc not Ready: $(kn get poolconfig "$pc" -o jsonpath='{.status.conditions}')"
done
kn rollout status deploy/app-pooler --timeout 3m
kn rollout status deploy/demo-app --timeout 3m
pass "PostgreSQL, operator-deployed pooler, sidecar app and client running"

# --- 3. prepared-statement stage checks ---------------------------------------
pooler_pod=$(kn get pod -l app.kubernetes.io/instance=app-pooler -o jsonpath='{.items[0].metadata.name}')
port=$(forward "pod/$pooler_pod" 6432)
python3 tests/kind/prepared_checks.py --port "$port" --user app --database app \
  || fail "prepared-statement checks through the operator-deployed pooler"
pass "prepared-statement checks through the operator-deployed pooler"
app_pod=$(kn get pod -l app.kubernetes.io/name=demo-app -o jsonpath='{.items[0].metadata.name}')
port=$(forward "pod/$app_pod" 6432)
python3 tests/kind/prepared_checks.py --port "$port" --user app --database app \
  || fail "prepared-statement checks through the sidecar"
pass "prepared-statement checks through the sidecar"

# --- 4. config changes without restarts --------------------------------------
admin=$(forward "pod/$pooler_pod" 9127)
wait_metric "$admin" droidpool_pool_size 2
before=$(restarts "$pooler_pod")
kn patch poolconfig app-pooler --type merge -p '{"spec":{"poolSize":5}}'
wait_metric "$admin" droidpool_pool_size 5
[[ $(restarts "$pooler_pod") == "$before" ]] || fail "the pooler restarted on a poolSize change"
kn get pod "$pooler_pod" >/dev/null || fail "the pooler pod was replaced on a poolSize change"
pass "poolSize 2 -> 5 applied to the running pooler $pooler_pod (no restart)"

sidecar_admin=$(forward "pod/$app_pod" 9127)
wait_metric "$sidecar_admin" droidpool_pool_size 4   # floor(9 / 2 pods)
before=$(restarts "$app_pod")
kn scale deploy/demo-app --replicas 3
kn rollout status deploy/demo-app --timeout 3m
wait_metric "$sidecar_admin" droidpool_pool_size 3   # floor(9 / 3 pods)
[[ $(restarts "$app_pod") == "$before" ]] || fail "the sidecar restarted on a budget change"
pass "maxServerConnections 9 over 2 -> 3 sidecar pods: pool size 4 -> 3 without a restart"

# --- 5. rolling restart under load -------------------------------------------
log "pgbench through the pooler while its Deployment rolls"
kn exec client -- pgbench -h postgres -U app -i -s 1 app >/dev/null 2>&1
# -C: a new connection per transaction, as an application's pool would reconnect; a
# transaction-boundary drain closes idle clients with 57P01, which pgbench without -C counts
# as an aborted client.
kn exec client -- pgbench -h app-pooler -p 6432 -U app -C -c 8 -j 2 -T 60 -P 5 app \
  >"$WORK/pgbench-roll.log" 2>&1 &
bench=$!
sleep 10
kn rollout restart deploy/app-pooler
kn rollout status deploy/app-pooler --timeout 3m
bench_rc=0
wait "$bench" || bench_rc=$?
cat "$WORK/pgbench-roll.log" >&2
processed=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$WORK/pgbench-roll.log")
failed=$(sed -n 's/^number of failed transactions: \([0-9]*\).*/\1/p' "$WORK/pgbench-roll.log")
[[ $bench_rc -eq 0 ]] || fail "pgbench exited $bench_rc during the roll"
[[ -n $processed && $processed -gt 0 ]] || fail "pgbench processed no transactions"
[[ ${failed:-0} -eq 0 ]] || fail "$failed failed transactions during the roll"
grep -q 'aborted' "$WORK/pgbench-roll.log" && fail "pgbench clients aborted during the roll"
pass "rolling restart under pgbench: $processed transactions, 0 failed"

# --- 6. chaos ----------------------------------------------------------------
chaos_manifest=""
if k get crd networkchaos.chaos-mesh.org >/dev/null 2>&1; then
  chaos_manifest=chaos/block-postgres-20s.yaml
elif [[ ${CHAOS:-} == netpol ]]; then
  chaos_manifest=chaos/kubernetes/block-postgres-20s-netpol.yaml
fi
if [[ -z $chaos_manifest ]]; then
  echo "SKIP chaos: Chaos Mesh is not installed (CHAOS=netpol runs the NetworkPolicy variant)"
  exit 0
fi
pooler_pod=$(kn get pod -l app.kubernetes.io/instance=app-pooler -o jsonpath='{.items[0].metadata.name}')
before=$(restarts "$pooler_pod")
k delete -f "$chaos_manifest" --ignore-not-found >/dev/null
log "fault: $chaos_manifest"
k apply -f "$chaos_manifest"
if [[ $chaos_manifest == *netpol* ]]; then
  # The fault begins when the Job's pod has created the policy, not at apply.
  for _ in $(seq 120); do
    kn get networkpolicy block-postgres-20s >/dev/null 2>&1 && break
    sleep 0.5
  done
  kn get networkpolicy block-postgres-20s >/dev/null 2>&1 || fail "the chaos Job created no NetworkPolicy"
fi
start=$SECONDS
# One query a second through the pooler, each with its own connection and a 3 s limit: during
# the fault they must fail fast (no hang past the limit), afterwards succeed again.
: >"$WORK/chaos-probe.log"
while ((SECONDS - start < 45)); do
  t0=$SECONDS
  if kn exec client -- env PGCONNECT_TIMEOUT=3 timeout 5 psql -h app-pooler -p 6432 -U app -d app \
    -Atc 'select 1' >/dev/null 2>&1; then
    echo "$((t0 - start)) ok" >>"$WORK/chaos-probe.log"
  else
    echo "$((t0 - start)) error $((SECONDS - t0))s" >>"$WORK/chaos-probe.log"
  fi
  sleep 1
done
cat "$WORK/chaos-probe.log" >&2
[[ $(restarts "$pooler_pod") == "$before" ]] || fail "the pooler restarted during the fault (liveness must not check PostgreSQL)"
# Healed at about 20 s after the start (plus the Job's API round trips for netpol): served
# again by 30 s, and every probe from 32 s on succeeds.
awk '$1 >= 32 && $2 != "ok" { bad = 1 } END { exit bad }' "$WORK/chaos-probe.log" \
  || fail "queries still failing more than 10 s after the heal"
k delete -f "$chaos_manifest" --ignore-not-found >/dev/null
pass "chaos $chaos_manifest: pooler live throughout, serving again within 10 s of the heal"
