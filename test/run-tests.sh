#!/usr/bin/env bash
# Runs every test: unit tests and the e2e suite against a real local control plane, which this
# script builds if needed (cached under ~/.cache/lws-rollout), starts, and stops again.
#
#   test/run-tests.sh [extra cargo test args]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
. test/cluster/lib.sh

command -v cargo >/dev/null 2>&1 || die "no cargo on PATH: install Rust >= 1.92 (rustup) to build lws-rollout"
START=$SECONDS

# 1. Tools and builds, cached under ~/.cache/lws-rollout (warm: instant). Cold, they are the
#    long part, so they run in three lanes on the 2 cores: two lanes of Go tool builds in the
#    background, each one build after another, beside the Rust builds in the foreground. A
#    cold build waits much of its time on a single-threaded link or on the module proxy, and
#    the other lanes fill the gap. Each lane is a process group of its own, stopped on exit.
TOOLS=$(mktemp -d "${TMPDIR:-/tmp}/lws-rollout-tools.XXXXXX")
LANES=()
stop_lanes() {
  local pid
  for pid in "${LANES[@]}"; do kill -- "-$pid" 2>/dev/null || true; done
  rm -rf "$TOOLS"
}
trap stop_lanes EXIT
lane() { setsid test/tools/build-lane.sh "$TOOLS" "$@" & LANES+=($!); }
# Lane one: the control plane (cold: a Go build of ~7 min); the upstream LWS manager
# (test/upstream/versions.env) and upstream's own code as the reference for revision keys
# (test/lwsref), for the e2e tests that run them; kubectl-kruise, which the Rollout e2e tests
# run; Helm, which installs the chart.
lane cp=test/cluster/build.sh upstream=test/upstream/build.sh lwsref=test/upstream/build-lwsref.sh \
  kruise=test/tools/build-kruise.sh helm=test/tools/build-helm.sh
# Lane two: Argo CD's health check; Kueue v0.19.2, run out of cluster beside the suite's
# cluster (docs/kueue.md; skipped with LWS_CLUSTER_KUEUE=0); the traffic layer's proxy,
# Traefik; Prometheus for the release-analysis tests (Debian's package, unpacked in seconds).
KUEUE="${LWS_CLUSTER_KUEUE:-1}"
KUEUE_BUILD=kueue=test/kueue/build.sh
[ "$KUEUE" = 1 ] || KUEUE_BUILD=kueue=true
lane argocd=test/tools/build-argocd-health.sh "$KUEUE_BUILD" traefik=test/cluster/build-traefik.sh \
  prometheus=test/cluster/build-prometheus.sh
# The Rust lane: the manager image for amd64 and arm64, built without a container engine as an
# OCI layout (two release builds, one of them cross, linked side by side); the manager every
# e2e test runs is the image's amd64 binary, the release build users run (built by the image;
# this only names it); qemu's user-mode emulator, which runs the arm64 image's binary in the
# image test. Then every test target, before the cluster starts, so compile time never eats
# into e2e timeouts.
IMAGE=$(test/image/build.sh)
MANAGER_BIN=$(test/image/build-binary.sh amd64)
QEMU_AARCH64="$(test/tools/build-cross-aarch64.sh)/qemu-aarch64-static"
log "building lws-rollout and its tests"
cargo build --locked --workspace --all-targets
cargo test --locked --no-run --workspace --all-targets 2>&1 | grep -v '^ *Executable' || true
log "waiting for the tool builds"
wait "${LANES[@]}"
# built NAME: the tool's path, or nothing when its build failed (its errors are above).
built() { [ "$(cat "$TOOLS/$1.rc" 2>/dev/null)" = 0 ] && cat "$TOOLS/$1"; }
BIN=$(built cp) || die "the control plane was not built (see test/cluster/build.sh's errors above)"
UPSTREAM_BIN=$(built upstream) || die "the upstream LWS manager was not built (see its errors above)"
LWSREF_BIN=$(built lwsref) || die "the upstream reference tool was not built (see its errors above)"
HELM=$(built helm) || die "Helm was not built (see its errors above)"
# A tool that cannot be built here (no Go, no module proxy) leaves its variable empty, and its
# tests print one SKIPPED line instead of running.
KRUISE_BIN=$(built kruise) || { log "kubectl-kruise not built: its e2e tests will be skipped"; KRUISE_BIN=""; }
ARGOCD_HEALTH_BIN=$(built argocd) || { log "argocd-health not built: its e2e tests will be skipped"; ARGOCD_HEALTH_BIN=""; }
KUEUE_SKIPPED=""
if [ "$KUEUE" = 1 ]; then
  if ! built kueue >/dev/null; then
    KUEUE=0; KUEUE_SKIPPED="Kueue not built (test/kueue/build.sh failed, see its log)"
  elif [ "$(id -u)" != 0 ] && [ ! -s /etc/kueue/metrics/certs/tls.crt ]; then
    KUEUE=0; KUEUE_SKIPPED="not root: Kueue reads its metrics certificate from /etc/kueue/metrics/certs (test/kueue/start.sh writes it once as root)"
  fi
fi
# Without Traefik the cluster still comes up and the traffic tests report SKIPPED with the
# reason; without Prometheus the analysis tests do.
built traefik >/dev/null || log "Traefik not built: the traffic tests will be skipped"
built prometheus >/dev/null || log "Prometheus not available: the analysis e2e tests will be skipped"
# Volcano's CRDs, which the Volcano gang-scheduling e2e tests install on clusters of their own
# (checked in, generated from pinned versions by test/volcano/regen.sh).
VOLCANO_CRDS=$(test/volcano/crds.sh)
stop_lanes
trap - EXIT

