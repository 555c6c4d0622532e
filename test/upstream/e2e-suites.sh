#!/usr/bin/env bash
# Runs upstream LeaderWorkerSet's own e2e suites (sigs.k8s.io/lws, the version versions.env pins)
# against OUR manager on a local cluster of its own:
#
#   test/upstream/e2e-suites.sh [lws|ds|all]          (default: all)
#
# - the LWS suite (test/e2e) and the DisaggregatedSet suite (test/e2e/disaggregatedset), each
#   built with `go test -c` inside a copy of the module (its own go.mod and go.sum), cached
#   under ~/.cache/lws-rollout/lws-upstream-e2e-<version>/;
# - a fresh cluster (test/cluster/up.sh, no traffic layer), our CRDs, our manager out of
#   cluster with its webhooks (the release build the image ships, test/image/build-binary.sh);
# - skipped, each with its reason (printed, and in docs/lws.md): what needs a component this
#   project does not run — Volcano gang scheduling, upstream's metrics Service in lws-system,
#   the check that upstream's own controller Deployment is Running;
# - the DisaggregatedSet suite's BeforeSuite waits for upstream's Deployment
#   lws-system/lws-controller-manager to be available: a placeholder Deployment of that name
#   (no container runs under KWOK) stands in for it; the controller the suites test is ours.
#
# Prints each suite's "Ran N of M Specs … Passed | Failed | Pending | Skipped" line and keeps the
# full output and JUnit reports under target/upstream-e2e/. Every process it starts is recorded
# and stopped (test/cluster/down.sh) on every exit path.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
. test/cluster/lib.sh
# shellcheck source=versions.env
. test/upstream/versions.env
die() { echo "lws-rollout upstream e2e: $*" >&2; exit 1; }
log() { echo "[upstream-e2e $(date +%H:%M:%S)] $*" >&2; }

WHICH="${1:-all}"
case "$WHICH" in lws|ds|all) ;; *) die "usage: test/upstream/e2e-suites.sh [lws|ds|all]" ;; esac

