#!/usr/bin/env bash
# Benchmark harness: droid-pool against PgBouncer and a direct PostgreSQL
# connection, on this machine, in the same run (issue 4).
#
#   bench/run.sh           full run (about 30 minutes with the profile-guided
#                          build): writes docs/benchmarks.md and docs/benchmarks.png
#   bench/run.sh --smoke   a few seconds per run, 1 round, 1,000 idle clients, the
#                          plain release build (PGO=1 for the profile-guided one);
#                          writes to a temp dir (printed), never to docs/.
#                          Checks only that the harness works end to end and that
#                          every target produced a number (the idle-memory lines
#                          excepted: 1,000 clients are within the allocator's noise, and
#                          an invalid figure is reported, never passed); nothing about speed.
#
# It builds the release binary (scripts/build-pgo.sh, as the image does), starts a
# throwaway PostgreSQL (initdb in a temp dir, max_connections 200, pgbench scale 10),
# three droid-pool instances (plain, --track-prepared for the prepared row, and
# pool.session_state: track for issue 31's rows) and PgBouncer (Debian's package,
# installed when missing), all in transaction mode with a pool of 20 and no TLS, plus a
# fresh droid-pool and PgBouncer that serve only the idle-memory measurement,
# and the minimal relays bench/floor/relay.c (epoll) and bench/floor/uring_relay.c
# (io_uring, when the machine allows it): the CPU floor of any relaying pooler;
# then hands over to bench/bench.py, which runs pgbench and writes the report.
# Everything it started is stopped and its temp dir removed on exit.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD

SMOKE=0
for arg in "$@"; do
  case $arg in
    --smoke) SMOKE=1 ;;
    -h | --help)
      sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "bench: unknown argument '$arg' (use --smoke or nothing)" >&2
      exit 2
      ;;
  esac
done

log() {
  echo "bench: $*" >&2
}

# --- dependencies -------------------------------------------------------------
bash scripts/ensure-deps.sh

SUDO=()
if [[ $(id -u) -ne 0 ]] && command -v sudo >/dev/null 2>&1; then
  SUDO=(sudo)
fi
if ! command -v pgbouncer >/dev/null 2>&1 && [[ ! -x /usr/sbin/pgbouncer ]]; then
  log "installing pgbouncer (Debian package)"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null
  # The package may start its own service on 6432; we run our own instance.
  if command -v service >/dev/null 2>&1; then
    "${SUDO[@]}" service pgbouncer stop >/dev/null 2>&1 || true
  fi
fi
PGBOUNCER=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)

# The binary the image ships: built with profile-guided optimisation by the same script the
# Dockerfile runs (it says so, or why not, in target/pgo/BUILD).
# The smoke run (CI) takes the plain build unless PGO=1 is set: the two extra release builds
# of the profile-guided one would take CI about ten minutes more.
if [[ $SMOKE -eq 1 ]]; then
  export PGO=${PGO:-0}
fi
log "scripts/build-pgo.sh (droid-pool with profile-guided optimisation, PGO=${PGO:-1})"
POOLER=$(bash scripts/build-pgo.sh | tail -n 1)
DROID_BUILD=$(cat "$ROOT/target/pgo/BUILD")
log "droid-pool: $DROID_BUILD"
# What the binary was built from; the working tree may hold uncommitted changes.
DROID_VERSION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null) ]]; then
  diff_hash=$( { git diff HEAD -- src Cargo.toml Cargo.lock
    git status --porcelain -- src Cargo.toml Cargo.lock; } | sha256sum | cut -c1-12)
  DROID_VERSION+=" + uncommitted changes in src/ or Cargo.* (diff sha256 $diff_hash)"
fi

VENV=$ROOT/target/bench-venv
if ! "$VENV/bin/python" -c 'import matplotlib' >/dev/null 2>&1; then
  log "creating $VENV (matplotlib)"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r bench/requirements.txt
fi

