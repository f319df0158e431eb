#!/usr/bin/env bash
# Builds the droid-pool binary with profile-guided optimisation (PGO): an instrumented build
# runs a short pgbench workload through itself against a throwaway PostgreSQL, and the
# release build is then laid out by that profile. Used by bench/run.sh and the Dockerfile, so
# the binary benchmarked is the binary shipped.
#
#   scripts/build-pgo.sh          writes target/pgo/droid-pool and target/pgo/BUILD (one line:
#                                 how it was built); prints the binary's path last on stdout
#   PGO=0 scripts/build-pgo.sh    the plain release build, in the same place
#
# Why: the relay's hot code is small but spread out. After every sleep it starts cold, and at
# one client that is most of its user time. With the profile, callgrind counts a third fewer
# instructions and about half the instruction-cache lines per transaction at one client, and a
# quarter fewer instructions at 50 (docs/performance.md, sessions 6 and 7).
#
# Needs llvm-profdata of rustc's own LLVM (rustup's llvm-tools component, added here when
# rustup is there) and PostgreSQL with pgbench (scripts/ensure-deps.sh). Without either, or if
# the training fails, it builds the plain release binary and says why, on stderr and in BUILD.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
OUT_DIR=$ROOT/target/pgo
GEN_TARGET=$ROOT/target/pgo-gen
USE_TARGET=$ROOT/target/pgo-use

say() {
  echo "build-pgo: $*" >&2
}

mkdir -p "$OUT_DIR"

plain() {
  say "plain release build ($1)"
  cargo build --release --locked --bin droid-pool >&2
  install -m 0755 "$ROOT/target/release/droid-pool" "$OUT_DIR/droid-pool"
  echo "plain release build (no PGO: $1)" >"$OUT_DIR/BUILD"
  echo "$OUT_DIR/droid-pool"
  exit 0
}

if [[ ${PGO:-1} == 0 ]]; then
  plain "PGO=0"
fi

# --- llvm-profdata of rustc's LLVM ------------------------------------------------------
host=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA=$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata
if [[ ! -x $PROFDATA ]] && command -v rustup >/dev/null 2>&1; then
  say "adding rustup's llvm-tools (llvm-profdata)"
  rustup component add llvm-tools >&2 || true
fi
[[ -x $PROFDATA ]] || plain "llvm-profdata not found at $PROFDATA"

# --- a throwaway PostgreSQL ---------------------------------------------------------------
PGLIB_NAME=build-pgo
# shellcheck source=scripts/lib/pg.sh
source scripts/lib/pg.sh
pg_find_bin || plain "PostgreSQL not found"
PGBENCH=$(command -v pgbench 2>/dev/null || echo "$PG_BIN/pgbench")
[[ -x $PGBENCH ]] || plain "pgbench not found"

TMP=$(mktemp -d /tmp/droid-pgo.XXXXXX)
PG_TMP=$TMP
PG_STARTED=0
PIDS=()

stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}

# shellcheck disable=SC2317 # invoked by the EXIT trap
cleanup() {
  local status=$?
  trap - EXIT
  stop_all
  if [[ $PG_STARTED -eq 1 ]]; then
    pg_stop "$TMP/data" immediate
  fi
  rm -rf "$TMP"
  exit "$status"
}
trap cleanup EXIT

# --- 1. the instrumented build --------------------------------------------------------------
# A fixed path, so that the instrumented build's flags, and so its cached artefacts, stay the
# same from one run to the next.
RAW=$OUT_DIR/profraw
rm -rf "$RAW"
mkdir -p "$RAW"
say "instrumented build (target/pgo-gen)"
RUSTFLAGS="-Cprofile-generate=$RAW" cargo build --release --locked --bin droid-pool \
  --target-dir "$GEN_TARGET" >&2

# --- 2. training: the benchmark's workloads, a few seconds each ------------------------------
train() {
  pg_own_tmp
  pg_initdb "$TMP/data" || return 1
  printf "listen_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\nmax_connections = 200\n" \
    "$TMP" >>"$TMP/data/postgresql.conf"
  pg_start "$TMP/data" || return 1
  PG_STARTED=1
  "$PGBENCH" -i -s 5 -q -h 127.0.0.1 -p "$PG_PORT" -U postgres postgres >"$TMP/init.log" 2>&1 \
    || { cat "$TMP/init.log" >&2; return 1; }

  printf 'log:\n  events: false\nclient:\n  max_connections: 2000\n' >"$TMP/droid-pool.yaml"
  local port tp_port admin tp_admin
  next_port; port=$FREE_PORT
  next_port; tp_port=$FREE_PORT
  next_port; admin=$FREE_PORT
  next_port; tp_admin=$FREE_PORT
  local args=(--server-port "$PG_PORT" --pool-size 20 --mode transaction --config "$TMP/droid-pool.yaml")
  "$GEN_TARGET/release/droid-pool" --port "$port" --admin-port "$admin" "${args[@]}" \
    >"$TMP/plain.log" 2>&1 &
  PIDS+=($!)
  "$GEN_TARGET/release/droid-pool" --port "$tp_port" --admin-port "$tp_admin" "${args[@]}" \
    --track-prepared >"$TMP/tp.log" 2>&1 &
  PIDS+=($!)
  local p
  for p in "$port" "$tp_port"; do
    for _ in $(seq 1 100); do
      port_in_use "$p" && break
      sleep 0.1
    done
  done

  local run
  for run in "$port -c 50 -j 2 -T 4 -S -M simple" \
    "$port -c 50 -j 2 -T 4 -S -M extended" \
    "$tp_port -c 50 -j 2 -T 4 -S -M prepared" \
    "$port -c 20 -j 2 -T 4" \
    "$port -c 1 -T 3 -S -M simple" \
    "$port -c 200 -j 2 -T 3 -S"; do
    # shellcheck disable=SC2086 # one word per pgbench argument
    set -- $run
    say "training: pgbench -p $*"
    "$PGBENCH" -h 127.0.0.1 -U postgres -n -p "$@" postgres >"$TMP/pgbench.log" 2>&1 \
      || { cat "$TMP/pgbench.log" >&2; return 1; }
  done
  # A clean exit writes the profile (SIGTERM: drain, then return from main).
  stop_all
}

if ! train; then
  plain "the training run failed"
fi
shopt -s nullglob
raws=("$RAW"/*.profraw)
shopt -u nullglob
if [[ ${#raws[@]} -eq 0 ]]; then
  plain "the training run wrote no profile"
fi

# --- 3. merge, and the release build that uses the profile --------------------------------
"$PROFDATA" merge -o "$TMP/droid-pool.profdata" "${raws[@]}" >&2 || plain "llvm-profdata merge failed"
# Named by its content: cargo does not look into the file, only at the flags naming it.
PROFILE=$OUT_DIR/droid-pool-$(sha256sum "$TMP/droid-pool.profdata" | cut -c1-16).profdata
rm -f "$OUT_DIR"/droid-pool-*.profdata
mv "$TMP/droid-pool.profdata" "$PROFILE"
say "release build with the profile (target/pgo-use)"
RUSTFLAGS="-Cprofile-use=$PROFILE" cargo build --release --locked --bin droid-pool \
  --target-dir "$USE_TARGET" >&2
install -m 0755 "$USE_TARGET/release/droid-pool" "$OUT_DIR/droid-pool"
echo "PGO ($(rustc --version | cut -d' ' -f2), trained on pgbench -S simple/extended/prepared, TPC-B, 1 and 200 clients)" \
  >"$OUT_DIR/BUILD"
say "done: $(cat "$OUT_DIR/BUILD")"
echo "$OUT_DIR/droid-pool"
