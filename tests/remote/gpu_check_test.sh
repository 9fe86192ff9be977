#!/usr/bin/env bash
# CTest for scripts/gpu-check.sh without a GPU (its --emulated mode), so that the script a GPU
# lease runs once is itself tested in CI:
#  1. the whole flow against emulated servers passes, with a PASS line for every sample, the
#     share check, NCCL's init and collectives over two servers, the training loop on one device
#     and on two servers, and the cuda backend's symbol check against the toolkit's stub libcuda;
#  2. it fails, naming the sample, when a sample fails, and a sample that hangs is stopped by
#     --timeout and reported, not waited for (fake samples in a scratch dir);
#  3. with --budget spent, every remaining step is cut short and the summary still comes.
#   tests/remote/gpu_check_test.sh PATH/TO/bin/gpool
set -euo pipefail
gpool=${1:?usage: gpu_check_test.sh PATH/TO/bin/gpool}
build=$(cd "$(dirname "$gpool")/.." && pwd)
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "gpu_check_test: FAIL: $*"; exit 1; }

# 1. The whole flow.
if ! "$here/scripts/gpu-check.sh" --emulated --timeout 60 --build "$build" >"$tmp/full.log" 2>&1; then
  cat "$tmp/full.log"; fail "gpu-check.sh --emulated failed"
fi
cat "$tmp/full.log"
for want in "PASS runtime through gpool run: $build/lib/libcudart.so.13" \
            "PASS vector_add 1048576 (gpool, emulated): PASS vector_add n=1048576" \
            "PASS struct_param (gpool" "PASS streams_events (gpool" "PASS memcpy_sizes 4194304 (gpool" \
            "PASS symbols (gpool" "PASS multi_device 1 (gpool" "PASS error_paths bad-pointer (gpool" \
            "PASS error_paths unsupported (gpool" "PASS error_paths oom (gpool" \
            "PASS error_paths dynamic-shared (gpool" \
            "PASS error_paths launch-fail (gpool" "PASS noop_launch 20000 (gpool" \
            "PASS per_thread_stream (gpool" "PASS error_paths config (gpool" "PASS copies_2d (gpool" \
            "PASS copies_3d (gpool" \
            "PASS aggregate (two servers, one GPU each): PASS multi_device devices=2" \
            "PASS api_coverage (gpool" "PASS runtime_calls (gpool" "PASS module_reload /" \
            "latency: gpool" "bandwidth: gpool" "PASS shares: both sessions ran" \
            "PASS driver vector_add_static (gpool, emulated): PASS vector_add n=1048576" \
            "PASS driver driver_api (gpool, emulated): PASS driver_api" \
            "PASS driver vmm_alloc (gpool, emulated): PASS vmm_alloc" \
            "PASS driver graph_capture (gpool, emulated): PASS graph_capture" \
            "NOTE driver: cublas_sgemm 4096 and cudnn_conv skipped" \
            "gpu-check: PASS"; do
  grep -qF -- "$want" "$tmp/full.log" || fail "missing line: $want"
done
# The training loop (mlp_train --naive-gemm) through gpool on one emulated device, then on device
# 0 of two servers with its gradients all-reduced by gpool's libnccl.so.2. Without cuBLAS or NCCL
# in the toolkit the sample is not built and the step says SKIPPED (a note).
passes=27
notes=1
if [[ -x $build/tests/remote/cuda/mlp_train ]]; then
  grep -q "^PASS train 1 device (gpool, emulated, naive GEMM): devices=1 gemm=naive .*PASS mlp_train steps=100 gemm=naive" \
    "$tmp/full.log" || fail "no training PASS"
  grep -q "^PASS train 2 pooled GPUs (gpool, emulated, naive GEMM, two servers): devices=2 gemm=naive .*PASS mlp_train steps=100 gemm=naive" \
    "$tmp/full.log" || fail "no two-server training PASS"
  grep -q "^train: median step gpool [0-9.]* ms" "$tmp/full.log" || fail "no training step time"
  passes=$((passes + 2))
else
  grep -qF "NOTE train: SKIPPED, mlp_train not built" "$tmp/full.log" || fail "the skipped training step is not said"
  notes=$((notes + 1))
