// The emulated CUDA driver: a test stand-in for libcuda.so.1, NOT a GPU. It exports exactly the
// driver entry points gpool's `cuda` backend loads (src/remote/server/cuda_driver.h, by their
// versioned names, with cuda.h's signatures), so that `gpool gpu-server --backend cuda` runs its
// real code (cuda_backend.cc: staging buffers, pipelined reads, 2-D copies, cooperative launches,
// symbols, events, limits) on a machine without a GPU: GPOOL_LIBCUDA=<this library>.
//
// What it is:
//   - device memory is host memory (mmap'd high in the address space, MapDevice), bounded per device by
//     GPOOL_EMULATED_DRIVER_MEMORY bytes (default 1 GiB) so cuMemGetInfo and out-of-memory mean
//     something; every device range a call touches must lie inside one allocation or module
//     variable (CUDA_ERROR_INVALID_VALUE otherwise, where a GPU might fault or copy on);
//   - GPOOL_EMULATED_DRIVER_DEVICES devices (default 1), compute capability 9.0;
//   - asynchronous work (copies, memsets, launches, event records) is checked when submitted and
//     queued; the queue runs, in submission order (one schedule CUDA's stream order allows; so
//     cuStreamWaitEvent has nothing to add), on the caller's thread at the next synchronizing
//     call: cuStreamSynchronize, cuEventSynchronize, cuCtxSynchronize, cuMemFree, and a
//     cuStreamQuery/cuEventQuery that finds work pending (it answers CUDA_ERROR_NOT_READY, then
//     runs the queue: the "GPU" progresses between calls). So a caller that reuses a buffer or
//     reads a result before waiting for the copy gets stale bytes, as on a GPU. As CUDA does,
//     a copy from pageable host memory reads it when submitted, and one to pageable host memory
//     (or a 2-D copy with pageable host memory) completes before it returns; only memory from
//     cuMemHostAlloc is read or written later. Events take a steady_clock timestamp when their
//     record runs;
//   - modules come from cuModuleLoadData of a fatbin, cubin or PTX, read by gpool's own fatbin parser
//     (src/remote/fatbin): its kernels and their parameter layouts (cuModuleGetFunction,
//     cuFuncGetParamInfo) and its variables from the cubin's symbol table (cuModuleGetGlobal:
//     zeroed storage; static initialisers are not applied, as in the emulated backend). Each
//     load has its own variables, in the memory of the device whose context is current, and its
//     kernels see those: as on a GPU, where each context that loads a module has its own copy of
//     its __device__ and __constant__ variables;
//   - kernels run as CPU functions from the plugin named by GPOOL_EMULATED_DRIVER_KERNELS, through
//     the same code as the emulated backend (remote/server/kernel_plugin.h) when the queue runs
//     them; a kernel that fails is reported like a GPU fault: the launch succeeded, and every
//     call after the queue ran returns the sticky CUDA_ERROR_LAUNCH_FAILED (process-wide here,
//     per context on a GPU).
// What it cannot show: real DMA concurrency (nothing overlaps), real kernels, the driver's own
// error semantics beyond the few cases it models. Anything it does not implement (an attribute,
// launch attribute, memory type...) prints its name on stderr and returns an error, never success.
// Thread safety: one lock around every entry point.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include "remote/fatbin/fatbin.h"
#include "remote/server/emulated_vmm.h"
#include "remote/server/kernel_plugin.h"

namespace {

using gpool::remote::fatbin::KernelInfo;
using gpool::remote::server::KernelPlugin;

constexpr uint64_t kAlign = 256;
constexpr int kLimitCount = 7;  // CU_LIMIT_STACK_SIZE .. CU_LIMIT_PERSISTING_L2_CACHE_SIZE
constexpr int kDefaultMaxDynamicShared = 48 << 10, kOptinShared = 227 << 10;
constexpr int kMultiprocessors = 4, kMaxThreadsPerMp = 2048, kMaxBlocksPerMp = 32;

// Prints why a call fails (the emulated driver's errors are ours, not a GPU's: say so) and
// returns `r`.
template <typename... Args>
CUresult Fail(CUresult r, const char* call, fmt::format_string<Args...> f, Args&&... args) {
  std::fprintf(stderr, "gpool emulated CUDA driver: %s: %s\n", call,
               fmt::format(f, std::forward<Args>(args)...).c_str());
  return r;
}
CUresult NotImplemented(const char* call, const std::string& what) {
  return Fail(CUDA_ERROR_NOT_SUPPORTED, call, "{} is not implemented by the emulated CUDA driver",
              what);
}

struct Block {
  uint64_t size = 0;
  int dev = 0;
  bool variable = false;  // a module variable: freed by cuModuleUnload, not cuMemFree
};
struct Ctx {
  int dev = 0;
  std::set<Ctx*> peers;  // contexts this one has peer access to
  uint64_t limits[kLimitCount] = {1024, 1 << 20, 8 << 20, 2, 2048, 32, 0};
};
struct Module;
struct Func {
  Module* module = nullptr;
  std::string name;
  const KernelInfo* layout = nullptr;
  gpool_emu_kernel_fn fn = nullptr;
  int max_dynamic_shared = kDefaultMaxDynamicShared;
  int carveout = -1;
};
struct Module {
  gpool::remote::fatbin::Module image;
  std::map<std::string, uint64_t, std::less<>> globals;  // name -> device address
  std::vector<std::unique_ptr<Func>> funcs;
};
struct Stream {
  Ctx* ctx = nullptr;
};
struct Event {
  unsigned flags = 0;
  bool recorded = false;
  int pending = 0;  // queued records not yet run
  std::chrono::steady_clock::time_point at;
};

// Objects handed out as handles, owned here; a handle is live while it is a key.
template <typename T>
using Owned = std::map<T*, std::unique_ptr<T>>;
template <typename T>
T* Adopt(Owned<T>& owned, std::unique_ptr<T> p) {
  T* raw = p.get();
  owned.emplace(raw, std::move(p));
  return raw;
}

struct State {
  std::mutex mu;
  bool initialized = false;
  int devices = 1;
  uint64_t memory = uint64_t{1} << 30;  // per device
  std::vector<uint64_t> used;            // per device
  std::vector<std::unique_ptr<Ctx>> primary;  // per device, once retained
  std::vector<unsigned> ctx_flags;       // per device
  std::map<uint64_t, Block> blocks;      // device memory: address -> block
  Owned<Module> modules;
  std::set<Func*> funcs;  // owned by their modules
  Owned<Stream> streams;
  Owned<Event> events;
  std::unique_ptr<KernelPlugin> plugin;
  std::map<uint64_t, uint64_t> pinned;  // cuMemHostAlloc'ed host memory: address -> size
  std::deque<std::function<void()>> queue;  // submitted asynchronous work, not yet run
  CUresult sticky = CUDA_SUCCESS;  // a kernel's fault: every later call fails with it
};
State& S() {
  static State* s = new State;  // never destroyed: the server's worker exits with it loaded
  return *s;
}
thread_local Ctx* current = nullptr;

template <typename T>
bool Live(const Owned<T>& owned, T* p) {
  return owned.count(p) != 0;
}

uint64_t EnvPositive(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != 0 || n == 0) {
    Fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "{}={} is not a positive integer; using {}", name, v,
         fallback);
    return fallback;
  }
  return n;
}

