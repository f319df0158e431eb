#!/usr/bin/env bash
# The stage tests, end to end in a real cluster: kind (the default, where Docker runs) or a
# real single-node Kubernetes 1.20 on this machine (STAGE_CLUSTER=node: scripts/k8s-node.sh,
# root, Debian packages only; what CI runs). kind needs Docker (or another engine kind
# supports), kind, python3 and the network to pull base images; helm and kubectl come from
# scripts/ensure-k8s-tools.sh when they are not on PATH.
#
#   tests/kind/e2e.sh            create cluster "droid-pool-e2e", run every stage, delete it
#   STAGE_CLUSTER=node           on the node: the image built from the Dockerfile by buildah
#                                over stand-in base images (scripts/k8s-node/images.sh; PGO=0
#                                unless PGO=1), imported into the node's containerd
#   KEEP_CLUSTER=1               keep the cluster (or node) afterwards, and reuse it next time
#   KIND_NODE_IMAGE=kindest/node:v1.30.0   another node image (Kubernetes >= 1.29)
#   CHAOS=netpol                 kind without Chaos Mesh: the NetworkPolicy game day instead
#
# Stages, each one line PASS or FAIL (exit 1 at the first FAIL; a stage that cannot run fails):
#   1. cluster, image, helm install of the chart (operator), and its helm test (the
#      operator's /readyz through its metrics Service)
#   2. deploy PostgreSQL, the sidecar app, the operator-deployed pooler and a client pod
#      (tests/kind/manifests: deploy/examples adjusted for the checks; on the node
#      tests/kind/node and the sidecar app from tests/kind/sidecar-app, the chart's helper)
#   3. the prepared-statement stage checks through the operator-deployed pooler and through
#      a sidecar (tests/kind/prepared_checks.py over kubectl port-forward)
#   4. PoolConfig changes reach running poolers without a restart: poolSize of the deployed
#      pooler, and the sidecars' share of maxServerConnections when the app is scaled
#   5. rolling restart of the pooler Deployment under pgbench load: zero failed transactions
#   6. the chaos manifest: 20 s partition, the pooler stays live, no probe waits past its own
#      deadline (when refusals turn immediate is reported), and it serves
#      again within 10 s of the heal. Chaos Mesh where installed, CHAOS=netpol on kind; on
#      the node chaos/block-postgres-20s.yaml applied as chaos-daemon applies it (iptables in
#      the pods' network namespaces, tests/kind/partition.py)
#   7. drain: kubectl delete of an app pod whose client is inside a transaction: it commits,
#      the client gets 57P01 or a clean close at its boundary, every container of the pod
#      ends by itself (exit 0) before the grace period, and the pod is gone (before the grace
#      period on kind; on the node's 1.20 kubelet within its container GC's minute past it)
#   8. (node) Prometheus (Debian's package) discovers the poolers through the API server as
#      the chart's PodMonitors select them, and deploy/prometheus/'s rules evaluate on them
# Figures go to target/kind-e2e/figures.txt as well.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD

STAGE_CLUSTER=${STAGE_CLUSTER:-kind}
CLUSTER=${CLUSTER:-droid-pool-e2e}
NS=droid-pool-demo
OP_NS=droid-pool-system
IMAGE=droid-pool:e2e
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-kindest/node:v1.29.2}
WORK=$ROOT/target/kind-e2e
mkdir -p "$WORK"
PIDS=()

log() { echo "e2e($STAGE_CLUSTER): $*" >&2; }
pass() { echo "PASS $*"; }
fail() {
  echo "FAIL $*"
  exit 1
}
figure() { echo "$*" | tee -a "$WORK/figures.txt" >&2; }
: >"$WORK/figures.txt"

