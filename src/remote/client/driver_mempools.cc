// The driver stand-in's stream-ordered allocator: memory pools (cuMemPoolCreate, the device's
// default and current pool, attributes) and cuMemAllocAsync / cuMemAllocFromPoolAsync /
// cuMemFreeAsync. NCCL creates a pool per communicator at ncclCommInitAll and sets its release
// threshold; PyTorch and others allocate from the default pool.
//
// A pool is a client-side record: its device and its attributes. Memory does not stay in a pool:
// an allocation is a plain cuMemAlloc on the pool's device at the call (synchronous; memory
// available now is available "when the stream reaches this point", so it is valid, only never
// overlapped with the stream's work), and cuMemFreeAsync synchronizes the stream, then frees, so
// the memory is never freed under earlier work that may use it, but the call blocks where CUDA's
// returns at once, and the memory goes back to the server, not to the pool. This is the same rule
// as the runtime stand-in's cudaMallocAsync/cudaFreeAsync (docs/remoting/driver-api.md). So the release
// threshold and reuse policies are kept and read back but change nothing, cuMemPoolTrimTo has
// nothing to trim, and the pool's reserved memory equals its used memory.
//
// Limits, each refused naming itself: pools with shareable handles (IPC: export/import of pools
// and pointers) and pools in host memory; access for another device than the pool's own (the
// stand-in implements no peer access).
#include <cuda.h>

#include <map>
#include <memory>

#include "remote/client/driver_state.h"

namespace gpool::remote::client::driver {
namespace {

struct MemPool {
  int device = 0;
  bool is_default = false;
  cuuint64_t release_threshold = 0;
  int reuse_follow_event = 1, reuse_opportunistic = 1, reuse_internal = 1;
  cuuint64_t used = 0, used_high = 0;
};

// Pools live here, under D().mu: the live set (handles are checked against it), each device's
// default pool (made at first ask, never destroyed) and current pool, and which pool each
// pool allocation came from.
struct Pools {
  std::map<const MemPool*, std::unique_ptr<MemPool>> live;
  std::map<int, MemPool*> defaults, current;
  std::map<CUdeviceptr, std::pair<MemPool*, size_t>> allocs;
};
Pools& P() {
  static auto* p = new Pools();  // never destroyed: exit-time calls stay valid
  return *p;
}

MemPool* DefaultLocked(int dev) {
  MemPool*& p = P().defaults[dev];
  if (!p) {
    auto owned = std::make_unique<MemPool>();
    owned->device = dev;
    owned->is_default = true;
    p = owned.get();
    P().live[p] = std::move(owned);
  }
  return p;
}

CUresult PoolOf(const char* call, CUmemoryPool h, MemPool** out) {
  auto it = P().live.find(reinterpret_cast<const MemPool*>(h));
  if (it == P().live.end()) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "not a memory pool of this process");
  }
  *out = it->second.get();
  return CUDA_SUCCESS;
}

CUresult CheckDev(const char* call, int dev) {
  if (CUresult r = Ready(call)) return r;
  if (dev < 0 || dev >= D().device_count()) {
    return Fail(call, CUDA_ERROR_INVALID_DEVICE,
                fmt::format("device {} is not one of the {} devices", dev, D().device_count()));
  }
  return CUDA_SUCCESS;
}

// cuMemAlloc on device `dev`: its primary context pushed for the call.
CUresult AllocOn(int dev, size_t size, CUdeviceptr* out) {
  CUcontext ctx = reinterpret_cast<CUcontext>(D().primary[dev]);
  if (CUresult r = cuCtxPushCurrent(ctx)) return r;
  CUresult r = cuMemAlloc(out, size);
  CUcontext popped;
  cuCtxPopCurrent(&popped);
  return r;
}

