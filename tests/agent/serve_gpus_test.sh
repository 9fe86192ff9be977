#!/usr/bin/env bash
# `gpool agent --serve-gpus`, with real processes on loopback: a controller with a lease key and
# one agent with two emulated GPUs that runs its own GPU server (emulated backend, the example
# CPU kernels, real TCP).
#  1. The agent starts the server before registering and advertises its address: a fractional
#     job runs the unmodified CUDA sample vector_add through it, with the controller's lease
#     (the server enforces the lease's 256 MiB: the sample sees that much memory).
#  2. The server is killed (kill -9): the agent restarts it on the same port (leases name it),
#     and the next job runs through it.
#  3. The agent stops (SIGTERM): its server stops with it; killed (kill -9): its server dies too
#     (the parent-death signal). Nothing is left behind either way.
#  4. Refusals: --serve-gpus without --lease-key, with a lease key file that does not exist (the
#     agent exits non-zero quoting the server's error), and on a node without GPUs.
# Exits 77 (CTest: skipped) when the CUDA samples are not built (no nvcc).
# Usage: serve_gpus_test.sh PATH/TO/gpool
set -euo pipefail
GPOOL=${1:?usage: serve_gpus_test.sh GPOOL_BINARY}
GPOOL=$(cd "$(dirname "$GPOOL")" && pwd)/$(basename "$GPOOL")
TMP=$(mktemp -d)
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/samples.sh"
sample=$build/tests/remote/cuda/vector_add
kernels=$build/tests/remote/libgpool_example_kernels.so
need_built serve_gpus_test "$sample" "$kernels" "$build/lib/libcudart.so.13"

openssl rand -hex 32 >"$TMP/lease.key"
start_controller --lease-key "$TMP/lease.key"
start_agent() {  # LOGNAME [flags...]
  local log=$1; shift
  "$GPOOL" --log-level info agent --controller "$ADDR" --name gpu-1 --log-dir "$TMP/gpu-1" \
    --heartbeat-ms 100 --emulated-gpus 2 --emulated-gpu-memory 1GiB "$@" >"$TMP/$log.log" 2>&1 &
  AGENT_PIDS=$!
}
serving() { "$@" --serve-gpus --lease-key "$TMP/lease.key" --emulated-kernels "$kernels"; }
server_pids() { sed -n 's/.*gpu-server: pid \([0-9]*\) listening on .*/\1/p' "$TMP/$1.log"; }
servers_started() { [ "$(server_pids "$1" | wc -l)" -ge "$2" ]; }
gone() { ! { [ -e "/proc/$1" ] && ! grep -q ') Z' "/proc/$1/stat"; }; }
run_job() {  # runs vector_add on half a GPU; prints the job id once it finished
  local j
  j=$("$GPOOL" submit --gpu-fraction 0.5 --gpu-mem 256MiB --controller "$ADDR" -- "${PRE[@]}" "$sample")
  wait_for 60 "job $j ends" job_ended "$j"
  state_is "$j" finished || fail "job $j: $(cat "$TMP/gpu-1/$j.0.out" "$TMP/gpu-1/$j.0.err")"
  grep -qx "PASS vector_add n=1048576" "$TMP/gpu-1/$j.0.out" || fail "job $j: no PASS"
  echo "$j"
}

# 1.
serving start_agent agent1
wait_for 30 "node registered" node_count_is 1
addr=$(sed -n 's/.*agent gpu-1: serving its GPUs at \([^ ]*\).*/\1/p' "$TMP/agent1.log")
[[ $addr =~ ^127\.0\.0\.1:[0-9]+$ ]] || fail "no served address in the agent's log"
grep -q "\"gpu_server\": \"$addr\"" <<<"$("$GPOOL" nodes -o json --controller "$ADDR")" || fail "$addr not advertised"
j1=$(run_job)
grep -q "^device 0: .*, 256 MiB" "$TMP/gpu-1/$j1.0.out" || fail "the lease's 256 MiB not enforced: $(cat "$TMP/gpu-1/$j1.0.out")"
grep -q "gpu-server: session [0-9]* for " "$TMP/gpu-1/gpu-server.err" || fail "the server logged no session"

# 2.
first=$(server_pids agent1 | sed -n 1p)
kill -9 "$first"
wait_for 30 "the server restarted" servers_started agent1 2
second=$(server_pids agent1 | tail -n 1)
[ "$second" != "$first" ] || fail "no new server process"
grep -q "gpu-server: pid $second listening on $addr" "$TMP/agent1.log" || fail "restarted elsewhere than $addr"
gone "$first" || fail "the killed server was not reaped"
run_job >/dev/null

# 3.
kill "$AGENT_PIDS"
wait_for 30 "the agent stopped" gone "$AGENT_PIDS"
gone "$second" || fail "the server outlived its stopped agent"
serving start_agent agent2
wait_for 30 "the agent serves again" servers_started agent2 1
third=$(server_pids agent2)
kill -9 "$AGENT_PIDS"
wait_for 30 "the server died with its killed agent" gone "$third"

# 4. (The GPU-less case only where NVML finds no GPU: --discover lists none.)
cases=("--emulated-gpus 2 --serve-gpus" "--emulated-gpus 2 --serve-gpus --lease-key $TMP/no-such-key")
if ! grep -q '"gpus"' <<<"$("$GPOOL" agent --discover)"; then
  cases+=("--serve-gpus --lease-key $TMP/lease.key")
fi
for bad in "${cases[@]}"; do
  rc=0
  # shellcheck disable=SC2086
  timeout 60 "$GPOOL" agent --controller "$ADDR" --name bad --log-dir "$TMP/bad" $bad >"$TMP/bad.log" 2>&1 || rc=$?
  [ "$rc" != 0 ] && [ "$rc" != 124 ] || fail "agent $bad: exit $rc, expected a refusal"
  case $bad in
    *no-such-key*) grep -q "no-such-key" "$TMP/bad.log" || fail "no word on the key file: $(cat "$TMP/bad.log")" ;;
    *lease.key) grep -q "no GPUs to serve" "$TMP/bad.log" || fail "no word on the missing GPUs: $(cat "$TMP/bad.log")" ;;
    *) grep -q -- "--lease-key" "$TMP/bad.log" || fail "no word on --lease-key: $(cat "$TMP/bad.log")" ;;
  esac
  echo "refused as expected: agent $bad: $(tail -n 1 "$TMP/bad.log")"
done
echo "serve_gpus_test: ok"
