# Shared by the fabric_ctl scenario tests that run the controller on ibsim (ibsim_test.sh,
# opensm_routes_test.sh, ibsim_events_test.sh). Source it after scripts/ib/ibsim-lib.sh; the
# caller sets GPOOL and W (its scratch dir) and defines fail().
#   ctl_track PID            a process the EXIT cleanup kills
#   ctl_cleanup              EXIT trap: kills the tracked processes, stops ibsim, removes $W
#   ctl_start ARGS...        `gpool controller` on $W/state.db, a free port, log $W/ctl.log;
#                            sets CTL_PID, ADDR and C=(--controller ADDR)
#   ctl_hollow_agent NET N   a hollow agent for the hosts of fabric NET; waits for N nodes
. "$(dirname "${BASH_SOURCE[0]}")/../lib/controller.sh"
CTL_PIDS=()
ctl_track() { CTL_PIDS+=("$1"); }
ctl_cleanup() {
  local p
  for p in "${CTL_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait "${CTL_PIDS[@]}" 2>/dev/null || true
  ibsim_stop
  rm -rf "$W"
}
ctl_start() {
  "$GPOOL" controller --store "sqlite:$W/state.db" --listen 127.0.0.1:0 "$@" >"$W/ctl.log" 2>&1 &
  CTL_PID=$!
  ctl_track "$CTL_PID"
  wait_controller "$W/ctl.log" "$CTL_PID"
  C=(--controller "$ADDR")
}
ctl_hollow_agent() {
  "$GPOOL" agent --controller "$ADDR" --hollow 0 --fabric "$1" --heartbeat-ms 100 >"$W/agent.log" 2>&1 &
  ctl_track $!
  local _ n=
  for _ in $(seq 100); do
    n=$("$GPOOL" nodes -o json "${C[@]}" | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("nodes",[])))')
    [ "$n" = "$2" ] && return 0
    sleep 0.1
  done
  fail "expected $2 nodes, got $n"
}
