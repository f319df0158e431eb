#!/usr/bin/env bash
# What the clean-up of unseen work costs: a workload that calls a plpgsql function in every
# transaction (`SELECT bench_balance(:aid)`, the function reading pgbench_accounts), through
# droid-pool in transaction mode under `pool.session_state` off, track, and track with
# `pool.reset_query_always`, with and without handoffs of servers between clients:
#   without handoffs: 1 client, pool of 1 (a client always gets its own server back);
#   with handoffs:    8 clients, pool of 2 (the next client on a server is nearly always
#                     another, so unseen work is cleaned up at almost every transaction).
# Prints tps (pgbench, excluding connection time) and clean-ups per transaction
# (droidpool_session_resets_total / transactions), one line per run, and a Markdown table.
#
#   bench/unseen.sh [BINARY]     default target/release/droid-pool
#   UNSEEN_SECONDS=10            seconds per run (default 10)
#   UNSEEN_ROUNDS=3              rounds (default 3): in each, off, track and always run one
#                                after the other; the table shows each one's median
#   UNSEEN_WRITE=1               also writes the table into docs/benchmarks.md (its own
#                                section, after the marker bench/run.sh keeps)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=$(readlink -f "${1:-target/release/droid-pool}")
SECONDS_PER_RUN=${UNSEEN_SECONDS:-10}
ROUNDS=${UNSEEN_ROUNDS:-3}
[[ -x $BIN ]] || {
  echo "unseen: $BIN not found (cargo build --release)" >&2
  exit 1
}
PG_TMP=$(mktemp -d /tmp/droid-unseen.XXXXXX)
chmod 755 "$PG_TMP"
# shellcheck source=scripts/lib/pg.sh
source scripts/lib/pg.sh
pg_find_bin
pg_own_tmp
POOLER_PID=
cleanup() {
  if [[ -n $POOLER_PID ]]; then kill "$POOLER_PID" 2>/dev/null || true; fi
  pg_stop "$PG_TMP/data" immediate
  rm -rf "$PG_TMP"
}
trap cleanup EXIT
pg_initdb "$PG_TMP/data"
pg_test_conf "$PG_TMP/data" 100
pg_start "$PG_TMP/data"
psql_pg() { "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U postgres -XqAt "$@" postgres; }
"$PG_BIN/pgbench" -h 127.0.0.1 -p "$PG_PORT" -U postgres -i -s 10 -q postgres >/dev/null 2>&1
psql_pg -c "CREATE FUNCTION bench_balance(a int) RETURNS int LANGUAGE plpgsql AS \$\$
  BEGIN RETURN (SELECT abalance FROM pgbench_accounts WHERE aid = a); END \$\$"
cat >"$PG_TMP/call.sql" <<'SQL'
\set aid random(1, 100000 * :scale)
SELECT bench_balance(:aid);
SQL

# Runs one setting: $1 label, $2 session_state, $3 reset_query_always, $4 clients, $5 pool.
run() {
  local label=$1 state=$2 always=$3 clients=$4 size=$5 port admin tps resets txs
  next_port
  port=$FREE_PORT
  next_port
  admin=$FREE_PORT
  printf 'log:\n  events: off\npool:\n  session_state: %s\n  reset_query_always: %s\n' \
    "$state" "$always" >"$PG_TMP/pool.yaml"
  "$BIN" --port "$port" --admin-port "$admin" --server-port "$PG_PORT" --pool-size "$size" \
    --mode transaction --config "$PG_TMP/pool.yaml" >"$PG_TMP/pooler.log" 2>&1 &
  POOLER_PID=$!
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
    sleep 0.1
  done
  tps=$("$PG_BIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -n -f "$PG_TMP/call.sql" \
    -c "$clients" -j 2 -T "$SECONDS_PER_RUN" postgres 2>/dev/null |
    awk -F'= ' '/^tps/ && /without initial connection time|excluding connections/ {print $2}' |
    awk '{printf "%.0f", $1}')
  local metrics
  metrics=$(curl -s "http://127.0.0.1:$admin/metrics")
  resets=$(echo "$metrics" | awk '/^droidpool_session_resets_total/ {s += $2} END {print s + 0}')
  txs=$(echo "$metrics" | awk '/^droidpool_transactions_total/ {s += $2} END {print s + 0}')
  kill "$POOLER_PID"
  wait "$POOLER_PID" 2>/dev/null || true
  POOLER_PID=
  printf '%s|%s|%s\n' "$label" "$tps" \
    "$(awk -v r="$resets" -v t="$txs" 'BEGIN {printf "%.2f", (t > 0 ? r / t : 0)}')"
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

echo "unseen: $SECONDS_PER_RUN s per run, $ROUNDS rounds, $(nproc) cores" >&2
TABLE="| run | off tps | track tps | track / off | track + reset_query_always tps | always / off | clean-ups per transaction (track / always) |
| --- | ---: | ---: | ---: | ---: | ---: | --- |"
for spec in "without handoffs (1 client, pool 1)|1|1" "with handoffs (8 clients, pool 2)|8|2"; do
  IFS='|' read -r label clients size <<<"$spec"
  offs="" tracks="" alwayss="" track_r="" always_r=""
  for _ in $(seq 1 "$ROUNDS"); do
    IFS='|' read -r _ t _ <<<"$(run off off false "$clients" "$size")"
    offs+=" $t"
    IFS='|' read -r _ t track_r <<<"$(run track track false "$clients" "$size")"
    tracks+=" $t"
    IFS='|' read -r _ t always_r <<<"$(run always track true "$clients" "$size")"
    alwayss+=" $t"
    echo "unseen: $label: off$offs / track$tracks / always$alwayss" >&2
  done
  off=$(echo "$offs" | median)
  track=$(echo "$tracks" | median)
  always=$(echo "$alwayss" | median)
  ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
  TABLE+="
| $label | $off | $track | $(ratio "$track" "$off") | $always | $(ratio "$always" "$off") | $track_r / $always_r |"
done
echo "$TABLE"

if [[ ${UNSEEN_WRITE:-0} == 1 ]]; then
  MD=docs/benchmarks.md
  MARK="<!-- sections below: written by other scripts, kept by bench/run.sh -->"
  SECTION="<!-- unseen:begin -->
## A plpgsql function in every transaction (issue 44)

Generated by \`bench/unseen.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'), $ROUNDS rounds of $SECONDS_PER_RUN s
per setting (medians; within a round the three settings run one after the other), load
average at the end $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores, droid-pool
$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- src Cargo.toml 2>/dev/null || echo ' + uncommitted changes'). Each transaction is \`SELECT bench_balance(:aid)\`, a plpgsql function
reading \`pgbench_accounts\` (scale 10): work the pooler cannot see into, so under \`track\`
its server is cleaned (\`DISCARD ALL\`, a fresh seed and the next client's settings, one
round trip before that client's first message) whenever another client takes it. With one
client per server nothing is cleaned; with 8 clients on 2 servers nearly every transaction
follows another client's. \`reset_query_always\` cleans at every handoff whatever ran.

$TABLE
<!-- unseen:end -->"
  grep -qF "$MARK" "$MD" || printf '\n%s\n' "$MARK" >>"$MD"
  python3 - "$MD" "$SECTION" <<'PY'
import sys
path, section = sys.argv[1], sys.argv[2]
text = open(path).read()
begin, end = "<!-- unseen:begin -->", "<!-- unseen:end -->"
if begin in text and end in text:
    a, b = text.index(begin), text.index(end) + len(end)
    text = text[:a] + section + text[b:]
else:
    text = text.rstrip("\n") + "\n\n" + section + "\n"
open(path, "w").write(text)
PY
  echo "unseen: wrote the table into $MD" >&2
fi
