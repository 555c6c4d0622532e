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
# - upstream's Volcano gang-scheduling specs in a pass of their own: our manager restarted
#   with --gang-scheduling-provider=volcano, Volcano's CRDs (test/volcano/crds.sh), and a
#   kube-scheduler profile named "volcano" standing in for Volcano's scheduler (binding only);
# - LWS_UPSTREAM_VERSION=v0.10.0 builds the suites from LWS_GIT (a git repository of
#   kubernetes-sigs/lws holding the tag; the proxy refuses that version's zip);
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
  rm -rf "$DIR/src"
  if (cd "$DIR" && GOFLAGS= go mod download -json "sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION" >>"$LOG" 2>&1); then
    MOD=$(cd "$DIR" && GOFLAGS= go mod download -json "sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
    cp -r "$MOD" "$DIR/src" && chmod -R u+w "$DIR/src"
  elif [ -n "${LWS_GIT:-}" ]; then
    # The proxy refuses the module's zip (v0.10.0 here): the tag's tree from LWS_GIT, used
    # only if its commit is the one the proxy's .info names (as test/upstream/build.sh does).
    PROXY=$(go env GOPROXY | cut -d, -f1)
    WANT=$(curl -fsS "$PROXY/sigs.k8s.io/lws/@v/$LWS_UPSTREAM_VERSION.info" | sed -n 's/.*"Hash":"\([0-9a-f]*\)".*/\1/p')
    GOT=$(git --git-dir="$LWS_GIT" rev-parse "$LWS_UPSTREAM_VERSION^{commit}" 2>>"$LOG") || GOT=""
    [ -n "$WANT" ] && [ "$WANT" = "$GOT" ] \
      || die "tag $LWS_UPSTREAM_VERSION in LWS_GIT=$LWS_GIT is ${GOT:-missing}; the module proxy names ${WANT:-nothing}"
    mkdir -p "$DIR/src"
    # The module's Go code only (a partial clone may lack large files elsewhere, e.g. site/).
    git --git-dir="$LWS_GIT" archive "$LWS_UPSTREAM_VERSION" -- go.mod go.sum LICENSE api client-go cmd config pkg test 2>>"$LOG" \
      | tar -x -C "$DIR/src"
    log "sigs.k8s.io/lws $LWS_UPSTREAM_VERSION from $LWS_GIT (commit $GOT, as the proxy names it)"
  else
    tail -n 5 "$LOG" >&2
    die "cannot download sigs.k8s.io/lws@$LWS_UPSTREAM_VERSION (log: $LOG); set LWS_GIT to a git repository of kubernetes-sigs/lws holding the tag"
  fi
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
  #  - "gang scheduling": upstream's Volcano specs, run in a pass of their own below;
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

  # Upstream's Volcano gang-scheduling specs (SCHEDULER_PROVIDER=volcano), against our manager
  # restarted with --gang-scheduling-provider=volcano and Volcano's CRDs (test/volcano/crds.sh).
  # Their pods carry schedulerName: volcano and each spec waits for its groups to be Ready, but
  # Volcano's scheduler cannot be built here (its module is refused by the proxy): a second
  # kube-scheduler with a profile named "volcano" binds them instead, one pod at a time. So
  # these specs check what LWS writes — PodGroups per group and revision, owner, minMember,
  # minResources, cleanup — not Volcano's all-or-nothing binding (test/e2e/lws_volcano.rs and
  # docs/lws.md say the same).
  log "running upstream's Volcano gang-scheduling specs"
  VOLCANO_CRDS=$(test/volcano/crds.sh)
  "$BIN/kubectl" apply --server-side -f "$VOLCANO_CRDS/scheduling.volcano.sh_podgroups.yaml" \
    -f "$VOLCANO_CRDS/scheduling.volcano.sh_queues.yaml" >/dev/null
  "$BIN/kubectl" wait --for=condition=Established --timeout=60s crd/podgroups.scheduling.volcano.sh >/dev/null
  # Our manager again, with the flag (only the PID we recorded is stopped).
  kill "$(cat "$STATE/pids/manager.pid")" 2>/dev/null || true
  while kill -0 "$(cat "$STATE/pids/manager.pid")" 2>/dev/null; do sleep 0.2; done
  rm -f "$STATE/pids/manager.pid"
  "$MANAGER_BIN" --health-addr=127.0.0.1:0 --webhook-addr=127.0.0.1:0 --webhook-host=127.0.0.1 \
    --gang-scheduling-provider=volcano >"$STATE/logs/manager-volcano.log" 2>&1 &
  echo $! >"$STATE/pids/manager-volcano.pid"
  cat >"$STATE/volcano-binder.yaml" <<YAML
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$KUBECONFIG"}
leaderElection: {leaderElect: false}
profiles: [{schedulerName: volcano}]
YAML
  "$BIN/kube-scheduler" --config="$STATE/volcano-binder.yaml" --secure-port=0 --v=1 \
    >"$STATE/logs/volcano-binder.log" 2>&1 &
  echo $! >"$STATE/pids/volcano-binder.pid"
  # Our webhooks answer once the new manager has registered its port.
  deadline=$((SECONDS + 60))
  until grep -q "webhooks serving and registered" "$STATE/logs/manager-volcano.log" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || die "our manager did not start with the volcano flag (log: $STATE/logs/manager-volcano.log)"
    sleep 0.5
  done
  set +e
  (cd "$OUT" && SCHEDULER_PROVIDER=volcano "$DIR/lws-e2e.test" -test.v -test.timeout=30m -ginkgo.v \
    -ginkgo.focus='gang scheduling' -ginkgo.junit-report="$OUT/lws-volcano-junit.xml") >"$OUT/lws-volcano.log" 2>&1
  rc=$?
  set -e
  echo "LWS Volcano specs: $(summary "$OUT/lws-volcano.log")"
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
