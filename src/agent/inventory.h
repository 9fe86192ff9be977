// What the node agent discovers on its machine, and the small interfaces each discovery source
// sits behind so tests can feed fixtures (docs/control-plane.md, "Node agent"):
//   GPUs     NVML, loaded with dlopen (nvml.h); none without the driver. Or emulated devices.
//   HCAs     libibverbs (verbs.h); an empty list without devices.
//   Affinity hwloc, live or from an XML fixture (topology.h).
//   CPU/mem  /proc (proc.h).
//
// Thread safety: the structs are values; each source states its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpool::agent {

struct GpuInfo {
  int index = 0;
  std::string name;          // e.g. "NVIDIA H100 80GB HBM3"
  std::string uuid;          // "GPU-..."; empty for emulated devices
  std::string pci_bus_id;    // "0000:1b:00.0" (lower case); empty when unknown
  uint64_t memory_bytes = 0;
};

struct GpuSample {
  int index = 0;
  double utilization = 0;    // 0..1
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  double power_w = 0;        // 0 = unknown
  double temperature_c = 0;
};

// GPUs of this machine. Implementations: NVML (nvml.h), EmulatedGpus (below).
class GpuSource {
 public:
  virtual ~GpuSource() = default;
  virtual std::string kind() const = 0;  // "nvml", "emulated"
  virtual StatusOr<std::vector<GpuInfo>> List() = 0;
  // Best effort: a GPU whose counters can't be read is left out.
  virtual std::vector<GpuSample> Sample() = 0;
};

// `gpool agent --emulated-gpus N`: N devices with no hardware behind them, so the controller can
// bind tasks to a machine without GPUs (tests, CI). Telemetry is all zeros except memory_total.
// Thread safety: immutable after construction.
class EmulatedGpus : public GpuSource {
 public:
  EmulatedGpus(int count, std::string model, uint64_t memory_bytes)
      : count_(count), model_(std::move(model)), memory_bytes_(memory_bytes) {}
  std::string kind() const override { return "emulated"; }
  StatusOr<std::vector<GpuInfo>> List() override;
  std::vector<GpuSample> Sample() override;

 private:
  int count_;
  std::string model_;
  uint64_t memory_bytes_;
};

struct HcaPortInfo {
  std::string device;        // "mlx5_0"
  int port = 1;
  std::string guid;          // "0x0123456789abcdef"
  int lid = 0;
  std::string rate;          // "4xNDR"
  double rate_gbps = 0;
  std::string state;         // "active", "down", ...
  std::string pci_bus_id;    // from sysfs when known
};

class HcaSource {
 public:
  virtual ~HcaSource() = default;
  virtual StatusOr<std::vector<HcaPortInfo>> List() = 0;
};

struct AffinityInfo {
  int gpu = 0;
  std::string hca;           // nearest HCA; empty when none
  std::string distance;      // "PIX", "PHB", "NODE", "SYS" (topology.h)
  int numa_node = -1;
  std::string pci_bus_id;
};

}  // namespace gpool::agent
