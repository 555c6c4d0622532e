#!/usr/bin/env bash
# Installs the chart (charts/lws-rollout) into the suite's cluster as release `lws-rollout` in
# namespace `default` — its RBAC and ServiceAccount are what the suite's manager then runs as —
# and prints the path of a kubeconfig that impersonates that ServiceAccount
# (`as: system:serviceaccount:default:lws-rollout`). The CRDs come from crds/ (installed
# before); the chart's Deployment gets pods that KWOK only pretends to run, so the manager
# itself runs out of cluster.
#
#   test/helm/install.sh KUBECONFIG STATE_DIR
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
. "$REPO/test/cluster/lib.sh"
log() { echo "[helm $(date +%H:%M:%S)] $*" >&2; }
die() { echo "lws-rollout helm: $*" >&2; exit 1; }
KUBECONFIG_FILE=$1
STATE=$2
HELM=$("$REPO/test/tools/build-helm.sh")
RELEASE=lws-rollout
NAMESPACE=default
SA="system:serviceaccount:$NAMESPACE:$RELEASE"

log "helm install $RELEASE (charts/lws-rollout) into namespace $NAMESPACE"
KUBECONFIG="$KUBECONFIG_FILE" "$HELM" install "$RELEASE" "$REPO/charts/lws-rollout" \
  --namespace "$NAMESPACE" --skip-crds >"$STATE/logs/helm-install.log" 2>&1 \
  || die "helm install of charts/lws-rollout failed: $(tail -n 5 "$STATE/logs/helm-install.log")"

OUT="$STATE/manager-kubeconfig"
# The cluster's kubeconfig has one user entry (`  user:`); impersonation is one more key in it.
sed "s|^  user:\$|  user:\n    as: $SA|" "$KUBECONFIG_FILE" >"$OUT"
BIN=$("$REPO/test/cluster/build.sh")
WHO=$(KUBECONFIG="$OUT" "$BIN/kubectl" auth whoami -o jsonpath='{.status.userInfo.username}' 2>&1) \
  || die "kubectl auth whoami with $OUT failed: $WHO"
[ "$WHO" = "$SA" ] || die "$OUT authenticates as '$WHO', not $SA"
echo "$OUT"
