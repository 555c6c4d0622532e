#!/usr/bin/env bash
# Builds Kueue's manager (sigs.k8s.io/kueue, cmd/kueue) at the pinned version from its Go
# module and prints the path of the binary. Test tooling only: test/kueue/start.sh runs it out
# of cluster against a local cluster (test/cluster/up.sh with LWS_CLUSTER_KUEUE=1).
#
#   test/kueue/build.sh            prints the binary
#   test/kueue/build.sh --crds     prints the directory of Kueue's CRDs (same module)
#
# Order of preference:
#   1. $LWS_KUEUE_BIN, a prebuilt Kueue manager binary you provide (with --crds:
#      $LWS_KUEUE_CRDS, a directory of Kueue's CRDs);
#   2. the cache ~/.cache/lws-rollout/kueue-<version>/ from an earlier build;
#   3. a build through the Go module proxy of a wrapper module requiring only sigs.k8s.io/kueue
#      (cold: ~4 min on 2 idle cores), so minimal version selection picks exactly the
#      dependency versions Kueue pins. KUEUE_GONOSUMDB (versions.env) names the modules whose
#      checksum-database lookup answers 404 here (none for v0.19.2); the wrapper's go.sum then
#      pins what was downloaded.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
. "$HERE/../cluster/lib.sh"
# shellcheck source=versions.env
. "$HERE/versions.env"

die() { echo "lws-rollout kueue: $*" >&2; exit 1; }
log() { echo "[kueue $(date +%H:%M:%S)] $*" >&2; }

WANT=bin
case "${1:-}" in --crds) WANT=crds ;; "") ;; *) die "usage: test/kueue/build.sh [--crds]" ;; esac

if [ "$WANT" = bin ] && [ -n "${LWS_KUEUE_BIN:-}" ]; then
  [ -x "$LWS_KUEUE_BIN" ] || die "LWS_KUEUE_BIN=$LWS_KUEUE_BIN is not an executable"
  echo "$LWS_KUEUE_BIN"; exit 0
fi
if [ "$WANT" = crds ] && [ -n "${LWS_KUEUE_CRDS:-}" ]; then
  [ -d "$LWS_KUEUE_CRDS" ] || die "LWS_KUEUE_CRDS=$LWS_KUEUE_CRDS is not a directory"
  echo "$LWS_KUEUE_CRDS"; exit 0
fi

DIR="$CACHE_ROOT/kueue-$KUEUE_VERSION"
OUT="$DIR/kueue"
CRDS="$DIR/crds"
STAMP="$DIR/.complete"
if [ -x "$OUT" ] && [ -f "$STAMP" ] && [ -d "$CRDS" ]; then
  if [ "$WANT" = bin ]; then echo "$OUT"; else echo "$CRDS"; fi
  exit 0
fi

HINT="or set LWS_KUEUE_BIN (and LWS_KUEUE_CRDS) to a prebuilt sigs.k8s.io/kueue $KUEUE_VERSION manager and its CRDs"
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH: install Go >= 1.25 to build Kueue $KUEUE_VERSION, $HINT"

mkdir -p "$DIR"
LOG="$DIR/build.log"
: >"$LOG"
log "building Kueue $KUEUE_VERSION into $OUT (log: $LOG; cold: ~4 min)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GONOSUMDB="${KUEUE_GONOSUMDB:-}"
SRC="$DIR/src"
mkdir -p "$SRC"
printf 'module lws-rollout.local/kueue\n\ngo 1.25.0\n' >"$SRC/go.mod"
cat >"$SRC/tools.go" <<'GO'
//go:build tools

package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
GO
run() { (cd "$SRC" && GOFLAGS=-mod=mod "$@") >>"$LOG" 2>&1 || { tail -n 15 "$LOG" >&2; die "step failed: $* (full log: $LOG). If the module proxy is unreachable, $HINT"; }; }
run go mod edit "-require=sigs.k8s.io/kueue@$KUEUE_VERSION"
run go mod tidy -e
MOD=$(cd "$SRC" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/kueue 2>>"$LOG") \
  || die "cannot locate the sigs.k8s.io/kueue@$KUEUE_VERSION module directory (log: $LOG)"
[ -d "$MOD/config/components/crd/bases" ] || die "no config/components/crd/bases in $MOD"
rm -rf "$CRDS.tmp"
mkdir -p "$CRDS.tmp"
cp -f "$MOD"/config/components/crd/bases/*.yaml "$CRDS.tmp/"
chmod u+w "$CRDS.tmp"/*.yaml
V=sigs.k8s.io/kueue/pkg/version
log "compiling sigs.k8s.io/kueue/cmd/kueue (cold: ~4 minutes)"
run go build -trimpath -o "$OUT.tmp" \
  -ldflags "-s -w -X $V.GitVersion=$KUEUE_VERSION -X $V.GitCommit=$KUEUE_VERSION -X $V.BuildDate=1970-01-01T00:00:00Z" \
  sigs.k8s.io/kueue/cmd/kueue
mv -f "$OUT.tmp" "$OUT"
rm -rf "$CRDS"; mv "$CRDS.tmp" "$CRDS"
echo "sigs.k8s.io/kueue $KUEUE_VERSION, $(go env GOVERSION)" >"$STAMP"
log "Kueue ready: $OUT"
if [ "$WANT" = bin ]; then echo "$OUT"; else echo "$CRDS"; fi
