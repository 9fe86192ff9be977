// gpool's stand-in for libnvidia-ml.so.1 (NVML, NVIDIA's management library), for libraries that
// read GPU identity and topology through it: NCCL opens it at communicator creation, dlsyms its
// entry points, and stops without it. `gpool run` puts it beside the libcuda.so.1 stand-in, first
// in the program's library path. It answers from the pool's devices through the driver stand-in
// (it links libcuda.so.1, so in a process it is the same library and the same sessions the
// program's own driver calls use): the device list, names, UUIDs, PCI bus ids and compute
// capabilities are the driver stand-in's answers by construction, never a second opinion.
//
// What a remote GPU cannot have is answered as NVML answers for a GPU without the feature:
// NVLink and C2C are NOT_SUPPORTED (a PCIe GPU's answer), GPU fabric and platform info
// NOT_SUPPORTED (not in an NVLink fabric), P2P between two different devices NOT_SUPPORTED
// (devices of different servers share no memory, and the driver stand-in implements no peer
// access between devices of one server either), confidential computing off. Each choice is in
// docs/remoting/nccl.md ("NVML"). NVML's device index is the CUDA device ordinal of the pool
// (GPOOL_DEVICES' order). Entry points gpool does not implement are loud stubs (nvml_stubs.cc)
// returning NVML_ERROR_FUNCTION_NOT_FOUND, "this NVML does not implement the function".
//
// Thread safety: one mutex around the init count and the device records; the driver calls it
// makes are thread-safe.
#include <cuda.h>
#include <sched.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "remote/client/nvml_abi.h"
#include "remote/client/nvml_state.h"
#include "remote/client/pool.h"

// The handle NVML gives out: one record per device, never freed, so a handle a library kept
// across nvmlShutdown and a later nvmlInit stays valid (as NVML's own do).
struct nvmlDevice_st {
  int ordinal = 0;
};

namespace gpool::remote::client::nvml {
namespace {

std::mutex g_mu;
int g_inits = 0;                                       // nvmlInit minus nvmlShutdown
std::vector<nvmlDevice_st*>& Devices() {
  static auto* v = new std::vector<nvmlDevice_st*>();  // never destroyed: exit-time calls
  return *v;
}

void Say(const std::string& s) { fmt::print(stderr, "gpool: {}\n", s); }

// A driver stand-in error as NVML's. The driver stand-in has already said why, naming its call.
nvmlReturn_t FromCU(CUresult r) {
  switch (r) {
    case CUDA_SUCCESS: return NVML_SUCCESS;
    case CUDA_ERROR_NOT_INITIALIZED: return NVML_ERROR_UNINITIALIZED;
    case CUDA_ERROR_NO_DEVICE: return NVML_ERROR_DRIVER_NOT_LOADED;
    case CUDA_ERROR_INVALID_DEVICE: return NVML_ERROR_INVALID_ARGUMENT;
    case CUDA_ERROR_DEVICE_UNAVAILABLE: return NVML_ERROR_GPU_IS_LOST;
    case CUDA_ERROR_NOT_PERMITTED: return 4;  // NVML_ERROR_NO_PERMISSION: the lease refused
    default: return NVML_ERROR_UNKNOWN;
  }
}

// The device of handle `h` (one of ours, NVML initialized), else the error.
nvmlReturn_t Dev(nvmlDevice_t h, int* ordinal) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  for (nvmlDevice_st* d : Devices()) {
    if (d == h) {
      *ordinal = d->ordinal;
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_INVALID_ARGUMENT;
}

struct Pci {
  unsigned domain = 0, bus = 0, device = 0;
};
// The device's PCI address as the driver stand-in reports it (cuDeviceGetPCIBusId: gpool's
// domain for the device's server, see pool.h PoolPciAddresses).
nvmlReturn_t PciOf(int ordinal, Pci* out) {
  char id[32] = {};
  if (CUresult r = cuDeviceGetPCIBusId(id, sizeof id, ordinal)) return FromCU(r);
  unsigned f = 0;
  if (std::sscanf(id, "%x:%x:%x.%x", &out->domain, &out->bus, &out->device, &f) != 4) {
    Say(fmt::format("NVML: cuDeviceGetPCIBusId gave '{}' for device {}, not dddd:bb:dd.f", id,
                    ordinal));
    return NVML_ERROR_UNKNOWN;
  }
  return NVML_SUCCESS;
}

nvmlReturn_t Init() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_inits > 0) {
    ++g_inits;
    return NVML_SUCCESS;
  }
  // cuInit only reads GPOOL_DEVICES: no server is contacted until a query needs one.
  if (CUresult r = cuInit(0)) return FromCU(r);
  int n = 0;
  if (CUresult r = cuDeviceGetCount(&n)) return FromCU(r);
  auto& devs = Devices();
  while (static_cast<int>(devs.size()) < n) {
    devs.push_back(new nvmlDevice_st{static_cast<int>(devs.size())});
  }
  devs.resize(n);  // the device list comes from the environment: it does not change in a process
  ++g_inits;
  return NVML_SUCCESS;
}

nvmlReturn_t CopyString(const std::string& s, char* out, unsigned len) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

}  // namespace

