#!/usr/bin/env bash
# End-to-end test of the SPANK plugin (src/slurm/spank_gpool.cc) with real Slurm daemons (one
# slurmctld, one slurmd, munge) and real gpool processes: a controller that signs leases, a node
# agent with two emulated GPUs that advertises its GPU server, and that emulated GPU server,
# all on loopback in a network namespace of this test's own.
# Checks:
#   1. `srun --gpool-gpus=1 vector_add` runs the unmodified CUDA sample (built with
#      `nvcc -cudart shared`) on the pooled GPU through gpool's client runtime;
#   2. when the step ends its gpool job is cancelled and the GPU is free again;
#   3. `--gpool-gpus=0.5` gives the step a lease signed for half a GPU;
#   4. a step that fails and a step that is scancel'ed give their GPUs back too;
#   5. a fraction below the unit is refused by srun, naming the option, and nothing is submitted;
#   6. a step without the option gets none of the plugin's GPOOL_* variables and no gpool job.
# Usage: spank_test.sh PATH/TO/gpool
set -euo pipefail
. "$(dirname "$0")/lib.sh"
in_netns "$@"
GPOOL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
BUILD=$(dirname "$(dirname "$GPOOL")")
PLUGIN=$BUILD/lib/spank_gpool.so
SAMPLE=$BUILD/tests/remote/cuda/vector_add
KERNELS=$BUILD/tests/remote/libgpool_example_kernels.so
for f in "$PLUGIN" "$SAMPLE" "$KERNELS"; do
  [ -e "$f" ] || { echo "FAIL: $f is not built" >&2; exit 1; }
done
TMP=$(mktemp -d)
SLURM_DIR=$TMP/slurm
PIDS=
cleanup() {
  stop_slurm
  for p in $PIDS; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [ -n "${GPOOL_KEEP_TMP:-}" ] || rm -rf "$TMP"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$TMP"/*.log "$SLURM_DIR"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }; done
  exit 1
}
. "$(dirname "$0")/../lib/controller.sh"
wait_for() {  # SECONDS DESCRIPTION COMMAND...
  local end=$((SECONDS + $1)) what=$2; shift 2
  while [ $SECONDS -lt $end ]; do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  fail "timed out waiting for: $what"
}

# gpool: controller, emulated GPU server (leases required), and a node agent that advertises it.
openssl rand -hex 32 >"$TMP/lease.key"
"$GPOOL" controller --store "sqlite:$TMP/state.db" --listen 127.0.0.1:0 --interval-ms 50 \
  --node-timeout-ms 5000 --lease-key "$TMP/lease.key" >"$TMP/ctl.log" 2>&1 &
PIDS="$PIDS $!"
wait_controller "$TMP/ctl.log" "$!"
srv_port=$((40000 + RANDOM % 20000))
"$GPOOL" gpu-server --backend emulated --emulated-kernels "$KERNELS" --emulated-devices 2 \
  --listen "127.0.0.1:$srv_port" --key "$TMP/lease.key" >"$TMP/server.log" 2>&1 &
PIDS="$PIDS $!"
"$GPOOL" agent --controller "$ADDR" --name gpu-0 --emulated-gpus 2 --log-dir "$TMP/tasks" \
  --heartbeat-ms 100 --kill-grace-ms 500 --gpu-server "127.0.0.1:$srv_port" >"$TMP/agent.log" 2>&1 &
PIDS="$PIDS $!"
nodes_ready() { grep -q "^gpu-0 *ready" <<<"$("$GPOOL" nodes --controller "$ADDR")"; }
wait_for 30 "gpu-0 ready" nodes_ready

# Slurm with the plugin in its plugstack.
echo "required $PLUGIN controller=$ADDR gpool=$GPOOL wait=30s max_time=10m" >"$TMP/plugstack.conf"
start_slurm "PlugStackConfig=$TMP/plugstack.conf"

# Job helpers: the gpool jobs this test's steps made, and GPUs in use.
jobs_json() { "$GPOOL" jobs -o json --controller "$ADDR"; }
job_count() { jobs_json | grep -c '"id": "j' || true; }
state_of() { "$GPOOL" jobs describe "$1" -o json --controller "$ADDR" | sed -n 's/^ *"state": "\(.*\)",*$/\1/p'; }
state_is() { test "$(state_of "$1")" = "$2"; }
allocated_is() { grep -q " $1 allocated" <<<"$("$GPOOL" nodes --controller "$ADDR")"; }
last_job() { jobs_json | sed -n 's/^ *"id": "\(j[0-9]*\)",*$/\1/p' | sort | tail -n 1; }

