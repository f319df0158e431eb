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
cargo build --release --bin droid-pool
POOLER=$PWD/target/release/droid-pool

# shellcheck source=scripts/lib/pg.sh
source scripts/lib/pg.sh
pg_find_bin

if port_in_use "$PORT"; then
  echo "quickstart: port $PORT is already in use; pick another with PORT=NNNN $0" >&2
  exit 1
fi

TMP=$(mktemp -d /tmp/droid-quickstart.XXXXXX)
PG_TMP=$TMP
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
    pg_stop "$PGDATA_DIR" fast
  fi
  rm -rf "$TMP"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

pg_own_tmp
echo "quickstart: initdb in $PGDATA_DIR" >&2
pg_initdb "$PGDATA_DIR"
cat >>"$PGDATA_DIR/postgresql.conf" <<CONF

# --- droid-pool quickstart ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$TMP'
max_connections = 200
CONF
USED_PORTS+="$PORT "
pg_start "$PGDATA_DIR"
PG_STARTED=1

cat <<INFO

PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') is running on 127.0.0.1:$PG_PORT (data: $PGDATA_DIR, log: $PGDATA_DIR/postgres.log).
Starting droid-pool on 127.0.0.1:$PORT. Connect through it with:

    psql -h 127.0.0.1 -p $PORT -U postgres postgres

Press Ctrl-C to stop droid-pool and PostgreSQL.

INFO

# In the background so that INT/TERM reach our traps at once; the traps stop
# the pooler and PostgreSQL (cleanup), the wait returns the pooler's status.
"$POOLER" --port "$PORT" --server-port "$PG_PORT" "$@" &
POOLER_PID=$!
status=0
wait "$POOLER_PID" || status=$?
POOLER_PID=""
exit "$status"
