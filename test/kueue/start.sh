#!/usr/bin/env bash
# Starts Kueue (test/kueue/build.sh) out of cluster against the local cluster in STATE_DIR
# (test/cluster/up.sh STATE_DIR), the way its own manifests deploy it but reached through
# loopback URLs — the same pattern as test/upstream/start.sh:
#
#   test/kueue/start.sh STATE_DIR
#
# - Kueue's CRDs (from its module), server-side applied; the five CRDs Kueue converts between
#   v1beta1 and v1beta2 get its conversion webhook (clientConfig.url, caBundle), as its
#   kustomize install patches them;
# - a Configuration (config.kueue.x-k8s.io/v1beta2): leader election off (on with
#   LWS_KUEUE_LEADER_ELECT=1, its Lease in kueue-system: Kueue's own e2e suites wait for it), internal cert
#   management off, the webhook server on 127.0.0.1:<free port> with a CA and serving
#   certificate for IP 127.0.0.1 made here with openssl, metrics and health on free loopback
#   ports, manageJobsWithoutQueueName: false (only objects with a kueue.x-k8s.io/queue-name
#   label are Kueue's), and the integrations `leaderworkerset.x-k8s.io/leaderworkerset` and
#   `pod`; VisibilityOnDemand off (its extension API server would bind a fixed port on every
#   interface and needs an APIService);
# - Kueue's webhook configurations as its kustomize install renders them (names
#   kueue-{mutating,validating}-webhook-configuration, same webhook names, paths, rules and
#   namespaceSelectors), limited to the webhooks of the enabled integrations and of Kueue's own
#   kinds, with clientConfig.url and caBundle (and one opt-out label for a test: below);
# - LWS_KUEUE_CONFIG_EXTRA: YAML lines appended to the Configuration (the MultiKueue tests
#   set `multiKueue:` there).
#
# Kueue reads its metrics serving certificate from the fixed path /etc/kueue/metrics/certs
# when internal cert management is off (cmd/kueue/main.go); this script writes a throwaway
# self-signed pair there when none exists (root needed once) and never removes it.
#
# The certificates live in STATE_DIR/kueue/certs and are kept across a stop and start of the
# same cluster, so the caBundle the API server trusts does not change under a restarted Kueue.
# Returns once /readyz answers and the webhook server accepts TLS. PID in
# STATE_DIR/pids/kueue.pid (test/cluster/down.sh and test/kueue/stop.sh stop it), log in
# STATE_DIR/logs/kueue.log (appended to across restarts).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# free_port: test/cluster/lib.sh (ports below the ephemeral range).
. "$HERE/../cluster/lib.sh"
die() { echo "lws-rollout kueue: $*" >&2; exit 1; }
log() { echo "[kueue $(date +%H:%M:%S)] $*" >&2; }

STATE=${1:-}
[ -n "$STATE" ] || die "usage: test/kueue/start.sh STATE_DIR"
[ -f "$STATE/kubeconfig" ] || die "no cluster in $STATE (start one with test/cluster/up.sh $STATE)"
STATE="$(cd "$STATE" && pwd)"
PIDFILE="$STATE/pids/kueue.pid"
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  die "Kueue already runs from $STATE (pid $(cat "$PIDFILE")): stop it with test/kueue/stop.sh $STATE"
fi

KUEUE=$("$HERE/build.sh")
CRDS=$("$HERE/build.sh" --crds)
KUBECTL="$("$HERE/../cluster/build.sh")/kubectl"
k() { KUBECONFIG="$STATE/kubeconfig" "$KUBECTL" "$@"; }
W="$STATE/kueue"
mkdir -p "$W/certs" "$STATE/logs" "$STATE/pids"

# --- the metrics certificate Kueue insists on (fixed path) ----------------------------------
METRICS_CERTS=/etc/kueue/metrics/certs
if [ ! -s "$METRICS_CERTS/tls.crt" ] || [ ! -s "$METRICS_CERTS/tls.key" ]; then
  tmp=$(mktemp -d)
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$tmp/tls.key" -out "$tmp/tls.crt" -days 3650 \
    -subj "/CN=kueue-metrics-test" -addext "subjectAltName = IP:127.0.0.1" 2>/dev/null \
    || { rm -rf "$tmp"; die "openssl could not make Kueue's metrics certificate"; }
  if ! { mkdir -p "$METRICS_CERTS" && cp "$tmp/tls.crt" "$tmp/tls.key" "$METRICS_CERTS/"; } 2>/dev/null; then
    rm -rf "$tmp"
    die "cannot write $METRICS_CERTS (Kueue reads its metrics certificate there when its internal cert management is off): run once as root"
  fi
  rm -rf "$tmp"
