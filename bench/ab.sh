#!/usr/bin/env bash
# Two droid-pool binaries side by side, in the same run on the same PostgreSQL: the rows of
# bench/run.sh that measure a transaction's cost (pgbench -S simple and extended, TPC-B, 50
# clients, pool of 20, transaction mode), with the binaries' runs alternating within each
# round so that the machine's drift falls on both alike. For "did this change cost
# anything": bench/run.sh compares against PgBouncer, this compares against a baseline.
#
#   bench/ab.sh BASE_BIN NEW_BIN        3 rounds of 15 s per row and binary
#   ROUNDS=5 SECONDS_PER_RUN=20 bench/ab.sh ...
#   ROWS="tpcb" bench/ab.sh ...           only some rows (select-simple select-extended tpcb)
#   NEW_POOL='session_state: track'    pool settings for NEW_BIN only (default: none)
#
# Prints per row the median tps and CPU µs per transaction of each, and the medians of the
# per-round ratios NEW / BASE.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BASE=${1:?usage: bench/ab.sh BASE_BIN NEW_BIN}
NEW=${2:?usage: bench/ab.sh BASE_BIN NEW_BIN}
ROUNDS=${ROUNDS:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-15}
NEW_POOL=${NEW_POOL:-}
ROW_NAMES=${ROWS:-select-simple select-extended tpcb}

log() { echo "ab: $*" >&2; }

# shellcheck source=scripts/lib/pg.sh
source scripts/lib/pg.sh
pg_find_bin
PGBENCH=$(command -v pgbench 2>/dev/null || echo "$PG_BIN/pgbench")
TMP=$(mktemp -d /tmp/droid-ab.XXXXXX)
PG_TMP=$TMP
PGDATA_DIR=$TMP/data
PG_STARTED=0
PIDS=()

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT INT TERM
  for pid in "${PIDS[@]}"; do
    kill -INT "$pid" 2>/dev/null || true
    kill -INT "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
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
pg_initdb "$PGDATA_DIR"
pg_test_conf "$PGDATA_DIR" 200
pg_start "$PGDATA_DIR"
PG_STARTED=1
"$PGBENCH" -i -q -s 10 -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >/dev/null 2>&1

start() { # $1 = binary, $2 = name, $3 = extra pool setting; sets PORT and PID
  local port cfg
  port=$(free_port)
  cfg=$TMP/$2.yaml
  printf 'listen:\n  port: %s\nserver:\n  port: %s\npool:\n  size: 20\n  mode: transaction\n' \
    "$port" "$PG_PORT" >"$cfg"
  [[ -z $3 ]] || printf '  %s\n' "$3" >>"$cfg"
  # As bench/run.sh: event lines off (a stdout write per event).
  printf 'admin:\n  port: %s\nlog:\n  events: false\n' "$(free_port)" >>"$cfg"
  "$1" --config "$cfg" >"$TMP/$2.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  for _ in $(seq 1 100); do
    grep -q '^\[POOL\] listening on' "$TMP/$2.log" 2>/dev/null && break
    sleep 0.1
  done
  PORT=$port
}
start "$BASE" base ""
BASE_PORT=$PORT BASE_PID=$PID
start "$NEW" new "$NEW_POOL"
NEW_PORT=$PORT NEW_PID=$PID

ticks() { # utime + stime of pid $1, in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}

run() { # $1 = port, $2 = pid, $3.. = pgbench args; prints "tps cpu_us_per_txn"
  local port=$1 pid=$2
  shift 2
  local before after out tps txns
  before=$(ticks "$pid")
  out=$("$PGBENCH" -h 127.0.0.1 -p "$port" -U postgres -c 50 -j 2 -T "$SECONDS_PER_RUN" \
    "$@" postgres 2>&1)
  after=$(ticks "$pid")
  tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out" | head -1)
  txns=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
  if [[ -z $tps || -z $txns || $txns -eq 0 ]]; then
    log "pgbench failed: $out"
    exit 1
  fi
  awk -v t="$tps" -v d=$((after - before)) -v n="$txns" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "%.0f %.2f\n", t, d / hz / n * 1e6 }'
}

declare -A ROWS=(
  [select-simple]="-S -M simple"
  [select-extended]="-S -M extended"
  [tpcb]="-M simple"
)
RESULTS=$TMP/results
: >"$RESULTS"
for r in $(seq 1 "$ROUNDS"); do
  for row in $ROW_NAMES; do
    # Alternate which goes first from round to round.
    if ((r % 2)); then order="base new"; else order="new base"; fi
    for who in $order; do
      if [[ $who == base ]]; then p=$BASE_PORT pid=$BASE_PID; else p=$NEW_PORT pid=$NEW_PID; fi
      # shellcheck disable=SC2086 # the row's arguments are words
      read -r tps cpu < <(run "$p" "$pid" ${ROWS[$row]})
      echo "$r $row $who $tps $cpu" >>"$RESULTS"
      log "r$r $row $who: $tps tps, $cpu µs/txn"
    done
  done
done

python3 - "$RESULTS" $ROW_NAMES <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r, row, who, tps, cpu = line.split()
    rows[(row, int(r))][who] = (float(tps), float(cpu))
print("| row | base tps | new tps | new/base tps | base µs/txn | new µs/txn | new/base CPU |")
print("|---|---:|---:|---:|---:|---:|---:|")
for row in sys.argv[2:]:
    rs = [v for (name, _), v in rows.items() if name == row]
    med = lambda xs: statistics.median(xs)
    bt = med([v["base"][0] for v in rs]); nt = med([v["new"][0] for v in rs])
    bc = med([v["base"][1] for v in rs]); nc = med([v["new"][1] for v in rs])
    rt = med([v["new"][0] / v["base"][0] for v in rs])
    rc = med([v["new"][1] / v["base"][1] for v in rs])
    print(f"| {row} | {bt:.0f} | {nt:.0f} | {rt:.3f} | {bc:.1f} | {nc:.1f} | {rc:.3f} |")
PY
