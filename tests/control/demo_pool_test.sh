#!/usr/bin/env bash
# demo_pool_test.sh GPOOL: runs scripts/demo-pool.sh (the pooled-GPU part of `make demo`) and
# checks that it shows the placement (a task on the GPU-less cpu-0, its GPUs lent by gpu-1 and
# gpu-2) and the CUDA sample's PASS on 4 devices, and ends by itself leaving no process behind.
# Exits 77 (CTest: skipped) when the demo skips itself (no CUDA samples: no nvcc).
set -euo pipefail
gpool=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
build=$(dirname "$(dirname "$gpool")")
scratch=$(mktemp -d)
out=$scratch/out
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$out" >&2; exit 1; }
# The demo's own scratch dir goes under ours (TMPDIR), so what it left running can be found.
TMPDIR=$scratch timeout 120 scripts/demo-pool.sh "$build" >"$out" 2>&1 || fail "demo-pool exited $?"
if grep -q "^demo-pool: skipped:" "$out"; then
  cat "$out"
  exit 77
fi
grep -q "PASS multi_device devices=4" "$out" || fail "no PASS of multi_device on 4 devices"
# The describe table: task 0 ran on cpu-0 with GPUs of gpu-1 and gpu-2.
grep -Eq "^ +0 +finished +cpu-0 <- .*gpu-1/.*gpu-2/" "$out" || fail "describe does not show task 0 on cpu-0 with gpu-1's and gpu-2's GPUs"
# Both servers ran kernels of it.
for n in gpu-1 gpu-2; do
  grep -Eq "^  $n: session [0-9]+ ended: .* [1-9][0-9]* launches" "$out" || fail "no launches on $n's server"
done
grep -qx "demo-pool: done (all processes stopped)" <<<"$(tail -n 1 "$out")" || fail "did not end cleanly"
left=$(ps -eo args | grep -F -- "$scratch" | grep -v grep || true)
[ -z "$left" ] || fail "processes left behind: $left"
echo "demo_pool_test: ok"
