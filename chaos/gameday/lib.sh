# shellcheck shell=bash
# What the game days (run.sh: network faults; switchover.sh: a primary and its standby) share:
# logging, the machine's prerequisites (root, network namespaces and nft, PostgreSQL with
# pg_stat_statements, PgBouncer, the release build, the Python venv), and small helpers. Sourced
# with ROOT, HERE and SKIP_UNSUPPORTED set; sets PG_BIN, PSQL, PGBOUNCER, PGB_VERSION, POOLER,
# VERSION, PY and GD. GAMEDAY_POOLER names a release binary built before instead of building
# one (GAMEDAY_POOLER_VERSION: what to call it in the report).

log() { printf '[gameday %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
  log "$*"
  exit 2
}

# Checks (and installs where it can) what a game day needs; with SKIP_UNSUPPORTED=1 a machine
# that cannot run one exits 0 with SKIP.
gameday_prerequisites() {
  unsupported() {
    if [[ $SKIP_UNSUPPORTED -eq 1 ]]; then
      log "SKIP: $*"
      exit 0
    fi
    die "$*"
  }
  [[ $(id -u) -eq 0 ]] || unsupported "run as root: network namespaces and nft need it"
  apt_install() {
    log "apt-get install $*"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; then
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    fi
  }
  command -v ip >/dev/null 2>&1 || apt_install iproute2
  command -v nft >/dev/null 2>&1 || apt_install nftables
  if ! ip netns add dpgd-check 2>/dev/null; then
    unsupported "cannot create a network namespace here (ip netns add failed): the game day needs CAP_SYS_ADMIN and CAP_NET_ADMIN"
  fi
  if ! ip netns exec dpgd-check nft add table inet dpgd_check 2>/dev/null; then
    ip netns del dpgd-check
    unsupported "nft cannot add a table inside a network namespace here (no nf_tables in this kernel?)"
  fi
  ip netns del dpgd-check

  if initdb_path=$(command -v initdb 2>/dev/null); then
    PG_BIN=$(dirname "$(readlink -f "$initdb_path")")
  else
    PG_BIN=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin 2>/dev/null | sort -V | tail -n 1)
  fi
  if [[ -z ${PG_BIN:-} || ! -x $PG_BIN/initdb ]]; then
    apt_install postgresql
    PG_BIN=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -type d -name bin | sort -V | tail -n 1)
  fi
  [[ -f $("$PG_BIN/pg_config" --pkglibdir 2>/dev/null || echo /nonexistent)/pg_stat_statements.so ]] ||
    [[ -f $PG_BIN/../lib/pg_stat_statements.so ]] || die "pg_stat_statements is not installed for $PG_BIN"
  id -u postgres >/dev/null 2>&1 || die "the OS user postgres is missing (scripts/ensure-deps.sh creates it)"
  PSQL=$(command -v psql || echo "$PG_BIN/psql")

  if ! command -v pgbouncer >/dev/null 2>&1 && [[ ! -x /usr/sbin/pgbouncer ]]; then
    # Its package would start a service on 6432: forbid service starts for the install.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
      chmod +x /usr/sbin/policy-rc.d
      apt_install pgbouncer
      rm -f /usr/sbin/policy-rc.d
    else
      apt_install pgbouncer
    fi
  fi
  PGBOUNCER=$(command -v pgbouncer 2>/dev/null || echo /usr/sbin/pgbouncer)
  # shellcheck disable=SC2034 # read by the scripts that source this file
  PGB_VERSION=$("$PGBOUNCER" --version | head -n 1)

  if [[ -n ${GAMEDAY_POOLER:-} ]]; then
    # A release binary built before (GAMEDAY_POOLER_VERSION says of what).
    POOLER=$GAMEDAY_POOLER
    VERSION=${GAMEDAY_POOLER_VERSION:-prebuilt}
  else
    log "cargo build --release --bin droid-pool"
    cargo build --release --bin droid-pool --quiet
    POOLER=$ROOT/target/release/droid-pool
    VERSION=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [[ -n $(git status --porcelain -- src Cargo.toml Cargo.lock 2>/dev/null) ]]; then
      VERSION+=" with uncommitted changes"
    fi
  fi

  VENV=$ROOT/target/gameday-venv
  if ! "$VENV/bin/python" -c 'import asyncpg, matplotlib' >/dev/null 2>&1; then
    log "creating $VENV"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r "$HERE/requirements.txt"
  fi
  PY=$VENV/bin/python
  # shellcheck disable=SC2034 # read by the scripts that source this file
  GD=("$PY" "$HERE/gameday.py")
}

