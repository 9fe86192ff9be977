#!/usr/bin/env bash
# demo-pool.sh BUILD_DIR: pooled GPUs on three real nodes (all on this machine, loopback).
#   A controller (embedded SQLite, a lease key) and three real `gpool agent`s: cpu-0 has no GPU;
#   gpu-1 and gpu-2 have two emulated GPUs each and run their own GPU server (`--serve-gpus`).
#   One job asks for 4 GPUs with `--gpu-source remote`: the scheduler puts its task on cpu-0 and
#   its GPUs on both servers, and the unmodified CUDA sample multi_device (built with nvcc
#   -cudart shared) runs there through NVIDIA's runtime over gpool's libcuda.so.1 stand-in. Prints the placement
#   (`gpool jobs describe`) and the sample's output, then stops every process it started.
#   Needs the CUDA samples (tests/remote, built when nvcc is found); without them it says so and
#   exits 0.
set -euo pipefail
build=${1:-build}
GPOOL=$build/bin/gpool
[ -x "$GPOOL" ] || { echo "demo-pool: $GPOOL not built" >&2; exit 1; }
GPOOL=$(cd "$(dirname "$GPOOL")" && pwd)/gpool
build=$(dirname "$(dirname "$GPOOL")")
sample=$build/tests/remote/cuda/multi_device
kernels=$build/tests/remote/libgpool_example_kernels.so
for f in "$sample" "$kernels" "$build/lib/libcudart.so.13" "$build/lib/libcuda.so.1"; do
  if [ ! -e "$f" ]; then
    echo "demo-pool: skipped: $f is not built (the CUDA samples need nvcc: set CUDA_HOME and rebuild)"
    exit 0
  fi
done

# GPOOL_SAMPLE_PRELOAD (a sanitizer tree's CTest sets it to libasan.so): preloaded into the CUDA
# samples only, which load the instrumented client runtime (ASan must come first).
PRE=()
[ -z "${GPOOL_SAMPLE_PRELOAD:-}" ] || PRE=(env "LD_PRELOAD=$GPOOL_SAMPLE_PRELOAD")
tmp=$(mktemp -d)
pids=()
cleanup() {
  trap - EXIT INT TERM
  # SIGTERM: each agent stops its tasks and its GPU server before it exits.
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo; echo "demo-pool: interrupted, stopping"; exit 130' INT TERM
die() {
  echo "demo-pool: FAILED: $*" >&2
  for f in "$tmp"/*.log; do echo "--- $f" >&2; tail -n 20 "$f" >&2; done
  exit 1
}
# until SECONDS WHAT COMMAND...: retries COMMAND every 0.2 s.
until_ok() {
  local end=$((SECONDS + $1)) what=$2; shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || die "timed out waiting for $what"
    sleep 0.2
  done
}

openssl rand -hex 32 >"$tmp/lease.key"
"$GPOOL" controller --store "sqlite:$tmp/state.db" --listen 127.0.0.1:0 --interval-ms 100 \
  --lease-key "$tmp/lease.key" >"$tmp/ctl.log" 2>&1 &
pids+=($!)
until_ok 30 "the controller" grep -qs grpc "$tmp/ctl.log"
addr=$(sed -n 's/.*grpc \([^ ]*\).*/\1/p' "$tmp/ctl.log")
echo "controller on $addr (SQLite in $tmp, lease key $tmp/lease.key)"

agent() {  # NAME [flags...]
  local name=$1; shift
  "$GPOOL" --log-level info agent --controller "$addr" --name "$name" --log-dir "$tmp/$name" \
    --heartbeat-ms 200 "$@" >"$tmp/$name.log" 2>&1 &
  pids+=($!)
}
agent cpu-0
for n in gpu-1 gpu-2; do
  agent "$n" --emulated-gpus 2 --emulated-gpu-memory 4GiB --serve-gpus --lease-key "$tmp/lease.key" \
    --emulated-kernels "$kernels"
done
registered() { [ "$("$GPOOL" nodes -o json --controller "$addr" | grep -c '"last_heartbeat_ms"')" = 3 ]; }
until_ok 30 "three nodes" registered
grep -q '^cpu-0 .* 0 ' <<<"$("$GPOOL" nodes --controller "$addr")" ||
  echo "(note: NVML found GPUs on this machine, so cpu-0 is not GPU-less here)"
echo
echo "== three agents: cpu-0 without GPUs; gpu-1 and gpu-2 each serve 2 emulated GPUs"
for n in gpu-1 gpu-2; do
  sed -n "s/.*agent \($n: serving its GPUs at .*\)/  \1/p" "$tmp/$n.log"
done
"$GPOOL" nodes --controller "$addr"

echo
echo "== gpool submit --gpus 4 --gpu-source remote -- multi_device"
job=$("$GPOOL" submit --gpus 4 --gpu-source remote --controller "$addr" -- "${PRE[@]}" "$sample")
ended() { grep -Eq '"state": "(finished|failed)"' <<<"$("$GPOOL" jobs describe "$job" -o json --controller "$addr")"; }
until_ok 60 "job $job to end" ended
echo
echo "== gpool jobs describe $job"
"$GPOOL" jobs describe "$job" --controller "$addr"
host=$("$GPOOL" jobs describe "$job" -o json --controller "$addr" | python3 -c \
  'import json, sys; print(json.load(sys.stdin)["allocations"][0]["node"])')
echo
echo "== the sample's output (task log on $host)"
sed 's/^/  /' "$tmp/$host/$job.0.out"
# The runtime's notes on stderr: peer access between devices of different servers is refused
# (copies between them are relayed through the client). One shown, the rest counted.
notes=$(grep -c '' "$tmp/$host/$job.0.err" || true)
if [ "$notes" -gt 0 ]; then
  grep -m 1 "different GPU servers" "$tmp/$host/$job.0.err" | sed 's/^/  /' || true
  echo "  ($notes notes from gpool's runtime on stderr in all)"
fi
grep -q "^PASS multi_device devices=4" "$tmp/$host/$job.0.out" || die "multi_device did not pass"
echo
echo "== what the GPU servers saw (their logs)"
# A server logs a session's end when the client's connection closes, about when the job ends.
session_ended() { grep -q "gpu-server: session [0-9]* ended" "$tmp/$1/gpu-server.err"; }
for n in gpu-1 gpu-2; do until_ok 20 "$n's server to end the session" session_ended "$n"; done
for n in gpu-1 gpu-2; do
  sed -n "s/.*gpu-server: \(session [0-9]* ended: .* launches\),.*/  $n: \1/p" "$tmp/$n/gpu-server.err"
done
echo
echo "demo-pool: a task on $host ran an unmodified CUDA program on 4 GPUs of gpu-1 and gpu-2"
cleanup
left=$(ps -eo args | grep -F -- "$tmp" | grep -v grep || true)
[ -z "$left" ] || die "processes left behind: $left"
echo "demo-pool: done (all processes stopped)"
