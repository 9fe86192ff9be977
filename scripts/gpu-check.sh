#!/usr/bin/env bash
# Real-GPU check of gpool's CUDA remoting (docs/remoting.md, "Checking on a real GPU").
#
# On a machine with an NVIDIA GPU: builds the samples in examples/cuda (nvcc, for the GPU's own
# arch; GPOOL_ARCH=sm_XX overrides), runs each natively (the real libcudart.so.13) and through
# gpool (a local `gpool gpu-server --backend cuda` over loopback TCP), compares their PASS lines,
# prints launch latency and copy bandwidth both ways, then checks compute shares: two sessions
# with leases of shares 0.75 and 0.25 run the same kernel loop (examples/cuda/share_loop.cu) at
# once on device 0 of a second server started with a lease key; it fails if the 0.75 session got
# under 60% of the kernels (no enforcement would give ~50%). Finally the node agent's NVML
# discovery (scripts/gpu-check-agent.sh). Every step runs under `timeout`, so one hang costs one
# step, not the machine's lease. Exits non-zero on any failure; the last line says PASS or FAIL.
#
# --emulated runs the same flow on a machine without a GPU: the servers use the emulated backend
# (the samples' CPU kernels), native runs are skipped, the share split is printed but not judged
# (CPU time on a loaded machine), and the cuda backend is loaded against the toolkit's stub
# libcuda.so, which holds the driver's full export list: every versioned symbol it resolves must
# be there, and cuInit must be what fails. CTest runs this mode (tests/remote/gpu_check_test.sh).
#
# --bundle OUT (on the build machine) copies bin/gpool, the client lib dir (lib/: gpool's
# libcuda.so.1 stand-in and NVIDIA's libcudart.so.13 that the build copied beside it, which
# `gpool run` gives the samples), the built samples and every non-system shared library they need
# into OUT, so that a GPU machine without gpool's
# build dependencies can run `scripts/gpu-check.sh --build OUT`.
#
#   scripts/gpu-check.sh [--emulated] [--build DIR] [--timeout SECONDS] [--budget SECONDS]
#                        [--share-seconds S] [--samples DIR] [--only SECTIONS] [--keep]
#                        [--no-agent] [BUILD_DIR]
#   scripts/gpu-check.sh --bundle OUT [--build DIR]
#
# --timeout (default 120) bounds each step, --budget (default 480, 8 minutes) the whole run: once
# it is spent the remaining steps fail at once, so a hung backend still ends with a summary inside
# a 540 s device call. --only takes a comma-separated subset of: samples, aggregate, driver, nccl,
# train, perf, shares, stub, agent (default: all). `driver` runs programs that reach gpool through
# its libcuda.so.1 stand-in instead: vector_add built the default way (NVIDIA's static runtime), a
# driver-API program (driver_api.cc), an expandable allocator's virtual memory management
# (vmm_alloc.cc) and, on a real GPU, a 4096 x 4096 cuBLAS SGEMM
# (cublas_sgemm.cu, 64 entries checked against the CPU) and a cuDNN convolution forward pass
# (cudnn_conv.cu, every output checked against the CPU), each natively and through gpool, their
# PASS lines compared. `train` runs a small training loop (mlp_train.cu: an MLP's forward and
# backward pass with cuBLAS GEMMs and custom kernels, gradients summed by an NCCL all-reduce, 100
# steps) natively and through gpool on one device, and through gpool on device 0 of two servers
# (two pooled GPUs; on one GPU the same GPU twice), printing each median step time through gpool
# against native as a "train:" line; --emulated runs its naive-GEMM variant on one device and on
# two servers (the all-reduce by gpool's libnccl.so.2).
# `nccl` runs NCCL (nccl_allreduce.cu, the toolkit's
# libnccl) over two pooled GPUs, device 0 of two servers (on one GPU: the same GPU twice):
# ncclCommInitAll with each communicator's checks on NVIDIA's NCCL (`gpool run --nccl native`),
# then an all-reduce natively over two devices when the machine has two (NCCL refuses two ranks
# on one GPU) and through gpool's libnccl.so.2 stand-in (`gpool run`'s default), and
# nccl_collectives.cu (every collective, checked on the host) through the stand-in. BUILD_DIR (default: build) holds bin/gpool and lib/ (libcuda.so.1, libcudart.so.13), and
# optionally deps/ (a bundle's libraries) and tests/remote/ (the CMake-built samples and emulated
# kernels). Environment: CUDA_HOME (default /usr/local/cuda), GPOOL_ARCH,
# GPOOL_CHECK_PRELOAD (LD_PRELOAD for the sample programs run through gpool, e.g. the ASan
# runtime when BUILD_DIR is a sanitizer build), CUDA_VISIBLE_DEVICES (honoured by both sides).
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build
emulated=0
step_timeout=120
total_budget=480
share_secs=
samples_dir=
keep=0
agent=1
bundle_out=
only=
usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-2}"; }
while (($#)); do
  case $1 in
    --emulated) emulated=1 ;;
    --build) build=${2:?--build DIR}; shift ;;
    --timeout) step_timeout=${2:?--timeout SECONDS}; shift ;;
    --budget) total_budget=${2:?--budget SECONDS}; shift ;;
    --share-seconds) share_secs=${2:?--share-seconds S}; shift ;;
    --samples) samples_dir=${2:?--samples DIR}; shift ;;
    --bundle) bundle_out=${2:?--bundle OUT}; shift ;;
    --only) only=${2:?--only SECTIONS}; shift ;;
    --keep) keep=1 ;;
    --no-agent) agent=0 ;;
    -h|--help) usage 0 ;;
    -*) echo "gpu-check: unknown option $1" >&2; usage ;;
    *) build=$1 ;;
  esac
  shift
done
[[ $step_timeout =~ ^[0-9]+$ && $step_timeout -gt 0 ]] || { echo "gpu-check: --timeout wants seconds" >&2; exit 2; }
[[ $total_budget =~ ^[0-9]+$ && $total_budget -gt 0 ]] || { echo "gpu-check: --budget wants seconds" >&2; exit 2; }
# Each step gets --timeout, but never past the whole run's --budget: once that is spent every
# remaining step gets 1 s (and fails), so the summary still prints inside a lease's time.
limit() { local left=$((total_budget - SECONDS)); ((left < 1)) && left=1; echo $((left < step_timeout ? left : step_timeout)); }
build=$(cd "$build" 2>/dev/null && pwd) || { echo "gpu-check: build dir missing" >&2; exit 2; }
cuda_home=${CUDA_HOME:-/usr/local/cuda}
nvcc=$cuda_home/bin/nvcc
gpool=$build/bin/gpool
gpool_full=$build/libexec/gpool-full  # what bin/gpool execs for all but the client commands (docs/cli.md)
lib=$build/lib
deps=$build/deps
samples=(vector_add struct_param streams_events memcpy_sizes symbols multi_device error_paths
         noop_launch share_loop per_thread_stream copies_2d copies_3d api_coverage runtime_calls
         module_reload)