cleanup() {
  local status=$? pid
  for pid in "${PIDS[@]}"; do
    # A backgrounded function is a subshell: its kubectl is a child of it.
    pkill -P "$pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
  done
  sleep 1
  if [[ $STAGE_CLUSTER == node ]]; then
    if [[ -f $WORK/partition.json ]]; then
      python3 tests/kind/partition.py heal "$WORK/partition.json" || true
    fi
    if [[ ${KEEP_CLUSTER:-0} != 1 ]]; then
      log "taking the node down (KEEP_CLUSTER=1 keeps it)"
      if ! bash scripts/k8s-node.sh down; then
        echo "FAIL node down: the machine is not as before (above)"
        exit 1
      fi
    fi
  elif [[ ${KEEP_CLUSTER:-0} != 1 ]] && kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "deleting cluster $CLUSTER (KEEP_CLUSTER=1 keeps it)"
    kind delete cluster --name "$CLUSTER" >/dev/null 2>&1 || true
  fi
  exit "$status"
}
trap cleanup EXIT

# --- tools --------------------------------------------------------------------
case $STAGE_CLUSTER in
  kind)
    for tool in docker kind python3; do
      command -v "$tool" >/dev/null 2>&1 \
        || fail "cluster: needs $tool (a container engine and kind), or STAGE_CLUSTER=node"
    done
    ;;
  node)
    [[ $(id -u) == 0 ]] || fail "cluster: STAGE_CLUSTER=node needs root"
    ;;
  *) fail "cluster: STAGE_CLUSTER is '$STAGE_CLUSTER', want kind or node" ;;
esac
if ! command -v helm >/dev/null 2>&1 || ! command -v kubectl >/dev/null 2>&1 || [[ $STAGE_CLUSTER == node ]]; then
  bash scripts/ensure-k8s-tools.sh
  PATH=$ROOT/target/k8s-bin:$PATH
fi
# kustomize of a current kubectl (the node's kubectl 1.20 has kustomize v2, without patches).
KUSTOMIZE=(kubectl kustomize)
if [[ $STAGE_CLUSTER == node ]]; then
  KUSTOMIZE=("$ROOT/target/k8s-bin/kubectl" kustomize)
  # The node's own kubectl (1.20, the server's version) for everything else.
  NODE_BIN=$(bash scripts/k8s-node/build.sh | tail -n1)
  PATH=$NODE_BIN:$PATH
  KCFG=$(bash scripts/k8s-node.sh kubeconfig)
  k() { kubectl --kubeconfig "$KCFG" "$@"; }
  h() { helm --kubeconfig "$KCFG" "$@"; }
else
  k() { kubectl --context "kind-$CLUSTER" "$@"; }
  h() { helm --kube-context "kind-$CLUSTER" "$@"; }
fi
kn() { k -n "$NS" "$@"; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "${2:-$(now)}"; }

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

# Waits until metric NAME on ADMIN_PORT equals WANT. A ConfigMap change reaches a mounted
# volume at the kubelet's next sync of the pod (its sync period, 1 min by default, plus jitter
# and the ConfigMap cache's delay): at most 150 s.
wait_metric() {
  local admin_port=$1 name=$2 want=$3 got=""
  for _ in $(seq 150); do
    got=$(metric "$admin_port" "$name" || true)
    [[ $got == "$want" ]] && return 0
    sleep 1
  done
  fail "$name is '$got', want '$want'"
}

# The first pod with label selector $1 that runs and is not being deleted.
running_pod() {
  kn get pod -l "$1" -o json | python3 -c '
import json, sys
pods = [p for p in json.load(sys.stdin)["items"]
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]
print(pods[0]["metadata"]["name"] if pods else "")'
}

restarts() { kn get pod "$1" -o jsonpath='{.status.initContainerStatuses[*].restartCount} {.status.containerStatuses[*].restartCount}'; }

# --- 1. cluster, image, chart -------------------------------------------------
if [[ $STAGE_CLUSTER == node ]]; then
  log "building $IMAGE from the Dockerfile (buildah, stand-in bases; PGO=${PGO:-0}, LTO=${LTO:-off})"
  image_start=$(now)
  bash scripts/k8s-node/images.sh --build-arg "PGO=${PGO:-0}" --build-arg "LTO=${LTO:-off}" \
    --build-arg "CODEGEN_UNITS=${CODEGEN_UNITS:-16}" >/dev/null \
    || fail "cluster, image: the Dockerfile's build (log in ~/.cache/droid-pool/k8s-node/)"
  figure "image: built from the Dockerfile in $(since "$image_start") s"
  node_start=$(now)
  bash scripts/k8s-node.sh up || fail "cluster: the node did not come up"
  bash scripts/k8s-node.sh load || fail "cluster: importing the images into the node"
  figure "node: Ready in $(since "$node_start") s"
