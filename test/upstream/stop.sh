#!/usr/bin/env bash
# Stops the upstream LWS controller test/upstream/start.sh STATE_DIR started (by its recorded
# PID, nothing else) and deletes the webhook configurations it created.
#
#   test/upstream/stop.sh STATE_DIR
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE=${1:?usage: test/upstream/stop.sh STATE_DIR}
[ -d "$STATE" ] || exit 0
PIDFILE="$STATE/pids/lws-upstream.pid"
if [ -f "$PIDFILE" ]; then
  pid=$(cat "$PIDFILE")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$PIDFILE"
fi
CREATED="$STATE/lws-upstream/created-webhooks"
if [ -f "$CREATED" ] && [ -f "$STATE/kubeconfig" ]; then
  KUBECTL="$("$HERE/../cluster/build.sh")/kubectl"
  # shellcheck disable=SC2046
  KUBECONFIG="$STATE/kubeconfig" "$KUBECTL" delete --ignore-not-found --request-timeout=10s $(cat "$CREATED") >/dev/null 2>&1 \
    || echo "lws-rollout upstream: could not delete $(cat "$CREATED") (cluster down?)" >&2
  rm -f "$CREATED"
fi
exit 0