# Programs that reach gpool through the driver stand-in (the `driver` section), as
# tests/remote/CMakeLists.txt names them.
driver_samples=(vector_add_static driver_api driver_kernels.fatbin cublas_sgemm cudnn_conv mlp_train
                nccl_allreduce vmm_alloc graph_capture)
# The kernel library module_reload dlopen()s, built beside the samples.
reload_lib=libreload_kernels.so
# nvcc flags beyond the common ones, per sample (as tests/remote/CMakeLists.txt builds them).
sample_flags() {
  case $1 in
    per_thread_stream) echo "--default-stream per-thread" ;;
    module_reload|error_paths|api_coverage) echo "-ldl" ;;  # dlopen, dladdr (common.h)
  esac
}
die() { echo "gpu-check: $*" >&2; echo "gpu-check: FAIL"; exit 1; }
want() { [[ -z $only || ,$only, == *,$1,* ]]; }

# ---- --bundle: carry a build to a GPU machine that lacks gpool's build dependencies ----
if [[ -n $bundle_out ]]; then
  [[ -x $gpool && -x $gpool_full && -f $lib/libcudart.so.13 && -f $lib/libcuda.so.1 ]] ||
    die "$build lacks bin/gpool, libexec/gpool-full, lib/libcudart.so.13 or lib/libcuda.so.1"
  # Replaces only an earlier bundle (marked), never some other folder given by mistake.
  if [[ -e $bundle_out && ! -f $bundle_out/.gpool-bundle && -n $(ls -A "$bundle_out" 2>/dev/null) ]]; then
    die "$bundle_out exists and is not a gpool bundle: give a new folder"
  fi
  rm -rf "$bundle_out" && mkdir -p "$bundle_out"/{bin,libexec,lib,deps,deps-cxx,tests/remote/cuda} || die "cannot create $bundle_out"
  touch "$bundle_out/.gpool-bundle"
  cp "$gpool" "$bundle_out/bin/" && cp "$gpool_full" "$bundle_out/libexec/" &&
    cp "$lib/libcudart.so.13" "$bundle_out/lib/" || die "copy failed"
  # The driver and NVML stand-ins (the driver and nccl steps), when built.
  for so in libcuda.so.1 libnvidia-ml.so.1; do
    [[ -f $lib/$so ]] && { cp "$lib/$so" "$bundle_out/lib/" || die "copy failed"; }
  done
  # The NCCL stand-in in its own folder, as `gpool run` looks for it (lib/nccl/).
  if [[ -f $lib/nccl/libnccl.so.2 ]]; then
    mkdir -p "$bundle_out/lib/nccl" && cp "$lib/nccl/libnccl.so.2" "$bundle_out/lib/nccl/" || die "copy failed"
  fi
  # Everything ldd resolves except the C/C++ runtime, which the target's (newer) system provides;
  # a bundled older libstdc++ would shadow the target's for the nvcc-built samples.
  for f in "$gpool" "$gpool_full" "$lib/libcudart.so.13" "$lib/libcuda.so.1"; do
    [[ -f $f ]] || continue
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
  done | sort -u | while read -r so; do
    case $(basename "$so") in
      libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*) ;;
      libstdc++.so*|libgcc_s.so*) cp -L "$so" "$bundle_out/deps-cxx/" ;;  # used only if needed
      *) cp -L "$so" "$bundle_out/deps/" ;;
    esac
  done
  # The CMake-built samples (sm_90) and the emulated kernels, in the build tree's layout, so that
  # the bundle also runs --emulated and a GPU machine without nvcc still has samples.
  for s in "${samples[@]}" "$reload_lib" "${driver_samples[@]}"; do
    [[ -f $build/tests/remote/cuda/$s ]] && cp "$build/tests/remote/cuda/$s" "$bundle_out/tests/remote/cuda/"
  done
  plugin=$build/tests/remote/libgpool_example_kernels.so
  [[ -f $plugin ]] && cp "$plugin" "$bundle_out/tests/remote/"
  echo "gpu-check: bundle in $bundle_out ($(du -sh "$bundle_out" | cut -f1), $(ls "$bundle_out/deps" | wc -l) libraries, $(ls "$bundle_out/tests/remote/cuda" | wc -l) samples)"
  exit 0
fi

