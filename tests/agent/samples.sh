# Shared by the agent tests that run CUDA samples through the agents' GPU servers (pool_test.sh,
# serve_gpus_test.sh). Source it after lib.sh, with GPOOL set to the gpool binary's full path
# and TMP to the scratch folder. Sets `build` (the build tree) and PRE; `need_built NAME FILE...`
# exits 77 (CTest: skipped) naming the first FILE missing; fail() also prints the GPU servers'
# and the tasks' logs.
build=$(dirname "$(dirname "$GPOOL")")
need_built() {
  local name=$1 f; shift
  for f in "$@"; do
    if [ ! -e "$f" ]; then
      echo "$name: SKIP: $f is not built (the CUDA samples need nvcc)"
      exit 77
    fi
  done
}
# GPOOL_SAMPLE_PRELOAD (a sanitizer tree's CTest sets it to libasan.so): preloaded into the CUDA
# samples only, which load the instrumented client runtime (ASan must come first).
PRE=()
[ -z "${GPOOL_SAMPLE_PRELOAD:-}" ] || PRE=(env "LD_PRELOAD=$GPOOL_SAMPLE_PRELOAD")
fail() {  # lib.sh's, plus the GPU servers' and the tasks' logs
  echo "FAIL: $*" >&2
  for f in "$TMP"/*.log "$TMP"/*/gpu-server.err "$TMP"/*/*.0.err; do
    [ -e "$f" ] && { echo "--- $f" >&2; tail -n 40 "$f" >&2; }
  done
  exit 1
}
