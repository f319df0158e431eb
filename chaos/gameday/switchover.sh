#!/usr/bin/env bash
# The switchover game day on one Linux machine, as root: a primary and its streaming standby
# (pg_basebackup -R), clients writing through the pooler, then the primary stopped (fast) and
# the standby promoted 2 s later.
#
#   chaos/gameday/switchover.sh           full run: 15 s baseline, 30 s after the stop
#   chaos/gameday/switchover.sh --short   CI form: 6 s baseline, 10 s after the stop
#   options: --targets droid-pool,droid-pool-hold,pgbouncer  --out DIR
#            --publish | --no-publish (update chaos/README.md; default: full runs)
#            --skip-unsupported (exit 0 with SKIP where network namespaces are not allowed)
#
# Network namespaces as in run.sh: dpgd-db holds both servers on one port at two addresses
# (169.254.213.1 the first primary, 169.254.213.3 its standby), so PgBouncer 1.18's host list
# (one port for all hosts) can name them too; dpgd-app runs the pooler and the clients. Targets:
# droid-pool (server.hosts, read-write, no hold), droid-pool-hold (the same with
# failover.hold_timeout 10s), pgbouncer (host=both, its round robin). Load: writes
# (chaos/gameday/gameday.py load --sql), naive and good clients, below what the pool serves.
# Prints PASS/FAIL per run (chaos/gameday/switchover.py); exits 1 if a droid-pool run fails.
set -euo pipefail
trap 'echo "switchover.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
HERE=$ROOT/chaos/gameday
# shellcheck source=chaos/gameday/lib.sh
source "$HERE/lib.sh"

SHORT=0
SKIP_UNSUPPORTED=0
PUBLISH=auto
OUT=
TARGETS=(droid-pool droid-pool-hold pgbouncer)
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
  WARMUP=3 BASELINE=6 AFTER=10
else
  WARMUP=5 BASELINE=15 AFTER=30
fi
GAP=2            # seconds from the primary's stop to the promotion
POOL_SIZE=8      # 80 writes/s of 100 ms each
RATE=15          # writes/s of each client kind: 30/s offered
CONNS=40         # client connections of each kind
ATTEMPT_S=5      # a naive client's limit per attempt (an application's statement timeout)
HOLD_S=10
NS_DB=dpgd-db
NS_APP=dpgd-app
DB_IPS=(169.254.213.1 169.254.213.3)
APP_IP=169.254.213.2
PG_PORT=5432
POOL_PORT=6432
ADMIN_PORT=9127
# A write that holds its server for 100 ms; pg_stat_statements counts it by the comment.
WRITE_SQL="WITH w AS (INSERT INTO gameday_writes(at) VALUES (clock_timestamp()) RETURNING 1) SELECT pg_sleep(0.1) FROM w /* gameday */"

gameday_prerequisites
SO=("$PY" "$HERE/switchover.py")

WORK=$(mktemp -d /tmp/dpgd-switch.XXXXXX)
chmod 755 "$WORK"
chown postgres: "$WORK"
[[ -n $OUT ]] || OUT=$ROOT/target/gameday/switchover-$(date -u +%Y%m%dT%H%M%SZ)$(if [[ $SHORT -eq 1 ]]; then echo -short; fi)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PIDS=()

in_db() { ip netns exec "$NS_DB" "$@"; }
in_app() { ip netns exec "$NS_APP" "$@"; }
# Node n (0, 1): its data dir, socket dir and log; programs run as postgres from the work dir.
node_pg() {
  local n=$1
  shift
  (cd "$WORK" && in_db runuser -u postgres -- "$PG_BIN/$1" "${@:2}")
}
pg_ctl_n() {
  local n=$1
  shift
  node_pg "$n" pg_ctl -D "$WORK/data$n" "$@"
}
psql_n() {
  local n=$1
  shift
  "$PSQL" -X -q -A -t -v ON_ERROR_STOP=1 -h "$WORK/sock$n" -p "$PG_PORT" -U postgres "$@"
}