work=$(mktemp -d /tmp/gpool-gpu-check.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  if ((keep)); then echo "gpu-check: scratch kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

passed=0 failed=0 noted=0
failures=()
pass() { echo "PASS $*"; passed=$((passed + 1)); }
fail() { echo "FAIL $*"; failed=$((failed + 1)); failures+=("${1%%:*}"); }
note() { echo "NOTE $*"; noted=$((noted + 1)); }
# run_step SECONDS OUTFILE CMD...: stdout+stderr to OUTFILE; rc 124 means it timed out.
run_step() {
  local t=$1 out=$2; shift 2
  timeout --kill-after=5 "$t" "$@" >"$out" 2>&1
}
timed_out() { [[ $1 == 124 || $1 == 137 ]]; }

# ---- environment: which libcuda, which libcudart each side loads ----
echo "== preflight ($( ((emulated)) && echo "emulated: no GPU" || echo "real GPU"))"
# Containers often mount the driver under /usr/local/nvidia without a loader path to it; NVML
# (the agent) and libcuda (the server) must be found there too. Appended: never shadows the system.
if ! grep -q 'libcuda\.so\.1' <<<"$(ldconfig -p 2>/dev/null)" && [[ -e /usr/local/nvidia/lib64/libcuda.so.1 ]]; then
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/nvidia/lib64
  echo "libcuda.so.1: /usr/local/nvidia/lib64 (added to LD_LIBRARY_PATH)"
fi
base_ld=${LD_LIBRARY_PATH:-}
# gpool and its client runtime: the bundle's libraries first, if this is a bundle.
gpool_ld=$base_ld
[[ -d $deps ]] && gpool_ld=$deps${base_ld:+:$base_ld}
[[ -x $gpool ]] || die "$gpool missing: build it (cmake --build build --target gpool gpool_driver gpool_nvidia_cudart) or give --build"
[[ -f $lib/libcuda.so.1 ]] || die "$lib/libcuda.so.1 missing: build target gpool_driver"
[[ -f $lib/libcudart.so.13 ]] || die "$lib/libcudart.so.13 missing: build target gpool_nvidia_cudart (it copies NVIDIA's from the toolkit)"
if ! LD_LIBRARY_PATH=$gpool_ld "$gpool" --help >"$work/gpool-help" 2>&1 && [[ -d $build/deps-cxx ]] &&
   grep -q 'GLIBCXX\|CXXABI' "$work/gpool-help"; then
  gpool_ld=$build/deps-cxx:$gpool_ld   # this system's libstdc++ is older than the build machine's
  echo "libstdc++: the bundle's ($build/deps-cxx), the system's is too old"
fi
if ! LD_LIBRARY_PATH=$gpool_ld "$gpool" --help >"$work/gpool-help" 2>&1; then
  LD_LIBRARY_PATH=$gpool_ld ldd "$gpool" "$gpool_full" | grep 'not found'
  cat "$work/gpool-help"
  die "$gpool does not run here (missing libraries above: make a bundle with --bundle on the build machine)"
fi
echo "gpool: $gpool"
gpoolc() { LD_LIBRARY_PATH=$gpool_ld "$gpool" "$@"; }

ngpu=1
if ((emulated)); then
  plugin=$build/tests/remote/libgpool_example_kernels.so
  [[ -f $plugin ]] || die "$plugin missing: build target gpool_example_kernels"
  backend=(--backend emulated --emulated-kernels "$plugin")
  share_secs=${share_secs:-2}
  copy_max=4194304 launches=20000
else
  command -v nvidia-smi >/dev/null || die "nvidia-smi not found: this mode needs an NVIDIA GPU (--emulated runs without one)"
  run_step 30 "$work/smi" nvidia-smi -L || { cat "$work/smi"; die "nvidia-smi -L failed: no GPU visible"; }
  sed 's/^/  /' "$work/smi"
  nvidia-smi --query-gpu=driver_version,compute_cap,memory.total --format=csv,noheader | sed 's/^/  driver, compute capability, memory: /'
  ngpu=$(grep -c '^GPU ' "$work/smi")
  if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
    ngpu=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
    echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES: $ngpu device(s) for both native and gpool"
  fi
  ((ngpu > 0)) || die "no GPU visible"
  if [[ -z ${GPOOL_ARCH:-} ]]; then
    cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | sed -n 1p | tr -d ' .')
    GPOOL_ARCH=sm_${cc:-90}
  fi
  backend=(--backend cuda)
  share_secs=${share_secs:-10}
  copy_max=268435456 launches=200000
fi

# ---- samples: compile in the background while the server starts ----
if [[ -z $samples_dir ]]; then
  if ((emulated)) && [[ -x $build/tests/remote/cuda/share_loop ]]; then
    samples_dir=$build/tests/remote/cuda          # the CMake-built ones (sm_90, never run natively)
  elif [[ -x $nvcc ]]; then
    samples_dir=$work/samples                     # built here for this GPU's arch
  elif [[ -x $build/tests/remote/cuda/share_loop ]]; then
    samples_dir=$build/tests/remote/cuda          # built elsewhere for sm_90 (a bundle's)
  else
    die "no nvcc at $nvcc (set CUDA_HOME) and no prebuilt samples (--samples DIR)"
  fi
fi
compile_pid=
if [[ $samples_dir == "$work/samples" ]]; then
  mkdir -p "$samples_dir"
  echo "samples: nvcc $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') -arch=${GPOOL_ARCH:-sm_90}, building in the background"
  (
    rc=0
    for s in "${samples[@]}"; do
      # shellcheck disable=SC2046
      timeout 300 "$nvcc" -cudart shared -arch="${GPOOL_ARCH:-sm_90}" -O2 $(sample_flags "$s") \
        -o "$samples_dir/$s" "$here/examples/cuda/$s.cu" >"$work/nvcc-$s.log" 2>&1 &
    done
    timeout 300 "$nvcc" -cudart shared -arch="${GPOOL_ARCH:-sm_90}" -O2 -shared -Xcompiler -fPIC \
      -o "$samples_dir/$reload_lib" "$here/examples/cuda/reload_kernels.cu" >"$work/nvcc-$reload_lib.log" 2>&1 &
    for _ in "${samples[@]}" "$reload_lib"; do wait -n || rc=1; done
    exit $rc
  ) &
  compile_pid=$!
else
  echo "samples: prebuilt in $samples_dir"
fi

# Programs over the driver stand-in (the driver and train sections), plain nvcc builds (NVIDIA's
# static runtime): compiled in parallel in the background with the samples, for this GPU's arch,
# when there is a GPU and nvcc; otherwise (and where nvcc fails) the CMake-built ones (sm_90).
ddir=$work/driver
mkdir -p "$ddir"
dbuild() {  # NAME NVCC-ARGS...: $ddir/NAME, or the prebuilt one
  local name=$1; shift
  if [[ -x $nvcc ]] && ((!emulated)); then
    timeout 300 "$nvcc" -arch="${GPOOL_ARCH:-sm_90}" -O2 -o "$ddir/$name" "$@" >"$work/nvcc-$name.log" 2>&1 &&
      return 0
  fi
  [[ -x $build/tests/remote/cuda/$name ]] && cp "$build/tests/remote/cuda/$name" "$ddir/"
}
dbuild_pids=()
if want driver || want train; then
  ex=$here/examples/cuda
  dbuild vector_add_static "$ex/vector_add.cu" & dbuild_pids+=($!)
  dbuild graph_capture "$ex/graph_capture.cu" & dbuild_pids+=($!)
  dbuild driver_api -cudart none "$ex/driver_api.cc" -L"$cuda_home/lib64/stubs" -lcuda & dbuild_pids+=($!)
  dbuild vmm_alloc -cudart none "$ex/vmm_alloc.cc" -L"$cuda_home/lib64/stubs" -lcuda & dbuild_pids+=($!)
  dbuild cublas_sgemm "$ex/cublas_sgemm.cu" -lcublas & dbuild_pids+=($!)
  dbuild cudnn_conv "$ex/cudnn_conv.cu" -lcudnn & dbuild_pids+=($!)
  dbuild mlp_train "$ex/mlp_train.cu" -lcublas -lnccl & dbuild_pids+=($!)
  # driver_api's module: driver_kernels.cu as a fatbin, which it loads with cuModuleLoadData.
  if [[ -x $nvcc ]] && ((!emulated)); then
    timeout 300 "$nvcc" -fatbin -arch="${GPOOL_ARCH:-sm_90}" -o "$ddir/driver_kernels.fatbin" \
      "$ex/driver_kernels.cu" >"$work/nvcc-driver_kernels.fatbin.log" 2>&1 & dbuild_pids+=($!)
  elif [[ -f $build/tests/remote/cuda/driver_kernels.fatbin ]]; then
    cp "$build/tests/remote/cuda/driver_kernels.fatbin" "$ddir/"
  fi
