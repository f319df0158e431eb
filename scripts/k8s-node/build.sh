#!/usr/bin/env bash
# Builds Kubernetes 1.20.2 (kube-apiserver, kubelet, kube-controller-manager, kube-scheduler,
# kube-proxy, kubectl) from Debian bookworm's `kubernetes` source package, the only Kubernetes
# source with its vendor/ tree in Debian's archive, with Debian's golang-1.19 (GOPATH mode,
# GOPROXY=off, CGO_ENABLED=0): nothing but Debian's archive is needed.
#
#   scripts/k8s-node/build.sh [CACHE_DIR]   prints the directory of the six binaries last
#
# Cached: CACHE_DIR (default ${XDG_CACHE_HOME:-$HOME/.cache}/droid-pool/kube-apiserver, where
# CI's kube-apiserver step keeps its binary) holds bin/; a second run is instant. Cold: one
# `make` for all six, 37 minutes measured on 2 cores shared with other builds, ~1.5 GB peak memory, ~3 GB disk while it runs.
set -euo pipefail
W=$(realpath -m "${1:-${XDG_CACHE_HOME:-$HOME/.cache}/droid-pool/kube-apiserver}")
BINS=(kube-apiserver kubelet kube-controller-manager kube-scheduler kube-proxy kubectl)
missing() {
  local b
  for b in "${BINS[@]}"; do [[ -x $W/bin/$b ]] || echo "$b"; done
}
if [[ -z $(missing) ]]; then
  echo "$W/bin"
  exit 0
fi
here=$(dirname "$(realpath "$0")")
bash "$here/deps.sh" build >&2
mkdir -p "$W"/apt/parts "$W"/apt/lists/partial "$W"/src "$W"/bin
cat >"$W/apt/parts/src.sources" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
K=$(find "$W/src" -maxdepth 1 -type d -name 'kubernetes-1.20*' | head -n1)
if [[ -z $K ]]; then
  O=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$W/apt/parts" -o "Dir::State::Lists=$W/apt/lists")
  apt-get "${O[@]}" update -qq >&2
  (cd "$W/src" && apt-get "${O[@]}" source --download-only kubernetes >/dev/null 2>&1 && tar xzf kubernetes_*.orig.tar.gz)
  K=$(find "$W/src" -maxdepth 1 -type d -name 'kubernetes-1.20*' | head -n1)
fi
# The vendored reflect2 v1.0.1 uses the pre-go1.18 reflect.mapiterinit ABI: built with go >= 1.18
# it segfaults at run time. The upstream go1.18 fix: mapiterinit fills a caller-allocated hiter.
R="$K/vendor/github.com/modern-go/reflect2"
if ! grep -q 'it := new(hiter)' "$R/unsafe_map.go"; then
  python3 - "$R" <<'PY'
import sys; r = sys.argv[1]
p = r + '/unsafe_link.go'; s = open(p).read()
s = s.replace("func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer) *hiter",
              "func mapiterinit(rtype unsafe.Pointer, m unsafe.Pointer, it *hiter)")
s = s.replace("\t// rest fields are ignored\n}", "\tt, h, buckets, bptr unsafe.Pointer\n\toverflow, oldoverflow *[]unsafe.Pointer\n\tstartBucket uintptr\n\toffset uint8\n\twrapped bool\n\tB, i uint8\n\tbucket, checkBucket uintptr\n}")
open(p, 'w').write(s)
p = r + '/unsafe_map.go'; s = open(p).read()
s = s.replace("\treturn &UnsafeMapIterator{\n\t\thiter:      mapiterinit(type2.rtype, *(*unsafe.Pointer)(obj)),",
              "\tit := new(hiter)\n\tmapiterinit(type2.rtype, *(*unsafe.Pointer)(obj), it)\n\treturn &UnsafeMapIterator{\n\t\thiter:      it,")
open(p, 'w').write(s)
PY
fi
grep -q 'm unsafe.Pointer, it \*hiter)' "$R/unsafe_link.go" && grep -q 'it := new(hiter)' "$R/unsafe_map.go"
# Kubernetes 1.20 builds in GOPATH mode.
mkdir -p "$W/gopath/src/k8s.io"
ln -sfn "$K" "$W/gopath/src/k8s.io/kubernetes"
what=()
for b in $(missing); do what+=("cmd/$b"); done
echo "k8s-node build: ${what[*]} (one make; tens of minutes cold on 2 cores)" >&2
cd "$W/gopath/src/k8s.io/kubernetes"
env PATH="/usr/lib/go-1.19/bin:$PATH" GOPATH="$W/gopath" GOCACHE="$W/gocache" CGO_ENABLED=0 \
  GOPROXY=off GOFLAGS= make WHAT="${what[*]}" >&2
for b in $(missing); do cp "_output/local/bin/linux/amd64/$b" "$W/bin/"; done
rm -rf "$W/gocache" "$K/_output"
[[ -z $(missing) ]] || { echo "k8s-node build: still missing: $(missing)" >&2; exit 1; }
"$W/bin/kubelet" --version >&2
echo "$W/bin"
