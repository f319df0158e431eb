#!/usr/bin/env bash
# Real drivers through droid-pool with prepared-statement tracking (issue 3):
# psycopg 3 (prepare_threshold=0), asyncpg and node-postgres named queries, each with 20
# concurrent clients through a pool of 2 in transaction mode with --track-prepared, once with
# server_round_robin off and once on. Every answer is checked by the scripts in tests/drivers/.
#
#   scripts/driver-tests.sh                 build, install the drivers, run everything
#   scripts/driver-tests.sh psycopg node    only the named drivers (psycopg, asyncpg, node)
#   CLIENTS=20 ROUNDS=100                   load per run (defaults)
#   TRACK_PREPARED=false scripts/driver-tests.sh
#                                           negative control: without tracking the drivers
#                                           must fail (shows the scripts can tell)
#
# Makes a venv at target/driver-venv (tests/drivers/requirements.txt) and installs the node
# packages into tests/drivers/node_modules (package-lock.json, `npm ci`); starts its own
# throwaway PostgreSQL and droid-pool (target/debug/droid-pool). Exits non-zero if any driver
# run fails.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONDONTWRITEBYTECODE=1 # no __pycache__ in tests/drivers
ROOT=$PWD
CLIENTS=${CLIENTS:-20}
ROUNDS=${ROUNDS:-100}
TRACK_PREPARED=${TRACK_PREPARED:-true}

