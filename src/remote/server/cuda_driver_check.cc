// Compile-only check of the cuda backend against the CUDA headers it is built with (no code, no
// GPU needed: built into gpool_remote_server whenever cuda.h is found, as it is in CI). It holds
//  - the hand-written driver table (cuda_driver.h): each pointer type equals decltype(&cuXxx) as
//    cuda.h declares it, and each dlsym symbol is the one cuda.h's #define maps the name to;
//  - the numbers the backend passes through unchanged: CUresult values it returns as cudaError_t,
//    backend.h's CudaErr constants, and the runtime's device attributes, stream, event and
//    host-alloc flags that travel from the program to the driver as they are.
// A new CUDA release that renames an entry point (cuFoo -> cuFoo_v3) or renumbers one of these
// fails the build here, naming the function or value, instead of misbehaving on the first GPU.
#ifdef GPOOL_HAVE_CUDA_H
#include <cuda.h>
#include <driver_types.h>

#include <string_view>
#include <type_traits>

#include "remote/server/backend.h"
#include "remote/server/cuda_driver.h"

namespace gpool::remote::server {
namespace {

#define GPOOL_CHECK_STR2(x) #x
#define GPOOL_CHECK_STR(x) GPOOL_CHECK_STR2(x)

// `name` is macro-expanded in the comparison (cuMemAlloc -> cuMemAlloc_v2) but not in #name.
#define GPOOL_CU_CHECK(name, symbol, fallback, ...)                                            \
  static_assert(std::is_same_v<CUresult (*)(__VA_ARGS__), decltype(&::name)>,                  \
                "cuda_driver.h: the parameter list of " #name " differs from cuda.h");        \
  static_assert(std::string_view(GPOOL_CHECK_STR(name)) == std::string_view(symbol),           \
                "cuda_driver.h: cuda.h maps " #name " to another exported symbol than " symbol);
GPOOL_CU_FUNCS(GPOOL_CU_CHECK)
#undef GPOOL_CU_CHECK

static_assert(CUDA_VERSION >= 12040, "the cuda backend needs cuda.h from CUDA 12.4 or newer "
                                     "(cuFuncGetParamInfo)");

// CUresult values the backend hands back as cudaError_t without translation (cuda_backend.cc's
// CudaBackend::R and cuda_backend_modules.cc translate only the few whose runtime meaning
// differs, e.g. a missing kernel or symbol).
#define GPOOL_SAME(cu, rt) \
  static_assert(static_cast<int>(cu) == static_cast<int>(rt), #cu " != " #rt);
GPOOL_SAME(CUDA_SUCCESS, cudaSuccess)
GPOOL_SAME(CUDA_ERROR_INVALID_VALUE, cudaErrorInvalidValue)
GPOOL_SAME(CUDA_ERROR_OUT_OF_MEMORY, cudaErrorMemoryAllocation)
GPOOL_SAME(CUDA_ERROR_NOT_INITIALIZED, cudaErrorInitializationError)
GPOOL_SAME(CUDA_ERROR_DEINITIALIZED, cudaErrorCudartUnloading)
GPOOL_SAME(CUDA_ERROR_STUB_LIBRARY, cudaErrorStubLibrary)
GPOOL_SAME(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, cudaErrorCallRequiresNewerDriver)
GPOOL_SAME(CUDA_ERROR_DEVICE_UNAVAILABLE, cudaErrorDevicesUnavailable)
GPOOL_SAME(CUDA_ERROR_NO_DEVICE, cudaErrorNoDevice)
GPOOL_SAME(CUDA_ERROR_INVALID_DEVICE, cudaErrorInvalidDevice)
GPOOL_SAME(CUDA_ERROR_INVALID_IMAGE, cudaErrorInvalidKernelImage)
GPOOL_SAME(CUDA_ERROR_INVALID_CONTEXT, cudaErrorDeviceUninitialized)
GPOOL_SAME(CUDA_ERROR_NO_BINARY_FOR_GPU, cudaErrorNoKernelImageForDevice)
GPOOL_SAME(CUDA_ERROR_ECC_UNCORRECTABLE, cudaErrorECCUncorrectable)
GPOOL_SAME(CUDA_ERROR_INVALID_PTX, cudaErrorInvalidPtx)
GPOOL_SAME(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, cudaErrorJitCompilerNotFound)
GPOOL_SAME(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, cudaErrorUnsupportedPtxVersion)
GPOOL_SAME(CUDA_ERROR_JIT_COMPILATION_DISABLED, cudaErrorJitCompilationDisabled)
GPOOL_SAME(CUDA_ERROR_OPERATING_SYSTEM, cudaErrorOperatingSystem)
GPOOL_SAME(CUDA_ERROR_INVALID_HANDLE, cudaErrorInvalidResourceHandle)
GPOOL_SAME(CUDA_ERROR_ILLEGAL_STATE, cudaErrorIllegalState)
GPOOL_SAME(CUDA_ERROR_NOT_FOUND, cudaErrorSymbolNotFound)
GPOOL_SAME(CUDA_ERROR_NOT_READY, cudaErrorNotReady)
GPOOL_SAME(CUDA_ERROR_ILLEGAL_ADDRESS, cudaErrorIllegalAddress)
GPOOL_SAME(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, cudaErrorLaunchOutOfResources)
GPOOL_SAME(CUDA_ERROR_LAUNCH_TIMEOUT, cudaErrorLaunchTimeout)
GPOOL_SAME(CUDA_ERROR_CONTEXT_IS_DESTROYED, cudaErrorContextIsDestroyed)
GPOOL_SAME(CUDA_ERROR_ASSERT, cudaErrorAssert)
GPOOL_SAME(CUDA_ERROR_HARDWARE_STACK_ERROR, cudaErrorHardwareStackError)
GPOOL_SAME(CUDA_ERROR_ILLEGAL_INSTRUCTION, cudaErrorIllegalInstruction)
GPOOL_SAME(CUDA_ERROR_MISALIGNED_ADDRESS, cudaErrorMisalignedAddress)
GPOOL_SAME(CUDA_ERROR_INVALID_ADDRESS_SPACE, cudaErrorInvalidAddressSpace)
GPOOL_SAME(CUDA_ERROR_INVALID_PC, cudaErrorInvalidPc)
GPOOL_SAME(CUDA_ERROR_LAUNCH_FAILED, cudaErrorLaunchFailure)
GPOOL_SAME(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, cudaErrorCooperativeLaunchTooLarge)
GPOOL_SAME(CUDA_ERROR_NOT_PERMITTED, cudaErrorNotPermitted)
GPOOL_SAME(CUDA_ERROR_NOT_SUPPORTED, cudaErrorNotSupported)
GPOOL_SAME(CUDA_ERROR_SYSTEM_NOT_READY, cudaErrorSystemNotReady)
GPOOL_SAME(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, cudaErrorSystemDriverMismatch)
GPOOL_SAME(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, cudaErrorCompatNotSupportedOnDevice)
GPOOL_SAME(CUDA_ERROR_TIMEOUT, cudaErrorTimeout)
GPOOL_SAME(CUDA_ERROR_UNKNOWN, cudaErrorUnknown)
GPOOL_SAME(CUDA_ERROR_UNSUPPORTED_LIMIT, cudaErrorUnsupportedLimit)
GPOOL_SAME(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, cudaErrorPeerAccessUnsupported)
GPOOL_SAME(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, cudaErrorPeerAccessAlreadyEnabled)
GPOOL_SAME(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, cudaErrorPeerAccessNotEnabled)

// backend.h's error numbers are cudaError_t values.
GPOOL_SAME(kErrInvalidValue, cudaErrorInvalidValue)
GPOOL_SAME(kErrMemoryAllocation, cudaErrorMemoryAllocation)
GPOOL_SAME(kErrInvalidDevicePointer, cudaErrorInvalidDevicePointer)
GPOOL_SAME(kErrInvalidMemcpyDirection, cudaErrorInvalidMemcpyDirection)
GPOOL_SAME(kErrInvalidDeviceFunction, cudaErrorInvalidDeviceFunction)
GPOOL_SAME(kErrInvalidDevice, cudaErrorInvalidDevice)
GPOOL_SAME(kErrInvalidKernelImage, cudaErrorInvalidKernelImage)
GPOOL_SAME(kErrInvalidResourceHandle, cudaErrorInvalidResourceHandle)
GPOOL_SAME(kErrNotFound, cudaErrorSymbolNotFound)
GPOOL_SAME(kErrNotReady, cudaErrorNotReady)
GPOOL_SAME(kErrLaunchFailure, cudaErrorLaunchFailure)
GPOOL_SAME(kErrIllegalAddress, cudaErrorIllegalAddress)
GPOOL_SAME(kErrNotSupported, cudaErrorNotSupported)
GPOOL_SAME(kErrNotPermitted, cudaErrorNotPermitted)
GPOOL_SAME(kErrUnknown, cudaErrorUnknown)
GPOOL_SAME(kErrInvalidSymbol, cudaErrorInvalidSymbol)
GPOOL_SAME(kErrUnsupportedLimit, cudaErrorUnsupportedLimit)
GPOOL_SAME(kErrPeerAccessUnsupported, cudaErrorPeerAccessUnsupported)
GPOOL_SAME(kErrPeerAccessAlreadyEnabled, cudaErrorPeerAccessAlreadyEnabled)
GPOOL_SAME(kErrPeerAccessNotEnabled, cudaErrorPeerAccessNotEnabled)

// Flags passed from the program to the driver unchanged (StreamCreate, EventCreate).
GPOOL_SAME(CU_STREAM_DEFAULT, cudaStreamDefault)
GPOOL_SAME(CU_STREAM_NON_BLOCKING, cudaStreamNonBlocking)
GPOOL_SAME(CU_EVENT_DEFAULT, cudaEventDefault)
GPOOL_SAME(CU_EVENT_BLOCKING_SYNC, cudaEventBlockingSync)
GPOOL_SAME(CU_EVENT_DISABLE_TIMING, cudaEventDisableTiming)
GPOOL_SAME(CU_EVENT_INTERPROCESS, cudaEventInterprocess)
// cudaDeviceSetLimit's cudaLimit goes to cuCtxSetLimit as it is (and the emulated backend numbers
// its limits the same way); cudaSetDeviceFlags' flags go to cuDevicePrimaryCtxSetFlags.
GPOOL_SAME(CU_LIMIT_STACK_SIZE, cudaLimitStackSize)
GPOOL_SAME(CU_LIMIT_PRINTF_FIFO_SIZE, cudaLimitPrintfFifoSize)
GPOOL_SAME(CU_LIMIT_MALLOC_HEAP_SIZE, cudaLimitMallocHeapSize)
GPOOL_SAME(CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH, cudaLimitDevRuntimeSyncDepth)
GPOOL_SAME(CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT, cudaLimitDevRuntimePendingLaunchCount)
GPOOL_SAME(CU_LIMIT_MAX_L2_FETCH_GRANULARITY, cudaLimitMaxL2FetchGranularity)
GPOOL_SAME(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, cudaLimitPersistingL2CacheSize)
GPOOL_SAME(CU_CTX_SCHED_AUTO, cudaDeviceScheduleAuto)
GPOOL_SAME(CU_CTX_SCHED_SPIN, cudaDeviceScheduleSpin)
GPOOL_SAME(CU_CTX_SCHED_YIELD, cudaDeviceScheduleYield)
GPOOL_SAME(CU_CTX_SCHED_BLOCKING_SYNC, cudaDeviceScheduleBlockingSync)
GPOOL_SAME(CU_CTX_SCHED_MASK, cudaDeviceScheduleMask)
GPOOL_SAME(CU_CTX_MAP_HOST, cudaDeviceMapHost)
GPOOL_SAME(CU_CTX_LMEM_RESIZE_TO_MAX, cudaDeviceLmemResizeToMax)
GPOOL_SAME(CU_CTX_SYNC_MEMOPS, cudaDeviceSyncMemops)

// Device attributes: cudaDeviceGetAttribute's cudaDevAttr goes to cuDeviceGetAttribute as it is
// (GetAttribute), so spot-check the ones the samples and common programs ask for, at both ends
// of the range.
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, cudaDevAttrMaxThreadsPerBlock)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, cudaDevAttrMaxSharedMemoryPerBlock)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_WARP_SIZE, cudaDevAttrWarpSize)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, cudaDevAttrClockRate)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cudaDevAttrMultiProcessorCount)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, cudaDevAttrConcurrentKernels)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, cudaDevAttrPciBusId)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, cudaDevAttrMemoryClockRate)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, cudaDevAttrGlobalMemoryBusWidth)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, cudaDevAttrL2CacheSize)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, cudaDevAttrComputeCapabilityMajor)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, cudaDevAttrComputeCapabilityMinor)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, cudaDevAttrManagedMemory)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
           cudaDevAttrMaxSharedMemoryPerBlockOptin)
GPOOL_SAME(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, cudaDevAttrMaxBlocksPerMultiprocessor)
// Function attributes (FuncAttributes reads them by the driver's names).
GPOOL_SAME(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, cudaFuncAttributeMaxDynamicSharedMemorySize)
// cudaFuncSetAttribute's attribute goes to cuFuncSetAttribute as it is.
GPOOL_SAME(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, cudaFuncAttributePreferredSharedMemoryCarveout)
GPOOL_SAME(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, cudaFuncAttributeClusterDimMustBeSet)
GPOOL_SAME(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, cudaFuncAttributeRequiredClusterWidth)
GPOOL_SAME(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, cudaFuncAttributeRequiredClusterHeight)
GPOOL_SAME(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, cudaFuncAttributeRequiredClusterDepth)
GPOOL_SAME(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, cudaFuncAttributeNonPortableClusterSizeAllowed)
GPOOL_SAME(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, cudaFuncAttributeClusterSchedulingPolicyPreference)
#undef GPOOL_SAME

}  // namespace
}  // namespace gpool::remote::server
#endif  // GPOOL_HAVE_CUDA_H
