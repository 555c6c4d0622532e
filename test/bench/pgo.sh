#!/usr/bin/env bash
# Regenerates the profile the shipped binary is optimised with (profile-guided optimisation:
# pgo/lws-rollout.profdata.xz, docs/performance.md "PGO"). Builds an instrumented static binary,
# drives it through the benchmark's scenarios at training sizes (smaller than the measured
# ones, and every release style), merges what it counted, and records the LLVM version that
# wrote the profile (test/image/build-binary.sh uses the profile only with a rustc of that LLVM).
#
#   test/bench/pgo.sh            then rebuild (test/image/build-binary.sh) and commit pgo/
#                                (the profile and the link order written from it)
#
# Rerun it when the code a release or an LWS reconcile runs has changed much: a stale profile
# still builds (functions that changed are just optimised without it), it only helps less.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
. test/cluster/lib.sh
TARGET=x86_64-unknown-linux-musl
GEN_DIR="$REPO/target/pgo-gen"
RAW="$GEN_DIR/raw"

command -v xz >/dev/null 2>&1 || die "no xz: the profile is checked in packed with xz"
rustup component add llvm-tools >/dev/null 2>&1 || die "'rustup component add llvm-tools' failed: llvm-profdata is needed to merge the profile"
SYSROOT=$(rustc --print sysroot)
PROFDATA=$(ls "$SYSROOT"/lib/rustlib/*/bin/llvm-profdata 2>/dev/null | head -1)
[ -x "$PROFDATA" ] || die "no llvm-profdata under $SYSROOT after adding llvm-tools"

if ! command -v x86_64-linux-musl-gcc >/dev/null 2>&1 && ! command -v musl-gcc >/dev/null 2>&1; then
  export CC_x86_64_unknown_linux_musl="${CC_x86_64_unknown_linux_musl:-cc}"
fi
log "building the instrumented manager ($TARGET, release, -Cprofile-generate)"
rm -rf "$RAW"
mkdir -p "$RAW"
CARGO_TARGET_DIR="$GEN_DIR" RUSTFLAGS="-Cprofile-generate=$RAW" \
  cargo build --locked --release --target "$TARGET" --bin lws-rollout >&2
GEN_BIN="$GEN_DIR/$TARGET/release/lws-rollout"

# Each manager process writes its counters when it exits (SIGTERM from the bench's teardown).
export LLVM_PROFILE_FILE="$RAW/%p-%m.profraw"
export LWS_BENCH_MANAGER_BIN="$GEN_BIN"
log "training: every scenario, then releases in the two other styles"
test/bench/run.sh --sides ours --lws 20 --groups 3 --size 3 --noise-pods 1000 \
  --rollouts 4 --release-style canary >/dev/null
for style in bluegreen partition; do
  test/bench/run.sh --sides ours --scenarios s5 --rollouts 3 --release-style "$style" >/dev/null
done
ls "$RAW"/*.profraw >/dev/null 2>&1 || die "the instrumented manager wrote no profile under $RAW"

mkdir -p target/pgo pgo
"$PROFDATA" merge -o target/pgo/lws-rollout.profdata "$RAW"/*.profraw
xz -9 -T1 -c target/pgo/lws-rollout.profdata > pgo/lws-rollout.profdata.xz
rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p' > pgo/llvm-major
log "wrote pgo/lws-rollout.profdata.xz ($(du -h pgo/lws-rollout.profdata.xz | cut -f1), LLVM $(cat pgo/llvm-major))"

# The link order (docs/performance.md, "Link order") names functions as this profile's build
# names them, so it is written from that build.
log "building with the new profile to write the link order"
ORDER_BIN=$(LWS_ROLLOUT_LINK_ORDER=off test/image/build-binary.sh)
test/bench/pgo-order.sh "$ORDER_BIN" target/pgo/lws-rollout.profdata > pgo/lws-rollout.order
log "wrote pgo/lws-rollout.order ($(wc -l < pgo/lws-rollout.order) functions); test/image/build-binary.sh links by it"
