// The real-GPU backend: the CUDA driver API, loaded with dlopen("libcuda.so.1") in the session's
// worker process (after fork, so each session has its own contexts). Modules are loaded from the
// fatbin the program shipped; kernel parameter layouts come from cuFuncGetParamInfo; launches pass
// the client's packed parameter buffer through CU_LAUNCH_PARAM_BUFFER_POINTER, so structs by
// value arrive byte-exact. Host-to-device copies go through two pinned staging buffers, so the
// network receive of one chunk overlaps the DMA of the previous one; device-to-host replies
// through two others, so the DMA of the next chunk overlaps the network send of this one.
//
// Kernel time for compute shares (ShareArbiter): each launch is bracketed by two timing events
// on its stream, taken from a per-device pool so the launch path creates nothing. The pairs wait
// in a FIFO per device; TakeKernelTime() (the session calls it before each admission) harvests
// completed pairs from the front with cuEventQuery, never blocking, and returns the sum of their
// cuEventElapsedTime. So that the arbiter's pacing bites, a session keeps at most
// kMaxTimedInFlight timed launches queued per device: beyond that Launch first waits for the
// oldest (cuEventSynchronize) and reports its time through *ns. Limits: harvesting stops at the
// first pair not yet done, so a long kernel on one stream delays (never loses) the charge of
// later kernels on other streams; elapsed time is wall time between the events, so while the GPU
// time-slices between the contexts of several sessions each kernel is charged the time it was
// resident, not only its own share of it (the achieved split then errs toward the larger share:
// scripts/gpu-check.sh prints it); a kernel that faults is charged nothing.
//
// Driver entry points: the table in cuda_driver.h (exported, versioned symbol names), checked
// against cuda.h at build time by cuda_driver_check.cc, as are the CUresult, flag and attribute
// numbers passed through to the program unchanged. libcuda.so.1 is looked for on the loader path,
// then in the usual driver folders ($GPOOL_LIBCUDA overrides).
//
// Limits: the primary context of each device, retained on first use and never released (the
// worker process exits with its session); CUDA_VISIBLE_DEVICES applies as for any CUDA program.
// Tested here on the emulated CUDA driver (tests/remote/emulated_driver, a stand-in for
// libcuda.so.1 that queues work and runs it at the next synchronizing call: the logic and the
// waits, not DMA overlap or the real driver's errors); scripts/gpu-check.sh runs it on a GPU.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "remote/server/backend.h"

#ifdef GPOOL_HAVE_CUDA_H
#include <cuda.h>

#include "remote/server/cuda_driver.h"
#endif