fi
# Waits for those builds (by pid: a bare `wait` would wait for the servers too).
dbuild_wait() { for p in "${dbuild_pids[@]}"; do wait "$p"; done; dbuild_pids=(); }
# Why a driver program is missing: its nvcc log's tail, when nvcc ran.
dbuild_why() { [[ -f $work/nvcc-$1.log ]] && sed 's/^/   nvcc: /' "$work/nvcc-$1.log" | tail -5; }
# NVIDIA's libraries (cuBLAS, cuDNN, NCCL) for those programs: the toolkit's folder, after
# gpool's (which `gpool run` puts first) or after the native runtime's.
lib_ld=${gpool_ld:+$gpool_ld:}$cuda_home/lib64
# The shared libraries a built program needs and this machine lacks (a GPU machine's toolkit may
# have no cuDNN or NCCL; the bundle cannot carry them): such a step is SKIPPED, not failed.
# (libcuda.so.1 is not among them: gpool's stand-in or the driver provides it.)
missing_libs() {
  LD_LIBRARY_PATH=$lib_ld ldd "$1" 2>/dev/null |
    awk '$3 == "not" && $1 ~ /^lib(cublas|cublasLt|cudnn|nccl)\./ { printf "%s%s", sep, $1; sep = ", " }'
}

# Servers: the cuda (or emulated) one for the samples, a keyed one for the share check.
start_server() {  # NAME ARGS...: sets $addr
  local name=$1; shift
  LD_LIBRARY_PATH=$gpool_ld "$gpool" --log-level info gpu-server "${backend[@]}" --listen 127.0.0.1:0 "$@" \
    >"$work/$name.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  addr=
  # Every later step needs the server: its start is bounded by --timeout, never cut short by a
  # spent --budget (SECONDS counts whole seconds, so SECONDS + 1 left anywhere from 0 to 1 s).
  local deadline=$((SECONDS + step_timeout))
  while ((SECONDS < deadline)) && kill -0 "$pid" 2>/dev/null; do
    addr=$(sed -n 's/.*listening on \([^ ]*\) .*/\1/p' "$work/$name.log" 2>/dev/null)
    [[ -n $addr ]] && return 0
    sleep 0.1
  done
  cat "$work/$name.log"
  die "$name server did not start"
}
start_server server --insecure --session-mem-limit 8GiB
server_addr=$addr
devices=$addr/0
for ((i = 1; i < ngpu; i++)); do devices+=",$addr/$i"; done
echo "server: ${backend[*]} at $addr, devices $devices"

if [[ -n $compile_pid ]]; then
  if ! wait "$compile_pid"; then
    for s in "${samples[@]}"; do [[ -x $samples_dir/$s ]] || { echo "-- nvcc $s.cu:"; tail -20 "$work/nvcc-$s.log"; }; done
    [[ -f $samples_dir/$reload_lib ]] || { echo "-- nvcc reload_kernels.cu:"; tail -20 "$work/nvcc-$reload_lib.log"; }
    die "building the samples failed"
  fi
fi
for s in "${samples[@]}"; do [[ -x $samples_dir/$s ]] || die "sample $samples_dir/$s missing"; done
[[ -f $samples_dir/$reload_lib ]] || die "kernel library $samples_dir/$reload_lib missing"

# The real runtime for native runs: the toolkit's, put first (a program built with -cudart shared
# finds libcudart.so.13 through the loader path only: nvcc sets no rpath).
native_ld=$base_ld
for d in "$cuda_home/lib64" "$cuda_home/targets/x86_64-linux/lib"; do
  if [[ -e $d/libcudart.so.13 ]]; then native_ld=$d${base_ld:+:$base_ld}; break; fi
done
resolved() { LD_LIBRARY_PATH=$1 ldd "$2" 2>/dev/null | awk '$1 == "libcudart.so.13" { print $3 }'; }
gpool_rt=$(resolved "$lib${gpool_ld:+:$gpool_ld}" "$samples_dir/vector_add")
if ! ldd "$samples_dir/vector_add" >/dev/null 2>&1; then
  note "runtime: $samples_dir/vector_add is not a dynamic executable: which libcudart loads is not checked"
elif [[ $(readlink -f "$gpool_rt") == $(readlink -f "$lib/libcudart.so.13") ]]; then
  pass "runtime through gpool run: $gpool_rt (NVIDIA's, copied by the build, over gpool's libcuda.so.1)"
else
  fail "runtime-gpool: through gpool run a sample would load '$gpool_rt', not $lib/libcudart.so.13"
fi
if ((!emulated)); then
  native_rt=$(resolved "$native_ld" "$samples_dir/vector_add")
  if [[ -n $native_rt && $(readlink -f "$native_rt") != $(readlink -f "$lib/libcudart.so.13") ]]; then
    pass "runtime natively: $native_rt"
  else
    fail "runtime-native: natively a sample would load '${native_rt:-nothing}' (want the toolkit's libcudart.so.13; set CUDA_HOME)"
  fi
fi

# Through gpool: `gpool run` puts $lib first on the loader path itself.
remote_run() {  # OUT SAMPLE ARGS...
  local out=$1 s=$2; shift 2
  LD_LIBRARY_PATH=$gpool_ld LD_PRELOAD=${GPOOL_CHECK_PRELOAD:-} GPOOL_DEVICES=$devices \
    timeout --kill-after=5 "$(limit)" "$gpool" run -- "$samples_dir/$s" "$@" >"$out" 2>&1
}
native_run() {  # OUT SAMPLE ARGS...
  local out=$1 s=$2; shift 2
  LD_LIBRARY_PATH=$native_ld timeout --kill-after=5 "$(limit)" "$samples_dir/$s" "$@" >"$out" 2>&1
}
# Measured numbers differ between runs; the rest of a PASS line must match.
strip() { grep '^PASS' "$1" | sed -E 's/ *(elapsed_ms|launches_per_s|seconds|kernels_per_s|kernels)=[0-9.]+//g'; }
show_tail() { sed "s/^/   $2: /" "$1" | tail -8; }

