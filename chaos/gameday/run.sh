#!/usr/bin/env bash
# The game day of issue 5 on one Linux machine, as root, without Kubernetes.
#
#   chaos/gameday/run.sh            full run: 15 s baseline, 20 s fault, 60 s after the heal
#   chaos/gameday/run.sh --short    CI form: 8 s baseline, 10 s fault, 15 s after the heal
#   options: --targets droid-pool,pgbouncer  --scenarios blackhole,refused,stop
#            --out DIR  --publish | --no-publish (update chaos/README.md; default: full runs)
#            --skip-unsupported (exit 0 with SKIP where namespaces or nft are not allowed: CI)
#
# Two network namespaces joined by a veth pair, addresses only inside them (169.254.213.0/24,
# link-local, never routed): dpgd-db runs PostgreSQL (pg_stat_statements, log_connections),
# dpgd-app runs the pooler (droid-pool, then PgBouncer), the load generator and the collector
# over loopback. Faults: nft in dpgd-db (drop = black hole, reject with tcp reset = refused),
# and a stop/start of PostgreSQL. Load: open-loop, about 2x what the pool can serve, half
# naive clients, half good clients (chaos/gameday/gameday.py). Prints PASS/FAIL per run against
# the issue's criteria; exits 1 if a droid-pool run fails (PgBouncer's results are shown only).
set -euo pipefail
trap 'echo "run.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
HERE=$ROOT/chaos/gameday

# shellcheck source=chaos/gameday/lib.sh
source "$HERE/lib.sh"

SHORT=0
SKIP_UNSUPPORTED=0
PUBLISH=auto
OUT=
TARGETS=(droid-pool pgbouncer)
SCENARIOS=(blackhole refused stop)
while [[ $# -gt 0 ]]; do
  case $1 in
    --short) SHORT=1 ;;
    --publish) PUBLISH=1 ;;
    --no-publish) PUBLISH=0 ;;
    --skip-unsupported) SKIP_UNSUPPORTED=1 ;;
    --out)
      OUT=$2
      shift
      ;;
    --targets)
      IFS=, read -r -a TARGETS <<<"$2"
      shift
      ;;
    --scenarios)
      IFS=, read -r -a SCENARIOS <<<"$2"
      shift
      ;;
    -h | --help)
      awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"
      exit 0
      ;;
    *) die "unknown argument: $1" ;;
  esac
  shift
done
if [[ $PUBLISH == auto ]]; then
  PUBLISH=$((1 - SHORT))
fi

if [[ $SHORT -eq 1 ]]; then
  WARMUP=3 BASELINE=8 FAULT=10 AFTER=15
else
  WARMUP=5 BASELINE=15 FAULT=20 AFTER=60
fi
POOL_SIZE=4     # server connections (droid-pool pool.size, PgBouncer default_pool_size)
MAX_WAITING=40  # droid-pool pool.max_waiting_clients
QUERY_WAIT_S=1  # droid-pool pool.query_wait_timeout: the longest a client waits in its queue
RATE=40         # actions/s of each client kind: 80/s offered, the pool serves about 40/s
CONNS=60        # client connections of each kind
NS_DB=dpgd-db
NS_APP=dpgd-app
DB_IP=169.254.213.1
APP_IP=169.254.213.2
PG_PORT=5432
POOL_PORT=6432
ADMIN_PORT=9127

gameday_prerequisites

# --- work dir, cleanup ---------------------------------------------------------------------
WORK=$(mktemp -d /tmp/dpgd.XXXXXX)
chmod 755 "$WORK"
[[ -n $OUT ]] || OUT=$ROOT/target/gameday/$(date -u +%Y%m%dT%H%M%SZ)$(if [[ $SHORT -eq 1 ]]; then echo -short; fi)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PGDATA=$WORK/pgdata
PGSOCK=$WORK/sock
PGLOG=$WORK/postgres.log
PIDS=()

