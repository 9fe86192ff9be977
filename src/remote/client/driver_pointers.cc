// The driver stand-in's pointer queries (cuPointerGetAttribute(s), cuMemGetAddressRange,
// cuMemHostGetDevicePointer), answered on the client from its records of the program's
// allocations (cuMemAlloc: device memory on a server; cuMemAllocHost/cuMemHostAlloc: host memory
// in this process), with no round trip. Libraries ask these about the buffers they are handed
// (cuFFT asks the buffer id of its work area; NCCL the range and device of its buffers).
//
// Answers: a device allocation's context is its device's primary context (every context of a
// device shares the server device, driver_state.h), its memory type DEVICE, its host pointer
// refused (device memory here is never mapped into the host); a host allocation's type is HOST,
// its device pointer refused (host memory cannot be mapped into a remote GPU's address space:
// no zero-copy over a network). Nothing is managed memory, IPC- or RDMA-capable. Attributes of
// virtual memory management and memory pools (which the stand-in does not implement) are refused
// naming the attribute. A pointer in no allocation gets CUDA_ERROR_INVALID_VALUE without a
// message: libraries ask about pointers to learn whether they are CUDA memory at all.
// Boolean attributes are written as `unsigned int`, as callers (TensorFlow, oneAPI's adapter)
// read them.
#include <cuda.h>

#include <cstring>
#include <iterator>
#include <tuple>
#include <vector>

#include "remote/client/driver_state.h"

namespace gpool::remote::client::driver {
namespace {

struct PointerInfo {
  bool device = false;   // else host
  int device_ordinal = 0;
  uint64_t base = 0;
  uint64_t size = 0;
  uint64_t buffer_id = 0;
};

// The allocation holding `p`; false when none does. Caller holds D().mu.
bool FindLocked(uint64_t p, PointerInfo* out) {
  Driver& d = D();
  if (auto it = d.allocs.upper_bound(p); it != d.allocs.begin()) {
    --it;
    if (p < it->first + std::max<uint64_t>(it->second.size, 1)) {
      *out = {true, it->second.device, it->first, it->second.size, it->second.buffer_id};
      return true;
    }
  }
  const void* hp = reinterpret_cast<const void*>(p);
  if (auto it = d.host_allocs.upper_bound(hp); it != d.host_allocs.begin()) {
    --it;
    uint64_t base = reinterpret_cast<uint64_t>(it->first);
    if (p < base + std::max<uint64_t>(it->second.size, 1)) {
      // Host memory belongs to no device here; it is reported as the current device's (or
      // device 0's), where CUDA reports the context that allocated it.
      *out = {false, 0, base, it->second.size, it->second.buffer_id};
      return true;
    }
  }
  return false;
}

void PutUint(void* data, unsigned v) { std::memcpy(data, &v, sizeof v); }

// The size of an attribute's value as GetOne writes it; 0 for the attributes it refuses.
size_t ValueSize(CUpointer_attribute attr) {
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: return sizeof(CUcontext);
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: return sizeof(void*);
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: return sizeof(unsigned long long);
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: return sizeof(int);
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: return sizeof(size_t);
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: return sizeof(CUmemoryPool);
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
    case CU_POINTER_ATTRIBUTE_MAPPED:
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: return sizeof(unsigned);
    default: return 0;
  }
}

CUresult GetOne(const char* call, void* data, CUpointer_attribute attr, const PointerInfo& info,
                uint64_t ptr) {
  if (!data) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null result pointer");
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      CUcontext c = nullptr;
      std::lock_guard<std::mutex> lk(D().mu);
      if (info.device_ordinal < static_cast<int>(D().primary.size())) {
        c = reinterpret_cast<CUcontext>(D().primary[info.device_ordinal]);
      }
      std::memcpy(data, &c, sizeof c);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      PutUint(data, info.device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
      if (!info.device) {
        return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("0x{:x} is host memory, which "
                    "cannot be mapped into a remote GPU's address space", ptr));
      }
      CUdeviceptr v = ptr;
      std::memcpy(data, &v, sizeof v);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_HOST_POINTER: {
      if (info.device) return CUDA_ERROR_INVALID_VALUE;  // as CUDA: device memory, not mapped
      void* v = reinterpret_cast<void*>(ptr);
      std::memcpy(data, &v, sizeof v);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: {
      unsigned long long v = info.buffer_id;
      std::memcpy(data, &v, sizeof v);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
      int v = info.device_ordinal;
      std::memcpy(data, &v, sizeof v);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: {
      CUdeviceptr v = info.base;
      std::memcpy(data, &v, sizeof v);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE: {
      size_t v = info.size;
      std::memcpy(data, &v, sizeof v);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:  // never set (cuPointerSetAttribute is not implemented)
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      PutUint(data, 0);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      PutUint(data, 1);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      PutUint(data, CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: {
      CUmemoryPool v = nullptr;  // not from a pool: the stand-in has none
      std::memcpy(data, &v, sizeof v);
      return CUDA_SUCCESS;
    }
    default:
      return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                  fmt::format("pointer attribute {} is not supported by gpool",
                              static_cast<int>(attr)));
  }
}

}  // namespace
}  // namespace gpool::remote::client::driver

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point
using gpool::remote::client::ServerLink;

#pragma GCC visibility push(default)
extern "C" {

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  const char* call = "cuPointerGetAttribute";
  if (CUresult r = Ready(call)) return r;
  PointerInfo info;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (!FindLocked(ptr, &info)) return CUDA_ERROR_INVALID_VALUE;
  }
  return GetOne(call, data, attribute, info, ptr);
}

// As cuPointerGetAttribute for each attribute; a pointer CUDA does not know is no error here:
// every value reads 0 (null), as CUDA documents.
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                void** data, CUdeviceptr ptr) {
  const char* call = "cuPointerGetAttributes";
  if (CUresult r = Ready(call)) return r;
  if (numAttributes > 0 && (!attributes || !data)) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "null attributes or data");
  }
  PointerInfo info;
  bool known;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    known = FindLocked(ptr, &info);
  }
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (!known) {
      if (!data[i]) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null result pointer");
      if (size_t n = ValueSize(attributes[i])) {
        std::memset(data[i], 0, n);
        continue;
      }
      return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("pointer attribute {} is not "
                  "supported by gpool", static_cast<int>(attributes[i])));
    }
    // Host memory has no device pointer here (nothing is mapped into a remote GPU), and device
    // memory no host pointer: the plural form reads them as null, as CUDA does for an attribute
    // that does not apply (NVIDIA's runtime asks both for cudaPointerGetAttributes);
    // cuPointerGetAttribute refuses them.
    if ((!info.device && attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER) ||
        (info.device && attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER)) {
      if (!data[i]) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null result pointer");
      std::memset(data[i], 0, ValueSize(attributes[i]));
      continue;
    }
    if (CUresult r = GetOne(call, data[i], attributes[i], info, ptr)) return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  const char* call = "cuMemGetAddressRange_v2";
  if (CUresult r = Ready(call)) return r;
  PointerInfo info;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (!FindLocked(dptr, &info) || !info.device) {
      return Fail(call, CUDA_ERROR_NOT_FOUND, fmt::format("0x{:x} is in no device allocation", dptr));
    }
  }
  if (pbase) *pbase = info.base;
  if (psize) *psize = info.size;
  return CUDA_SUCCESS;
}

