#!/usr/bin/env bash
# Fails when a committed copy of the PoolConfig CRD differs from what
# `droid-pool-operator crd` prints. `scripts/check-crd.sh --write` refreshes both copies.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

copies=(deploy/crds/poolconfig.yaml charts/droid-pool/crds/poolconfig.yaml)
generated=$(mktemp)
trap 'rm -f "$generated"' EXIT
cargo run --quiet --bin droid-pool-operator -- crd >"$generated"

if [[ ${1:-} == --write ]]; then
  for f in "${copies[@]}"; do
    mkdir -p "$(dirname "$f")"
    cp "$generated" "$f"
  done
  echo "wrote ${copies[*]}"
  exit 0
fi

status=0
for f in "${copies[@]}"; do
  if ! diff -u "$f" "$generated"; then
    echo "STALE: $f differs from 'droid-pool-operator crd'; run scripts/check-crd.sh --write" >&2
    status=1
  fi
done
[[ $status -eq 0 ]] && echo "CRD copies are current: ${copies[*]}"
exit $status
