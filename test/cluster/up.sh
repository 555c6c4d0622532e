#!/usr/bin/env bash
# Starts a real Kubernetes control plane on loopback: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler and KWOK with fake nodes.
#
#   test/cluster/up.sh [STATE_DIR]      (default: <repo>/target/cluster)
#
# Returns when the cluster is usable (nodes Ready and untainted, default ServiceAccount present,
# Gateway API CRDs established) and prints the kubeconfig path. Every process it starts has its
# PID in STATE_DIR/pids/; test/cluster/down.sh STATE_DIR stops exactly those.
#
# The traffic layer (docs/local-cluster.md): pod IPs live in a network namespace of this
# cluster's own, every Ready pod with a containerPort answers HTTP there (test/podagent), and
# Traefik serves Gateway API routes and nginx-style canary Ingresses; clients reach it at
# $LWS_TRAFFIC_URL (written to STATE_DIR/env and STATE_DIR/traffic/env). LWS_CLUSTER_TRAFFIC=0
# leaves it out. When it cannot run (not root, no `ip`, no proxy binary, a port taken) the
# cluster still comes up, and the one-line reason is in STATE_DIR/traffic/skipped.
#
# LWS_CLUSTER_KUEUE=1 also installs our CRDs and starts Kueue (test/kueue/start.sh: PID in
# STATE_DIR/pids/kueue.pid, so down.sh stops it) with a ResourceFlavor per node pool
# (docs/kueue.md); otherwise STATE_DIR/kueue/skipped says it was not requested.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

REPO="$(cd "$CLUSTER_DIR/../.." && pwd)"
STATE="${1:-${LWS_CLUSTER_DIR:-$REPO/target/cluster}}"
NODES="${LWS_CLUSTER_NODES:-4}"
# Pods each KWOK node admits (the benchmark raises it: thousands of pods on 4 fake nodes).
NODE_PODS="${LWS_CLUSTER_NODE_PODS:-110}"
# Opt-in audit log (the benchmark counts a controller's API requests with it): an audit policy
# file; events go to STATE_DIR/logs/audit.log as JSON lines.
AUDIT_POLICY="${LWS_CLUSTER_AUDIT_POLICY:-}"
UP_TIMEOUT="${LWS_CLUSTER_TIMEOUT:-180}"
# Workload-aware scheduling (Kubernetes 1.36 alpha; docs/local-cluster.md): the
# scheduling.k8s.io/v1alpha2 API (PodGroups) and its gates on the API server, the scheduler
# (gang and topology plugins) and the controller-manager (PodGroup protection).
# LWS_CLUSTER_GANG=0 starts a cluster without them, as most clusters are today.
GANG="${LWS_CLUSTER_GANG:-1}"
GANG_GATES=() GANG_API=()
if [ "$GANG" = 1 ]; then
  GANG_GATES=(--feature-gates=GenericWorkload=true,GangScheduling=true,TopologyAwareWorkloadScheduling=true,WorkloadAwarePreemption=true)
  GANG_API=(--runtime-config=scheduling.k8s.io/v1alpha2=true)
fi

if [ -f "$STATE/kubeconfig" ] && [ -d "$STATE/pids" ] && [ -n "$(ls -A "$STATE/pids" 2>/dev/null)" ]; then
  die "a cluster already runs from $STATE: stop it with test/cluster/down.sh $STATE"
fi

BIN=$("$CLUSTER_DIR/build.sh")
GW_CRDS=$(gateway_crds_dir)
# A state dir left by a run that ended without down.sh may still hold a traffic slot: free it
# (its namespace and host route) before the record of it is removed.
if [ -f "$STATE/traffic/slot" ]; then traffic_release "$(cat "$STATE/traffic/slot")" "$(cd "$STATE" && pwd)"; fi
rm -rf "$STATE"
mkdir -p "$STATE"/{pki,logs,pids,etcd,kwok,cmd,prometheus}
STATE="$(cd "$STATE" && pwd)"
export PATH="$BIN:$PATH"