// The state a context-bound call needs: initialized, a current context, no sticky fault.
CUresult Ready(const char* call) {
  State& s = S();
  if (!s.initialized) return Fail(CUDA_ERROR_NOT_INITIALIZED, call, "cuInit was not called");
  if (s.sticky != CUDA_SUCCESS) return s.sticky;
  if (!current) return Fail(CUDA_ERROR_INVALID_CONTEXT, call, "no current context");
  return CUDA_SUCCESS;
}
CUresult CheckDevice(const char* call, CUdevice d) {
  if (!S().initialized) return Fail(CUDA_ERROR_NOT_INITIALIZED, call, "cuInit was not called");
  if (d < 0 || d >= S().devices) {
    return Fail(CUDA_ERROR_INVALID_DEVICE, call, "device {} of {}", d, S().devices);
  }
  return CUDA_SUCCESS;
}
// The legacy (nullptr, CU_STREAM_LEGACY) and per-thread default streams, or a live stream.
CUresult CheckStream(const char* call, CUstream h) {
  auto* st = reinterpret_cast<Stream*>(h);
  if (h == nullptr || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD || Live(S().streams, st)) {
    return CUDA_SUCCESS;
  }
  return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown stream {}", static_cast<void*>(h));
}
// Virtual memory management (cuMemAddressReserve ... cuMemSetAccess): the emulated backend's own
// code (remote/server/emulated_vmm.h: a PROT_NONE window, memfd handles, mmap'd mappings), so a
// mapping is real host memory a CPU kernel and the copies see. Its 4 GiB window sits apart from
// MapDevice's, per process likewise, in [112, 120) TiB (the emulated backend's are below).
gpool::remote::server::EmulatedVmm& Vmm() {
  static auto* v = new gpool::remote::server::EmulatedVmm(
      (uint64_t{0x70} << 40) + static_cast<uint64_t>(getpid() % 2048) * (uint64_t{4} << 30),
      uint64_t{4} << 30);
  return *v;
}
// An EmulatedVmm result as the driver's: its codes are cudaError_t numbers, which equal the
// CUresults it uses (invalid value, out of memory, not supported, unknown).
CUresult VmmResult(const char* call, const gpool::remote::server::Result& r) {
  if (r.ok()) return CUDA_SUCCESS;
  return Fail(static_cast<CUresult>(r.code), call, "{}", r.message);
}

// [p, p+n) must lie inside one allocation or module variable, or in mapped reserved space with
// access.
CUresult CheckRange(const char* call, uint64_t p, uint64_t n) {
  if (n == 0) return CUDA_SUCCESS;
  if (Vmm().Reserved(p)) return VmmResult(call, Vmm().Check(p, n, call));
  auto& blocks = S().blocks;
  auto it = blocks.upper_bound(p);
  if (it != blocks.begin()) {
    --it;
    if (p >= it->first && n <= it->second.size && p - it->first <= it->second.size - n) {
      return CUDA_SUCCESS;
    }
  }
  return Fail(CUDA_ERROR_INVALID_VALUE, call,
              "device range 0x{:x}+{} is not inside one allocation", p, n);
}
// Checks a 2-D device region: `height` rows of `width` bytes, `pitch` apart.
CUresult CheckRows(const char* call, uint64_t p, uint64_t pitch, uint64_t width, uint64_t height) {
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (pitch < width) return Fail(CUDA_ERROR_INVALID_VALUE, call, "pitch {} < width {}", pitch, width);
  if (height - 1 > (UINT64_MAX - width) / pitch) {
    return Fail(CUDA_ERROR_INVALID_VALUE, call, "{} rows of pitch {} overflow", height, pitch);
  }
  return CheckRange(call, p, (height - 1) * pitch + width);
}
void* Ptr(uint64_t p) { return reinterpret_cast<void*>(p); }

