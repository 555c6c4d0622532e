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

# Compiler flags for the Go tools the tests call briefly — Helm, kubectl-kruise, Argo CD's
# health code, crane, actionlint, controller-gen: no optimisation and no inlining. Each call
# lasts moments either way, and the optimiser is a good part of their cold compile. The
# standard library keeps the default flags, so its compiled packages are shared in Go's build
# cache with the builds that stay optimised: the parts the suite loads for its whole length
# (the control plane, Traefik, Kueue), the reference tool the tests run on many inputs, and
# upstream LWS, which the benchmark measures.
GO_CLI_GCFLAGS=(-gcflags='all=-N -l' -gcflags=std=)

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

# install_crds KUBECTL: server-side applies crds/ and crds/argoproj.io/ (Argo's analysis kinds)
# and returns once every CRD is Established.
# (`kubectl wait` errors out instead of waiting while a new CRD has no conditions yet, hence
# the retry loop.)
install_crds() {
  local kubectl=$1 repo deadline
  repo="$(cd "$CLUSTER_DIR/../.." && pwd)"
  "$kubectl" apply --server-side -f "$repo/crds/" -f "$repo/crds/argoproj.io/" >/dev/null
  deadline=$((SECONDS + 60))
  until "$kubectl" wait --for=condition=Established --timeout=10s \
      crd/leaderworkersets.leaderworkerset.x-k8s.io crd/rollouts.rollouts.kruise.io crd/batchreleases.rollouts.kruise.io \
      crd/disaggregatedsets.disaggregatedset.x-k8s.io crd/disaggregatedsetrolescalers.disaggregatedset.x-k8s.io \
      crd/analysistemplates.argoproj.io crd/clusteranalysistemplates.argoproj.io crd/analysisruns.argoproj.io >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || die "CRDs in crds/ not Established after 60s"
    sleep 0.5
  done
}

# Free loopback ports for one script run: `free_port VAR` sets VAR to a port nothing accepts
# on. Ports come from 20000-31999, below Linux's ephemeral range (32768+), where a client
# connection could take a probed port before the server binds it (seen once with concurrent
# test clusters). A port handed out once in this run is never handed out again: none of them is
# listening yet when the next is probed. This needs the assignment in the calling shell: `$(free_port)`
# runs in a subshell whose record of used ports is lost, and a cluster once got its scheduler on its API server's port (the scheduler failed to bind, no pod
# was scheduled, and the benchmark's e2e test timed out).
USED_PORTS=" "
free_port() {
  local p
  for _ in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000))
    case "$USED_PORTS" in *" $p "*) continue ;; esac
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
      USED_PORTS="$USED_PORTS$p "
      printf -v "$1" '%s' "$p"
      return 0
    fi
  done
  die "no free loopback port found after 200 tries"
}

# --- The traffic layer (docs/local-cluster.md) -------------------------------------------------
# Pod IPs come from 198.18.0.0/15 (benchmarking range, never routed on the internet) and exist
# only inside a network namespace per cluster. Each cluster claims one of 16 slots (a /19 each);
# the slot names its namespace, its pod range and the metric of its host route.
TRAFFIC_RANGE=198.18.0.0/15
TRAFFIC_SLOTS=16
TRAFFIC_RUN="${LWS_ROLLOUT_TRAFFIC_RUN:-/run/lws-rollout/traffic}"
# The proxy's ports inside the namespace (its own loopback: no clash with anything outside).
TRAFFIC_WEB_PORT=8000
TRAFFIC_PING_PORT=8080
# Prometheus's port inside the namespace (bridged to a free port on the host's loopback).
PROMETHEUS_NS_PORT=9090

ip2int() { local IFS=.; set -- $1; echo $(( ($1 << 24) | ($2 << 16) | ($3 << 8) | $4 )); }
int2ip() { echo "$(( ($1 >> 24) & 255 )).$(( ($1 >> 16) & 255 )).$(( ($1 >> 8) & 255 )).$(( $1 & 255 ))"; }
traffic_netns() { echo "lws-rollout-$1"; }
traffic_slot_cidr() { echo "$(int2ip $(( $(ip2int 198.18.0.0) + $1 * 8192 )))/19"; }
traffic_route_metric() { echo $((4000 + $1)); }