# On any failure, stop what was already started so no process leaks.
trap 'rc=$?; if [ $rc -ne 0 ]; then echo "cluster start failed; logs in $STATE/logs" >&2; "$CLUSTER_DIR/down.sh" "$STATE" --keep-logs >/dev/null 2>&1 || true; fi' EXIT

# --- free ports (free_port: lib.sh) ---------------------------------------------------------
free_port ETCD_PORT; free_port ETCD_PEER_PORT; free_port API_PORT
free_port KCM_PORT; free_port SCHED_PORT; free_port KWOK_PORT

# --- traffic layer, part 1: the pod range and its namespace, before any pod exists -----------
TRAFFIC="${LWS_CLUSTER_TRAFFIC:-1}"
TRAFFIC_DIR="$STATE/traffic"
mkdir -p "$TRAFFIC_DIR"
traffic_skip() { echo "$*" >"$TRAFFIC_DIR/skipped"; log "traffic layer off: $*"; TRAFFIC=0; }
SLOT=""
if [ "$TRAFFIC" != 1 ]; then
  traffic_skip "not requested (LWS_CLUSTER_TRAFFIC=$TRAFFIC)"
elif [ "$(id -u)" != 0 ]; then
  traffic_skip "not root: cannot create the network namespace the pod addresses live in"
elif ! command -v ip >/dev/null 2>&1; then
  traffic_skip "no ip (iproute2) on PATH: cannot create the network namespace the pod addresses live in"
elif [ ! -f "$CACHE_ROOT/traefik-$TRAEFIK_VERSION/.complete" ] && [ -z "${LWS_ROLLOUT_TRAEFIK_BIN:-}" ] \
    && ! log "traffic: building traefik $TRAEFIK_VERSION first (cold: ~10 min; log in $CACHE_ROOT/traefik-$TRAEFIK_VERSION/build.log)"; then
  :
elif ! TRAEFIK_BIN=$("$CLUSTER_DIR/build-traefik.sh" 2>"$TRAFFIC_DIR/traefik-build.err"); then
  traffic_skip "no proxy: $(grep 'lws-rollout traefik:' "$TRAFFIC_DIR/traefik-build.err" | tail -n 1 | sed 's/^lws-rollout traefik: //')"
elif ! PODAGENT_BIN=$(podagent_bin "$REPO" 2>"$TRAFFIC_DIR/podagent-build.err"); then
  traffic_skip "no pod agent: $(tail -n 1 "$TRAFFIC_DIR/podagent-build.err")"
elif ! SLOT=$(traffic_claim "$STATE"); then
  SLOT=""
  traffic_skip "no free traffic slot in $TRAFFIC_RUN (all $TRAFFIC_SLOTS in use by other clusters)"
else
  echo "$SLOT" >"$TRAFFIC_DIR/slot"
  NETNS=$(traffic_netns "$SLOT")
  POD_RANGE=$(traffic_slot_cidr "$SLOT")
  # Fail closed first: from here on a pod-range packet sent from the host's namespace by
  # mistake gets "No route to host" instead of leaving the machine by the default route.
  if ! ip route add unreachable "$TRAFFIC_RANGE" metric "$(traffic_route_metric "$SLOT")" 2>"$TRAFFIC_DIR/ip.err"; then
    traffic_release "$SLOT"; rm -f "$TRAFFIC_DIR/slot"
    traffic_skip "cannot add the fail-closed host route (ip route add unreachable $TRAFFIC_RANGE): $(head -n 1 "$TRAFFIC_DIR/ip.err")"
  elif ! { ip netns add "$NETNS" && ip -n "$NETNS" link set lo up \
        && ip -n "$NETNS" route add local "$POD_RANGE" dev lo; } 2>"$TRAFFIC_DIR/ip.err"; then
    traffic_release "$SLOT"; rm -f "$TRAFFIC_DIR/slot"
    traffic_skip "cannot create network namespace $NETNS: $(head -n 1 "$TRAFFIC_DIR/ip.err")"
  else
    # Every address of the slot's range is local to the namespace's loopback (an AnyIP
    # route), so a pod's IP can be bound without adding it first.
    free_port ENTRY_PORT
    free_port PROM_PORT
    log "traffic: network namespace $NETNS, pod range $POD_RANGE, entry http://127.0.0.1:$ENTRY_PORT"
  fi
