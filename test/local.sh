#!/usr/bin/env bash
# The main job: brings up the local control plane (with its traffic layer: a Gateway API and
# nginx-Ingress proxy, and pods that answer HTTP), installs the CRDs, applies the worked
# example, runs the lws-rollout manager against it and shows the example answering through
# the proxy. Ctrl-C stops the manager and the cluster (LWS_KEEP_CLUSTER=1 keeps the cluster
# running).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
. test/cluster/lib.sh
command -v cargo >/dev/null 2>&1 || die "no cargo on PATH: install Rust >= 1.92 (rustup) to build lws-rollout"

STATE="${LWS_CLUSTER_DIR:-$REPO/target/cluster}"
BIN=$(test/cluster/build.sh)
log "building the manager"
cargo build --locked --bin lws-rollout

[ -d "$STATE/pids" ] && test/cluster/down.sh "$STATE"
# Room for a canary release of the worked example: each of its groups takes a whole zone
# (exclusive-topology) and all 32 GPUs of it, so the stable groups fill zones a and b, the
# canary (up to 2 groups) needs two more and the stable's surge group while it rolls at the
# end one more. 10 nodes; nodes 4-9 become zones c, d and e below.
export LWS_CLUSTER_NODES="${LWS_CLUSTER_NODES:-10}"
KUBECONFIG_FILE=$(LWS_CLUSTER_PROMETHEUS="${LWS_CLUSTER_PROMETHEUS:-1}" test/cluster/up.sh "$STATE")
export KUBECONFIG="$KUBECONFIG_FILE"
on_exit() {
  if [ "${LWS_KEEP_CLUSTER:-0}" = 1 ]; then
    log "cluster left running: source $STATE/env; stop it with test/cluster/down.sh $STATE"
  else
    test/cluster/down.sh "$STATE"
  fi
}
trap on_exit EXIT
KUBECTL="$BIN/kubectl"
zones=(c c d d e e)
for i in 4 5 6 7 8 9; do
  [ "$i" -lt "$LWS_CLUSTER_NODES" ] || break
  "$KUBECTL" label node "kwok-node-$i" --overwrite "topology.kubernetes.io/zone=zone-${zones[$((i - 4))]}" >/dev/null
done

install_crds "$KUBECTL"
"$KUBECTL" create namespace demo >/dev/null
# Pods are refused until the namespace's default ServiceAccount exists.
deadline=$((SECONDS + 60))
until "$KUBECTL" -n demo get serviceaccount default >/dev/null 2>&1; do
  [ $SECONDS -lt $deadline ] || die "namespace demo got no default ServiceAccount within 60s"
  sleep 0.2
done
"$KUBECTL" -n demo apply --server-side -f examples/lws-vllm.yaml -f examples/rollout-canary-gateway.yaml
# The example's route names the user's Gateway; here it goes through the local cluster's one.
"$KUBECTL" -n demo patch httproute vllm --type=merge \
  -p '{"spec":{"parentRefs":[{"name":"lws-rollout","namespace":"default"}]}}' >/dev/null

# The manager runs in the background of this script so it can show the example answering
# through the proxy; Ctrl-C (or the end of this script) stops it, then the cluster.
target/debug/lws-rollout --health-addr=127.0.0.1:0 --webhook-addr=127.0.0.1:0 --webhook-host=127.0.0.1 &
MANAGER=$!
trap 'kill -TERM "$MANAGER" 2>/dev/null' INT TERM
trap 'kill -TERM "$MANAGER" 2>/dev/null; wait "$MANAGER" 2>/dev/null; on_exit' EXIT

TRAFFIC_URL=$(sed -n 's/^LWS_TRAFFIC_URL=//p' "$STATE/traffic/env" 2>/dev/null || true)
if [ -n "$TRAFFIC_URL" ]; then
  # The leaders answer once their groups are Ready and the proxy has their endpoints.
  deadline=$((SECONDS + 120))
  until ANSWER=$(curl -sf -H 'Host: vllm.local' "$TRAFFIC_URL/v1/models"); do
    [ $SECONDS -lt $deadline ] || { log "the worked example did not answer through the proxy within 120s"; ANSWER=""; break; }
    sleep 0.5
  done
  TRAFFIC_MSG="  The worked example answers through the proxy (Traefik, Gateway API):
      curl -H 'Host: vllm.local' $TRAFFIC_URL/v1/models
      -> ${ANSWER:-(no answer yet)}"
