// The CUDA driver API entry points the `cuda` backend uses (cuda_backend.cc), spelled out by hand:
// the name used in the code, the symbol looked up with dlsym in libcuda.so.1, an older symbol to
// fall back to when the driver lacks that one (or nullptr), and the parameter list. Written out
// rather than taken from decltype(&cuXxx) so that cuda_driver_check.cc can hold the table against
// cuda.h: each pointer type must equal decltype(&cuXxx) and each symbol must be the one cuda.h's
// #define maps the name to (CUDA 13: cuMemAlloc -> cuMemAlloc_v2, cuEventElapsedTime ->
// cuEventElapsedTime_v2, ...). dlsym needs the real exported name: the unsuffixed cuMemAlloc in
// libcuda.so.1 is the CUDA 3.x ABI with 32-bit sizes.
//
// The per-thread default stream variants (_ptsz/_ptds) are never used: the backend passes the
// legacy default stream (nullptr), as a program built without --default-stream per-thread does.
//
// Include only after <cuda.h>. Limits: the fallback symbol must have the same signature (checked
// only by reading cuda.h's legacy section). One symbol is optional: a driver older than CUDA 12.4
// lacks cuFuncGetParamInfo, and the backend then answers GetParamInfo "not supported", so that
// the client lays kernel parameters out from the fatbin itself (cuda_backend.cc, Driver::Load).
#pragma once

