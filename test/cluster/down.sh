#!/usr/bin/env bash
# Stops the processes test/cluster/up.sh started (by their recorded PIDs, nothing else), removes
# the traffic layer's network namespace and host route, and removes the cluster's state.
#
#   test/cluster/down.sh [STATE_DIR] [--keep-logs]
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
REPO="$(cd "$CLUSTER_DIR/../.." && pwd)"
STATE="${LWS_CLUSTER_DIR:-$REPO/target/cluster}"
KEEP_LOGS=0
for a in "$@"; do
  case "$a" in --keep-logs) KEEP_LOGS=1 ;; *) STATE=$a ;; esac
done
[ -d "$STATE" ] || exit 0

# Stop in reverse start order so nothing logs errors about a dependency that vanished: first
# whatever was started against the cluster (the manager, test/upstream/start.sh's lws-upstream,
# any other *.pid recorded there), then the control plane.
CORE="kwok kube-scheduler kube-controller-manager kube-apiserver etcd"
EXTRA=""
for f in "$STATE"/pids/*.pid; do
  [ -f "$f" ] || continue
  n=$(basename "$f" .pid)
  case " $CORE " in *" $n "*) ;; *) EXTRA="$EXTRA $n" ;; esac
done
for name in $EXTRA $CORE; do
  f="$STATE/pids/$name.pid"
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -f "$f"
done
# The traffic layer's namespace, host route and slot (the processes in the namespace, traefik
# and the pod agent, were stopped above by their PIDs).
if [ -f "$STATE/traffic/slot" ]; then
  traffic_release "$(cat "$STATE/traffic/slot")" "$(cd "$STATE" && pwd)"
  rm -f "$STATE/traffic/slot"
fi
if [ "$KEEP_LOGS" = 1 ]; then
  rm -rf "$STATE/etcd" "$STATE/pids"
else
  rm -rf "$STATE"
fi