CUresult AllocFrom(const char* call, CUdeviceptr* dptr, size_t size, MemPool* pool) {
  if (!dptr) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null pointer for the address");
  if (CUresult r = AllocOn(pool->device, size, dptr)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  auto& entry = P().allocs[*dptr];
  if (entry.first) entry.first->used -= entry.second;  // an earlier one freed with cuMemFree
  entry = {pool, size};
  pool->used += size;
  pool->used_high = std::max(pool->used_high, pool->used);
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point

#pragma GCC visibility push(default)
extern "C" {

CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  const char* call = "cuMemPoolCreate";
  if (!pool || !props) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null pool or properties");
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("allocation type {} (want CU_MEM_ALLOCATION_TYPE_PINNED)",
                            static_cast<int>(props->allocType)));
  }
  if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                fmt::format("location type {}: gpool pools hold device memory only",
                            static_cast<int>(props->location.type)));
  }
  if (props->handleTypes != CU_MEM_HANDLE_TYPE_NONE) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                fmt::format("handle types 0x{:x}: shareable (IPC) pool handles cannot reach "
                            "another process's view of a remote GPU",
                            static_cast<int>(props->handleTypes)));
  }
  if (CUresult r = CheckDev(call, props->location.id)) return r;
  auto p = std::make_unique<MemPool>();
  p->device = props->location.id;
  std::lock_guard<std::mutex> lk(D().mu);
  *pool = reinterpret_cast<CUmemoryPool>(p.get());
  P().live[p.get()] = std::move(p);
  return CUDA_SUCCESS;
}

// Allocations from the pool stay valid until freed (they are plain allocations, see above).
CUresult cuMemPoolDestroy(CUmemoryPool h) {
  const char* call = "cuMemPoolDestroy";
  std::lock_guard<std::mutex> lk(D().mu);
  MemPool* p;
  if (CUresult r = PoolOf(call, h, &p)) return r;
  if (p->is_default) return Fail(call, CUDA_ERROR_INVALID_VALUE, "a device's default pool");
  for (auto& [dev, cur] : P().current) {
    if (cur == p) cur = DefaultLocked(dev);
  }
  for (auto& [ptr, owner] : P().allocs) {
    if (owner.first == p) owner.first = nullptr;
  }
  P().live.erase(p);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  const char* call = "cuMemPoolSetAttribute";
  if (!value) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null value");
  std::lock_guard<std::mutex> lk(D().mu);
  MemPool* p;
  if (CUresult r = PoolOf(call, h, &p)) return r;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->release_threshold = *static_cast<cuuint64_t*>(value); break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: p->reuse_follow_event = *static_cast<int*>(value); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: p->reuse_opportunistic = *static_cast<int*>(value); break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: p->reuse_internal = *static_cast<int*>(value); break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:  // CUDA allows only a reset, to 0
      if (*static_cast<cuuint64_t*>(value) != 0) {
        return Fail(call, CUDA_ERROR_INVALID_VALUE, "a high-water mark can only be reset to 0");
      }
      p->used_high = p->used;
      break;
    default:
      return Fail(call, CUDA_ERROR_INVALID_VALUE,
                  fmt::format("attribute {} cannot be set", static_cast<int>(attr)));
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void* value) {
  const char* call = "cuMemPoolGetAttribute";
  if (!value) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null value");
  std::lock_guard<std::mutex> lk(D().mu);
  MemPool* p;
  if (CUresult r = PoolOf(call, h, &p)) return r;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *static_cast<cuuint64_t*>(value) = p->release_threshold; break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES: *static_cast<int*>(value) = p->reuse_follow_event; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC: *static_cast<int*>(value) = p->reuse_opportunistic; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *static_cast<int*>(value) = p->reuse_internal; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *static_cast<cuuint64_t*>(value) = p->used; break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *static_cast<cuuint64_t*>(value) = p->used_high; break;
    default:
      return Fail(call, CUDA_ERROR_INVALID_VALUE,
                  fmt::format("attribute {} is not known to gpool", static_cast<int>(attr)));
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t) {
  std::lock_guard<std::mutex> lk(D().mu);
  MemPool* p;
  return PoolOf("cuMemPoolTrimTo", h, &p);  // nothing is held in a pool (see above)
}