# The server programs run as postgres, from the work dir (postgres cannot read the cwd).
as_pg() { (cd "$WORK" && runuser -u postgres -- "$@"); }
in_db() { ip netns exec "$NS_DB" "$@"; }
in_app() { ip netns exec "$NS_APP" "$@"; }
pg_ctl() { (cd "$WORK" && in_db runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PGDATA" "$@"); }
psql_pg() { "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -h "$PGSOCK" -p "$PG_PORT" -U postgres "$@"; }
pg_running() { [[ -S $PGSOCK/.s.PGSQL.$PG_PORT ]] && psql_pg -d postgres -c 'SELECT 1' >/dev/null 2>&1; }

cleanup() {
  set +e
  for pid in "${PIDS[@]}"; do
    stop_pid "$pid"
  done
  if [[ -f $WORK/pgb/pgbouncer.pid ]]; then
    stop_pid "$(cat "$WORK/pgb/pgbouncer.pid")"
  fi
  [[ -f $PGDATA/postmaster.pid ]] && pg_ctl -w -t 30 stop -m immediate >/dev/null 2>&1
  ip netns del "$NS_APP" 2>/dev/null
  ip netns del "$NS_DB" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- network -------------------------------------------------------------------------------
gameday_network "$DB_IP"
log "namespaces $NS_DB ($DB_IP) and $NS_APP ($APP_IP) joined by a veth pair"

# --- PostgreSQL ------------------------------------------------------------------------------
chown postgres: "$WORK"
as_pg mkdir -p "$PGSOCK"
as_pg "$PG_BIN/initdb" -D "$PGDATA" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$WORK/initdb.log" 2>&1 ||
  die "initdb failed: $(cat "$WORK/initdb.log")"
cat >>"$PGDATA/postgresql.conf" <<CONF
# --- droid-pool game day ---
listen_addresses = '$DB_IP'
port = $PG_PORT
unix_socket_directories = '$PGSOCK'
max_connections = 200
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
log_connections = on
log_line_prefix = '%m [%p] '
log_timezone = 'UTC'
fsync = off
synchronous_commit = off
CONF
cat >"$PGDATA/pg_hba.conf" <<HBA
local all all trust
host all all $DB_IP/24 trust
HBA
as_pg touch "$PGLOG"
pg_ctl -l "$PGLOG" -w -t 60 start >/dev/null || die "PostgreSQL did not start: $(tail -n 20 "$PGLOG")"
psql_pg -d postgres -c "CREATE ROLE gameday LOGIN" -c "CREATE DATABASE gameday OWNER gameday" >/dev/null
psql_pg -d gameday -c "CREATE EXTENSION pg_stat_statements" >/dev/null
log "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') in $NS_DB at $DB_IP:$PG_PORT"

# --- pooler configs ------------------------------------------------------------------------
cat >"$WORK/droid-pool.yaml" <<YAML
listen: {addr: 127.0.0.1, port: $POOL_PORT}
server: {host: $DB_IP, port: $PG_PORT, connect_timeout: 500ms}
pool: {mode: transaction, size: $POOL_SIZE, max_waiting_clients: $MAX_WAITING, query_wait_timeout: ${QUERY_WAIT_S}s}
admin: {addr: 127.0.0.1, port: $ADMIN_PORT}
log: {events: false}
YAML
gameday_pgbouncer_config "$DB_IP"

FAULT_NFT=$WORK/fault.nft
inject() {
  case $1 in
    blackhole)
      cat >"$FAULT_NFT" <<NFT
table inet dpgd_fault {
  chain input { type filter hook input priority 0; policy accept; tcp dport $PG_PORT drop; }
  chain output { type filter hook output priority 0; policy accept; tcp sport $PG_PORT drop; }
}
NFT
      in_db nft -f "$FAULT_NFT"
      ;;
    refused)
      cat >"$FAULT_NFT" <<NFT
table inet dpgd_fault {
  chain input { type filter hook input priority 0; policy accept; tcp dport $PG_PORT reject with tcp reset; }
}
NFT
      in_db nft -f "$FAULT_NFT"
      ;;
    stop) pg_ctl -w -t 60 stop -m fast >/dev/null ;;
  esac
}
heal() {
  case $1 in
    blackhole | refused) in_db nft delete table inet dpgd_fault ;;
    stop) pg_ctl -l "$PGLOG" -w -t 60 start >/dev/null ;;
  esac
}


