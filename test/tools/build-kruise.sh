#!/usr/bin/env bash
# Builds Kruise's own kubectl plugin, kubectl-kruise (github.com/openkruise/kruise-tools,
# cmd/plugin), at the pinned version and prints the path of the binary. Test tooling only:
# the e2e tests run `kubectl-kruise rollout approve|pause|resume` against our Rollouts.
#
#   test/tools/build-kruise.sh
#
# Order of preference:
#   1. $LWS_KRUISE_BIN, a prebuilt kubectl-kruise you provide;
#   2. the cache ~/.cache/lws-rollout/kruise-tools-<version>/kubectl-kruise from an earlier build;
#   3. a build through the Go module proxy of a wrapper module requiring kruise-tools, with the
#      five golang.org/x replace directives of kruise-tools' own go.mod restated (a
#      dependency's replace directives do not apply to the module that requires it; cold: ~3
#      min on 2 idle cores). The version is stamped into component-base, so `kubectl-kruise
#      version` reads v1.2.2.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
# shellcheck source=versions.env
. "$(dirname "${BASH_SOURCE[0]}")/versions.env"

die() { echo "lws-rollout kubectl-kruise: $*" >&2; exit 1; }
log() { echo "[kruise $(date +%H:%M:%S)] $*" >&2; }

if [ -n "${LWS_KRUISE_BIN:-}" ]; then
  [ -x "$LWS_KRUISE_BIN" ] || die "LWS_KRUISE_BIN=$LWS_KRUISE_BIN is not an executable"
  echo "$LWS_KRUISE_BIN"; exit 0
fi

DIR="$CACHE_ROOT/kruise-tools-$KRUISE_TOOLS_VERSION"
OUT="$DIR/kubectl-kruise"
STAMP="$DIR/.complete"
if [ -x "$OUT" ] && [ -f "$STAMP" ]; then echo "$OUT"; exit 0; fi

HINT="or set LWS_KRUISE_BIN to a prebuilt kubectl-kruise $KRUISE_TOOLS_VERSION"
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH: install Go >= 1.22 to build kubectl-kruise $KRUISE_TOOLS_VERSION, $HINT"

mkdir -p "$DIR"
LOG="$DIR/build.log"
: >"$LOG"
log "building kubectl-kruise $KRUISE_TOOLS_VERSION into $OUT (log: $LOG)"
export GOTOOLCHAIN=local CGO_ENABLED=0
SRC="$DIR/src"
mkdir -p "$SRC"
printf 'module lws-rollout.local/kruisetools\n\ngo 1.22.0\n' >"$SRC/go.mod"
cat >"$SRC/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/openkruise/kruise-tools/cmd/plugin"
GO
run() { (cd "$SRC" && GOFLAGS=-mod=mod "$@") >>"$LOG" 2>&1 || { tail -n 15 "$LOG" >&2; die "step failed: $* (full log: $LOG). If the module proxy is unreachable, $HINT"; }; }
run go mod edit "-require=github.com/openkruise/kruise-tools@$KRUISE_TOOLS_VERSION"
# kruise-tools' replace directives: without them the x/ modules resolve to newer versions
# than kruise-tools was built and tested with.
run go mod edit -replace=golang.org/x/net=golang.org/x/net@v0.33.0 \
  -replace=golang.org/x/sync=golang.org/x/sync@v0.10.0 \
  -replace=golang.org/x/sys=golang.org/x/sys@v0.19.0 \
  -replace=golang.org/x/term=golang.org/x/term@v0.19.0 \
  -replace=golang.org/x/text=golang.org/x/text@v0.21.0
run go mod tidy -e
V=k8s.io/component-base/version
log "compiling github.com/openkruise/kruise-tools/cmd/plugin (cold: ~3 minutes)"
run go build -trimpath "${GO_CLI_GCFLAGS[@]}" -o "$OUT.tmp" \
  -ldflags "-s -w -X $V.gitVersion=$KRUISE_TOOLS_VERSION -X $V.gitCommit=$KRUISE_TOOLS_VERSION -X $V.buildDate=1970-01-01T00:00:00Z" \
  github.com/openkruise/kruise-tools/cmd/plugin
mv -f "$OUT.tmp" "$OUT"
echo "kruise-tools $KRUISE_TOOLS_VERSION, $(go env GOVERSION)" >"$STAMP"
log "kubectl-kruise ready: $OUT"
echo "$OUT"
