# Shared helpers for test/cluster scripts. Sourced, not executed.
# shellcheck shell=bash

CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$CLUSTER_DIR/versions.env"

CACHE_ROOT="${LWS_ROLLOUT_CACHE:-$HOME/.cache/lws-rollout}"
CP_CACHE="$CACHE_ROOT/cp/${K8S_VERSION}-kwok-${KWOK_VERSION}"

die() { echo "lws-rollout cluster: $*" >&2; exit 1; }
log() { echo "[cluster $(date +%H:%M:%S)] $*" >&2; }

CP_BINARIES="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok"

# gateway_crds_dir prints a directory holding the Gateway API standard-channel CRDs:
# $LWS_ROLLOUT_GATEWAY_CRDS when given, else a cached copy fetched from the Go module proxy.
gateway_crds_dir() {
  if [ -n "${LWS_ROLLOUT_GATEWAY_CRDS:-}" ]; then echo "$LWS_ROLLOUT_GATEWAY_CRDS"; return; fi
  local dir="$CACHE_ROOT/gateway-api-$GATEWAY_API_VERSION"
  if [ ! -f "$dir/gateway.networking.k8s.io_httproutes.yaml" ]; then
    command -v go >/dev/null 2>&1 || die "no Go toolchain to fetch Gateway API $GATEWAY_API_VERSION CRDs: install Go or set LWS_ROLLOUT_GATEWAY_CRDS to a directory of them"
    local mod
    mod=$(cd "$CACHE_ROOT" && GOFLAGS= GOTOOLCHAIN=local go mod download -json "sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION" 2>/dev/null \
      | sed -n 's/.*"Dir": "\(.*\)".*/\1/p') || true
    [ -n "$mod" ] && [ -d "$mod/config/crd/standard" ] \
      || die "cannot fetch sigs.k8s.io/gateway-api@$GATEWAY_API_VERSION from the Go module proxy: set LWS_ROLLOUT_GATEWAY_CRDS to a directory of its CRDs"
    mkdir -p "$dir"
    cp -f "$mod"/config/crd/standard/*.yaml "$dir/"
    chmod u+w "$dir"/*.yaml
  fi
  echo "$dir"
}

# install_crds KUBECTL: server-side applies crds/ and returns once every CRD is Established.
# (`kubectl wait` errors out instead of waiting while a new CRD has no conditions yet, hence
# the retry loop.)
install_crds() {
  local kubectl=$1 repo deadline
  repo="$(cd "$CLUSTER_DIR/../.." && pwd)"
  "$kubectl" apply --server-side -f "$repo/crds/" >/dev/null
  deadline=$((SECONDS + 60))
  until "$kubectl" wait --for=condition=Established --timeout=10s \
      crd/leaderworkersets.leaderworkerset.x-k8s.io crd/rollouts.rollouts.kruise.io crd/batchreleases.rollouts.kruise.io >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "CRDs in crds/ not Established after 60s"
    sleep 0.5
  done
}

# Free loopback ports for one script run. A port is taken when something accepts on it; taken ports are skipped. We also avoid
# handing out the same port twice within this run. Ports come from 20000-31999, below Linux's
# ephemeral range (32768+), where a client connection could take a probed port before the
# server binds it (seen once with concurrent test clusters).
USED_PORTS=" "
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    case "$USED_PORTS" in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      USED_PORTS="$USED_PORTS$p "
      echo "$p"; return 0
    fi
  done
  die "no free loopback port found after 200 tries"
}