ALL_DRIVERS=(psycopg asyncpg node)
DRIVERS=("$@")
if [[ ${#DRIVERS[@]} -eq 0 ]]; then
  DRIVERS=("${ALL_DRIVERS[@]}")
fi
for d in "${DRIVERS[@]}"; do
  case $d in
    psycopg | asyncpg | node) ;;
    *)
      echo "driver-tests: unknown driver '$d' (drivers: ${ALL_DRIVERS[*]})" >&2
      exit 2
      ;;
  esac
done

log() { echo "driver-tests: $*" >&2; }

# --- build and driver installs ------------------------------------------------
cargo build --quiet
POOLER=$ROOT/target/debug/droid-pool

need_python=0
need_node=0
for d in "${DRIVERS[@]}"; do
  [[ $d == node ]] && need_node=1
  [[ $d != node ]] && need_python=1
done

VENV=$ROOT/target/driver-venv
if [[ $need_python -eq 1 ]]; then
  if [[ ! -x $VENV/bin/python ]]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  # Quick when everything is already there; pins come from requirements.txt.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    -r tests/drivers/requirements.txt
fi

if [[ $need_node -eq 1 ]]; then
  if ! command -v npm >/dev/null 2>&1; then
    log "npm is missing (install nodejs and npm)"
    exit 1
  fi
  lock=tests/drivers/package-lock.json
  stamp=tests/drivers/node_modules/.package-lock.json
  if [[ ! -f $stamp || $lock -nt $stamp ]]; then
    log "npm ci in tests/drivers"
    (cd tests/drivers && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi

# --- PostgreSQL ------------------------------------------------------------------
# shellcheck source=scripts/lib/pg.sh
source scripts/lib/pg.sh
pg_find_bin

TMP=$(mktemp -d /tmp/droid-driver-tests.XXXXXX)
PG_TMP=$TMP
PGDATA_DIR=$TMP/data
PG_STARTED=0
POOLER_PID=""

stop_pooler() {
  if [[ -n $POOLER_PID ]]; then
    if kill -0 "$POOLER_PID" 2>/dev/null; then
      kill -TERM "$POOLER_PID" 2>/dev/null || true
      for _ in $(seq 1 50); do
        kill -0 "$POOLER_PID" 2>/dev/null || break
        sleep 0.1
      done
      kill -KILL "$POOLER_PID" 2>/dev/null || true
    fi
    wait "$POOLER_PID" 2>/dev/null || true
    POOLER_PID=""
  fi
}

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_pooler
  if [[ $PG_STARTED -eq 1 ]]; then
    pg_stop "$PGDATA_DIR" immediate
  fi
  if [[ $status -ne 0 && -d $TMP ]]; then
    for f in "$TMP"/pooler-*.log; do
      [[ -f $f ]] || continue
      echo "--- tail of $(basename "$f") ---" >&2
      tail -n 20 "$f" >&2 || true
    done
  fi
  rm -rf "$TMP"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pg_own_tmp
pg_initdb "$PGDATA_DIR"
cat >>"$PGDATA_DIR/postgresql.conf" <<CONF

# --- droid-pool driver tests ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$TMP'
max_connections = 100
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
pg_start "$PGDATA_DIR"
PG_STARTED=1
log "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT"

# --- one pooler per setting, every driver through it ----------------------------
start_pooler() { # $1 = round robin (true/false)
  local rr=$1 port cfg out
  for _ in 1 2 3; do
    port=$(free_port)
    cfg=$TMP/pooler-rr-$rr.yaml
    out=$TMP/pooler-rr-$rr.log
    cat >"$cfg" <<YAML
listen:
  port: $port
server:
  port: $PG_PORT
pool:
  size: 2
  mode: transaction
  track_prepared: $TRACK_PREPARED
  server_round_robin: $rr
admin:
  port: $(free_port)
drain:
  accept_window: 0s
  timeout: 5s
YAML
    "$POOLER" --config "$cfg" >"$out" 2>"$TMP/pooler-rr-$rr.err" &
    POOLER_PID=$!
    for _ in $(seq 1 100); do
      if grep -q '^\[POOL\] listening on' "$out" 2>/dev/null; then
        POOLER_PORT=$port
        return 0
      fi
      kill -0 "$POOLER_PID" 2>/dev/null || break
      sleep 0.1
    done
    stop_pooler
  done
  log "droid-pool did not start; stderr:"
  cat "$TMP/pooler-rr-$rr.err" >&2 || true
  return 1
}

run_driver() { # $1 = driver, $2 = table
  local d=$1 table=$2
  local common=(--port "$POOLER_PORT" --table "$table" --clients "$CLIENTS" --rounds "$ROUNDS")
  case $d in
    psycopg)
      (cd tests/drivers && "$VENV/bin/python" psycopg_driver.py "${common[@]}")
      ;;
    asyncpg)
      (cd tests/drivers && "$VENV/bin/python" asyncpg_driver.py "${common[@]}")
      ;;
    node)
      (cd tests/drivers && node node_pg.js "${common[@]}")
      # Terminate before the StartupMessage gets no reply (issue 29).
      (cd tests/drivers && node node_quick_disconnect.js --port "$POOLER_PORT")
      ;;
  esac
}

results=()
failures=0
for rr in false true; do
  start_pooler "$rr"
  log "droid-pool on 127.0.0.1:$POOLER_PORT (pool of 2, transaction, track_prepared $TRACK_PREPARED, server_round_robin $rr)"
  for d in "${DRIVERS[@]}"; do
    start=$SECONDS
    status=0
    run_driver "$d" "drv_${d}_rr_${rr}" || status=$?
    prepared=$(grep -c ' prepares ' "$TMP/pooler-rr-$rr.log" || true)
    on2=$(grep -c ' prepares .* on server 2$' "$TMP/pooler-rr-$rr.log" || true)
    if ! kill -0 "$POOLER_PID" 2>/dev/null; then
      log "droid-pool exited during $d"
      status=1
    fi
    if [[ $status -eq 0 ]]; then
      results+=("ok    $d (server_round_robin $rr, $((SECONDS - start))s)")
    else
      results+=("FAIL  $d (server_round_robin $rr, exit $status)")
      failures=$((failures + 1))
    fi
    log "$d done: exit $status; this pooler so far: $prepared prepares lines, $on2 on server 2"
  done
  stop_pooler
done

echo
for r in "${results[@]}"; do
  echo "driver-tests: $r"
done
total=${#results[@]}
echo "driver-tests: $((total - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