fi

# --- PKI ------------------------------------------------------------------------------------
PKI="$STATE/pki"
(
  cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 -subj "/CN=lws-rollout-test-ca" 2>/dev/null
  cat >admin.cnf <<EOF
[req]
distinguished_name = dn
[dn]
[ext]
basicConstraints = CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1
EOF
  openssl req -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=lws-admin" -config admin.cnf 2>/dev/null
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out admin.crt -days 3650 \
    -extfile admin.cnf -extensions ext 2>/dev/null
  openssl genrsa -out sa.key 2048 2>/dev/null
)

KUBECONFIG_FILE="$STATE/kubeconfig"
cat >"$KUBECONFIG_FILE" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: lws-rollout
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(base64 -w0 <"$PKI/admin.crt")
    client-key-data: $(base64 -w0 <"$PKI/admin.key")
contexts:
- name: lws-rollout
  context: {cluster: lws-rollout, user: admin}
current-context: lws-rollout
EOF
export KUBECONFIG="$KUBECONFIG_FILE"

start() { # name, then the command (recorded, so test/cluster/restart.sh can run it again)
  local name=$1; shift
  printf '%q ' "$@" >"$STATE/cmd/$name"
  "$@" >"$STATE/logs/$name.log" 2>&1 &
  echo $! >"$STATE/pids/$name.pid"
}
alive() { kill -0 "$(cat "$STATE/pids/$1.pid")" 2>/dev/null || die "$1 exited; see $STATE/logs/$1.log: $(tail -n 3 "$STATE/logs/$1.log")"; }
wait_for() { # description, timeout seconds, component to keep alive, then the check command
  local what=$1 timeout=$2 comp=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    [ -n "$comp" ] && alive "$comp"
    [ $SECONDS -lt $deadline ] || die "timed out after ${timeout}s waiting for $what"
    sleep 0.2
  done
}

log "starting etcd on 127.0.0.1:$ETCD_PORT"
start etcd "$BIN/etcd" --name=node0 --data-dir="$STATE/etcd" \
  --listen-client-urls="http://127.0.0.1:$ETCD_PORT" --advertise-client-urls="http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster="node0=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync=true \
  --auto-compaction-retention=1 --log-level=warn
wait_for "etcd health" 30 etcd sh -c "curl -sf http://127.0.0.1:$ETCD_PORT/health | grep -q '\"health\":\"true\"'"

AUDIT_FLAGS=()
if [ -n "$AUDIT_POLICY" ]; then
  [ -f "$AUDIT_POLICY" ] || die "LWS_CLUSTER_AUDIT_POLICY=$AUDIT_POLICY is not a file"
  AUDIT_FLAGS=(--audit-policy-file="$AUDIT_POLICY" --audit-log-path="$STATE/logs/audit.log"
    --audit-log-format=json --audit-log-mode=blocking --audit-log-maxsize=0)
fi
log "starting kube-apiserver on 127.0.0.1:$API_PORT"
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers="http://127.0.0.1:$ETCD_PORT" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
  --secure-port="$API_PORT" --tls-cert-file="$PKI/admin.crt" --tls-private-key-file="$PKI/admin.key" \
  --client-ca-file="$PKI/ca.crt" --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.key" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=Node,RBAC --endpoint-reconciler-type=none \
  --allow-privileged=true --profiling=false --cert-dir="$PKI/apiserver" \
  --max-requests-inflight=0 --max-mutating-requests-inflight=0 --enable-priority-and-fairness=false --v=1 \
  ${AUDIT_FLAGS[@]+"${AUDIT_FLAGS[@]}"} ${GANG_GATES[@]+"${GANG_GATES[@]}"} ${GANG_API[@]+"${GANG_API[@]}"}
wait_for "kube-apiserver /readyz" 90 kube-apiserver \
  sh -c "curl -sf --cacert '$PKI/ca.crt' https://127.0.0.1:$API_PORT/readyz | grep -q ok"