else
  if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    log "creating cluster $CLUSTER ($KIND_NODE_IMAGE)"
    kind create cluster --name "$CLUSTER" --image "$KIND_NODE_IMAGE" \
      --config tests/kind/kind-config.yaml --wait 120s
  fi
  log "building $IMAGE"
  docker build -t "$IMAGE" .
  kind load docker-image "$IMAGE" --name "$CLUSTER"
fi
h upgrade --install droid-pool charts/droid-pool \
  --namespace "$OP_NS" --create-namespace \
  --set image.repository=droid-pool --set image.tag=e2e --set image.pullPolicy=Never \
  --wait --timeout 3m || fail "cluster, image, helm install: helm upgrade --install droid-pool"
k -n "$OP_NS" rollout status deploy/droid-pool-operator --timeout 2m \
  || fail "cluster, image, helm install: the operator is not ready"
h test droid-pool --namespace "$OP_NS" --timeout 2m >/dev/null \
  || fail "helm test droid-pool (the operator's /readyz through its metrics Service)"
pass "cluster, image, helm install and helm test (operator ready)"

# --- 2. PostgreSQL, the poolers, the client -----------------------------------
if [[ $STAGE_CLUSTER == node ]]; then
  "${KUSTOMIZE[@]}" tests/kind/node | k apply -f - >/dev/null
  # The sidecar app through the chart's helper (classic container on 1.20): a copy whose
  # dependency points at this checkout's chart.
  rm -rf "$WORK/sidecar-app"
  cp -r tests/kind/sidecar-app "$WORK/sidecar-app"
  sed -i "s|file://../../../charts/droid-pool|file://$ROOT/charts/droid-pool|" "$WORK/sidecar-app/Chart.yaml"
  helm dependency build "$WORK/sidecar-app" >/dev/null || fail "PostgreSQL, poolers: helm dependency build of the sidecar app"
  h upgrade --install demo-app "$WORK/sidecar-app" --namespace "$NS" >/dev/null \
    || fail "PostgreSQL, poolers: helm install of the sidecar app"
else
  "${KUSTOMIZE[@]}" tests/kind/manifests | k apply -f -
fi
kn rollout status statefulset/postgres --timeout 3m || fail "PostgreSQL is not ready"
kn wait pod/client --for=condition=Ready --timeout 2m || fail "the client pod is not ready"
for pc in app-pooler demo-app; do
  kn wait "poolconfig/$pc" --for=condition=Ready --timeout 3m \
    || fail "PoolConfig $pc not Ready: $(kn get poolconfig "$pc" -o jsonpath='{.status.conditions}')"
done
kn rollout status deploy/app-pooler --timeout 3m || fail "the operator-deployed pooler is not ready"
kn rollout status deploy/demo-app --timeout 3m || fail "the sidecar app is not ready"
if [[ $STAGE_CLUSTER == node ]]; then
  # The classic sidecar: first of the pod's containers, no init container.
  first=$(kn get deploy demo-app -o jsonpath='{.spec.template.spec.containers[0].name} {.spec.template.spec.initContainers}')
  [[ $first == "droid-pool " ]] || fail "the sidecar app's pod is not the classic form: '$first'"
fi
pass "PostgreSQL, operator-deployed pooler, sidecar app and client running"

# --- 3. prepared-statement stage checks ---------------------------------------
pooler_pod=$(running_pod app.kubernetes.io/instance=app-pooler)
[[ -n $pooler_pod ]] || fail "prepared-statement checks: no running pooler pod"
port=$(forward "pod/$pooler_pod" 6432)
python3 tests/kind/prepared_checks.py --port "$port" --user app --database app \
  || fail "prepared-statement checks through the operator-deployed pooler"
