#!/usr/bin/env bash
# The libcudart.so.13 stand-in exports exactly the real library's names: the cuda*/__cuda*
# functions gen_cudart_tables.py listed from CUDA 13.0's libcudart.so.13 into cudart_stubs.cc
# (every one of them, implemented or a loud stub), each under the version node
# libcudart.so.13, plus that node itself; nothing else (no C++ template instances, no
# _edata/_end/__bss_start). A program resolves cudaMalloc@libcudart.so.13 from it as from the
# real one, and gpool's internals never leak into the program's namespace.
#   cudart_exports_test.sh GPOOL_BIN LIBCUDART
set -euo pipefail
lib=${2:?usage: cudart_exports_test.sh GPOOL_BIN LIBCUDART}
stubs=src/remote/client/cudart_stubs.cc
[[ -f $lib ]] || { echo "FAIL: $lib not built"; exit 1; }
[[ -f $stubs ]] || { echo "FAIL: run from the repository root ($stubs missing)"; exit 1; }
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# The real library's exports, as generated: GPOOL_STUB(name) lines.
sed -n 's/^GPOOL_STUB(\([A-Za-z0-9_]*\))$/\1/p' "$stubs" | sort -u >"$scratch/want"
want_n=$(wc -l <"$scratch/want")
((want_n > 400)) || { echo "FAIL: only $want_n names in $stubs"; exit 1; }

# `nm -D --defined-only` prints "ADDR TYPE NAME@@VERSION" (the version node itself: "0 A NAME").
nm -D --defined-only "$lib" >"$scratch/nm"
awk '{print $NF}' "$scratch/nm" | sort -u >"$scratch/have"
fail=0
# Every export but the version node must be NAME@@libcudart.so.13 with NAME in the real set.
grep -v -x 'libcudart.so.13' "$scratch/have" >"$scratch/funcs" || true
if unversioned=$(grep -v '@@libcudart\.so\.13$' "$scratch/funcs"); then
  echo "FAIL: exports without the libcudart.so.13 version:"; sed -n 1,20p <<<"$unversioned"; fail=1
fi
sed 's/@@libcudart\.so\.13$//' "$scratch/funcs" | sort -u >"$scratch/names"
extra=$(comm -13 "$scratch/want" "$scratch/names")
missing=$(comm -23 "$scratch/want" "$scratch/names")
if [[ -n $extra ]]; then
  echo "FAIL: $(wc -l <<<"$extra") exports the real libcudart.so.13 does not have, e.g.:"
  sed -n 1,20p <<<"$extra"; fail=1
fi
if [[ -n $missing ]]; then
  echo "FAIL: $(wc -l <<<"$missing") real libcudart.so.13 exports missing, e.g.:"
  sed -n 1,20p <<<"$missing"; fail=1
fi
grep -q -x 'libcudart.so.13' "$scratch/have" || { echo "FAIL: no version node libcudart.so.13"; fail=1; }
for sym in 'cudaMalloc@@libcudart.so.13' '__cudaRegisterFatBinary@@libcudart.so.13' \
           '__cudaLaunchKernel@@libcudart.so.13' 'cudaLaunchKernel_ptsz@@libcudart.so.13'; do
  grep -q -x -F "$sym" "$scratch/have" || { echo "FAIL: $sym not exported"; fail=1; }
done
# Implemented calls must be gpool's strong definitions (T), not the weak stubs (W).
for sym in cudaMalloc __cudaRegisterFatBinary __cudaInitModule cudaLaunchKernel; do
  grep -q -E " T ${sym}@@libcudart\.so\.13\$" "$scratch/nm" ||
    { echo "FAIL: $sym is not a strong (T) export: $(grep -E " ${sym}@@" "$scratch/nm" || true)"; fail=1; }
done
((fail == 0)) || exit 1
echo "PASS cudart_exports: $(wc -l <"$scratch/names") functions, all and only the real libcudart.so.13's, versioned"
