#!/usr/bin/env bash
# CTest for remote_bench --interleaved's --pin and --aa (bench/remote_bench.cc parses them;
# bench/remote_bench/pinning.cc pins), the two flags the issue-4 copy measurement relies on to
# tell real misses from this host's noise:
#  1. bad --pin=A,B values are refused with exit 2 and a message naming the flag; a driver flag
#     without --interleaved is refused too, and --help prints the usage; so are bad values of the
#     interception layers' flags (--clients without --gpool/--kernels, --size, --sgemm);
#  2. one short pinned run with --aa (one TCP 64 KiB h2d cell, one repetition of 0.01 s): the
#     header reads back the client on CPU A and every spawned process on CPU B, the bench's own
#     check finds every thread (client, servers, session worker) on its CPU, and the A/A contender
#     and its summary line are printed. With fewer than 2 usable CPUs the run must say it is
#     unpinned instead. Timing figures are not checked (they mean nothing on a shared host).
#   tests/remote/remote_bench_flags_test.sh PATH/TO/bin/gpool PATH/TO/remote_bench
set -euo pipefail
bench=${2:?usage: remote_bench_flags_test.sh GPOOL_BIN REMOTE_BENCH}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "remote_bench_flags_test: FAIL: $*"; exit 1; }

# 1. Refused values: the same CPU twice, not a number, one CPU only, a CPU no process can use.
for bad in --pin=0,0 --pin=0,x --pin=3 --pin=0,100000; do
  rc=0
  "$bench" --interleaved "$bad" --only=tcp --skip=lat,bw >"$tmp/out" 2>"$tmp/err" || rc=$?
  if [[ $bad == --pin=0,100000 && $(nproc) -lt 2 ]]; then
    continue  # unpinned there (case 2), so the CPU is never checked
  fi
  [[ $rc == 2 ]] || { cat "$tmp/out" "$tmp/err"; fail "$bad: exit $rc, want 2"; }
  grep -q -e "--pin" "$tmp/err" || { cat "$tmp/err"; fail "$bad: the error does not name --pin"; }
done

# 1b. A driver flag without --interleaved is refused (Google Benchmark's runner would ignore it),
#     and --help answers at once, before any server starts.
rc=0
"$bench" --pin --benchmark_filter=none >"$tmp/out" 2>"$tmp/err" || rc=$?
[[ $rc == 2 ]] || { cat "$tmp/out" "$tmp/err"; fail "--pin without --interleaved: exit $rc, want 2"; }
grep -q -e "--pin is a flag of the --interleaved driver" "$tmp/err" || { cat "$tmp/err"; fail "the refusal does not name --pin"; }
timeout 20 "$bench" --help >"$tmp/out" 2>&1 || { cat "$tmp/out"; fail "--help failed"; }
grep -q -e "--interleaved \[--pin" "$tmp/out" || { cat "$tmp/out"; fail "--help does not show the driver's usage"; }

# 1c. The interception layers' flags (bench/driver_layer.sh gives them): --clients without the
#     gpool CLI and the kernel plugin, a size list with a bad item and a bad SGEMM size are
#     refused with exit 2 and a message naming the flag, before any server starts.
for bad in "--clients=/nonexistent" "--size=65536,x" "--size=0" "--sgemm=0"; do
  rc=0
  "$bench" --interleaved "$bad" --only=tcp --skip=lat,bw >"$tmp/out" 2>"$tmp/err" || rc=$?
  [[ $rc == 2 ]] || { cat "$tmp/out" "$tmp/err"; fail "$bad: exit $rc, want 2"; }
  grep -q -e "${bad%%=*}" "$tmp/err" || { cat "$tmp/err"; fail "$bad: the error does not name ${bad%%=*}"; }
done

# 2. A short pinned run with the A/A contender, on the first two CPUs this process may use.
read -r a b _ < <(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))') || true
args=(--interleaved --aa --reps=1 --min-time=0.01 --only=tcp --skip=lat,d2h --size=65536)
if [[ -n ${b:-} ]]; then
  args+=("--pin=$a,$b")
else
  args+=(--pin)
fi
if ! timeout 50 "$bench" "${args[@]}" >"$tmp/run" 2>&1; then
  cat "$tmp/run"; fail "remote_bench ${args[*]} failed"
fi
cat "$tmp/run"
if [[ -n ${b:-} ]]; then
  want=("pinned: client on CPU $a, spawned processes on CPU $b (read back: client $a, gpu-server tcp $b, echo tcp $b, plain tcp echo $b)"
        "pinning held: ")
  grep -q "pinning NOT held" "$tmp/run" && fail "a thread is off its CPU"
  # It counted the client's threads (main, link pump) and the spawned processes' (three servers'
  # main threads, the echo's connection thread, the gpu-server's session worker).
  counts=$(sed -n 's/.*pinning held: \([0-9]*\) client threads on CPU [0-9]*, \([0-9]*\) threads.*/\1 \2/p' "$tmp/run")
  read -r nc ns <<<"$counts" || true
  ((${nc:-0} >= 2 && ${ns:-0} >= 5)) || fail "the pinning check counted too few threads: '$counts'"
else
  want=("pinned: no (--pin needs 2 CPUs")
fi
want+=("raw again (A/A), copy's size"
       "A/A calibration: "
       "of 1 cells >= 0.95 (the method's own false-miss rate on this host): [tcp h2d 64K "
       "copies through a session / raw, buffers of the copy's size (target >= 0.95): ")
for w in "${want[@]}"; do
  grep -q -F -- "$w" "$tmp/run" || fail "missing from the output: $w"
done
echo "remote_bench_flags_test: PASS"
