#!/usr/bin/env bash
# Starts again a control-plane process of a running cluster that exited on its own, with the
# command line and data test/cluster/up.sh recorded, as a node's kubelet restarts a static pod
# (etcd, the API server, the controller-manager, the scheduler) and systemd restarts the
# kubelet (KWOK stands in for it). Without it, a component that exits by design stays gone for
# good, which no real cluster allows: kube-scheduler, for one, exits when an update contradicts
# its cache ("Scheduler cache is corrupted", then exit 1), which an API-server restart can
# cause; the cluster then scheduled nothing more and a release waited forever.
#
#   test/cluster/supervise.sh STATE_DIR
#
# up.sh starts it last and records its PID as pids/supervisor.pid; down.sh stops it before the
# control plane. test/cluster/restart.sh holds a component's lock (STATE_DIR/locks/NAME.lock)
# from its kill to the new PID, so a deliberate outage is never cut short here. A restart is
# one line in the component's log; a component that exits again within 10 s waits twice as long
# each time (1 s, doubling to 16 s), as a crash loop would.
set -uo pipefail
STATE=${1:?usage: supervise.sh STATE_DIR}
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok"
mkdir -p "$STATE/locks"
declare -A wait_s started_at
for name in $COMPONENTS; do wait_s[$name]=1; started_at[$name]=-100; done

restart_if_gone() { # name: called with the component's lock held
  local name=$1 pidfile="$STATE/pids/$1.pid" cmd="$STATE/cmd/$1" pid
  [ -f "$pidfile" ] && [ -f "$cmd" ] || return 0
  read -r pid 2>/dev/null <"$pidfile" || return 0
  kill -0 "$pid" 2>/dev/null && return 0
  if [ $((SECONDS - started_at[$name])) -lt 10 ]; then
    wait_s[$name]=$((wait_s[$name] * 2 > 16 ? 16 : wait_s[$name] * 2))
  else
    wait_s[$name]=1
  fi
  sleep "${wait_s[$name]}"
  echo "--- exited on its own (pid $pid); started again by test/cluster/supervise.sh after ${wait_s[$name]}s, as a kubelet restarts a static pod ---" >>"$STATE/logs/$name.log"
  # As restart.sh does: exec makes the background job the component itself (its PID is the
  # one recorded), and the lock's descriptor is not handed down to it.
  (eval "exec $(cat "$cmd")") >>"$STATE/logs/$name.log" 2>&1 </dev/null 9>&- &
  echo $! >"$pidfile"
  started_at[$name]=$SECONDS
}

while :; do
  for name in $COMPONENTS; do
    read -r pid 2>/dev/null <"$STATE/pids/$name.pid" || continue
    kill -0 "$pid" 2>/dev/null && continue
    # Gone: unless restart.sh holds the lock (a deliberate outage), start it again. The PID is
    # read again under the lock, so one restart.sh just started is left alone.
    exec 9>"$STATE/locks/$name.lock"
    if flock -n 9; then
      restart_if_gone "$name"
      flock -u 9
    fi
    exec 9>&-
  done
  sleep 0.5
done
