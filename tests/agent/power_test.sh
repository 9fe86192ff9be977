#!/usr/bin/env bash
# Power management end to end: the controller applies src/sched/power.h's decisions.
# 1. Hollow: 4 idle nodes x 8 GPUs, 1 s idle timeout, 8-GPU warm buffer: 3 nodes power down and
#    one stays on; a 16-GPU submit resumes nodes (after a simulated boot) and the job finishes.
# 2. Real agents: "a-real" (8 emulated GPUs, --suspend-cmd) and "b-proxy" (no GPU, --resume-cmd),
#    warm buffer 0. a-real is suspended and runs its command; the test then SIGSTOPs it, as if
#    the machine were off (no heartbeats). A 1-GPU submit makes the controller resume it; the
#    proxy runs its --resume-cmd for a-real, which here is `kill -CONT` of a-real's agent, the
#    agent comes back, and the job runs on it. The proxy itself is never suspended.
# Usage: power_test.sh PATH/TO/gpool
set -euo pipefail
GPOOL=${1:?usage: power_test.sh GPOOL_BINARY}
TMP=$(mktemp -d)
. "$(dirname "$0")/lib.sh"


# ---- 1. hollow cluster
start_controller --policy-config \
  "power.enabled=true,power.idle_timeout_s=1,power.warm_buffer_gpus=8,power.boot_latency_s=1"
"$GPOOL" --log-level info agent --controller "$ADDR" --hollow 4 --heartbeat-ms 100 --boot-ms 500 \
  >"$TMP/hollow.log" 2>&1 &
AGENT_PIDS=$!
wait_for 30 "3 of 4 hollow nodes off" power_count_is off 3
power_count_is on 1 || fail "the warm buffer (one 8-GPU node) is not on"
grep -q " off " <<<"$("$GPOOL" nodes --controller "$ADDR")" || fail "gpool nodes does not show off nodes"
j=$("$GPOOL" submit --gpus 16 --duration 1s --controller "$ADDR" -- sleep 1)
wait_for 30 "16-GPU job finished after resume" state_is "$j" finished
grep -q "power off -> resuming" "$TMP/ctl.log" || fail "no resume decision in the controller log"
grep -q "booted" "$TMP/hollow.log" || fail "no hollow node booted"
cleanup_run() { for p in $AGENT_PIDS $CTL_PID; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
cleanup_run
mkdir "$TMP/1" && mv "$TMP"/*.log "$TMP/1/" && rm -f "$TMP/state.db"*

# ---- 2. real agents, suspend command and a resume proxy
start_controller --policy-config \
  "power.enabled=true,power.idle_timeout_s=1,power.warm_buffer_gpus=0,power.boot_latency_s=1"
"$GPOOL" --log-level info agent --controller "$ADDR" --name a-real --emulated-gpus 8 \
  --log-dir "$TMP/logs" --heartbeat-ms 100 \
  --suspend-cmd "echo \$GPOOL_POWER_NODE > $TMP/suspended" >"$TMP/agent.log" 2>&1 &
A_PID=$!
AGENT_PIDS=$A_PID
"$GPOOL" --log-level info agent --controller "$ADDR" --name b-proxy --log-dir "$TMP/logs-proxy" \
  --heartbeat-ms 100 --resume-cmd "echo {node} >> $TMP/resumed; kill -CONT $A_PID" \
  >"$TMP/proxy.log" 2>&1 &
AGENT_PIDS="$AGENT_PIDS $!"
wait_for 30 "a-real off" node_state_is a-real off
wait_for 10 "suspend command ran" test -s "$TMP/suspended"
[ "$(cat "$TMP/suspended")" = a-real ] || fail "suspend command got node '$(cat "$TMP/suspended")'"
kill -STOP "$A_PID"  # the machine is "off": no more heartbeats
node_state_is b-proxy ready || fail "the power proxy was suspended"
j=$("$GPOOL" submit --gpus 1 --controller "$ADDR" -- sh -c 'echo ran > '"$TMP/ran")
wait_for 30 "job on the resumed node finished" state_is "$j" finished
grep -qx a-real "$TMP/resumed" || fail "the proxy did not run --resume-cmd for a-real"
[ "$(cat "$TMP/ran")" = ran ] || fail "the job did not run"
node_state_is b-proxy ready || fail "the power proxy was suspended"
echo PASS
