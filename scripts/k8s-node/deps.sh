#!/usr/bin/env bash
# Installs the Debian packages the node needs: `deps.sh build` (the Kubernetes build), `deps.sh
# run` (the node), `deps.sh image` (the image build). Only what is missing; apt waits for a
# lock another apt holds instead of failing.
set -euo pipefail
declare -A want=(
  [build]="golang-1.19-go rsync make openssl curl python3"
  [run]="etcd-server containerd runc containernetworking-plugins iptables conntrack socat openssl curl gcc libc6-dev python3 util-linux iproute2 prometheus dnsmasq-base"
  [image]="buildah fuse-overlayfs debootstrap python3"
)
pkgs=()
for kind in "$@"; do
  for p in ${want[$kind]:?"deps.sh: unknown set '$kind' (build, run, image)"}; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || pkgs+=("$p")
  done
done
((${#pkgs[@]} == 0)) && exit 0
echo "k8s-node deps: installing ${pkgs[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
A=(-o DPkg::Lock::Timeout=600 -qq)
apt-get "${A[@]}" update >&2 || true
apt-get "${A[@]}" install -y --no-install-recommends "${pkgs[@]}" >&2