stop_pid() {
  local pid=$1
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$pid" 2>/dev/null || true
}

epoch() { date +%s.%N; }
sleep_until() { "$PY" -c 'import sys, time; time.sleep(max(0.0, float(sys.argv[1]) - time.time()))' "$1"; }
add() { "$PY" -c 'import sys; print(f"{sum(map(float, sys.argv[1:])):.3f}")' "$@"; }

# PgBouncer's files in $WORK/pgb for database gameday on $1 (a host, or a comma list: its
# multi-host form, one port for all) at $PG_PORT: as shipped, but for the pool size.
gameday_pgbouncer_config() {
  mkdir -p "$WORK/pgb"
  printf '"gameday" ""\n"postgres" ""\n' >"$WORK/pgb/userlist.txt"
  cat >"$WORK/pgb/pgbouncer.ini" <<INI
[databases]
gameday = host=$1 port=$PG_PORT dbname=gameday

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $POOL_PORT
unix_socket_dir =
auth_type = trust
auth_file = $WORK/pgb/userlist.txt
pool_mode = transaction
default_pool_size = $POOL_SIZE
max_client_conn = 2000
admin_users = gameday
logfile = $WORK/pgb/pgbouncer.log
pidfile = $WORK/pgb/pgbouncer.pid
INI
  chown -R postgres: "$WORK/pgb"
}

# Starts target $1 (pgbouncer, or a droid-pool with $WORK/droid-pool.yaml) in $NS_APP, its
# output in dir $2; waits until it answers. Sets POOLER_PID.
gameday_start_pooler() {
  local target=$1 dir=$2
  if [[ $target != pgbouncer ]]; then
    # Not through a shell function: $! must be the pooler itself (ip netns exec execs it).
    ip netns exec "$NS_APP" "$POOLER" --config "$WORK/droid-pool.yaml" >"$dir/pooler.out" 2>"$dir/pooler.err" &
    POOLER_PID=$!
  else
    rm -f "$WORK/pgb/pgbouncer.pid"
    (cd "$WORK/pgb" && exec ip netns exec "$NS_APP" runuser -u postgres -- "$PGBOUNCER" "$WORK/pgb/pgbouncer.ini") >"$dir/pooler.out" 2>&1 &
    POOLER_PID=$!
  fi
  PIDS+=("$POOLER_PID")
  for _ in $(seq 1 100); do
    if ip netns exec "$NS_APP" "$PSQL" -X -q -h 127.0.0.1 -p "$POOL_PORT" -U gameday -d gameday -tAc 'SELECT 1' >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.1
  done
  die "$target did not answer on $POOL_PORT: $(tail -n 20 "$dir/pooler.err" "$dir/pooler.out" 2>/dev/null)"
}

gameday_stop_pooler() {
  local target=$1 dir=$2
  if [[ $target == pgbouncer && -f $WORK/pgb/pgbouncer.pid ]]; then
    stop_pid "$(cat "$WORK/pgb/pgbouncer.pid")"
    cp "$WORK/pgb/pgbouncer.log" "$dir/pgbouncer.log" 2>/dev/null || true
    : >"$WORK/pgb/pgbouncer.log"
  fi
  # droid-pool would drain for seconds on SIGTERM; nothing here needs a graceful end.
  kill -KILL "$POOLER_PID" 2>/dev/null || true
  wait "$POOLER_PID" 2>/dev/null || true
}

# Namespaces $NS_DB and $NS_APP (left by an interrupted run: the names are ours) joined by a
# veth pair: $NS_DB has the addresses given, $NS_APP has $APP_IP.
gameday_network() {
  local ns addr
  for ns in "$NS_APP" "$NS_DB"; do
    ip netns del "$ns" 2>/dev/null || true
  done
  ip netns add "$NS_DB"
  ip netns add "$NS_APP"
  ip -n "$NS_DB" link add veth-db type veth peer name veth-app netns "$NS_APP"
  for addr in "$@"; do
    ip -n "$NS_DB" addr add "$addr/24" dev veth-db
  done
  ip -n "$NS_APP" addr add "$APP_IP/24" dev veth-app
  for ns in "$NS_DB" "$NS_APP"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$NS_DB" link set veth-db up
  ip -n "$NS_APP" link set veth-app up
}
