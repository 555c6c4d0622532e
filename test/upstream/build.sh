#!/usr/bin/env bash
# Builds the upstream LeaderWorkerSet controller (sigs.k8s.io/lws, cmd/main.go) at the pinned
# version from its Go module and prints the path of the binary. Test tooling only: the
# benchmark (test/bench) and the take-over e2e tests run it out of cluster.
#
#   test/upstream/build.sh
#
# Order of preference:
#   1. $LWS_UPSTREAM_BIN, a prebuilt upstream manager binary you provide;
#   2. the cache ~/.cache/lws-rollout/lws-upstream-<version>/manager from an earlier build;
#   3. a build through the Go module proxy of a wrapper module requiring only sigs.k8s.io/lws
#      (cold: a few minutes on 2 cores), so it builds with exactly the dependency versions
#      upstream pins; the version is stamped like upstream's
#      Makefile does (pkg/version.GitVersion), so its user agent reads `lws/v0.9.0 ...`.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
# shellcheck source=versions.env
. "$(dirname "${BASH_SOURCE[0]}")/versions.env"

die() { echo "lws-rollout upstream: $*" >&2; exit 1; }
log() { echo "[upstream $(date +%H:%M:%S)] $*" >&2; }

if [ -n "${LWS_UPSTREAM_BIN:-}" ]; then
  [ -x "$LWS_UPSTREAM_BIN" ] || die "LWS_UPSTREAM_BIN=$LWS_UPSTREAM_BIN is not an executable"
  echo "$LWS_UPSTREAM_BIN"; exit 0
fi

DIR="$CACHE_ROOT/lws-upstream-$LWS_UPSTREAM_VERSION"
OUT="$DIR/manager"
STAMP="$DIR/.complete"
if [ -x "$OUT" ] && [ -f "$STAMP" ]; then echo "$OUT"; exit 0; fi

HINT="or set LWS_UPSTREAM_BIN to a prebuilt sigs.k8s.io/lws $LWS_UPSTREAM_VERSION manager binary"
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH: install Go >= 1.26 to build upstream LWS $LWS_UPSTREAM_VERSION, $HINT"
GOV=$(go env GOVERSION | sed 's/^go//')
case "$GOV" in
  1.2[6-9]*|1.[3-9]*|[2-9]*) ;;
  *) die "Go $GOV is too old: sigs.k8s.io/lws $LWS_UPSTREAM_VERSION needs Go >= 1.26, $HINT" ;;
esac

mkdir -p "$DIR"
LOG="$DIR/build.log"
: >"$LOG"
log "building upstream LWS $LWS_UPSTREAM_VERSION into $OUT (log: $LOG)"
export GOTOOLCHAIN=local CGO_ENABLED=0
if ! (cd "$DIR" && GOFLAGS= go mod download -json "sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION" >>"$LOG" 2>&1); then
  tail -n 5 "$LOG" >&2
  die "cannot download sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION from the Go module proxy ($(go env GOPROXY)), $HINT"
fi
# A wrapper module that requires only sigs.k8s.io/lws: minimal version selection then picks
# exactly the dependency versions lws's own go.mod pins (it has no replace directives).
# (`go install ...@version` would do the same but asks the proxy for the module's version list.)
SRC="$DIR/src"
mkdir -p "$SRC"
printf 'module lws-rollout.local/lwsupstream\n\ngo 1.26.0\n' >"$SRC/go.mod"
cat >"$SRC/tools.go" <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/lws/cmd"
GO
run() { (cd "$SRC" && GOFLAGS=-mod=mod "$@") >>"$LOG" 2>&1 || { tail -n 15 "$LOG" >&2; die "step failed: $* (full log: $LOG). If the module proxy is unreachable, $HINT"; }; }
run go mod edit "-require=sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION"
run go mod tidy -e
V=sigs.k8s.io/lws/pkg/version
log "compiling sigs.k8s.io/lws/cmd (cold: a few minutes)"
run go build -trimpath -o "$OUT.tmp" \
  -ldflags "-s -w -X $V.GitVersion=$LWS_UPSTREAM_VERSION -X $V.GitCommit=$LWS_UPSTREAM_VERSION -X $V.BuildDate=1970-01-01T00:00:00Z" \
  sigs.k8s.io/lws/cmd
mv -f "$OUT.tmp" "$OUT"
echo "sigs.k8s.io/lws $LWS_UPSTREAM_VERSION, $(go env GOVERSION)" >"$STAMP"
log "upstream LWS ready: $OUT"
echo "$OUT"