cleanup() {
  set +e
  for pid in "${PIDS[@]}"; do
    stop_pid "$pid"
  done
  [[ -f $WORK/pgb/pgbouncer.pid ]] && stop_pid "$(cat "$WORK/pgb/pgbouncer.pid")"
  for n in 0 1; do
    [[ -f $WORK/data$n/postmaster.pid ]] && pg_ctl_n "$n" -w -t 30 stop -m immediate >/dev/null 2>&1
  done
  ip netns del "$NS_APP" 2>/dev/null
  ip netns del "$NS_DB" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

gameday_network "${DB_IPS[@]}"

# Settings of node n, appended to its postgresql.conf (a standby's copy names the primary's).
node_conf() {
  local n=$1
  cat >>"$WORK/data$n/postgresql.conf" <<CONF
# --- droid-pool switchover game day, node $n ---
listen_addresses = '${DB_IPS[$n]}'
port = $PG_PORT
unix_socket_directories = '$WORK/sock$n'
max_connections = 200
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
log_connections = on
log_line_prefix = '%m [%p] '
log_timezone = 'UTC'
fsync = off
synchronous_commit = off
CONF
}

# A fresh pair: node 0 the primary, node 1 its streaming standby.
start_pair() {
  local n
  for n in 0 1; do
    [[ -f $WORK/data$n/postmaster.pid ]] && pg_ctl_n "$n" -w -t 30 stop -m immediate >/dev/null 2>&1
    rm -rf "$WORK/data$n" "$WORK/sock$n"
    (cd "$WORK" && runuser -u postgres -- mkdir -p "$WORK/sock$n")
    : >"$WORK/postgres$n.log"
    chown postgres: "$WORK/postgres$n.log"
  done
  node_pg 0 initdb -D "$WORK/data0" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$WORK/initdb.log" 2>&1 ||
    die "initdb failed: $(cat "$WORK/initdb.log")"
  node_conf 0
  printf 'local all all trust\nhost all all 169.254.213.0/24 trust\nhost replication all 169.254.213.0/24 trust\n' \
    >"$WORK/data0/pg_hba.conf"
  pg_ctl_n 0 -l "$WORK/postgres0.log" -w -t 60 start >/dev/null || die "the primary did not start"
  psql_n 0 -d postgres -c "CREATE ROLE gameday LOGIN" -c "CREATE DATABASE gameday OWNER gameday" >/dev/null
  psql_n 0 -d gameday -c "CREATE EXTENSION pg_stat_statements" \
    -c "CREATE TABLE gameday_writes(at timestamptz)" -c "GRANT ALL ON gameday_writes TO gameday" >/dev/null
  node_pg 1 pg_basebackup -D "$WORK/data1" -h "${DB_IPS[0]}" -p "$PG_PORT" -U postgres -R -X stream -c fast --no-sync ||
    die "pg_basebackup failed"
  node_conf 1
  pg_ctl_n 1 -l "$WORK/postgres1.log" -w -t 60 start >/dev/null || die "the standby did not start"
  for _ in $(seq 1 100); do
    [[ $(psql_n 0 -d postgres -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'") == 1 ]] && return 0
    sleep 0.1
  done
  die "the standby is not streaming"
}

write_configs() {
  local target=$1 hold=0s
  [[ $target == droid-pool-hold ]] && hold=${HOLD_S}s
  cat >"$WORK/droid-pool.yaml" <<YAML
listen: {addr: 127.0.0.1, port: $POOL_PORT}
server:
  hosts: ["${DB_IPS[0]}:$PG_PORT", "${DB_IPS[1]}:$PG_PORT"]
  target_session_attrs: read-write
  connect_timeout: 500ms
pool: {mode: transaction, size: $POOL_SIZE, max_waiting_clients: 200, query_wait_timeout: ${HOLD_S}s}
failover: {hold_timeout: $hold}
admin: {addr: 127.0.0.1, port: $ADMIN_PORT}
log: {events: lifecycle}
YAML
  gameday_pgbouncer_config "${DB_IPS[0]},${DB_IPS[1]}"
}

run_one() {
  local target=$1
  local dir=$OUT/$target
  mkdir -p "$dir"
  start_pair
  write_configs "$target"
  gameday_start_pooler "$target" "$dir"
  local t0 stop_at end
  t0=$(add "$(epoch)" 3)
  stop_at=$(add "$t0" "$WARMUP" "$BASELINE")
  end=$(add "$stop_at" "$AFTER")
  log "$target: baseline from $(add "$t0" "$WARMUP"), primary stopped at $stop_at"
  local pids=()
  ip netns exec "$NS_APP" "${SO[@]}" collect --socks "$WORK/sock0,$WORK/sock1" --port "$PG_PORT" \
    --start "$t0" --end "$end" --out "$dir/collect.json" 2>"$dir/collect.err" &
  pids+=($!)
  local kind seed=1
  for kind in naive good; do
    ip netns exec "$NS_APP" "${GD[@]}" load --kind "$kind" --port "$POOL_PORT" --rate "$RATE" \
      --conns "$CONNS" --start "$t0" --end "$end" --seed "$seed" --sql "$WRITE_SQL" \
      --attempt-timeout "$ATTEMPT_S" --out "$dir/$kind.json" 2>"$dir/$kind.err" &
    pids+=($!)
    seed=$((seed + 1))
  done
  PIDS+=("${pids[@]}")
  sleep_until "$stop_at"
  local stopping stopped promoting promoted
  stopping=$(epoch)
  pg_ctl_n 0 -w -t 60 stop -m fast >/dev/null
  stopped=$(epoch)
  sleep_until "$(add "$stopped" "$GAP")"
  promoting=$(epoch)
  pg_ctl_n 1 -w -t 60 promote >/dev/null
  promoted=$(epoch)
  log "$target: primary stopped, standby promoted $(add "$promoted" "-$stopped") s later"
  local failed=0 pid
  for pid in "${pids[@]}"; do
    wait "$pid" || failed=1
  done
  gameday_stop_pooler "$target" "$dir"
  cp "$WORK/postgres0.log" "$dir/postgres0.log"
  cp "$WORK/postgres1.log" "$dir/postgres1.log"
  [[ $failed -eq 0 ]] || { log "$target: a load or collector process failed:"; tail -n 5 "$dir"/*.err >&2 || true; }
  cat >"$dir/events.json" <<JSON
{"target": "$target", "t0": $t0, "warmup_s": $WARMUP, "baseline_s": $BASELINE, "after_s": $AFTER,
 "stopping": $stopping, "stopped": $stopped, "promoting": $promoting, "promoted": $promoted, "end": $end, "gap_s": $GAP,
 "pool_size": $POOL_SIZE, "rate_per_kind": $RATE, "conns_per_kind": $CONNS, "attempt_timeout_s": $ATTEMPT_S,
 "hold_s": $([[ $target == droid-pool-hold ]] && echo "$HOLD_S" || echo 0), "client_host": "$APP_IP",
 "short": $([[ $SHORT -eq 1 ]] && echo true || echo false), "version": "$VERSION", "pgbouncer_version": "$PGB_VERSION"}
JSON
}

for target in "${TARGETS[@]}"; do
  run_one "$target"
done

log "report: $OUT"
report_args=(report --dir "$OUT")
[[ $PUBLISH -eq 1 ]] && report_args+=(--readme "$ROOT/chaos/README.md")
"${SO[@]}" "${report_args[@]}"
