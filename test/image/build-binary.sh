#!/usr/bin/env bash
# Builds the manager binary the image ships — the release build for glibc (`*-linux-gnu`, run
# on distroless/cc) — and prints its path. One build everywhere: test/image/build.sh puts it
# in the image, test/run-tests.sh runs the e2e suite against it, test/bench/run.sh measures
# it.
#
#   test/image/build-binary.sh [amd64|arm64]...     (default: amd64)
#
# Several architectures are built by one cargo invocation, which prints one path per line in
# the order asked: each release build ends in a single-threaded fat-LTO link, and one cargo
# runs the two links side by side on the two cores instead of one after the other.
# arm64 is cross-built on an amd64 machine with Debian's cross toolchain
# (test/tools/build-cross-aarch64.sh).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { echo "[image $(date +%H:%M:%S)] $*" >&2; }
die() { echo "lws-rollout image: $*" >&2; exit 1; }
[ "$(uname -m)" = x86_64 ] || die "builds on an x86_64 machine only (this is $(uname -m))"
[ $# -gt 0 ] || set -- amd64

TARGETS=()
for ARCH in "$@"; do
  case "$ARCH" in
    amd64) TARGET=x86_64-unknown-linux-gnu ;;
    arm64) TARGET=aarch64-unknown-linux-gnu ;;
    *) die "unknown architecture $ARCH (amd64 or arm64)" ;;
  esac
  rustup target list --installed 2>/dev/null | grep -qx "$TARGET" \
    || rustup target add "$TARGET" >/dev/null 2>&1 \
    || die "the Rust target $TARGET is missing and 'rustup target add $TARGET' failed"
  if [ "$ARCH" = arm64 ]; then
    CROSS=$("$REPO/test/tools/build-cross-aarch64.sh")
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER="$CROSS/aarch64-linux-gnu-gcc"
    export CC_aarch64_unknown_linux_gnu="$CROSS/aarch64-linux-gnu-gcc"
    export AR_aarch64_unknown_linux_gnu="$CROSS/aarch64-linux-gnu-ar"
  fi
  TARGETS+=("$TARGET")
done
log "building the manager (${TARGETS[*]}, release)"
(cd "$REPO" && cargo build --locked --release "${TARGETS[@]/#/--target=}" --bin lws-rollout) >&2
for TARGET in "${TARGETS[@]}"; do
  echo "${CARGO_TARGET_DIR:-$REPO/target}/$TARGET/release/lws-rollout"
done