// Host registration: the program's memory is recorded as page-locked (the records of
// cuMemHostAlloc, marked registered), so device-to-host Async copies into it return at once (as
// into cuMemHostAlloc memory) and cuPointerGetAttribute reports it as host memory. Nothing is
// pinned on the client: only a server's staging buffers are truly pinned. Mapping it into the
// GPU (DEVICEMAP), I/O memory and READ_ONLY (which qualifies a device mapping) cannot reach a GPU
// on another host: refused loudly, naming the flag.
CUresult cuMemHostRegister(void* p, size_t bytesize, unsigned int flags) {
  const char* call = "cuMemHostRegister_v2";
  if (CUresult r = Ready(call)) return r;
  for (auto [flag, name, why] :
       {std::tuple{CU_MEMHOSTREGISTER_DEVICEMAP, "CU_MEMHOSTREGISTER_DEVICEMAP",
                   "a GPU on another host cannot map this host's memory"},
        std::tuple{CU_MEMHOSTREGISTER_IOMEMORY, "CU_MEMHOSTREGISTER_IOMEMORY",
                   "a GPU on another host cannot map this host's I/O memory"},
        std::tuple{CU_MEMHOSTREGISTER_READ_ONLY, "CU_MEMHOSTREGISTER_READ_ONLY",
                   "it qualifies a device mapping of host memory, which a GPU on another host "
                   "cannot have"}}) {
    if (flags & flag) {
      Say(fmt::format("{}({}) is not supported by gpool's libcuda.so.1 stand-in: {}", call, name,
                      why));
      return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  if (!p || bytesize == 0 || (flags & ~unsigned{CU_MEMHOSTREGISTER_PORTABLE}) != 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("pointer {}, {} bytes, flags {:#x}", p, bytesize, flags));
  }
  const char* at = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lk(D().mu);
  Driver& d = D();
  auto next = d.host_allocs.lower_bound(p);
  bool overlaps = next != d.host_allocs.end() && static_cast<const char*>(next->first) < at + bytesize;
  if (next != d.host_allocs.begin()) {
    auto prev = std::prev(next);
    overlaps |= static_cast<const char*>(prev->first) + std::max<size_t>(prev->second.size, 1) > at;
  }
  if (overlaps) {
    return Fail(call, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,
                fmt::format("[{}, +{}) overlaps page-locked or registered memory", p, bytesize));
  }
  d.host_allocs[p] = HostAlloc{bytesize, d.next_id++, flags, /*registered=*/true};
  return CUDA_SUCCESS;
}
CUresult cuMemHostUnregister(void* p) {
  const char* call = "cuMemHostUnregister";
  if (CUresult r = Ready(call)) return r;
  std::vector<ServerLink*> links;
  {
    std::lock_guard<std::mutex> lk(D().mu);
    auto it = D().host_allocs.find(p);
    if (it == D().host_allocs.end() || !it->second.registered) {
      return Fail(call, CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,
                  fmt::format("{} is not the start of memory cuMemHostRegister registered", p));
    }
    D().host_allocs.erase(it);
    links = D().LinksLocked();
  }
  // The program may free the memory next: no asynchronous copy may still be writing into it.
  LandAsyncReads(links);
  return CUDA_SUCCESS;
}

// Mapped (zero-copy) host memory would need the remote GPU to reach this process's memory over
// the network, which gpool does not do: refused, saying why.
CUresult cuMemHostGetDevicePointer(CUdeviceptr* pdptr, void* p, unsigned int) {
  const char* call = "cuMemHostGetDevicePointer_v2";
  if (CUresult r = Ready(call)) return r;
  if (!pdptr || !p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null pointer");
  return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("{} is host memory, which cannot be "
              "mapped into a remote GPU's address space (no zero-copy memory over gpool)", p));
}

}  // extern "C"
#pragma GCC visibility pop