log "starting kube-controller-manager and kube-scheduler"
# --node-monitor-grace-period 3m (default 50s): the node lifecycle controller judges a node by
# when *it* last saw the node's lease renewed. After the chaos test's 16 s API-server outage
# its lease watch came back late and KWOK's first renewals met update conflicts, so it saw no
# renewal for 50 s, marked all four fake nodes and every pod NotReady for ~2 s, and the
# EndpointSlices emptied (HTTP 503 through the proxy). A real kubelet's pods
# keep running through a control-plane outage; no test here means a node failure by one.
start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$KUBECONFIG_FILE" \
  --authentication-kubeconfig="$KUBECONFIG_FILE" --authorization-kubeconfig="$KUBECONFIG_FILE" \
  --bind-address=127.0.0.1 --secure-port="$KCM_PORT" --leader-elect=false \
  --root-ca-file="$PKI/ca.crt" --service-account-private-key-file="$PKI/sa.key" \
  --kube-api-qps=200 --kube-api-burst=400 --node-monitor-period=2s \
  --node-monitor-grace-period=3m --v=1 ${GANG_GATES[@]+"${GANG_GATES[@]}"}
start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$KUBECONFIG_FILE" \
  --authentication-kubeconfig="$KUBECONFIG_FILE" --authorization-kubeconfig="$KUBECONFIG_FILE" \
  --bind-address=127.0.0.1 --secure-port="$SCHED_PORT" --leader-elect=false \
  --kube-api-qps=200 --kube-api-burst=400 --v=1 ${GANG_GATES[@]+"${GANG_GATES[@]}"}

