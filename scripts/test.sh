#!/usr/bin/env bash
# "Test it": the whole suite, as CI runs it (.ci/run execs this).
#   scripts/test.sh              run every step
#   scripts/test.sh fmt clippy   run only the named steps, in suite order
#   scripts/test.sh --list       list the steps
# Stops at the first failing step.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/shared.sh
source scripts/lib/shared.sh

# --- steps: one function each, listed in STEPS below --------------------------
step_deps() {
  bash scripts/ensure-deps.sh
}

step_fmt() {
  cargo fmt --check
}

# Dockerfile, Helm chart, deploy/, chaos manifests, Prometheus rules, tests/kind scripts:
# validated offline with real tools (helm, kubernetes-validate, validate_crs.py, promtool, a
# test kube-apiserver, ...). After `test`: the operator binary it runs is then already built.
step_packaging() {
  bash scripts/check-packaging.sh
}

# Every target as a plain build resolves the crate (the simulation only in the unit tests),
# then what only feature `sim` compiles: the library as the fuzz crate builds it and the
# model check in tests/sim/.
step_clippy() {
  cargo clippy --all-targets -- -D warnings
  cargo clippy --features sim --lib --test sim -- -D warnings
}

# A plain or release build compiles no simulation code (feature `sim` is off by default and
# src/sim/ is compiled only for tests or with the feature); cargo's feature resolution is
# checked, nothing is built.
step_release_features() {
  bash scripts/check-release-features.sh
}

# The committed PoolConfig CRD copies equal `droid-pool-operator crd`.
step_crd() {
  bash scripts/check-crd.sh
}

# Kubernetes 1.20 built once from Debian's `kubernetes` source package (scripts/k8s-node/build.sh,
# one `make` for the six binaries: 37 minutes cold measured on 2 cores beside other builds, instant when cached): the
# kube-apiserver the operator tests start (they find it where the shared build.sh keeps it),
# and the node the `stages` step runs. A failed build fails CI here, loudly.
step_kube_apiserver() {
  bash scripts/k8s-node/build.sh | tail -n 1
}

# The fault-injection tests (tests/it/faults.rs) time the pooler's refusals in milliseconds:
# they run after the rest, one at a time, so the other tests' load on a 2-core machine does not
# show up as pooler latency. `--features sim` builds the test targets that need the
# simulation (tests/sim/, `required-features`), which a plain `cargo test` skips; every step
# that builds tests passes it, so they share one build.
step_test() {
  cargo test --all-targets --features sim -- --skip faults::
  cargo test --features sim --test it faults:: -- --test-threads=1
}

# The deterministic simulation of the relay past the 200 programs per setup of `test`: 5,000
# more per setup (about a minute on one core, debug build), seeds after those `test` ran.
step_sim() {
  DROID_SIM_SEEDS=${DROID_SIM_SEEDS:-5000} DROID_SIM_BASE=${DROID_SIM_BASE:-200} \
    cargo test --features sim --lib sim::tests::every -- --nocapture
}

# Python and Node drivers through the pooler with prepared-statement tracking.
step_drivers() {
  bash scripts/driver-tests.sh
}

# The game days in their short forms, for droid-pool, pass conditions asserted: network
# faults (10 s each), and a switchover (primary stopped, standby promoted 2 s later) with and
# without failover.hold_timeout. They say SKIP where network namespaces or nft are not allowed.
step_gameday() {
  bash chaos/gameday/run.sh --short --targets droid-pool --no-publish --skip-unsupported
  bash chaos/gameday/switchover.sh --short --targets droid-pool,droid-pool-hold --no-publish --skip-unsupported
}

# Each cargo-fuzz target for 10 seconds (cargo-fuzz installed when missing; a machine that
# cannot fuzz fails the step).
step_fuzz() {
  bash scripts/fuzz-smoke.sh "${FUZZ_SECONDS:-10}"
}

# The benchmark harness end to end, a few seconds per run (bench/run.sh); it
# asserts nothing about speed, only that every target produced a number.
step_bench_smoke() {
  bash bench/run.sh --smoke
}

# Every stage of tests/kind/e2e.sh in real pods on a real node (STAGE_CLUSTER=node:
# scripts/k8s-node.sh, Kubernetes 1.20 from Debian's packages and source): the image built
# from the Dockerfile by buildah over stand-in base images (PGO=0 here, for time; the
# stand-ins and the builds are cached under ~/.cache/droid-pool), the chart, the sidecar app
# through the chart's helper, the prepared-statement checks, PoolConfig changes, a rolling
# restart under pgbench, the game day's partition, a drain mid-transaction and Prometheus.
# Each stage prints PASS or FAIL; one that cannot run fails. The node goes down at the end,
# and `down` fails the step when anything of it remains on the machine.
step_stages() {
  STAGE_CLUSTER=node PGO=${PGO:-0} bash tests/kind/e2e.sh
}

# name:function, in the order they run. Append new steps here.
STEPS=(
  "deps:step_deps"
  "fmt:step_fmt"
  "clippy:step_clippy"
  "crd:step_crd"
  "release-features:step_release_features"
  "kube-apiserver:step_kube_apiserver"
  "test:step_test"
  "sim:step_sim"
  "packaging:step_packaging"
  "drivers:step_drivers"
  "gameday:step_gameday"
  "fuzz:step_fuzz"
  "bench-smoke:step_bench_smoke"
  "stages:step_stages"
)

# --- runner -----------------------------------------------------------------
if [[ ${1:-} == --list ]]; then
  for entry in "${STEPS[@]}"; do
    echo "${entry%%:*}"
  done
  exit 0
fi

selected=()
for entry in "${STEPS[@]}"; do
  name=${entry%%:*}
  if [[ $# -eq 0 ]]; then
    selected+=("$entry")
    continue
  fi
  for wanted in "$@"; do
    if [[ $wanted == "$name" ]]; then
      selected+=("$entry")
    fi
  done
done
for wanted in "$@"; do
  known=0
  for entry in "${STEPS[@]}"; do
    [[ ${entry%%:*} == "$wanted" ]] && known=1
  done
  if [[ $known -eq 0 ]]; then
    echo "test.sh: unknown step '$wanted' (steps: $(bash "$0" --list | tr '\n' ' '))" >&2
    exit 2
  fi
done

CURRENT_STEP=""
on_exit() {
  local status=$?
  if [[ $status -ne 0 && -n $CURRENT_STEP ]]; then
    echo "test.sh: step '$CURRENT_STEP' FAILED (exit $status)" >&2
  fi
}
trap on_exit EXIT

total=${#selected[@]}
index=0
suite_start=$SECONDS
for entry in "${selected[@]}"; do
  index=$((index + 1))
  CURRENT_STEP=${entry%%:*}
  fn=${entry#*:}
  echo
  echo "==== [$index/$total] $CURRENT_STEP"
  step_start=$SECONDS
  "$fn"
  echo "==== [$index/$total] $CURRENT_STEP ok ($((SECONDS - step_start))s)"
done
CURRENT_STEP=""

echo
echo "test.sh: ran ${total} step(s) in $((SECONDS - suite_start))s"
echo "test.sh: all steps passed"