# 1. An unmodified CUDA program on one pooled GPU.
out=$(srun --gpool-gpus=1 "$SAMPLE" 2>"$TMP/srun1.err") || fail "srun vector_add: $(cat "$TMP/srun1.err")"
grep -q "^PASS vector_add" <<<"$out" || fail "vector_add did not pass: $out"
j1=$(last_job)
[ -n "$j1" ] || fail "no gpool job was made for the step"
# 2. Given back when the step ended.
wait_for 20 "job $j1 cancelled" state_is "$j1" cancelled
wait_for 20 "GPUs free after step 1" allocated_is "0"

# 3. Half a GPU: the step's lease is signed for 500 milli-GPU.
srun --gpool-gpus=0.5 env >"$TMP/env3" 2>"$TMP/srun3.err" || fail "srun env: $(cat "$TMP/srun3.err")"
dev=$(sed -n 's/^GPOOL_DEVICES=//p' "$TMP/env3")
lease=$(sed -n 's/^GPOOL_LEASE=//p' "$TMP/env3")
[ -n "$dev" ] && [ -n "$lease" ] || fail "no GPOOL_DEVICES/GPOOL_LEASE in the step: $(cat "$TMP/env3")"
grep -q "^LD_LIBRARY_PATH=$BUILD/bin/../lib" "$TMP/env3" || fail "client runtime not first in LD_LIBRARY_PATH"
"$GPOOL" lease verify --key "$TMP/lease.key" --gpu "$dev" -o json "$lease" >"$TMP/lease3.json" ||
  fail "the step's lease does not verify for $dev"
grep -q '"compute_milli": 500' "$TMP/lease3.json" || fail "lease is not for half a GPU: $(cat "$TMP/lease3.json")"
j3=$(last_job)
wait_for 20 "job $j3 cancelled" state_is "$j3" cancelled

# 4a. A failing step gives its GPU back.
if srun --gpool-gpus=1 sh -c 'exit 3' 2>"$TMP/srun4.err"; then fail "a step that exits 3 succeeded"; fi
j4=$(last_job)
[ "$j4" != "$j3" ] || fail "no gpool job for the failing step"
wait_for 20 "job $j4 cancelled" state_is "$j4" cancelled
# 4b. So does a step that is cancelled with scancel while it runs.
srun --gpool-gpus=2 sleep 120 >/dev/null 2>"$TMP/srun5.err" &
srun_pid=$!
j5_running() { j=$(last_job); [ "$j" != "$j4" ] && [ "$(state_of "$j")" = running ]; }
wait_for 30 "the sleeping step's gpool job running" j5_running
j5=$(last_job)
wait_for 20 "2 GPUs allocated" allocated_is "2"
slurm_job=$(squeue -h -o %i | sed -n 1p)
[ -n "$slurm_job" ] || fail "no Slurm job in the queue"
scancel "$slurm_job"
wait "$srun_pid" 2>/dev/null || true
wait_for 30 "job $j5 cancelled after scancel" state_is "$j5" cancelled
wait_for 20 "GPUs free after scancel" allocated_is "0"

# 5. Below the unit: refused before anything is allocated.
before=$(job_count)
if srun --gpool-gpus=0.0004 true 2>"$TMP/srun6.err"; then fail "--gpool-gpus=0.0004 was accepted"; fi
grep -q "gpool-gpus=0.0004: below the unit" "$TMP/srun6.err" || fail "no clear error: $(cat "$TMP/srun6.err")"
[ "$(job_count)" = "$before" ] || fail "a gpool job was submitted for a refused request"

# 6. No option, no pooled GPUs.
srun env >"$TMP/env7" 2>/dev/null || fail "a plain srun failed"
# (The plugin's variables: the caller's own GPOOL_* environment, e.g. CI's, passes through.)
if grep -Eq "^GPOOL_(DEVICES|LEASE|JOB_ID)=" "$TMP/env7"; then
  fail "the plugin's GPOOL_* set without --gpool-gpus: $(grep ^GPOOL_ "$TMP/env7")"
fi
[ "$(job_count)" = "$before" ] || fail "a gpool job was submitted for a step without the option"
echo "spank_test: ok"
