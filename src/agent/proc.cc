#include "agent/proc.h"

#include <charconv>
#include <vector>

#include <fmt/format.h>

#include "common/file.h"

namespace gpool::agent {
namespace {

bool ParseU64(std::string_view s, uint64_t* out) {
  s = Trim(s);
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

}  // namespace

StatusOr<MemInfo> ParseMemInfo(std::string_view text) {
  MemInfo m;
  bool total = false, avail = false;
  int line_no = 0;
  for (std::string_view line : Split(text, '\n')) {
    ++line_no;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon);
    if (key != "MemTotal" && key != "MemAvailable") continue;
    std::string_view v = Trim(line.substr(colon + 1));
    if (v.size() > 3 && v.substr(v.size() - 3) == " kB") v.remove_suffix(3);
    uint64_t kb = 0;
    if (!ParseU64(v, &kb)) {
      return Status::InvalidArgument(
          fmt::format("meminfo:{}: {}: not a number of kB: '{}'", line_no, key, line));
    }
    (key == "MemTotal" ? m.total_bytes : m.available_bytes) = kb * 1024;
    (key == "MemTotal" ? total : avail) = true;
  }
  if (!total) return Status::InvalidArgument("meminfo: no MemTotal line");
  if (!avail) return Status::InvalidArgument("meminfo: no MemAvailable line (kernel < 3.14?)");
  return m;
}

StatusOr<CpuInfo> ParseCpuInfo(std::string_view text) {
  CpuInfo c;
  for (std::string_view line : Split(text, '\n')) {
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = Trim(line.substr(0, colon));
    if (key == "processor") ++c.logical_cpus;
    if (key == "model name" && c.model.empty()) c.model = std::string(Trim(line.substr(colon + 1)));
  }
  if (c.logical_cpus == 0) return Status::InvalidArgument("cpuinfo: no 'processor' entries");
  return c;
}

StatusOr<CpuTimes> ParseProcStat(std::string_view text) {
  for (std::string_view line : Split(text, '\n')) {
    if (line.substr(0, 4) != "cpu ") continue;
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    std::vector<uint64_t> v;
    for (std::string_view f : Split(Trim(line.substr(4)), ' ')) {
      if (f.empty()) continue;
      uint64_t x = 0;
      if (!ParseU64(f, &x)) return Status::InvalidArgument(fmt::format("stat: cpu line: bad field '{}'", f));
      v.push_back(x);
    }
    if (v.size() < 4) return Status::InvalidArgument("stat: cpu line has fewer than 4 fields");
    CpuTimes t;
    for (size_t i = 0; i < v.size() && i < 8; ++i) t.total += v[i];
    uint64_t idle = v[3] + (v.size() > 4 ? v[4] : 0);  // idle + iowait
    t.busy = t.total - idle;
    return t;
  }
  return Status::InvalidArgument("stat: no aggregate 'cpu ' line");
}

double CpuUtilization(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total || after.busy < before.busy) return 0;
  double u = static_cast<double>(after.busy - before.busy) / static_cast<double>(after.total - before.total);
  return u > 1 ? 1 : u;
}

StatusOr<MemInfo> ReadMemInfo(const std::string& proc) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(proc + "/meminfo"));
  return ParseMemInfo(text);
}

StatusOr<CpuInfo> ReadCpuInfo(const std::string& proc) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(proc + "/cpuinfo"));
  return ParseCpuInfo(text);
}

StatusOr<double> CpuSampler::Sample() {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(proc_ + "/stat"));
  GPOOL_ASSIGN_OR_RETURN(CpuTimes now, ParseProcStat(text));
  double u = CpuUtilization(last_, now);
  last_ = now;
  return u;
}

}  // namespace gpool::agent