pass "prepared-statement checks through the operator-deployed pooler"
app_pod=$(running_pod app.kubernetes.io/name=demo-app)
[[ -n $app_pod ]] || fail "prepared-statement checks: no running app pod"
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
# -R 300: each transaction's connection leaves a client port in TIME_WAIT for 60 s, and the
# client pod has about 28,000 (32768-60999); unpaced, a fast node used them all before the
# end (CI: "Cannot assign requested address" at 55 s, 30,983 transactions).
kn exec client -- pgbench -h app-pooler -p 6432 -U app -C -R 300 -c 8 -j 2 -T 60 -P 5 app \
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
figure "rolling restart: $processed transactions processed, ${failed:-0} failed"
pass "rolling restart under pgbench: $processed transactions, 0 failed"

# --- 6. chaos ----------------------------------------------------------------
chaos_manifest=""
if [[ $STAGE_CLUSTER == node ]]; then
  # Chaos Mesh cannot be installed here: its manifest applied as chaos-daemon applies it.
  chaos_manifest=chaos/block-postgres-20s.yaml
elif k get crd networkchaos.chaos-mesh.org >/dev/null 2>&1; then
  chaos_manifest=chaos/block-postgres-20s.yaml
elif [[ ${CHAOS:-} == netpol ]]; then
  chaos_manifest=chaos/kubernetes/block-postgres-20s-netpol.yaml
fi
[[ -n $chaos_manifest ]] \
  || fail "chaos: Chaos Mesh is not installed (CHAOS=netpol runs the NetworkPolicy variant)"
pooler_pod=$(running_pod app.kubernetes.io/instance=app-pooler)
before=$(restarts "$pooler_pod")
log "fault: $chaos_manifest"
if [[ $STAGE_CLUSTER == node ]]; then
  export KUBECTL="kubectl --kubeconfig $KCFG"
  export CTR="ctr -a ${K8S_NODE_DIR:-/tmp/droid-pool-node}/containerd/containerd.sock -n k8s.io"
  rm -f "$WORK/healed-at"
  fault_seconds=$(python3 tests/kind/partition.py apply "$chaos_manifest" "$WORK/partition.json") \
    || fail "chaos: the partition could not be applied"
  fault_start=$(now)
  (
    sleep "$fault_seconds"
    python3 tests/kind/partition.py heal "$WORK/partition.json"
    now >"$WORK/healed-at"
  ) &
  PIDS+=("$!")
else
  k delete -f "$chaos_manifest" --ignore-not-found >/dev/null
  k apply -f "$chaos_manifest"
  if [[ $chaos_manifest == *netpol* ]]; then
    # The fault begins when the Job's pod has created the policy, not at apply.
    for _ in $(seq 120); do
      kn get networkpolicy block-postgres-20s >/dev/null 2>&1 && break
      sleep 0.5
    done
    kn get networkpolicy block-postgres-20s >/dev/null 2>&1 || fail "the chaos Job created no NetworkPolicy"
  fi
  fault_start=$(now)
fi
# Six probe loops in the client pod, each a new connection through the pooler's Service and
# `select 1` with a 5 s limit (its own deadline), 0.2 s apart, for 45 s. Failing fast, as this
# stage has always judged it: no probe hangs past its own deadline (a query sent to a
# black-holed server waits for it; a login for server.connect_timeout). Reported too: when
# the pooler began refusing at once (the breaker open: 57P03) rather than at the deadline.
# After the heal: served within 10 s, and nothing failing from 10 s on.
# shellcheck disable=SC2016 # expanded in the pod's shell
probe_script='end=$(( $(date +%s) + 45 ))
for w in 1 2 3 4 5 6; do
  ( while [ "$(date +%s)" -lt "$end" ]; do
      s=$(date +%s.%N)
      if err=$(PGCONNECT_TIMEOUT=3 timeout 5 psql -h app-pooler -p 6432 -U app -d app -Atc "select 1" 2>&1 >/dev/null); then
        r=ok
      else
        r="error $(echo "$err" | head -n 1)"
      fi
      echo "$s $(date +%s.%N) $r"
      sleep 0.2
    done ) &
