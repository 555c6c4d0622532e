#!/usr/bin/env bash
# The benchmark: our LWS controller and the upstream LWS controller (test/upstream/versions.env:
# v0.9.0), one after the other,
# each alone on a fresh local control plane, same scenarios, one table (docs/performance.md).
#
#   test/bench/run.sh [lws-bench flags]     e.g. --lws 50 --noise-pods 2000, --sides upstream,
#                                           --scenarios s1,s5 (S5, releases, runs on ours only)
#
# Builds what it needs (our manager as the image ships it — the release build,
# test/image/build-binary.sh — and the driver in release mode, the control plane and the
# upstream manager from pinned Go modules, cached under ~/.cache/lws-rollout), then runs
# target/release/lws-bench. Every process it starts is recorded and stopped on every exit path.
# Output: the Markdown table on stdout; JSON and each side's logs under target/bench/.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
. test/cluster/lib.sh
command -v cargo >/dev/null 2>&1 || die "no cargo on PATH: install Rust >= 1.92 (rustup) to build lws-rollout"

BIN=$(test/cluster/build.sh)
UPSTREAM_BIN=$(test/upstream/build.sh)
# shellcheck source=../upstream/versions.env
. test/upstream/versions.env
export LWS_UPSTREAM_VERSION
log "building lws-rollout (the image's amd64 binary) and lws-bench (release)"
# LWS_BENCH_MANAGER_BIN: another build of our manager to measure (an experiment's binary kept
# aside), instead of the one built here; the driver already built is used as it is then, so a
# series of experiments is not slowed (nor disturbed) by rebuilding it after each source edit.
if [ -z "${LWS_BENCH_MANAGER_BIN:-}" ]; then
  LWS_BENCH_MANAGER_BIN=$(test/image/build-binary.sh)
  cargo build --release --locked -p lws-bench
elif [ ! -x target/release/lws-bench ]; then
  cargo build --release --locked -p lws-bench
fi

OUT="$REPO/target/bench"
STATE="$OUT/state"
mkdir -p "$OUT"
cleanup() {
  rc=$?
  for d in "$STATE"/*/; do
    [ -d "$d/pids" ] && test/cluster/down.sh "$d" --keep-logs
  done
  [ $rc -eq 0 ] || echo "benchmark failed; logs under $STATE/*/logs" >&2
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The benchmark measures the controllers alone: no proxy or pod agent in its clusters.
export LWS_CLUSTER_TRAFFIC=0
log "running the benchmark (logs and JSON under $OUT)"
target/release/lws-bench --manager-bin "$LWS_BENCH_MANAGER_BIN" --upstream-bin "$UPSTREAM_BIN" \
  --bin-dir "$BIN" --state-root "$STATE" --json "$OUT/results.json" --keep-logs "$@" | tee "$OUT/table.md"
