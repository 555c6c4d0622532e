#!/usr/bin/env bash
# Builds the manager binary the image ships — the statically linked (musl) release build — and
# prints its path. test/image/build.sh puts it in the image; test/bench/run.sh measures it, so
# the benchmark's figures are those of the binary users run.
#
#   test/image/build-binary.sh
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
log() { echo "[image $(date +%H:%M:%S)] $*" >&2; }
die() { echo "lws-rollout image: $*" >&2; exit 1; }
TARGET=x86_64-unknown-linux-musl

rustup target list --installed 2>/dev/null | grep -qx "$TARGET" \
  || rustup target add "$TARGET" >/dev/null 2>&1 \
  || die "the Rust target $TARGET is missing and 'rustup target add $TARGET' failed: the image needs a static binary"

# ring compiles a little C; without a musl cross compiler (musl-tools), the host's gcc does
# (ring's C needs no libc headers; the Rust toolchain links musl's own crt and libc).
if ! command -v x86_64-linux-musl-gcc >/dev/null 2>&1 && ! command -v musl-gcc >/dev/null 2>&1; then
  export CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-cc}"
fi
log "building the static manager binary ($TARGET, release)"
(cd "$REPO" && cargo build --locked --release --target "$TARGET" --bin lws-rollout) >&2
BIN="$REPO/target/$TARGET/release/lws-rollout"
# `ldd` says "statically linked" (static-pie) or "not a dynamic executable" (static).
ldd "$BIN" 2>&1 | grep -Eq "statically linked|not a dynamic executable" || die "$BIN is not statically linked"
echo "$BIN"