// X(name, symbol, fallback symbol or nullptr, parameter types...); every function returns CUresult.
#define GPOOL_CU_FUNCS(X)                                                                       \
  X(cuInit, "cuInit", nullptr, unsigned int)                                                    \
  X(cuDriverGetVersion, "cuDriverGetVersion", nullptr, int*)                                    \
  X(cuGetErrorString, "cuGetErrorString", nullptr, CUresult, const char**)                      \
  X(cuDeviceGetCount, "cuDeviceGetCount", nullptr, int*)                                        \
  X(cuDeviceGet, "cuDeviceGet", nullptr, CUdevice*, int)                                        \
  X(cuDeviceGetName, "cuDeviceGetName", nullptr, char*, int, CUdevice)                          \
  X(cuDeviceTotalMem, "cuDeviceTotalMem_v2", nullptr, size_t*, CUdevice)                        \
  X(cuDeviceGetAttribute, "cuDeviceGetAttribute", nullptr, int*, CUdevice_attribute, CUdevice)  \
  X(cuDeviceGetUuid, "cuDeviceGetUuid_v2", nullptr, CUuuid*, CUdevice)                          \
  X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", nullptr, CUcontext*, CUdevice)        \
  X(cuCtxSetCurrent, "cuCtxSetCurrent", nullptr, CUcontext)                                     \
  X(cuCtxSynchronize, "cuCtxSynchronize", nullptr, void)                                        \
  X(cuCtxSetLimit, "cuCtxSetLimit", nullptr, CUlimit, size_t)                                   \
  X(cuCtxGetLimit, "cuCtxGetLimit", nullptr, size_t*, CUlimit)                                  \
  X(cuDevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags_v2", nullptr, CUdevice,             \
    unsigned int)                                                                               \
  X(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", nullptr, CUdevice,               \
    unsigned int*, int*)                                                                        \
  X(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", nullptr, CUcontext, unsigned int)           \
  X(cuCtxDisablePeerAccess, "cuCtxDisablePeerAccess", nullptr, CUcontext)                       \
  X(cuMemGetInfo, "cuMemGetInfo_v2", nullptr, size_t*, size_t*)                                 \
  X(cuMemAlloc, "cuMemAlloc_v2", nullptr, CUdeviceptr*, size_t)                                 \
  X(cuMemFree, "cuMemFree_v2", nullptr, CUdeviceptr)                                            \
  X(cuMemHostAlloc, "cuMemHostAlloc", nullptr, void**, size_t, unsigned int)                    \
  X(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", nullptr, CUdeviceptr, const void*, size_t,       \
    CUstream)                                                                                   \
  X(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", nullptr, void*, CUdeviceptr, size_t, CUstream)   \
  X(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", nullptr, CUdeviceptr, CUdeviceptr, size_t,       \
    CUstream)                                                                                   \
  X(cuMemsetD8Async, "cuMemsetD8Async", nullptr, CUdeviceptr, unsigned char, size_t, CUstream)  \
  X(cuMemsetD2D8Async, "cuMemsetD2D8Async", nullptr, CUdeviceptr, size_t, unsigned char, size_t, \
    size_t, CUstream)                                                                           \
  X(cuMemcpy2DAsync, "cuMemcpy2DAsync_v2", nullptr, const CUDA_MEMCPY2D*, CUstream)             \
  X(cuModuleLoadData, "cuModuleLoadData", nullptr, CUmodule*, const void*)                      \
  X(cuModuleUnload, "cuModuleUnload", nullptr, CUmodule)                                        \
  X(cuModuleGetFunction, "cuModuleGetFunction", nullptr, CUfunction*, CUmodule, const char*)    \
  X(cuModuleGetGlobal, "cuModuleGetGlobal_v2", nullptr, CUdeviceptr*, size_t*, CUmodule,        \
    const char*)                                                                                \
  X(cuFuncGetParamInfo, "cuFuncGetParamInfo", nullptr, CUfunction, size_t, size_t*, size_t*)    \
  X(cuFuncGetAttribute, "cuFuncGetAttribute", nullptr, int*, CUfunction_attribute, CUfunction)  \
  X(cuFuncSetAttribute, "cuFuncSetAttribute", nullptr, CUfunction, CUfunction_attribute, int)   \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,                                       \
    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", nullptr, int*, CUfunction, int,     \
    size_t, unsigned int)                                                                       \
  X(cuLaunchKernel, "cuLaunchKernel", nullptr, CUfunction, unsigned int, unsigned int,          \
    unsigned int, unsigned int, unsigned int, unsigned int, unsigned int, CUstream, void**,     \
    void**)                                                                                     \
  X(cuLaunchKernelEx, "cuLaunchKernelEx", nullptr, const CUlaunchConfig*, CUfunction, void**,   \
    void**)                                                                                     \
  X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", nullptr, CUstream*, unsigned int, \
    int)                                                                                        \
  X(cuStreamDestroy, "cuStreamDestroy_v2", nullptr, CUstream)                                   \
  X(cuStreamSynchronize, "cuStreamSynchronize", nullptr, CUstream)                              \
  X(cuStreamQuery, "cuStreamQuery", nullptr, CUstream)                                          \
  X(cuStreamWaitEvent, "cuStreamWaitEvent", nullptr, CUstream, CUevent, unsigned int)           \
  X(cuEventCreate, "cuEventCreate", nullptr, CUevent*, unsigned int)                            \
  X(cuEventRecord, "cuEventRecord", nullptr, CUevent, CUstream)                                 \
  X(cuEventSynchronize, "cuEventSynchronize", nullptr, CUevent)                                 \
  X(cuEventQuery, "cuEventQuery", nullptr, CUevent)                                             \
  /* The _v2 export is recent (CUDA 12.8 drivers); older ones have only the first. */               \
  X(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime", float*, CUevent,         \
    CUevent)                                                                                    \
  X(cuEventDestroy, "cuEventDestroy_v2", nullptr, CUevent)                                      \
  /* Virtual memory management (protocol v9). */                                                \
  X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", nullptr, size_t*,           \
    const CUmemAllocationProp*, CUmemAllocationGranularity_flags)                               \
  X(cuMemAddressReserve, "cuMemAddressReserve", nullptr, CUdeviceptr*, size_t, size_t,          \
    CUdeviceptr, unsigned long long)                                                            \
  X(cuMemAddressFree, "cuMemAddressFree", nullptr, CUdeviceptr, size_t)                         \
  X(cuMemCreate, "cuMemCreate", nullptr, CUmemGenericAllocationHandle*, size_t,                 \
    const CUmemAllocationProp*, unsigned long long)                                             \
  X(cuMemRelease, "cuMemRelease", nullptr, CUmemGenericAllocationHandle)                        \
  X(cuMemMap, "cuMemMap", nullptr, CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,   \
    unsigned long long)                                                                         \
  X(cuMemUnmap, "cuMemUnmap", nullptr, CUdeviceptr, size_t)                                     \
  X(cuMemSetAccess, "cuMemSetAccess", nullptr, CUdeviceptr, size_t, const CUmemAccessDesc*,     \
    size_t)
