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
//
// This file: the driver's loading, construction, devices, contexts (reset, limits, flags, peer
// access), streams, events, and launches with their kernel time. The class is declared in
// cuda_backend_internal.h; its other members are defined by seam in cuda_backend_memory.cc
// (allocations, copies, staging), cuda_backend_modules.cc (modules, functions, variables) and
// cuda_backend_vmm.cc (virtual memory management).
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "remote/server/backend.h"
#include "remote/server/cuda_backend_internal.h"

namespace gpool::remote::server {

#ifndef GPOOL_HAVE_CUDA_H
StatusOr<std::unique_ptr<Backend>> MakeCudaBackend() {
  return Status::Unimplemented("this gpool was built without the CUDA headers (cuda.h): "
                               "the cuda backend is unavailable");
}
#else
namespace cuda {
namespace {

// libcuda.so.1 as the loader finds it, else where driver installs put it (containers mount the
// host's driver under /usr/local/nvidia, often without a loader path to it). $GPOOL_LIBCUDA, when
// set, is the only one tried.
constexpr const char* kLibcudaPaths[] = {"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
                                         "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                                         "/usr/lib64/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"};

}  // namespace

Status Driver::Load() {
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

Status CudaBackend::Init() {
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
std::string CudaBackend::Msg(const char* call, CUresult r) {
  const char* s = nullptr;
  if (cu_.cuGetErrorString) cu_.cuGetErrorString(r, &s);
  if (!s && r == CUDA_ERROR_STUB_LIBRARY) s = "the CUDA toolkit's stub libcuda, not a driver";
  return fmt::format("{}: {} ({})", call, s ? s : "unknown error", static_cast<int>(r));
}
// A driver error as the runtime's cudaError_t: the numbers agree (cuda_driver_check.cc holds
// that for every CUresult the backend can see) except the two that have no runtime twin.
Result CudaBackend::R(const char* call, CUresult r) {
  if (r == CUDA_SUCCESS) return {};
  int32_t code = static_cast<int32_t>(r);
  if (r == CUDA_ERROR_CONTEXT_ALREADY_CURRENT || code == 916 /* CUDA_ERROR_KEY_ROTATION */) {
    code = kErrUnknown;
  }
  return Err(code, Msg(call, r));
}
Result CudaBackend::Use(uint32_t dev) {
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
Result CudaBackend::Stream(uint64_t id, uint32_t dev, CUstream* s) {
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
Result CudaBackend::Exists(uint32_t dev) {
  if (dev >= devs_.size()) return Err(kErrInvalidDevice, fmt::format("device {} does not exist", dev));
  return {};
}
Result CudaBackend::GetProps(uint32_t dev, proto::DeviceProps* p) {
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
Result CudaBackend::GetAttribute(uint32_t dev, int32_t attr, int32_t* value) {
  if (Result r = Exists(dev); !r.ok()) return r;
  int v = 0;
  Result r = R("cuDeviceGetAttribute", cu_.cuDeviceGetAttribute(&v, static_cast<CUdevice_attribute>(attr), devs_[dev].dev));
  *value = v;
  return r;
}
Result CudaBackend::Launch(const proto::Launch& l, uint64_t* ns) { return LaunchOn(l, ns, false); }
// cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_COOPERATIVE (it takes the packed parameter buffer,
// which cuLaunchCooperativeKernel does not). Too large a grid fails as in CUDA
// (cudaErrorCooperativeLaunchTooLarge), at the next synchronizing call.
Result CudaBackend::LaunchCooperative(const proto::Launch& l, uint64_t* ns) {
  return LaunchOn(l, ns, true);
}
Result CudaBackend::LaunchOn(const proto::Launch& l, uint64_t* ns, bool cooperative) {
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
std::string CudaBackend::LaunchDescription(const proto::Launch& l) const {
  auto f = funcs_.find(l.func);
  return fmt::format(" (kernel {}, grid {}x{}x{}, block {}x{}x{}, {} bytes of dynamic shared "
                     "memory)",
                     f == funcs_.end() ? "?" : f->second.second, l.grid[0], l.grid[1],
                     l.grid[2], l.block[0], l.block[1], l.block[2], l.shmem);
}
uint64_t CudaBackend::TakeKernelTime(uint32_t dev) {
  if (dev >= timing_.size() || timing_[dev].pending.empty()) return 0;
  if (Result r = Use(dev); !r.ok()) return 0;
  return Harvest(timing_[dev]);
}
// An event for timing on `dev` (whose context is current), from the pool or new.
Result CudaBackend::TimingEvent(uint32_t dev, CUevent* e) {
  DevTiming& t = timing_[dev];
  if (!t.pool.empty()) {
    *e = t.pool.back();
    t.pool.pop_back();
    return {};
  }
  return R("cuEventCreate", cu_.cuEventCreate(e, CU_EVENT_DEFAULT));
}
// Sums and recycles the completed pairs at the front of `t`. Caller made its context current.
uint64_t CudaBackend::Harvest(DevTiming& t) {
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
void CudaBackend::DropTimed(DevTiming& t) {
  for (const Timed& p : t.pending) {
    t.pool.push_back(p.start);
    t.pool.push_back(p.end);
  }
  t.pending.clear();
}
Result CudaBackend::StreamCreate(uint32_t dev, uint64_t id, uint32_t flags, int32_t priority) {
  if (Result r = Use(dev); !r.ok()) return r;
  CUstream s = nullptr;
  if (Result r = R("cuStreamCreateWithPriority", cu_.cuStreamCreateWithPriority(&s, flags, priority)); !r.ok()) return r;
  streams_[id] = {dev, s};
  return {};
}
Result CudaBackend::StreamDestroy(uint64_t id) {
  auto it = streams_.find(id);
  if (it == streams_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown stream {}", id));
  (void)Use(it->second.first);
  Result r = R("cuStreamDestroy", cu_.cuStreamDestroy(it->second.second));
  streams_.erase(it);
  return r;
}
Result CudaBackend::StreamSync(uint32_t dev, uint64_t id) {
  CUstream s = nullptr;
  if (Result r = Stream(id, dev, &s); !r.ok()) return r;
  return R("cuStreamSynchronize", cu_.cuStreamSynchronize(s));
}
Result CudaBackend::StreamQuery(uint32_t dev, uint64_t id) {
  CUstream s = nullptr;
  if (Result r = Stream(id, dev, &s); !r.ok()) return r;
  CUresult q = cu_.cuStreamQuery(s);
  return q == CUDA_ERROR_NOT_READY ? Err(kErrNotReady, "") : R("cuStreamQuery", q);
}
Result CudaBackend::StreamWaitEvent(uint32_t dev, uint64_t stream, uint64_t event) {
  CUstream s = nullptr;
  if (Result r = Stream(stream, dev, &s); !r.ok()) return r;
  auto e = events_.find(event);
  if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
  return R("cuStreamWaitEvent", cu_.cuStreamWaitEvent(s, e->second.second, 0));
}
Result CudaBackend::EventCreate(uint32_t dev, uint64_t id, uint32_t flags) {
  if (Result r = Use(dev); !r.ok()) return r;
  CUevent e;
  if (Result r = R("cuEventCreate", cu_.cuEventCreate(&e, flags)); !r.ok()) return r;
  events_[id] = {dev, e};
  return {};
}
Result CudaBackend::EventRecord(uint32_t dev, uint64_t event, uint64_t stream) {
  CUstream s = nullptr;
  if (Result r = Stream(stream, dev, &s); !r.ok()) return r;
  auto e = events_.find(event);
  if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
  return R("cuEventRecord", cu_.cuEventRecord(e->second.second, s));
}
Result CudaBackend::EventSync(uint64_t event) {
  auto e = events_.find(event);
  if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
  return R("cuEventSynchronize", cu_.cuEventSynchronize(e->second.second));
}
Result CudaBackend::EventQuery(uint64_t event) {
  auto e = events_.find(event);
  if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
  CUresult q = cu_.cuEventQuery(e->second.second);
  return q == CUDA_ERROR_NOT_READY ? Err(kErrNotReady, "") : R("cuEventQuery", q);
}
Result CudaBackend::EventElapsed(uint64_t start, uint64_t end, float* ms) {
  auto a = events_.find(start), b = events_.find(end);
  if (a == events_.end() || b == events_.end()) return Err(kErrInvalidResourceHandle, "unknown event");
  return R("cuEventElapsedTime", cu_.cuEventElapsedTime(ms, a->second.second, b->second.second));
}
Result CudaBackend::EventDestroy(uint64_t event) {
  auto e = events_.find(event);
  if (e == events_.end()) return Err(kErrInvalidResourceHandle, fmt::format("unknown event {}", event));
  Result r = R("cuEventDestroy", cu_.cuEventDestroy(e->second.second));
  events_.erase(e);
  return r;
}
Result CudaBackend::DeviceSync(uint32_t dev) {
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
Result CudaBackend::DeviceReset(uint32_t dev) {
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
void CudaBackend::ResetContextState(uint32_t dev, Keep& keep) {
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
Result CudaBackend::SetLimit(uint32_t dev, int32_t limit, uint64_t value) {
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
Result CudaBackend::GetLimit(uint32_t dev, int32_t limit, uint64_t* value) {
  if (Result r = Use(dev); !r.ok()) return r;
  size_t v = 0;
  Result r = R("cuCtxGetLimit", cu_.cuCtxGetLimit(&v, static_cast<CUlimit>(limit)));
  *value = v;
  return r;
}
Result CudaBackend::SetDeviceFlags(uint32_t dev, uint32_t flags) {
  if (Result r = Exists(dev); !r.ok()) return r;
  return R(fmt::format("cuDevicePrimaryCtxSetFlags(device {}, flags 0x{:x})", dev, flags).c_str(),
           cu_.cuDevicePrimaryCtxSetFlags(devs_[dev].dev, flags));
}
// The runtime's peer access is its primary contexts': the current device's context gains access
// to the peer's (whose primary context is retained for that).
Result CudaBackend::PeerAccess(uint32_t dev, uint32_t peer, bool enable) {
  if (Result r = Use(peer); !r.ok()) return r;
  if (Result r = Use(dev); !r.ok()) return r;
  Result r = enable ? R("cuCtxEnablePeerAccess", cu_.cuCtxEnablePeerAccess(devs_[peer].ctx, 0))
                    : R("cuCtxDisablePeerAccess", cu_.cuCtxDisablePeerAccess(devs_[peer].ctx));
  if (r.ok() && enable) peers_.insert({dev, peer});
  if (r.ok() && !enable) peers_.erase({dev, peer});
  return r;
}
Result CudaBackend::GetDeviceFlags(uint32_t dev, uint32_t* flags) {
  if (Result r = Exists(dev); !r.ok()) return r;
  unsigned int f = 0;
  int active = 0;
  Result r = R("cuDevicePrimaryCtxGetState", cu_.cuDevicePrimaryCtxGetState(devs_[dev].dev, &f, &active));
  *flags = f;
  return r;
}

}  // namespace cuda

StatusOr<std::unique_ptr<Backend>> MakeCudaBackend() {
  cuda::Driver d;
  GPOOL_RETURN_IF_ERROR(d.Load());
  auto b = std::make_unique<cuda::CudaBackend>(d);
  GPOOL_RETURN_IF_ERROR(b->Init());
  return std::unique_ptr<Backend>(std::move(b));
}
#endif

}  // namespace gpool::remote::server
