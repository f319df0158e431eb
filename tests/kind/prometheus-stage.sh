#!/usr/bin/env bash
# Stage 8 of tests/kind/e2e.sh on the node: Debian's Prometheus, on the node's host, discovers
# the pooler pods through the API server as the chart's PodMonitors select them
# (tests/kind/prometheus_config.py), scrapes every one, and evaluates deploy/prometheus/'s
# rules on those scrapes. Debian's Prometheus has no kubernetes_sd_configs: the pods come
# through http_sd_configs from tests/kind/k8s_sd_bridge.py, which lists them from the API
# server with kubernetes_sd's role-pod labels.
#   prometheus-stage.sh KUBECONFIG WORK_DIR
set -euo pipefail
kcfg=$1
work=$2
dir=$work/prometheus
node_dir=${K8S_NODE_DIR:-/tmp/droid-pool-node}
port=29090
api=http://127.0.0.1:$port/api/v1
log() { echo "prometheus-stage: $*" >&2; }
rm -rf "$dir"
mkdir -p "$dir/data"
cp deploy/prometheus/droid-pool-rules.yaml "$dir/"
helm template droid-pool charts/droid-pool --namespace droid-pool-system \
  --set metrics.podMonitor.enabled=true >"$dir/chart.yaml"
sd_port=29091
python3 tests/kind/prometheus_config.py "$dir/chart.yaml" "http://127.0.0.1:$sd_port/pods" droid-pool-rules.yaml \
  >"$dir/prometheus.yml"
promtool check config "$dir/prometheus.yml" >&2
python3 tests/kind/k8s_sd_bridge.py "$kcfg" "$sd_port" >"$dir/sd-bridge.log" 2>&1 &
echo $! >"$node_dir/pids/sd-bridge.pid"
# Started as one of the node's processes: `scripts/k8s-node.sh down` stops it too.
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$port" >"$dir/prometheus.log" 2>&1 &
echo $! >"$node_dir/pids/prometheus.pid"
stop() {
  local n
  for n in prometheus sd-bridge; do
    kill "$(cat "$node_dir/pids/$n.pid")" 2>/dev/null
    rm -f "$node_dir/pids/$n.pid"
  done
}
trap stop EXIT
started=$(date +%s)
# The pooler pods the PodMonitors select, as the API server lists them.
want=$(kubectl --kubeconfig "$kcfg" get pods --all-namespaces --field-selector=status.phase=Running \
  -l 'app.kubernetes.io/name=droid-pool,app.kubernetes.io/component=pooler' -o name | wc -l)
want=$((want + $(kubectl --kubeconfig "$kcfg" get pods --all-namespaces --field-selector=status.phase=Running \
  -l 'droidpool.io/pooler=sidecar' -o name | wc -l)))
((want > 0)) || { log "no pooler pods to discover"; exit 1; }
check() {
  python3 - "$api" "$want" <<'PY'
import json, sys, urllib.parse, urllib.request
api, want = sys.argv[1], int(sys.argv[2])
get = lambda path: json.load(urllib.request.urlopen(api + path, timeout=5))["data"]
targets = [t for t in get("/targets")["activeTargets"] if t["labels"]["job"].startswith("podMonitor/")]
up = [t for t in targets if t["health"] == "up"]
groups = get("/rules")["groups"]
rules = [r for g in groups for r in g["rules"]]
evaluated = [r for r in rules if r.get("health") == "ok" and not r.get("lastEvaluation", "").startswith("0001")]
series = get("/query?query=" + urllib.parse.quote("count(droidpool_drain_state) by (poolconfig)"))["result"]
ok = len(targets) == want and len(up) == want and rules and len(evaluated) == len(rules) and series
print(json.dumps({"ok": bool(ok), "targets": len(targets), "up": len(up), "want": want,
                  "groups": len(groups), "rules": len(rules), "evaluated": len(evaluated),
                  "poolconfigs": {s["metric"].get("poolconfig", "?"): s["value"][1] for s in series},
                  "firing": sorted({r["name"] for r in rules if r.get("state") == "firing"}),
                  "unhealthy": [(r["name"], r.get("lastError")) for r in rules if r.get("health") != "ok"][:5]}))
PY
}
last=""
for _ in $(seq 60); do
  sleep 2
  last=$(check 2>/dev/null || true)
  [[ $last == *'"ok": true'* ]] && break
done
log "after $(($(date +%s) - started)) s: $last"
[[ $last == *'"ok": true'* ]] || { tail -5 "$dir/prometheus.log" >&2; exit 1; }
echo "prometheus: $last" >>"$work/figures.txt"