if want samples; then
echo "== samples: native vs gpool (timeout ${step_timeout}s each)"
# Each entry: expectation, sample and arguments. same: both must PASS with equal lines.
# gpool: only gpool's outcome is judged (where gpool is stricter than a real GPU, see below).
runs=("same vector_add 1048576" "same struct_param" "same streams_events" "same memcpy_sizes $copy_max"
      "same symbols" "same multi_device 1" "gpool error_paths bad-pointer" "gpool error_paths unsupported" "same error_paths dynamic-shared"
      "gpool error_paths oom" "gpool error_paths launch-fail" "same noop_launch $launches"
      "same per_thread_stream" "gpool error_paths config" "same copies_2d" "same copies_3d" "same api_coverage" "same runtime_calls"
      "gpool module_reload $samples_dir/$reload_lib 3")
for r in "${runs[@]}"; do
  read -r expect name args <<<"$r"
  # shellcheck disable=SC2086
  remote_run "$work/remote.out" "$name" $args; rrc=$?
  label="$name${args:+ $args}"
  if timed_out $rrc; then fail "$label: gpool run timed out (step limit ${step_timeout}s, run budget ${total_budget}s)"; show_tail "$work/remote.out" gpool; continue; fi
  remote=$(strip "$work/remote.out")
  if ((emulated)); then
    if [[ $rrc == 0 && -n $remote ]]; then pass "$label (gpool, emulated): $remote"
    elif [[ $label == "error_paths launch-fail" ]]; then fail "$label: the emulated fault was not reported"; show_tail "$work/remote.out" gpool
    else fail "$label (gpool, emulated): exit $rrc"; show_tail "$work/remote.out" gpool; fi
    continue
  fi
  case $label in
    "error_paths launch-fail")
      # alwaysFails writes to a valid pointer: a real GPU runs it without fault, so neither side
      # reports the launch failure that the emulated server fakes. Informational only.
      native_run "$work/native.out" "$name" $args
      note "$label: native exit $?, gpool exit $rrc (a real GPU does not fault here; only the emulated server fakes the fault)"
      continue ;;
    "error_paths oom")
      # 64 GiB over the 8 GiB session limit: gpool refuses; a 141 GB GPU natively would not.
      if [[ $rrc == 0 && -n $remote ]]; then pass "$label (gpool, session limit 8 GiB): $remote"
      else fail "$label: gpool exit $rrc"; show_tail "$work/remote.out" gpool; fi
      continue ;;
  esac
  native_run "$work/native.out" "$name" $args; nrc=$?
  native=$(strip "$work/native.out")
  if [[ $expect == gpool ]]; then
    # bad-pointer: a copy past the end of a 16-byte allocation. CUDA itself does not check
    # sub-allocation bounds (native exit is informational); gpool refuses it on both backends.
    # unsupported: managed memory and child graph nodes work natively; gpool refuses them loudly.
    # module_reload: a kernel library dlopen()ed and closed three times, then cudaDeviceReset;
    # it also checks that handles from before the reset are refused, which a real runtime need
    # not do cleanly (native exit is informational).
    # config: device limits and flags through the cuda backend (cuCtxSetLimit,
    # cuDevicePrimaryCtxSetFlags); host registration with mapping flags works natively, gpool
    # refuses it loudly.
    if [[ $rrc == 0 && -n $remote ]]; then pass "$label (gpool): $remote [native: exit $nrc${native:+, $native}]"
    else fail "$label: gpool exit $rrc"; show_tail "$work/remote.out" gpool; fi
    continue
  fi
  if timed_out $nrc; then fail "$label: native run timed out"; show_tail "$work/native.out" native; continue; fi
  if [[ $nrc == 0 && $rrc == 0 && -n $native && "$native" == "$remote" ]]; then
    pass "$label: $remote"
  else
    fail "$label: native exit $nrc '$native', gpool exit $rrc '$remote'"
    show_tail "$work/native.out" native
    show_tail "$work/remote.out" gpool
  fi
done

fi

if want aggregate; then
echo "== aggregation: device 0 of two servers as devices 0 and 1 of one program"
# Device pointers cross the wire untranslated, so the allocations of the two servers' workers
# must not overlap in address. Two processes of a real driver may well be handed the same device
# addresses (the emulated server's come from mmap, which ASLR spreads); the client then refuses
# the second one loudly ("overlaps memory of another device"). This step tells which it is.
start_server server2 --insecure --session-mem-limit 8GiB
devices="$server_addr/0,$addr/0" remote_run "$work/agg.out" multi_device 2
arc=$?
if timed_out $arc; then fail "aggregate: gpool run timed out"; show_tail "$work/agg.out" gpool
elif [[ $arc == 0 ]] && grep -q '^PASS multi_device devices=2' "$work/agg.out"; then
  pass "aggregate (two servers, one GPU each): $(grep '^PASS' "$work/agg.out")"
else
  fail "aggregate: exit $arc$(grep -q 'overlaps memory of another device' "$work/agg.out" && echo ': the two servers handed out overlapping device addresses')"
  show_tail "$work/agg.out" gpool
fi
fi

if want driver; then
echo "== driver API: programs over gpool's libcuda.so.1 stand-in, native vs gpool"
# Built in the background above (this GPU's arch), else the CMake-built ones (sm_90).
dbuild_wait
[[ -f $ddir/driver_kernels.fatbin ]] || dbuild_why driver_kernels.fatbin
# graph_capture: stream capture across two streams, a hand-built graph, 13 graph launches checked
# against the CPU, and a capture invalidated by a synchronous copy (the stand-in replays graphs
# from the client; its output must equal the native run's).
# vmm_alloc: virtual memory management as an expandable allocator uses it (reserve, map two
# chunks, a kernel over both, remap, alias), on the real driver's granularity.
druns=("vector_add_static 1048576" "driver_api $ddir/driver_kernels.fatbin"
       "vmm_alloc $ddir/driver_kernels.fatbin" "graph_capture")
