#!/usr/bin/env bash
# Real-GPU check of gpool's CUDA remoting (docs/remoting.md, "Checking on a real GPU").
#
# On a machine with an NVIDIA GPU and the CUDA toolkit: builds the samples in examples/cuda for
# sm_90 (override with GPOOL_ARCH), runs each natively (the real libcudart.so.13) and through gpool
# (a local `gpool gpu-server --backend cuda` over loopback TCP), compares their PASS lines, and
# prints the launch rate and copy bandwidth both ways. Exits non-zero on any mismatch.
#
#   scripts/gpu-check.sh [BUILD_DIR]      (default: build; must hold bin/gpool and lib/libcudart.so.13)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
arch=${GPOOL_ARCH:-sm_90}
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
gpool=$build/bin/gpool
lib=$build/lib
work=$(mktemp -d /tmp/gpool-gpu-check.XXXXXX)
server_pid=
cleanup() { [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

die() { echo "gpu-check: $*" >&2; exit 1; }
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this script needs an NVIDIA GPU"
nvidia-smi -L || die "no GPU visible"
[[ -x $nvcc ]] || die "nvcc not found at $nvcc (set CUDA_HOME)"
[[ -x $gpool ]] || die "$gpool missing: build first (cmake --build $build)"
[[ -f $lib/libcudart.so.13 ]] || die "$lib/libcudart.so.13 missing: build target gpool_cudart"

samples=(vector_add struct_param streams_events memcpy_sizes symbols multi_device error_paths noop_launch)
echo "== building samples for $arch"
for s in "${samples[@]}"; do
  "$nvcc" -cudart shared -arch="$arch" -O2 -o "$work/$s" "$here/examples/cuda/$s.cu" &
done
wait

echo "== starting gpool gpu-server --backend cuda"
"$gpool" --log-level info gpu-server --backend cuda --listen 127.0.0.1:0 --insecure \
  --session-mem-limit 8GiB >"$work/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/server.log" && break
  sleep 0.1
done
addr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$work/server.log")
[[ -n $addr ]] || { cat "$work/server.log"; die "server did not start"; }
ngpu=$(nvidia-smi -L | wc -l)
devices=$addr/0
for ((i = 1; i < ngpu; i++)); do devices+=",$addr/$i"; done
echo "server at $addr, devices $devices"

# Each entry: sample and its arguments.
runs=("vector_add 1048576" "struct_param" "streams_events" "memcpy_sizes 268435456" "symbols"
      "multi_device 1" "error_paths launch-fail" "error_paths bad-pointer" "error_paths unsupported"
      "noop_launch 200000")
fail=0
for r in "${runs[@]}"; do
  set -- $r
  name=$1; shift
  native=$("$work/$name" "$@" 2>"$work/native.err" | grep '^PASS' || true)
  remote=$(GPOOL_DEVICES=$devices "$gpool" run -- "$work/$name" "$@" 2>"$work/remote.err" | grep '^PASS' || true)
  # Compare the PASS lines up to measured numbers (elapsed times, rates).
  strip() { sed -E 's/(elapsed_ms|launches_per_s)=[0-9.]+//'; }
  if [[ $name == error_paths && $1 == launch-fail ]]; then
    # A real GPU runs alwaysFails without fault: only the remote (emulated-fault) story differs.
    echo "-- $name $*: native: ${native:-FAIL}; gpool: ${remote:-FAIL} (native need not fail)"
    continue
  fi
  if [[ -n $native && "$(echo "$native" | strip)" == "$(echo "$remote" | strip)" ]]; then
    echo "ok $name $*: $remote"
  else
    echo "MISMATCH $name $*: native='$native' gpool='$remote'"
    sed 's/^/   native: /' "$work/native.err" | tail -5
    sed 's/^/   gpool:  /' "$work/remote.err" | tail -5
    fail=1
  fi
done

echo "== latency and bandwidth"
echo "native:"; "$work/noop_launch" 200000 | sed 's/^/  /'
echo "gpool:";  GPOOL_DEVICES=$devices "$gpool" run -- "$work/noop_launch" 200000 | sed 's/^/  /'
echo "native copies:"; "$work/memcpy_sizes" 268435456 | grep 'round trip' | sed 's/^/  /'
echo "gpool copies:";  GPOOL_DEVICES=$devices "$gpool" run -- "$work/memcpy_sizes" 268435456 | grep 'round trip' | sed 's/^/  /'
if [[ -x $build/bench/remote_bench ]]; then
  echo "== bench/remote_bench (emulated backend, for the transport figures)"
  "$build/bench/remote_bench" --benchmark_min_time=0.2s 2>/dev/null | tail -n +4 || true
fi
# The node agent's NVML discovery (helper script, owned by the agent code).
"$here/scripts/gpu-check-agent.sh" "$build" || fail=1
[[ $fail == 0 ]] && echo "gpu-check: all samples agree" || die "some samples disagree (see above)"
