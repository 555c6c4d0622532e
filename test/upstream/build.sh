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
#      When the proxy refuses the module's zip (v0.10.0 here) and LWS_GIT names a git repository
#      of kubernetes-sigs/lws, the source is the tag's tree, used only if the tag's commit is
#      the one the proxy's .info names for that version (the wrapper then replaces the module
#      with that tree; its dependencies still come from the proxy).
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
FROM_GIT=""
if ! (cd "$DIR" && GOFLAGS= go mod download -json "sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION" >>"$LOG" 2>&1); then
  if [ -z "${LWS_GIT:-}" ]; then
    tail -n 5 "$LOG" >&2
    die "cannot download sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION from the Go module proxy ($(go env GOPROXY)), $HINT, or LWS_GIT to a git repository of kubernetes-sigs/lws"
  fi
  PROXY=$(go env GOPROXY | cut -d, -f1)
  WANT=$(curl -fsS "$PROXY/sigs.k8s.io/lws/@v/$LWS_UPSTREAM_VERSION.info" | sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p')
  GOT=$(git --git-dir="$LWS_GIT" rev-parse "$LWS_UPSTREAM_VERSION^{commit}" 2>>"$LOG") || GOT=""
  [ -n "$WANT" ] && [ "$WANT" = "$GOT" ] \
    || die "tag $LWS_UPSTREAM_VERSION in LWS_GIT=$LWS_GIT is ${GOT:-missing}; the module proxy names ${WANT:-nothing}"
  FROM_GIT="$DIR/lws-src"
  rm -rf "$FROM_GIT"
  mkdir -p "$FROM_GIT"
  # The module's Go code only (a partial clone may lack large files elsewhere, e.g. site/).
  git --git-dir="$LWS_GIT" archive "$LWS_UPSTREAM_VERSION" -- go.mod go.sum LICENSE api cmd config/crd pkg test 2>>"$LOG" \
    | tar -x -C "$FROM_GIT"
  [ -f "$FROM_GIT/cmd/main.go" ] || die "no cmd/main.go in $LWS_GIT at $LWS_UPSTREAM_VERSION"
  log "sigs.k8s.io/lws $LWS_UPSTREAM_VERSION from $LWS_GIT (commit $GOT, as the proxy names it)"
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
[ -z "$FROM_GIT" ] || run go mod edit "-replace=sigs.k8s.io/lws=$FROM_GIT"
run go mod tidy -e
V=sigs.k8s.io/lws/pkg/version
log "compiling sigs.k8s.io/lws/cmd (cold: a few minutes)"
run go build -trimpath -o "$OUT.tmp" \
  -ldflags "-s -w -X $V.GitVersion=$LWS_UPSTREAM_VERSION -X $V.GitCommit=$LWS_UPSTREAM_VERSION -X $V.BuildDate=1970-01-01T00:00:00Z" \
  sigs.k8s.io/lws/cmd
mv -f "$OUT.tmp" "$OUT"
# Upstream's CRDs beside the binary: from v0.10 its DisaggregatedSet controller also watches
# DisaggregatedSetRoleScalers, a kind crds/ does not serve yet (test/upstream/start.sh applies it).
MODDIR=${FROM_GIT:-$(cd "$SRC" && GOFLAGS=-mod=mod go list -m -f '{{.Dir}}' sigs.k8s.io/lws 2>>"$LOG")}
rm -rf "$DIR/crds"
mkdir -p "$DIR/crds"
cp "$MODDIR"/config/crd/bases/*.yaml "$DIR/crds/" 2>>"$LOG" || true
chmod -R u+w "$DIR/crds"
echo "sigs.k8s.io/lws $LWS_UPSTREAM_VERSION, $(go env GOVERSION)" >"$STAMP"
log "upstream LWS ready: $OUT"
echo "$OUT"