done
wait'
kn exec client -- sh -c "$probe_script" >"$WORK/chaos-probe.raw" 2>&1 || true
if [[ $STAGE_CLUSTER == node ]]; then
  [[ -f $WORK/healed-at ]] || fail "chaos: the partition was not healed"
  heal=$(since "$fault_start" "$(cat "$WORK/healed-at")")
else
  # Chaos Mesh heals at its duration (20 s); the netpol Job a little later.
  heal=20
fi
[[ $(restarts "$pooler_pod") == "$before" ]] || fail "the pooler restarted during the fault (liveness must not check PostgreSQL)"
verdict=$(python3 - "$WORK/chaos-probe.raw" "$fault_start" "$heal" <<'PY'
import sys
raw, t0, heal = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
probes = []
for line in open(raw):
    f = line.split(" ", 3)
    if len(f) < 3 or not f[0][0].isdigit():
        continue
    s, e = float(f[0]) - t0, float(f[1]) - t0
    probes.append((s, e, f[2].strip(), (f[3].strip() if len(f) > 3 else "")))
fault = [p for p in probes if 0 <= p[0] < heal]
failed = [p for p in fault if p[2] != "ok"]
fast = [p for p in failed if p[1] - p[0] < 1.0]
first_fast = min((p[0] for p in fast), default=None)
after_fast = [p for p in failed if first_fast is not None and p[0] >= first_fast]
slow_after = [p for p in after_fast if p[1] - p[0] >= 1.0]
late = [p for p in fault if p[1] - p[0] > 5.5]
served = min((p[1] - heal for p in probes if p[2] == "ok" and p[1] >= heal), default=None)
still = [p for p in probes if p[0] >= heal + 10 and p[2] != "ok"]
codes = sorted({p[3][:60] for p in fast})
print(f"probes={len(probes)} during={len(fault)} failed={len(failed)} fast={len(fast)} "
      f"first_fast={'none' if first_fast is None else f'{first_fast:.1f}'} slow_after_first_fast={len(slow_after)} "
      f"past_deadline={len(late)} served_after_heal={'none' if served is None else f'{served:.1f}'} "
      f"failing_after_heal_plus_10={len(still)} errors={codes}")
PY
)
figure "game day: partition ${heal}s; $verdict"
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $verdict"; }
[[ $(kv failed) -gt 0 ]] || fail "chaos: no query failed during the partition (was it applied?)"
[[ $(kv past_deadline) == 0 ]] || fail "chaos: $(kv past_deadline) probes ran past their own deadline"
if [[ $(kv served_after_heal) == none ]] || ! awk -v f="$(kv served_after_heal)" 'BEGIN { exit !(f <= 10) }'; then
  fail "chaos: not serving within 10 s of the heal (first success: $(kv served_after_heal) s after it)"
fi
[[ $(kv failing_after_heal_plus_10) == 0 ]] || fail "chaos: queries still failing more than 10 s after the heal"
[[ $STAGE_CLUSTER == node ]] || k delete -f "$chaos_manifest" --ignore-not-found >/dev/null
pass "chaos $chaos_manifest: pooler live throughout, no probe past its deadline (immediate refusals from: $(kv first_fast)), serving again $(kv served_after_heal) s after the heal"

# --- 7. drain of an app pod with a client mid-transaction ---------------------
# The app's client opens a transaction through its sidecar, and the pod is deleted while it
# runs: the transaction commits, the client then sees 57P01 or a clean close at its
# boundary, and every container ends by itself before the grace period. The sidecar's log (SIGTERM's drain
# line to its last line, timestamped by the kubelet) gives the SIGTERM-to-exit time.
app_pod=$(running_pod app.kubernetes.io/name=demo-app)
[[ -n $app_pod ]] || fail "drain: no running app pod"
grace=$(kn get pod "$app_pod" -o jsonpath='{.spec.terminationGracePeriodSeconds}')
kn exec client -- psql -h postgres -U app -d app -v ON_ERROR_STOP=1 -qc \
  'create table if not exists drain_probe (token text primary key, at timestamptz default now())' \
  || fail "drain: cannot create the probe table"
