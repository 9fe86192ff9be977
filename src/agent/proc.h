// CPU and memory of this machine from /proc. Parsers take the file text so tests run them on
// fixtures; the Read* helpers read the live files.
//
// Thread safety: pure functions; CpuSampler is not thread-safe (one owner).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpool::agent {

struct MemInfo {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
};
// /proc/meminfo: MemTotal and MemAvailable (kB). Errors name the missing field.
StatusOr<MemInfo> ParseMemInfo(std::string_view text);

struct CpuInfo {
  int logical_cpus = 0;      // "processor" entries
  std::string model;         // first "model name"; empty when absent (e.g. some ARM kernels)
};
StatusOr<CpuInfo> ParseCpuInfo(std::string_view text);

// The aggregate "cpu" line of /proc/stat, in clock ticks.
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t total = 0;
};
StatusOr<CpuTimes> ParseProcStat(std::string_view text);
// Utilization between two readings, 0..1 (0 when no time passed).
double CpuUtilization(const CpuTimes& before, const CpuTimes& after);

StatusOr<MemInfo> ReadMemInfo(const std::string& proc = "/proc");
StatusOr<CpuInfo> ReadCpuInfo(const std::string& proc = "/proc");

// Utilization since the previous call (the first call measures since boot).
class CpuSampler {
 public:
  explicit CpuSampler(std::string proc = "/proc") : proc_(std::move(proc)) {}
  StatusOr<double> Sample();

 private:
  std::string proc_;
  CpuTimes last_;
};

}  // namespace gpool::agent
