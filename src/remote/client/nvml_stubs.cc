// Loud stubs for NVML entry points gpool's libnvidia-ml.so.1 stand-in does not implement: each
// says its name once on stderr and returns NVML_ERROR_FUNCTION_NOT_FOUND (13, "this NVML does not
// implement the function"), never a made-up value. Signatures are irrelevant (no NVML header is
// included; every listed function returns nvmlReturn_t, an int). The list is NVML's commonly used
// queries; a name in neither file is not exported: a program linked against it fails to load
// naming the symbol, and dlsym finds nothing, as with an NVML older than the function, which
// libraries that dlopen NVML (NCCL) already handle.
#include <mutex>
#include <set>
#include <string>

#include <fmt/format.h>

#include "remote/client/nvml_state.h"

namespace gpool::remote::client::nvml {

int NvmlUnsupported(const char* name) {
  static std::mutex mu;
  static auto& said = *new std::set<std::string>();  // never destroyed: exit-time calls
  std::lock_guard<std::mutex> lk(mu);
  if (said.insert(name).second) {
    fmt::print(stderr, "gpool: {} is not implemented by gpool's libnvidia-ml.so.1 stand-in\n", name);
  }
  return 13;  // NVML_ERROR_FUNCTION_NOT_FOUND
}

}  // namespace gpool::remote::client::nvml

#define GPOOL_NVML_STUB(name)                                                          \
  extern "C" __attribute__((visibility("default"))) int name() {                       \
    return ::gpool::remote::client::nvml::NvmlUnsupported(#name);                      \
  }

GPOOL_NVML_STUB(nvmlSystemGetDriverVersion)
GPOOL_NVML_STUB(nvmlSystemGetNVMLVersion)
GPOOL_NVML_STUB(nvmlSystemGetProcessName)
GPOOL_NVML_STUB(nvmlSystemGetTopologyGpuSet)
GPOOL_NVML_STUB(nvmlDeviceGetMemoryInfo)
GPOOL_NVML_STUB(nvmlDeviceGetMemoryInfo_v2)
GPOOL_NVML_STUB(nvmlDeviceGetBAR1MemoryInfo)
GPOOL_NVML_STUB(nvmlDeviceGetUtilizationRates)
GPOOL_NVML_STUB(nvmlDeviceGetTemperature)
GPOOL_NVML_STUB(nvmlDeviceGetPowerUsage)
GPOOL_NVML_STUB(nvmlDeviceGetPowerManagementLimit)
GPOOL_NVML_STUB(nvmlDeviceGetEnforcedPowerLimit)
GPOOL_NVML_STUB(nvmlDeviceGetTotalEnergyConsumption)
GPOOL_NVML_STUB(nvmlDeviceGetClockInfo)
GPOOL_NVML_STUB(nvmlDeviceGetMaxClockInfo)
GPOOL_NVML_STUB(nvmlDeviceGetApplicationsClock)
GPOOL_NVML_STUB(nvmlDeviceGetFanSpeed)
GPOOL_NVML_STUB(nvmlDeviceGetPerformanceState)
GPOOL_NVML_STUB(nvmlDeviceGetComputeMode)
GPOOL_NVML_STUB(nvmlDeviceGetPersistenceMode)
GPOOL_NVML_STUB(nvmlDeviceGetEccMode)
GPOOL_NVML_STUB(nvmlDeviceGetTotalEccErrors)
GPOOL_NVML_STUB(nvmlDeviceGetSerial)
GPOOL_NVML_STUB(nvmlDeviceGetBoardId)
GPOOL_NVML_STUB(nvmlDeviceGetBrand)
GPOOL_NVML_STUB(nvmlDeviceGetArchitecture)
GPOOL_NVML_STUB(nvmlDeviceGetNumGpuCores)
GPOOL_NVML_STUB(nvmlDeviceGetMigMode)
GPOOL_NVML_STUB(nvmlDeviceGetMaxPcieLinkGeneration)
GPOOL_NVML_STUB(nvmlDeviceGetMaxPcieLinkWidth)
GPOOL_NVML_STUB(nvmlDeviceGetCurrPcieLinkGeneration)
GPOOL_NVML_STUB(nvmlDeviceGetCurrPcieLinkWidth)
GPOOL_NVML_STUB(nvmlDeviceGetComputeRunningProcesses)
GPOOL_NVML_STUB(nvmlDeviceGetComputeRunningProcesses_v2)
GPOOL_NVML_STUB(nvmlDeviceGetComputeRunningProcesses_v3)
GPOOL_NVML_STUB(nvmlDeviceGetGraphicsRunningProcesses)
GPOOL_NVML_STUB(nvmlDeviceGetGraphicsRunningProcesses_v3)
GPOOL_NVML_STUB(nvmlDeviceGetTopologyCommonAncestor)
GPOOL_NVML_STUB(nvmlDeviceGetTopologyNearestGpus)
GPOOL_NVML_STUB(nvmlDeviceGetMemoryAffinity)
GPOOL_NVML_STUB(nvmlDeviceGetCpuAffinityWithinScope)
GPOOL_NVML_STUB(nvmlDeviceSetCpuAffinity)
GPOOL_NVML_STUB(nvmlDeviceClearCpuAffinity)
GPOOL_NVML_STUB(nvmlDeviceGetNvLinkVersion)
GPOOL_NVML_STUB(nvmlDeviceGetNvLinkErrorCounter)
GPOOL_NVML_STUB(nvmlDeviceGetVirtualizationMode)
GPOOL_NVML_STUB(nvmlDeviceGetSupportedEventTypes)
GPOOL_NVML_STUB(nvmlEventSetCreate)
GPOOL_NVML_STUB(nvmlDeviceRegisterEvents)
GPOOL_NVML_STUB(nvmlEventSetWait_v2)
GPOOL_NVML_STUB(nvmlEventSetFree)