fi
# NCCL's step: init on NVIDIA's NCCL through gpool over two emulated servers, then the
# all-reduce and nccl_collectives through gpool's libnccl.so.2 (no NCCL kernel runs, so they pass
# on the emulated servers). Without libnccl in the toolkit the samples are not built and the step
# says SKIPPED.
if [[ -x $build/tests/remote/cuda/nccl_allreduce ]]; then
  grep -qF "PASS nccl init (NVIDIA's NCCL through gpool, two servers): 2 communicators checked, PASS nccl_allreduce init devices=2" \
    "$tmp/full.log" || fail "no nccl init PASS"
  grep -qF "PASS nccl all-reduce (gpool's libnccl.so.2, two servers): PASS nccl_allreduce devices=2" \
    "$tmp/full.log" || fail "no nccl all-reduce PASS"
  passes=$((passes + 2))
  if [[ -x $build/tests/remote/cuda/nccl_collectives ]]; then
    grep -qF "PASS nccl collectives (gpool's libnccl.so.2, two servers): PASS nccl_collectives all" \
      "$tmp/full.log" || fail "no nccl collectives PASS"
    passes=$((passes + 1))
  fi
else
  grep -qF "NOTE nccl: SKIPPED, nccl_allreduce not built" "$tmp/full.log" || fail "the skipped nccl step is not said"
  notes=$((notes + 1))
fi
# The stub libcuda.so comes with the CUDA toolkit; without it the script says SKIPPED.
cuda_home=${CUDA_HOME:-/usr/local/cuda}
if [[ -e $cuda_home/lib64/stubs/libcuda.so || -e $cuda_home/targets/x86_64-linux/lib/stubs/libcuda.so ]]; then
  grep -qF "PASS cuda-stub: every driver symbol resolved" "$tmp/full.log" || fail "no cuda-stub PASS"
  grep -qF "== summary: $passes passed, 0 failed, $notes notes" "$tmp/full.log" || fail "wrong summary"
else
  echo "gpu_check_test: NOTE: no stub libcuda.so under $cuda_home: the driver-symbol check was skipped"
  grep -qF "NOTE cuda-stub: SKIPPED" "$tmp/full.log" || fail "the skipped stub check is not reported"
fi

# 2. Fake samples (scripts, so that nothing here depends on the machine's speed): each prints a
#    PASS line at once, except `symbols`, which fails, and `struct_param`, which hangs.
mkdir "$tmp/samples"
for s in vector_add struct_param streams_events memcpy_sizes symbols multi_device error_paths \
         noop_launch share_loop per_thread_stream copies_2d copies_3d api_coverage runtime_calls \
         module_reload libreload_kernels.so; do
  printf '#!/bin/sh\necho "PASS %s fake"\n' "$s" >"$tmp/samples/$s"
done
printf '#!/bin/sh\necho "symbols: wrong value at 7" >&2\nexit 1\n' >"$tmp/samples/symbols"
printf '#!/bin/sh\nexec sleep 600\n' >"$tmp/samples/struct_param"
chmod +x "$tmp/samples"/*
rc=0
"$here/scripts/gpu-check.sh" --emulated --timeout 8 --only samples --samples "$tmp/samples" \
  --build "$build" >"$tmp/bad.log" 2>&1 || rc=$?
cat "$tmp/bad.log"
[[ $rc == 1 ]] || fail "a failing sample gave exit $rc, want 1"
grep -qF "FAIL symbols (gpool, emulated): exit 1" "$tmp/bad.log" || fail "the failing sample is not named"
grep -qF "gpool: symbols: wrong value at 7" "$tmp/bad.log" || fail "the failing sample's stderr is not shown"
grep -qF "FAIL struct_param: gpool run timed out (step limit 8s" "$tmp/bad.log" || fail "the hanging sample is not reported as timed out"
grep -qF "PASS multi_device 1 (gpool, emulated): PASS multi_device fake" "$tmp/bad.log" ||
  fail "the samples after a hang did not run"
grep -qF "== summary: 17 passed, 2 failed, 1 notes" "$tmp/bad.log" || fail "wrong summary"
grep -qx "gpu-check: FAIL" <<<"$(tail -1 "$tmp/bad.log")" || fail "last line is not 'gpu-check: FAIL'"

# 3. The run's --budget: once spent, the remaining steps get 1 s each; the run still ends with
#    its summary (which steps pass in 1 s depends on the machine's load; the hang never does).
rc=0
"$here/scripts/gpu-check.sh" --emulated --timeout 60 --budget 1 --only samples --samples "$tmp/samples" \
  --build "$build" >"$tmp/budget.log" 2>&1 || rc=$?
cat "$tmp/budget.log"
[[ $rc == 1 ]] || fail "an exhausted budget gave exit $rc, want 1"
grep -qF "FAIL struct_param: gpool run timed out" "$tmp/budget.log" || fail "the hang was not cut by the budget"
grep -q "^== summary: " "$tmp/budget.log" || fail "no summary after the budget ran out"
echo "gpu_check_test: PASS"