void Submit(std::function<void()> op) { S().queue.push_back(std::move(op)); }
// Runs everything queued, oldest first.
void Drain() {
  auto& q = S().queue;
  while (!q.empty()) {
    std::function<void()> op = std::move(q.front());
    q.pop_front();
    op();
  }
}
// The end of a synchronizing call: the queue has run; a kernel's fault shows now.
CUresult Synced() {
  Drain();
  return S().sticky;
}
// Whether [p, p+n) is cuMemHostAlloc'ed memory (which a copy reads or writes when it runs).
bool Pinned(const void* p, size_t n) {
  auto a = reinterpret_cast<uint64_t>(p);
  auto it = S().pinned.upper_bound(a);
  if (it == S().pinned.begin()) return false;
  --it;
  return a - it->first <= it->second && n <= it->second - (a - it->first);
}
// Queues `op`, or, when it touches pageable host memory, runs it now after the queue (as CUDA
// completes such a copy before returning).
void SubmitHost(bool pinned, std::function<void()> op) {
  if (pinned) return Submit(std::move(op));
  Drain();
  op();
}

// Device memory is mapped high in the address space, in a window per process, away from where
// malloc (and ASan's allocator, at 0x6000'0000'0000) puts host memory: gpool's client keeps host
// memory and every server's device memory in one address space (unified addressing: cuMemcpy
// tells the direction from the pointers), so a device address must not be one the program's own
// heap can hold, nor another server's. A real driver reserves its device range likewise. Falls
// back to any address when the window is taken. Limit: the window is not reused after frees.
uint64_t PageRound(uint64_t n) { return (n + 4095) / 4096 * 4096; }
void* MapDevice(uint64_t bytes) {
  static std::atomic<uint64_t> next{(uint64_t{0x50} << 40) +
                                    static_cast<uint64_t>(getpid() % 4096) * (uint64_t{4} << 30)};
  const uint64_t len = PageRound(bytes);
  void* hint = reinterpret_cast<void*>(next.fetch_add(len));
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
#ifdef MAP_FIXED_NOREPLACE
  flags |= MAP_FIXED_NOREPLACE;
#endif
  void* p = mmap(hint, len, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Device memory in use: allocations and memory handles (cuMemCreate, until released and unmapped).
uint64_t InUse(int dev) { return S().used[dev] + Vmm().bytes_on(static_cast<uint32_t>(dev)); }

CUresult Allocate(const char* call, uint64_t size, bool variable, uint64_t* out) {
  State& s = S();
  int dev = current->dev;
  uint64_t rounded = (std::max<uint64_t>(size, 1) + kAlign - 1) / kAlign * kAlign;
  if (rounded > s.memory - InUse(dev)) {
    return Fail(CUDA_ERROR_OUT_OF_MEMORY, call, "{} bytes asked, {} of {} in use on device {}",
                size, InUse(dev), s.memory, dev);
  }
  void* p = MapDevice(rounded);  // zeroed, as fresh anonymous pages are
  if (!p) return Fail(CUDA_ERROR_OUT_OF_MEMORY, call, "mapping {} bytes of device memory failed", rounded);
  s.used[dev] += rounded;
  *out = reinterpret_cast<uint64_t>(p);
  s.blocks[*out] = Block{std::max<uint64_t>(size, 1), dev, variable};
  return CUDA_SUCCESS;
}
void Release(std::map<uint64_t, Block>::iterator it) {
  State& s = S();
  const uint64_t rounded = (it->second.size + kAlign - 1) / kAlign * kAlign;
  s.used[it->second.dev] -= rounded;
  munmap(Ptr(it->first), PageRound(rounded));
  s.blocks.erase(it);
}

int DeviceAttribute(CUdevice_attribute a, bool* known) {
  *known = true;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return INT32_MAX;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return kDefaultMaxDynamicShared;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return kOptinShared;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 228 << 10;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 64 << 10;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return INT32_MAX;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1000000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return kMultiprocessors;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 1000000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 256;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 4 << 20;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return kMaxThreadsPerMp;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 0;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return kMaxBlocksPerMp;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 0;
    default:
      // Any other attribute the driver defines reads 0 (a feature this device lacks), as the
      // emulated backend answers (emulated_backend.cc, GetAttribute): NVIDIA's runtime asks for
      // ~110 of them at start-up, on the driver layer. Numbers outside the enum are refused.
      *known = a > 0 && a < CU_DEVICE_ATTRIBUTE_MAX;
      return 0;
  }
}

// Blocks of `threads` threads one emulated multiprocessor holds at once (the occupancy answer,
// and the bound a cooperative grid must fit, times the multiprocessor count).
int BlocksPerMp(int threads) { return std::min(kMaxBlocksPerMp, kMaxThreadsPerMp / threads); }

Func* LiveFunc(CUfunction f) {
  auto* fn = reinterpret_cast<Func*>(f);
  return S().funcs.count(fn) ? fn : nullptr;
}

void* SymbolThunk(void* ctx, const char* name) {
  auto* m = static_cast<Module*>(ctx);
  auto it = m->globals.find(name);
  return it == m->globals.end() ? nullptr : Ptr(it->second);
}

struct LaunchShape {
  unsigned grid[3], block[3], shmem;
  CUstream stream;
  bool cooperative;
};

// The packed parameter buffer: `extra`'s CU_LAUNCH_PARAM_BUFFER_POINTER (what gpool passes), or
// `kernelParams` packed at the layout's offsets.
CUresult Params(const char* call, const Func& f, void** kernelParams, void** extra,
                std::vector<std::byte>* packed, std::span<const std::byte>* out) {
  if (extra) {
    const void* buf = nullptr;
    size_t size = 0;
    for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buf = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size = *static_cast<size_t*>(extra[i + 1]);
      } else {
        return NotImplemented(call, fmt::format("extra option {}", extra[i]));
      }
    }
    if (!buf) return Fail(CUDA_ERROR_INVALID_VALUE, call, "extra without a parameter buffer");
    *out = {static_cast<const std::byte*>(buf), size};
    return CUDA_SUCCESS;
  }
  packed->assign(f.layout->param_bytes, std::byte{0});
  for (size_t i = 0; i < f.layout->params.size(); ++i) {
    if (!kernelParams) return Fail(CUDA_ERROR_INVALID_VALUE, call, "kernel {} has parameters", f.name);
    std::memcpy(packed->data() + f.layout->params[i].offset, kernelParams[i],
                f.layout->params[i].size);
  }
  *out = *packed;
  return CUDA_SUCCESS;
}

