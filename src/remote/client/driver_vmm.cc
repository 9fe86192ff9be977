// The driver stand-in's virtual memory management, as caching allocators use it (PyTorch's
// expandable segments: reserve a large address range, create physical chunks, map them into it
// as the pool grows, set access, unmap and release when it shrinks): cuMemAddressReserve/Free,
// cuMemCreate/Release, cuMemMap/Unmap, cuMemSetAccess/GetAccess, cuMemGetAllocationGranularity,
// cuMemGetAllocationPropertiesFromHandle, cuMemRetainAllocationHandle (protocol v9 ops of the same
// names; the server emulates or passes them to the real driver).
//
// Address space is the server's: a reservation is made on the server of the current context's
// device (device 0's when no context is current), and only handles of devices of that server
// can be mapped into it (refused, naming both devices, otherwise). Each mapping is also entered in
// the program's allocation table (D().allocs, marked `mapped`), so copies, memsets, launches and
// pointer attributes route to its server as for cuMemAlloc memory; cuMemFree refuses it.
// Handles are the client's (CUmemGenericAllocationHandle values are ids here), counted: a handle
// is released on the server once cuMemRelease has balanced cuMemCreate and every
// cuMemRetainAllocationHandle, and nothing maps it any more (CUDA frees the memory then too).
//
// Refused, naming the field: allocation types other than pinned, locations other than a device,
// shareable handle types other than POSIX file descriptors (fabric, Win32; a POSIX request is
// taken but cannot be exported: export and import are stubs, and the device attributes say
// shareable handles are unsupported), GPUDirect RDMA and tile-pool usage flags, read-only access
// and access from a device other than the memory's own (no peer access).
#include <cuda.h>

#include <map>

#include "remote/client/driver_state.h"

namespace gpool::remote::client::driver {
namespace {

struct VmmHandle {
  int device = 0;
  uint64_t size = 0;
  uint64_t server = 0;  // the server's handle
  int refs = 1;         // cuMemCreate + cuMemRetainAllocationHandle - cuMemRelease
  int maps = 0;
  CUmemAllocationProp prop{};
};
struct Reservation {
  int device = 0;  // its server is that device's
  uint64_t size = 0;
};
struct Mapping {
  uint64_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  unsigned long long access = CU_MEM_ACCESS_FLAGS_PROT_NONE;  // CUmemAccess_flags
};
// Under D().mu.
struct VmmState {
  std::map<CUmemGenericAllocationHandle, VmmHandle> handles;
  std::map<uint64_t, Reservation> reservations;  // by start
  std::map<uint64_t, Mapping> maps;               // by start
  CUmemGenericAllocationHandle next = 1;
};
VmmState& V() {
  static VmmState* v = new VmmState();  // never destroyed, as Driver
  return *v;
}

CUresult CheckVmmDevice(const char* call, int dev) {
  if (CUresult r = Ready(call)) return r;
  if (dev < 0 || dev >= D().device_count()) {
    return Fail(call, CUDA_ERROR_INVALID_DEVICE, fmt::format("device {} is not one of the {} "
                "device(s) GPOOL_DEVICES lists", dev, D().device_count()));
  }
  return CUDA_SUCCESS;
}

// What cuMemCreate and cuMemGetAllocationGranularity accept of a CUmemAllocationProp.
CUresult CheckProp(const char* call, const CUmemAllocationProp* prop) {
  if (!prop) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null prop");
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("prop->type {}: only "
                "CU_MEM_ALLOCATION_TYPE_PINNED is supported", static_cast<int>(prop->type)));
  }
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("prop->location.type {}: only "
                "CU_MEM_LOCATION_TYPE_DEVICE is supported (no host memory on a remote GPU)",
                static_cast<int>(prop->location.type)));
  }
  // POSIX file descriptors are accepted as a request only: PyTorch's expandable segments always
  // ask for them (and fail without falling back when refused), though they export only to share
  // a tensor with another process. The memory is made without; the export itself
  // (cuMemExportToShareableHandle) is a loud stub, and the device attribute says 0.
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("prop->requestedHandleTypes {}: "
                "only CU_MEM_HANDLE_TYPE_NONE and (as a request that cannot be exported) "
                "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR are supported: a pooled GPU's memory "
                "cannot be shared with another process",
                static_cast<int>(prop->requestedHandleTypes)));
  }
  if (prop->allocFlags.gpuDirectRDMACapable) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED, "prop->allocFlags.gpuDirectRDMACapable: GPUDirect "
                "RDMA is not supported (CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED "
                "is 0)");
  }
  if (prop->allocFlags.usage != 0) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("prop->allocFlags.usage {}: tile "
                "pools (sparse arrays) are not supported", prop->allocFlags.usage));
  }
  return CheckVmmDevice(call, prop->location.id);
}

