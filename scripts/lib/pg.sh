# shellcheck shell=bash
# A throwaway PostgreSQL for the scripts (quickstart, driver tests, benchmarks): where its
# programs are, running them as the OS user postgres when we are root (initdb, pg_ctl and
# postgres refuse to run as root), free ports, initdb and a start that survives a port taken
# meanwhile. Source it, set PG_TMP to a directory the postgres user may enter, then call
# pg_find_bin.
#   PGLIB_NAME   prefix of messages (default: the sourcing script's name)

PGLIB_NAME=${PGLIB_NAME:-$(basename "$0" .sh)}
AS_PG=()
if [[ $(id -u) -eq 0 ]]; then
  AS_PG=(runuser -u postgres --)
fi
USED_PORTS=" "

pglib_say() {
  echo "$PGLIB_NAME: $*" >&2
}

# Sets PG_BIN: the directory of initdb on PATH, else the highest installed version's.
pg_find_bin() {
  local initdb_path
  if initdb_path=$(command -v initdb 2>/dev/null); then
    PG_BIN=$(dirname "$(readlink -f "$initdb_path")")
  else
    PG_BIN=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null \
      | sort -V | tail -n 1)
  fi
  if [[ -z ${PG_BIN:-} || ! -x $PG_BIN/initdb ]]; then
    pglib_say "initdb not found (scripts/ensure-deps.sh installs PostgreSQL)"
    return 1
  fi
}

# Runs a PostgreSQL program (as postgres when root) from PG_TMP, which that user can enter
# (the repository may not be).
pg() {
  (cd "$PG_TMP" && "${AS_PG[@]}" "$PG_BIN/$1" "${@:2}")
}

# Hands PG_TMP to the postgres user when we are root.
pg_own_tmp() {
  if [[ $(id -u) -eq 0 ]]; then
    chown postgres: "$PG_TMP"
  fi
}

port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# Sets FREE_PORT to a port that nothing listens on and that this script has not handed out.
# It comes from below the kernel's ephemeral range, so no outgoing connection holds it, nor any
# of the thousands a benchmark leaves in TIME_WAIT (either makes the listener's bind fail).
next_port() {
  local port low=32768 base=10000 span
  read -r low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true
  span=$((low - base))
  if [[ $span -lt 2000 ]]; then
    base=20000 span=40000
  fi
  for _ in $(seq 1 200); do
    port=$((base + RANDOM % span))
    if [[ $USED_PORTS != *" $port "* ]] && ! port_in_use "$port"; then
      USED_PORTS+="$port "
      FREE_PORT=$port
      return 0
    fi
  done
  pglib_say "found no free port"
  return 1
}

# Prints a free port (as next_port, in a subshell: call next_port to avoid repeats).
free_port() {
  next_port && echo "$FREE_PORT"
}

# Appends to DATA_DIR/postgresql.conf what a throwaway cluster of the scripts needs: TCP on
# loopback, its socket in PG_TMP, MAX_CONNECTIONS; with "fast", no fsync (tests, never
# benchmarks).
pg_test_conf() {
  local data=$1 max=$2 fast=${3:-}
  {
    echo
    echo "# --- $PGLIB_NAME ---"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$PG_TMP'"
    echo "max_connections = $max"
    if [[ $fast == fast ]]; then
      echo "fsync = off"
      echo "synchronous_commit = off"
      echo "full_page_writes = off"
    fi
  } >>"$data/postgresql.conf"
}

# initdb DATA_DIR with trust auth for the throwaway cluster; the log is kept on failure.
pg_initdb() {
  local data=$1
  pg initdb -D "$data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
    >"$PG_TMP/initdb.log" 2>&1 || {
    cat "$PG_TMP/initdb.log" >&2
    return 1
  }
}

# Starts the cluster in DATA_DIR on a free port (sets PG_PORT), logging to DATA_DIR/
# postgres.log. A free port can be taken by someone else before PostgreSQL binds it, so a
# failed start is tried again on another port.
pg_start() {
  local data=$1 attempt
  for attempt in 1 2 3; do
    next_port
    if pg pg_ctl -D "$data" -l "$data/postgres.log" -o "-p $FREE_PORT" -w -t 60 start >/dev/null; then
      # shellcheck disable=SC2034 # read by the sourcing script
      PG_PORT=$FREE_PORT
      return 0
    fi
    pglib_say "PostgreSQL did not start on port $FREE_PORT (attempt $attempt)"
  done
  tail -n 30 "$data/postgres.log" >&2 || true
  return 1
}

# Stops the cluster in DATA_DIR (MODE: fast or immediate), quietly.
pg_stop() {
  pg pg_ctl -D "$1" -m "${2:-fast}" -w stop >/dev/null 2>&1 || true
}