token=drain-$RANDOM-$RANDOM
kn logs -f --timestamps "$app_pod" -c droid-pool >"$WORK/drain-sidecar.log" 2>&1 &
PIDS+=("$!")
kn logs -f --timestamps "$app_pod" -c app >"$WORK/drain-app.log" 2>&1 &
PIDS+=("$!")
kn exec "$app_pod" -c app -- psql -v ON_ERROR_STOP=1 \
  -c "begin; insert into drain_probe (token) values ('$token'); select pg_sleep(6); commit;" \
  -c "select 'after the boundary'" >"$WORK/drain-client.log" 2>&1 &
client=$!
sleep 2
delete_start=$(now)
kn delete pod "$app_pod" --wait=false >/dev/null
client_rc=0
wait "$client" || client_rc=$?
# Every container must end by itself (exit 0, not killed) before the grace period: that is
# the drain. The pod object goes once the kubelet has reclaimed it: on kind's kubelet within
# seconds; the node's 1.20 kubelet deletes it on a status sync (every 10 s), and when its
# removal of the dead containers loses a race (kubelet.go, cleanUpContainersInPod) only
# after its container GC, which runs once a minute. So the pod must be gone before the
# grace period on kind, and within a GC period and a sync past it on the node.
removal_limit=$grace
[[ $STAGE_CLUSTER == node ]] && removal_limit=$((grace + 75))
gone=""
rm -f "$WORK/drain-pod.json" "$WORK/drain-ended.json"
# Each container's terminated state is kept as first seen: the node's 1.20 kubelet may later
# report a removed container as waiting (ContainerCreating), losing its end.
keep_ended() {
  python3 - "$WORK/drain-pod.json" "$WORK/drain-ended.json" <<'PY'
import sys, json
try:
    pod = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    sys.exit()
try:
    ended = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    ended = {}
for c in pod.get("status", {}).get("containerStatuses", []):
    term = c.get("state", {}).get("terminated")
    if term and term.get("finishedAt") and c["name"] not in ended:
        ended[c["name"]] = term
json.dump(ended, open(sys.argv[2], "w"))
PY
}
while awk -v s="$(since "$delete_start")" -v l="$removal_limit" 'BEGIN { exit !(s < l + 5) }'; do
  if ! kn get pod "$app_pod" -o json >"$WORK/drain-pod.json.new" 2>/dev/null; then
    gone=$(since "$delete_start")
    break
  fi
  mv "$WORK/drain-pod.json.new" "$WORK/drain-pod.json"
  keep_ended
  sleep 0.25
