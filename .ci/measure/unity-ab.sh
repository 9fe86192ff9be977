#!/bin/bash
# CPU of a clean build of one tree, without unity (A) and with it (B), side by side (docs/ci.md,
# "Unity builds"). Each step's CPU comes from the compiler/linker launcher step-time.sh, no ccache,
# so the machine's load does not enter the CPU sums (it does enter wall time).
#   .ci/measure/unity-ab.sh REPO REF_A REF_B [release|asan] [SCRATCH]
# REPO: a git repository (e.g. /work/main); REF_A is built with GPOOL_UNITY=OFF, REF_B with ON.
# Both trees build at the same time, each `nice ninja -j2`, in SCRATCH (default: a mktemp -d).
set -euo pipefail
repo=$1 ref_a=$2 ref_b=$3 kind=${4:-release}
scratch=${5:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
case $kind in
  release) flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan) flags=(-DCMAKE_BUILD_TYPE=None -DGPOOL_SANITIZE=ON -DGPOOL_BENCH=OFF "-DCMAKE_CXX_FLAGS=-O1 -g1") ;;
  *) echo "unity-ab.sh: kind must be release or asan, not $kind" >&2; exit 2 ;;
esac
for side in a b; do
  ref=$([ $side = a ] && echo "$ref_a" || echo "$ref_b")
  unity=$([ $side = a ] && echo OFF || echo ON)
  rm -rf "$scratch/$side"
  git clone -q "$repo" "$scratch/$side"
  git -C "$scratch/$side" checkout -q "$ref"
  log=$scratch/$side-$kind.steps
  rm -f "$log"
  cmake -S "$scratch/$side" -B "$scratch/$side/build" -G Ninja "${flags[@]}" -DGPOOL_UNITY=$unity \
    "-DCMAKE_CXX_COMPILER_LAUNCHER=$here/step-time.sh;$log" \
    "-DCMAKE_C_COMPILER_LAUNCHER=$here/step-time.sh;$log" \
    "-DCMAKE_CXX_LINKER_LAUNCHER=$here/step-time.sh;$log" >"$scratch/$side-configure.log"
done
pids=()
for side in a b; do
  /usr/bin/time -f "$side: ninja total %U s user %S s sys %e s wall" -o "$scratch/$side-$kind.total" \
    nice ninja -C "$scratch/$side/build" -j2 >"$scratch/$side-$kind.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
cat "$scratch/a-$kind.total" "$scratch/b-$kind.total"
python3 "$here/step-cpu.py" "$scratch/a-$kind.steps" "$scratch/b-$kind.steps"
[ $rc = 0 ] || echo "unity-ab.sh: a build failed; logs in $scratch" >&2
exit $rc