# cuBLAS's and cuDNN's kernels have no CPU version for the emulated server to run: real GPU only
# (remote_driver_e2e_test checks on CPU that both reach the server as launches of their kernels).
# cublas_sgemm checks 64 sampled entries of C against a CPU reference; cudnn_conv every output.
if ((emulated)); then note "driver: cublas_sgemm 4096 and cudnn_conv skipped (the emulated server cannot run cuBLAS's or cuDNN's kernels)"
else druns+=("cublas_sgemm 4096" "cudnn_conv"); fi
for r in "${druns[@]}"; do
  read -r name args <<<"$r"
  if [[ ! -x $ddir/$name ]]; then
    fail "driver $name: not built (nvcc, or the CMake-built sample, missing)"; dbuild_why "$name"; continue
  fi
  miss=$(missing_libs "$ddir/$name")
  if [[ -n $miss ]]; then note "driver $name: SKIPPED, this machine has no $miss"; continue; fi
  # shellcheck disable=SC2086
  gpool_ld=$lib_ld samples_dir=$ddir remote_run "$work/remote.out" "$name" $args; rrc=$?
  remote=$(strip "$work/remote.out")
  if timed_out $rrc; then fail "driver $name: gpool run timed out"; show_tail "$work/remote.out" gpool; continue; fi
  if ((emulated)); then
    if [[ $rrc == 0 && -n $remote ]]; then pass "driver $name (gpool, emulated): $remote"
    else fail "driver $name (gpool, emulated): exit $rrc"; show_tail "$work/remote.out" gpool; fi
    continue
  fi
  # shellcheck disable=SC2086
  native_ld=${native_ld:+$native_ld:}$cuda_home/lib64 samples_dir=$ddir native_run "$work/native.out" "$name" $args; nrc=$?
  native=$(strip "$work/native.out")
  if [[ $nrc == 0 && $rrc == 0 && -n $native && "$native" == "$remote" ]]; then
    pass "driver $name: $remote"
  else
    fail "driver $name: native exit $nrc '$native', gpool exit $rrc '$remote'"
    show_tail "$work/native.out" native
    show_tail "$work/remote.out" gpool
  fi
done
fi

if want nccl; then
echo "== NCCL: init on NVIDIA's NCCL, collectives through gpool's libnccl.so.2, over two pooled GPUs"
# Device 0 of two servers (on a one-GPU machine both are the same GPU). NVIDIA's NCCL (`--nccl
# native`) sees two GPUs with distinct bus ids through gpool's NVML stand-in and connects them
# over its socket transport; its collectives cannot run on pooled GPUs (docs/remoting/nccl.md, "NVML
# and NCCL"), so they run through gpool's stand-in (`gpool run`'s default), which relays each
# collective through the client. Natively, over two devices when the machine has two.
ndir=$work/nccl
mkdir -p "$ndir"
for prog in nccl_allreduce nccl_collectives; do
  if [[ -x $nvcc ]] && ((!emulated)); then
    timeout 300 "$nvcc" -arch="${GPOOL_ARCH:-sm_90}" -O2 -o "$ndir/$prog" \
      "$here/examples/cuda/$prog.cu" -lnccl >"$work/nvcc-$prog.log" 2>&1 || tail -5 "$work/nvcc-$prog.log"
  fi
  [[ -x $ndir/$prog ]] || { [[ -x $build/tests/remote/cuda/$prog ]] &&
    cp "$build/tests/remote/cuda/$prog" "$ndir/"; }
done
if [[ ! -x $ndir/nccl_allreduce ]]; then
  note "nccl: SKIPPED, nccl_allreduce not built (the toolkit has no libnccl, or nvcc is missing)"
else
  start_server nccl2 --insecure --session-mem-limit 8GiB
  nccl_env=(NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN)
  # NVIDIA's NCCL from the toolkit: after gpool's folders, which `gpool run` puts first.
  nccl_ld=$cuda_home/lib64${gpool_ld:+:$gpool_ld}
  nccl_remote() {  # OUT NCCL(gpool|native) PROGRAM ARGS...
    local out=$1 mode=$2 prog=$3; shift 3
    env "${nccl_env[@]}" LD_LIBRARY_PATH=$nccl_ld LD_PRELOAD=${GPOOL_CHECK_PRELOAD:-} \
      GPOOL_DEVICES="$server_addr/0,$addr/0" timeout --kill-after=5 "$(limit)" "$gpool" run \
      --nccl "$mode" -- "$ndir/$prog" "$@" >"$out" 2>&1
  }
  nccl_native() {  # OUT ARGS...
    local out=$1; shift
    env "${nccl_env[@]}" LD_LIBRARY_PATH=$native_ld \
      timeout --kill-after=5 "$(limit)" "$ndir/nccl_allreduce" "$@" >"$out" 2>&1
  }
  nccl_remote "$work/nccl-init.out" native nccl_allreduce init; rc=$?
  if timed_out $rc; then fail "nccl init (NVIDIA's NCCL through gpool): timed out"; show_tail "$work/nccl-init.out" gpool
  elif [[ $rc == 0 ]] && grep -q '^PASS nccl_allreduce init devices=2' "$work/nccl-init.out"; then
    pass "nccl init (NVIDIA's NCCL through gpool, two servers): $(grep -c '^comm ' "$work/nccl-init.out") communicators checked, $(grep '^PASS' "$work/nccl-init.out")"
  else
    fail "nccl init (NVIDIA's NCCL through gpool): exit $rc"; show_tail "$work/nccl-init.out" gpool
  fi
  if ((!emulated)); then
    if ((ngpu >= 2)); then
      nccl_native "$work/nccl-native.out" 1048576; nrc=$?
      if [[ $nrc == 0 ]]; then pass "nccl all-reduce natively ($ngpu devices): $(grep '^PASS' "$work/nccl-native.out")"
      else fail "nccl all-reduce natively: exit $nrc"; show_tail "$work/nccl-native.out" native; fi
    else
      note "nccl: no native all-reduce to compare (one GPU: NCCL refuses two ranks on one GPU)"
    fi
  fi
  # The all-reduce through gpool's libnccl.so.2 (on the emulated server too: no NCCL kernel runs).
  nccl_remote "$work/nccl-ar.out" gpool nccl_allreduce 1048576; rrc=$?
  if timed_out $rrc; then fail "nccl all-reduce (gpool's libnccl.so.2, two servers): timed out"
    show_tail "$work/nccl-ar.out" gpool
  elif [[ $rrc == 0 ]] && grep -q '^PASS nccl_allreduce devices=2' "$work/nccl-ar.out"; then
    pass "nccl all-reduce (gpool's libnccl.so.2, two servers): $(grep '^PASS' "$work/nccl-ar.out")"
  else
    fail "nccl all-reduce (gpool's libnccl.so.2, two servers): exit $rrc"; show_tail "$work/nccl-ar.out" gpool
  fi
  if [[ -x $ndir/nccl_collectives ]]; then
    nccl_remote "$work/nccl-coll.out" gpool nccl_collectives all; crc=$?
    if [[ $crc == 0 ]] && grep -q '^PASS nccl_collectives all' "$work/nccl-coll.out"; then
      pass "nccl collectives (gpool's libnccl.so.2, two servers): $(grep '^PASS' "$work/nccl-coll.out")"
    else
      fail "nccl collectives (gpool's libnccl.so.2, two servers): exit $crc"; show_tail "$work/nccl-coll.out" gpool
    fi
  fi