# kwok reads ~/.kwok/kwok.yaml unless told otherwise: point it at our state only.
# A project stage replaces KWOK's stage of the same file name (stages/pod-delete.yaml says why).
# KWOK's pod-ready stage gains a delay a test can ask for per pod: the annotation
# `lws-rollout.test/ready-delay: "1s"` (a Go duration) keeps the pod unready that long, as a
# model server loading its weights would (no annotation: ready at once, as KWOK does).
READY_DELAY="  delay:\n    durationFrom:\n      expressionFrom: '.metadata.annotations[\"lws-rollout.test/ready-delay\"]'"
for f in "$CP_CACHE"/kwok-stages/*.yaml "$CLUSTER_DIR"/stages/*.yaml; do
  [ "${f#"$CLUSTER_DIR"/stages/}" = "$f" ] && [ -f "$CLUSTER_DIR/stages/$(basename "$f")" ] && continue
  [ -f "$f" ] || continue
  echo "---"
  if [ "$(basename "$f")" = pod-ready.yaml ] && [ "${f#"$CLUSTER_DIR"/stages/}" = "$f" ]; then
    grep -q '^spec:$' "$f" || die "KWOK's $f has no 'spec:' line to add the ready delay under"
    sed "s|^spec:\$|spec:\n$READY_DELAY|" "$f"
  else
    cat "$f"
  fi
  echo
done >"$STATE/kwok/stages.yaml"
log "starting kwok"
start kwok env KWOK_WORKDIR="$STATE/kwok" "$BIN/kwok" --kubeconfig="$KUBECONFIG_FILE" \
  --config="$STATE/kwok/stages.yaml" --manage-nodes-with-label-selector=type=kwok \
  --node-lease-duration-seconds=40 --cidr=10.244.0.0/16 \
  --server-address="127.0.0.1:$KWOK_PORT" --tls-cert-file="$PKI/admin.crt" --tls-private-key-file="$PKI/admin.key"

wait_for "ServiceAccount default/default (kube-controller-manager running)" 90 kube-controller-manager \
  kubectl get serviceaccount default -n default

log "creating $NODES KWOK nodes"
for i in $(seq 0 $((NODES - 1))); do
  # KWOK gives each pod an IP from its node's spec.podCIDRs[0].
  if [ "$TRAFFIC" = 1 ]; then node_cidr=$(traffic_node_cidr "$SLOT" "$i" "$NODES"); else node_cidr=10.244.$i.0/24; fi
  zone="zone-$(printf "\\x$(printf %x $((97 + i % 2)))")"
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
    topology.kubernetes.io/zone: $zone
    topology.kubernetes.io/region: local
    cloud.google.com/gke-nodepool: pool-$((i / 2))
spec:
  podCIDR: $node_cidr
  podCIDRs: [$node_cidr]
# Fake accelerators, so model-server manifests schedule as they would on a GPU/TPU pool.
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "$NODE_PODS", nvidia.com/gpu: "16", google.com/tpu: "16"}
  capacity: {cpu: "32", memory: 256Gi, pods: "$NODE_PODS", nvidia.com/gpu: "16", google.com/tpu: "16"}
---
EOF
done | kubectl apply -f - >/dev/null

nodes_usable() {
  local out
  out=$(kubectl get nodes -l type=kwok -o jsonpath='{range .items[*]}{.metadata.name} {.status.conditions[?(@.type=="Ready")].status} {.spec.taints[*].key}{"\n"}{end}')
  [ "$(echo "$out" | grep -c ' True *$')" -eq "$NODES" ]
}
wait_for "$NODES nodes Ready without taints" 90 kwok nodes_usable

log "installing Gateway API $GATEWAY_API_VERSION CRDs"
kubectl apply --server-side -f "$GW_CRDS" >/dev/null
wait_for "Gateway API CRDs established" 60 kube-apiserver \
  kubectl wait --for=condition=Established --timeout=5s crd/httproutes.gateway.networking.k8s.io

# --- traffic layer, part 2: the pod agent, the proxy and its classes -----------------------
traffic_fail() { # one line; stops what part 2 started; the rest of the cluster stays up
  local name f
  for name in traefik podagent; do
    f="$STATE/pids/$name.pid"
    if [ -f "$f" ]; then kill -TERM "$(cat "$f")" 2>/dev/null; rm -f "$f"; fi
  done
  traffic_release "$SLOT"; rm -f "$TRAFFIC_DIR/slot"
  traffic_skip "$*"
}
traffic_wait() { # description, timeout seconds, component, then the check command
  local what=$1 timeout=$2 comp=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$STATE/pids/$comp.pid")" 2>/dev/null; then
      traffic_fail "$comp exited while waiting for $what: $(grep -v '^\s*$' "$STATE/logs/$comp.log" | tail -n 1 | grep . || echo "no output, log: $STATE/logs/$comp.log")"
      return 1
    fi
    [ $SECONDS -lt $deadline ] || { traffic_fail "timed out after ${timeout}s waiting for $what (logs: $STATE/logs/$comp.log)"; return 1; }
    sleep 0.2
  done
}
gw_cond() { # kind/name namespace condition: true when that status condition is True
  [ "$(kubectl get "$1" -n "$2" -o jsonpath="{.status.conditions[?(@.type==\"$3\")].status}")" = True ]
}
if [ "$TRAFFIC" = 1 ]; then
  log "traffic: starting the pod agent and traefik in $NETNS"
  # The agent lives in the host's namespace (it watches pods through the API server on
  # loopback) and creates its listening sockets inside $NETNS. It also carries the two bridges:
  # $NETNS's 127.0.0.1:$API_PORT -> the API server, and 127.0.0.1:$ENTRY_PORT -> traefik.
  start podagent "$PODAGENT_BIN" --netns "$NETNS" --pod-cidr "$POD_RANGE" \
    --bridge-in "127.0.0.1:$API_PORT=127.0.0.1:$API_PORT" \
    --bridge-out "127.0.0.1:$ENTRY_PORT=127.0.0.1:$TRAFFIC_WEB_PORT" \
    --bridge-out "127.0.0.1:$PROM_PORT=127.0.0.1:$PROMETHEUS_NS_PORT" \
    --ready-file "$TRAFFIC_DIR/podagent.ready" --prometheus-targets "$STATE/prometheus/targets.json"
  if traffic_wait "the pod agent" 30 podagent test -f "$TRAFFIC_DIR/podagent.ready"; then
    # Traefik runs inside the namespace: the only place pod addresses exist. Its kubeconfig
    # names 127.0.0.1:$API_PORT, which the agent bridges to the API server.
    start traefik ip netns exec "$NETNS" env -u KUBERNETES_SERVICE_HOST -u KUBERNETES_SERVICE_PORT \
      KUBECONFIG="$KUBECONFIG_FILE" "$TRAEFIK_BIN" \
      --global.checknewversion=false --global.sendanonymoususage=false --log.level=INFO \
      --entrypoints.web.address="127.0.0.1:$TRAFFIC_WEB_PORT" \
      --entrypoints.traefik.address="127.0.0.1:$TRAFFIC_PING_PORT" --ping=true \
      --metrics.prometheus=true --metrics.prometheus.entrypoint=traefik \
      --metrics.prometheus.addserviceslabels=true --metrics.prometheus.addrouterslabels=true \
      --providers.providersthrottleduration=100ms \
      --providers.kubernetesgateway=true --providers.kubernetesgateway.statusaddress.ip=127.0.0.1 \
      --providers.kubernetesingressnginx=true --providers.kubernetesingressnginx.httpentrypoint=web
  fi
  if [ "$TRAFFIC" = 1 ] && traffic_wait "traefik /ping" 60 traefik \
      ip netns exec "$NETNS" curl -sf "http://127.0.0.1:$TRAFFIC_PING_PORT/ping"; then
    kubectl apply --server-side -f - >/dev/null <<EOF
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: traefik}
spec: {controllerName: traefik.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: lws-rollout, namespace: default}
spec:
  gatewayClassName: traefik
  listeners:
    - {name: web, port: $TRAFFIC_WEB_PORT, protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}
---
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: nginx}
spec: {controller: k8s.io/ingress-nginx}
EOF
    traffic_wait "GatewayClass traefik Accepted" 60 traefik gw_cond gatewayclass/traefik default Accepted \
      && traffic_wait "Gateway default/lws-rollout Accepted" 60 traefik gw_cond gateway/lws-rollout default Accepted \
      && traffic_wait "Gateway default/lws-rollout Programmed" 60 traefik gw_cond gateway/lws-rollout default Programmed \
      || true
  fi
  if [ "$TRAFFIC" = 1 ]; then
    cat >"$TRAFFIC_DIR/env" <<EOF
LWS_TRAFFIC_URL=http://127.0.0.1:$ENTRY_PORT
LWS_TRAFFIC_GATEWAY_NAMESPACE=default
LWS_TRAFFIC_GATEWAY_NAME=lws-rollout
LWS_TRAFFIC_INGRESS_CLASS=nginx
LWS_TRAFFIC_NETNS=$NETNS
LWS_TRAFFIC_POD_RANGE=$POD_RANGE
EOF
  fi
fi

# --- Prometheus (opt-in: LWS_CLUSTER_PROMETHEUS=1; docs/local-cluster.md, "Metrics") ---------
# Inside the namespace, beside Traefik: it scrapes Traefik's counters and every Ready leader
# pod's vLLM metrics (the pod agent answers /metrics on the pod's address), finding the pods
# through the API server's bridge; the pod agent bridges its port to the host's loopback, where
# the manager's analyses query it. Asked for and failing leaves the cluster up without it.
PROM_DIR="$STATE/prometheus"
mkdir -p "$PROM_DIR"
prom_skip() { echo "$*" >"$PROM_DIR/skipped"; log "prometheus off: $*"; }
if [ "${LWS_CLUSTER_PROMETHEUS:-0}" != 1 ]; then
  prom_skip "not requested (LWS_CLUSTER_PROMETHEUS=${LWS_CLUSTER_PROMETHEUS:-unset})"
elif [ "$TRAFFIC" != 1 ]; then
  prom_skip "no traffic layer: $(cat "$TRAFFIC_DIR/skipped" 2>/dev/null)"
elif ! PROM_BIN=$("$CLUSTER_DIR/build-prometheus.sh" 2>"$PROM_DIR/build.err"); then
  prom_skip "no Prometheus: $(tail -n 1 "$PROM_DIR/build.err")"
else
  cat >"$PROM_DIR/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: traefik
    static_configs: [{targets: ["127.0.0.1:$TRAFFIC_PING_PORT"]}]
  # Leader pods answer requests (workers are reached through them): the pod agent writes one
  # target per serving leader address, labelled as a pod scrape with labelmap labels it
  # (Debian's build has no Kubernetes service discovery; file discovery stands in).
  - job_name: pods
    file_sd_configs: [{files: ["$PROM_DIR/targets.json"], refresh_interval: 1s}]
EOF
  start prometheus ip netns exec "$NETNS" "$PROM_BIN" --config.file="$PROM_DIR/prometheus.yml" \
    --storage.tsdb.path="$PROM_DIR/data" --storage.tsdb.retention.time=2h \
    --web.listen-address="127.0.0.1:$PROMETHEUS_NS_PORT" --log.level=warn
  prom_ready() { curl -sf "http://127.0.0.1:$PROM_PORT/-/ready"; }
  deadline=$((SECONDS + 60))
  until prom_ready >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$STATE/pids/prometheus.pid")" 2>/dev/null; then
      prom_skip "prometheus exited: $(tail -n 1 "$STATE/logs/prometheus.log")"; break
    fi
    if [ $SECONDS -ge $deadline ]; then
      kill -TERM "$(cat "$STATE/pids/prometheus.pid")" 2>/dev/null; rm -f "$STATE/pids/prometheus.pid"
      prom_skip "not ready within 60s (log: $STATE/logs/prometheus.log)"; break
    fi
    sleep 0.2
  done
  if [ ! -f "$PROM_DIR/skipped" ]; then
    echo "http://127.0.0.1:$PROM_PORT" >"$PROM_DIR/url"
    log "prometheus: http://127.0.0.1:$PROM_PORT"
  fi
fi

# --- Kueue (opt-in: LWS_CLUSTER_KUEUE=1; docs/kueue.md) ---------------------------------------
# Kueue's LeaderWorkerSet integration needs the LWS CRD when it starts (else it defers its
# controller with a backoff of up to minutes), so our CRDs go in first. Asked for and failing
# is a failed start: the caller wanted Kueue.
mkdir -p "$STATE/kueue"
if [ "${LWS_CLUSTER_KUEUE:-0}" = 1 ]; then
  log "kueue: installing the LWS CRDs, then starting Kueue (test/kueue/start.sh)"
  install_crds "$BIN/kubectl"
  "$REPO/test/kueue/start.sh" "$STATE" || die "Kueue did not start (LWS_CLUSTER_KUEUE=1); see $STATE/logs/kueue.log"
  # One ResourceFlavor per node pool (the nodes' cloud.google.com/gke-nodepool label), so a
  # ClusterQueue's nvidia.com/gpu quota is quota of real (fake) node capacity.
  for pool in $(seq 0 $(( (NODES + 1) / 2 - 1 ))); do
    cat <<EOF
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: pool-$pool}
spec: {nodeLabels: {cloud.google.com/gke-nodepool: pool-$pool}}
---
EOF
  done | kubectl apply --server-side -f - >/dev/null
else
  echo "not requested (LWS_CLUSTER_KUEUE=${LWS_CLUSTER_KUEUE:-unset})" >"$STATE/kueue/skipped"
fi

# A kubelet's part for the control plane: a component that exits on its own is started again
# (test/cluster/supervise.sh says why).
start supervisor bash "$CLUSTER_DIR/supervise.sh" "$STATE"

cat >"$STATE/env" <<EOF
export KUBECONFIG=$KUBECONFIG_FILE
export PATH=$BIN:\$PATH
export LWS_CLUSTER_DIR=$STATE
EOF
if [ "$TRAFFIC" = 1 ]; then echo "export LWS_TRAFFIC_URL=http://127.0.0.1:$ENTRY_PORT" >>"$STATE/env"; fi
if [ -f "$PROM_DIR/url" ]; then echo "export LWS_PROMETHEUS_URL=$(cat "$PROM_DIR/url")" >>"$STATE/env"; fi
trap - EXIT
log "cluster up in ${SECONDS}s: export KUBECONFIG=$KUBECONFIG_FILE (or: source $STATE/env)"
echo "$KUBECONFIG_FILE"
