#!/usr/bin/env bash
# Pooled GPUs end to end, all real processes on loopback: a controller (embedded SQLite, a lease
# key, --lost-node-policy fail) and three real agents: cpu-0 without GPUs, gpu-1 and gpu-2 with
# two emulated GPUs each and their own GPU servers (`--serve-gpus`: the agent's child
# `gpool gpu-server`, emulated backend with the example CPU kernels, real TCP).
#  1. A job of 4 GPUs with --gpu-source remote (only both servers together have 4) runs the
#     unmodified CUDA sample multi_device on cpu-0 through the client runtime: it sees 4 devices,
#     both servers ran its kernels (their launch logs), the job finishes.
#  2. A GPU host dies (kill -9 of gpu-1's agent: its server dies with it) while a remote task
#     holds memory on all 4 GPUs: the job fails (the lost-node policy), its task on cpu-0 is
#     stopped, gpu-2's sessions end and its GPUs are free again (a new remote job runs on them).
#  3. The task's host dies (kill -9 of cpu-0's agent and of the task): the job fails, both
#     servers end its sessions, and all 4 GPUs are free again (a new 4-GPU job runs).
# Exits 77 (CTest: skipped) when the CUDA samples are not built (no nvcc), when this machine has
# real GPUs (cpu-0 would not be GPU-less), or when `gpool submit` has no --gpu-source.
# Usage: pool_test.sh PATH/TO/gpool
set -euo pipefail
GPOOL=${1:?usage: pool_test.sh GPOOL_BINARY}
GPOOL=$(cd "$(dirname "$GPOOL")" && pwd)/$(basename "$GPOOL")
TMP=$(mktemp -d)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/samples.sh"
samples=$build/tests/remote/cuda
kernels=$build/tests/remote/libgpool_example_kernels.so
need_built pool_test "$samples/multi_device" "$samples/error_paths" "$kernels" "$build/lib/libcudart.so.13"
if ! grep -q -- --gpu-source <<<"$("$GPOOL" submit --help 2>/dev/null)"; then
  echo "pool_test: SKIP: this gpool has no 'submit --gpu-source' (remote placement not in the CLI)"
  exit 77
fi
declare -A AGENT=()
# Agents first with SIGTERM (each stops its tasks and its GPU server), then whatever is left.
cleanup() {
  local p
  for p in "${AGENT[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${AGENT[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  for f in "$TMP"/*.task; do [ -s "$f" ] && kill -9 -- "-$(cat "$f")" 2>/dev/null || true; done
  for p in "${AGENT[@]}" $CTL_PID; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}

openssl rand -hex 32 >"$TMP/lease.key"
start_controller --lease-key "$TMP/lease.key" --lost-node-policy fail

start_agent() {  # NAME [flags...]
  local name=$1; shift
  "$GPOOL" --log-level info agent --controller "$ADDR" --name "$name" --log-dir "$TMP/$name" \
    --heartbeat-ms 100 --kill-grace-ms 500 "$@" >"$TMP/$name.log" 2>&1 &
  AGENT[$name]=$!
}
start_gpu_agent() {
  start_agent "$1" --emulated-gpus 2 --emulated-gpu-memory 1GiB --serve-gpus \
    --lease-key "$TMP/lease.key" --emulated-kernels "$kernels" --emulated-launch-log "$TMP/$1.launches"
}
server_pid() { sed -n 's/.*gpu-server: pid \([0-9]*\) listening on .*/\1/p' "$TMP/$1.log" | tail -n 1; }
alive() { [ -e "/proc/$1" ] && ! grep -q ') Z' "/proc/$1/stat" 2>/dev/null; }
# Sessions a node's server opened and ended (its log, at the agent's --log-level info).
sessions_opened() { grep -c 'gpu-server: session [0-9]* for ' "$TMP/$1/gpu-server.err" || true; }
sessions_ended() { grep -c 'gpu-server: session [0-9]* ended:' "$TMP/$1/gpu-server.err" || true; }
all_sessions_ended() { [ "$(sessions_opened "$1")" = "$(sessions_ended "$1")" ]; }
# "HOST NODE,NODE..." of a job's first allocation: where its task runs, the nodes lending it GPUs.
placement() {
  "$GPOOL" jobs describe "$1" -o json --controller "$ADDR" | python3 -c '
import json, sys
a = json.load(sys.stdin)["allocations"][0]
print(a.get("node", ""), ",".join(sorted(r["node"] for r in a.get("remote", []))))'
}
task_out() { cat "$TMP/$1/$2.0.out" 2>/dev/null; }
ready_count() { test "$(grep -c '^READY' "$TMP/$1/$2.0.out" 2>/dev/null)" = "$3"; }
# A task holding 64 MiB on each of its GPUs: one error_paths `hold` per device, each its own
# session; the task's process group id goes to $TMP/JOB.task.
hold_cmd() {
  echo "echo \$\$ > $TMP/\$GPOOL_JOB_ID.task; for d in \$(echo \$GPOOL_DEVICES | tr , ' '); do GPOOL_DEVICES=\$d ${PRE[*]} $samples/error_paths hold 64 & done; wait"
}

start_agent cpu-0
start_gpu_agent gpu-1
start_gpu_agent gpu-2
wait_for 30 "3 nodes registered" node_count_is 3
nodes=$("$GPOOL" nodes --controller "$ADDR")
if ! grep -Eq '^cpu-0 +ready +0' <<<"$nodes"; then
  echo "pool_test: SKIP: cpu-0 has GPUs here (NVML found some), so it is not a GPU-less host:"
  echo "$nodes"
  exit 77
