#!/usr/bin/env bash
# Smoke-runs the cargo-fuzz targets in fuzz/ for a short time each.
#   scripts/fuzz-smoke.sh            30 seconds per target
#   scripts/fuzz-smoke.sh 120        120 seconds per target
#   FUZZ_TARGETS="frame startup" scripts/fuzz-smoke.sh 10
# Needs `cargo fuzz` (cargo install cargo-fuzz) and a nightly toolchain. Without them it only
# compiles the targets with `cargo check` on the current toolchain, says so, and exits 0.
# New inputs found go to a scratch directory; the seeds in fuzz/corpus/<target>/ are read only.
# A crash exits non-zero and leaves the reproducer in fuzz/artifacts/<target>/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

SECONDS_PER_TARGET=${1:-30}
if ! [[ $SECONDS_PER_TARGET =~ ^[0-9]+$ ]] || ((SECONDS_PER_TARGET == 0)); then
  echo "usage: $0 [seconds-per-target]  (a positive integer, default 30)" >&2
  exit 2
fi
read -r -a TARGETS <<<"${FUZZ_TARGETS:-frame startup frontend_msgs scram auth_msgs}"

# Which toolchain can build with sanitizers: the active one if it is nightly, else +nightly.
TOOLCHAIN=()
reason=""
if ! cargo fuzz --version >/dev/null 2>&1; then
  reason="cargo-fuzz is not installed; get it with: cargo install cargo-fuzz"
elif rustc --version 2>/dev/null | grep -q nightly; then
  :
elif command -v rustup >/dev/null && rustup run nightly rustc --version >/dev/null 2>&1; then
  TOOLCHAIN=(+nightly)
else
  reason="no nightly toolchain; get one with: rustup toolchain install nightly"
fi

if [[ -n $reason ]]; then
  echo "fuzz-smoke: NOT FUZZING: $reason" >&2
  echo "fuzz-smoke: only compiling the targets with 'cargo check' instead." >&2
  cargo check --bins
  echo "fuzz-smoke: the fuzz targets compile; they were NOT run: $reason" >&2
  exit 0
fi

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

for t in "${TARGETS[@]}"; do
  echo "fuzz-smoke: running '$t' for ${SECONDS_PER_TARGET}s"
  mkdir -p "$scratch/$t" "corpus/$t"
  # The first corpus directory receives new inputs; the seed directory is only read.
  cargo "${TOOLCHAIN[@]}" fuzz run "$t" "$scratch/$t" "corpus/$t" -- \
    -max_total_time="$SECONDS_PER_TARGET" -max_len=4096 -print_final_stats=1
done
echo "fuzz-smoke: ${#TARGETS[@]} target(s) ran ${SECONDS_PER_TARGET}s each without a crash."
