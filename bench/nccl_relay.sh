#!/usr/bin/env bash
# What gpool's libnccl.so.2 stand-in costs per collective (docs/remoting/nccl.md):
# a float AllReduce of S bytes per rank over two ranks, device 0 of two emulated gpu-servers over
# TCP, relayed through the client (each rank's S bytes read, summed on the CPU, S bytes written
# back to each: 4*S bytes cross the network), against raw TCP moving the same bytes in the same
# pattern in the same run: two peer processes on loopback, each sending S bytes to the client
# and then receiving S bytes and answering with one byte (bench/nccl_relay_raw.py). Rounds
# alternate the two (REPS timed operations each, after one warm-up); the figure is the median of
# the rounds' medians, per size.
# Usage: bench/nccl_relay.sh [BUILD_DIR] [ROUNDS] [SIZES...]   (default 5 rounds; 64 KiB, 1 MiB,
# 16 MiB per rank). Needs nvcc and the toolkit's NCCL (the nccl_collectives sample); part of
# `make bench` (scripts/bench.sh runs every bench/*.sh).
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
shift $(($# < 2 ? $# : 2))
sizes=("$@")
((${#sizes[@]})) || sizes=(65536 1048576 16777216)
reps=${REPS:-9}
here=$(cd "$(dirname "$0")" && pwd)
gpool=$build/bin/gpool
prog=$build/tests/remote/cuda/nccl_collectives
# In `make bench` (scripts/bench.sh) on a toolkit without NCCL: nothing to measure, said so.
if [ ! -e "$prog" ] && [ ! -e "${CUDA_HOME:-/usr/local/cuda}/lib64/libnccl.so" ]; then
  echo "nccl_relay: SKIPPED, the toolkit has no libnccl (the nccl_collectives sample is not built)"
  exit 0
fi
for f in "$gpool" "$prog" "$build/lib/nccl/libnccl.so.2" "$build/lib/libcuda.so.1"; do
  [ -e "$f" ] || { echo "nccl_relay: $f is not built (cmake --build $build --target gpool gpool_nccl remote_cuda_samples)" >&2; exit 1; }
done
cuda_lib=${CUDA_HOME:-/usr/local/cuda}/lib64
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
addrs=()
for i in 0 1; do
  "$gpool" gpu-server --backend emulated --transport tcp --insecure --listen 127.0.0.1:0 \
    >"$tmp/server$i.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do grep -q "listening on" "$tmp/server$i.log" && break; sleep 0.1; done
  a=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$tmp/server$i.log" | sed -n 1p)
  [ -n "$a" ] || { echo "nccl_relay: gpu-server $i did not start" >&2; cat "$tmp/server$i.log" >&2; exit 1; }
  addrs+=("$a")
done
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
echo "nccl relay: float AllReduce, 2 ranks (device 0 of two emulated servers, TCP), $rounds rounds x $reps reps"
for size in "${sizes[@]}"; do
  : >"$tmp/g" && : >"$tmp/r"
  for _ in $(seq "$rounds"); do
    LD_LIBRARY_PATH=$cuda_lib "$gpool" run --devices "${addrs[0]}/0,${addrs[1]}/0" --transport tcp \
      -- "$prog" bench "$size" "$reps" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
    sed -n 's/.*median_us=\([0-9.]*\).*/\1/p' "$tmp/out" >>"$tmp/g"
    python3 "$here/nccl_relay_raw.py" "$size" "$reps" >>"$tmp/r"
  done
  g=$(median <"$tmp/g")
  r=$(median <"$tmp/r")
  awk -v s="$size" -v g="$g" -v r="$r" 'BEGIN {
    printf "  %9d B/rank: gpool libnccl %10.1f us (%.2f GB/s of the 4x%d B crossing)  raw TCP %10.1f us  ratio %.2fx\n",
      s, g, 4 * s / g / 1000, s, r, g / r }'
done
