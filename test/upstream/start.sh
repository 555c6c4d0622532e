#!/usr/bin/env bash
# Starts the upstream LWS controller (test/upstream/build.sh) out of cluster against the local
# cluster in STATE_DIR (test/cluster/up.sh STATE_DIR), the way its own manifests deploy it but
# reached through loopback URLs:
#
#   test/upstream/start.sh STATE_DIR [--no-webhooks]
#
# - config file (api/config/v1alpha1 Configuration): leader election off, internal cert
#   management off, webhook server on 127.0.0.1:<free port> with a CA and serving certificate
#   for IP 127.0.0.1 made here with openssl, metrics and health on free loopback ports;
# - upstream's MutatingWebhookConfiguration and ValidatingWebhookConfiguration as its kustomize
#   install renders them (names lws-*-webhook-configuration, same webhooks, paths, rules and
#   pod objectSelector; v0.9's DisaggregatedSet webhook too), server-side applied with
#   clientConfig.url and caBundle. The cluster needs the DisaggregatedSet CRD (crds/ has it):
#   v0.9's manager watches DisaggregatedSets;
# - --no-webhooks: ENABLE_WEBHOOKS=false and no webhook configurations (upstream's pods then get
#   none of the labels its controller relies on: only for measuring the bare controller).
#
# Returns once /readyz answers (and the webhook server accepts TLS). PID in
# STATE_DIR/pids/lws-upstream.pid (test/cluster/down.sh and test/upstream/stop.sh stop it), log in
# STATE_DIR/logs/lws-upstream.log. Environment: LWS_UPSTREAM_KUBECONFIG (default
# STATE_DIR/kubeconfig) is the identity the controller uses; extra controller flags in
# LWS_UPSTREAM_ARGS (e.g. --zap-log-level=error).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
die() { echo "lws-rollout upstream: $*" >&2; exit 1; }
log() { echo "[upstream $(date +%H:%M:%S)] $*" >&2; }

STATE=""; WEBHOOKS=1
for a in "$@"; do
  case "$a" in --no-webhooks) WEBHOOKS=0 ;; -*) die "unknown flag $a" ;; *) STATE=$a ;; esac
done
[ -n "$STATE" ] || die "usage: test/upstream/start.sh STATE_DIR [--no-webhooks]"
[ -f "$STATE/kubeconfig" ] || die "no cluster in $STATE (start one with test/cluster/up.sh $STATE)"
STATE="$(cd "$STATE" && pwd)"
KCFG="${LWS_UPSTREAM_KUBECONFIG:-$STATE/kubeconfig}"
PIDFILE="$STATE/pids/lws-upstream.pid"
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  die "upstream LWS already runs from $STATE (pid $(cat "$PIDFILE")): stop it with test/upstream/stop.sh $STATE"
fi

UPSTREAM=$("$HERE/build.sh")
KUBECTL="$("$HERE/../cluster/build.sh")/kubectl"
# v0.10's DisaggregatedSet controller watches DisaggregatedSetRoleScalers: without their CRD it
# does not start. crds/ does not serve that kind yet, so upstream's own CRD is applied (build.sh
# keeps upstream's CRDs beside the binary; a binary given by LWS_UPSTREAM_BIN has none).
SCALER_CRD="$(dirname "$UPSTREAM")/crds/disaggregatedset.x-k8s.io_disaggregatedsetrolescalers.yaml"
if [ -f "$SCALER_CRD" ]; then
  KUBECONFIG="$KCFG" "$KUBECTL" apply --server-side -f "$SCALER_CRD" >/dev/null
  KUBECONFIG="$KCFG" "$KUBECTL" wait --for condition=established --timeout=30s \
    crd/disaggregatedsetrolescalers.disaggregatedset.x-k8s.io >/dev/null
fi
W="$STATE/lws-upstream"
rm -rf "$W"
mkdir -p "$W/certs" "$STATE/logs" "$STATE/pids"

# free_port: test/cluster/lib.sh (ports below the ephemeral range).
. "$HERE/../cluster/lib.sh"
die() { echo "lws-rollout upstream: $*" >&2; exit 1; }
log() { echo "[upstream $(date +%H:%M:%S)] $*" >&2; }
free_port WEBHOOK_PORT; free_port METRICS_PORT; free_port HEALTH_PORT

# --- serving certificate for 127.0.0.1, signed by a CA of its own ----------------------------
(
  cd "$W/certs"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=lws-upstream-webhook-ca" 2>/dev/null
  cat >serving.cnf <<CNF
[req]
distinguished_name = dn
[dn]
[ext]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
CNF
  openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj "/CN=127.0.0.1" -config serving.cnf 2>/dev/null
  openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt -days 3650 \
    -extfile serving.cnf -extensions ext 2>/dev/null
) || die "openssl could not make the webhook certificate"