CUresult Launch(const char* call, CUfunction h, const LaunchShape& l, void** kernelParams,
                void** extra) {
  if (CUresult r = Ready(call); r) return r;
  Func* f = LiveFunc(h);
  if (!f) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown function");
  if (CUresult r = CheckStream(call, l.stream); r) return r;
  uint64_t threads = uint64_t{l.block[0]} * l.block[1] * l.block[2];
  uint64_t blocks = uint64_t{l.grid[0]} * l.grid[1] * l.grid[2];
  if (threads == 0 || threads > 1024 || blocks == 0) {
    return Fail(CUDA_ERROR_INVALID_VALUE, call, "kernel {}: grid {}x{}x{} of blocks {}x{}x{}",
                f->name, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2]);
  }
  if (l.shmem > static_cast<unsigned>(f->max_dynamic_shared)) {
    return Fail(CUDA_ERROR_INVALID_VALUE, call,
                "kernel {}: {} bytes of dynamic shared memory over its maximum {}", f->name,
                l.shmem, f->max_dynamic_shared);
  }
  if (l.cooperative && blocks > uint64_t(BlocksPerMp(static_cast<int>(threads))) * kMultiprocessors) {
    return Fail(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, call,
                "kernel {}: {} blocks of {} threads cannot all be resident", f->name, blocks, threads);
  }
  std::vector<std::byte> packed;
  std::span<const std::byte> params;
  if (CUresult r = Params(call, *f, kernelParams, extra, &packed, &params); r) return r;
  if (!f->fn) {
    return Fail(CUDA_ERROR_NOT_FOUND, call,
                "no CPU implementation of kernel {} (GPOOL_EMULATED_DRIVER_KERNELS={})", f->name,
                std::getenv("GPOOL_EMULATED_DRIVER_KERNELS") ? std::getenv("GPOOL_EMULATED_DRIVER_KERNELS") : "");
  }
  if (gpool::Status s = gpool::remote::server::CheckParams(f->name, *f->layout, params); !s.ok()) {
    return Fail(CUDA_ERROR_INVALID_VALUE, call, "{}", s.message());
  }
  // The driver copies the parameters at the launch; the kernel runs with the queue.
  auto copy = std::make_shared<std::vector<std::byte>>(params.begin(), params.end());
  Submit([f, l, copy] {
    uint64_t ns = 0;
    gpool::Status s = gpool::remote::server::RunKernel(
        {.fn = f->fn, .name = f->name, .layout = f->layout,
         .grid = {l.grid[0], l.grid[1], l.grid[2]}, .block = {l.block[0], l.block[1], l.block[2]},
         .shared_mem = l.shmem, .params = *copy, .symbol = &SymbolThunk, .ctx = f->module},
        &ns);
    if (!s.ok() && S().sticky == CUDA_SUCCESS) {
      // A GPU reports a faulting kernel at the next synchronizing call, and every call after.
      Fail(CUDA_ERROR_LAUNCH_FAILED, "kernel", "{} (sticky from now on)", s.message());
      S().sticky = CUDA_ERROR_LAUNCH_FAILED;
    }
  });
  return CUDA_SUCCESS;
}

