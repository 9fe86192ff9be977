#!/bin/bash
# Launch rate through `gpool run` (NVIDIA's libcudart.so.13 over gpool's libcuda.so.1 stand-in):
# noop_launch 100000, 3 runs each against an emulated gpu-server over TCP and over UCX
# (UCX_TLS=shm,self). Prints launches/s.
cd "$(dirname "$0")/.."  # repo root; needs a Release build in build/
K=build/tests/remote/libgpool_example_kernels.so  # the samples' CPU kernels (tests/remote/CMakeLists.txt)
[ -f "$K" ] || { echo "launch-rate: $K is not built (make build)" >&2; exit 1; }
for t in tcp ucx; do
  L=$(mktemp)
  UCX_TLS=shm,self build/bin/gpool --log-level info gpu-server --backend emulated --emulated-kernels $K --transport $t --insecure --listen 127.0.0.1:0 > $L 2>&1 &
  S=$!
  for i in $(seq 100); do grep -q "listening on" $L && break; sleep 0.1; done
  A=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' $L | head -1)
  for r in 1 2 3; do
    echo "$t rep $r: $(UCX_TLS=shm,self build/bin/gpool run --transport $t --devices $A/0 -- build/tests/remote/cuda/noop_launch 100000 2>&1 | tail -1)"
  done
  kill $S; wait $S 2>/dev/null; rm -f $L
done
