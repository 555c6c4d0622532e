#!/usr/bin/env bash
# Runs Kueue's own LeaderWorkerSet e2e specs (sigs.k8s.io/kueue, the version versions.env
# pins; ginkgo label `feature:leaderworkerset`) against OUR manager on a local cluster of its
# own:
#
#   test/kueue/e2e-suite.sh
#
# - the suite holding them: test/e2e/singlecluster/extended ("End To End Extended Suite"),
#   built with `go test -c` inside a copy of the module (its own go.mod and go.sum), cached
#   under ~/.cache/lws-rollout/kueue-upstream-e2e-<version>/, run with
#   -ginkgo.label-filter=feature:leaderworkerset. (Kueue's other suites with that label —
#   tas/extended and multikueue/extended — need Topology-Aware Scheduling and a second
#   cluster; not run here.)
# - a fresh cluster (test/cluster/up.sh, no traffic layer) with our CRDs and Kueue out of
#   cluster (test/kueue/start.sh, leader election on: the suite waits for Kueue's Lease), the
#   integrations leaderworkerset and pod; our manager out of cluster with its webhooks (the
#   release build the image ships, test/image/build-binary.sh; LWS_MANAGER_BIN names a
#   prebuilt one instead);
# - the KWOK nodes labelled instance-type=on-demand: the suite's ResourceFlavor selects that
#   label, as Kueue's kind cluster labels its workers;
# - the suite's BeforeSuite waits for the Deployments kueue-system/kueue-controller-manager
#   (ready pods, and a Service kueue-webhook-service whose EndpointSlice names them) and
#   lws-system/lws-controller-manager: placeholder Deployments of those names (no container
#   runs under KWOK) stand in for them; the Kueue and the LWS controller the specs exercise are
#   the out-of-cluster ones above. Its webhook probe (a dry-run ResourceFlavor) and its Lease
#   check reach the real Kueue.
#
# Prints the "Ran N of M Specs … Passed | Failed | Pending | Skipped" line (M counts every spec
# of the suite, N those the label selects) and keeps the full output and the JUnit report under
# target/kueue-e2e/. Every process it starts is recorded and stopped (test/cluster/down.sh) on
# every exit path.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO"
. test/cluster/lib.sh
# shellcheck source=versions.env
. test/kueue/versions.env
die() { echo "lws-rollout kueue e2e: $*" >&2; exit 1; }
log() { echo "[kueue-e2e $(date +%H:%M:%S)] $*" >&2; }

BIN=$(test/cluster/build.sh)
command -v go >/dev/null 2>&1 || die "no Go toolchain on PATH (Go >= 1.26 builds Kueue's suite)"
test/kueue/build.sh >/dev/null || die "Kueue $KUEUE_VERSION not built (test/kueue/build.sh)"

