#include "sim/parse_util.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "common/file.h"

namespace gpool::sim {

StatusOr<double> ParseDoubleField(std::string_view cell, std::string_view field,
                                  std::string_view where) {
  std::string_view t = Trim(cell);
  double v = 0;
  const char* end = t.data() + t.size();
  auto [p, ec] = std::from_chars(t.data(), end, v);
  if (t.empty() || ec != std::errc() || p != end || !std::isfinite(v)) {
    return Status::InvalidArgument(
        fmt::format("{}: field '{}': expected a number, got '{}'", where, field, t));
  }
  return v;
}

StatusOr<int64_t> ParseIntField(std::string_view cell, std::string_view field,
                                std::string_view where) {
  std::string_view t = Trim(cell);
  int64_t v = 0;
  const char* end = t.data() + t.size();
  auto [p, ec] = std::from_chars(t.data(), end, v);
  if (!t.empty() && ec == std::errc() && p == end) return v;
  // Accept integral decimals ("12.0"), as some exporters write them.
  auto d = ParseDoubleField(t, field, where);
  if (d.ok() && *d == std::floor(*d) && std::fabs(*d) < 9e15) return static_cast<int64_t>(*d);
  return Status::InvalidArgument(
      fmt::format("{}: field '{}': expected an integer, got '{}'", where, field, t));
}

StatusOr<CsvHeader> CsvHeader::Parse(std::string_view line, std::string_view where) {
  CsvHeader h;
  for (std::string_view cell : Split(line, ',')) {
    std::string name(Trim(cell));
    if (name.empty()) {
      return Status::InvalidArgument(fmt::format("{}: empty column name in header", where));
    }
    if (!h.index_.emplace(name, static_cast<int>(h.names_.size())).second) {
      return Status::InvalidArgument(fmt::format("{}: duplicate column '{}'", where, name));
    }
    h.names_.push_back(std::move(name));
  }
  return h;
}

int CsvHeader::Find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? -1 : it->second;
}

Status CsvHeader::Require(const std::vector<std::string_view>& names,
                          std::string_view where) const {
  for (std::string_view n : names) {
    if (Find(n) < 0) {
      return Status::InvalidArgument(fmt::format("{}: header lacks column '{}'", where, n));
    }
  }
  return Status::Ok();
}

}  // namespace gpool::sim
