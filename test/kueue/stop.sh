#!/usr/bin/env bash
# Stops the Kueue manager test/kueue/start.sh STATE_DIR started (by its recorded PID, nothing
# else).
#
#   test/kueue/stop.sh STATE_DIR [--remove-webhooks]
#
# Its webhook configurations stay by default — Kueue stopped is then what it is in a real
# cluster whose Kueue is down: LWS and pod writes that its webhooks intercept are refused until
# it is back (test/kueue/start.sh STATE_DIR starts it again on the same webhook address and
# certificate). --remove-webhooks also deletes the webhook configurations it created.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
STATE=""; REMOVE=0
for a in "$@"; do
  case "$a" in --remove-webhooks) REMOVE=1 ;; *) STATE=$a ;; esac
done
[ -n "$STATE" ] || { echo "usage: test/kueue/stop.sh STATE_DIR [--remove-webhooks]" >&2; exit 2; }
[ -d "$STATE" ] || exit 0
PIDFILE="$STATE/pids/kueue.pid"
if [ -f "$PIDFILE" ]; then
  pid=$(cat "$PIDFILE")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$PIDFILE"
fi
CREATED="$STATE/kueue/created-webhooks"
if [ $REMOVE = 1 ] && [ -f "$CREATED" ] && [ -f "$STATE/kubeconfig" ]; then
  KUBECTL="$("$HERE/../cluster/build.sh")/kubectl"
  # shellcheck disable=SC2046
  KUBECONFIG="$STATE/kubeconfig" "$KUBECTL" delete --ignore-not-found --request-timeout=10s $(cat "$CREATED") >/dev/null 2>&1 \
    || echo "lws-rollout kueue: could not delete $(cat "$CREATED") (cluster down?)" >&2
  rm -f "$CREATED"
fi
exit 0
