#!/usr/bin/env bash
# Smoke-runs the cargo-fuzz targets in fuzz/ for a short time each.
#   scripts/fuzz-smoke.sh            30 seconds per target
#   scripts/fuzz-smoke.sh 120        120 seconds per target
#   FUZZ_TARGETS="frame startup" scripts/fuzz-smoke.sh 10
# Needs cargo-fuzz and a nightly toolchain (sanitizers). cargo-fuzz is installed from
# crates.io when missing; a machine that cannot fuzz (no nightly, no cargo-fuzz after the
# install) fails this step: a fuzz step that did not fuzz must not pass.
# New inputs found go to a scratch directory; the seeds in fuzz/corpus/<target>/ are read only.
# A crash exits non-zero and leaves the reproducer in fuzz/artifacts/<target>/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../fuzz"

SECONDS_PER_TARGET=${1:-30}
if ! [[ $SECONDS_PER_TARGET =~ ^[0-9]+$ ]] || ((SECONDS_PER_TARGET == 0)); then
  echo "usage: $0 [seconds-per-target]  (a positive integer, default 30)" >&2
  exit 2
fi
ALL_TARGETS="frame startup frontend_msgs scram scram_mock auth_msgs backend_msgs replies userlist console sim"
read -r -a TARGETS <<<"${FUZZ_TARGETS:-$ALL_TARGETS}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz-smoke: cargo-fuzz is missing; installing it from crates.io" >&2
  cargo install cargo-fuzz --locked --quiet
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz-smoke: FAILED: cargo-fuzz could not be installed, so nothing was fuzzed" >&2
  exit 1
fi

# Which toolchain can build with sanitizers: the active one if it is nightly, else +nightly.
TOOLCHAIN=()
if rustc --version 2>/dev/null | grep -q nightly; then
  :
elif command -v rustup >/dev/null && rustup run nightly rustc --version >/dev/null 2>&1; then
  TOOLCHAIN=(+nightly)
else
  echo "fuzz-smoke: FAILED: no nightly toolchain (rustup toolchain install nightly), so" \
    "nothing was fuzzed" >&2
  exit 1
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