unsigned ServerIndex(int dev) {
  static const PoolEnv* env = new PoolEnv(ReadPoolEnv());  // fixed for the process
  if (dev < 0 || dev >= static_cast<int>(env->devices.size())) return 0;
  return env->devices[dev].index;
}

// ParseBusId: see nvml_state.h.
bool ParseBusId(const char* id, unsigned* domain, unsigned* bus, unsigned* device) {
  if (!id) return false;
  int colons = 0;
  for (const char* c = id; *c; ++c) colons += *c == ':';
  unsigned v[4] = {0, 0, 0, 0};
  int used = 0;
  if (colons == 2 && std::sscanf(id, "%x:%x:%x.%x%n", &v[0], &v[1], &v[2], &v[3], &used) == 4 &&
      id[used] == '\0') {
  } else if (colons == 2 && std::sscanf(id, "%x:%x:%x%n", &v[0], &v[1], &v[2], &used) == 3 &&
             id[used] == '\0') {
  } else if (colons == 1 && std::sscanf(id, "%x:%x.%x%n", &v[1], &v[2], &v[3], &used) == 3 &&
             id[used] == '\0') {
  } else {
    return false;
  }
  if (v[3] != 0 || v[1] > 0xff || v[2] > 0x1f) return false;  // GPUs are function 0
  *domain = v[0];
  *bus = v[1];
  *device = v[2];
  return true;
}

}  // namespace gpool::remote::client::nvml

using namespace gpool::remote::client::nvml;

extern "C" {

#define GPOOL_NVML_EXPORT __attribute__((visibility("default")))

GPOOL_NVML_EXPORT nvmlReturn_t nvmlInit_v2() { return Init(); }
GPOOL_NVML_EXPORT nvmlReturn_t nvmlInit() { return Init(); }
// Flags only ask NVML to go on without GPUs or attached devices; the pool's list is fixed.
GPOOL_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int) { return Init(); }

GPOOL_NVML_EXPORT nvmlReturn_t nvmlShutdown() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  --g_inits;  // the driver stand-in's sessions stay: they belong to the process, not to NVML
  return NVML_SUCCESS;
}

GPOOL_NVML_EXPORT const char* nvmlErrorString(nvmlReturn_t r) {
  switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt request issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "GPU access blocked by the operating system";
    case 18: return "RM has detected an NVML/RM version mismatch";
    case 19: return "In use by another client";
    case 20: return "GPU memory error";
    case 21: return "No data";
    case 22: return "vGPU ECC not supported";
    case 23: return "Insufficient resources";
    case 24: return "Frequency not supported";
    case 25: return "Argument version mismatch";
    case 26: return "Deprecated";
    case 27: return "Not ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    default: return "Unknown Error";
  }
}

GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  *count = static_cast<unsigned>(Devices().size());
  return NVML_SUCCESS;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
  return nvmlDeviceGetCount_v2(count);
}

GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* d) {
  if (!d) return NVML_ERROR_INVALID_ARGUMENT;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  if (index >= Devices().size()) return NVML_ERROR_INVALID_ARGUMENT;
  *d = Devices()[index];
  return NVML_SUCCESS;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* d) {
  return nvmlDeviceGetHandleByIndex_v2(index, d);
}

// NVML's forms: domain:bus:device.function with a 4- or 8-digit domain, domain:bus:device, and
// bus:device.function (domain 0); hexadecimal, either case. An id no device has is NOT_FOUND.
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* id, nvmlDevice_t* d) {
  if (!id || !d) return NVML_ERROR_INVALID_ARGUMENT;
  Pci want;
  if (!ParseBusId(id, &want.domain, &want.bus, &want.device)) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  if (nvmlReturn_t r = nvmlDeviceGetCount_v2(&n)) return r;
  for (unsigned i = 0; i < n; ++i) {
    Pci p;
    if (nvmlReturn_t r = PciOf(static_cast<int>(i), &p)) return r;
    if (p.domain == want.domain && p.bus == want.bus && p.device == want.device) {
      return nvmlDeviceGetHandleByIndex_v2(i, d);
    }
  }
  return NVML_ERROR_NOT_FOUND;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* id, nvmlDevice_t* d) {
  return nvmlDeviceGetHandleByPciBusId_v2(id, d);
}

GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t h, char* uuid, unsigned int len) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  CUuuid u;
  if (CUresult r = cuDeviceGetUuid_v2(&u, dev)) return FromCU(r);
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::string s = fmt::format(
      "GPU-{:02x}{:02x}{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}"
      "{:02x}{:02x}",
      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
      b[14], b[15]);
  return CopyString(s, uuid, len);
}

GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* d) {
  if (!uuid || !d) return NVML_ERROR_INVALID_ARGUMENT;
  unsigned n = 0;
  if (nvmlReturn_t r = nvmlDeviceGetCount_v2(&n)) return r;
  for (unsigned i = 0; i < n; ++i) {
    nvmlDevice_t h;
    char s[96];
    if (nvmlReturn_t r = nvmlDeviceGetHandleByIndex_v2(i, &h)) return r;
    if (nvmlReturn_t r = nvmlDeviceGetUUID(h, s, sizeof s)) return r;
    if (strcasecmp(s, uuid) == 0) {
      *d = h;
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t h, unsigned int* index) {
  if (!index) return NVML_ERROR_INVALID_ARGUMENT;
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  *index = static_cast<unsigned>(dev);
  return NVML_SUCCESS;
}

GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t h, char* name, unsigned int len) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  char buf[256] = {};
  if (CUresult r = cuDeviceGetName(buf, sizeof buf, dev)) return FromCU(r);
  return CopyString(buf, name, len);
}

// The GPU's index on its server: the client cannot see the server's /dev/nvidiaN, and the
// server's device index is what it numbers its GPUs by (nvidia-smi there shows the same for a
// host whose minor numbers follow the index, the usual case).
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t h, unsigned int* minor) {
  if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  *minor = gpool::remote::client::nvml::ServerIndex(dev);
  return NVML_SUCCESS;
}

GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t h, int* major,
                                                                  int* minor) {
  if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  if (CUresult r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)) {
    return FromCU(r);
  }
  return FromCU(cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
}

// The PCI address the driver stand-in reports. The PCI device id is not known to the client
// (the protocol carries no such field): the vendor is NVIDIA's (0x10de), the device part 0, and
// the subsystem id 0.
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t h, nvmlPciInfo_t* pci) {
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  Pci p;
  if (nvmlReturn_t r = PciOf(dev, &p)) return r;
  *pci = nvmlPciInfo_t{};
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.0", p.domain, p.bus,
                p.device);
  std::snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.0", p.domain, p.bus, p.device);
  pci->domain = p.domain;
  pci->bus = p.bus;
  pci->device = p.device;
  pci->pciDeviceId = 0x10de;
  return NVML_SUCCESS;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t h, nvmlPciInfoLegacy_t* pci) {
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  nvmlPciInfo_t v3;
  if (nvmlReturn_t r = nvmlDeviceGetPciInfo_v3(h, &v3)) return r;
  *pci = nvmlPciInfoLegacy_t{};
  std::memcpy(pci->busId, v3.busIdLegacy, sizeof pci->busId);
  pci->domain = v3.domain;
  pci->bus = v3.bus;
  pci->device = v3.device;
  pci->pciDeviceId = v3.pciDeviceId;
  return NVML_SUCCESS;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t h, nvmlPciInfoLegacy_t* pci) {
  return nvmlDeviceGetPciInfo_v2(h, pci);
}

// No NVLink on a pooled GPU (the client reaches it over the network): NVML's answer for a GPU
// without NVLink.
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t h, unsigned int,
                                                        nvmlEnableState_t*) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  return NVML_ERROR_NOT_SUPPORTED;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t h, unsigned int,
                                                             nvmlNvLinkCapability_t, unsigned int*) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  return NVML_ERROR_NOT_SUPPORTED;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t h, unsigned int,
                                                                   nvmlPciInfo_t*) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  return NVML_ERROR_NOT_SUPPORTED;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t h, unsigned int,
                                                                nvmlPciInfoLegacy_t*) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  return NVML_ERROR_NOT_SUPPORTED;
}

