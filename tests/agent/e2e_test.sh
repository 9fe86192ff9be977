#!/usr/bin/env bash
# End-to-end test of the real node agent: a real controller and a real `gpool agent` with two
# emulated GPUs (no GPU here) on loopback.
# Checks: the agent registers its inventory; a job runs a real command that records its
# environment (CUDA_VISIBLE_DEVICES, GPOOL_*), its stdout lands in the per-task log, exit 0 ends
# the job "finished"; a non-zero exit is reported (job "failed", exit code kept); a cancelled
# long job's process group is killed, including a task that ignores SIGTERM (SIGKILL after the
# grace period); a command that does not exist fails the job with 127; a fractional task on a
# node that advertises a GPU server runs through the remoting runtime with a lease the
# controller signed for its share (GPOOL_DEVICES, GPOOL_LEASE; checked with `gpool lease verify`).
# Usage: e2e_test.sh PATH/TO/gpool
set -euo pipefail
GPOOL=${1:?usage: e2e_test.sh GPOOL_BINARY}
TMP=$(mktemp -d)
. "$(dirname "$0")/lib.sh"

openssl rand -hex 32 >"$TMP/lease.key"
start_controller --lease-key "$TMP/lease.key"
"$GPOOL" --log-level info agent --controller "$ADDR" --name real-0 --emulated-gpus 2 --log-dir "$TMP/logs" \
  --heartbeat-ms 100 --kill-grace-ms 500 --gpu-server 127.0.0.1:7999 --client-lib-dir /opt/gpool-test/lib \
  >"$TMP/agent.log" 2>&1 &
AGENT_PIDS=$!
wait_for 20 "node registered" node_count_is 1
nodes=$("$GPOOL" nodes -o json --controller "$ADDR")
grep -q '"gpus": 2,' <<<"$nodes" || fail "expected 2 GPUs: $nodes"
grep -q '"emulated_gpus": true' <<<"$nodes" || fail "not marked emulated"
grep -q '"cpu_milli": "[1-9]' <<<"$nodes" || fail "no CPU inventory"
grep -q '"memory_bytes": "[1-9]' <<<"$nodes" || fail "no memory inventory"


# 1. A job records its environment.
j1=$("$GPOOL" submit --gpus 1 --controller "$ADDR" -- sh -c "env > $TMP/env.\$GPOOL_JOB_ID; echo to-stdout")
wait_for 20 "job $j1 finished" state_is "$j1" finished
grep -qx "GPOOL_JOB_ID=$j1" "$TMP/env.$j1" || fail "GPOOL_JOB_ID missing"
grep -qx "GPOOL_TASK_INDEX=0" "$TMP/env.$j1" || fail "GPOOL_TASK_INDEX missing"
grep -qx "GPOOL_NODE=real-0" "$TMP/env.$j1" || fail "GPOOL_NODE missing"
mask=$("$GPOOL" jobs describe "$j1" -o json --controller "$ADDR" | sed -n 's/.*"gpu_mask": \([0-9]*\).*/\1/p')
want=$([ "$mask" = 1 ] && echo 0 || echo 1)
grep -qx "CUDA_VISIBLE_DEVICES=$want" "$TMP/env.$j1" ||
  fail "CUDA_VISIBLE_DEVICES is not GPU $want (mask $mask): $(grep CUDA_ "$TMP/env.$j1")"
grep -qx "to-stdout" "$TMP/logs/$j1.0.out" || fail "stdout not in the task log"

# 2. Both GPUs: a comma list. 3. A failing command: exit code reported, job failed.
j2=$("$GPOOL" submit --gpus 2 --controller "$ADDR" -- sh -c "env > $TMP/env.\$GPOOL_JOB_ID")
j3=$("$GPOOL" submit --gpus 1 --controller "$ADDR" -- sh -c 'echo bad >&2; exit 7')
wait_for 20 "job $j2 finished" state_is "$j2" finished
grep -qx "CUDA_VISIBLE_DEVICES=0,1" "$TMP/env.$j2" || fail "2-GPU job: $(grep CUDA_VISIBLE "$TMP/env.$j2")"
wait_for 20 "job $j3 failed" state_is "$j3" failed
grep -q '"exit_code": 7' <<<"$("$GPOOL" jobs describe "$j3" -o json --controller "$ADDR")" || fail "exit code 7 not recorded"
grep -qx "bad" "$TMP/logs/$j3.0.err" || fail "stderr not in the task log"

# 4. Cancel a long job whose task ignores SIGTERM and has a child: all of it dies.
j4=$("$GPOOL" submit --gpus 2 --controller "$ADDR" -- sh -c \
  "trap '' TERM; sleep 300 & echo \$! > $TMP/child.pid; echo \$\$ > $TMP/task.pid; wait")
wait_for 20 "job $j4 started" test -s "$TMP/child.pid" -a -s "$TMP/task.pid"
task=$(cat "$TMP/task.pid") child=$(cat "$TMP/child.pid")
alive() { [ -e /proc/$1 ] && ! grep -q '^[0-9]* ([^)]*) Z' /proc/$1/stat 2>/dev/null; }
alive "$task" || fail "task not running"
"$GPOOL" jobs cancel "$j4" --controller "$ADDR" >/dev/null
wait_for 20 "task process killed" bash -c "! { [ -e /proc/$task ] && ! grep -q ') Z' /proc/$task/stat; }"
wait_for 20 "task child killed" bash -c "! { [ -e /proc/$child ] && ! grep -q ') Z' /proc/$child/stat; }"
state_is "$j4" cancelled || fail "job $j4 not cancelled"
grep -q "SIGKILL" "$TMP/agent.log" || fail "agent log has no SIGKILL escalation"

# 5. A command that does not exist: the job fails with 127.
j5=$("$GPOOL" submit --gpus 1 --controller "$ADDR" -- /nonexistent/gpool-test-binary)
wait_for 20 "job $j5 failed" state_is "$j5" failed
grep -q '"exit_code": 127' <<<"$("$GPOOL" jobs describe "$j5" -o json --controller "$ADDR")" || fail "exit 127 not recorded"

# 6. A fraction of a GPU: the remoting runtime with a signed lease for its share.
j6=$("$GPOOL" submit --gpu-fraction 0.5 --gpu-mem 1GiB --controller "$ADDR" -- sh -c "env > $TMP/env.\$GPOOL_JOB_ID")
wait_for 20 "job $j6 finished" state_is "$j6" finished
dev=$(sed -n 's/^GPOOL_DEVICES=//p' "$TMP/env.$j6")
lease=$(sed -n 's/^GPOOL_LEASE=//p' "$TMP/env.$j6")
[[ $dev =~ ^127\.0\.0\.1:7999/[01]$ ]] || fail "fractional task: GPOOL_DEVICES='$dev'"
grep -q "^LD_LIBRARY_PATH=/opt/gpool-test/lib" "$TMP/env.$j6" || fail "fractional task: no client lib dir"
if grep -q "^CUDA_VISIBLE_DEVICES=" "$TMP/env.$j6"; then fail "fractional task has CUDA_VISIBLE_DEVICES"; fi
"$GPOOL" lease verify --key "$TMP/lease.key" --gpu "$dev" -o json "$lease" >"$TMP/lease.json" ||
  fail "the task's lease does not verify for $dev"
grep -q '500' "$TMP/lease.json" || fail "lease does not carry the 0.5 share: $(cat "$TMP/lease.json")"

# The node is free again and still ready.
node_state_is real-0 ready || fail "node not ready"
echo PASS