struct ErrorName {
  CUresult r;
  const char* text;
};
constexpr ErrorName kErrorNames[] = {
    {CUDA_SUCCESS, "no error"},
    {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
    {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
    {CUDA_ERROR_UNSUPPORTED_LIMIT, "unsupported limit"},
    {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"},
    {CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"},
    {CUDA_ERROR_NOT_READY, "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
};

using Lock = std::lock_guard<std::mutex>;

Event* LiveEvent(CUevent e) {
  auto* ev = reinterpret_cast<Event*>(e);
  return Live(S().events, ev) ? ev : nullptr;
}

}  // namespace

// The entry points, in cuda_driver.h's order. cuda.h's #defines give them their exported
// (versioned) names: cuMemAlloc here is cuMemAlloc_v2.
extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
  Lock lock(S().mu);
  State& s = S();
  if (flags != 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "flags {} (want 0)", flags);
  if (s.initialized) return CUDA_SUCCESS;
  s.devices = static_cast<int>(EnvPositive("GPOOL_EMULATED_DRIVER_DEVICES", 1));
  s.memory = EnvPositive("GPOOL_EMULATED_DRIVER_MEMORY", s.memory);
  if (const char* k = std::getenv("GPOOL_EMULATED_DRIVER_KERNELS"); k && *k) {
    auto plugin = KernelPlugin::Load(k);
    if (!plugin.ok()) return Fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "{}", plugin.status().message());
    s.plugin = std::move(*plugin);
  }
  s.used.assign(s.devices, 0);
  s.primary.resize(s.devices);
  s.ctx_flags.assign(s.devices, 0);
  s.initialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** str) {
  for (const ErrorName& e : kErrorNames) {
    if (e.r == error) {
      *str = e.text;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  Lock lock(S().mu);
  if (!S().initialized) return Fail(CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount", "cuInit was not called");
  *count = S().devices;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceGet", ordinal); r) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceGetName", dev); r) return r;
  if (len <= 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName", "length {}", len);
  std::snprintf(name, static_cast<size_t>(len), "gpool emulated CUDA driver device %d (not a GPU)", dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceTotalMem", dev); r) return r;
  *bytes = S().memory;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceGetAttribute", dev); r) return r;
  bool known = false;
  int v = DeviceAttribute(attrib, &known);
  if (!known) return NotImplemented("cuDeviceGetAttribute", fmt::format("attribute {}", static_cast<int>(attrib)));
  *pi = attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID ? dev : v;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceGetUuid", dev); r) return r;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, "gpool-emu-drv", 13);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxRetain", dev); r) return r;
  auto& c = S().primary[dev];
  if (!c) {
    c = std::make_unique<Ctx>();
    c->dev = dev;
  }
  *pctx = reinterpret_cast<CUcontext>(c.get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  Lock lock(S().mu);
  auto* c = reinterpret_cast<Ctx*>(ctx);
  bool live = c == nullptr;
  for (const auto& p : S().primary) live |= p.get() == c;
  if (!live) return Fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent", "unknown context");
  current = c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize() {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxSynchronize"); r) return r;
  return Synced();
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxSetLimit"); r) return r;
  if (limit < 0 || limit >= kLimitCount) {
    return Fail(CUDA_ERROR_UNSUPPORTED_LIMIT, "cuCtxSetLimit", "unknown limit {}", static_cast<int>(limit));
  }
  if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE && value != 0) {
    return Fail(CUDA_ERROR_UNSUPPORTED_LIMIT, "cuCtxSetLimit",
                "CU_LIMIT_PERSISTING_L2_CACHE_SIZE: the emulated device has no persisting L2");
  }
  current->limits[limit] = value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetLimit(size_t* value, CUlimit limit) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxGetLimit"); r) return r;
  if (limit < 0 || limit >= kLimitCount) {
    return Fail(CUDA_ERROR_UNSUPPORTED_LIMIT, "cuCtxGetLimit", "unknown limit {}", static_cast<int>(limit));
  }
  *value = current->limits[limit];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxSetFlags", dev); r) return r;
  unsigned sched = flags & CU_CTX_SCHED_MASK;
  if ((flags & ~unsigned{CU_CTX_FLAGS_MASK}) != 0 ||
      (sched != 0 && sched != CU_CTX_SCHED_SPIN && sched != CU_CTX_SCHED_YIELD &&
       sched != CU_CTX_SCHED_BLOCKING_SYNC)) {
    return Fail(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxSetFlags", "flags 0x{:x}", flags);
  }
  S().ctx_flags[dev] = flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxGetState", dev); r) return r;
  *flags = S().ctx_flags[dev];
  *active = S().primary[dev] != nullptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxEnablePeerAccess"); r) return r;
  auto* p = reinterpret_cast<Ctx*>(peer);
  if (flags != 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuCtxEnablePeerAccess", "flags {}", flags);
  if (p == current || p == nullptr) {
    return Fail(CUDA_ERROR_INVALID_DEVICE, "cuCtxEnablePeerAccess", "peer is the current context");
  }
  if (!current->peers.insert(p).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxDisablePeerAccess"); r) return r;
  if (!current->peers.erase(reinterpret_cast<Ctx*>(peer))) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(size_t* free, size_t* total) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuMemGetInfo"); r) return r;
  *total = S().memory;
  *free = S().memory - InUse(current->dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* dptr, size_t bytes) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuMemAlloc"); r) return r;
  if (bytes == 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc", "0 bytes");
  uint64_t p = 0;
  if (CUresult r = Allocate("cuMemAlloc", bytes, false, &p); r) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree(CUdeviceptr dptr) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuMemFree"); r) return r;
  auto it = S().blocks.find(dptr);
  if (it == S().blocks.end() || it->second.variable) {
    return Fail(CUDA_ERROR_INVALID_VALUE, "cuMemFree", "0x{:x} is not an allocation", dptr);
  }
  if (CUresult r = Synced(); r) return r;  // queued work may still use it
  Release(it);
  return CUDA_SUCCESS;
}

// Pinned host memory is plain host memory; there is no cuMemFreeHost in the table, so it lives
// as long as the process (the backend keeps its staging buffers that long).
CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytes, unsigned int flags) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuMemHostAlloc"); r) return r;
  if (flags & ~unsigned{CU_MEMHOSTALLOC_PORTABLE}) {
    return NotImplemented("cuMemHostAlloc", fmt::format("flags 0x{:x}", flags));
  }
  *pp = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (!*pp) return Fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemHostAlloc", "{} bytes", bytes);
  S().pinned[reinterpret_cast<uint64_t>(*pp)] = bytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemcpyHtoDAsync";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRange(call, dst, n); r) return r;
  if (n == 0) return CUDA_SUCCESS;
  if (Pinned(src, n)) {
    Submit([=] { std::memcpy(Ptr(dst), src, n); });
  } else {  // pageable: read now (CUDA stages it before returning)
    auto copy = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                         static_cast<const std::byte*>(src) + n);
    Submit([=] { std::memcpy(Ptr(dst), copy->data(), n); });
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemcpyDtoHAsync";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRange(call, src, n); r) return r;
  if (n) SubmitHost(Pinned(dst, n), [=] { std::memcpy(dst, Ptr(src), n); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemcpyDtoDAsync";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRange(call, src, n); r) return r;
  if (CUresult r = CheckRange(call, dst, n); r) return r;
  if (n) Submit([=] { std::memmove(Ptr(dst), Ptr(src), n); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemsetD8Async";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRange(call, dst, n); r) return r;
  if (n) Submit([=] { std::memset(Ptr(dst), uc, n); });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char uc, size_t width,
                                   size_t height, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemsetD2D8Async";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  if (CUresult r = CheckRows(call, dst, pitch, width, height); r) return r;
  Submit([=] {
    for (size_t row = 0; row < height && width; ++row) std::memset(Ptr(dst + row * pitch), uc, width);
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy2DAsync(const CUDA_MEMCPY2D* c, CUstream st) {
  Lock lock(S().mu);
  const char* call = "cuMemcpy2DAsync";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, st); r) return r;
  // One side's first byte, checking a device side's rows; host sides are the caller's.
  auto side = [&](CUmemorytype type, const void* host, CUdeviceptr dev, size_t x, size_t y,
                  size_t pitch, const char* which, uint64_t* at) -> CUresult {
    if (pitch < c->WidthInBytes && c->Height > 1) {
      return Fail(CUDA_ERROR_INVALID_VALUE, call, "{} pitch {} < width {}", which, pitch, c->WidthInBytes);
    }
    if (type == CU_MEMORYTYPE_HOST) {
      *at = reinterpret_cast<uint64_t>(host) + y * pitch + x;
      return CUDA_SUCCESS;
    }
    if (type != CU_MEMORYTYPE_DEVICE) {
      return NotImplemented(call, fmt::format("{} memory type {}", which, static_cast<int>(type)));
    }
    *at = dev + y * pitch + x;
    return CheckRows(call, *at, pitch, c->WidthInBytes, c->Height);
  };
  uint64_t src = 0, dst = 0;
  if (CUresult r = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY,
                        c->srcPitch, "source", &src); r) {
    return r;
  }
  if (CUresult r = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY,
                        c->dstPitch, "destination", &dst); r) {
    return r;
  }
  // Host sides: each must be pinned for the copy to be queued (else it completes now).
  auto pinned = [&](CUmemorytype type, uint64_t at, size_t pitch) {
    return type != CU_MEMORYTYPE_HOST ||
           Pinned(Ptr(at), c->Height ? (c->Height - 1) * pitch + c->WidthInBytes : 0);
  };
  bool queued = pinned(c->srcMemoryType, src, c->srcPitch) && pinned(c->dstMemoryType, dst, c->dstPitch);
  size_t width = c->WidthInBytes, height = c->Height, sp = c->srcPitch, dp = c->dstPitch;
  SubmitHost(queued, [=] {
    for (size_t row = 0; row < height && width; ++row) {
      std::memmove(Ptr(dst + row * dp), Ptr(src + row * sp), width);
    }
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  Lock lock(S().mu);
  const char* call = "cuModuleLoadData";
  if (CUresult r = Ready(call); r) return r;
  namespace fb = gpool::remote::fatbin;
  // A fatbin, cubin or PTX: its extent from its own headers (ImageFromPointer reads no further).
  auto bytes = fb::ImageFromPointer(image);
  if (!bytes.ok()) return Fail(CUDA_ERROR_INVALID_IMAGE, call, "{}", bytes.status().message());
  auto parsed = fb::ParseImage(*bytes, {.target_arch = 90});
  if (!parsed.ok()) return Fail(CUDA_ERROR_INVALID_IMAGE, call, "{}", parsed.status().message());
  auto m = std::make_unique<Module>();
  m->image = std::move(*parsed);
  for (const auto& [name, bytes] : m->image.globals) {
    uint64_t p = 0;
    if (CUresult r = Allocate(call, bytes, true, &p); r) {
      for (const auto& [n, q] : m->globals) Release(S().blocks.find(q));
      return r;
    }
    m->globals[name] = p;
  }
  *module = reinterpret_cast<CUmodule>(Adopt(S().modules, std::move(m)));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule hmod) {
  Lock lock(S().mu);
  State& s = S();
  auto* m = reinterpret_cast<Module*>(hmod);
  if (!Live(s.modules, m)) return Fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload", "unknown module");
  Drain();  // queued launches use its functions and variables
  for (const auto& [name, p] : m->globals) Release(s.blocks.find(p));
  for (const auto& f : m->funcs) s.funcs.erase(f.get());
  s.modules.erase(m);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule hmod, const char* name) {
  Lock lock(S().mu);
  const char* call = "cuModuleGetFunction";
  if (CUresult r = Ready(call); r) return r;
  auto* m = reinterpret_cast<Module*>(hmod);
  if (!Live(S().modules, m)) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown module");
  auto k = m->image.kernels.find(name);
  if (k == m->image.kernels.end()) return CUDA_ERROR_NOT_FOUND;  // a normal answer: no message
  for (const auto& f : m->funcs) {
    if (f->name == name) {
      *hfunc = reinterpret_cast<CUfunction>(f.get());
      return CUDA_SUCCESS;
    }
  }
  auto f = std::make_unique<Func>();
  f->module = m;
  f->name = name;
  f->layout = &k->second;
  f->fn = S().plugin ? S().plugin->Find(name) : nullptr;
  *hfunc = reinterpret_cast<CUfunction>(f.get());
  S().funcs.insert(f.get());
  m->funcs.push_back(std::move(f));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  Lock lock(S().mu);
  const char* call = "cuModuleGetGlobal";
  if (CUresult r = Ready(call); r) return r;
  auto* m = reinterpret_cast<Module*>(hmod);
  if (!Live(S().modules, m)) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown module");
  auto g = m->globals.find(name);
  if (g == m->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr) *dptr = g->second;
  if (bytes) *bytes = m->image.globals.find(name)->second;
  return CUDA_SUCCESS;
}

// Absent from the variant built as a driver older than CUDA 12.4, which lacks it (the cuda
// backend then answers GetParamInfo "not supported" and the client lays parameters out itself).
#ifndef GPOOL_EMULATED_DRIVER_BEFORE_12_4
CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t index, size_t* offset, size_t* size) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuFuncGetParamInfo"); r) return r;
  Func* f = LiveFunc(func);
  if (!f) return Fail(CUDA_ERROR_INVALID_HANDLE, "cuFuncGetParamInfo", "unknown function");
  if (index >= f->layout->params.size()) return CUDA_ERROR_INVALID_VALUE;  // the end of the list
  *offset = f->layout->params[index].offset;
  *size = f->layout->params[index].size;
  return CUDA_SUCCESS;
}
#endif  // GPOOL_EMULATED_DRIVER_BEFORE_12_4

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction func) {
  Lock lock(S().mu);
  const char* call = "cuFuncGetAttribute";
  if (CUresult r = Ready(call); r) return r;
  Func* f = LiveFunc(func);
  if (!f) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown function");
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *pi = 1024; break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *pi = 0; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *pi = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *pi = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *pi = f->max_dynamic_shared; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *pi = f->carveout; break;
    default: return NotImplemented(call, fmt::format("function attribute {}", static_cast<int>(attrib)));
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction func, CUfunction_attribute attrib, int value) {
  Lock lock(S().mu);
  const char* call = "cuFuncSetAttribute";
  if (CUresult r = Ready(call); r) return r;
  Func* f = LiveFunc(func);
  if (!f) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown function");
  if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > kOptinShared) {
      return Fail(CUDA_ERROR_INVALID_VALUE, call, "{}: dynamic shared memory {} > {}", f->name, value, kOptinShared);
    }
    f->max_dynamic_shared = value;
    return CUDA_SUCCESS;
  }
  if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
    if (value < -1 || value > 100) return Fail(CUDA_ERROR_INVALID_VALUE, call, "carveout {}", value);
    f->carveout = value;
    return CUDA_SUCCESS;
  }
  return NotImplemented(call, fmt::format("setting function attribute {}", static_cast<int>(attrib)));
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction func,
                                                                      int block_size, size_t shmem,
                                                                      unsigned int flags) {
  Lock lock(S().mu);
  const char* call = "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags";
  if (CUresult r = Ready(call); r) return r;
  if (!LiveFunc(func)) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown function");
  if (block_size <= 0 || block_size > 1024) return Fail(CUDA_ERROR_INVALID_VALUE, call, "block size {}", block_size);
  (void)shmem, (void)flags;  // the CPU kernels' shared memory is host memory: it bounds nothing
  *blocks = BlocksPerMp(block_size);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int shmem, CUstream st, void** kernelParams, void** extra) {
  Lock lock(S().mu);
  return Launch("cuLaunchKernel", f, {{gx, gy, gz}, {bx, by, bz}, shmem, st, false}, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                  void** extra) {
  Lock lock(S().mu);
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id != CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
      return NotImplemented("cuLaunchKernelEx", fmt::format("launch attribute {}", static_cast<int>(a.id)));
    }
    cooperative = a.value.cooperative != 0;
  }
  const CUlaunchConfig& c = *config;
  return Launch("cuLaunchKernelEx", f,
                {{c.gridDimX, c.gridDimY, c.gridDimZ}, {c.blockDimX, c.blockDimY, c.blockDimZ},
                 c.sharedMemBytes, c.hStream, cooperative},
                kernelParams, extra);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuStreamCreateWithPriority"); r) return r;
  if (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) {
    return Fail(CUDA_ERROR_INVALID_VALUE, "cuStreamCreateWithPriority", "flags 0x{:x}", flags);
  }
  (void)priority;  // nothing is ever queued, so there is nothing to order
  auto s = std::make_unique<Stream>();
  s->ctx = current;
  *ph = reinterpret_cast<CUstream>(Adopt(S().streams, std::move(s)));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream h) {
  Lock lock(S().mu);
  if (S().streams.erase(reinterpret_cast<Stream*>(h))) return CUDA_SUCCESS;
  return Fail(CUDA_ERROR_INVALID_HANDLE, "cuStreamDestroy", "unknown stream");
}

CUresult CUDAAPI cuStreamSynchronize(CUstream h) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuStreamSynchronize"); r) return r;
  if (CUresult r = CheckStream("cuStreamSynchronize", h); r) return r;
  return Synced();
}

// Not ready while anything is queued (on any stream: the queue is one), after which it runs.
CUresult CUDAAPI cuStreamQuery(CUstream h) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuStreamQuery"); r) return r;
  if (CUresult r = CheckStream("cuStreamQuery", h); r) return r;
  if (S().queue.empty()) return CUDA_SUCCESS;
  Drain();
  return CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags) {
  Lock lock(S().mu);
  const char* call = "cuStreamWaitEvent";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, h); r) return r;
  if (!LiveEvent(e)) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown event");
  if (flags != 0) return NotImplemented(call, fmt::format("flags {}", flags));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* ph, unsigned int flags) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuEventCreate"); r) return r;
  unsigned known = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (flags & ~known) return Fail(CUDA_ERROR_INVALID_VALUE, "cuEventCreate", "flags 0x{:x}", flags);
  auto e = std::make_unique<Event>();
  e->flags = flags;
  *ph = reinterpret_cast<CUevent>(Adopt(S().events, std::move(e)));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent e, CUstream h) {
  Lock lock(S().mu);
  const char* call = "cuEventRecord";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckStream(call, h); r) return r;
  Event* ev = LiveEvent(e);
  if (!ev) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown event");
  ev->recorded = true;
  ++ev->pending;
  Submit([ev] {  // the work queued before it has run
    ev->at = std::chrono::steady_clock::now();
    --ev->pending;
  });
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventSynchronize(CUevent e) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuEventSynchronize"); r) return r;
  if (!LiveEvent(e)) return Fail(CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize", "unknown event");
  return Synced();
}