cat >"$W/config.yaml" <<CFG
apiVersion: config.lws.x-k8s.io/v1alpha1
kind: Configuration
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
webhook:
  host: 127.0.0.1
  port: $WEBHOOK_PORT
  certDir: $W/certs
metrics:
  bindAddress: 127.0.0.1:$METRICS_PORT
health:
  healthProbeBindAddress: 127.0.0.1:$HEALTH_PORT
CFG

ENABLE=true; [ $WEBHOOKS = 1 ] || ENABLE=false
log "starting upstream LWS ($UPSTREAM) with webhooks=$ENABLE, health 127.0.0.1:$HEALTH_PORT"
# shellcheck disable=SC2086
KUBECONFIG="$KCFG" ENABLE_WEBHOOKS=$ENABLE "$UPSTREAM" --config="$W/config.yaml" --leader-elect=false \
  ${LWS_UPSTREAM_ARGS:-} >"$STATE/logs/lws-upstream.log" 2>&1 &
PID=$!
echo "$PID" >"$PIDFILE"
echo "127.0.0.1:$METRICS_PORT" >"$W/metrics-addr"
echo "127.0.0.1:$HEALTH_PORT" >"$W/health-addr"

fail() { # stop what we started, then die
  kill -TERM "$PID" 2>/dev/null || true
  rm -f "$PIDFILE"
  die "$1; last log lines: $(tail -n 5 "$STATE/logs/lws-upstream.log" 2>/dev/null)"
}
deadline=$((SECONDS + 60))
until [ "$(curl -s "http://127.0.0.1:$HEALTH_PORT/readyz" 2>/dev/null)" = ok ]; do
  kill -0 "$PID" 2>/dev/null || fail "upstream LWS exited (log: $STATE/logs/lws-upstream.log)"
  [ $SECONDS -lt $deadline ] || fail "upstream LWS /readyz not ok after 60s"
  sleep 0.2
done

if [ $WEBHOOKS = 1 ]; then
  until curl -s -o /dev/null --cacert "$W/certs/ca.crt" "https://127.0.0.1:$WEBHOOK_PORT/healthz" 2>/dev/null; do
    kill -0 "$PID" 2>/dev/null || fail "upstream LWS exited (log: $STATE/logs/lws-upstream.log)"
    [ $SECONDS -lt $deadline ] || fail "upstream webhook server on 127.0.0.1:$WEBHOOK_PORT not serving TLS after 60s"
    sleep 0.2
  done
  CA=$(base64 -w0 <"$W/certs/ca.crt")
  URL="https://127.0.0.1:$WEBHOOK_PORT"
  # config/webhook/manifests.yaml with config/webhook/{mutating,validating}-patch.yaml and the
  # default kustomization's "lws-" name prefix applied; service references become URLs.
  cat >"$W/webhooks.yaml" <<YAML
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: lws-mutating-webhook-configuration
webhooks:
- name: mleaderworkerset.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$URL/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset", caBundle: "$CA"}
  failurePolicy: Fail
  sideEffects: None
  rules:
  - {apiGroups: [leaderworkerset.x-k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [leaderworkersets]}
- name: mpod.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$URL/mutate--v1-pod", caBundle: "$CA"}
  failurePolicy: Fail
  sideEffects: None
  objectSelector:
    matchExpressions: [{key: leaderworkerset.sigs.k8s.io/name, operator: Exists}]
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: lws-validating-webhook-configuration
webhooks:
- name: vleaderworkerset.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$URL/validate-leaderworkerset-x-k8s-io-v1-leaderworkerset", caBundle: "$CA"}
  failurePolicy: Fail
  sideEffects: None
  rules:
  - {apiGroups: [leaderworkerset.x-k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [leaderworkersets]}
- name: vpod.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$URL/validate--v1-pod", caBundle: "$CA"}
  failurePolicy: Fail
  sideEffects: None
  objectSelector:
    matchExpressions: [{key: leaderworkerset.sigs.k8s.io/name, operator: Exists}]
  rules:
  - {apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [pods]}
- name: vdisaggregatedset.kb.io
  admissionReviewVersions: [v1]
  clientConfig: {url: "$URL/validate-disaggregatedset-x-k8s-io-v1-disaggregatedset", caBundle: "$CA"}
  failurePolicy: Fail
  sideEffects: None
  rules:
  - {apiGroups: [disaggregatedset.x-k8s.io], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [disaggregatedsets]}
YAML
  KUBECONFIG="$STATE/kubeconfig" "$KUBECTL" apply --server-side --force-conflicts \
    --field-manager=lws-upstream-start -f "$W/webhooks.yaml" >/dev/null \
    || fail "could not apply upstream's webhook configurations"
  echo "mutatingwebhookconfiguration/lws-mutating-webhook-configuration validatingwebhookconfiguration/lws-validating-webhook-configuration" >"$W/created-webhooks"
fi
log "upstream LWS ready (pid $PID, log $STATE/logs/lws-upstream.log)"
