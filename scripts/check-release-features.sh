#!/usr/bin/env bash
# Fails when a plain or release build (`cargo build [--release]`, default features) would
# compile the simulation (src/sim/, feature `sim`): it is test code, not product code.
# Two facts make that so, both checked here without building anything:
#   - the features cargo resolves for droid-pool by default do not include `sim`;
#   - src/lib.rs declares `mod sim` only under `cfg(any(test, feature = "sim"))`, and a
#     release build is not a test build.
# (Code outside src/sim that named `crate::sim` would not compile in the plain build, which
# the clippy and test steps make.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fail=0
# `{f}`: the features enabled on the package, comma-separated, as `cargo build` resolves them.
features=$(cargo tree --quiet --locked --edges normal --depth 0 --format '{f}' --package droid-pool)
if [[ ,$features, == *,sim,* ]]; then
  echo "release-features: a default build enables feature sim (features: $features);" \
    "drop it from [features] default in Cargo.toml" >&2
  fail=1
fi

gate=$(grep -B1 -E '^pub mod sim;' src/lib.rs | head -n 1)
if [[ $gate != '#[cfg(any(test, feature = "sim"))]' ]]; then
  echo "release-features: src/lib.rs must declare 'pub mod sim;' under" \
    "#[cfg(any(test, feature = \"sim\"))], found: '$gate'" >&2
  fail=1
fi

if ((fail)); then
  exit 1
fi
echo "release-features: a default build enables [$features], no sim"