bool SameServer(int a, int b) { return D().env.devices[a].server == D().env.devices[b].server; }

// The device whose server holds the reservation containing [p, p+n), or -1. Under D().mu.
int ReservationDeviceLocked(uint64_t p, uint64_t n) {
  auto it = V().reservations.upper_bound(p);
  if (it == V().reservations.begin()) return -1;
  --it;
  if (p - it->first >= it->second.size || n > it->second.size - (p - it->first)) return -1;
  return it->second.device;
}

// Releases handle `h` on its server once nothing holds it (no references, no mappings).
CUresult MaybeReleaseLocked(const char* call, CUmemGenericAllocationHandle h,
                            std::unique_lock<std::mutex>& lk) {
  auto it = V().handles.find(h);
  if (it == V().handles.end() || it->second.refs > 0 || it->second.maps > 0) return CUDA_SUCCESS;
  VmmHandle rec = it->second;
  V().handles.erase(it);
  CUresult err;
  ServerLink* l = D().LinkLocked(rec.device, &err, call);
  if (!l) return err;
  lk.unlock();
  proto::MemRelease q{.handle = rec.server};
  CUresult r = Call(l, q, call);
  lk.lock();
  return r;
}

}  // namespace

// CU_DEVICE_ATTRIBUTE_* that the stand-in answers itself: what it implements of virtual memory
// management, whatever the server's device could do beyond it.
bool VmmAttribute(int attrib, int* value) {
  switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *value = 1;
      return true;
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_HANDLE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_GENERIC_COMPRESSION_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *value = 0;
      return true;
    default:
      return false;
  }
}

}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the exports below are C
namespace proto = gpool::remote::proto;

