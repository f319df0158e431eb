#!/usr/bin/env bash
# Instructions per transaction of the pooler, counted by callgrind (deterministic: the same
# binary and inputs give the same count whatever else the machine does).
#
#   bench/callgrind.sh [BINARY]      default: target/release/droid-pool (plain release build)
#   CALLGRIND_KEEP=DIR bench/callgrind.sh   also keeps the profiles (callgrind_annotate them)
#   CALLGRIND_PROTOCOL=prepared bench/callgrind.sh   `-M prepared` through `--track-prepared`
#   CALLGRIND_SESSION_STATE=track bench/callgrind.sh  with pool.session_state (off, pin, track)
#                                    (default simple; extended also runs untracked)
#
# For 1 and 50 clients it runs `pgbench -S -M simple` twice through the pooler under
# callgrind, with N and 2N transactions per client, and prints the difference divided by the
# extra transactions: the marginal cost of one transaction, logins and start-up excluded.
# N is 2,000 for one client and 100 for 50 (CALLGRIND_50=400 for four times as many: the
# 50-client figure moves by about ±150 from run to run at 100, by about ±30 at 400).
# Event lines are off, as in bench/run.sh.
set -euo pipefail
PROTOCOL=${CALLGRIND_PROTOCOL:-simple}
TRACK=()
[[ $PROTOCOL == prepared ]] && TRACK=(--track-prepared)

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${1:-target/release/droid-pool}
BIN=$(readlink -f "$BIN")
if [[ ! -x $BIN ]]; then
  echo "callgrind: $BIN not found (cargo build --release)" >&2
  exit 1
fi
command -v valgrind >/dev/null || {
  echo "callgrind: valgrind not found (apt-get install valgrind)" >&2
  exit 1
}

PG_TMP=$(mktemp -d /tmp/droid-callgrind.XXXXXX)
chmod 755 "$PG_TMP"
# shellcheck source=scripts/lib/pg.sh
source scripts/lib/pg.sh
pg_find_bin
pg_own_tmp
cleanup() {
  pg_stop "$PG_TMP/data" immediate
  if [[ -n ${CALLGRIND_KEEP:-} ]]; then
    mkdir -p "$CALLGRIND_KEEP"
    cp "$PG_TMP"/cg.* "$CALLGRIND_KEEP"/ 2>/dev/null || true
  fi
  rm -rf "$PG_TMP"
}
trap cleanup EXIT
pg_initdb "$PG_TMP/data"
echo "max_connections = 200" >>"$PG_TMP/data/postgresql.conf"
pg_start "$PG_TMP/data"
"$PG_BIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -i -s 1 -q postgres >/dev/null 2>&1

cat >"$PG_TMP/pool.yaml" <<'YAML'
log:
  events: false
YAML
if [[ -n ${CALLGRIND_SESSION_STATE:-} ]]; then
  printf 'pool:\n  session_state: %s\n' "$CALLGRIND_SESSION_STATE" >>"$PG_TMP/pool.yaml"
fi

# Runs pgbench with $1 clients and $2 transactions each through a pooler under callgrind and
# prints the instructions the pooler executed.
count() {
  local clients=$1 txs=$2 port admin out pid total
  next_port
  port=$FREE_PORT
  next_port
  admin=$FREE_PORT
  out=$PG_TMP/cg.$clients.$txs
  valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$BIN" --port "$port" --admin-port "$admin" --server-port "$PG_PORT" --pool-size 20 \
    --mode transaction "${TRACK[@]}" --config "$PG_TMP/pool.yaml" >"$PG_TMP/pooler.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do
    grep -q "listening on" "$PG_TMP/pooler.log" 2>/dev/null && break
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  "$PG_BIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -S -M "$PROTOCOL" -n \
    -c "$clients" -j 1 -t "$txs" postgres >/dev/null 2>&1
  kill -INT "$pid"
  wait "$pid" || true
  total=$(grep -E '^(summary|totals):' "$out" | head -n 1 | awk '{print $2}')
  echo "$total"
}

for spec in "1 2000" "50 ${CALLGRIND_50:-100}"; do
  read -r clients n <<<"$spec"
  a=$(count "$clients" "$n")
  b=$(count "$clients" $((2 * n)))
  per=$(((b - a) / (clients * n)))
  echo "callgrind: -M $PROTOCOL, $clients client(s): $per instructions per transaction ($a for $n, $b for $((2 * n)) per client)"
done
