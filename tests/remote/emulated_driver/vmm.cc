// The emulated CUDA driver's virtual memory management: cuMemAddressReserve ... cuMemSetAccess,
// on the emulated backend's own EmulatedVmm (Vmm in emulated_driver.cc). See emulated_driver.cc
// for what the library is.
#include "emulated_driver.h"

using namespace gpool::remote::emulated_driver;  // NOLINT: the entry points below are C

// cuda.h's #defines give the entry points their exported (versioned) names: cuMemAlloc here is
// cuMemAlloc_v2.
extern "C" {

// Virtual memory management (see Vmm in emulated_driver.cc). Physical memory counts against the device's
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