fi
for n in gpu-1 gpu-2; do
  grep -q "agent $n: serving its GPUs at 127.0.0.1:" "$TMP/$n.log" || fail "$n does not serve its GPUs"
done

# 1. Four GPUs from two servers for one task on the node without GPUs.
j1=$("$GPOOL" submit --gpus 4 --gpu-source remote --duration 10m --controller "$ADDR" -- "${PRE[@]}" "$samples/multi_device")
wait_for 60 "job $j1 ends" job_ended "$j1"
state_is "$j1" finished || fail "job $j1 did not finish: $(task_out cpu-0 "$j1"; cat "$TMP/cpu-0/$j1.0.err")"
[ "$(placement "$j1")" = "cpu-0 gpu-1,gpu-2" ] || fail "job $j1 placed as '$(placement "$j1")', not on cpu-0 with gpu-1's and gpu-2's GPUs"
grep -qx "PASS multi_device devices=4" "$TMP/cpu-0/$j1.0.out" || fail "multi_device did not see 4 devices: $(task_out cpu-0 "$j1")"
for n in gpu-1 gpu-2; do
  grep -q "fill" "$TMP/$n.launches" || fail "$n's server ran no kernel of multi_device"
done
echo "[${SECONDS}s] 1. ok: $j1 ran on cpu-0 with the GPUs of gpu-1 and gpu-2"

# 2. A GPU host dies under a running remote task.
j2=$("$GPOOL" submit --gpus 4 --gpu-source remote --duration 10m --controller "$ADDR" -- sh -c "$(hold_cmd)")
wait_for 60 "job $j2 holds memory on 4 GPUs" ready_count cpu-0 "$j2" 4
[ "$(placement "$j2")" = "cpu-0 gpu-1,gpu-2" ] || fail "job $j2 placed as '$(placement "$j2")'"
for n in gpu-1 gpu-2; do
  ! all_sessions_ended "$n" || fail "$n has no open session of $j2"
done
task2=$(cat "$TMP/$j2.task")
server1=$(server_pid gpu-1)
[ -n "$server1" ] && alive "$server1" || fail "gpu-1's server is not running"
kill -9 "${AGENT[gpu-1]}"
unset 'AGENT[gpu-1]'
wait_for 20 "gpu-1's server ends with its agent" bash -c "! { [ -e /proc/$server1 ] && ! grep -q ') Z' /proc/$server1/stat; }"
wait_for 60 "job $j2 failed (gpu-1 lost)" state_is "$j2" failed
wait_for 30 "the task on cpu-0 stopped" bash -c "! kill -0 -- -$task2 2>/dev/null"
wait_for 30 "gpu-2's sessions of $j2 ended" all_sessions_ended gpu-2
j3=$("$GPOOL" submit --gpus 2 --gpu-source remote --duration 10m --controller "$ADDR" -- "${PRE[@]}" "$samples/multi_device")
wait_for 60 "job $j3 finished on gpu-2's GPUs" state_is "$j3" finished
p3=$(placement "$j3")
[[ $p3 == *gpu-2* && $p3 != *gpu-1* ]] || fail "job $j3 placed as '$p3', not on gpu-2's GPUs"
echo "[${SECONDS}s] 2. ok: gpu-1 lost -> $j2 failed, its task stopped, gpu-2's GPUs free ($j3 ran)"

# 3. The task's host dies. gpu-1 comes back first (a new agent and server, a new port; the dead
# server's log, with the sessions it never ended, is set aside).
mv "$TMP/gpu-1/gpu-server.err" "$TMP/gpu-1/gpu-server.err.before"
start_gpu_agent gpu-1
wait_for 60 "gpu-1 ready again" node_state_is gpu-1 ready
j4=$("$GPOOL" submit --gpus 4 --gpu-source remote --duration 10m --controller "$ADDR" -- sh -c "$(hold_cmd)")
wait_for 60 "job $j4 holds memory on 4 GPUs" ready_count cpu-0 "$j4" 4
[ "$(placement "$j4")" = "cpu-0 gpu-1,gpu-2" ] || fail "job $j4 placed as '$(placement "$j4")'"
for n in gpu-1 gpu-2; do
  ! all_sessions_ended "$n" || fail "$n has no open session of $j4"
done
task4=$(cat "$TMP/$j4.task")
kill -9 "${AGENT[cpu-0]}"
unset 'AGENT[cpu-0]'
kill -9 -- "-$task4"
wait_for 60 "job $j4 failed (cpu-0 lost)" state_is "$j4" failed
for n in gpu-1 gpu-2; do
  wait_for 30 "$n's server ended the sessions of $j4" all_sessions_ended "$n"
done
j5=$("$GPOOL" submit --gpus 4 --gpu-source remote --duration 10m --controller "$ADDR" -- "${PRE[@]}" "$samples/multi_device")
wait_for 60 "job $j5 (all 4 GPUs again) finished" state_is "$j5" finished
host=$(placement "$j5")
host=${host%% *}
grep -qx "PASS multi_device devices=4" "$TMP/$host/$j5.0.out" || fail "job $j5 on $host: $(task_out "$host" "$j5")"
echo "[${SECONDS}s] 3. ok: cpu-0 lost -> $j4 failed, both servers ended its sessions, all 4 GPUs free ($j5 ran on $host)"
echo "pool_test: ok"