fi

# --- serving certificate for 127.0.0.1, signed by a CA of its own (kept across restarts) ----
if [ ! -s "$W/certs/tls.crt" ] || [ ! -s "$W/certs/ca.crt" ]; then
  (
    cd "$W/certs"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=kueue-webhook-test-ca" 2>/dev/null
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
fi
CA=$(base64 -w0 <"$W/certs/ca.crt")

# The webhook port is kept across restarts too: the webhook configurations and the CRDs'
# conversion webhook name it.
if [ -s "$W/webhook-port" ]; then
  WEBHOOK_PORT=$(cat "$W/webhook-port")
  if (exec 3<>"/dev/tcp/127.0.0.1/$WEBHOOK_PORT") 2>/dev/null; then
    die "the webhook port 127.0.0.1:$WEBHOOK_PORT of the previous Kueue is taken by another process"
  fi
  USED_PORTS=" $WEBHOOK_PORT "
else
  free_port WEBHOOK_PORT
  echo "$WEBHOOK_PORT" >"$W/webhook-port"
fi
free_port METRICS_PORT; free_port HEALTH_PORT
URL="https://127.0.0.1:$WEBHOOK_PORT"

# --- CRDs and namespace ---------------------------------------------------------------------
k apply --server-side --force-conflicts --field-manager=lws-kueue-start -f "$CRDS" >/dev/null \
  || die "could not apply Kueue's CRDs from $CRDS"
for crd in workloads localqueues clusterqueues cohorts multikueueclusters; do
  k patch crd "$crd.kueue.x-k8s.io" --type=merge -p "{\"spec\":{\"conversion\":{\"strategy\":\"Webhook\",\"webhook\":{\"conversionReviewVersions\":[\"v1\"],\"clientConfig\":{\"url\":\"$URL/convert\",\"caBundle\":\"$CA\"}}}}}" >/dev/null \
    || die "could not set the conversion webhook of $crd.kueue.x-k8s.io"
done
deadline=$((SECONDS + 60))
until k wait --for=condition=Established --timeout=10s -f "$CRDS" >/dev/null 2>&1; do
  [ $SECONDS -lt $deadline ] || die "Kueue's CRDs not Established after 60s"
  sleep 0.5
done
k get namespace kueue-system >/dev/null 2>&1 || k create namespace kueue-system >/dev/null

LEADER_ELECTION="  leaderElect: false"
if [ "${LWS_KUEUE_LEADER_ELECT:-0}" = 1 ]; then
  # Out of cluster there is no in-cluster namespace to default to: name it.
  LEADER_ELECTION=$(printf '  leaderElect: true\n  resourceNamespace: kueue-system')
fi
cat >"$W/config.yaml" <<CFG
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
manageJobsWithoutQueueName: false
leaderElection:
$LEADER_ELECTION
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
clientConnection:
  qps: 200
  burst: 400
integrations:
  frameworks:
  - leaderworkerset.x-k8s.io/leaderworkerset
  - pod
${LWS_KUEUE_CONFIG_EXTRA:-}
CFG

log "starting Kueue ($KUEUE), webhooks $URL, health 127.0.0.1:$HEALTH_PORT"
KUBECONFIG="$STATE/kubeconfig" "$KUEUE" --config="$W/config.yaml" \
  --feature-gates=VisibilityOnDemand=false ${LWS_KUEUE_ARGS:-} >>"$STATE/logs/kueue.log" 2>&1 &
PID=$!
echo "$PID" >"$PIDFILE"
echo "127.0.0.1:$METRICS_PORT" >"$W/metrics-addr"
echo "127.0.0.1:$HEALTH_PORT" >"$W/health-addr"

fail() { # stop what we started, then die
  kill -TERM "$PID" 2>/dev/null || true
  rm -f "$PIDFILE"
  die "$1; last log lines: $(tail -n 5 "$STATE/logs/kueue.log" 2>/dev/null)"
}
deadline=$((SECONDS + 90))
until [ "$(curl -s "http://127.0.0.1:$HEALTH_PORT/readyz" 2>/dev/null)" = ok ]; do
  kill -0 "$PID" 2>/dev/null || fail "Kueue exited (log: $STATE/logs/kueue.log)"
  [ $SECONDS -lt $deadline ] || fail "Kueue /readyz not ok after 90s"
  sleep 0.2
done
until curl -s -o /dev/null --cacert "$W/certs/ca.crt" "$URL/healthz" 2>/dev/null; do
  kill -0 "$PID" 2>/dev/null || fail "Kueue exited (log: $STATE/logs/kueue.log)"
  [ $SECONDS -lt $deadline ] || fail "Kueue's webhook server on 127.0.0.1:$WEBHOOK_PORT not serving TLS after 90s"
  sleep 0.2
done

# config/components/webhook/manifests.yaml with the kustomization's namespaceSelector patches
# (pods: not in kube-system or kueue-system) and config/default's "kueue-" name prefix; service
# references become URLs. Only the webhooks of the enabled integrations (leaderworkerset, pod)
# and of Kueue's own kinds: the others answer as no-ops when their integration is off.
NOT_SYSTEM='{matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system, kueue-system]}]}'
# One deviation from Kueue's install, for the test clusters only: a namespace labelled
# lws-rollout.test/kueue-webhooks=off is not sent to Kueue's LWS webhooks. Kueue's LWS webhook
# decodes every LWS into Go types and refuses what they cannot hold (e.g. a quantity such as
# "1e1.5" that the CRD schema accepts); the e2e test of our controller's answer to such a spec
# opts its namespace out. Every other namespace gets Kueue's webhooks as installed.
OPT_OUT='{matchExpressions: [{key: lws-rollout.test/kueue-webhooks, operator: NotIn, values: ["off"]}]}'
hook() { # name path group version operations resources [namespaceSelector]
  cat <<YAML
- name: $1
  admissionReviewVersions: [v1]
  clientConfig: {url: "$URL$2", caBundle: "$CA"}
  failurePolicy: Fail
  sideEffects: None
  rules:
  - {apiGroups: ["$3"], apiVersions: [$4], operations: [$5], resources: [$6]}
YAML
  if [ -n "${7:-}" ]; then echo "  namespaceSelector: $7"; fi
}
{
  echo "apiVersion: admissionregistration.k8s.io/v1"
  echo "kind: MutatingWebhookConfiguration"
  echo "metadata: {name: kueue-mutating-webhook-configuration}"
  echo "webhooks:"
  hook mclusterqueue.kb.io /mutate-kueue-x-k8s-io-v1beta2-clusterqueue kueue.x-k8s.io v1beta2 CREATE clusterqueues
  hook mleaderworkerset.kb.io /mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset leaderworkerset.x-k8s.io v1 "CREATE, UPDATE" leaderworkersets "$OPT_OUT"
  hook mpod.kb.io /mutate--v1-pod "" v1 CREATE pods "$NOT_SYSTEM"
  hook mresourceflavor.kb.io /mutate-kueue-x-k8s-io-v1beta2-resourceflavor kueue.x-k8s.io v1beta2 CREATE resourceflavors
  hook mworkload.kb.io /mutate-kueue-x-k8s-io-v1beta2-workload kueue.x-k8s.io v1beta2 CREATE workloads
  echo "---"
  echo "apiVersion: admissionregistration.k8s.io/v1"
  echo "kind: ValidatingWebhookConfiguration"
  echo "metadata: {name: kueue-validating-webhook-configuration}"
  echo "webhooks:"
  hook vclusterqueue.kb.io /validate-kueue-x-k8s-io-v1beta2-clusterqueue kueue.x-k8s.io v1beta2 "CREATE, UPDATE" clusterqueues
  hook vcohort.kb.io /validate-kueue-x-k8s-io-v1beta2-cohort kueue.x-k8s.io v1beta2 "CREATE, UPDATE" cohorts
  hook vleaderworkerset.kb.io /validate-leaderworkerset-x-k8s-io-v1-leaderworkerset leaderworkerset.x-k8s.io v1 "CREATE, UPDATE" leaderworkersets "$OPT_OUT"
  hook vpod.kb.io /validate--v1-pod "" v1 "CREATE, UPDATE" pods "$NOT_SYSTEM"
  hook vresourceflavor.kb.io /validate-kueue-x-k8s-io-v1beta2-resourceflavor kueue.x-k8s.io v1beta2 "CREATE, UPDATE" resourceflavors
  hook vworkload.kb.io /validate-kueue-x-k8s-io-v1beta2-workload kueue.x-k8s.io v1beta2 "CREATE, UPDATE" "workloads, workloads/status"
} >"$W/webhooks.yaml"
k apply --server-side --force-conflicts --field-manager=lws-kueue-start -f "$W/webhooks.yaml" >/dev/null \
  || fail "could not apply Kueue's webhook configurations"
echo "mutatingwebhookconfiguration/kueue-mutating-webhook-configuration validatingwebhookconfiguration/kueue-validating-webhook-configuration" >"$W/created-webhooks"
log "Kueue ready (pid $PID, log $STATE/logs/kueue.log)"