#pragma GCC visibility push(default)
extern "C" {

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags option) {
  const char* call = "cuMemGetAllocationGranularity";
  if (!granularity) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null granularity");
  if (CUresult r = CheckProp(call, prop)) return r;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("option {}", static_cast<int>(option)));
  }
  const int dev = prop->location.id;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::MemGranularity q{.device = D().Index(dev),
                          .recommended = option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED};
  proto::U64Value v;
  if (CUresult r = Call(l, q, &v, call)) return r;
  *granularity = v.value;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  const char* call = "cuMemAddressReserve";
  if (CUresult r = Ready(call)) return r;
  if (!ptr) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null ptr");
  if (flags != 0) return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("flags {}: must be 0", flags));
  // Address space is per process on a GPU; here it is a server's: the current device's.
  CUcontext ctx = nullptr;
  int dev = 0;
  if (cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr) {
    CUdevice d;
    if (cuCtxGetDevice(&d) == CUDA_SUCCESS) dev = d;
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::MemAddressReserve q{.device = D().Index(dev), .size = size, .alignment = alignment,
                             .hint = addr};
  proto::Pointer p;
  if (CUresult r = Call(l, q, &p, call)) return r;
  // Servers hand out addresses in their own processes: one program's servers must not overlap
  // (as for cuMemAlloc). A range that overlaps another reservation or allocation goes back.
  bool clash = false;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    auto overlaps = [&](const auto& m) {
      auto next = m.lower_bound(p.ptr);
      bool hit = next != m.end() && next->first < p.ptr + size;
      if (next != m.begin()) {
        auto prev = std::prev(next);
        hit |= prev->first + std::max<uint64_t>(prev->second.size, 1) > p.ptr;
      }
      return hit;
    };
    clash = overlaps(V().reservations) || overlaps(D().allocs);
    if (!clash) {
      V().reservations[p.ptr] = Reservation{.device = dev, .size = size};
      *ptr = p.ptr;
      return CUDA_SUCCESS;
    }
  }
  proto::MemAddressFree back{.ptr = p.ptr, .size = size};
  (void)Call(l, back, call);
  return Fail(call, CUDA_ERROR_OUT_OF_MEMORY, fmt::format("device {}'s server reserved 0x{:x} "
              "(+{}), which overlaps memory or address space of another server: servers of one "
              "program must use distinct address ranges", dev, p.ptr, size));
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  const char* call = "cuMemAddressFree";
  if (CUresult r = Ready(call)) return r;
  int dev;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    auto it = V().reservations.find(ptr);
    if (it == V().reservations.end() || it->second.size != size) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("0x{:x}, {} bytes: not the start "
                  "and size of a reservation (cuMemAddressReserve)", ptr, size));
    }
    dev = it->second.device;
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::MemAddressFree q{.ptr = ptr, .size = size};
  if (CUresult r = Call(l, q, call)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  V().reservations.erase(ptr);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags) {
  const char* call = "cuMemCreate";
  if (!handle) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null handle");
  if (flags != 0) return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("flags {}: must be 0", flags));
  if (CUresult r = CheckProp(call, prop)) return r;
  const int dev = prop->location.id;
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::MemCreate q{.device = D().Index(dev), .size = size};
  proto::U64Value v;
  if (CUresult r = Call(l, q, &v, call)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  VmmHandle rec{.device = dev, .size = size, .server = v.value, .prop = *prop};
  rec.prop.allocFlags.compressionType = 0;  // what the handle is (compression is not offered)
  rec.prop.win32HandleMetaData = nullptr;
  *handle = V().next++;
  V().handles[*handle] = rec;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  const char* call = "cuMemRelease";
  if (CUresult r = Ready(call)) return r;
  std::unique_lock<std::mutex> lk(D().mu);
  auto it = V().handles.find(handle);
  if (it == V().handles.end() || it->second.refs == 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("handle {} is not a live allocation "
                "handle (never created, or released)", handle));
  }
  --it->second.refs;
  return MaybeReleaseLocked(call, handle, lk);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  const char* call = "cuMemMap";
  if (CUresult r = Ready(call)) return r;
  if (flags != 0) return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("flags {}: must be 0", flags));
  int dev, where;
  uint64_t server;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    auto it = V().handles.find(handle);
    if (it == V().handles.end() || it->second.refs == 0) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("handle {} is not a live "
                  "allocation handle", handle));
    }
    dev = it->second.device;
    server = it->second.server;
    where = ReservationDeviceLocked(ptr, size);
  }
  if (where < 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("0x{:x}, {} bytes: not inside one "
                "reservation (cuMemAddressReserve)", ptr, size));
  }
  if (!SameServer(dev, where)) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("memory of device {} cannot be mapped "
                "into a range reserved on device {}'s server ({}): they are on different servers",
                dev, where, D().env.devices[where].server));
  }
  CUresult err;
  ServerLink* l = D().Link(dev, &err, call);
  if (!l) return err;
  proto::MemMap q{.ptr = ptr, .size = size, .offset = offset, .handle = server};
  if (CUresult r = Call(l, q, call)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  V().maps[ptr] = Mapping{.size = size, .handle = handle};
  ++V().handles[handle].maps;
  D().allocs[ptr] = Alloc{.size = size, .device = dev, .buffer_id = D().next_id++, .mapped = true};
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  const char* call = "cuMemUnmap";
  if (CUresult r = Ready(call)) return r;
  int where;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    where = ReservationDeviceLocked(ptr, size);
  }
  if (where < 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("0x{:x}, {} bytes: not inside one "
                "reservation (cuMemAddressReserve)", ptr, size));
  }
  CUresult err;
  ServerLink* l = D().Link(where, &err, call);
  if (!l) return err;
  proto::MemUnmap q{.ptr = ptr, .size = size};
  if (CUresult r = Call(l, q, call)) return r;
  // The server unmapped whole mappings only, so the records in the range are exactly those.
  std::unique_lock<std::mutex> lk(D().mu);
  std::vector<CUmemGenericAllocationHandle> unmapped;
  for (auto it = V().maps.lower_bound(ptr); it != V().maps.end() && it->first < ptr + size;) {
    unmapped.push_back(it->second.handle);
    D().allocs.erase(it->first);
    it = V().maps.erase(it);
  }
  CUresult result = CUDA_SUCCESS;
  for (CUmemGenericAllocationHandle h : unmapped) {
    if (auto it = V().handles.find(h); it != V().handles.end()) --it->second.maps;
    if (CUresult r = MaybeReleaseLocked(call, h, lk); r && !result) result = r;
  }
  return result;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  const char* call = "cuMemSetAccess";
  if (CUresult r = Ready(call)) return r;
  if (!desc || count == 0) return Fail(call, CUDA_ERROR_INVALID_VALUE, "no access descriptors");
  int where;
  std::vector<int> owners;  // the devices whose memory is mapped in the range
  {
    std::lock_guard<std::mutex> lk(D().mu);
    where = ReservationDeviceLocked(ptr, size);
    for (auto it = V().maps.lower_bound(ptr); it != V().maps.end() && it->first < ptr + size; ++it) {
      owners.push_back(V().handles[it->second.handle].device);
    }
  }
  if (where < 0 || owners.empty()) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("0x{:x}, {} bytes: not a mapped range "
                "(cuMemMap)", ptr, size));
  }
  for (size_t i = 0; i < count; ++i) {
    const CUmemAccessDesc& d = desc[i];
    if (d.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
      return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("desc[{}].location.type {}: only "
                  "devices may be given access", i, static_cast<int>(d.location.type)));
    }
    if (CUresult r = CheckVmmDevice(call, d.location.id)) return r;
    if (d.flags == CU_MEM_ACCESS_FLAGS_PROT_READ) {
      return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("desc[{}].flags "
                  "CU_MEM_ACCESS_FLAGS_PROT_READ: read-only access is not supported; use "
                  "CU_MEM_ACCESS_FLAGS_PROT_READWRITE", i));
    }
    if (d.flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE && d.flags != CU_MEM_ACCESS_FLAGS_PROT_NONE) {
      return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("desc[{}].flags {}", i,
                  static_cast<int>(d.flags)));
    }
    for (int owner : owners) {
      if (owner != d.location.id) {
        return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("desc[{}].location.id {}: access "
                    "for a device to memory of device {} (peer access) is not supported", i,
                    d.location.id, owner));
      }
    }
  }
  CUresult err;
  ServerLink* l = D().Link(where, &err, call);
  if (!l) return err;
  for (size_t i = 0; i < count; ++i) {
    proto::MemSetAccess q{.ptr = ptr, .size = size, .device = D().Index(desc[i].location.id),
                          .flags = static_cast<uint32_t>(desc[i].flags)};
    if (CUresult r = Call(l, q, call)) return r;
    std::lock_guard<std::mutex> lk(D().mu);
    for (auto it = V().maps.lower_bound(ptr); it != V().maps.end() && it->first < ptr + size; ++it) {
      it->second.access = static_cast<unsigned long long>(desc[i].flags);
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
  const char* call = "cuMemGetAccess";
  if (CUresult r = Ready(call)) return r;
  if (!flags || !location) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null flags or location");
  std::lock_guard<std::mutex> lk(D().mu);
  auto it = V().maps.upper_bound(ptr);
  if (it == V().maps.begin() || ptr >= std::prev(it)->first + std::prev(it)->second.size) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("0x{:x} is not mapped (cuMemMap)", ptr));
  }
  --it;
  const int owner = V().handles[it->second.handle].device;
  // Only the owning device is ever given access here.
  *flags = location->type == CU_MEM_LOCATION_TYPE_DEVICE && location->id == owner
               ? it->second.access
               : static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle handle) {
  const char* call = "cuMemGetAllocationPropertiesFromHandle";
  if (CUresult r = Ready(call)) return r;
  if (!prop) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null prop");
  std::lock_guard<std::mutex> lk(D().mu);
  auto it = V().handles.find(handle);
  if (it == V().handles.end() || it->second.refs == 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("handle {} is not a live allocation "
                "handle", handle));
  }
  *prop = it->second.prop;
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  const char* call = "cuMemRetainAllocationHandle";
  if (CUresult r = Ready(call)) return r;
  if (!handle) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null handle");
  const auto p = reinterpret_cast<uint64_t>(addr);
  std::lock_guard<std::mutex> lk(D().mu);
  auto it = V().maps.upper_bound(p);
  if (it == V().maps.begin() || p >= std::prev(it)->first + std::prev(it)->second.size) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("{} is not mapped (cuMemMap)", addr));
  }
  --it;
  ++V().handles[it->second.handle].refs;
  *handle = it->second.handle;
  return CUDA_SUCCESS;
}

}  // extern "C"
#pragma GCC visibility pop
