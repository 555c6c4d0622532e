#!/usr/bin/env bash
# Builds the upstream reference tool (test/lwsref: upstream LWS's own Go code computing revision
# keys and JSON shapes) with the other tools, before the suite runs, and prints its path. Cached
# under ~/.cache/lws-rollout/lwsref-<hash of its sources>/, so a change to the tool builds it
# again and nothing else does.
#
#   test/upstream/build-lwsref.sh
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$REPO/test/cluster/lib.sh"
die() { echo "lws-rollout lwsref: $*" >&2; exit 1; }
SRC="$REPO/test/lwsref"
HASH=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC"/*.go | sha256sum | cut -c1-16)
DIR="$CACHE_ROOT/lwsref-$HASH"
OUT="$DIR/lwsref"
if [ -x "$OUT" ] && [ -f "$DIR/.complete" ]; then echo "$OUT"; exit 0; fi
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH to build the upstream reference tool"
mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [ -x "$OUT" ] && [ -f "$DIR/.complete" ]; then echo "$OUT"; exit 0; fi
log "building the upstream reference tool (test/lwsref; log: $DIR/build.log)"
# -trimpath as test/upstream/build.sh and test/kueue/build.sh build: the flags are part of Go's
# build-cache keys, so with the same flags and the same module versions (sigs.k8s.io/lws v0.9.0,
# its k8s.io and controller-runtime) this links what those builds compiled instead of compiling
# it all again — seconds instead of minutes cold.
(cd "$SRC" && GOTOOLCHAIN=local GOFLAGS=-mod=readonly go build -trimpath -o "$OUT.tmp" .) >"$DIR/build.log" 2>&1 \
  || { tail -n 10 "$DIR/build.log" >&2; die "go build of test/lwsref failed; full log: $DIR/build.log"; }
mv -f "$OUT.tmp" "$OUT"
touch "$DIR/.complete"
echo "$OUT"