fi
fi

if want train; then
echo "== training: an MLP with cuBLAS and custom kernels, gradients all-reduced by NCCL, 100 steps"
# examples/cuda/mlp_train.cu, a plain nvcc build (NVIDIA's static runtime, the toolkit's cuBLAS
# and NCCL). Each run judges itself (PASS: the loss fell under 80% of its first value and every
# replica's weights equal device 0's); native and gpool PASS lines are compared, and each run's
# median step time printed as a "train:" ratio line (gpool against native, same device count
# natively where the machine has it, else one device).
dbuild_wait
mlp=$ddir/mlp_train
if [[ ! -x $mlp ]] && ((emulated)); then
  note "train: SKIPPED, mlp_train not built (the toolkit has no libcublas or libnccl, or nvcc is missing)"
elif [[ ! -x $mlp ]]; then
  fail "train: mlp_train not built (nvcc, or the CMake-built sample, missing)"; dbuild_why mlp_train
elif [[ -n $(missing_libs "$mlp") ]]; then
  note "train: SKIPPED, this machine has no $(missing_libs "$mlp")"
else
  train_env=(NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN)
  train_remote() {  # OUT DEVICES SECONDS ARGS...
    local out=$1 devs=$2 secs=$3; shift 3
    env "${train_env[@]}" LD_LIBRARY_PATH=$lib_ld LD_PRELOAD=${GPOOL_CHECK_PRELOAD:-} GPOOL_DEVICES="$devs" \
      timeout --kill-after=5 "$secs" "$gpool" run -- "$mlp" "$@" >"$out" 2>&1
  }
  train_native() {  # OUT ARGS...
    local out=$1; shift
    env "${train_env[@]}" LD_LIBRARY_PATH=${native_ld:+$native_ld:}$cuda_home/lib64 \
      timeout --kill-after=5 "$(limit)" "$mlp" "$@" >"$out" 2>&1
  }
  median() { sed -n 's/^median_step_ms=\([0-9.]*\).*/\1/p' "$1"; }
  ratio() {  # LABEL GPOOL-OUT NATIVE-OUT
    awk -v l="$1" -v g="$(median "$2")" -v n="$(median "$3")" 'BEGIN {
      if (g > 0 && n > 0) printf "train: %s: median step gpool %.3f ms, native %.3f ms: %.2fx native\n", l, g, n, g / n
      else print "train: " l ": no median step time on one side" }'
  }
  # LABEL RC OUT [NATIVE-OUT]: PASS when the run passed (and its PASS line equals native's).
  train_judge() {
    local label=$1 rc=$2 out=$3 nout=${4:-} got want
    got=$(strip "$out")
    if timed_out "$rc"; then fail "$label: timed out"; show_tail "$out" "$label"; return 1; fi
    if [[ $rc != 0 || -z $got ]]; then fail "$label: exit $rc"; show_tail "$out" "$label"; return 1; fi
    if [[ -n $nout ]]; then
      want=$(strip "$nout")
      if [[ $want != "$got" ]]; then fail "$label: '$got', native '$want'"; show_tail "$nout" native; return 1; fi
    fi
    pass "$label: $(grep '^mlp_train: ' "$out" | sed 's/^mlp_train: //'), loss $(sed -n 's/^loss //p' "$out"), $got"
  }
  if ((emulated)); then
    # The naive GEMM kernel instead of cuBLAS (whose kernels have no CPU version), one device.
    train_remote "$work/train-g1.out" "$server_addr/0" "$(limit)" --naive-gemm --steps 100
    train_judge "train 1 device (gpool, emulated, naive GEMM)" $? "$work/train-g1.out" &&
      echo "train: median step gpool $(median "$work/train-g1.out") ms (emulated: not compared)"
    # Device 0 of two servers, the gradients all-reduced by gpool's libnccl.so.2.
    start_server train2 --insecure --session-mem-limit 8GiB
    train_remote "$work/train-g2.out" "$server_addr/0,$addr/0" "$(limit)" --naive-gemm --steps 100
    train_judge "train 2 pooled GPUs (gpool, emulated, naive GEMM, two servers)" $? "$work/train-g2.out" &&
      echo "train: 2 pooled GPUs: median step gpool $(median "$work/train-g2.out") ms (emulated: not compared)"
  else
    targs=(--steps 100 --batch 512 --in 256 --hidden 1024 --classes 16)
    train_native "$work/train-n1.out" "${targs[@]}" --devices 1
    train_judge "train natively (1 device)" $? "$work/train-n1.out"
    train_remote "$work/train-g1.out" "$server_addr/0" "$(limit)" "${targs[@]}"
    train_judge "train 1 device (gpool)" $? "$work/train-g1.out" "$work/train-n1.out" &&
      ratio "1 device" "$work/train-g1.out" "$work/train-n1.out"
    nref=$work/train-n1.out nlabel="native 1 GPU"
    if ((ngpu >= 2)); then
      train_native "$work/train-n2.out" "${targs[@]}" --devices 2
      train_judge "train natively (2 devices)" $? "$work/train-n2.out" && nref=$work/train-n2.out nlabel="native 2 GPUs"
    fi
    # Device 0 of two servers: on a one-GPU machine both replicas run on the same GPU; the
    # gradients are all-reduced by gpool's libnccl.so.2 (docs/remoting/nccl.md).
    start_server train2 --insecure --session-mem-limit 8GiB
    train_remote "$work/train-g2.out" "$server_addr/0,$addr/0" "$(limit)" "${targs[@]}"
    train_judge "train 2 pooled GPUs (gpool, two servers)" $? "$work/train-g2.out" "$nref" &&
      ratio "2 pooled GPUs vs $nlabel" "$work/train-g2.out" "$nref"
  fi
fi
fi

if want perf; then
echo "== latency and bandwidth"
rate() { sed -n 's/.*launches_per_s=\([0-9.]*\).*/\1/p' "$1"; }
remote_run "$work/remote.out" noop_launch "$launches"
gr=$(rate "$work/remote.out")
if ((!emulated)); then
  native_run "$work/native.out" noop_launch "$launches"
  nr=$(rate "$work/native.out")
else
  nr=