BIN=$(test/cluster/build.sh)
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (Go >= 1.26 builds upstream's suites)"

# --- the suites, built from the module ------------------------------------------------------
DIR="$CACHE_ROOT/lws-upstream-e2e-$LWS_UPSTREAM_VERSION"
STAMP="$DIR/.complete"
if [ ! -f "$STAMP" ]; then
  mkdir -p "$DIR"
  LOG="$DIR/build.log"; : >"$LOG"
  log "building upstream's e2e suites ($LWS_UPSTREAM_VERSION) into $DIR (log: $LOG)"
  export GOTOOLCHAIN=local CGO_ENABLED=0
  (cd "$DIR" && GOFLAGS= go mod download -json "sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION" >>"$LOG" 2>&1) \
    || die "cannot download sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION (log: $LOG)"
  MOD=$(cd "$DIR" && GOFLAGS= go mod download -json "sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "$DIR/src" && cp -r "$MOD" "$DIR/src" && chmod -R u+w "$DIR/src"
  (cd "$DIR/src" && GOFLAGS=-mod=mod go test -c -o "$DIR/lws-e2e.test" ./test/e2e >>"$LOG" 2>&1) \
    || { tail -n 15 "$LOG" >&2; die "building the LWS suite failed (log: $LOG)"; }
  (cd "$DIR/src" && GOFLAGS=-mod=mod go test -c -o "$DIR/ds-e2e.test" ./test/e2e/disaggregatedset >>"$LOG" 2>&1) \
    || { tail -n 15 "$LOG" >&2; die "building the DisaggregatedSet suite failed (log: $LOG)"; }
  rm -rf "$DIR/src"
  echo "sigs.k8s.io/lws $LWS_UPSTREAM_VERSION e2e suites, $(go env GOVERSION)" >"$STAMP"
  log "suites built"
fi

log "building our manager"
MANAGER_BIN=$(test/image/build-binary.sh amd64)

# --- a cluster, our CRDs, our manager -------------------------------------------------------
OUT="$REPO/target/upstream-e2e"
mkdir -p "$OUT"
STATE=$(mktemp -d "${TMPDIR:-/tmp}/lws-upstream-e2e.XXXXXX")
cleanup() {
  rc=$?
  test/cluster/down.sh "$STATE" --keep-logs || true
  cp -r "$STATE/logs" "$OUT/" 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
KUBECONFIG_FILE=$(LWS_CLUSTER_TRAFFIC=0 test/cluster/up.sh "$STATE")
export KUBECONFIG="$KUBECONFIG_FILE"
install_crds "$BIN/kubectl"
"$MANAGER_BIN" --health-addr=127.0.0.1:0 --webhook-addr=127.0.0.1:0 --webhook-host=127.0.0.1 \
  >"$STATE/logs/manager.log" 2>&1 &
echo $! >"$STATE/pids/manager.pid"
# Our webhooks answer once the manager has registered them.
deadline=$((SECONDS + 60))
until "$BIN/kubectl" get mutatingwebhookconfiguration lws-rollout >/dev/null 2>&1; do
  [ $SECONDS -lt $deadline ] || die "our manager registered no webhooks in 60s (log: $STATE/logs/manager.log)"
  sleep 0.5
done
export PATH="$BIN:$PATH"   # the DisaggregatedSet suite runs kubectl

# Ginkgo colours its summary: strip the escapes before matching.
summary() { sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -E '^(Ran [0-9]+ of [0-9]+ Specs|SUCCESS!|FAIL!)' | tr '\n' ' '; echo; }
status=0

if [ "$WHICH" != ds ]; then
  # Skipped, with the reason:
  #  - "gang scheduling": needs Volcano (SCHEDULER_PROVIDER=volcano); no such scheduler here;
  #  - "metrics endpoint": reads upstream's metrics Service and ServiceAccount token in
  #    lws-system (controller-runtime metrics); ours are on the health port, unauthenticated.
  SKIP='gang scheduling|metrics endpoint is serving metrics'
  log "running upstream's LWS suite (skipping: $SKIP)"
  set +e
  (cd "$OUT" && "$DIR/lws-e2e.test" -test.v -test.timeout=60m -ginkgo.v -ginkgo.skip="$SKIP" \
    -ginkgo.junit-report="$OUT/lws-junit.xml") >"$OUT/lws.log" 2>&1
  rc=$?
  set -e
  echo "LWS suite: $(summary "$OUT/lws.log")"
  [ $rc -eq 0 ] || status=$rc
fi

if [ "$WHICH" != lws ]; then
  # Upstream's DisaggregatedSet suite waits for its controller's Deployment in lws-system.
  "$BIN/kubectl" create namespace lws-system >/dev/null 2>&1 || true
  "$BIN/kubectl" apply -f - >/dev/null <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata:
  name: lws-controller-manager
  namespace: lws-system
  annotations:
    lws-rollout.x-k8s.io/placeholder: "upstream's e2e suite waits for this Deployment; the controller under test is lws-rollout, out of cluster"
spec:
  replicas: 1
  selector: {matchLabels: {control-plane: controller-manager}}
  template:
    metadata: {labels: {control-plane: controller-manager}}
    spec: {containers: [{name: manager, image: placeholder.invalid/none}]}
YAML
  "$BIN/kubectl" -n lws-system rollout status deployment/lws-controller-manager --timeout=120s >/dev/null \
    || die "the placeholder Deployment did not become available"
  # Skipped, with the reason:
  #  - "controller-manager running": checks upstream's own controller Deployment and pod
  #    (here a placeholder), not the controller under test.
  SKIP='should have the controller-manager running'
  log "running upstream's DisaggregatedSet suite (skipping: $SKIP)"
  set +e
  (cd "$OUT" && "$DIR/ds-e2e.test" -test.v -test.timeout=90m -ginkgo.v -ginkgo.skip="$SKIP" \
    -ginkgo.junit-report="$OUT/ds-junit.xml") >"$OUT/ds.log" 2>&1
  rc=$?
  set -e
  echo "DisaggregatedSet suite: $(summary "$OUT/ds.log")"
  [ $rc -eq 0 ] || status=$rc
fi
log "logs and JUnit reports in $OUT"
exit $status
