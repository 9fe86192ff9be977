// Asks gpool's NVML stand-in (libnvidia-ml.so.1, opened with dlopen as NCCL does) about the
// pool's devices and checks each answer against the driver stand-in's (libcuda.so.1), which the
// NVML stand-in must agree with by construction: count, PCI bus ids in NVML's forms, UUIDs,
// names, compute capabilities, handles found again by bus id (each form NVML accepts) and by
// UUID; no NVLink, no P2P between different devices, confidential computing off; a loud stub.
// Run through `gpool run`; prints "PASS nvml_probe devices=N" (driver_e2e_test.cc).
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "remote/client/nvml_abi.h"

#define EXPECT(cond)                                                          \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                           \
    }                                                                         \
  } while (0)

namespace {
void* g_lib = nullptr;
template <class F>
F Sym(const char* name) {
  void* p = dlsym(g_lib, name);
  if (!p) {
    std::fprintf(stderr, "libnvidia-ml.so.1 has no %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}
}  // namespace

int main() {
  g_lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
  EXPECT(g_lib != nullptr);
  auto init = Sym<nvmlReturn_t (*)()>("nvmlInit_v2");
  auto shutdown = Sym<nvmlReturn_t (*)()>("nvmlShutdown");
  auto count_fn = Sym<nvmlReturn_t (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  auto by_index = Sym<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2");
  auto by_bus = Sym<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>("nvmlDeviceGetHandleByPciBusId_v2");
  auto by_uuid = Sym<nvmlReturn_t (*)(const char*, nvmlDevice_t*)>("nvmlDeviceGetHandleByUUID");
  auto index_fn = Sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned*)>("nvmlDeviceGetIndex");
  auto pci_fn = Sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlPciInfo_t*)>("nvmlDeviceGetPciInfo_v3");
  auto uuid_fn = Sym<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetUUID");
  auto name_fn = Sym<nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetName");
  auto cc_fn = Sym<nvmlReturn_t (*)(nvmlDevice_t, int*, int*)>("nvmlDeviceGetCudaComputeCapability");
  auto p2p = Sym<nvmlReturn_t (*)(nvmlDevice_t, nvmlDevice_t, int, int*)>("nvmlDeviceGetP2PStatus");
  auto nvlink = Sym<nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*)>("nvmlDeviceGetNvLinkState");
  auto cc_state = Sym<nvmlReturn_t (*)(nvmlConfComputeSystemState_t*)>("nvmlSystemGetConfComputeState");
  auto memory = Sym<nvmlReturn_t (*)(nvmlDevice_t, void*)>("nvmlDeviceGetMemoryInfo");

  unsigned n = 0;
  EXPECT(count_fn(&n) == NVML_ERROR_UNINITIALIZED);  // before nvmlInit
  EXPECT(init() == NVML_SUCCESS);
  EXPECT(count_fn(&n) == NVML_SUCCESS);
  CUresult r = cuInit(0);
  EXPECT(r == CUDA_SUCCESS);
  int cu_count = 0;
  EXPECT(cuDeviceGetCount(&cu_count) == CUDA_SUCCESS);
  EXPECT(static_cast<int>(n) == cu_count && n >= 2);
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t d = nullptr, again = nullptr;
    EXPECT(by_index(i, &d) == NVML_SUCCESS);
    unsigned idx = 99;
    EXPECT(index_fn(d, &idx) == NVML_SUCCESS && idx == i);
    // The bus id: the driver's, in NVML's forms.
    char cu_bus[32] = {};
    EXPECT(cuDeviceGetPCIBusId(cu_bus, sizeof cu_bus, static_cast<CUdevice>(i)) == CUDA_SUCCESS);
    nvmlPciInfo_t pci;
    EXPECT(pci_fn(d, &pci) == NVML_SUCCESS);
    EXPECT(strcasecmp(pci.busIdLegacy, cu_bus) == 0);
    EXPECT(strcasecmp(pci.busId + 4, cu_bus) == 0 && std::strncmp(pci.busId, "0000", 4) == 0);
    EXPECT((pci.pciDeviceId & 0xffff) == 0x10de);
    std::printf("device %u: %s\n", i, pci.busId);
    for (const std::string& form :
         {std::string(cu_bus), std::string(pci.busId), std::string(pci.busIdLegacy),
          std::string(cu_bus).substr(0, 10)}) {  // dddd:bb:dd, no function
      again = nullptr;
      EXPECT(by_bus(form.c_str(), &again) == NVML_SUCCESS && again == d);
    }
    EXPECT(by_bus("0000:00:00.1", &again) != NVML_SUCCESS);  // a GPU is function 0
    // UUID, name, compute capability: the driver's.
    CUuuid u;
    EXPECT(cuDeviceGetUuid_v2(&u, static_cast<CUdevice>(i)) == CUDA_SUCCESS);
    char uuid[96] = {}, want[96] = {};
    const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
    std::snprintf(want, sizeof want,
                  "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                  b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                  b[14], b[15]);
    EXPECT(uuid_fn(d, uuid, sizeof uuid) == NVML_SUCCESS && std::strcmp(uuid, want) == 0);
    EXPECT(uuid_fn(d, uuid, 8) == NVML_ERROR_INSUFFICIENT_SIZE);
    EXPECT(by_uuid(uuid, &again) == NVML_SUCCESS && again == d);
    char name[96] = {}, cu_name[96] = {};
    EXPECT(cuDeviceGetName(cu_name, sizeof cu_name, static_cast<CUdevice>(i)) == CUDA_SUCCESS);
    EXPECT(name_fn(d, name, sizeof name) == NVML_SUCCESS && std::strcmp(name, cu_name) == 0);
    int major = 0, minor = 0, cu_major = -1;
    EXPECT(cc_fn(d, &major, &minor) == NVML_SUCCESS);
    EXPECT(cuDeviceGetAttribute(&cu_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                static_cast<CUdevice>(i)) == CUDA_SUCCESS);
    EXPECT(major == cu_major);
    int active = 1;
    EXPECT(nvlink(d, 0, &active) == NVML_ERROR_NOT_SUPPORTED);
    for (unsigned j = 0; j < n; ++j) {
      nvmlDevice_t e;
      EXPECT(by_index(j, &e) == NVML_SUCCESS);
      int status = -1;
      EXPECT(p2p(d, e, 0, &status) == NVML_SUCCESS);
      EXPECT(status == (i == j ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED));
    }
  }
  nvmlDevice_t none;
  EXPECT(by_bus("ffff:fe:1f.0", &none) == NVML_ERROR_NOT_FOUND);
  EXPECT(by_bus("not a bus id", &none) == NVML_ERROR_INVALID_ARGUMENT);
  EXPECT(by_uuid("GPU-00000000-0000-0000-0000-000000000000", &none) == NVML_ERROR_NOT_FOUND);
  nvmlConfComputeSystemState_t cc{1, 1, 1};
  EXPECT(cc_state(&cc) == NVML_SUCCESS && cc.ccFeature == 0);
  // A loud stub: named on stderr, FUNCTION_NOT_FOUND.
  nvmlDevice_t d0;
  EXPECT(by_index(0, &d0) == NVML_SUCCESS);
  unsigned char mem[64];
  EXPECT(memory(d0, mem) == NVML_ERROR_FUNCTION_NOT_FOUND);
  EXPECT(shutdown() == NVML_SUCCESS);
  EXPECT(count_fn(&n) == NVML_ERROR_UNINITIALIZED);
  std::printf("PASS nvml_probe devices=%d\n", cu_count);
  return 0;
}
