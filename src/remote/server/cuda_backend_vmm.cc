// The cuda backend's virtual memory management (the class: cuda_backend_internal.h): the
// driver's own calls on the device's primary context. The backend keeps its handles and mappings
// so that an unknown or released handle is refused rather than handed to the driver (undefined
// behaviour there), so that *freed can say when a handle's memory is gone (released and unmapped
// everywhere), and so that copies route to and check mapped ranges as allocations (owner_;
// mappings back to back count as one range).
#include <map>
#include <vector>

#include <fmt/format.h>

#include "remote/server/cuda_backend_internal.h"

#ifdef GPOOL_HAVE_CUDA_H
namespace gpool::remote::server::cuda {

CUmemAllocationProp CudaBackend::VmmProp(uint32_t dev) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = devs_[dev].dev;
  return prop;
}
Result CudaBackend::MemGranularity(uint32_t dev, bool recommended, uint64_t* bytes) {
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
Result CudaBackend::MemAddressReserve(uint32_t dev, uint64_t size, uint64_t alignment,
                                      uint64_t hint, uint64_t* ptr) {
  if (Result r = Use(dev); !r.ok()) return r;
  CUdeviceptr p = 0;
  Result r = R("cuMemAddressReserve", cu_.cuMemAddressReserve(&p, size, alignment, hint, 0));
  *ptr = p;
  return r;
}
Result CudaBackend::MemAddressFree(uint64_t ptr, uint64_t size) {
  if (auto m = vmm_maps_.lower_bound(ptr); m != vmm_maps_.end() && m->first < ptr + size) {
    return Err(kErrInvalidValue, fmt::format("cuMemAddressFree(0x{:x}, {}): 0x{:x} is still "
                                             "mapped (cuMemUnmap it first)", ptr, size, m->first));
  }
  return R("cuMemAddressFree", cu_.cuMemAddressFree(ptr, size));
}
Result CudaBackend::MemCreate(uint32_t dev, uint64_t size, uint64_t* handle) {
  if (Result r = Use(dev); !r.ok()) return r;
  CUmemAllocationProp prop = VmmProp(dev);
  CUmemGenericAllocationHandle h = 0;
  if (Result r = R("cuMemCreate", cu_.cuMemCreate(&h, size, &prop, 0)); !r.ok()) return r;
  vmm_handles_[h] = VmmHandle{.dev = dev, .size = size};
  *handle = h;
  return {};
}
// The handle's memory is gone once it is released and mapped nowhere: then appended to *gone.
void CudaBackend::VmmGone(std::map<uint64_t, VmmHandle>::iterator it, std::vector<uint64_t>* gone) {
  if (!it->second.released || it->second.maps != 0) return;
  gone->push_back(it->first);
  vmm_handles_.erase(it);
}
Result CudaBackend::MemRelease(uint64_t handle, std::vector<uint64_t>* gone) {
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
Result CudaBackend::MemMap(uint64_t ptr, uint64_t size, uint64_t offset, uint64_t handle) {
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
Result CudaBackend::MemUnmap(uint64_t ptr, uint64_t size, std::vector<uint64_t>* gone) {
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
Result CudaBackend::MemSetAccess(uint64_t ptr, uint64_t size, uint32_t dev, uint32_t flags) {
  if (Result r = Exists(dev); !r.ok()) return r;
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = devs_[dev].dev;
  d.flags = static_cast<CUmemAccess_flags>(flags);
  return R("cuMemSetAccess", cu_.cuMemSetAccess(ptr, size, &d, 1));
}

}  // namespace gpool::remote::server::cuda
#endif  // GPOOL_HAVE_CUDA_H
