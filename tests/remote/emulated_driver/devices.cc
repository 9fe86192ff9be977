// The emulated CUDA driver's initialisation, devices and contexts: cuInit (and the environment
// it reads), the driver version, error strings, device queries and attributes, primary contexts,
// context limits and peer access. See emulated_driver.cc for what the library is.
#include "emulated_driver.h"

#include <cstdlib>
#include <cstring>

namespace gpool::remote::emulated_driver {
namespace {

uint64_t EnvPositive(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (*end != 0 || n == 0) {
    Fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "{}={} is not a positive integer; using {}", name, v,
         fallback);
    return fallback;
  }
  return n;
}

int DeviceAttribute(CUdevice_attribute a, bool* known) {
  *known = true;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: return INT32_MAX;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: return kDefaultMaxDynamicShared;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: return kOptinShared;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: return 228 << 10;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY: return 64 << 10;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: return INT32_MAX;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: return 65536;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE: return 1000000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT: return 512;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: return kMultiprocessors;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: return 0;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: return 0;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: return 1;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: return 0;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT: return 2;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: return 1;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: return 1000000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: return 256;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: return 4 << 20;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: return kMaxThreadsPerMp;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: return 9;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: return 0;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: return 0;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: return 1;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: return kMaxBlocksPerMp;
    case CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE: return 0;
    default:
      // Any other attribute the driver defines reads 0 (a feature this device lacks), as the
      // emulated backend answers (emulated_backend.cc, GetAttribute): NVIDIA's runtime asks for
      // ~110 of them at start-up, on the driver layer. Numbers outside the enum are refused.
      *known = a > 0 && a < CU_DEVICE_ATTRIBUTE_MAX;
      return 0;
  }
}

struct ErrorName {
  CUresult r;
  const char* text;
};
constexpr ErrorName kErrorNames[] = {
    {CUDA_SUCCESS, "no error"},
    {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
    {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
    {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
    {CUDA_ERROR_UNSUPPORTED_LIMIT, "unsupported limit"},
    {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
    {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"},
    {CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"},
    {CUDA_ERROR_NOT_READY, "device not ready"},
    {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
};

}  // namespace
}  // namespace gpool::remote::emulated_driver

using namespace gpool::remote::emulated_driver;  // NOLINT: the entry points below are C

// cuda.h's #defines give the entry points their exported (versioned) names: cuMemAlloc here is
// cuMemAlloc_v2.
extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
  Lock lock(S().mu);
  State& s = S();
  if (flags != 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "flags {} (want 0)", flags);
  if (s.initialized) return CUDA_SUCCESS;
  s.devices = static_cast<int>(EnvPositive("GPOOL_EMULATED_DRIVER_DEVICES", 1));
  s.memory = EnvPositive("GPOOL_EMULATED_DRIVER_MEMORY", s.memory);
  if (const char* k = std::getenv("GPOOL_EMULATED_DRIVER_KERNELS"); k && *k) {
    auto plugin = KernelPlugin::Load(k);
    if (!plugin.ok()) return Fail(CUDA_ERROR_INVALID_VALUE, "cuInit", "{}", plugin.status().message());
    s.plugin = std::move(*plugin);
  }
  s.used.assign(s.devices, 0);
  s.primary.resize(s.devices);
  s.ctx_flags.assign(s.devices, 0);
  s.initialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  *version = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** str) {
  for (const ErrorName& e : kErrorNames) {
    if (e.r == error) {
      *str = e.text;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  Lock lock(S().mu);
  if (!S().initialized) return Fail(CUDA_ERROR_NOT_INITIALIZED, "cuDeviceGetCount", "cuInit was not called");
  *count = S().devices;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceGet", ordinal); r) return r;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceGetName", dev); r) return r;
  if (len <= 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetName", "length {}", len);
  std::snprintf(name, static_cast<size_t>(len), "gpool emulated CUDA driver device %d (not a GPU)", dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceTotalMem", dev); r) return r;
  *bytes = S().memory;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceGetAttribute", dev); r) return r;
  bool known = false;
  int v = DeviceAttribute(attrib, &known);
  if (!known) return NotImplemented("cuDeviceGetAttribute", fmt::format("attribute {}", static_cast<int>(attrib)));
  *pi = attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID ? dev : v;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDeviceGetUuid", dev); r) return r;
  std::memset(uuid->bytes, 0, sizeof uuid->bytes);
  std::memcpy(uuid->bytes, "gpool-emu-drv", 13);
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxRetain", dev); r) return r;
  auto& c = S().primary[dev];
  if (!c) {
    c = std::make_unique<Ctx>();
    c->dev = dev;
  }
  *pctx = reinterpret_cast<CUcontext>(c.get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  Lock lock(S().mu);
  auto* c = reinterpret_cast<Ctx*>(ctx);
  bool live = c == nullptr;
  for (const auto& p : S().primary) live |= p.get() == c;
  if (!live) return Fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent", "unknown context");
  Current() = c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize() {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxSynchronize"); r) return r;
  return Synced();
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxSetLimit"); r) return r;
  if (limit < 0 || limit >= kLimitCount) {
    return Fail(CUDA_ERROR_UNSUPPORTED_LIMIT, "cuCtxSetLimit", "unknown limit {}", static_cast<int>(limit));
  }
  if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE && value != 0) {
    return Fail(CUDA_ERROR_UNSUPPORTED_LIMIT, "cuCtxSetLimit",
                "CU_LIMIT_PERSISTING_L2_CACHE_SIZE: the emulated device has no persisting L2");
  }
  Current()->limits[limit] = value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetLimit(size_t* value, CUlimit limit) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxGetLimit"); r) return r;
  if (limit < 0 || limit >= kLimitCount) {
    return Fail(CUDA_ERROR_UNSUPPORTED_LIMIT, "cuCtxGetLimit", "unknown limit {}", static_cast<int>(limit));
  }
  *value = Current()->limits[limit];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxSetFlags", dev); r) return r;
  unsigned sched = flags & CU_CTX_SCHED_MASK;
  if ((flags & ~unsigned{CU_CTX_FLAGS_MASK}) != 0 ||
      (sched != 0 && sched != CU_CTX_SCHED_SPIN && sched != CU_CTX_SCHED_YIELD &&
       sched != CU_CTX_SCHED_BLOCKING_SYNC)) {
    return Fail(CUDA_ERROR_INVALID_VALUE, "cuDevicePrimaryCtxSetFlags", "flags 0x{:x}", flags);
  }
  S().ctx_flags[dev] = flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  Lock lock(S().mu);
  if (CUresult r = CheckDevice("cuDevicePrimaryCtxGetState", dev); r) return r;
  *flags = S().ctx_flags[dev];
  *active = S().primary[dev] != nullptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxEnablePeerAccess"); r) return r;
  auto* p = reinterpret_cast<Ctx*>(peer);
  if (flags != 0) return Fail(CUDA_ERROR_INVALID_VALUE, "cuCtxEnablePeerAccess", "flags {}", flags);
  if (p == Current() || p == nullptr) {
    return Fail(CUDA_ERROR_INVALID_DEVICE, "cuCtxEnablePeerAccess", "peer is the current context");
  }
  if (!Current()->peers.insert(p).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) {
  Lock lock(S().mu);
  if (CUresult r = Ready("cuCtxDisablePeerAccess"); r) return r;
  if (!Current()->peers.erase(reinterpret_cast<Ctx*>(peer))) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}

}  // extern "C"
