#!/usr/bin/env bash
# Builds test/tools/argocd-health (a small Go program that runs Argo CD's own health check on
# an object read from stdin) against the pinned Argo CD and prints the path of the binary.
# Test tooling only: the e2e tests ask it what Argo CD would show for our Rollouts.
#
#   test/tools/build-argocd-health.sh
#
# Order of preference:
#   1. $LWS_ARGOCD_HEALTH_BIN, a prebuilt argocd-health you provide;
#   2. the cache ~/.cache/lws-rollout/argocd-health-<version>-<source hash>/argocd-health;
#   3. a build through the Go module proxy with the committed go.mod/go.sum (Argo CD's own
#      replace block). Argo CD v3.6.1 needs Go 1.27, which the go command fetches itself as
#      the toolchain module golang.org/toolchain (cold: ~6 min on 2 cores).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/../cluster/lib.sh"
# shellcheck source=versions.env
. "$HERE/versions.env"

die() { echo "lws-rollout argocd-health: $*" >&2; exit 1; }
log() { echo "[argocd-health $(date +%H:%M:%S)] $*" >&2; }

if [ -n "${LWS_ARGOCD_HEALTH_BIN:-}" ]; then
  [ -x "$LWS_ARGOCD_HEALTH_BIN" ] || die "LWS_ARGOCD_HEALTH_BIN=$LWS_ARGOCD_HEALTH_BIN is not an executable"
  echo "$LWS_ARGOCD_HEALTH_BIN"; exit 0
fi

SRC_IN="$HERE/argocd-health"
# The cache is keyed by the sources too, so an edit to the program is rebuilt.
SUM=$(cat "$SRC_IN/go.mod" "$SRC_IN/go.sum" "$SRC_IN/main.go" | sha256sum | cut -c1-12)
DIR="$CACHE_ROOT/argocd-health-$ARGOCD_VERSION-$SUM"
OUT="$DIR/argocd-health"
STAMP="$DIR/.complete"
if [ -x "$OUT" ] && [ -f "$STAMP" ]; then echo "$OUT"; exit 0; fi

HINT="or set LWS_ARGOCD_HEALTH_BIN to a prebuilt test/tools/argocd-health"
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH: install Go >= 1.21 (it fetches Go ${ARGOCD_GOTOOLCHAIN#go} for Argo CD $ARGOCD_VERSION), $HINT"

mkdir -p "$DIR/src"
LOG="$DIR/build.log"
: >"$LOG"
cp -f "$SRC_IN/go.mod" "$SRC_IN/go.sum" "$SRC_IN/main.go" "$DIR/src/"
log "building argocd-health (Argo CD $ARGOCD_VERSION, $ARGOCD_GOTOOLCHAIN) into $OUT (log: $LOG)"
export GOTOOLCHAIN=$ARGOCD_GOTOOLCHAIN CGO_ENABLED=0 GOFLAGS=-mod=readonly
run() { (cd "$DIR/src" && "$@") >>"$LOG" 2>&1 || { tail -n 15 "$LOG" >&2; die "step failed: $* (full log: $LOG). If the module proxy is unreachable, $HINT"; }; }
run go mod download
log "compiling (cold: ~6 minutes)"
run go build -trimpath "${GO_CLI_GCFLAGS[@]}" -ldflags "-s -w" -o "$OUT.tmp" .
mv -f "$OUT.tmp" "$OUT"
echo "argocd-health, Argo CD $ARGOCD_VERSION, $(cd "$DIR/src" && go env GOVERSION)" >"$STAMP"
log "argocd-health ready: $OUT"
echo "$OUT"
