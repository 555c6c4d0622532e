#!/usr/bin/env bash
# Stops or starts again the Prometheus of a running cluster (test/cluster/up.sh with
# LWS_CLUSTER_PROMETHEUS=1): an outage of the metrics an analysis reads, as a test plays it.
#
#   test/cluster/prometheus.sh stop STATE_DIR
#   test/cluster/prometheus.sh start STATE_DIR
#
# `stop` sends SIGTERM to the recorded PID only (SIGKILL after 10 s), waits for it to exit and
# removes STATE_DIR/pids/prometheus.pid; STATE_DIR/prometheus/url stays, and requests to it are
# refused (the pod agent's bridge keeps the host port, its upstream is gone). `start` runs the
# command up.sh recorded (same port inside the network namespace, so the same URL; same storage,
# so the series scraped before the outage are still there), records the new PID and returns once
# Prometheus answers /-/ready. Both are no-ops when Prometheus already is in that state.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
USAGE="usage: prometheus.sh stop|start STATE_DIR"
ACTION=${1:?$USAGE}
STATE=${2:?$USAGE}
PIDFILE="$STATE/pids/prometheus.pid"
CMD="$STATE/cmd/prometheus"
URL_FILE="$STATE/prometheus/url"
[ -f "$URL_FILE" ] || die "no $URL_FILE: this cluster runs no Prometheus ($(cat "$STATE/prometheus/skipped" 2>/dev/null || echo "is a cluster running from $STATE?"))"
[ -f "$CMD" ] || die "no $CMD: the cluster was started by an up.sh that did not record Prometheus's command"

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

case "$ACTION" in
  stop)
    running || { rm -f "$PIDFILE"; exit 0; }
    pid=$(cat "$PIDFILE")
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while kill -0 "$pid" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then kill -KILL "$pid" 2>/dev/null || true; fi
      sleep 0.05
    done
    rm -f "$PIDFILE"
    log "prometheus stopped (pid $pid)"
    ;;
  start)
    if running; then exit 0; fi
    echo "--- started again by test/cluster/prometheus.sh ---" >>"$STATE/logs/prometheus.log"
    # The recorded command is a line of printf %q words (`ip netns exec NETNS prometheus ...`,
    # which execs Prometheus): the background job's PID is Prometheus's own.
    (eval "exec $(cat "$CMD")") >>"$STATE/logs/prometheus.log" 2>&1 </dev/null &
    echo $! >"$PIDFILE"
    url=$(cat "$URL_FILE")
    deadline=$((SECONDS + 60))
    until curl -sf "$url/-/ready" >/dev/null 2>&1; do
      running || die "prometheus exited after its start; see $STATE/logs/prometheus.log: $(tail -n 3 "$STATE/logs/prometheus.log")"
      [ $SECONDS -lt $deadline ] || die "prometheus not ready at $url 60s after its start"
      sleep 0.1
    done
    log "prometheus started again: $url (pid $(cat "$PIDFILE"))"
    ;;
  *) die "$USAGE" ;;
esac
