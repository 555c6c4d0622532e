#!/usr/bin/env bash
# Provides the Traefik proxy (Gateway API + ingress-nginx providers) for the local cluster's
# traffic layer and prints the path of the binary.
#
#   test/cluster/build-traefik.sh
#
# Order of preference:
#   1. $LWS_ROLLOUT_TRAEFIK_BIN, a prebuilt traefik $TRAEFIK_VERSION binary you provide;
#   2. the cache ~/.cache/lws-rollout/traefik-<version>/traefik from an earlier build;
#   3. a build through the Go module proxy of a wrapper module (cold: ~10 min on 2 cores).
# Fails with one line (and exit 1) when none works; up.sh then starts the cluster without the
# traffic layer and says why.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

die() { echo "lws-rollout traefik: $*" >&2; exit 1; }
log() { echo "[traefik $(date +%H:%M:%S)] $*" >&2; }

if [ -n "${LWS_ROLLOUT_TRAEFIK_BIN:-}" ]; then
  [ -x "$LWS_ROLLOUT_TRAEFIK_BIN" ] || die "LWS_ROLLOUT_TRAEFIK_BIN=$LWS_ROLLOUT_TRAEFIK_BIN is not an executable"
  echo "$LWS_ROLLOUT_TRAEFIK_BIN"; exit 0
fi

DIR="$CACHE_ROOT/traefik-$TRAEFIK_VERSION"
OUT="$DIR/traefik"
STAMP="$DIR/.complete"
if [ -x "$OUT" ] && [ -f "$STAMP" ]; then echo "$OUT"; exit 0; fi

HINT="or set LWS_ROLLOUT_TRAEFIK_BIN to a prebuilt traefik $TRAEFIK_VERSION"
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH to build traefik $TRAEFIK_VERSION, $HINT"
GOV=$(go env GOVERSION | sed 's/^go//')
case "$GOV" in
  1.2[6-9]*|1.[3-9]*|[2-9]*) ;;
  *) die "Go $GOV is too old: traefik $TRAEFIK_VERSION needs Go >= 1.26, $HINT" ;;
esac

# One build at a time per cache dir: concurrent callers (two clusters starting at once) wait
# for the first instead of building twice.
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [ -x "$OUT" ] && [ -f "$STAMP" ]; then echo "$OUT"; exit 0; fi

LOG="$DIR/build.log"
: >"$LOG"
log "building traefik $TRAEFIK_VERSION into $OUT (cold: ~10 min; log: $LOG)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
run() { "$@" >>"$LOG" 2>&1 || { tail -n 15 "$LOG" >&2; die "step failed: $* (full log: $LOG). If the module proxy is unreachable, $HINT"; }; }

MOD="github.com/traefik/traefik/v3"
if ! MOD_JSON=$(cd "$DIR" && GOFLAGS= go mod download -json "$MOD@$TRAEFIK_VERSION" 2>>"$LOG"); then
  tail -n 5 "$LOG" >&2
  die "cannot download $MOD@$TRAEFIK_VERSION from the Go module proxy ($(go env GOPROXY)), $HINT"
fi
TMOD=$(echo "$MOD_JSON" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
TDIR=$(echo "$MOD_JSON" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')

SRC="$DIR/src"
rm -rf "$SRC"
mkdir -p "$SRC/ext"
# Traefik's dynamic-config extension is a nested module (./pkg/config/dynamic/ext) that is in
# neither the module zip nor the proxy; its packages only need the two types below to compile.
printf 'module github.com/traefik/traefik/dynamic/ext\n\ngo 1.26.0\n' >"$SRC/ext/go.mod"
cat >"$SRC/ext/ext.go" <<'GO'
// Package ext stands in for Traefik's dynamic-config extension module, which is not published.
package ext

// HTTP is the extension point of the HTTP dynamic configuration (unused here).
type HTTP struct{}

// Router is the extension point of an HTTP router (unused here).
type Router struct{}
GO
{
  printf 'module lws-rollout.local/traefik\n\ngo 1.26.0\n\n'
  printf 'require %s %s\n\n' "$MOD" "$TRAEFIK_VERSION"
  # Traefik's own replace and exclude lines, except the two that cannot resolve here: the
  # nested ext module (our stub) and go-http-auth, whose newest fork pseudo-version the proxy
  # refuses (the previous one is used).
  sed -n '/^replace\|^exclude\|^\t[^ ]* => /p' "$TMOD" | grep -v 'dynamic/ext\|go-http-auth' | sed 's/^replace ($//'
  echo 'replace github.com/traefik/traefik/dynamic/ext => ./ext'
  echo 'replace github.com/abbot/go-http-auth => github.com/containous/go-http-auth v0.4.1-0.20200324110947-a37a7636d23e'
} >"$SRC/go.mod.tmp"
# Re-wrap the lines taken from inside a `replace (...)` block as single replace lines.
awk '/^\t/ {sub(/^\t/, "replace "); print; next} /^\)$/ {next} {print}' "$SRC/go.mod.tmp" >"$SRC/go.mod"
rm -f "$SRC/go.mod.tmp"
cat >"$SRC/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/traefik/traefik/v3/cmd/traefik"
GO
# Some checksum-database lookups fail here; Traefik's own go.sum already holds the hashes.
cp "$TDIR/go.sum" "$SRC/go.sum"
chmod u+w "$SRC/go.sum"
(cd "$SRC" && run go mod tidy -e)
log "compiling traefik $TRAEFIK_VERSION (cold: the long part)"
(cd "$SRC" && run go build -trimpath \
  -ldflags "-s -w -X github.com/traefik/traefik/v3/pkg/version.Version=$TRAEFIK_VERSION" \
  -o "$OUT.tmp" "$MOD/cmd/traefik")
mv -f "$OUT.tmp" "$OUT"
"$OUT" version >>"$LOG" 2>&1 || die "built $OUT but it does not run (log: $LOG)"
echo "traefik=$TRAEFIK_VERSION" >"$STAMP"
log "traefik ready: $OUT"
echo "$OUT"