# --- the suite, built from the module -------------------------------------------------------
DIR="$CACHE_ROOT/kueue-upstream-e2e-$KUEUE_VERSION"
SUITE="$DIR/singlecluster-extended.test"
STAMP="$DIR/.complete"
if [ ! -f "$STAMP" ] || [ ! -x "$SUITE" ]; then
  mkdir -p "$DIR"
  LOG="$DIR/build.log"; : >"$LOG"
  log "building Kueue's singlecluster/extended e2e suite ($KUEUE_VERSION) into $DIR (log: $LOG)"
  export GOTOOLCHAIN=local CGO_ENABLED=0 GONOSUMDB="${KUEUE_GONOSUMDB:-}"
  rm -rf "$DIR/src"
  MOD=$(cd "$DIR" && GOFLAGS= go mod download -json "sigs.k8s.io/kueue@$KUEUE_VERSION" 2>>"$LOG" \
    | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [ -n "$MOD" ] && [ -d "$MOD" ] || { tail -n 5 "$LOG" >&2; die "cannot download sigs.k8s.io/kueue@$KUEUE_VERSION (log: $LOG)"; }
  cp -r "$MOD" "$DIR/src" && chmod -R u+w "$DIR/src"
  (cd "$DIR/src" && GOFLAGS=-mod=mod go test -c -o "$SUITE" ./test/e2e/singlecluster/extended >>"$LOG" 2>&1) \
    || { tail -n 15 "$LOG" >&2; die "building Kueue's e2e suite failed (log: $LOG)"; }
  rm -rf "$DIR/src"
  echo "sigs.k8s.io/kueue $KUEUE_VERSION test/e2e/singlecluster/extended, $(go env GOVERSION)" >"$STAMP"
  log "suite built"
fi

if [ -n "${LWS_MANAGER_BIN:-}" ]; then
  [ -x "$LWS_MANAGER_BIN" ] || die "LWS_MANAGER_BIN=$LWS_MANAGER_BIN is not an executable"
  MANAGER_BIN=$LWS_MANAGER_BIN
else
  log "building our manager"
  MANAGER_BIN=$(test/image/build-binary.sh amd64)
fi

# --- a cluster with Kueue, our manager ------------------------------------------------------
OUT="$REPO/target/kueue-e2e"
mkdir -p "$OUT"
STATE=$(mktemp -d "${TMPDIR:-/tmp}/lws-kueue-e2e.XXXXXX")
cleanup() {
  rc=$?
  test/cluster/down.sh "$STATE" --keep-logs || true
  cp -r "$STATE/logs" "$OUT/" 2>/dev/null || true
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
KUBECONFIG_FILE=$(LWS_CLUSTER_TRAFFIC=0 LWS_CLUSTER_KUEUE=1 LWS_KUEUE_LEADER_ELECT=1 test/cluster/up.sh "$STATE")
[ ! -s "$STATE/kueue/skipped" ] || die "Kueue did not start: $(cat "$STATE/kueue/skipped")"
export KUBECONFIG="$KUBECONFIG_FILE"
k() { "$BIN/kubectl" "$@"; }
k label nodes -l type=kwok instance-type=on-demand --overwrite >/dev/null
"$MANAGER_BIN" --health-addr=127.0.0.1:0 --webhook-addr=127.0.0.1:0 --webhook-host=127.0.0.1 \
  >"$STATE/logs/manager.log" 2>&1 &
echo $! >"$STATE/pids/manager.pid"
deadline=$((SECONDS + 60))
until k get mutatingwebhookconfiguration lws-rollout >/dev/null 2>&1; do
  [ $SECONDS -lt $deadline ] || die "our manager registered no webhooks in 60s (log: $STATE/logs/manager.log)"
  sleep 0.5
done

# --- placeholders for the in-cluster Deployments the BeforeSuite waits for -------------------
placeholder() { # namespace name label
  k create namespace "$1" >/dev/null 2>&1 || true
  k apply -f - >/dev/null <<YAML
apiVersion: apps/v1
kind: Deployment
metadata:
  name: $2
  namespace: $1
  annotations:
    lws-rollout.x-k8s.io/placeholder: "Kueue's e2e suite waits for this Deployment; what it stands for runs out of cluster"
spec:
  replicas: 1
  selector: {matchLabels: {control-plane: $3}}
  template:
    metadata: {labels: {control-plane: $3}}
    spec: {containers: [{name: manager, image: placeholder.invalid/none}]}
YAML
}
placeholder kueue-system kueue-controller-manager kueue-placeholder
placeholder lws-system lws-controller-manager lws-placeholder
# The suite compares the ready pods' IPs with the EndpointSlice of Kueue's webhook Service.
k apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Service
metadata: {name: kueue-webhook-service, namespace: kueue-system}
spec:
  selector: {control-plane: kueue-placeholder}
  ports: [{port: 443, targetPort: 9443}]
YAML
k -n kueue-system rollout status deployment/kueue-controller-manager --timeout=120s >/dev/null \
  || die "the placeholder Deployment kueue-system/kueue-controller-manager did not become available"
k -n lws-system rollout status deployment/lws-controller-manager --timeout=120s >/dev/null \
  || die "the placeholder Deployment lws-system/lws-controller-manager did not become available"

# Ginkgo colours its summary: strip the escapes before matching.
summary() { sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -E '^(Ran [0-9]+ of [0-9]+ Specs|SUCCESS!|FAIL!)' | tr '\n' ' '; echo; }
# Skipped, with the reason: none so far.
SKIP="${LWS_KUEUE_E2E_SKIP:-}"
log "running Kueue's LeaderWorkerSet specs (label feature:leaderworkerset${SKIP:+; skipping: $SKIP})"
set +e
# KWOK pulls no image: the images only need to be names (PROJECT_DIR and ARTIFACTS keep the
# suite from looking for Kueue's source tree).
(cd "$OUT" && PROJECT_DIR="$OUT/project" ARTIFACTS="$OUT" \
  E2E_TEST_AGNHOST_IMAGE=registry.k8s.io/e2e-test-images/agnhost:2.66.0 \
  "$SUITE" -test.v -test.timeout=60m -ginkgo.v -ginkgo.label-filter=feature:leaderworkerset \
  ${SKIP:+-ginkgo.skip="$SKIP"} -ginkgo.junit-report="$OUT/junit.xml") >"$OUT/suite.log" 2>&1
status=$?
set -e
what="Kueue $KUEUE_VERSION LeaderWorkerSet specs"
echo "$what: $(summary "$OUT/suite.log")"
log "log and JUnit report in $OUT"
exit $status
