// Units used across gpool: link rates, byte sizes and milli-GPUs.
//
// Plain value types with explicit names so that a Gb/s figure is never mistaken for GB/s and a
// fraction of a GPU is always an integer count of milli-GPUs (1000 = one whole GPU), the unit the
// openb trace and the scheduler use. Parsing accepts what operators type ("8GiB", "400Gb/s").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace gpool {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;
inline constexpr uint64_t kTiB = 1024 * kGiB;

// Milli-GPU: 1000 is one whole GPU.
inline constexpr int32_t kMilliPerGpu = 1000;

// A data rate in gigabits per second (decimal, as InfiniBand quotes it).
struct Gbps {
  double value = 0;
  constexpr double bytes_per_second() const { return value * 1e9 / 8; }
  friend constexpr auto operator<=>(Gbps, Gbps) = default;
};

// Parses "8GiB", "512MiB", "1.5GB", "4096" (bytes). Binary and decimal suffixes, case-insensitive.
StatusOr<uint64_t> ParseBytes(std::string_view text);
// Formats with the largest binary unit that keeps the number >= 1, e.g. "8 GiB", "1.5 MiB".
std::string FormatBytes(uint64_t bytes);
// Parses "400", "400Gb/s", "400Gbps", "400G".
StatusOr<Gbps> ParseGbps(std::string_view text);
// Parses a duration: "90", "90s", "15m", "1h", "250ms", "2d". Returns seconds.
StatusOr<double> ParseDurationSeconds(std::string_view text);

}  // namespace gpool
