// The part of NVML's C ABI (nvml.h, NVIDIA's management library) that gpool's libnvidia-ml.so.1
// stand-in implements (nvml_api.cc). nvml.h ships with NVIDIA's driver development files, not
// the CUDA toolkit or a Debian package here, so the types are declared from NVML's documented,
// stable ABI: enum values and struct layouts as NVML 12 defines them (sizes checked below).
#pragma once

#include <cstddef>

extern "C" {

using nvmlReturn_t = int;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_FUNCTION_NOT_FOUND = 13;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

typedef struct nvmlDevice_st* nvmlDevice_t;

using nvmlEnableState_t = int;  // NVML_FEATURE_DISABLED 0, NVML_FEATURE_ENABLED 1
using nvmlNvLinkCapability_t = int;
using nvmlGpuP2PCapsIndex_t = int;  // READ 0, WRITE 1, NVLINK 2, ATOMICS 3, PROP 4
using nvmlGpuP2PStatus_t = int;
constexpr nvmlGpuP2PStatus_t NVML_P2P_STATUS_OK = 0;
constexpr nvmlGpuP2PStatus_t NVML_P2P_STATUS_NOT_SUPPORTED = 5;

// nvmlDeviceGetPciInfo_v3's layout (nvmlPciInfo_t).
struct nvmlPciInfo_t {
  char busIdLegacy[16];  // "dddd:bb:dd.f"
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];  // "dddddddd:bb:dd.f"
};
// The layout of nvmlDeviceGetPciInfo (v1), _v2 and nvmlDeviceGetNvLinkRemotePciInfo (v1).
struct nvmlPciInfoLegacy_t {
  char busId[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  unsigned int reserved0, reserved1, reserved2, reserved3;
};

union nvmlValue_t {
  double dVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
};
struct nvmlFieldValue_t {
  unsigned int fieldId;
  unsigned int scopeId;
  long long timestamp;
  long long latencyUsec;
  int valueType;
  nvmlReturn_t nvmlReturn;
  nvmlValue_t value;
};
static_assert(sizeof(nvmlFieldValue_t) == 40 && offsetof(nvmlFieldValue_t, nvmlReturn) == 28);

// NVML field ids that NCCL asks about (the NVLink and C2C families).
constexpr unsigned NVML_FI_DEV_NVLINK_GET_STATE = 165;
constexpr unsigned NVML_FI_DEV_C2C_LINK_COUNT = 170;

// nvmlSystemGetConfComputeSettings (version nvmlSystemConfComputeSettings_v1).
struct nvmlSystemConfComputeSettings_t {
  unsigned int version;
  unsigned int environment, ccFeature, devToolsMode, multiGpuMode;
};
// nvmlSystemGetConfComputeState.
struct nvmlConfComputeSystemState_t {
  unsigned int environment, ccFeature, devToolsMode;
};
// NVML_STRUCT_VERSION(data, ver): the struct's size in the low bits, the version at bit 24.
constexpr unsigned kConfComputeSettingsV1 = sizeof(nvmlSystemConfComputeSettings_t) | (1u << 24);

}  // extern "C"
