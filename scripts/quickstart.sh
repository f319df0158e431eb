#!/usr/bin/env bash
# "Run it": builds droid-pool, starts a throwaway PostgreSQL on a free port and
# runs droid-pool in front of it until Ctrl-C. Then PostgreSQL is stopped and
# its temp dir removed.
#   scripts/quickstart.sh [extra droid-pool args...]
#   PORT=7000 scripts/quickstart.sh          # pooler port (default 6432)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PORT=${PORT:-6432}

bash scripts/ensure-deps.sh
cargo build --release
POOLER=$PWD/target/release/droid-pool

# --- PostgreSQL binaries (PATH first, else the highest installed version) ------
if initdb_path=$(command -v initdb 2>/dev/null); then
  PG_BIN=$(dirname "$(readlink -f "$initdb_path")")
else
  PG_BIN=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null \
    | sort -V | tail -n 1)
fi
if [[ -z ${PG_BIN:-} || ! -x $PG_BIN/initdb ]]; then
  echo "quickstart: initdb not found (scripts/ensure-deps.sh should have installed it)" >&2
  exit 1
fi

# initdb/pg_ctl/postgres refuse to run as root: run them as OS user postgres.
AS_PG=()
if [[ $(id -u) -eq 0 ]]; then
  AS_PG=(runuser -u postgres --)
fi
# Runs a PostgreSQL program (as postgres when root) from the temp dir, which
# that user can enter (the repo dir may not be).
pg() {
  (cd "$TMP" && "${AS_PG[@]}" "$PG_BIN/$1" "${@:2}")
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
free_port() {
  local port
  for _ in $(seq 1 100); do
    port=$((20000 + RANDOM % 40000))
    if ! port_in_use "$port"; then
      echo "$port"
      return 0
    fi
  done
  echo "quickstart: found no free port" >&2
  return 1
}

if port_in_use "$PORT"; then
  echo "quickstart: port $PORT is already in use; pick another with PORT=NNNN $0" >&2
  exit 1
fi

TMP=$(mktemp -d /tmp/droid-quickstart.XXXXXX)
PGDATA_DIR=$TMP/data
PG_STARTED=0
POOLER_PID=""

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  if [[ -n $POOLER_PID ]] && kill -0 "$POOLER_PID" 2>/dev/null; then
    kill -TERM "$POOLER_PID" 2>/dev/null || true
    wait "$POOLER_PID" 2>/dev/null || true
  fi
  if [[ $PG_STARTED -eq 1 ]]; then
    echo "quickstart: stopping PostgreSQL" >&2
    pg pg_ctl -D "$PGDATA_DIR" -m fast -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$TMP"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ $(id -u) -eq 0 ]]; then
  chown postgres: "$TMP"
fi

echo "quickstart: initdb in $PGDATA_DIR" >&2
pg initdb -D "$PGDATA_DIR" -U postgres -A trust -E UTF8 --locale=C \
  --no-sync >"$TMP/initdb.log" 2>&1 || {
  cat "$TMP/initdb.log" >&2
  exit 1
}

PGPORT_NUM=$(free_port)
cat >>"$PGDATA_DIR/postgresql.conf" <<CONF

# --- droid-pool quickstart ---
listen_addresses = '127.0.0.1'
port = $PGPORT_NUM
unix_socket_directories = '$TMP'
max_connections = 200
CONF

if ! pg pg_ctl -D "$PGDATA_DIR" -l "$PGDATA_DIR/postgres.log" -w -t 60 \
  start >/dev/null; then
  tail -n 30 "$PGDATA_DIR/postgres.log" >&2 || true
  exit 1
fi
PG_STARTED=1

cat <<INFO

PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') is running on 127.0.0.1:$PGPORT_NUM (data: $PGDATA_DIR, log: $PGDATA_DIR/postgres.log).
Starting droid-pool on 127.0.0.1:$PORT. Connect through it with:

    psql -h 127.0.0.1 -p $PORT -U postgres postgres

Press Ctrl-C to stop droid-pool and PostgreSQL.

INFO

# In the background so that INT/TERM reach our traps at once; the traps stop
# the pooler and PostgreSQL (cleanup), the wait returns the pooler's status.
"$POOLER" --port "$PORT" --server-port "$PGPORT_NUM" "$@" &
POOLER_PID=$!
status=0
wait "$POOLER_PID" || status=$?
POOLER_PID=""
exit "$status"
