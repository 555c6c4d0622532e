#!/usr/bin/env bash
# Regenerates crds/: Volcano's PodGroup and Queue CRDs (scheduling.volcano.sh/v1beta1),
# generated from Volcano's API module at the version upstream LWS requires
# (volcano.sh/apis, VOLCANO_APIS_VERSION) with a pinned controller-gen
# (sigs.k8s.io/controller-tools, CONTROLLER_TOOLS_VERSION), both from the Go module proxy.
# Not run by the suite, which installs the checked-in output (test/volcano/crds.sh): the
# output only changes with those two versions, and building controller-gen is minutes of a
# cold run. Test tooling only: the product never installs Volcano's CRDs.
#
#   test/volcano/regen.sh
#
# Why generated: the API module holds the Go types with their kubebuilder markers but no CRD
# YAML, and Volcano's own module (volcano.sh/volcano, which checks the YAML in) is refused by
# the module proxy here. Volcano generates its CRDs the same way (controller-gen over
# pkg/apis/scheduling/v1beta1).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../cluster/lib.sh"

VOLCANO_APIS_VERSION="${VOLCANO_APIS_VERSION:-v1.12.1}"
CONTROLLER_TOOLS_VERSION="${CONTROLLER_TOOLS_VERSION:-v0.18.0}"

DEST="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/crds"
OUT=$(mktemp -d "${TMPDIR:-/tmp}/volcano-crds.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

command -v go >/dev/null 2>&1 || die "no Go toolchain to generate Volcano's CRDs"
export GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$OUT"
LOG="$OUT/build.log"; : >"$LOG"
run() { "$@" >>"$LOG" 2>&1 || { tail -n 15 "$LOG" >&2; die "step failed: $* (log: $LOG)"; }; }

# controller-gen, built once per version.
CG_DIR="$CACHE_ROOT/controller-gen-$CONTROLLER_TOOLS_VERSION"
CG="$CG_DIR/controller-gen"
if [ ! -x "$CG" ]; then
  log "building controller-gen $CONTROLLER_TOOLS_VERSION into $CG"
  mkdir -p "$CG_DIR/src"
  printf 'module lws-rollout.local/controllergen\n\ngo 1.24\n' >"$CG_DIR/src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/controller-tools/cmd/controller-gen"\n' >"$CG_DIR/src/tools.go"
  (cd "$CG_DIR/src" && run env GOFLAGS=-mod=mod go mod edit "-require=sigs.k8s.io/controller-tools@$CONTROLLER_TOOLS_VERSION")
  (cd "$CG_DIR/src" && run env GOFLAGS=-mod=mod go mod tidy)
  (cd "$CG_DIR/src" && run env GOFLAGS=-mod=mod go build -trimpath "${GO_CLI_GCFLAGS[@]}" -o "$CG.tmp" sigs.k8s.io/controller-tools/cmd/controller-gen)
  mv -f "$CG.tmp" "$CG"
fi

# Volcano's API module, copied so controller-gen can load it as a module of its own.
log "generating Volcano's CRDs from volcano.sh/apis@$VOLCANO_APIS_VERSION"
MOD=$(cd "$OUT" && GOFLAGS= go mod download -json "volcano.sh/apis@$VOLCANO_APIS_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[ -n "$MOD" ] && [ -d "$MOD/pkg/apis/scheduling/v1beta1" ] || die "cannot fetch volcano.sh/apis@$VOLCANO_APIS_VERSION from the Go module proxy"
SRC="$OUT/src"
rm -rf "$SRC" && cp -r "$MOD" "$SRC" && chmod -R u+w "$SRC"
(cd "$SRC" && run env GOFLAGS=-mod=mod "$CG" crd:crdVersions=v1,allowDangerousTypes=true \
  paths=./pkg/apis/scheduling/v1beta1/... output:crd:dir="$OUT")
rm -rf "$SRC"
[ -f "$OUT/scheduling.volcano.sh_podgroups.yaml" ] || die "controller-gen wrote no PodGroup CRD (log: $LOG)"
cp -f "$OUT"/scheduling.volcano.sh_podgroups.yaml "$OUT"/scheduling.volcano.sh_queues.yaml "$DEST/"
echo "volcano.sh/apis $VOLCANO_APIS_VERSION, controller-gen $CONTROLLER_TOOLS_VERSION" >"$DEST/VERSIONS"
log "wrote $DEST"
