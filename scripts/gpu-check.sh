#!/usr/bin/env bash
# Real-GPU check of gpool's CUDA remoting (docs/remoting.md, "Checking on a real GPU").
#
# On a machine with an NVIDIA GPU and the CUDA toolkit: builds the samples in examples/cuda for
# sm_90 (override with GPOOL_ARCH), runs each natively (the real libcudart.so.13) and through gpool
# (a local `gpool gpu-server --backend cuda` over loopback TCP), compares their PASS lines, and
# prints the launch rate and copy bandwidth both ways, then checks compute shares: two sessions
# with leases of shares 0.75 and 0.25 run the same kernel loop (examples/cuda/share_loop.cu) at
# once on device 0 of a second server started with a lease key, and the split of kernels they got
# is printed (GPOOL_SHARE_SECONDS, default 10, sets how long). Exits non-zero on any mismatch, or
# if the 0.75 session got less than 60% of the kernels (no enforcement would give ~50%).
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
share_pid=
cleanup() {
  [[ -n $server_pid ]] && kill "$server_pid" 2>/dev/null
  [[ -n $share_pid ]] && kill "$share_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

die() { echo "gpu-check: $*" >&2; exit 1; }
command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this script needs an NVIDIA GPU"
nvidia-smi -L || die "no GPU visible"
[[ -x $nvcc ]] || die "nvcc not found at $nvcc (set CUDA_HOME)"
[[ -x $gpool ]] || die "$gpool missing: build first (cmake --build $build)"
[[ -f $lib/libcudart.so.13 ]] || die "$lib/libcudart.so.13 missing: build target gpool_cudart"

samples=(vector_add struct_param streams_events memcpy_sizes symbols multi_device error_paths noop_launch
         share_loop)
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
echo "== compute shares: sessions with shares 0.75 and 0.25 on device 0, same kernel loop"
secs=${GPOOL_SHARE_SECONDS:-10}
echo "native, alone:"; "$work/share_loop" 3 | sed 's/^/  /'
openssl rand -hex 32 >"$work/lease.key"
"$gpool" --log-level info gpu-server --backend cuda --listen 127.0.0.1:0 --key "$work/lease.key" \
  >"$work/share-server.log" 2>&1 &
share_pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$work/share-server.log" && break
  sleep 0.1
done
saddr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$work/share-server.log")
[[ -n $saddr ]] || { cat "$work/share-server.log"; die "share-check server did not start"; }
lease() { "$gpool" lease issue --key "$work/lease.key" --gpu "$saddr/0" --share "$1" --ttl 10m; }
echo "gpool, alone (share 0.25: a share is a floor, so alone it runs at full speed):"
"$gpool" run --devices "$saddr/0" --lease "$(lease 0.25)" -- "$work/share_loop" 3 | sed 's/^/  /'
"$gpool" run --devices "$saddr/0" --lease "$(lease 0.75)" -- "$work/share_loop" "$secs" \
  >"$work/share_big.out" 2>&1 &
big=$!
"$gpool" run --devices "$saddr/0" --lease "$(lease 0.25)" -- "$work/share_loop" "$secs" \
  >"$work/share_small.out" 2>&1 &
small=$!
wait "$big" || { cat "$work/share_big.out"; fail=1; }
wait "$small" || { cat "$work/share_small.out"; fail=1; }
kernels() { sed -n 's/^PASS share_loop kernels=\([0-9]*\).*/\1/p' "$1"; }
kb=$(kernels "$work/share_big.out"); ks=$(kernels "$work/share_small.out")
echo "  share 0.75: $(grep '^PASS' "$work/share_big.out")"
echo "  share 0.25: $(grep '^PASS' "$work/share_small.out")"
grep "session .* ended" "$work/share-server.log" | sed 's/^/  server: /'
if [[ -n $kb && -n $ks ]]; then
  split=$(awk -v a="$kb" -v b="$ks" 'BEGIN { printf "%.3f", a / (a + b) }')
  echo "  achieved split: $split of the kernels to the 0.75 session (want 0.750)"
  awk -v s="$split" 'BEGIN { exit !(s >= 0.6) }' || { echo "SHARES NOT ENFORCED: split $split"; fail=1; }
else
  echo "SHARE CHECK FAILED: a share_loop run did not finish"; fail=1
fi
kill "$share_pid" 2>/dev/null; share_pid=

if [[ -x $build/bench/remote_bench ]]; then
  echo "== bench/remote_bench (emulated backend, for the transport figures)"
  "$build/bench/remote_bench" --benchmark_min_time=0.2s 2>/dev/null | tail -n +4 || true
fi
# The node agent's NVML discovery (helper script, owned by the agent code).
"$here/scripts/gpu-check-agent.sh" "$build" || fail=1
[[ $fail == 0 ]] && echo "gpu-check: all samples agree" || die "some samples disagree (see above)"
