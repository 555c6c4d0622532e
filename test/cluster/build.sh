#!/usr/bin/env bash
# Provides the control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok) and prints the directory that holds them.
#
# Order of preference:
#   1. $LWS_ROLLOUT_BIN_DIR, a directory of prebuilt binaries you provide;
#   2. binaries on PATH, when all are there and kube-apiserver is the pinned version;
#   3. the cache ~/.cache/lws-rollout/cp/<k8s>-kwok-<kwok>/bin from an earlier build;
#   4. a build from pinned Go modules through the Go module proxy (cold: ~15-30 min on 2 cores).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

have_all() {
  local d=$1 b
  for b in $CP_BINARIES; do [ -x "$d/$b" ] || return 1; done
}

if [ -n "${LWS_ROLLOUT_BIN_DIR:-}" ]; then
  have_all "$LWS_ROLLOUT_BIN_DIR" || die "LWS_ROLLOUT_BIN_DIR=$LWS_ROLLOUT_BIN_DIR must contain: $CP_BINARIES"
  echo "$LWS_ROLLOUT_BIN_DIR"; exit 0
fi

# Binaries already on PATH are used when every one is there and kube-apiserver is the pinned
# version (an unrelated older kubectl on PATH alone does not count).
on_path=1
for b in $CP_BINARIES; do command -v "$b" >/dev/null 2>&1 || on_path=0; done
if [ $on_path = 1 ] && kube-apiserver --version 2>/dev/null | grep -q "$K8S_VERSION\$"; then
  LINKS="$CACHE_ROOT/path-bin"
  mkdir -p "$LINKS"
  for b in $CP_BINARIES; do ln -sf "$(command -v "$b")" "$LINKS/$b"; done
  echo "$LINKS"; exit 0
fi

BIN="$CP_CACHE/bin"
STAMP="$BIN/.complete"
if have_all "$BIN" && [ -f "$STAMP" ]; then echo "$BIN"; exit 0; fi

# --- preconditions, each with one clear line -------------------------------------------
HINT="or set LWS_ROLLOUT_BIN_DIR to a directory holding prebuilt $CP_BINARIES (k8s $K8S_VERSION, kwok $KWOK_VERSION)"
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH: install Go >= 1.26 to build the test control plane, $HINT"
GOV=$(go env GOVERSION | sed 's/^go//')
case "$GOV" in
  1.2[6-9]*|1.[3-9]*|[2-9]*) ;;
  *) die "Go $GOV is too old: k8s $K8S_VERSION needs Go >= 1.26, $HINT" ;;
esac
mkdir -p "$CP_CACHE"
FREE_KB=$(df -Pk "$CP_CACHE" | awk 'NR==2{print $4}')
[ "${FREE_KB:-0}" -ge $((8 * 1024 * 1024)) ] || die "only $((FREE_KB / 1024)) MiB free under $CP_CACHE: the build needs ~8 GiB (module and build caches), $HINT"

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
SRC="$CP_CACHE/src"
BUILD_LOG="$CP_CACHE/build.log"
mkdir -p "$SRC" "$BIN"
: >"$BUILD_LOG"
log "building control plane k8s $K8S_VERSION + kwok $KWOK_VERSION into $BIN (log: $BUILD_LOG)"

run() { "$@" >>"$BUILD_LOG" 2>&1 || { tail -n 15 "$BUILD_LOG" >&2; die "step failed: $* (full log: $BUILD_LOG). If the module proxy is unreachable, $HINT"; }; }

# --- the wrapper module ------------------------------------------------------------------
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging
# paths that only work inside its own repo; derive the list of replaces from its pinned go.mod
# so a version bump needs no edit here.
cd "$SRC"
if ! KMOD_JSON=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" 2>>"$BUILD_LOG"); then
  tail -n 5 "$BUILD_LOG" >&2
  die "cannot download k8s.io/kubernetes@$K8S_VERSION from the Go module proxy ($(go env GOPROXY)), $HINT"
fi
KMOD=$(echo "$KMOD_JSON" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
STAGING_V="v0${K8S_VERSION#v1}"   # v1.36.3 -> v0.36.3
GODEBUG_LINE=$(grep -E '^godebug ' "$KMOD" || true)
ETCD_VERSION=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$KMOD")
[ -n "$ETCD_VERSION" ] || die "k8s.io/kubernetes@$K8S_VERSION does not pin go.etcd.io/etcd/server/v3"

{
  echo "module lws-rollout.local/controlplane"
  echo
  echo "go 1.26.0"
  echo
  [ -n "$GODEBUG_LINE" ] && echo "$GODEBUG_LINE"
} >go.mod
cat >tools.go <<'GO'
//go:build tools

package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubectl/pkg/cmd"
)
GO
for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "$KMOD"); do
  go mod edit "-replace=$m=$m@$STAGING_V"
done
run go mod edit "-require=k8s.io/kubernetes@$K8S_VERSION" "-require=go.etcd.io/etcd/server/v3@$ETCD_VERSION"
log "wrapper module: $(grep -c '=> k8s.io' go.mod) staging replaces, etcd $ETCD_VERSION"
run go mod tidy -e

MINOR=$(echo "$K8S_VERSION" | cut -d. -f2)
LDV=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDV="$LDV -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
log "compiling kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (cold: the long part)"
run go build -trimpath -ldflags "-s -w $LDV" -o "$BIN/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
log "compiling etcd $ETCD_VERSION"
run go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3

# kwok is built on its own (plain go install works: its go.mod has no replaces), so its newer
# client libraries cannot raise the versions the k8s binaries were built with.
log "compiling kwok $KWOK_VERSION"
(cd "$CP_CACHE" && GOFLAGS= GOBIN="$BIN" run go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION")
KWOK_MOD=$(cd "$CP_CACHE" && GOFLAGS= go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
mkdir -p "$CP_CACHE/kwok-stages"
cp -f "$KWOK_MOD"/kustomize/stage/node/fast/node-initialize.yaml \
      "$KWOK_MOD"/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
      "$KWOK_MOD"/kustomize/stage/pod/fast/pod-ready.yaml \
      "$KWOK_MOD"/kustomize/stage/pod/fast/pod-complete.yaml \
      "$KWOK_MOD"/kustomize/stage/pod/fast/pod-delete.yaml \
      "$CP_CACHE/kwok-stages/"
chmod u+w "$CP_CACHE"/kwok-stages/*.yaml
have_all "$BIN" || die "build finished but binaries are missing in $BIN (log: $BUILD_LOG)"
echo "k8s=$K8S_VERSION etcd=$ETCD_VERSION kwok=$KWOK_VERSION" >"$STAMP"
log "control plane ready in $BIN"
echo "$BIN"
