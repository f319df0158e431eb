#!/usr/bin/env bash
# The images of the node's stages, without a registry or a container engine daemon:
#   1. stand-in base images from Debian's archive (images/*.Containerfile), under the names the
#      Dockerfile and the stage manifests use: rust:<RUST_VERSION>-bookworm,
#      gcr.io/distroless/cc-debian12:nonroot, postgres:16-alpine; plus the node's pause image
#   2. droid-pool:e2e from the project's Dockerfile itself, built by Debian's buildah over them
#   3. each exported as a docker-archive under CACHE/images/ (what `up` imports into the node)
#
#   scripts/k8s-node/images.sh [--build-arg K=V ...]   e.g. --build-arg PGO=0 (CI: no PGO run)
#
# Cached in ${XDG_CACHE_HOME:-$HOME/.cache}/droid-pool/k8s-node/: buildah's storage, the
# Debian rootfs, the Dockerfile's cache mounts (cargo registry, target/), and each stand-in
# (rebuilt only when its Containerfile changes). Prints the image archives' directory last.
set -euo pipefail
here=$(dirname "$(realpath "$0")")
root=$(realpath "$here/../..")
CACHE=$(realpath -m "${XDG_CACHE_HOME:-$HOME/.cache}/droid-pool/k8s-node")
OUT=$CACHE/images
mkdir -p "$CACHE/buildah-tmp" "$OUT"
bash "$here/deps.sh" image run >&2
log() { echo "k8s-node images: $*" >&2; }
# Buildah's own storage under the cache, not the machine's /var/lib/containers; its cache
# mounts (RUN --mount=type=cache) live under TMPDIR, so TMPDIR is in the cache too.
export TMPDIR=$CACHE/buildah-tmp
B=(buildah --root "$CACHE/buildah/storage" --runroot "$CACHE/buildah/run" --storage-driver overlay)
BUD=(bud --pull-never --isolation chroot --network host --layers)
have() { "${B[@]}" inspect --type image "$1" >/dev/null 2>&1; }
# stamp NAME INPUT...: true when NAME was built from exactly these inputs.
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

# --- Debian bookworm, minbase, from Debian's archive -------------------------------------------
base=localhost/droid-pool-standin/debian:bookworm
if ! have "$base"; then
  rootfs=$CACHE/rootfs-bookworm
  rm -rf "$rootfs"
  log "debootstrap bookworm (minbase)"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  c=$("${B[@]}" from scratch)
  mnt=$("${B[@]}" mount "$c")
  cp -a "$rootfs"/. "$mnt"/
  "${B[@]}" umount "$c" >/dev/null
  "${B[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$c"
  "${B[@]}" commit --quiet "$c" "$base" >/dev/null
  "${B[@]}" rm "$c" >/dev/null
  rm -rf "$rootfs"
fi

# --- the stand-ins ---------------------------------------------------------------------------
rust_version=$(sed -n 's/^ARG RUST_VERSION=//p' "$root/Dockerfile")
host_rust=$(rustc --version | awk '{print $2}')
[[ $host_rust == "$rust_version" || $host_rust == "$rust_version".* ]] \
  || { log "the Dockerfile wants Rust $rust_version, this machine's rustc is $host_rust"; exit 1; }
standin() { # NAME CONTAINERFILE [CONTEXT]
  local name=$1 file=$here/images/$2 ctx=${3:-$here/images} s
  s=$(stamp_of "$file" "$here/images/docker-entrypoint.sh")
  if have "$name" && [[ $(cat "$CACHE/stamp-$2" 2>/dev/null) == "$s" ]]; then return 0; fi
  log "stand-in $name ($2)"
  "${B[@]}" "${BUD[@]}" -f "$file" -t "$name" "$ctx" >"$CACHE/build-$2.log" 2>&1 \
    || { tail -30 "$CACHE/build-$2.log" >&2; exit 1; }
  echo "$s" >"$CACHE/stamp-$2"
}
# The Rust stand-in's context: this machine's toolchain without its docs.
if ! have "docker.io/library/rust:$rust_version-bookworm" \
  || [[ $(cat "$CACHE/stamp-rust.Containerfile" 2>/dev/null) != "$(stamp_of "$here/images/rust.Containerfile" "$here/images/docker-entrypoint.sh")" ]]; then
  ctx=$CACHE/rust-context
  rm -rf "$ctx"
  mkdir -p "$ctx/toolchain"
  sysroot=$(rustc --print sysroot)
  cp -a "$sysroot/bin" "$sysroot/lib" "$ctx/toolchain/"
  [[ -d $sysroot/libexec ]] && cp -a "$sysroot/libexec" "$ctx/toolchain/"
  cp "$here/images/rust.Containerfile" "$ctx/"
  mkdir -p "$ctx/extra-ca"
  cp /usr/local/share/ca-certificates/*.crt "$ctx/extra-ca/" 2>/dev/null || true
  standin "docker.io/library/rust:$rust_version-bookworm" rust.Containerfile "$ctx"
  rm -rf "$ctx"
fi
standin gcr.io/distroless/cc-debian12:nonroot distroless.Containerfile
standin docker.io/library/postgres:16-alpine postgres.Containerfile
# The pod sandbox: a static 12-line pause.
if ! have localhost/pause:1.0; then
  ctx=$CACHE/pause-context
  mkdir -p "$ctx"
  gcc -static -O2 -o "$ctx/pause" "$here/pause.c"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' >"$ctx/Containerfile"
  "${B[@]}" "${BUD[@]}" -t localhost/pause:1.0 "$ctx" >"$CACHE/build-pause.log" 2>&1 \
    || { tail -20 "$CACHE/build-pause.log" >&2; exit 1; }
fi

# --- the project's Dockerfile ----------------------------------------------------------------
# Each build leaves its predecessor's layers behind (and a failed one its working container):
# a machine that runs the stages often fills its disk. Below 20 GiB free, everything no tagged
# image needs goes first (the build stage's layer cache with it: that costs one apt-get).
"${B[@]}" rm --all >/dev/null 2>&1 || true
free_gib() { df -P --block-size=1G "$CACHE" | awk 'NR==2 {print $4}'; }
if (($(free_gib) < 20)); then
  log "$(free_gib) GiB free under $CACHE: pruning images no tag needs"
  "${B[@]}" rmi --prune >/dev/null 2>&1 || true
fi
(($(free_gib) >= 8)) || { log "only $(free_gib) GiB free under $CACHE; the build needs about 8"; exit 1; }
log "droid-pool:e2e from $root/Dockerfile ($*)"
start=$SECONDS
"${B[@]}" "${BUD[@]}" "$@" -f "$root/Dockerfile" -t docker.io/library/droid-pool:e2e "$root" \
  >"$CACHE/build-droid-pool.log" 2>&1 || { tail -40 "$CACHE/build-droid-pool.log" >&2; exit 1; }
log "droid-pool:e2e built in $((SECONDS - start))s"

# --- archives for the node -------------------------------------------------------------------
for img in localhost/pause:1.0 docker.io/library/postgres:16-alpine docker.io/library/droid-pool:e2e; do
  f=$OUT/$(echo "$img" | tr '/:' '__').tar
  id=$("${B[@]}" inspect --type image --format '{{.FromImageID}}' "$img")
  [[ -f $f && $(cat "$f.id" 2>/dev/null) == "$id" ]] && continue
  rm -f "$f"
  "${B[@]}" push --quiet "$img" "docker-archive:$f:$img" >/dev/null
  echo "$id" >"$f.id"
done
echo "$OUT"
