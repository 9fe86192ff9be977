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
//
// Files (split along the driver API's own seams; emulated_driver.h is their internal header):
//   - emulated_driver.cc (this file): the process-wide state, the checks every entry point
//     shares (initialized, current context, stream, device range), the asynchronous work queue,
//     and device memory's mapping and accounting;
//   - devices.cc: cuInit, versions, error strings, devices and their attributes, primary
//     contexts, limits and peer access;
//   - memory.cc: allocations, pinned host memory, copies and memsets;
//   - vmm.cc: virtual memory management (cuMemAddressReserve ... cuMemSetAccess);
//   - modules.cc: modules, functions and their attributes, occupancy, kernel launches;
//   - streams.cc: streams and events.
// Thread safety: one lock around every entry point.
#include "emulated_driver.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include <sys/mman.h>
#include <unistd.h>

namespace gpool::remote::emulated_driver {

CUresult NotImplemented(const char* call, const std::string& what) {
  return Fail(CUDA_ERROR_NOT_SUPPORTED, call, "{} is not implemented by the emulated CUDA driver",
              what);
}

State& S() {
  static State* s = new State;  // never destroyed: the server's worker exits with it loaded
  return *s;
}
namespace {
thread_local Ctx* current = nullptr;
}  // namespace
Ctx*& Current() { return current; }

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

namespace {

constexpr uint64_t kAlign = 256;

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

}  // namespace

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

Func* LiveFunc(CUfunction f) {
  auto* fn = reinterpret_cast<Func*>(f);
  return S().funcs.count(fn) ? fn : nullptr;
}

Event* LiveEvent(CUevent e) {
  auto* ev = reinterpret_cast<Event*>(e);
  return Live(S().events, ev) ? ev : nullptr;
}

}  // namespace gpool::remote::emulated_driver
