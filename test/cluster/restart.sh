#!/usr/bin/env bash
# Kills one control-plane process of a running cluster and starts it again with the same
# command line and data (what test/cluster/up.sh recorded in STATE_DIR/cmd/), as a control-plane
# upgrade or a crashed API server would: the chaos tests' outage.
#
#   test/cluster/restart.sh STATE_DIR COMPONENT [OUTAGE_SECONDS] [SIGNAL]
#
# COMPONENT is etcd, kube-apiserver, kube-controller-manager, kube-scheduler or kwok. The process is
# sent SIGNAL (default KILL) by its recorded PID, the component stays down OUTAGE_SECONDS
# (default 0), then runs again (its log appended to, its new PID recorded) and the script returns
# once it serves again (etcd /health, the API server /readyz; the others once running).
# test/cluster/supervise.sh leaves the component alone meanwhile (it holds the component's lock).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STATE=${1:?usage: restart.sh STATE_DIR COMPONENT [OUTAGE_SECONDS] [SIGNAL]}
NAME=${2:?usage: restart.sh STATE_DIR COMPONENT [OUTAGE_SECONDS] [SIGNAL]}
OUTAGE=${3:-0}
SIGNAL=${4:-KILL}
case "$NAME" in
  etcd | kube-apiserver | kube-controller-manager | kube-scheduler | kwok) ;;
  *) die "restart.sh restarts etcd, kube-apiserver, kube-controller-manager, kube-scheduler or kwok, not $NAME" ;;
esac
PIDFILE="$STATE/pids/$NAME.pid"
CMD="$STATE/cmd/$NAME"
[ -f "$PIDFILE" ] || die "no $PIDFILE: is a cluster running from $STATE?"
[ -f "$CMD" ] || die "no $CMD: the cluster was started by an up.sh that did not record commands"

# The component's lock, from the kill to the new PID: test/cluster/supervise.sh, which starts
# again a component that exited on its own, leaves this outage alone.
mkdir -p "$STATE/locks"
exec 9>"$STATE/locks/$NAME.lock"
flock -w 30 9 || die "$NAME's lock ($STATE/locks/$NAME.lock) still held after 30s"
pid=$(cat "$PIDFILE")
kill -"$SIGNAL" "$pid" 2>/dev/null || true
deadline=$((SECONDS + 30))
while kill -0 "$pid" 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || die "$NAME (pid $pid) still runs 30s after SIG$SIGNAL"
  sleep 0.05
done
[ "$OUTAGE" = 0 ] || sleep "$OUTAGE"

echo "--- restarted by test/cluster/restart.sh after ${OUTAGE}s down ---" >>"$STATE/logs/$NAME.log"
# The recorded command is a line of printf %q words: eval runs it exactly as up.sh did, and exec
# makes the background job the component itself, so the recorded PID is the component's.
(eval "exec $(cat "$CMD")") >>"$STATE/logs/$NAME.log" 2>&1 </dev/null 9>&- &
echo $! >"$PIDFILE"
flock -u 9
exec 9>&-

PKI="$STATE/pki"
ready() {
  case "$NAME" in
    etcd)
      local url
      url=$(grep -o -- '--listen-client-urls=[^ ]*' "$CMD" | cut -d= -f2)
      curl -sf "$url/health" | grep -q '"health":"true"'
      ;;
    kube-apiserver)
      local port
      port=$(grep -o -- '--secure-port=[0-9]*' "$CMD" | cut -d= -f2)
      curl -sf --cacert "$PKI/ca.crt" "https://127.0.0.1:$port/readyz" | grep -q ok
      ;;
    *) kill -0 "$(cat "$PIDFILE")" 2>/dev/null ;;
  esac
}
deadline=$((SECONDS + 90))
until ready >/dev/null 2>&1; do
  kill -0 "$(cat "$PIDFILE")" 2>/dev/null || die "$NAME exited after its restart; see $STATE/logs/$NAME.log: $(tail -n 3 "$STATE/logs/$NAME.log")"
  [ $SECONDS -lt $deadline ] || die "$NAME not serving 90s after its restart"
  sleep 0.1
done
