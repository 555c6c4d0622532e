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
# Profile-guided optimisation (docs/performance.md, "PGO"): pgo/lws-rollout.profdata.xz, written by
# test/bench/pgo.sh, lays out and optimises the code by what the controller runs. A profile is
# used only by a rustc of the LLVM major version that wrote it (pgo/llvm-major); with another, or
# without xz, or LWS_ROLLOUT_PGO=off (to measure without it), the binary is built without it:
# the same behaviour, only slower.
# Link order (docs/performance.md, "Link order"): with the profile, the functions that ran in
# training are linked first (pgo/lws-rollout.order, written by test/bench/pgo-order.sh), so the
# code the manager runs fills few pages and the rest of the binary is never mapped in; and
# relocations are packed (RELR), so their table is a small fraction of its size held resident. This
# takes the toolchain's own lld (rustc ships it as gcc-ld/ld.lld); without it, or without the
# order file, the system linker links as before. The order is copied under a name of its
# content: cargo does not see linker inputs change, a new RUSTFLAGS it does.
link_in_order() {
  local order="$REPO/pgo/lws-rollout.order"
  local gcc_ld
  gcc_ld="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/gcc-ld"
  if [ "${LWS_ROLLOUT_LINK_ORDER:-on}" = off ]; then
    log "LWS_ROLLOUT_LINK_ORDER=off: linking in the linker's own order"
  elif [ ! -x "$gcc_ld/ld.lld" ]; then
    log "linking in the linker's own order: this toolchain has no $gcc_ld/ld.lld"
  elif [ ! -f "$order" ]; then
    log "linking in the linker's own order: there is no $order (test/bench/pgo.sh writes it)"
  else
    local copy
    copy="$REPO/target/pgo/lws-rollout.$(sha256sum "$order" | cut -c1-16).order"
    [ -f "$copy" ] || { mkdir -p "$(dirname "$copy")"; cp "$order" "$copy"; }
    RUSTFLAGS="$RUSTFLAGS -Clink-arg=-B$gcc_ld -Clink-arg=-fuse-ld=lld"
    RUSTFLAGS="$RUSTFLAGS -Clink-arg=-Wl,-z,pack-relative-relocs"
    RUSTFLAGS="$RUSTFLAGS -Clink-arg=-Wl,--symbol-ordering-file=$copy -Clink-arg=-Wl,--no-warn-symbol-ordering"
    export RUSTFLAGS
  fi
}
PROFILE_XZ="$REPO/pgo/lws-rollout.profdata.xz"
PROFILE="$REPO/target/pgo/lws-rollout.profdata"
LLVM_MAJOR=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
PROFILE_LLVM=$(cat "$REPO/pgo/llvm-major" 2>/dev/null || echo '?')
if [ "${LWS_ROLLOUT_PGO:-on}" = off ]; then
  log "LWS_ROLLOUT_PGO=off: building without the PGO profile"
elif [ "$LLVM_MAJOR" != "$PROFILE_LLVM" ]; then
  log "building without the PGO profile: LLVM $PROFILE_LLVM wrote it, this rustc has LLVM $LLVM_MAJOR (rustc 1.95 has 22)"
elif [ ! -f "$PROFILE_XZ" ]; then
  log "building without the PGO profile: there is no $PROFILE_XZ (test/bench/pgo.sh writes it)"
elif ! command -v xz >/dev/null 2>&1; then
  log "building without the PGO profile: no xz to unpack $PROFILE_XZ"
else
  # Unpacked only when the packed one is newer; cargo rebuilds when the unpacked one changes.
  if [ "$PROFILE_XZ" -nt "$PROFILE" ]; then
    mkdir -p "$(dirname "$PROFILE")"
    xz -dc "$PROFILE_XZ" > "$PROFILE.part" && mv "$PROFILE.part" "$PROFILE"
  fi
  # A function changed since the profile was written is optimised without it; LLVM would
  # otherwise warn once per such function.
  export RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-Cprofile-use=$PROFILE -Cllvm-args=-no-pgo-warn-mismatch"
  link_in_order
fi
log "building the static manager binary ($TARGET, release)"
(cd "$REPO" && cargo build --locked --release --target "$TARGET" --bin lws-rollout) >&2
BIN="$REPO/target/$TARGET/release/lws-rollout"
# `ldd` says "statically linked" (static-pie) or "not a dynamic executable" (static).
ldd "$BIN" 2>&1 | grep -Eq "statically linked|not a dynamic executable" || die "$BIN is not statically linked"
echo "$BIN"