# --- PostgreSQL programs, ports (scripts/lib/pg.sh) ---------------------------------
# shellcheck source=scripts/lib/pg.sh
source scripts/lib/pg.sh
pg_find_bin
PGBENCH=$(command -v pgbench 2>/dev/null || echo "$PG_BIN/pgbench")

# --- file descriptors: 10,000 idle clients need as many sockets per process ---
IDLE_CLIENTS=10000
[[ $SMOKE -eq 1 ]] && IDLE_CLIENTS=1000
hard=$(ulimit -Hn)
want=30000
if [[ $hard != unlimited && $hard -lt $want ]]; then
  want=$hard
fi
ulimit -n "$want" || true
NOFILE=$(ulimit -n)
if [[ $NOFILE != unlimited && $NOFILE -lt $((IDLE_CLIENTS + 200)) ]]; then
  log "open-file limit is $NOFILE (hard $hard): too low for $IDLE_CLIENTS idle clients"
  exit 1
fi
log "open-file limit $NOFILE"

TMP=$(mktemp -d /tmp/droid-bench.XXXXXX)
PG_TMP=$TMP
PGDATA_DIR=$TMP/data
PG_STARTED=0
DROID_PID=""
DROID_TP_PID=""
DROID_TRACK_PID=""
DROID_IDLE_PID=""
PGB_RUNNER_PID=""
PGB_IDLE_RUNNER_PID=""
FLOOR_PID=""
URING_PID=""