# traffic_node_cidr SLOT NODE NODES: node NODE's pod range, an equal share of the slot's /19.
traffic_node_cidr() {
  local slot=$1 node=$2 nodes=$3 bits=0
  while [ $((1 << bits)) -lt "$nodes" ]; do bits=$((bits + 1)); done
  local size=$(( 8192 >> bits ))
  echo "$(int2ip $(( $(ip2int 198.18.0.0) + slot * 8192 + node * size )))/$((19 + bits))"
}

# traffic_release SLOT [OWNER]: removes the slot's namespace and host route and frees the slot.
# Only what the slot names is touched, so concurrent clusters never remove each other's parts;
# with OWNER (a state dir), nothing is done unless the slot is still that cluster's (another
# cluster may have reclaimed it since).
traffic_release() {
  local slot=$1 owner=${2:-} ns
  if [ -n "$owner" ] && [ "$(cat "$TRAFFIC_RUN/slot-$slot/owner" 2>/dev/null)" != "$owner" ]; then return 0; fi
  ns=$(traffic_netns "$slot")
  ip netns del "$ns" 2>/dev/null || true
  ip route del unreachable "$TRAFFIC_RANGE" metric "$(traffic_route_metric "$slot")" 2>/dev/null || true
  rm -rf "$TRAFFIC_RUN/slot-$slot"
}

# traffic_claim STATE: claims a free slot for the cluster in STATE and prints it. mkdir is
# atomic, so two clusters starting together never get the same slot. A slot whose owner's
# state dir has no pids/ any more (its run ended without down.sh) is reclaimed; the rename
# makes that reclaim atomic too.
traffic_claim() {
  local state=$1 i owner
  mkdir -p "$TRAFFIC_RUN" 2>/dev/null || return 1
  for i in $(seq 0 $((TRAFFIC_SLOTS - 1))); do
    if ! mkdir "$TRAFFIC_RUN/slot-$i" 2>/dev/null; then
      owner=$(cat "$TRAFFIC_RUN/slot-$i/owner" 2>/dev/null) || continue
      [ -n "$owner" ] && [ ! -d "$owner/pids" ] || continue
      mv "$TRAFFIC_RUN/slot-$i" "$TRAFFIC_RUN/stale-$i.$$" 2>/dev/null || continue
      rm -rf "$TRAFFIC_RUN/stale-$i.$$"
      ip netns del "$(traffic_netns "$i")" 2>/dev/null || true
      ip route del unreachable "$TRAFFIC_RANGE" metric "$(traffic_route_metric "$i")" 2>/dev/null || true
      mkdir "$TRAFFIC_RUN/slot-$i" 2>/dev/null || continue
    fi
    echo "$state" >"$TRAFFIC_RUN/slot-$i/owner"
    echo "$i"
    return 0
  done
  return 1
}

# podagent_bin REPO: prints the pod agent binary (test/podagent): $LWS_ROLLOUT_PODAGENT_BIN, or
# a cargo build of it (a no-op when it is up to date). On failure the last stderr line says why.
podagent_bin() {
  local repo=$1
  if [ -n "${LWS_ROLLOUT_PODAGENT_BIN:-}" ]; then
    [ -x "$LWS_ROLLOUT_PODAGENT_BIN" ] || { echo "LWS_ROLLOUT_PODAGENT_BIN=$LWS_ROLLOUT_PODAGENT_BIN is not an executable" >&2; return 1; }
    echo "$LWS_ROLLOUT_PODAGENT_BIN"; return 0
  fi
  command -v cargo >/dev/null 2>&1 || { echo "no cargo on PATH to build test/podagent" >&2; return 1; }
  (cd "$repo" && cargo build --locked -q -p lws-podagent) >&2 || { echo "cargo build -p lws-podagent failed" >&2; return 1; }
  echo "${CARGO_TARGET_DIR:-$repo/target}/debug/lws-podagent"
}