else
  TRAFFIC_MSG="  No traffic layer: $(cat "$STATE/traffic/skipped" 2>/dev/null)"
fi

cat >&2 <<MSG

  Local cluster is up ($(ls "$STATE/pids" | wc -l) processes, $("$KUBECTL" get nodes --no-headers | wc -l) KWOK nodes).
  In another shell:
      source $STATE/env
      kubectl -n demo get lws vllm -o yaml     # the worked example, defaulted by the CRD
      kubectl get nodes

  A canary release of it (the Rollout "vllm", examples/rollout-canary-gateway.yaml; the whole
  walk-through is docs/rollout.md):
      kubectl -n demo get rollout vllm -w      # STATUS Healthy; keep it open in a third shell
      # a new image starts the release (the stable groups stay as they are, a canary LWS appears)
      kubectl -n demo patch lws vllm --type=json -p '[
        {"op":"replace","path":"/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/image","value":"vllm/vllm-openai:v0.11.1"},
        {"op":"replace","path":"/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/image","value":"vllm/vllm-openai:v0.11.1"}]'
      kubectl -n demo get lws -l rollouts.kruise.io/canary-deployment=vllm   # the canary LWS
      kubectl -n demo get httproute vllm -o jsonpath='{.spec.rules[0].backendRefs}'; echo   # 95/5
      # approve step 1 (what kubectl-kruise rollout approve rollout/vllm sends):
      kubectl -n demo patch rollout vllm --subresource=status --type=merge \\
        -p '{"status":{"canaryStatus":{"currentStepState":"StepReady"}}}'
      # step 2 pauses 5 minutes (the same patch skips it), then the stable LWS rolls and the
      # Rollout reads Healthy again
      # (with the proxy up, repeat the curl below: the answers name the canary's pods per its share)

  A blue-green release of it instead (examples/rollout-bluegreen.yaml; docs/rollout.md, "A
  blue-green release"), once the Rollout reads Healthy:
      kubectl -n demo apply --server-side -f examples/rollout-bluegreen.yaml   # same Rollout, blueGreen
      # a new image (the patch above, another tag) grows a whole second LWS; only requests with
      # the header x-preview: new reach it
      kubectl -n demo patch rollout vllm --subresource=status --type=merge \
        -p '{"status":{"blueGreenStatus":{"currentStepState":"StepReady"}}}'   # switch: 100% new
      # the same patch again promotes: your LWS takes the new template while the second LWS
      # serves, traffic comes back, the second LWS goes (revert the image before it: rollback)

  A release that judges itself (docs/analysis.md): every step analysed on the model's time to
  first token and error ratio from Prometheus (\$LWS_PROMETHEUS_URL), no approval needed:
      kubectl -n demo apply -f examples/analysistemplate-vllm.yaml
      sed "s|http://prometheus-operated.monitoring.svc:9090|\$LWS_PROMETHEUS_URL|" \
        examples/rollout-canary-analysis.yaml | kubectl -n demo apply -f -   # replaces the Rollout
      # requests to judge by (the analysis pauses for a person when there are none):
      while :; do curl -s -o /dev/null -H 'Host: vllm.local' "\$LWS_TRAFFIC_URL/v1/models"; sleep 0.05; done &
      # a good model: released to the end by itself
      kubectl -n demo patch lws vllm --type=json -p '[
        {"op":"replace","path":"/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/image","value":"vllm/vllm-openai:v0.11.2"}]'
      target/debug/kubectl-lws rollout status -n demo vllm   # each step's analysis and its values
      # a bad one — half its answers are errors (the test pod agent reads AGENT_ERROR_RATIO):
      # rolled back by itself at step 1, Progressing=False AnalysisFailed naming the metric
      kubectl -n demo patch lws vllm --type=json -p '[
        {"op":"replace","path":"/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/image","value":"vllm/vllm-openai:v0.12.0"},
        {"op":"add","path":"/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/env/-","value":{"name":"AGENT_ERROR_RATIO","value":"0.5"}}]'
      kubectl -n demo get analysisruns          # every measurement, kept in the runs
$TRAFFIC_MSG
  The manager runs in this shell; Ctrl-C stops it and the cluster.

MSG
wait "$MANAGER" || true
