#include "agent/nvml.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace gpool::agent {
namespace {

// The subset of nvml.h used here (NVML's C ABI).
using nvmlReturn_t = int;  // NVML_SUCCESS = 0
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {
  unsigned int gpu, memory;  // percent
};
struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr int kNvmlTemperatureGpu = 0;

class NvmlGpus : public GpuSource {
 public:
  ~NvmlGpus() override {
    if (shutdown_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  std::string kind() const override { return "nvml"; }

  // Resolves the symbols and calls nvmlInit_v2.
  bool Open(std::string* why) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) {
      *why = fmt::format("libnvidia-ml.so.1 not loadable ({}): no NVIDIA driver, no GPUs", dlerror());
      return false;
    }
    bool ok = Sym("nvmlInit_v2", &init_) && Sym("nvmlShutdown", &shutdown_) &&
              Sym("nvmlDeviceGetCount_v2", &count_) &&
              Sym("nvmlDeviceGetHandleByIndex_v2", &handle_) && Sym("nvmlDeviceGetName", &name_) &&
              Sym("nvmlDeviceGetUUID", &uuid_) && Sym("nvmlDeviceGetMemoryInfo", &mem_) &&
              Sym("nvmlDeviceGetPciInfo_v3", &pci_) &&
              Sym("nvmlDeviceGetUtilizationRates", &util_) &&
              Sym("nvmlDeviceGetPowerUsage", &power_) &&
              Sym("nvmlDeviceGetTemperature", &temp_) && Sym("nvmlErrorString", &error_);
    if (!ok) {
      *why = fmt::format("libnvidia-ml.so.1: missing symbol {}", missing_);
      shutdown_ = nullptr;
      return false;
    }
    nvmlReturn_t r = init_();
    if (r != 0) {
      *why = fmt::format("nvmlInit_v2: {}", error_(r));
      shutdown_ = nullptr;
      return false;
    }
    return true;
  }

  StatusOr<std::vector<GpuInfo>> List() override {
    unsigned n = 0;
    if (nvmlReturn_t r = count_(&n); r != 0) {
      return Status::Unavailable(fmt::format("nvmlDeviceGetCount: {}", error_(r)));
    }
    std::vector<GpuInfo> out;
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      if (nvmlReturn_t r = handle_(i, &d); r != 0) {
        return Status::Unavailable(fmt::format("nvmlDeviceGetHandleByIndex({}): {}", i, error_(r)));
      }
      GpuInfo g;
      g.index = static_cast<int>(i);
      char buf[96] = {};
      if (name_(d, buf, sizeof buf) == 0) g.name = buf;
      char ubuf[96] = {};
      if (uuid_(d, ubuf, sizeof ubuf) == 0) g.uuid = ubuf;
      nvmlMemory_t m{};
      if (mem_(d, &m) == 0) g.memory_bytes = m.total;
      nvmlPciInfo_t p{};
      if (pci_(d, &p) == 0) g.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.0", p.domain, p.bus, p.device);
      out.push_back(std::move(g));
    }
    return out;
  }

  std::vector<GpuSample> Sample() override {
    std::vector<GpuSample> out;
    unsigned n = 0;
    if (count_(&n) != 0) return out;
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t d = nullptr;
      if (handle_(i, &d) != 0) continue;
      GpuSample s;
      s.index = static_cast<int>(i);
      nvmlUtilization_t u{};
      if (util_(d, &u) == 0) s.utilization = u.gpu / 100.0;
      nvmlMemory_t m{};
      if (mem_(d, &m) == 0) {
        s.memory_used_bytes = m.used;
        s.memory_total_bytes = m.total;
      }
      unsigned mw = 0;
      if (power_(d, &mw) == 0) s.power_w = mw / 1000.0;
      unsigned t = 0;
      if (temp_(d, kNvmlTemperatureGpu, &t) == 0) s.temperature_c = t;
      out.push_back(s);
    }
    return out;
  }

 private:
  template <typename F>
  bool Sym(const char* name, F** fn) {
    *fn = reinterpret_cast<F*>(dlsym(lib_, name));
    if (!*fn) missing_ = name;
    return *fn != nullptr;
  }

  void* lib_ = nullptr;
  std::string missing_;
  nvmlReturn_t (*init_)() = nullptr;
  nvmlReturn_t (*shutdown_)() = nullptr;
  nvmlReturn_t (*count_)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid_)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*mem_)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*pci_)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*util_)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*power_)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*temp_)(nvmlDevice_t, int, unsigned*) = nullptr;
  const char* (*error_)(nvmlReturn_t) = nullptr;
};

}  // namespace

std::unique_ptr<GpuSource> OpenNvml(std::string* why) {
  auto g = std::make_unique<NvmlGpus>();
  if (!g->Open(why)) return nullptr;
  return g;
}

StatusOr<std::vector<GpuInfo>> EmulatedGpus::List() {
  std::vector<GpuInfo> out;
  for (int i = 0; i < count_; ++i) {
    out.push_back({.index = i, .name = model_, .uuid = "", .pci_bus_id = "", .memory_bytes = memory_bytes_});
  }
  return out;
}

std::vector<GpuSample> EmulatedGpus::Sample() {
  std::vector<GpuSample> out;
  for (int i = 0; i < count_; ++i) out.push_back({.index = i, .memory_total_bytes = memory_bytes_});
  return out;
}

}  // namespace gpool::agent