stop_pid() {
  local pid=$1
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    # droid-pool drains on SIGTERM; a second signal makes it stop at once.
    sleep 0.2
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_pid "$DROID_PID"
  stop_pid "$DROID_TP_PID"
  stop_pid "$DROID_TRACK_PID"
  stop_pid "$DROID_IDLE_PID"
  for dir in pgbouncer pgbouncer-idle; do
    if [[ -f $TMP/$dir/pgbouncer.pid ]]; then
      stop_pid "$(cat "$TMP/$dir/pgbouncer.pid")"
    fi
  done
  stop_pid "$PGB_RUNNER_PID"
  stop_pid "$PGB_IDLE_RUNNER_PID"
  stop_pid "$FLOOR_PID"
  stop_pid "$URING_PID"
  if [[ $PG_STARTED -eq 1 ]]; then
    pg_stop "$PGDATA_DIR" fast
  fi
  rm -rf "$TMP"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pg_own_tmp

# --- PostgreSQL -----------------------------------------------------------------
log "initdb in $PGDATA_DIR"
pg_initdb "$PGDATA_DIR"
# PostgreSQL defaults except where a benchmark needs otherwise (fsync stays on).
cat >>"$PGDATA_DIR/postgresql.conf" <<CONF

# --- droid-pool benchmark ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$TMP'
max_connections = 200
CONF
pg_start "$PGDATA_DIR"
PG_STARTED=1
PG_PID=$(head -n 1 "$PGDATA_DIR/postmaster.pid")
log "PostgreSQL on 127.0.0.1:$PG_PORT; pgbench -i -s 10"
"$PGBENCH" -i -s 10 -q -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >"$TMP/pgbench-init.log" 2>&1 || {
  cat "$TMP/pgbench-init.log" >&2
  exit 1
}

# --- droid-pool: plain, and with --track-prepared ----------------------------------
# Event lines are off: they are one stdout write per event, several per transaction.
cat >"$TMP/droid-pool.yaml" <<'YAML'
log:
  events: false
client:
  max_connections: 20000
YAML
next_port
DROID_PORT=$FREE_PORT
next_port
DROID_TP_PORT=$FREE_PORT
next_port
DROID_TRACK_PORT=$FREE_PORT
# A fourth, started with the same flags as the first but given nothing to do until the idle
# clients come: see "fresh processes for the idle-memory measurement" below.
next_port
DROID_IDLE_PORT=$FREE_PORT
# The third instance: the same file plus pool.session_state: track (issue 31's rows).
cp "$TMP/droid-pool.yaml" "$TMP/droid-pool-track.yaml"
printf 'pool:\n  session_state: track\n' >>"$TMP/droid-pool-track.yaml"
if ! command -v setsid >/dev/null 2>&1; then
  log "setsid (util-linux) not found"
  exit 1
fi
DROID_ARGS=(--server-port "$PG_PORT" --pool-size 20 --mode transaction --config "$TMP/droid-pool.yaml")
# Builds with an admin HTTP server need a free port for it, one per instance.
ADMIN_ARGS=()
ADMIN_TP_ARGS=()
ADMIN_TRACK_ARGS=()
ADMIN_IDLE_ARGS=()
if "$POOLER" --help 2>/dev/null | grep -q -- '--admin-port'; then
  next_port
  ADMIN_ARGS=(--admin-port "$FREE_PORT")
  next_port
  ADMIN_TP_ARGS=(--admin-port "$FREE_PORT")
  next_port
  ADMIN_TRACK_ARGS=(--admin-port "$FREE_PORT")
  next_port
  ADMIN_IDLE_ARGS=(--admin-port "$FREE_PORT")
fi
# Each server process runs in a session of its own (setsid), as PostgreSQL does (pg_ctl) and
# as a daemon or a container would. With the kernel's autogroup scheduling (on by default), a
# process left in this script's session shares its CPU share with pgbench; measured here, that
# cost the pooler about a tenth of its throughput, whichever pooler it was.
# (A background job of a script is no process-group leader, so setsid execs without forking
# and $! is the server's own PID.)
setsid "$POOLER" --port "$DROID_PORT" "${DROID_ARGS[@]}" "${ADMIN_ARGS[@]}" >"$TMP/droid-pool.log" 2>&1 &
DROID_PID=$!
setsid "$POOLER" --port "$DROID_TP_PORT" "${DROID_ARGS[@]}" "${ADMIN_TP_ARGS[@]}" --track-prepared \
  >"$TMP/droid-pool-tp.log" 2>&1 &
DROID_TP_PID=$!
setsid "$POOLER" --port "$DROID_TRACK_PORT" --server-port "$PG_PORT" --pool-size 20 --mode transaction \
  --config "$TMP/droid-pool-track.yaml" "${ADMIN_TRACK_ARGS[@]}" >"$TMP/droid-pool-track.log" 2>&1 &
DROID_TRACK_PID=$!
# --- fresh processes for the idle-memory measurement ---------------------------------
# Memory that the load freed and the allocator kept takes idle clients in without the
# process growing: on the instance that had run the load, the full run of 3296bc8 read
# -0.07 KiB per client (RSS fell), which measures nothing. Each pooler's idle figure is
# therefore read on a process of its own that served nothing but its readiness probe.
setsid "$POOLER" --port "$DROID_IDLE_PORT" "${DROID_ARGS[@]}" "${ADMIN_IDLE_ARGS[@]}" \
  >"$TMP/droid-pool-idle.log" 2>&1 &
DROID_IDLE_PID=$!

# --- PgBouncer (as postgres, files in a dir that user owns) ------------------------
next_port
PGB_PORT=$FREE_PORT
PGB_DIR=$TMP/pgbouncer
mkdir -p "$PGB_DIR"
echo '"postgres" ""' >"$PGB_DIR/userlist.txt"
cat >"$PGB_DIR/pgbouncer.ini" <<INI
[databases]
* = host=127.0.0.1 port=$PG_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $PGB_PORT
unix_socket_dir =
auth_type = trust
auth_file = $PGB_DIR/userlist.txt
pool_mode = transaction
default_pool_size = 20
max_client_conn = 20000
client_tls_sslmode = disable
server_tls_sslmode = disable
logfile = $PGB_DIR/pgbouncer.log
pidfile = $PGB_DIR/pgbouncer.pid
log_connections = 0
log_disconnections = 0
admin_users = postgres
INI
if [[ $(id -u) -eq 0 ]]; then
  chown -R postgres: "$PGB_DIR"
fi
# runuser applies the login limits: raise the soft open-file limit again inside.
# shellcheck disable=SC2016 # the single-quoted script expands its own arguments
(cd "$PGB_DIR" && exec setsid "${AS_PG[@]}" bash -c 'ulimit -n "$1" 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$2" "$3"' \
  _ "$NOFILE" "$PGBOUNCER" "$PGB_DIR/pgbouncer.ini") >"$TMP/pgbouncer.out" 2>&1 &
PGB_RUNNER_PID=$!
# PgBouncer's fresh process for the idle measurement: the same file but for its port, log
# and pid file.
next_port
PGB_IDLE_PORT=$FREE_PORT
PGB_IDLE_DIR=$TMP/pgbouncer-idle
mkdir -p "$PGB_IDLE_DIR"
cp "$PGB_DIR/userlist.txt" "$PGB_IDLE_DIR/"
sed -e "s|^listen_port = .*|listen_port = $PGB_IDLE_PORT|" -e "s|$PGB_DIR/|$PGB_IDLE_DIR/|g" \
  "$PGB_DIR/pgbouncer.ini" >"$PGB_IDLE_DIR/pgbouncer.ini"
if [[ $(id -u) -eq 0 ]]; then
  chown -R postgres: "$PGB_IDLE_DIR"
fi
# shellcheck disable=SC2016 # as above
(cd "$PGB_IDLE_DIR" && exec setsid "${AS_PG[@]}" bash -c 'ulimit -n "$1" 2>/dev/null || ulimit -n "$(ulimit -Hn)"; exec "$2" "$3"' \
  _ "$NOFILE" "$PGBOUNCER" "$PGB_IDLE_DIR/pgbouncer.ini") >"$TMP/pgbouncer-idle.out" 2>&1 &
PGB_IDLE_RUNNER_PID=$!

wait_ready() {
  local name=$1 port=$2
  for _ in $(seq 1 100); do
    if psql -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -tAc 'SELECT 1' >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  log "$name did not come up on port $port"
  cat "$TMP"/*.log "$TMP/pgbouncer.out" "$PGB_DIR/pgbouncer.log" >&2 2>/dev/null || true
  return 1
}
# --- the minimal relay (a C compiler is there: cargo links with it) -----------------
CC_BIN=$(command -v cc || command -v gcc || true)
if [[ -z $CC_BIN ]]; then
  log "no C compiler (cc or gcc) for bench/floor/relay.c"
  exit 1
fi
"$CC_BIN" -O2 -o "$TMP/relay" bench/floor/relay.c
next_port
FLOOR_PORT=$FREE_PORT
setsid "$TMP/relay" "$FLOOR_PORT" "$PG_PORT" >"$TMP/relay.log" 2>&1 &
FLOOR_PID=$!

# The same relay over io_uring (bench/floor/uring_relay.c): what a different transport takes
# off the floor. Optional: it needs liburing's headers (installed here when apt can) and a
# kernel that allows io_uring (container runtimes often forbid it); without them the report
# says the row was not measured.
URING_ARGS=()
if [[ ! -f /usr/include/liburing.h ]] && command -v apt-get >/dev/null 2>&1 \
  && [[ $(id -u) -eq 0 || ${#SUDO[@]} -gt 0 ]]; then
  log "installing liburing-dev (for bench/floor/uring_relay.c)"
  { "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
    && "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends liburing-dev; } >/dev/null 2>&1 || true
fi
if "$CC_BIN" -O2 -o "$TMP/uring_relay" bench/floor/uring_relay.c -luring 2>"$TMP/uring_relay.build"; then
  next_port
  URING_PORT=$FREE_PORT
  setsid "$TMP/uring_relay" "$URING_PORT" "$PG_PORT" >"$TMP/uring_relay.log" 2>&1 &
  URING_PID=$!
  if wait_ready "io_uring relay" "$URING_PORT"; then
    URING_ARGS=(--uring-port "$URING_PORT" --uring-pid "$URING_PID"
      --liburing "$(dpkg-query -W -f='${Version}' liburing-dev 2>/dev/null || true)")
  else
    log "the io_uring relay did not start (io_uring not allowed here?); its row is left out"
    stop_pid "$URING_PID"
    URING_PID=""
  fi
else
  log "bench/floor/uring_relay.c did not build (no liburing?); its row is left out"
fi

wait_ready droid-pool "$DROID_PORT"
wait_ready "droid-pool --track-prepared" "$DROID_TP_PORT"
wait_ready "droid-pool session_state: track" "$DROID_TRACK_PORT"
wait_ready PgBouncer "$PGB_PORT"
wait_ready "droid-pool (fresh, for idle clients)" "$DROID_IDLE_PORT"
wait_ready "PgBouncer (fresh, for idle clients)" "$PGB_IDLE_PORT"
wait_ready "minimal relay" "$FLOOR_PORT"
PGB_PID=$(cat "$PGB_DIR/pgbouncer.pid")
PGB_IDLE_PID=$(cat "$PGB_IDLE_DIR/pgbouncer.pid")
log "droid-pool on $DROID_PORT (pid $DROID_PID), with --track-prepared on $DROID_TP_PORT" \
  "(pid $DROID_TP_PID), with session_state: track on $DROID_TRACK_PORT (pid $DROID_TRACK_PID)," \
  "PgBouncer on $PGB_PORT (pid $PGB_PID)"

if [[ $SMOKE -eq 1 ]]; then
  OUT_DIR=$(mktemp -d /tmp/droid-bench-smoke.XXXXXX)
  MODE_ARGS=(--smoke --out-md "$OUT_DIR/benchmarks.md" --out-png "$OUT_DIR/benchmarks.png")
else
  OUT_DIR=$ROOT/docs
  MODE_ARGS=(--out-md "$OUT_DIR/benchmarks.md" --out-png "$OUT_DIR/benchmarks.png")
fi

"$VENV/bin/python" bench/bench.py "${MODE_ARGS[@]}" \
  --work-dir "$TMP/runs" \
  --pgbench "$PGBENCH" \
  --pg-bin "$PG_BIN" \
  --pgbouncer-bin "$PGBOUNCER" \
  --pg-port "$PG_PORT" --pg-pid "$PG_PID" \
  --droid-port "$DROID_PORT" --droid-pid "$DROID_PID" --droid-log "$TMP/droid-pool.log" \
  --droid-tp-port "$DROID_TP_PORT" --droid-tp-pid "$DROID_TP_PID" --droid-tp-log "$TMP/droid-pool-tp.log" \
  --droid-track-port "$DROID_TRACK_PORT" --droid-track-pid "$DROID_TRACK_PID" \
  --droid-track-log "$TMP/droid-pool-track.log" \
  --pgb-port "$PGB_PORT" --pgb-pid "$PGB_PID" --pgb-log "$PGB_DIR/pgbouncer.log" \
  --droid-idle-port "$DROID_IDLE_PORT" --droid-idle-pid "$DROID_IDLE_PID" \
  --pgb-idle-port "$PGB_IDLE_PORT" --pgb-idle-pid "$PGB_IDLE_PID" \
  --floor-port "$FLOOR_PORT" --floor-pid "$FLOOR_PID" "${URING_ARGS[@]}" \
  --idle-clients "$IDLE_CLIENTS" \
  --droid-version "$DROID_VERSION" \
  --droid-build "$DROID_BUILD" \
  --nofile "$NOFILE"
log "report: $OUT_DIR/benchmarks.md, chart: $OUT_DIR/benchmarks.png"
