# Shared by build-helm.sh and build-crane.sh: build one Go command from its module, pinned,
# in a wrapper module of ours, cached by version under ~/.cache/lws-rollout. Sourced.
# shellcheck shell=bash
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"
log() { echo "[tools $(date +%H:%M:%S)] $*" >&2; }
die() { echo "lws-rollout tools: $*" >&2; exit 1; }

# go_tool_build NAME MODULE VERSION PACKAGE [LDFLAGS]: prints the path of the cached binary,
# building it first when needed. The wrapper requires only MODULE, so minimal version selection
# picks exactly the dependency versions the tool pins itself; its go.sum is seeded from the
# tool's own (some checksum-database lookups answer 404 here).
go_tool_build() {
  local name=$1 module=$2 version=$3 pkg=$4 ldflags=${5:-}
  local dir="$CACHE_ROOT/$name-$version" out stamp logf src moddir
  out="$dir/$name"; stamp="$dir/.complete"; logf="$dir/build.log"
  if [ -x "$out" ] && [ -f "$stamp" ]; then echo "$out"; return 0; fi
  command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH to build $name $version ($module)"
  mkdir -p "$dir"; : >"$logf"
  log "building $name $version from $module (cold: a few minutes; log: $logf)"
  export GOTOOLCHAIN=local CGO_ENABLED=0
  moddir=$(cd "$dir" && GOFLAGS= go mod download -json "$module@$version" 2>>"$logf" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p') || true
  [ -n "$moddir" ] || { tail -n 5 "$logf" >&2; die "cannot download $module@$version from the Go module proxy ($(go env GOPROXY)); see $logf"; }
  src="$dir/src"; rm -rf "$src"; mkdir -p "$src"
  printf 'module lws-rollout.local/%s\n\ngo 1.25.0\n' "$name" >"$src/go.mod"
  cp "$moddir/go.sum" "$src/go.sum" && chmod u+w "$src/go.sum"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$src/tools.go"
  local step
  for step in "go mod edit -require=$module@$version" "go mod tidy -e"; do
    # shellcheck disable=SC2086
    (cd "$src" && GOFLAGS=-mod=mod $step) >>"$logf" 2>&1 || { tail -n 10 "$logf" >&2; die "$name $version: '$step' failed; full log: $logf"; }
  done
  (cd "$src" && GOFLAGS=-mod=mod go build -trimpath "${GO_CLI_GCFLAGS[@]}" -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg") >>"$logf" 2>&1 \
    || { tail -n 10 "$logf" >&2; die "$name $version: go build $pkg failed; full log: $logf"; }
  mv -f "$out.tmp" "$out"
  echo "$module $version, $(go env GOVERSION)" >"$stamp"
  log "$name ready: $out"
  echo "$out"
}
