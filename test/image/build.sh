#!/usr/bin/env bash
# Builds the manager image for linux/amd64 and linux/arm64 without a container engine, as one
# OCI image layout holding a multi-platform index, and prints the layout's path. The same image
# the Dockerfile describes: the release binary (glibc) at /lws-rollout on the files of
# gcr.io/distroless/cc-debian12 it needs — Debian's libc6 and libgcc-s1 of the same release,
# and the `nonroot` user — user 65532:65532, entrypoint /lws-rollout, the OCI labels, ports
# 8081 and 9443. Base images cannot be downloaded here, so the base layer is made from those
# Debian packages (test/image/versions.env) instead.
#
#   test/image/build.sh [OUT_DIR]     (default: target/image)
#   LWS_ROLLOUT_IMAGE_ARCHES="amd64"  (default "amd64 arm64")
#
# crane (test/tools/build-crane.sh) assembles it: `crane registry serve` on loopback (its PID
# recorded and stopped on exit), `crane append` (two layers on an empty OCI base), `crane
# mutate` (config), `crane index append` (the index), `crane pull --format=oci` (the layout).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$REPO/test/image/lib.sh"
log() { echo "[image $(date +%H:%M:%S)] $*" >&2; }
die() { echo "lws-rollout image: $*" >&2; exit 1; }
OUT="${1:-$REPO/target/image}"
ARCHES="${LWS_ROLLOUT_IMAGE_ARCHES:-amd64 arm64}"
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n1)
CACHE_ROOT="${LWS_ROLLOUT_CACHE:-$HOME/.cache/lws-rollout}"
DEBS="$CACHE_ROOT/image-debs"

CRANE=$("$REPO/test/tools/build-crane.sh")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/lws-rollout-image.XXXXXX")
REG_PID=
cleanup() {
  if [ -n "$REG_PID" ]; then kill "$REG_PID" 2>/dev/null || true; wait "$REG_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

tar_dir() { tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$1" -cf "$2" .; }

# base_layer ARCH TAR: glibc's shared libraries, libgcc_s, and the users of distroless'
# /etc/passwd and /etc/group.
base_layer() {
  local arch=$1 tarball=$2 root="$WORK/$1/base" libc libgcc
  libc=$(deb_fetch libc6 "$DEB_LIBC6_VERSION" "$arch" "$DEBS") || die "cannot fetch libc6 for $arch"
  libgcc=$(deb_fetch libgcc-s1 "$DEB_LIBGCC_S1_VERSION" "$arch" "$DEBS") || die "cannot fetch libgcc-s1 for $arch"
  deb_unpack "$WORK/$arch/debs" "$libc" "$libgcc"
  mkdir -p "$root/etc" "$root/tmp" "$root/home/nonroot"
  # Libraries and the dynamic loader only (no documentation, locales or charset modules).
  # (arm64's packages have no lib64/: find's complaint about it is no failure.)
  (cd "$WORK/$arch/debs" && { find lib lib64 usr/lib -maxdepth 2 \( -type f -o -type l \) -name '*.so*' 2>/dev/null || true; }) \
    | while read -r f; do mkdir -p "$root/$(dirname "$f")"; cp -a "$WORK/$arch/debs/$f" "$root/$f"; done
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$root/etc/group"
  chmod 1777 "$root/tmp"
  tar_dir "$root" "$tarball"
}

# binary_layer ARCH TAR: /lws-rollout, root-owned and world-executable (the non-root user runs
# it), without symbols (a third of the binary, of no use in a container).
binary_layer() {
  local arch=$1 tarball=$2 root="$WORK/$1/bin" bin strip=strip
  bin=$("$REPO/test/image/build-binary.sh" "$arch")
  mkdir -p "$root"
  install -m 0755 "$bin" "$root/lws-rollout"
  if [ "$arch" = arm64 ]; then
    strip="$("$REPO/test/tools/build-cross-aarch64.sh")/sysroot/usr/bin/aarch64-linux-gnu-strip"
    export LD_LIBRARY_PATH="$("$REPO/test/tools/build-cross-aarch64.sh")/sysroot/usr/lib/x86_64-linux-gnu"
  fi
  "$strip" --strip-all "$root/lws-rollout" || die "cannot strip the $arch binary"
  unset LD_LIBRARY_PATH
  tar_dir "$root" "$tarball"
}

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null \
  || echo $((20000 + RANDOM % 20000)))
"$CRANE" registry serve --address "127.0.0.1:$PORT" >"$WORK/registry.log" 2>&1 &
REG_PID=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/v2/" >/dev/null 2>&1 && break
  kill -0 "$REG_PID" 2>/dev/null || die "crane registry serve exited: $(tail -n 3 "$WORK/registry.log")"
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/v2/" >/dev/null || die "crane registry on 127.0.0.1:$PORT did not answer"

c() { "$CRANE" --insecure "$@" >>"$WORK/crane.log" 2>&1 || die "crane $1 failed: $(tail -n 5 "$WORK/crane.log")"; }
# Every architecture's binary in one cargo run first (their links side by side); binary_layer
# then finds each one built.
# shellcheck disable=SC2086
"$REPO/test/image/build-binary.sh" $ARCHES >/dev/null
MANIFESTS=()
for arch in $ARCHES; do
  mkdir -p "$WORK/$arch"
  base_layer "$arch" "$WORK/$arch/base.tar"
  binary_layer "$arch" "$WORK/$arch/bin.tar"
  REF="127.0.0.1:$PORT/lws-rollout:$VERSION-$arch"
  c append --oci-empty-base -f "$WORK/$arch/base.tar" -t "$REF"
  c append -b "$REF" -f "$WORK/$arch/bin.tar" -t "$REF"
  c mutate "$REF" -t "$REF" --set-platform "linux/$arch" --user 65532:65532 --entrypoint /lws-rollout \
    --exposed-ports 8081/tcp --exposed-ports 9443/tcp \
    -l org.opencontainers.image.title=lws-rollout \
    -l "org.opencontainers.image.description=LeaderWorkerSet controller with Kruise-Rollout compatible progressive delivery" \
    -l org.opencontainers.image.licenses=Apache-2.0 \
    -l "org.opencontainers.image.version=$VERSION" \
    -l org.opencontainers.image.source=https://github.com/lws-rollout/lws-rollout
  MANIFESTS+=(-m "$REF")
  log "linux/$arch image built"
done
INDEX="127.0.0.1:$PORT/lws-rollout:$VERSION"
c index append "${MANIFESTS[@]}" -t "$INDEX"
rm -rf "$OUT"
c pull --format=oci "$INDEX" "$OUT"
log "image layout: $OUT ($ARCHES)"
echo "$OUT"
