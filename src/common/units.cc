#include "common/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace gpool {
namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Splits "12.5GiB" into 12.5 and "gib". Fails on an empty or non-numeric prefix.
Status SplitNumber(std::string_view text, double* number, std::string* suffix) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == 0) return Status::InvalidArgument(fmt::format("'{}' does not start with a number", text));
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + i, *number);
  if (ec != std::errc() || ptr != text.data() + i)
    return Status::InvalidArgument(fmt::format("'{}' is not a number", text.substr(0, i)));
  std::string_view rest = text.substr(i);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  *suffix = Lower(rest);
  return Status::Ok();
}

}  // namespace

StatusOr<uint64_t> ParseBytes(std::string_view text) {
  double n;
  std::string suffix;
  GPOOL_RETURN_IF_ERROR(SplitNumber(text, &n, &suffix).WithContext("size"));
  double mult;
  if (suffix.empty() || suffix == "b") mult = 1;
  else if (suffix == "k" || suffix == "kib") mult = kKiB;
  else if (suffix == "m" || suffix == "mib") mult = kMiB;
  else if (suffix == "g" || suffix == "gib") mult = kGiB;
  else if (suffix == "t" || suffix == "tib") mult = kTiB;
  else if (suffix == "kb") mult = 1e3;
  else if (suffix == "mb") mult = 1e6;
  else if (suffix == "gb") mult = 1e9;
  else if (suffix == "tb") mult = 1e12;
  else
    return Status::InvalidArgument(
        fmt::format("size '{}': unknown unit '{}' (expected B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)",
                    text, suffix));
  double bytes = n * mult;
  if (bytes > 1.8e19) return Status::InvalidArgument(fmt::format("size '{}' is too large", text));
  return static_cast<uint64_t>(std::llround(bytes));
}

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (u == 0 || v == std::floor(v)) return fmt::format("{} {}", static_cast<uint64_t>(v), kUnits[u]);
  return fmt::format("{:.1f} {}", v, kUnits[u]);
}

StatusOr<Gbps> ParseGbps(std::string_view text) {
  double n;
  std::string suffix;
  GPOOL_RETURN_IF_ERROR(SplitNumber(text, &n, &suffix).WithContext("rate"));
  if (suffix.empty() || suffix == "g" || suffix == "gb/s" || suffix == "gbps" || suffix == "gbit/s")
    return Gbps{n};
  return Status::InvalidArgument(
      fmt::format("rate '{}': unknown unit '{}' (expected Gb/s)", text, suffix));
}

StatusOr<double> ParseDurationSeconds(std::string_view text) {
  if (!text.empty() && text.front() == '-') {
    return Status::InvalidArgument(fmt::format("duration '{}': must not be negative", text));
  }
  double n;
  std::string suffix;
  GPOOL_RETURN_IF_ERROR(SplitNumber(text, &n, &suffix).WithContext("duration"));
  if (suffix.empty() || suffix == "s") return n;
  if (suffix == "ms") return n / 1000;
  if (suffix == "m" || suffix == "min") return n * 60;
  if (suffix == "h") return n * 3600;
  if (suffix == "d") return n * 86400;
  return Status::InvalidArgument(
      fmt::format("duration '{}': unknown unit '{}' (expected ms, s, m, h, d)", text, suffix));
}

}  // namespace gpool