// A device with itself: OK. Two different devices: NOT_SUPPORTED for every capability. Devices
// of different servers share no memory; two devices of one server could in principle, but the
// driver stand-in implements no peer access (cuDeviceCanAccessPeer, cuCtxEnablePeerAccess are
// loud stubs), and NVML must not promise what the driver does not do.
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b,
                                                      nvmlGpuP2PCapsIndex_t index,
                                                      nvmlGpuP2PStatus_t* status) {
  if (!status || index < 0 || index > 4) return NVML_ERROR_INVALID_ARGUMENT;
  int da, db;
  if (nvmlReturn_t r = Dev(a, &da)) return r;
  if (nvmlReturn_t r = Dev(b, &db)) return r;
  *status = da == db ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
  return NVML_SUCCESS;
}

// Per field: NVLink and C2C fields are NOT_SUPPORTED (no such links, as on a PCIe GPU); any other
// field is not implemented, said once per field id, and NOT_SUPPORTED too. The call itself
// succeeds, as NVML's does (each field carries its own result).
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t h, int count,
                                                        nvmlFieldValue_t* values) {
  if (count < 0 || (count > 0 && !values)) return NVML_ERROR_INVALID_ARGUMENT;
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  static std::mutex said_mu;
  static auto& said = *new std::set<unsigned>();
  for (int i = 0; i < count; ++i) {
    nvmlFieldValue_t& v = values[i];
    bool links = (v.fieldId >= 90 && v.fieldId <= 91) || (v.fieldId >= 146 && v.fieldId <= 147) ||
                 (v.fieldId >= 164 && v.fieldId <= 166) || (v.fieldId >= 170 && v.fieldId <= 172);
    if (!links) {
      std::lock_guard<std::mutex> lk(said_mu);
      if (said.insert(v.fieldId).second) {
        Say(fmt::format("nvmlDeviceGetFieldValues: field {} is not implemented by gpool's "
                        "libnvidia-ml.so.1 stand-in (answered NVML_ERROR_NOT_SUPPORTED)",
                        v.fieldId));
      }
    }
    v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    v.timestamp = 0;
    v.latencyUsec = 0;
  }
  return NVML_SUCCESS;
}

// Not part of an NVLink fabric (multi-node NVLink) nor of an NVLink platform: NVML's answer for a
// GPU outside one.
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t h, void*) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  return NVML_ERROR_NOT_SUPPORTED;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t h, void*) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  return NVML_ERROR_NOT_SUPPORTED;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t h, void*) {
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  return NVML_ERROR_NOT_SUPPORTED;
}

// Confidential computing is off: gpool's sessions are not a CC environment (the data crosses the
// network in the clear unless the transport protects it), so no library may assume one.
GPOOL_NVML_EXPORT nvmlReturn_t nvmlSystemGetConfComputeState(nvmlConfComputeSystemState_t* s) {
  if (!s) return NVML_ERROR_INVALID_ARGUMENT;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  }
  *s = nvmlConfComputeSystemState_t{};
  return NVML_SUCCESS;
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlSystemGetConfComputeSettings(nvmlSystemConfComputeSettings_t* s) {
  if (!s) return NVML_ERROR_INVALID_ARGUMENT;
  if (s->version != kConfComputeSettingsV1) return 25;  // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (g_inits == 0) return NVML_ERROR_UNINITIALIZED;
  }
  *s = nvmlSystemConfComputeSettings_t{.version = kConfComputeSettingsV1};
  return NVML_SUCCESS;
}

// A remote GPU is equally far from every CPU of this host: its affinity is every CPU the process
// may run on (sched_getaffinity), so no library pins threads for it. cpuSet holds cpuSetSize
// words of CPU bits, as NVML's.
GPOOL_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t h, unsigned int size,
                                                        unsigned long* set) {
  if (!set || size == 0) return NVML_ERROR_INVALID_ARGUMENT;
  int dev;
  if (nvmlReturn_t r = Dev(h, &dev)) return r;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof cpus, &cpus) != 0) return NVML_ERROR_UNKNOWN;
  constexpr unsigned kBits = 8 * sizeof(unsigned long);
  std::memset(set, 0, size * sizeof(unsigned long));
  for (unsigned c = 0; c < CPU_SETSIZE && c / kBits < size; ++c) {
    if (CPU_ISSET(c, &cpus)) set[c / kBits] |= 1UL << (c % kBits);
  }
  return NVML_SUCCESS;
}

// The CUDA driver API version the driver stand-in implements (cuDriverGetVersion).
GPOOL_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* version) {
  if (!version) return NVML_ERROR_INVALID_ARGUMENT;
  return FromCU(cuDriverGetVersion(version));
}
GPOOL_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* version) {
  return nvmlSystemGetCudaDriverVersion_v2(version);
}

}  // extern "C"
