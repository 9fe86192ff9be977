#!/usr/bin/env bash
# One interception layer or two (issue: pool at the driver API): the launch rate of noop_launch
# through gpool's runtime stand-in (lib/gpool-runtime/libcudart.so.13 with `gpool run --runtime
# gpool`, `-cudart shared` build) against the same
# program built the default way (NVIDIA's static runtime) over gpool's driver stand-in
# (libcuda.so.1), alternating PAIRS times against one emulated gpu-server over TCP. Prints each
# pair, the medians and the per-pair ratios (driver / runtime). Needs a Release build and nvcc.
# Usage: bench/interception_layers.sh [BUILD_DIR] [PAIRS] [LAUNCHES]
set -euo pipefail
build=${1:-build}
pairs=${2:-7}
n=${3:-300000}
nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
[ -x "$nvcc" ] || { echo "interception_layers: no nvcc at $nvcc" >&2; exit 1; }
kernels=$build/tests/remote/libgpool_example_kernels.so
runtime_bin=$build/tests/remote/cuda/noop_launch
for f in "$build/bin/gpool" "$kernels" "$runtime_bin" "$build/lib/gpool-runtime/libcudart.so.13"; do
  [ -e "$f" ] || { echo "interception_layers: $f is not built" >&2; exit 1; }
done
tmp=$(mktemp -d)
server=
cleanup() { [ -z "$server" ] || kill "$server" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
"$nvcc" -O2 -arch=sm_90 -o "$tmp/noop_static" "$(dirname "$0")/../examples/cuda/noop_launch.cu"
"$build/bin/gpool" --log-level info gpu-server --backend emulated --emulated-kernels "$kernels" \
  --transport tcp --insecure --listen 127.0.0.1:0 >"$tmp/server.log" 2>&1 &
server=$!
for _ in $(seq 100); do grep -q "listening on" "$tmp/server.log" && break; sleep 0.1; done
addr=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$tmp/server.log" | sed -n 1p)
[ -n "$addr" ] || { echo "interception_layers: the server did not start" >&2; exit 1; }
rate() {  # launches/s of one run of $2, with `gpool run` flags $1 (--runtime gpool|nvidia)
  local out
  out=$("$build/bin/gpool" run --transport tcp --devices "$addr/0" $1 -- "$2" "$n" 2>&1)
  sed -n 's/.*launches_per_s=\([0-9]*\).*/\1/p' <<<"$out"
}
echo "pair runtime_stand_in driver_stand_in (launches/s, $n launches each)"
for p in $(seq "$pairs"); do
  echo "$p $(rate "--runtime gpool" "$runtime_bin") $(rate "--runtime nvidia" "$tmp/noop_static")"
done | tee "$tmp/pairs"
python3 - "$tmp/pairs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
a = [float(r[1]) for r in rows]
b = [float(r[2]) for r in rows]
print(f"median: runtime stand-in {statistics.median(a)/1e6:.2f} M/s, "
      f"driver stand-in {statistics.median(b)/1e6:.2f} M/s")
print("driver / runtime per pair:", " ".join(f"{y/x:.2f}" for x, y in sorted(zip(a, b), key=lambda t: t[1]/t[0])))
PY