run_one() {
  local target=$1 scenario=$2
  local dir=$OUT/$target-$scenario
  mkdir -p "$dir"
  pg_running || pg_ctl -l "$PGLOG" -w -t 60 start >/dev/null
  psql_pg -d gameday -c 'SELECT pg_stat_statements_reset()' >/dev/null
  local offset
  offset=$(stat -c %s "$PGLOG")
  gameday_start_pooler "$target" "$dir"
  local t0 fault_at heal_at end
  t0=$(add "$(epoch)" 4)
  fault_at=$(add "$t0" "$WARMUP" "$BASELINE")
  heal_at=$(add "$fault_at" "$FAULT")
  end=$(add "$heal_at" "$AFTER" 2)
  log "$target / $scenario: baseline from $(add "$t0" "$WARMUP"), fault at $fault_at for ${FAULT}s"
  local pids=()
  ip netns exec "$NS_APP" "${GD[@]}" collect --target "$target" --pg-sock "$PGSOCK" --pg-port "$PG_PORT" \
    --pooler-port "$POOL_PORT" --admin-port "$ADMIN_PORT" --start "$t0" --end "$end" \
    --out "$dir/collect.json" 2>"$dir/collect.err" &
  pids+=($!)
  local kind seed=1
  for kind in naive good; do
    ip netns exec "$NS_APP" "${GD[@]}" load --kind "$kind" --port "$POOL_PORT" --rate "$RATE" --conns "$CONNS" \
      --start "$t0" --end "$end" --seed "$seed" --out "$dir/$kind.json" 2>"$dir/$kind.err" &
    pids+=($!)
    seed=$((seed + 1))
  done
  PIDS+=("${pids[@]}")
  sleep_until "$fault_at"
  local fault_start heal_done
  fault_start=$(epoch)
  inject "$scenario"
  log "$target / $scenario: fault injected"
  sleep_until "$heal_at"
  heal "$scenario"
  heal_done=$(epoch)
  log "$target / $scenario: healed; observing for ${AFTER}s"
  local failed=0
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  gameday_stop_pooler "$target" "$dir"
  tail -c +$((offset + 1)) "$PGLOG" >"$dir/postgres.log"
  if [[ $failed -ne 0 ]]; then
    log "$target / $scenario: a load or collector process failed:"
    tail -n 5 "$dir"/*.err >&2 || true
  fi
  local max_waiting=null
  [[ $target == droid-pool ]] && max_waiting=$MAX_WAITING
  cat >"$dir/events.json" <<JSON
{"target": "$target", "scenario": "$scenario", "t0": $t0, "warmup_s": $WARMUP,
 "baseline_s": $BASELINE, "fault_s": $FAULT, "after_s": $AFTER,
 "fault_start": $fault_start, "heal": $heal_done, "end": $(add "$heal_done" "$AFTER"),
 "pool_size": $POOL_SIZE, "max_waiting": $max_waiting, "query_wait_timeout_s": $QUERY_WAIT_S, "rate_per_kind": $RATE,
 "conns_per_kind": $CONNS, "client_host": "$APP_IP", "short": $([[ $SHORT -eq 1 ]] && echo true || echo false),
 "version": "$VERSION", "pgbouncer_version": "$PGB_VERSION"}
JSON
  sleep 2
}

for scenario in "${SCENARIOS[@]}"; do
  for target in "${TARGETS[@]}"; do
    run_one "$target" "$scenario"
  done
done

log "report: $OUT"
report_args=(report --dir "$OUT")
[[ $PUBLISH -eq 1 ]] && report_args+=(--readme "$ROOT/chaos/README.md")
"${GD[@]}" "${report_args[@]}"