# 2. A cluster of our own, in a fresh state dir, stopped on every exit path.
STATE=$(mktemp -d "${TMPDIR:-/tmp}/lws-rollout-e2e.XXXXXX")
# Each e2e test's run time; a caller may name a file that outlives the cluster's state dir.
E2E_TIMES="${LWS_E2E_TIMES:-$STATE/logs/e2e-times.tsv}"
cleanup() {
  rc=$?
  if [ $rc -ne 0 ]; then
    echo "tests failed; control-plane and manager logs kept in $STATE/logs; last manager lines:" >&2
    tail -n 20 "$STATE/logs/manager.log" >&2 2>/dev/null || true
    test/cluster/down.sh "$STATE" --keep-logs
  else
    test/cluster/down.sh "$STATE"
  fi
  exit $rc
}
trap cleanup EXIT
# The audit log shows which requests the manager made (the RBAC check in step 5).
KUBECONFIG_FILE=$(LWS_CLUSTER_AUDIT_POLICY="$REPO/test/helm/audit-policy.yaml" LWS_CLUSTER_KUEUE="$KUEUE" \
  LWS_CLUSTER_PROMETHEUS="${LWS_CLUSTER_PROMETHEUS:-1}" \
  LWS_ROLLOUT_PODAGENT_BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug/lws-podagent" test/cluster/up.sh "$STATE")
TRAFFIC_SKIPPED=$(cat "$STATE/traffic/skipped" 2>/dev/null || true)
[ -z "$TRAFFIC_SKIPPED" ] || log "traffic tests will be SKIPPED: $TRAFFIC_SKIPPED"
[ -z "$KUEUE_SKIPPED" ] || echo "$KUEUE_SKIPPED" >"$STATE/kueue/skipped"
KUEUE_SKIPPED=$(cat "$STATE/kueue/skipped" 2>/dev/null || true)
[ -z "$KUEUE_SKIPPED" ] || log "Kueue tests will be SKIPPED: $KUEUE_SKIPPED"
KUBECONFIG="$KUBECONFIG_FILE" install_crds "$BIN/kubectl"
# The chart, installed with Helm; the manager runs as its ServiceAccount (impersonation), so
# the chart's RBAC is exactly what the whole suite runs with.
MANAGER_KUBECONFIG=$(test/helm/install.sh "$KUBECONFIG_FILE" "$STATE")

# 3. The manager under test, against the same cluster; its PID joins the cluster's so
#    down.sh stops it, and its log sits with the control-plane logs.
KUBECONFIG="$MANAGER_KUBECONFIG" "$MANAGER_BIN" --health-addr=127.0.0.1:0 --webhook-addr=127.0.0.1:0 --webhook-host=127.0.0.1 >"$STATE/logs/manager.log" 2>&1 &
echo $! >"$STATE/pids/manager.pid"

# 4. Unit and e2e tests. E2E tests run concurrently, one namespace each.
log "running unit and e2e tests"
export LWS_E2E_KUBECONFIG="$KUBECONFIG_FILE" LWS_E2E_BIN_DIR="$BIN" LWS_E2E_UPSTREAM_BIN="$UPSTREAM_BIN" \
  LWS_E2E_KRUISE_BIN="$KRUISE_BIN" LWS_E2E_ARGOCD_HEALTH_BIN="$ARGOCD_HEALTH_BIN" \
  LWS_E2E_HELM="$HELM" LWS_E2E_IMAGE="$IMAGE" LWS_E2E_MANAGER_BIN="$MANAGER_BIN" \
  LWS_E2E_QEMU_AARCH64="$QEMU_AARCH64" LWS_E2E_LWSREF_BIN="$LWSREF_BIN" \
  LWS_E2E_MANAGER_LOG="$STATE/logs/manager.log" LWS_E2E_VOLCANO_CRDS="$VOLCANO_CRDS" \
  LWS_E2E_TIMES="$E2E_TIMES" \
  LWS_ROLLOUT_PODAGENT_BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug/lws-podagent"
# Five tests at a time on the 2 cores CI has: most e2e tests wait on the cluster most of the
# time, and fewer left the cores half idle through the second half of the suite. Tests with a
# cluster of their own take turns (test/e2e/isolated.rs, LWS_E2E_ISOLATED_AT_ONCE), so the
# control planes every test waits on are not starved. A caller's RUST_TEST_THREADS wins.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-5}"
# An async e2e test runs its whole future on its test thread's stack, and a debug build's
# futures are large: 16 MiB rather than libtest's 2 MiB (address space, not memory), so a
# test that waits on more things does not overflow it.
export RUST_MIN_STACK="${RUST_MIN_STACK:-16777216}"
SUITE_START=$SECONDS
TESTS_RC=0
cargo test --locked --workspace --all-targets "$@" || TESTS_RC=$?
# The suite's budget is 15 min (DEVELOPERS.md): the slowest tests, by name, for whoever trims it
# (printed whether or not the tests passed).
if [ -s "$E2E_TIMES" ]; then
  log "tests ran $((SECONDS - SUITE_START))s; the slowest e2e tests (seconds, cluster, test):"
  # sed reads to the end (head would close the pipe early: sort's SIGPIPE fails pipefail).
  sort -rn "$E2E_TIMES" | sed -n '1,12p' >&2
fi
[ "$TESTS_RC" = 0 ] || exit "$TESTS_RC"
# 5. Least privilege, over the whole suite's requests (so not when a filter ran only some).
#    --workspace as above: the same features, so nothing is compiled again.
if [ $# -eq 0 ]; then
  log "checking the chart's RBAC against the requests the manager made"
  LWS_E2E_AUDIT_LOG="$STATE/logs/audit.log" cargo test --locked --workspace --test e2e rbac:: -- --ignored
fi
log "all tests passed in $((SECONDS - START))s"