// The pool's own device has read-write access; another device none (no peer access).
CUresult cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool h, CUmemLocation* location) {
  const char* call = "cuMemPoolGetAccess";
  if (!flags || !location) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null flags or location");
  std::lock_guard<std::mutex> lk(D().mu);
  MemPool* p;
  if (CUresult r = PoolOf(call, h, &p)) return r;
  *flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == p->device
               ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE
               : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}
CUresult cuMemPoolSetAccess(CUmemoryPool h, const CUmemAccessDesc* map, size_t count) {
  const char* call = "cuMemPoolSetAccess";
  if (count > 0 && !map) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null descriptors");
  std::lock_guard<std::mutex> lk(D().mu);
  MemPool* p;
  if (CUresult r = PoolOf(call, h, &p)) return r;
  for (size_t i = 0; i < count; ++i) {
    bool own = map[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && map[i].location.id == p->device;
    if (own && map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) continue;
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                fmt::format("access {} for location type {} id {} of a pool on device {}: only the "
                            "pool's own device, read-write (no peer access between pooled GPUs)",
                            static_cast<int>(map[i].flags), static_cast<int>(map[i].location.type),
                            map[i].location.id, p->device));
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  const char* call = "cuDeviceGetDefaultMemPool";
  if (!pool) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null pool");
  if (CUresult r = CheckDev(call, dev)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  *pool = reinterpret_cast<CUmemoryPool>(DefaultLocked(dev));
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  const char* call = "cuDeviceGetMemPool";
  if (!pool) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null pool");
  if (CUresult r = CheckDev(call, dev)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  MemPool*& cur = P().current[dev];
  if (!cur) cur = DefaultLocked(dev);
  *pool = reinterpret_cast<CUmemoryPool>(cur);
  return CUDA_SUCCESS;
}
CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool h) {
  const char* call = "cuDeviceSetMemPool";
  if (CUresult r = CheckDev(call, dev)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  MemPool* p;
  if (CUresult r = PoolOf(call, h, &p)) return r;
  if (p->device != dev) {
    return Fail(call, CUDA_ERROR_INVALID_DEVICE,
                fmt::format("the pool is on device {}, not {}", p->device, dev));
  }
  P().current[dev] = p;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size, CUmemoryPool h, CUstream s) {
  const char* call = "cuMemAllocFromPoolAsync";
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id)) return r;
  MemPool* p;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (CUresult r = PoolOf(call, h, &p)) return r;
  }
  return AllocFrom(call, dptr, size, p);
}
CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) {
  const char* call = "cuMemAllocAsync";
  int dev;
  uint64_t id;
  if (CUresult r = ResolveStream(s, call, &dev, &id)) return r;
  CUmemoryPool h;
  if (CUresult r = cuDeviceGetMemPool(&h, dev)) return r;
  return AllocFrom(call, dptr, size, reinterpret_cast<MemPool*>(h));
}
// Waits for the stream's earlier work, then frees (see above). Takes any allocation, as CUDA's.
CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  if (dptr == 0) return CUDA_SUCCESS;
  if (CUresult r = cuStreamSynchronize(s)) return r;
  CUresult r = cuMemFree(dptr);
  std::lock_guard<std::mutex> lk(D().mu);
  if (auto it = P().allocs.find(dptr); it != P().allocs.end()) {
    if (it->second.first) it->second.first->used -= it->second.second;
    P().allocs.erase(it);
  }
  return r;
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* d, size_t n, CUstream s) { return cuMemAllocAsync(d, n, s); }
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* d, size_t n, CUmemoryPool p, CUstream s) {
  return cuMemAllocFromPoolAsync(d, n, p, s);
}
CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { return cuMemFreeAsync(d, s); }

}  // extern "C"
#pragma GCC visibility pop