// Not ready while its record is queued, after which the queue runs.
CUresult CUDAAPI cuEventQuery(CUevent e) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuEventQuery"); r) return r;
  Event* ev = LiveEvent(e);
  if (!ev) return Fail(CUDA_ERROR_INVALID_HANDLE, "cuEventQuery", "unknown event");
  if (ev->pending == 0) return CUDA_SUCCESS;
  Drain();
  return CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  Lock lock(S().mu);
  const char* call = "cuEventElapsedTime";
  if (CUresult r = Ready(call); r) return r;
  Event *a = LiveEvent(start), *b = LiveEvent(end);
  if (!a || !b) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "unknown event");
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) {
    return Fail(CUDA_ERROR_INVALID_HANDLE, call, "an event was created with CU_EVENT_DISABLE_TIMING");
  }
  if (!a->recorded || !b->recorded) return Fail(CUDA_ERROR_INVALID_HANDLE, call, "an event was never recorded");
  if (a->pending || b->pending) return CUDA_ERROR_NOT_READY;  // the caller did not wait for them
  *ms = std::chrono::duration<float, std::milli>(b->at - a->at).count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy(CUevent e) {
  Lock lock(S().mu);
  if (LiveEvent(e) && LiveEvent(e)->pending) Drain();  // its queued record refers to it
  if (S().events.erase(reinterpret_cast<Event*>(e))) return CUDA_SUCCESS;
  return Fail(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy", "unknown event");
}

// ---- virtual memory management (see Vmm above). Physical memory counts against the device's
// memory as allocations do (InUse); calls that change mappings run the queue first (they are
// synchronous in CUDA).

static CUresult CheckVmmProp(const char* call, const CUmemAllocationProp* prop) {
  if (!prop) return Fail(CUDA_ERROR_INVALID_VALUE, call, "null prop");
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return NotImplemented(call, "an allocation that is not pinned device memory");
  }
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    return NotImplemented(call, "a shareable handle type");
  }
  return CheckDevice(call, prop->location.id);
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags) {
  Lock lock(S().mu);
  if (CUresult r = CheckVmmProp("cuMemGetAllocationGranularity", prop); r) return r;
  *granularity = gpool::remote::server::EmulatedVmm::kGranularity;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  Lock lock(S().mu);
  const char* call = "cuMemAddressReserve";
  if (CUresult r = Ready(call); r) return r;
  if (flags != 0) return Fail(CUDA_ERROR_INVALID_VALUE, call, "flags {}", flags);
  uint64_t p = 0;
  if (CUresult r = VmmResult(call, Vmm().Reserve(size, alignment, addr, &p)); r) return r;
  *ptr = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  Lock lock(S().mu);
  return VmmResult("cuMemAddressFree", Vmm().FreeReservation(ptr, size));
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  Lock lock(S().mu);
  const char* call = "cuMemCreate";
  if (CUresult r = Ready(call); r) return r;
  if (CUresult r = CheckVmmProp(call, prop); r) return r;
  if (flags != 0) return Fail(CUDA_ERROR_INVALID_VALUE, call, "flags {}", flags);
  State& s = S();
  const int dev = prop->location.id;
  if (size > s.memory - InUse(dev)) {
    return Fail(CUDA_ERROR_OUT_OF_MEMORY, call, "{} bytes asked, {} of {} in use on device {}",
                size, InUse(dev), s.memory, dev);
  }
  uint64_t h = 0;
  if (CUresult r = VmmResult(call, Vmm().Create(static_cast<uint32_t>(dev), size, &h)); r) return r;
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  Lock lock(S().mu);
  Drain();
  std::vector<uint64_t> gone;  // (InUse reads what is left)
  return VmmResult("cuMemRelease", Vmm().Release(handle, &gone));
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  Lock lock(S().mu);
  if (flags != 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuMemMap", "flags {}", flags);
  return VmmResult("cuMemMap", Vmm().Map(ptr, size, offset, handle));
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  Lock lock(S().mu);
  Drain();  // queued work may still use it
  std::vector<uint64_t> gone;
  return VmmResult("cuMemUnmap", Vmm().Unmap(ptr, size, &gone));
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  Lock lock(S().mu);
  const char* call = "cuMemSetAccess";
  if (!desc || count == 0) return Fail(CUDA_ERROR_INVALID_VALUE, call, "no descriptors");
  Drain();
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return NotImplemented(call, "access for a location that is not a device");
    }
    if (CUresult r = CheckDevice(call, desc[i].location.id); r) return r;
    if (CUresult r = VmmResult(call, Vmm().SetAccess(ptr, size,
                                                     static_cast<uint32_t>(desc[i].location.id),
                                                     static_cast<uint32_t>(desc[i].flags)));
        r) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