fi
awk -v n="${nr:-0}" -v g="${gr:-0}" 'BEGIN {
  if (n > 0) printf "latency: native %.0f launches/s (%.2f us each)\n", n, 1e6 / n
  if (g > 0) printf "latency: gpool  %.0f launches/s (%.2f us each)", g, 1e6 / g
  if (n > 0 && g > 0) printf ", %.2fx the native time per launch", n / g
  print "" }'
remote_run "$work/remote.out" memcpy_sizes "$copy_max"
((emulated)) || native_run "$work/native.out" memcpy_sizes "$copy_max"
for f in native remote; do
  [[ $f == native ]] && ((emulated)) && continue
  grep 'round trip' "$work/$f.out" | sed "s/^/bandwidth: $( [[ $f == native ]] && echo 'native' || echo 'gpool ') /"
done

fi

if want shares; then
echo "== compute shares: sessions with shares 0.75 and 0.25 on device 0, same kernel loop (${share_secs}s)"
if ((!emulated)); then
  native_run "$work/native.out" share_loop 3
  echo "native, alone: $(grep '^PASS' "$work/native.out")"
fi
# 32 random bytes in hex (od, not openssl: a GPU image need not have the openssl tool).
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$work/lease.key" || die "cannot make a lease key"
start_server share --key "$work/lease.key"
saddr=$addr
lease() { gpoolc lease issue --key "$work/lease.key" --gpu "$saddr/0" --share "$1" --ttl 10m; }
share_run() {  # OUT SHARE SECONDS
  local l
  l=$(lease "$2") || { echo "lease issue failed" >"$1"; return 1; }
  LD_LIBRARY_PATH=$gpool_ld LD_PRELOAD=${GPOOL_CHECK_PRELOAD:-} \
    timeout --kill-after=5 "$(($(limit) + $3))" "$gpool" run --devices "$saddr/0" --lease "$l" -- \
    "$samples_dir/share_loop" "$3" >"$1" 2>&1
}
share_run "$work/alone.out" 0.25 "$( ((emulated)) && echo 1 || echo 3)"
echo "gpool, alone with share 0.25 (a share is a floor: alone it runs at full speed): $(grep '^PASS' "$work/alone.out" || echo "exit $?")"
share_run "$work/big.out" 0.75 "$share_secs" & big=$!
share_run "$work/small.out" 0.25 "$share_secs" & small=$!
wait "$big"; brc=$?
wait "$small"; src=$?
kernels() { sed -n 's/^PASS share_loop kernels=\([0-9]*\).*/\1/p' "$1"; }
kb=$(kernels "$work/big.out"); ks=$(kernels "$work/small.out")
echo "share 0.75: $(grep '^PASS' "$work/big.out" || echo "exit $brc")"
echo "share 0.25: $(grep '^PASS' "$work/small.out" || echo "exit $src")"
grep "session .* ended" "$work/share.log" | sed 's/^/server: /'
if [[ -n $kb && -n $ks && $brc == 0 && $src == 0 ]]; then
  split=$(awk -v a="$kb" -v b="$ks" 'BEGIN { printf "%.3f", a / (a + b) }')
  if ((emulated)); then
    pass "shares: both sessions ran; achieved split $split of the kernels to the 0.75 session (not judged: CPU kernels on a shared machine)"
  elif awk -v s="$split" 'BEGIN { exit !(s >= 0.6) }'; then
    pass "shares: achieved split $split of the kernels to the 0.75 session (want 0.750, fail under 0.600)"
  else
    fail "shares: split $split of the kernels to the 0.75 session: not enforced (want 0.750)"
  fi
else
  fail "shares: a share_loop run did not finish (exit $brc and $src)"
  show_tail "$work/big.out" "0.75"
  show_tail "$work/small.out" "0.25"
fi

# The cuda backend against the toolkit's stub libcuda (no GPU needed): the stub exports every
# driver entry point, so all of cuda_driver.h's symbols must resolve and cuInit must be what
# fails. On a GPU machine the real run above already covered this.
fi

if ((emulated)) && want stub; then
  echo "== cuda backend: driver symbols against the toolkit's stub libcuda.so"
  stub=
  for d in "$cuda_home/lib64/stubs" "$cuda_home/targets/x86_64-linux/lib/stubs"; do
    [[ -e $d/libcuda.so ]] && { stub=$d/libcuda.so; break; }
  done
  if [[ -z $stub ]]; then
    note "cuda-stub: SKIPPED, no stub libcuda.so under $cuda_home (the toolkit's lib64/stubs; set CUDA_HOME)"
  else
    saved=("${backend[@]}"); backend=(--backend cuda)
    GPOOL_LIBCUDA=$stub start_server stub --insecure
    backend=("${saved[@]}")
    LD_LIBRARY_PATH=$gpool_ld LD_PRELOAD=${GPOOL_CHECK_PRELOAD:-} GPOOL_DEVICES=$addr/0 \
      timeout --kill-after=5 "$(limit)" "$gpool" run -- "$samples_dir/vector_add" 1024 >"$work/stub.out" 2>&1
    if grep -q "cuInit: the CUDA toolkit's stub libcuda" "$work/stub.out" "$work/stub.log"; then
      pass "cuda-stub: every driver symbol resolved in $stub; cuInit refused as a stub must"
    else
      fail "cuda-stub: expected cuInit to fail on the stub library"
      show_tail "$work/stub.log" server
      show_tail "$work/stub.out" gpool
    fi
  fi
fi

if ((!emulated)) && want perf && [[ -x $build/bench/remote_bench ]]; then
  echo "== bench/remote_bench (emulated backend, for the transport figures)"
  LD_LIBRARY_PATH=$gpool_ld timeout --kill-after=5 "$(limit)" "$build/bench/remote_bench" \
    --benchmark_min_time=0.2s 2>/dev/null | tail -n +4
fi
if ((!emulated && agent)) && want agent; then
  # The node agent's NVML discovery (helper script, owned by the agent code).
  if LD_LIBRARY_PATH=$gpool_ld timeout --kill-after=5 "$(limit)" "$here/scripts/gpu-check-agent.sh" "$build"; then
    pass "agent: NVML discovery agrees with nvidia-smi"
  else
    fail "agent: NVML discovery (scripts/gpu-check-agent.sh, exit $?)"
  fi
fi

echo "== summary: $passed passed, $failed failed, $noted notes"
if ((failed)); then
  echo "failed: ${failures[*]}"
  echo "gpu-check: FAIL"
  exit 1
fi
echo "gpu-check: PASS"
