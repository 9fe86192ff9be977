#!/usr/bin/env bash
# The driver layer's speed (issue 27), each figure against the raw peer of the same run:
# `remote_bench --interleaved --clients` over TCP and then UCX, where programs that call CUDA
# through gpool's interception layers (bench/layer_client.h) run as contenders beside the plain
# socket / ucp ping-pong and the raw transport stream, alternating repetition by repetition:
#   - cuCtxSynchronize through the libcuda.so.1 stand-in against the plain round trip (<= 1.3x),
#     and cudaDeviceSynchronize through NVIDIA's shared runtime (a `-cudart shared` build, the
#     client lib dir's libcudart.so.13) over it;
#   - cuLaunchKernel launches per second (>= 0.5 M/s), beside <<<>>> launches through NVIDIA's
#     shared and static runtimes over the driver stand-in;
#   - a loop of small cublasSgemm calls (cuBLAS over the driver stand-in, kernels no-ops on the
#     emulated server): calls/s and us/call against the round trip and a <<<>>> launch;
#   - copies through the driver stand-in, 4 KiB .. 64 MiB both ways, against the raw stream
#     (>= 0.95 of raw per cell).
# The "driver layer" lines of the output carry the figures (docs/benchmarks.md, "Remoting").
# First it finds the kernels that cuBLAS's SGEMM launches (one probe run against a server that
# logs launches) and names them in GPOOL_BENCH_NOOP_KERNELS, for the no-op kernel plugin.
# Needs a Release build with nvcc (the clients in BUILD/bench/clients) and cuBLAS for the SGEMM.
# Usage: bench/driver_layer.sh [BUILD_DIR] [REPS] [remote_bench flags, e.g. --aa or --only=tcp]
# UCX_TLS defaults to shm,self for the UCX run.
set -euo pipefail
build=${1:-build}
reps=${2:-9}
shift $(($# < 2 ? $# : 2))
gpool=$build/bin/gpool
clients=$build/bench/clients
plugin=$build/bench/libgpool_bench_noop_kernels.so
for f in "$build/bench/remote_bench" "$gpool" "$plugin" "$clients/driver_client" \
         "$clients/layer_kernels.fatbin" "$clients/layer_runtime" "$build/lib/libcuda.so.1" \
         "$build/lib/libcudart.so.13"; do
  [ -e "$f" ] || { echo "driver_layer: $f is not built (the clients need nvcc: cmake --build $build --target remote_bench gpool gpool_driver gpool_nvidia_cudart gpool_bench_noop_kernels bench_layer_clients)" >&2; exit 1; }
done
command -v python3 >/dev/null || { echo "driver_layer: python3 is missing (reads the launch log)" >&2; exit 1; }
tmp=$(mktemp -d)
server=
cleanup() { [ -z "$server" ] || kill "$server" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

# The SGEMM's kernels: a probe run logs each launch on the server; names not yet no-ops are added
# and the probe runs again, until a run launches nothing new (a failed launch may hide the next).
export GPOOL_BENCH_NOOP_KERNELS=
if [ -x "$clients/layer_static" ]; then
  for round in 1 2 3 4 5; do
    : >"$tmp/launches"
    "$gpool" --log-level info gpu-server --backend emulated --emulated-kernels "$plugin" \
      --emulated-launch-log "$tmp/launches" --transport tcp --insecure --listen 127.0.0.1:0 \
      >"$tmp/server.log" 2>&1 &
    server=$!
    for _ in $(seq 600); do  # up to 60 s: a loaded 2-core VM starts the CLI slowly
      grep -q "listening on" "$tmp/server.log" && break
      kill -0 "$server" 2>/dev/null || break
      sleep 0.1
    done
    addr=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$tmp/server.log" | sed -n 1p)
    [ -n "$addr" ] || { echo "driver_layer: the probe's gpu-server did not start:" >&2; cat "$tmp/server.log" >&2; exit 1; }
    # Fails (exit 1) while a kernel has no CPU version: expected, the log has what it launched.
    "$gpool" run --transport tcp --devices "$addr/0" -- "$clients/layer_static" probe \
      >"$tmp/probe.log" 2>&1 || true
    kill "$server"; wait "$server" 2>/dev/null || true; server=
    names=$(python3 - "$tmp/launches" "$GPOOL_BENCH_NOOP_KERNELS" <<'PY'
import re, sys, urllib.parse
known = [n for n in sys.argv[2].split(',') if n]
for line in open(sys.argv[1]):
    m = re.search(r' kernel=(\S+) ', line)
    if m:
        name = urllib.parse.unquote(m.group(1))  # the log escapes bytes outside [A-Za-z0-9_$.]
        if name != '_Z4noopi' and name not in known:
            known.append(name)
print(','.join(known))
PY
)
    [ "$names" = "$GPOOL_BENCH_NOOP_KERNELS" ] && break
    GPOOL_BENCH_NOOP_KERNELS=$names
  done
  if [ -z "$GPOOL_BENCH_NOOP_KERNELS" ]; then
    echo "driver_layer: the SGEMM probe launched no kernel; its output:" >&2
    cat "$tmp/probe.log" >&2
    exit 1
  fi
  echo "driver_layer: cuBLAS SGEMM kernels run as no-ops: $GPOOL_BENCH_NOOP_KERNELS"
else
  echo "driver_layer: no $clients/layer_static (no cuBLAS in the toolkit): no SGEMM loop"
fi

sizes=4096,65536,1048576,16777216,67108864
common=(--interleaved --pin --reps="$reps" --min-time=0.3 --size=$sizes --clients="$clients"
        --gpool="$gpool" --kernels="$plugin")
transports=(tcp ucx)
extra=()
for a in "$@"; do  # --only=tcp|ucx picks the run; the other flags go to remote_bench
  case $a in
    --only=tcp|--only=ucx) transports=("${a#--only=}") ;;
    --only=*) echo "driver_layer: $a: want --only=tcp or --only=ucx" >&2; exit 2 ;;
    *) extra+=("$a") ;;
  esac
done
for t in "${transports[@]}"; do
  if [ "$t" = tcp ]; then
    echo "== driver_layer: TCP"
    "$build/bench/remote_bench" "${common[@]}" --only=tcp ${extra[@]+"${extra[@]}"}
  else
    echo "== driver_layer: UCX (UCX_TLS=${UCX_TLS:-shm,self})"
    UCX_TLS=${UCX_TLS:-shm,self} "$build/bench/remote_bench" "${common[@]}" --only=ucx \
      ${extra[@]+"${extra[@]}"}
  fi
done