done
# From the statuses seen: each container's end in seconds from the delete (the API server's
# clock: the deletion timestamp less the grace period), exit code and reason. The first line
# says whether every container ended by itself before the grace period. A container whose
# end the kubelet never reported (removed before a status sync) counts as ended before the
# grace period only if its own last line says it stopped (the pooler's shutdown line, the
# app's "app: stopped", which a kill at the grace period's end never prints) at a time, as the
# kubelet stamped it, before the grace period; its exit code is then unknown and said so.
ended=$(python3 - "$WORK/drain-pod.json" "$WORK/drain-ended.json" "$WORK/drain-sidecar.log" "$WORK/drain-app.log" <<'PY'
import sys, json, datetime
def t(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
try:
    pod = json.load(open(sys.argv[1]))
except (OSError, ValueError):
    print("late\nno status of the pod seen")
    sys.exit()
try:
    seen = json.load(open(sys.argv[2]))
except (OSError, ValueError):
    seen = {}
def stop_line(path, marker):
    # The kubelet's timestamp of the container's line holding `marker`, if any.
    try:
        lines = open(path).read().splitlines()
    except OSError:
        return None
    for line in lines:
        stamp, _, text = line.partition(" ")
        if marker in text:
            try:
                return t(stamp[:26].rstrip("Z") + "+00:00" if "." in stamp else stamp)
            except ValueError:
                return None
    return None
stops = {"droid-pool": stop_line(sys.argv[3], "[POOL] shutdown:"),
         "app": stop_line(sys.argv[4], "app: stopped")}
meta = pod["metadata"]
if not meta.get("deletionTimestamp"):
    print("late\nthe pod was never marked for deletion")
    sys.exit()
grace = meta.get("deletionGracePeriodSeconds") or 0
deleted = t(meta["deletionTimestamp"]) - datetime.timedelta(seconds=grace)
ok, out = True, []
statuses = pod.get("status", {}).get("containerStatuses", [])
for c in statuses:
    term = c.get("state", {}).get("terminated") or seen.get(c["name"])
    if not term or not term.get("finishedAt"):
        stop = stops.get(c["name"])
        at = (stop - deleted).total_seconds() if stop else None
        if at is not None and at < grace:
            out.append(f"{c['name']} stopped +{at:.0f}s by its own last line "
                       "(its end not reported by the kubelet; exit code unknown)")
            continue
        ok = False
        out.append(f"{c['name']} not seen ending")
        continue
    at = (t(term["finishedAt"]) - deleted).total_seconds()
    ok = ok and term.get("exitCode") == 0 and at < grace
    out.append(f"{c['name']} ended +{at:.0f}s (exit {term.get('exitCode')}, {term.get('reason')})")
print("ok" if ok and statuses else "late")
print("; ".join(out) or "no containers in the status")
PY
)
ended_ok=$(head -n1 <<<"$ended")
ended=$(tail -n +2 <<<"$ended")
figure "drain: the pod's containers: $ended"
cat "$WORK/drain-client.log" >&2
committed=$(kn exec client -- psql -h postgres -U app -d app -Atc "select count(*) from drain_probe where token = '$token'")
[[ $committed == 1 ]] || fail "drain: the transaction did not commit (rows: '$committed')"
if ((client_rc != 0)); then
  grep -q '57P01\|terminating connection' "$WORK/drain-client.log" \
    || fail "drain: the client failed (exit $client_rc) without 57P01 at its boundary"
  boundary="57P01 at the boundary"
else
  grep -q 'after the boundary' "$WORK/drain-client.log" || fail "drain: the client's statement after the commit did not run"
  boundary="served to its end, then a clean close"
fi
[[ $ended_ok == ok ]] || fail "drain: not every container of $app_pod ended by itself before its grace period (${grace}s): $ended"
[[ -n $gone ]] || fail "drain: pod $app_pod still there ${removal_limit}s after the delete (containers: $ended)"
awk -v g="$gone" -v limit="$removal_limit" 'BEGIN { exit !(g < limit) }' || fail "drain: pod gone after ${gone}s, past ${removal_limit}s (grace ${grace}s; containers: $ended)"
sigterm_to_exit=$(python3 - "$WORK/drain-sidecar.log" <<'PY'
import sys, datetime
lines = [l.split(" ", 1) for l in open(sys.argv[1]) if l[:4].isdigit()]
def t(s):
    return datetime.datetime.fromisoformat(s.rstrip("Z")[:26])
start = next((t(ts) for ts, msg in lines if "drain: readiness down" in msg), None)
print(f"{(t(lines[-1][0]) - start).total_seconds():.1f}" if start and lines else "unknown")
PY
)
figure "drain: delete to pod gone ${gone}s (grace ${grace}s); the sidecar's SIGTERM to its last line ${sigterm_to_exit}s; client: $boundary"
pass "drain of $app_pod mid-transaction: committed, $boundary, every container ended by itself before the grace period ($ended), pod gone in ${gone}s (grace ${grace}s)"

# --- 8. Prometheus discovers the poolers and evaluates the rules ---------------
if [[ $STAGE_CLUSTER == node ]]; then
  bash tests/kind/prometheus-stage.sh "$KCFG" "$WORK" || fail "prometheus: discovery through the API server, scrapes and rules (above)"
  pass "prometheus: the chart's PodMonitor selection through the API server, every pooler up, deploy/prometheus rules evaluated"
fi