namespace gpool::remote::server {

#ifndef GPOOL_HAVE_CUDA_H
StatusOr<std::unique_ptr<Backend>> MakeCudaBackend() {
  return Status::Unimplemented("this gpool was built without the CUDA headers (cuda.h): "
                               "the cuda backend is unavailable");
}
#else
namespace {

// libcuda.so.1 as the loader finds it, else where driver installs put it (containers mount the
// host's driver under /usr/local/nvidia, often without a loader path to it). $GPOOL_LIBCUDA, when
// set, is the only one tried.
constexpr const char* kLibcudaPaths[] = {"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
                                         "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                         "/usr/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"};

// The driver entry points of cuda_driver.h, resolved with dlsym by their exported (versioned)
// names. Member names are the macro-expanded ones (cuMemAlloc_v2), like every call site's.
struct Driver {
#define GPOOL_CU_FIELD(name, symbol, fallback, ...) CUresult (*name)(__VA_ARGS__) = nullptr;
  GPOOL_CU_FUNCS(GPOOL_CU_FIELD)
#undef GPOOL_CU_FIELD
  void* handle = nullptr;
  std::string path;

  Status Load() {
    std::string tried;
    const char* env = std::getenv("GPOOL_LIBCUDA");
    std::vector<const char*> paths;
    if (env && *env) {
      paths.push_back(env);
    } else {
      paths.assign(std::begin(kLibcudaPaths), std::end(kLibcudaPaths));
    }
    for (const char* p : paths) {
      handle = dlopen(p, RTLD_NOW | RTLD_LOCAL);
      if (handle) {
        path = p;
        break;
      }
      const char* e = dlerror();
      tried += fmt::format("{}{}", tried.empty() ? "" : "; ", e ? e : p);
    }
    if (!handle) {
      return Status::Unavailable(fmt::format(
          "cannot load the CUDA driver (no NVIDIA driver here? set GPOOL_LIBCUDA=PATH): {}", tried));
    }
    std::string missing;
    auto sym = [&](const char* symbol, const char* fallback) -> void* {
      if (void* f = dlsym(handle, symbol)) return f;
      if (fallback) {
        if (void* f = dlsym(handle, fallback)) return f;
      }
      // Optional: a driver older than CUDA 12.4 has no cuFuncGetParamInfo; GetParamInfo then
      // says so and the client lays the parameters out from the fatbin itself.
      if (std::strcmp(symbol, "cuFuncGetParamInfo") == 0) return nullptr;
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", symbol);
      return nullptr;
    };
#define GPOOL_CU_LOAD(name, symbol, fallback, ...) \
  name = reinterpret_cast<CUresult (*)(__VA_ARGS__)>(sym(symbol, fallback));
    GPOOL_CU_FUNCS(GPOOL_CU_LOAD)
#undef GPOOL_CU_LOAD
    if (!missing.empty()) {
      int version = 0;
      if (cuDriverGetVersion) cuDriverGetVersion(&version);
      return Status::Unavailable(fmt::format(
          "{} (driver for CUDA {}.{}) lacks {}: gpool was built against CUDA {}.{}; update the "
          "NVIDIA driver", path, version / 1000, version % 1000 / 10, missing, CUDA_VERSION / 1000,
          CUDA_VERSION % 1000 / 10));
    }
    return Status::Ok();
  }
};

constexpr size_t kStagingBytes = size_t{4} << 20;
// Timed launches one session may have queued per device before Launch waits for the oldest: deep
// enough to hide launch latency for short kernels, short enough that a backlogged session's
// uncharged GPU work stays small against the arbiter's 2 ms slice for kernels of ~100 us.
constexpr size_t kMaxTimedInFlight = 16;

class CudaBackend final : public Backend {
 private:
  struct StagingPair;

 public:
  explicit CudaBackend(Driver d) : cu_(d) {}

  Status Init() {
    if (CUresult r = cu_.cuInit(0); r != CUDA_SUCCESS) return Status::Unavailable(Msg("cuInit", r));
    int n = 0;
    if (CUresult r = cu_.cuDeviceGetCount(&n); r != CUDA_SUCCESS) {
      return Status::Unavailable(Msg("cuDeviceGetCount", r));
    }
    // Contexts are retained on a device's first use (Use), not here: on a host with eight GPUs a
    // session that uses one should not hold a context (and its memory) on the other seven.
    for (int i = 0; i < n; ++i) {
      Dev d;
      if (CUresult r = cu_.cuDeviceGet(&d.dev, i); r != CUDA_SUCCESS) return Status::Unavailable(Msg("cuDeviceGet", r));
      devs_.push_back(d);
    }
    timing_.resize(devs_.size());
    staging_.resize(devs_.size());
    read_staging_.resize(devs_.size());
    return Status::Ok();
  }

  std::string_view name() const override { return "cuda"; }
  int DeviceCount() override { return static_cast<int>(devs_.size()); }

  std::string Msg(const char* call, CUresult r) {
    const char* s = nullptr;
    if (cu_.cuGetErrorString) cu_.cuGetErrorString(r, &s);
    if (!s && r == CUDA_ERROR_STUB_LIBRARY) s = "the CUDA toolkit's stub libcuda, not a driver";
    return fmt::format("{}: {} ({})", call, s ? s : "unknown error", static_cast<int>(r));
  }
  // A driver error as the runtime's cudaError_t: the numbers agree (cuda_driver_check.cc holds
  // that for every CUresult the backend can see) except the two that have no runtime twin.
  Result R(const char* call, CUresult r) {
    if (r == CUDA_SUCCESS) return {};
    int32_t code = static_cast<int32_t>(r);
    if (r == CUDA_ERROR_CONTEXT_ALREADY_CURRENT || code == 916 /* CUDA_ERROR_KEY_ROTATION */) {
      code = kErrUnknown;
    }
    return Err(code, Msg(call, r));
  }
  Result Use(uint32_t dev) {
    if (dev >= devs_.size()) return Err(kErrInvalidDevice, fmt::format("device {} does not exist", dev));
    if (!devs_[dev].ctx) {
      if (Result r = R("cuDevicePrimaryCtxRetain", cu_.cuDevicePrimaryCtxRetain(&devs_[dev].ctx, devs_[dev].dev)); !r.ok()) {
        r.message += fmt::format(" (device {})", dev);
        return r;
      }
    }
    if (dev != current_) {
      if (Result r = R("cuCtxSetCurrent", cu_.cuCtxSetCurrent(devs_[dev].ctx)); !r.ok()) return r;
      current_ = dev;
    }
    return {};
  }
  // The device owning a device pointer (allocations and module globals are tracked).
  uint32_t DevOf(uint64_t p) {
    auto it = owner_.upper_bound(p);
    if (it != owner_.begin()) {
      --it;
      if (p < it->first + it->second.first) return it->second.second;
    }
    return current_ == UINT32_MAX ? 0 : current_;
  }
  // A copy that starts inside a tracked allocation must end inside it, as the emulated backend
  // demands (the driver would let it run on into the next allocation of the same 2 MiB page).
  // Addresses outside every tracked range are left to the driver to judge.
  Result CheckRange(uint64_t p, uint64_t n, const char* what) {
    auto it = owner_.upper_bound(p);
    if (n == 0 || it == owner_.begin()) return {};
    --it;
    uint64_t end = it->first + it->second.first;
    // Mappings (cuMemMap) back to back are one range, as on a GPU.
    for (auto next = std::next(it); vmm_maps_.count(it->first) && next != owner_.end() &&
                                    next->first == end && vmm_maps_.count(next->first);
         it = next++) {
      end += next->second.first;
    }
    if (p < end && n > end - p) {
      return Err(kErrInvalidValue, fmt::format("{}: device range 0x{:x}+{} runs past the end of "
                                               "its allocation 0x{:x}+{}", what, p, n, it->first,
                                               it->second.first));
    }
    return {};
  }
  Result Stream(uint64_t id, uint32_t dev, CUstream* s) {
    if (id == 0) {
      *s = nullptr;
      return Use(dev);
    }
    auto it = streams_.find(id);
    if (it == streams_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown stream {}", id));
    *s = it->second.second;
    return Use(it->second.first);
  }

  // Device queries need no context: a program that only lists the GPUs makes none.
  Result Exists(uint32_t dev) {
    if (dev >= devs_.size()) return Err(kErrInvalidDevice, fmt::format("device {} does not exist", dev));
    return {};
  }
  Result GetProps(uint32_t dev, proto::DeviceProps* p) override {
    if (Result r = Exists(dev); !r.ok()) return r;
    char name[256] = {0};
    cu_.cuDeviceGetName(name, sizeof name - 1, devs_[dev].dev);
    p->name = name;
    CUuuid uuid{};
    cu_.cuDeviceGetUuid(&uuid, devs_[dev].dev);
    p->uuid.assign(uuid.bytes, 16);
    size_t total = 0;
    cu_.cuDeviceTotalMem(&total, devs_[dev].dev);
    p->total_global_mem = total;
    auto a = [&](CUdevice_attribute attr) {
      int v = 0;
      cu_.cuDeviceGetAttribute(&v, attr, devs_[dev].dev);
      return v;
    };
    p->shared_mem_per_block = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    p->shared_mem_per_block_optin = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
    p->shared_mem_per_mp = a(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
    p->mem_pitch = a(CU_DEVICE_ATTRIBUTE_MAX_PITCH);
    p->total_const_mem = a(CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
    p->texture_alignment = a(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
    p->regs_per_block = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    p->regs_per_mp = a(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
    p->warp_size = a(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    p->max_threads_per_block = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    p->max_threads_dim = {a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
                          a(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)};
    p->max_grid_size = {a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
                        a(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)};
    p->clock_rate = a(CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    p->major = a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    p->minor = a(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    p->multi_processor_count = a(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
    p->integrated = a(CU_DEVICE_ATTRIBUTE_INTEGRATED);
    p->can_map_host_memory = a(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY);
    p->concurrent_kernels = a(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS);
    p->ecc_enabled = a(CU_DEVICE_ATTRIBUTE_ECC_ENABLED);
    p->pci_bus_id = a(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
    p->pci_device_id = a(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
    p->pci_domain_id = a(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
    p->async_engine_count = a(CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
    p->unified_addressing = a(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
    p->memory_clock_rate = a(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE);
    p->memory_bus_width = a(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
    p->l2_cache_size = a(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
    p->max_threads_per_mp = a(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
    p->managed_memory = a(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY);
    p->max_blocks_per_mp = a(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
    return {};
  }
  Result GetAttribute(uint32_t dev, int32_t attr, int32_t* value) override {
    if (Result r = Exists(dev); !r.ok()) return r;
    int v = 0;
    Result r = R("cuDeviceGetAttribute", cu_.cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(attr), devs_[dev].dev));
    *value = v;
    return r;
  }
  Result MemGetInfo(uint32_t dev, uint64_t* free, uint64_t* total) override {
    if (Result r = Use(dev); !r.ok()) return r;
    size_t f = 0, t = 0;
    Result r = R("cuMemGetInfo", cu_.cuMemGetInfo(&f, &t));
    *free = f;
    *total = t;
    return r;
  }
  Result Malloc(uint32_t dev, uint64_t size, uint64_t* ptr) override {
    if (Result r = Use(dev); !r.ok()) return r;
    CUdeviceptr p = 0;
    // The driver's code as it is (CUDA_ERROR_OUT_OF_MEMORY is cudaErrorMemoryAllocation): a
    // context with a sticky fault refuses with that fault, which is what the program must see.
    if (Result r = R("cuMemAlloc", cu_.cuMemAlloc(&p, std::max<uint64_t>(size, 1))); !r.ok()) {
      return r;
    }
    *ptr = p;
    owner_[p] = {std::max<uint64_t>(size, 1), dev};
    return {};
  }
  Result Free(uint64_t ptr) override {
    auto it = owner_.find(ptr);
    if (it == owner_.end()) return Err(kErrInvalidDevicePointer, fmt::format("cudaFree(0x{:x}): not an allocation", ptr));
    if (Result r = Use(it->second.second); !r.ok()) return r;
    // Forgotten only once freed: a refused free (a module variable's address, a faulted context)
    // leaves the range tracked.
    if (Result r = R("cuMemFree", cu_.cuMemFree(ptr)); !r.ok()) return r;
    owner_.erase(it);
    return {};
  }
  // The staging pair of the device whose context is current (`dev`): the buffers and their
  // events belong to that context, since an event can be recorded only on a stream of its own
  // context. The buffers are PORTABLE anyway, so a copy never runs from memory that another
  // context sees as pageable.
  // `reads`: the pair device-to-host reads are pipelined through (StartD2H), apart from the
  // writes' pair so that each keeps its own order.
  Result GetStaging(uint32_t dev, StagingPair** out, bool reads = false) {
    StagingPair& st = (reads ? read_staging_ : staging_)[dev];
    *out = &st;
    if (st.buf[0]) return {};
    for (int i = 0; i < 2; ++i) {
      if (Result r = R("cuMemHostAlloc", cu_.cuMemHostAlloc(&st.buf[i], kStagingBytes, CU_MEMHOSTALLOC_PORTABLE)); !r.ok()) return r;
      if (Result r = R("cuEventCreate", cu_.cuEventCreate(&st.done[i], CU_EVENT_DISABLE_TIMING)); !r.ok()) return r;
    }
    return {};
  }
  Result CopyH2D(uint64_t dst, std::span<const std::byte> src, uint64_t stream) override {
    if (Result r = CheckRange(dst, src.size(), "host-to-device copy"); !r.ok()) return r;
    CUstream s = nullptr;
    if (Result r = Stream(stream, DevOf(dst), &s); !r.ok()) return r;
    StagingPair* st = nullptr;
    if (Result r = GetStaging(current_, &st); !r.ok()) return r;
    for (size_t off = 0; off < src.size(); off += kStagingBytes) {
      size_t n = std::min(kStagingBytes, src.size() - off);
      int i = st->next;
      st->next ^= 1;
      // Wait until this buffer's previous DMA is done, refill it, and queue its copy.
      if (Result r = R("cuEventSynchronize", cu_.cuEventSynchronize(st->done[i])); !r.ok()) return r;
      std::memcpy(st->buf[i], src.data() + off, n);
      if (Result r = R("cuMemcpyHtoDAsync", cu_.cuMemcpyHtoDAsync(dst + off, st->buf[i], n, s)); !r.ok()) return r;
      if (Result r = R("cuEventRecord", cu_.cuEventRecord(st->done[i], s)); !r.ok()) return r;
    }
    return {};
  }
  // A chunk is received into the next staging buffer of its device (once that buffer's previous
  // DMA is done) and copied from there, saving CopyH2D's memcpy into staging. The destination is
  // checked first, as CopyH2D does; nothing is written to device memory before CommitH2D.
  std::span<std::byte> H2DTarget(uint64_t dst, uint64_t size, uint64_t stream) override {
    CUstream s = nullptr;
    StagingPair* st = nullptr;
    if (size > kStagingBytes || !CheckRange(dst, size, "").ok() ||
        !Stream(stream, DevOf(dst), &s).ok() || !GetStaging(current_, &st).ok()) {
      return {};
    }
    if (!R("cuEventSynchronize", cu_.cuEventSynchronize(st->done[st->next])).ok()) return {};
    target_ = st;
    return {static_cast<std::byte*>(st->buf[st->next]), size};
  }
  Result CommitH2D(uint64_t dst, std::span<const std::byte> data, uint64_t stream) override {
    StagingPair* st = target_;
    target_ = nullptr;
    if (st == nullptr || data.data() != static_cast<const std::byte*>(st->buf[st->next])) {
      return CopyH2D(dst, data, stream);
    }
    CUstream s = nullptr;
    if (Result r = Stream(stream, DevOf(dst), &s); !r.ok()) return r;
    int i = st->next;
    st->next ^= 1;
    if (Result r = R("cuMemcpyHtoDAsync", cu_.cuMemcpyHtoDAsync(dst, st->buf[i], data.size(), s)); !r.ok()) return r;
    return R("cuEventRecord", cu_.cuEventRecord(st->done[i], s));
  }
  Result CopyD2H(std::byte* dst, uint64_t src, uint64_t size, uint64_t stream) override {
    if (Result r = CheckRange(src, size, "device-to-host copy"); !r.ok()) return r;
    CUstream s = nullptr;
    if (Result r = Stream(stream, DevOf(src), &s); !r.ok()) return r;
    if (Result r = R("cuMemcpyDtoHAsync", cu_.cuMemcpyDtoHAsync(dst, src, size, s)); !r.ok()) return r;
    return R("cuStreamSynchronize", cu_.cuStreamSynchronize(s));
  }
  // A chunk of a device-to-host reply is read into staging buffer `slot` of its device's read
  // pair by DMA on its stream; the session starts the next chunk's read before it sends this one
  // (session.cc, ServeReads), so the DMA of one chunk overlaps the network send of the previous.
  bool StartD2H(uint64_t src, uint64_t size, uint64_t stream, int slot) override {
    CUstream s = nullptr;
    StagingPair* st = nullptr;
    if (size == 0 || size > kStagingBytes || !CheckRange(src, size, "").ok() ||
        !Stream(stream, DevOf(src), &s).ok() || !GetStaging(current_, &st, /*reads=*/true).ok()) {
      return false;
    }
    const int i = slot & 1;
    Read& rd = reads_[i];
    rd = Read{.pair = st, .dev = current_, .size = size, .r = {}};
    rd.r = R("cuMemcpyDtoHAsync", cu_.cuMemcpyDtoHAsync(st->buf[i], src, size, s));
    if (rd.r.ok()) rd.r = R("cuEventRecord", cu_.cuEventRecord(st->done[i], s));
    return true;
  }
  Result FinishD2H(int slot, std::span<const std::byte>* data) override {
    const int i = slot & 1;
    Read rd = std::exchange(reads_[i], Read{});
    *data = {};
    if (rd.pair == nullptr) return Err(kErrUnknown, fmt::format("FinishD2H: no read in slot {}", i));
    if (!rd.r.ok()) return rd.r;
    if (Result r = Use(rd.dev); !r.ok()) return r;
    if (Result r = R("cuEventSynchronize", cu_.cuEventSynchronize(rd.pair->done[i])); !r.ok()) return r;
    *data = {static_cast<const std::byte*>(rd.pair->buf[i]), rd.size};
    return {};
  }
  std::span<const std::byte> HostView(uint64_t, uint64_t) override { return {}; }
  Result CopyD2D(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) override {
    if (Result r = CheckRange(src, size, "device-to-device copy (source)"); !r.ok()) return r;
    if (Result r = CheckRange(dst, size, "device-to-device copy (destination)"); !r.ok()) return r;
    CUstream s = nullptr;
    if (Result r = Stream(stream, DevOf(src), &s); !r.ok()) return r;
    return R("cuMemcpyDtoDAsync", cu_.cuMemcpyDtoDAsync(dst, src, size, s));
  }
  Result Memset(uint64_t dst, uint8_t value, uint64_t size, uint64_t stream) override {
    if (Result r = CheckRange(dst, size, "memset"); !r.ok()) return r;
    CUstream s = nullptr;
    if (Result r = Stream(stream, DevOf(dst), &s); !r.ok()) return r;
    return R("cuMemsetD8Async", cu_.cuMemsetD8Async(dst, value, size, s));
  }
  Result Memset2D(uint64_t dst, uint64_t pitch, uint8_t value, uint64_t width, uint64_t height,
                  uint64_t stream) override {
    if (width == 0 || height == 0) return {};
    if (pitch < width) return Err(kErrInvalidValue, "2-D memset: pitch < width");
    if (height - 1 > (UINT64_MAX - width) / pitch) {
      return Err(kErrInvalidValue, fmt::format("2-D memset: {} rows of pitch {} overflow", height, pitch));
    }
    if (Result r = CheckRange(dst, (height - 1) * pitch + width, "2-D memset"); !r.ok()) return r;
    CUstream s = nullptr;
    if (Result r = Stream(stream, DevOf(dst), &s); !r.ok()) return r;
    return R("cuMemsetD2D8Async", cu_.cuMemsetD2D8Async(dst, pitch, value, width, height, s));
  }
  Result Copy2D(const proto::Memcpy2D& c, std::byte* host_out) override {
    auto kind = static_cast<proto::CopyKind>(c.kind);
    CUstream s = nullptr;
    uint64_t devp = kind == proto::CopyKind::kHostToDevice ? c.dst : c.src;
    if (c.width == 0 || c.height == 0) return {};
    // Each device side's rows span (height-1)*pitch + width bytes, which must stay inside one
    // allocation (as on the emulated backend, which checks every row).
    auto span = [&](uint64_t pitch, const char* what, uint64_t* bytes) -> Result {
      if (pitch < c.width) return Err(kErrInvalidValue, fmt::format("2-D copy: {} pitch < width", what));
      if (c.height - 1 > (UINT64_MAX - c.width) / pitch) {
        return Err(kErrInvalidValue, fmt::format("2-D copy: {} rows overflow", what));
      }
      *bytes = (c.height - 1) * pitch + c.width;
      return {};
    };
    uint64_t bytes = 0;
    if (kind != proto::CopyKind::kHostToDevice) {
      if (Result r = span(c.spitch, "source", &bytes); !r.ok()) return r;
      if (Result r = CheckRange(c.src, bytes, "2-D copy (source)"); !r.ok()) return r;
    }
    if (kind != proto::CopyKind::kDeviceToHost) {
      if (Result r = span(c.dpitch, "destination", &bytes); !r.ok()) return r;
      if (Result r = CheckRange(c.dst, bytes, "2-D copy (destination)"); !r.ok()) return r;
    }
    if (Result r = Stream(c.stream, DevOf(devp), &s); !r.ok()) return r;
    CUDA_MEMCPY2D m{};
    m.WidthInBytes = c.width;
    m.Height = c.height;
    if (kind == proto::CopyKind::kHostToDevice) {
      if (c.data.size() != c.width * c.height) return Err(kErrInvalidValue, "2-D copy: packed size");
      m.srcMemoryType = CU_MEMORYTYPE_HOST;
      m.srcHost = c.data.data();
      m.srcPitch = c.width;
    } else {
      m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      m.srcDevice = c.src;
      m.srcPitch = c.spitch;
    }
    if (kind == proto::CopyKind::kDeviceToHost) {
      m.dstMemoryType = CU_MEMORYTYPE_HOST;
      m.dstHost = host_out;
      m.dstPitch = c.width;
    } else {
      m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      m.dstDevice = c.dst;
      m.dstPitch = c.dpitch;
    }
    if (Result r = R("cuMemcpy2DAsync", cu_.cuMemcpy2DAsync(&m, s)); !r.ok()) return r;
    // Device to device stays queued on its stream like CopyD2D; with host memory on one side (the
    // message buffer, the reply's staging) the copy must be done before that memory is reused.
    if (kind == proto::CopyKind::kDeviceToDevice) return {};
    return R("cuStreamSynchronize", cu_.cuStreamSynchronize(s));
  }

  Result LoadModule(uint64_t module, std::span<const std::byte> image) override {
    images_[module].assign(image.begin(), image.end());
    return {};
  }
  Result Module(uint64_t module, uint32_t dev, CUmodule* out) {
    auto key = std::make_pair(module, dev);
    auto it = loaded_.find(key);
    if (it != loaded_.end()) {
      *out = it->second;
      return Use(dev);
    }
    auto img = images_.find(module);
    if (img == images_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown module {}", module));
    if (Result r = Use(dev); !r.ok()) return r;
    if (Result r = R("cuModuleLoadData", cu_.cuModuleLoadData(out, img->second.data())); !r.ok()) return r;
    loaded_[key] = *out;
    return {};
  }
  Result RegisterFunction(uint64_t module, uint64_t func, const std::string& name) override {
    if (!images_.count(module)) return Err(kErrInvalidResourceHandle, fmt::format("function {}: unknown module", name));
    funcs_[func] = {module, name};
    return {};
  }
  Result RegisterVar(uint64_t module, uint64_t var, const std::string& name, uint64_t, bool) override {
    if (!images_.count(module)) return Err(kErrInvalidResourceHandle, fmt::format("variable {}: unknown module", name));
    vars_[var] = {module, name};
    return {};
  }
  // Every device's copy is unloaded (after that device's queued work, which may use its kernels
  // and variables); its functions and variables die with it.
  Result UnloadModule(uint64_t module) override {
    Result first;
    std::set<uint32_t> devs;
    for (const auto& [key, m] : loaded_) {
      if (key.first == module) devs.insert(key.second);
    }
    for (uint32_t dev : devs) {
      Result r = UnloadCopy(module, dev);
      if (first.ok()) first = std::move(r);
    }
    std::erase_if(funcs_, [&](const auto& kv) { return kv.second.first == module; });
    std::erase_if(vars_, [&](const auto& kv) { return kv.second.first == module; });
    globals_.erase(module);
    images_.erase(module);
    return first;
  }
  // Unloads `dev`'s copy of `module` once the device's queued work is done, and drops what was
  // resolved in it: its functions' handles and its variables' device ranges, which later
  // allocations may reuse (a stale range would misjudge CheckRange/DevOf). The image and the
  // registrations stay: Module() loads it again on next use.
  Result UnloadCopy(uint64_t module, uint32_t dev) {
    auto it = loaded_.find({module, dev});
    if (it == loaded_.end()) return {};
    Result r = Use(dev);
    if (r.ok()) r = R("cuCtxSynchronize", cu_.cuCtxSynchronize());
    if (Result u = R("cuModuleUnload", cu_.cuModuleUnload(it->second)); r.ok()) r = std::move(u);
    loaded_.erase(it);
    std::erase_if(cufuncs_, [&](const auto& kv) {
      auto f = funcs_.find(kv.first.first);
      return kv.first.second == dev && f != funcs_.end() && f->second.first == module;
    });
    std::set<uint64_t>& globals = globals_[module];
    std::erase_if(globals, [&](uint64_t p) {
      auto o = owner_.find(p);
      if (o == owner_.end() || o->second.second != dev) return false;
      owner_.erase(o);
      return true;
    });
    return r;
  }
  Result Function(uint64_t func, uint32_t dev, CUfunction* out) {
    auto key = std::make_pair(func, dev);
    auto it = cufuncs_.find(key);
    if (it != cufuncs_.end()) {
      *out = it->second;
      return Use(dev);
    }
    auto f = funcs_.find(func);
    if (f == funcs_.end()) return Err(kErrInvalidDeviceFunction, fmt::format("unknown function id {}", func));
    CUmodule m = nullptr;
    if (Result r = Module(f->second.first, dev, &m); !r.ok()) return r;
    if (Result r = R("cuModuleGetFunction", cu_.cuModuleGetFunction(out, m, f->second.second.c_str())); !r.ok()) {
      // The runtime says cudaErrorInvalidDeviceFunction for a kernel the image lacks.
      if (r.code == kErrNotFound) r.code = kErrInvalidDeviceFunction;
      r.message += " (kernel " + f->second.second + ")";
      return r;
    }
    cufuncs_[key] = *out;
    return {};
  }
  uint32_t Cur() { return current_ == UINT32_MAX ? 0 : current_; }
  Result GetParamInfo(uint64_t func, proto::ParamInfo* out) override {
    CUfunction f = nullptr;
    if (Result r = Function(func, Cur(), &f); !r.ok()) return r;
    if (cu_.cuFuncGetParamInfo == nullptr) {
      return Err(kErrNotSupported,
                 fmt::format("kernel {}: cuFuncGetParamInfo is not in this driver ({}; CUDA 12.4 "
                             "added it)", funcs_[func].second, cu_.path));
    }
    // Under lazy loading (CUDA_MODULE_LOADING=LAZY, the default) a function may not be loaded
    // yet; an attribute query loads it, so that "index out of range" below can only mean the
    // end of the list, never "not loaded" (a kernel silently taken for one without parameters).
    int ignored = 0;
    if (Result r = R("cuFuncGetAttribute", cu_.cuFuncGetAttribute(&ignored, CU_FUNC_ATTRIBUTE_NUM_REGS, f)); !r.ok()) {
      return r;
    }
    for (size_t i = 0;; ++i) {
      size_t off = 0, size = 0;
      CUresult r = cu_.cuFuncGetParamInfo(f, i, &off, &size);
      if (r == CUDA_ERROR_INVALID_VALUE) break;
      if (r != CUDA_SUCCESS) return R("cuFuncGetParamInfo", r);
      out->params.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(size)});
    }
    return {};
  }
  // In `dev`'s own copy of the module (each context loads one, with its own variables), whatever
  // device the session used last.
  Result GetSymbol(uint64_t var, uint32_t dev, uint64_t* ptr, uint64_t* size) override {
    auto v = vars_.find(var);
    if (v == vars_.end()) return Err(kErrInvalidValue, fmt::format("unknown symbol id {}", var));
    CUmodule m = nullptr;
    if (Result r = Module(v->second.first, dev, &m); !r.ok()) return r;
    CUdeviceptr p = 0;
    size_t n = 0;
    if (Result r = R("cuModuleGetGlobal", cu_.cuModuleGetGlobal(&p, &n, m, v->second.second.c_str())); !r.ok()) {
      if (r.code == kErrNotFound) r.code = kErrInvalidSymbol;  // as cudaGetSymbolAddress says it
      r.message += " (symbol " + v->second.second + ")";
      return r;
    }
    *ptr = p;
    *size = n;
    owner_[p] = {std::max<size_t>(n, 1), dev};
    globals_[v->second.first].insert(p);
    return {};
  }
  Result FuncAttributes(uint64_t func, proto::FuncAttrs* out) override {
    CUfunction f = nullptr;
    if (Result r = Function(func, Cur(), &f); !r.ok()) return r;
    auto a = [&](CUfunction_attribute attr) {
      int v = 0;
      cu_.cuFuncGetAttribute(&v, attr, f);
      return v;
    };
    out->shared_size_bytes = a(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
    out->const_size_bytes = a(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
    out->local_size_bytes = a(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
    out->max_threads_per_block = a(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    out->num_regs = a(CU_FUNC_ATTRIBUTE_NUM_REGS);
    out->ptx_version = a(CU_FUNC_ATTRIBUTE_PTX_VERSION);
    out->binary_version = a(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
    out->max_dynamic_shared_size_bytes = a(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
    return {};
  }
  // The settable cudaFuncAttribute numbers equal CUfunction_attribute's (cuda_driver_check.cc).
  Result FuncSetAttribute(uint64_t func, uint32_t dev, int32_t attr, int32_t value) override {
    CUfunction f = nullptr;
    if (Result r = Function(func, dev, &f); !r.ok()) return r;
    return R("cuFuncSetAttribute",
             cu_.cuFuncSetAttribute(f, static_cast<CUfunction_attribute>(attr), value));
  }
  Result Occupancy(uint64_t func, int32_t block_size, uint64_t shmem, int32_t* blocks) override {
    CUfunction f = nullptr;
    if (Result r = Function(func, Cur(), &f); !r.ok()) return r;
    int n = 0;
    Result r = R("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
                 cu_.cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f, block_size, shmem, 0));
    *blocks = n;
    return r;
  }
  Result Launch(const proto::Launch& l, uint64_t* ns) override { return LaunchOn(l, ns, false); }
  // cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_COOPERATIVE (it takes the packed parameter buffer,
  // which cuLaunchCooperativeKernel does not). Too large a grid fails as in CUDA
  // (cudaErrorCooperativeLaunchTooLarge), at the next synchronizing call.
  Result LaunchCooperative(const proto::Launch& l, uint64_t* ns) override {
    return LaunchOn(l, ns, true);
  }
  Result LaunchOn(const proto::Launch& l, uint64_t* ns, bool cooperative) {
    *ns = 0;
    uint32_t dev = l.device;
    if (l.stream != 0) {
      auto it = streams_.find(l.stream);
      if (it == streams_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown stream {}", l.stream));
      dev = it->second.first;
    }
    CUfunction f = nullptr;
    if (Result r = Function(l.func, dev, &f); !r.ok()) return r;
    CUstream s = nullptr;
    if (Result r = Stream(l.stream, dev, &s); !r.ok()) return r;
    size_t size = l.params.size();
    void* buf = const_cast<std::byte*>(l.params.data());
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     CU_LAUNCH_PARAM_END};
    DevTiming& t = timing_[dev];
    if (t.pending.size() >= kMaxTimedInFlight) {
      // Too much uncharged work queued: wait for the oldest timed launch, then charge it.
      if (Result r = R("cuEventSynchronize", cu_.cuEventSynchronize(t.pending.front().end)); !r.ok()) {
        DropTimed(t);
        return r;
      }
      *ns = Harvest(t);
    }
    Timed timed{};
    bool timing = TimingEvent(dev, &timed.start).ok() && TimingEvent(dev, &timed.end).ok() &&
                  cu_.cuEventRecord(timed.start, s) == CUDA_SUCCESS;
    Result r;
    if (cooperative) {
      CUlaunchAttribute attr{};
      attr.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attr.value.cooperative = 1;
      CUlaunchConfig c{};
      c.gridDimX = l.grid[0];
      c.gridDimY = l.grid[1];
      c.gridDimZ = l.grid[2];
      c.blockDimX = l.block[0];
      c.blockDimY = l.block[1];
      c.blockDimZ = l.block[2];
      c.sharedMemBytes = l.shmem;
      c.hStream = s;
      c.attrs = &attr;
      c.numAttrs = 1;
      r = R("cuLaunchKernelEx", cu_.cuLaunchKernelEx(&c, f, nullptr, size ? extra : nullptr));
    } else {
      r = R("cuLaunchKernel", cu_.cuLaunchKernel(f, l.grid[0], l.grid[1], l.grid[2], l.block[0],
                                                 l.block[1], l.block[2], l.shmem, s, nullptr,
                                                 size ? extra : nullptr));
    }
    if (!r.ok()) r.message += LaunchDescription(l);
    if (timing && r.ok() && cu_.cuEventRecord(timed.end, s) == CUDA_SUCCESS) {
      t.pending.push_back(timed);
    } else {
      // Untimed (event trouble or a failed launch): the events go back unused, the launch is
      // charged nothing. Recording an event again later simply moves it.
      if (timed.start) t.pool.push_back(timed.start);
      if (timed.end) t.pool.push_back(timed.end);
    }
    return r;
  }
  // " (kernel NAME, grid XxYxZ, block XxYxZ, N bytes of dynamic shared memory)": a refused
  // launch names what was asked, since the driver's error alone (often just "invalid argument")
  // does not say which kernel or which of its settings.
  std::string LaunchDescription(const proto::Launch& l) const {
    auto f = funcs_.find(l.func);
    return fmt::format(" (kernel {}, grid {}x{}x{}, block {}x{}x{}, {} bytes of dynamic shared "
                       "memory)",
                       f == funcs_.end() ? "?" : f->second.second, l.grid[0], l.grid[1],
                       l.grid[2], l.block[0], l.block[1], l.block[2], l.shmem);
  }
  uint64_t TakeKernelTime(uint32_t dev) override {
    if (dev >= timing_.size() || timing_[dev].pending.empty()) return 0;
    if (Result r = Use(dev); !r.ok()) return 0;
    return Harvest(timing_[dev]);
  }
  Result StreamCreate(uint32_t dev, uint64_t id, uint32_t flags, int32_t priority) override {
    if (Result r = Use(dev); !r.ok()) return r;
    CUstream s = nullptr;
    if (Result r = R("cuStreamCreateWithPriority", cu_.cuStreamCreateWithPriority(&s, flags, priority)); !r.ok()) return r;
    streams_[id] = {dev, s};
    return {};
  }
  Result StreamDestroy(uint64_t id) override {
    auto it = streams_.find(id);
    if (it == streams_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown stream {}", id));
    (void)Use(it->second.first);
    Result r = R("cuStreamDestroy", cu_.cuStreamDestroy(it->second.second));
    streams_.erase(it);
    return r;
  }
  Result StreamSync(uint32_t dev, uint64_t id) override {
    CUstream s = nullptr;
    if (Result r = Stream(id, dev, &s); !r.ok()) return r;
    return R("cuStreamSynchronize", cu_.cuStreamSynchronize(s));
  }
  Result StreamQuery(uint32_t dev, uint64_t id) override {
    CUstream s = nullptr;
    if (Result r = Stream(id, dev, &s); !r.ok()) return r;
    CUresult q = cu_.cuStreamQuery(s);
    return q == CUDA_ERROR_NOT_READY ? Err(kErrNotReady, "") : R("cuStreamQuery", q);
  }
  Result StreamWaitEvent(uint32_t dev, uint64_t stream, uint64_t event) override {
    CUstream s = nullptr;
    if (Result r = Stream(stream, dev, &s); !r.ok()) return r;
    auto e = events_.find(event);
    if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    return R("cuStreamWaitEvent", cu_.cuStreamWaitEvent(s, e->second.second, 0));
  }
  Result EventCreate(uint32_t dev, uint64_t id, uint32_t flags) override {
    if (Result r = Use(dev); !r.ok()) return r;
    CUevent e;
    if (Result r = R("cuEventCreate", cu_.cuEventCreate(&e, flags)); !r.ok()) return r;
    events_[id] = {dev, e};
    return {};
  }
  Result EventRecord(uint32_t dev, uint64_t event, uint64_t stream) override {
    CUstream s = nullptr;
    if (Result r = Stream(stream, dev, &s); !r.ok()) return r;
    auto e = events_.find(event);
    if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    return R("cuEventRecord", cu_.cuEventRecord(e->second.second, s));
  }
  Result EventSync(uint64_t event) override {
    auto e = events_.find(event);
    if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    return R("cuEventSynchronize", cu_.cuEventSynchronize(e->second.second));
  }
  Result EventQuery(uint64_t event) override {
    auto e = events_.find(event);
    if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    CUresult q = cu_.cuEventQuery(e->second.second);
    return q == CUDA_ERROR_NOT_READY ? Err(kErrNotReady, "") : R("cuEventQuery", q);
  }
  Result EventElapsed(uint64_t start, uint64_t end, float* ms) override {
    auto a = events_.find(start), b = events_.find(end);
    if (a == events_.end() || b == events_.end()) return Err(kErrInvalidResourceHandle, "unknown event");
    return R("cuEventElapsedTime", cu_.cuEventElapsedTime(ms, a->second.second, b->second.second));
  }
  Result EventDestroy(uint64_t event) override {
    auto e = events_.find(event);
    if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
    Result r = R("cuEventDestroy", cu_.cuEventDestroy(e->second.second));
    events_.erase(e);
    return r;
  }
  Result DeviceSync(uint32_t dev) override {
    if (Result r = Use(dev); !r.ok()) return r;
    return R("cuCtxSynchronize", cu_.cuCtxSynchronize());
  }
  // cudaDeviceReset by explicit destruction of what the session made on the device, not
  // cuDevicePrimaryCtxReset: resetting the primary context would also destroy the backend's own
  // per-device resources in it (the pinned staging buffers and their events, the timing events)
  // and invalidate every handle cached here, to be recreated on the next copy at the cost of a new
  // context (hundreds of ms on a GPU); the session's worker process is the only user of the
  // context, so everything the program made there is known here and destroyed one by one. Limit:
  // context state the backend does not track (device-side malloc heap contents, printf FIFO
  // contents, L2 access policy) is not reset. Errors are reported (the first), never stop the
  // reset halfway. A device whose context was never made has nothing to reset but its flags.
  Result DeviceReset(uint32_t dev) override {
    if (Result r = Exists(dev); !r.ok()) return r;
    Result first = R("cuDevicePrimaryCtxSetFlags", cu_.cuDevicePrimaryCtxSetFlags(devs_[dev].dev, 0));
    auto keep = [&first](Result r) {
      if (first.ok()) first = std::move(r);
    };
    if (!devs_[dev].ctx) return first;
    keep(DeviceSync(dev));
    ResetContextState(dev, keep);
    // Peer access from this device, and to it from others.
    for (auto [from, to] : std::set<std::pair<uint32_t, uint32_t>>(peers_)) {
      if (from == dev || to == dev) keep(PeerAccess(from, to, false));
    }
    return first;
  }
  // DeviceReset's destruction of the device's modules, streams, events and allocations (in that
  // order: queued work is done, DeviceReset synchronized) and its limits' restoration.
  template <class Keep>
  void ResetContextState(uint32_t dev, Keep& keep) {
    std::vector<uint64_t> modules;
    for (const auto& [key, m] : loaded_) {
      if (key.second == dev) modules.push_back(key.first);
    }
    for (uint64_t m : modules) keep(UnloadCopy(m, dev));
    keep(Use(dev));
    std::erase_if(streams_, [&](const auto& kv) {
      if (kv.second.first != dev) return false;
      keep(R("cuStreamDestroy", cu_.cuStreamDestroy(kv.second.second)));
      return true;
    });
    std::erase_if(events_, [&](const auto& kv) {
      if (kv.second.first != dev) return false;
      keep(R("cuEventDestroy", cu_.cuEventDestroy(kv.second.second)));
      return true;
    });
    std::vector<uint64_t> allocations;  // module variables' ranges went with their modules
    for (const auto& [p, range] : owner_) {
      // Mappings belong to no context: they survive the reset, as on a GPU.
      if (range.second == dev && !vmm_maps_.count(p)) allocations.push_back(p);
    }
    for (uint64_t p : allocations) keep(Free(p));
    std::erase_if(default_limits_, [&](const auto& kv) {
      if (kv.first.first != dev) return false;
      keep(R("cuCtxSetLimit", cu_.cuCtxSetLimit(static_cast<CUlimit>(kv.first.second), kv.second)));
      return true;
    });
  }

  // As the runtime does: limits on the device's primary context (made current), flags on the
  // primary context whether it is active yet or not. The numbers pass through unchanged
  // (cuda_driver_check.cc); a refusal names them (the driver's error alone does not say which
  // limit or flags it refused).
  Result SetLimit(uint32_t dev, int32_t limit, uint64_t value) override {
    if (Result r = Use(dev); !r.ok()) return r;
    if (!default_limits_.count({dev, limit})) {
      size_t v = 0;
      if (cu_.cuCtxGetLimit(&v, static_cast<CUlimit>(limit)) == CUDA_SUCCESS) {
        default_limits_[{dev, limit}] = v;
      }
    }
    return R(fmt::format("cuCtxSetLimit(limit {}, value {})", limit, value).c_str(),
             cu_.cuCtxSetLimit(static_cast<CUlimit>(limit), value));
  }
  Result GetLimit(uint32_t dev, int32_t limit, uint64_t* value) override {
    if (Result r = Use(dev); !r.ok()) return r;
    size_t v = 0;
    Result r = R("cuCtxGetLimit", cu_.cuCtxGetLimit(&v, static_cast<CUlimit>(limit)));
    *value = v;
    return r;
  }
  Result SetDeviceFlags(uint32_t dev, uint32_t flags) override {
    if (Result r = Exists(dev); !r.ok()) return r;
    return R(fmt::format("cuDevicePrimaryCtxSetFlags(device {}, flags 0x{:x})", dev, flags).c_str(),
             cu_.cuDevicePrimaryCtxSetFlags(devs_[dev].dev, flags));
  }
  // The runtime's peer access is its primary contexts': the current device's context gains access
  // to the peer's (whose primary context is retained for that).
  Result PeerAccess(uint32_t dev, uint32_t peer, bool enable) override {
    if (Result r = Use(peer); !r.ok()) return r;
    if (Result r = Use(dev); !r.ok()) return r;
    Result r = enable ? R("cuCtxEnablePeerAccess", cu_.cuCtxEnablePeerAccess(devs_[peer].ctx, 0))
                      : R("cuCtxDisablePeerAccess", cu_.cuCtxDisablePeerAccess(devs_[peer].ctx));
    if (r.ok() && enable) peers_.insert({dev, peer});
    if (r.ok() && !enable) peers_.erase({dev, peer});
    return r;
  }
  Result GetDeviceFlags(uint32_t dev, uint32_t* flags) override {
    if (Result r = Exists(dev); !r.ok()) return r;
    unsigned int f = 0;
    int active = 0;
    Result r = R("cuDevicePrimaryCtxGetState", cu_.cuDevicePrimaryCtxGetState(devs_[dev].dev, &f, &active));
    *flags = f;
    return r;
  }

  // Virtual memory management: the driver's own calls on the device's primary context. The
  // backend keeps its handles and mappings so that an unknown or released handle is refused
  // rather than handed to the driver (undefined behaviour there), so that *freed can say when a
  // handle's memory is gone (released and unmapped everywhere), and so that copies route to and
  // check mapped ranges as allocations (owner_; mappings back to back count as one range).
  struct VmmHandle {
    uint32_t dev = 0;
    uint64_t size = 0;
    int maps = 0;
    bool released = false;
  };
  CUmemAllocationProp VmmProp(uint32_t dev) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = devs_[dev].dev;
    return prop;
  }
  Result MemGranularity(uint32_t dev, bool recommended, uint64_t* bytes) override {
    if (Result r = Exists(dev); !r.ok()) return r;
    CUmemAllocationProp prop = VmmProp(dev);
    size_t g = 0;
    Result r = R("cuMemGetAllocationGranularity",
                 cu_.cuMemGetAllocationGranularity(&g, &prop, recommended
                                                                  ? CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
                                                                  : CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    *bytes = g;
    return r;
  }
  Result MemAddressReserve(uint32_t dev, uint64_t size, uint64_t alignment, uint64_t hint,
                           uint64_t* ptr) override {
    if (Result r = Use(dev); !r.ok()) return r;
    CUdeviceptr p = 0;
    Result r = R("cuMemAddressReserve", cu_.cuMemAddressReserve(&p, size, alignment, hint, 0));
    *ptr = p;
    return r;
  }
  Result MemAddressFree(uint64_t ptr, uint64_t size) override {
    if (auto m = vmm_maps_.lower_bound(ptr); m != vmm_maps_.end() && m->first < ptr + size) {
      return Err(kErrInvalidValue, fmt::format("cuMemAddressFree(0x{:x}, {}): 0x{:x} is still "
                                               "mapped (cuMemUnmap it first)", ptr, size, m->first));
    }
    return R("cuMemAddressFree", cu_.cuMemAddressFree(ptr, size));
  }
  Result MemCreate(uint32_t dev, uint64_t size, uint64_t* handle) override {
    if (Result r = Use(dev); !r.ok()) return r;
    CUmemAllocationProp prop = VmmProp(dev);
    CUmemGenericAllocationHandle h = 0;
    if (Result r = R("cuMemCreate", cu_.cuMemCreate(&h, size, &prop, 0)); !r.ok()) return r;
    vmm_handles_[h] = VmmHandle{.dev = dev, .size = size};
    *handle = h;
    return {};
  }
  // The handle's memory is gone once it is released and mapped nowhere: then appended to *gone.
  void VmmGone(std::map<uint64_t, VmmHandle>::iterator it, std::vector<uint64_t>* gone) {
    if (!it->second.released || it->second.maps != 0) return;
    gone->push_back(it->first);
    vmm_handles_.erase(it);
  }
  Result MemRelease(uint64_t handle, std::vector<uint64_t>* gone) override {
    auto it = vmm_handles_.find(handle);
    if (it == vmm_handles_.end() || it->second.released) {
      return Err(kErrInvalidValue, fmt::format("cuMemRelease: handle {} is not a live allocation "
                                               "handle (never created, or released)", handle));
    }
    if (Result r = R("cuMemRelease", cu_.cuMemRelease(handle)); !r.ok()) return r;
    it->second.released = true;
    VmmGone(it, gone);
    return {};
  }
  Result MemMap(uint64_t ptr, uint64_t size, uint64_t offset, uint64_t handle) override {
    auto it = vmm_handles_.find(handle);
    if (it == vmm_handles_.end() || it->second.released) {
      return Err(kErrInvalidValue, fmt::format("cuMemMap: handle {} is not a live allocation "
                                               "handle", handle));
    }
    if (Result r = Use(it->second.dev); !r.ok()) return r;
    if (Result r = R("cuMemMap", cu_.cuMemMap(ptr, size, offset, handle, 0)); !r.ok()) return r;
    vmm_maps_[ptr] = {size, handle};
    ++it->second.maps;
    owner_[ptr] = {size, it->second.dev};
    return {};
  }
  Result MemUnmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone) override {
    if (Result r = R("cuMemUnmap", cu_.cuMemUnmap(ptr, size)); !r.ok()) return r;
    for (auto m = vmm_maps_.lower_bound(ptr); m != vmm_maps_.end() && m->first < ptr + size;) {
      owner_.erase(m->first);
      auto h = vmm_handles_.find(m->second.second);
      if (h != vmm_handles_.end()) {
        --h->second.maps;
        VmmGone(h, gone);
      }
      m = vmm_maps_.erase(m);
    }
    return {};
  }
  Result MemSetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags) override {
    if (Result r = Exists(dev); !r.ok()) return r;
    CUmemAccessDesc d{};
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = devs_[dev].dev;
    d.flags = static_cast<CUmemAccess_flags>(flags);
    return R("cuMemSetAccess", cu_.cuMemSetAccess(ptr, size, &d, 1));
  }

 private:
  std::map<uint64_t, VmmHandle> vmm_handles_;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> vmm_maps_;  // ptr -> (size, handle)
  struct Timed {
    CUevent start = nullptr, end = nullptr;
  };
  struct DevTiming {
    std::vector<CUevent> pool;  // created with timing enabled, not in use
    std::deque<Timed> pending;  // recorded around a launch, oldest first
  };
  // An event for timing on `dev` (whose context is current), from the pool or new.
  Result TimingEvent(uint32_t dev, CUevent* e) {
    DevTiming& t = timing_[dev];
    if (!t.pool.empty()) {
      *e = t.pool.back();
      t.pool.pop_back();
      return {};
    }
    return R("cuEventCreate", cu_.cuEventCreate(e, CU_EVENT_DEFAULT));
  }
  // Sums and recycles the completed pairs at the front of `t`. Caller made its context current.
  uint64_t Harvest(DevTiming& t) {
    uint64_t ns = 0;
    while (!t.pending.empty()) {
      Timed& p = t.pending.front();
      CUresult q = cu_.cuEventQuery(p.end);
      if (q == CUDA_ERROR_NOT_READY) break;
      float ms = 0;
      if (q == CUDA_SUCCESS && cu_.cuEventElapsedTime(&ms, p.start, p.end) == CUDA_SUCCESS && ms > 0) {
        ns += static_cast<uint64_t>(static_cast<double>(ms) * 1e6);
      }
      // Any other result is the context's sticky fault: the stream's error reaches the program
      // through its next sync; the kernel is charged nothing.
      t.pool.push_back(p.start);
      t.pool.push_back(p.end);
      t.pending.pop_front();
    }
    return ns;
  }
  void DropTimed(DevTiming& t) {
    for (const Timed& p : t.pending) {
      t.pool.push_back(p.start);
      t.pool.push_back(p.end);
    }
    t.pending.clear();
  }

  struct Dev {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
  };
  Driver cu_;
  std::vector<Dev> devs_;
  uint32_t current_ = UINT32_MAX;
  std::map<uint64_t, std::pair<uint64_t, uint32_t>> owner_;  // ptr -> (size, device)
  std::unordered_map<uint64_t, std::vector<std::byte>> images_;
  std::map<std::pair<uint64_t, uint32_t>, CUmodule> loaded_;
  std::unordered_map<uint64_t, std::pair<uint64_t, std::string>> funcs_, vars_;
  std::unordered_map<uint64_t, std::set<uint64_t>> globals_;  // module -> its variables' addresses
  std::map<std::pair<uint64_t, uint32_t>, CUfunction> cufuncs_;
  std::unordered_map<uint64_t, std::pair<uint32_t, CUstream>> streams_;
  std::unordered_map<uint64_t, std::pair<uint32_t, CUevent>> events_;  // id -> (device, event)
  // cuCtxGetLimit's answer before the session first set each (device, limit): what DeviceReset
  // restores. Peer access the session enabled, (device, peer): what DeviceReset disables.
  std::map<std::pair<uint32_t, int32_t>, size_t> default_limits_;
  std::set<std::pair<uint32_t, uint32_t>> peers_;
  struct StagingPair {
    void* buf[2] = {nullptr, nullptr};
    CUevent done[2] = {nullptr, nullptr};  // recorded after each buffer's copy
    int next = 0;
  };
  std::vector<StagingPair> staging_;  // per device
  std::vector<StagingPair> read_staging_;  // per device: StartD2H's buffers
  struct Read {  // a StartD2H in flight, per slot, until FinishD2H
    StagingPair* pair = nullptr;
    uint32_t dev = 0;
    uint64_t size = 0;
    Result r;  // a failure to queue it, reported by FinishD2H
  };
  Read reads_[2];
  StagingPair* target_ = nullptr;     // H2DTarget's buffer, until CommitH2D
  std::vector<DevTiming> timing_;  // per device
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> MakeCudaBackend() {
  Driver d;
  GPOOL_RETURN_IF_ERROR(d.Load());
  auto b = std::make_unique<CudaBackend>(d);
  GPOOL_RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<Backend>(std::move(b));
}
#endif

}  // namespace gpool::remote::server
