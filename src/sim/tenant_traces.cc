#include "sim/tenant_traces.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "common/names.h"
#include "sim/parse_util.h"
#include "sim/trace.h"

namespace gpool::sim {

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool Digits(std::string_view s, size_t pos, size_t n, int64_t* out) {
  if (pos + n > s.size()) return false;
  int64_t v = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

int DaysInMonth(int64_t y, int64_t m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// A tenant name as the readers accept it (it reaches pooling.json and the printed tables).
Status CheckTenant(std::string_view name, std::string_view field, std::string_view where) {
  Status s = ValidateName(field, name);
  if (!s.ok()) return Status::InvalidArgument(fmt::format("{}: {}", where, s.message()));
  return Status::Ok();
}

// Shifts submit times so that the earliest is 0, then sorts and numbers the jobs.
void Rebase(Workload* w) {
  double t0 = std::numeric_limits<double>::infinity();
  for (const auto& j : w->jobs) t0 = std::min(t0, j.submit_s);
  for (auto& j : w->jobs) j.submit_s -= t0;
  w->Finalize();
}

StatusOr<std::vector<std::string_view>> Row(std::string_view line, size_t width, const std::string& where) {
  std::vector<std::string_view> cells = Split(line, ',');
  if (cells.size() != width) {
    return Status::InvalidArgument(fmt::format("{}: expected {} fields, got {}", where, width, cells.size()));
  }
  return cells;
}

}  // namespace

StatusOr<int64_t> ParseTraceDateTime(std::string_view s, std::string_view field, std::string_view where) {
  s = Trim(s);
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, se = 0;
  const bool shape = s.size() == 19 && s[4] == '-' && s[7] == '-' && s[10] == ' ' && s[13] == ':' &&
                     s[16] == ':' && Digits(s, 0, 4, &y) && Digits(s, 5, 2, &mo) && Digits(s, 8, 2, &d) &&
                     Digits(s, 11, 2, &h) && Digits(s, 14, 2, &mi) && Digits(s, 17, 2, &se);
  if (!shape || mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, mo) || h > 23 || mi > 59 || se > 59) {
    return Status::InvalidArgument(fmt::format(
        "{}: field '{}': expected a time 'YYYY-MM-DD HH:MM:SS', got '{}'", where, field, EscapeForMessage(s)));
  }
  return DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
}

StatusOr<Workload> ParseHeliosLog(std::string_view text, std::string_view filename) {
  Workload w;
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) {
    return Status::InvalidArgument(fmt::format("{}: empty file, expected a Helios cluster_log.csv header", filename));
  }
  const std::string hwhere = fmt::format("{}:1", filename);
  GPOOL_ASSIGN_OR_RETURN(CsvHeader h, CsvHeader::Parse(line, hwhere));
  GPOOL_RETURN_IF_ERROR(h.Require({"job_id", "vc", "gpu_num", "cpu_num", "submit_time", "start_time",
                                   "end_time", "duration"},
                                  hwhere));
  const int c_id = h.Find("job_id"), c_vc = h.Find("vc"), c_gpu = h.Find("gpu_num"),
            c_cpu = h.Find("cpu_num"), c_submit = h.Find("submit_time"), c_start = h.Find("start_time"),
            c_end = h.Find("end_time"), c_dur = h.Find("duration"), c_queue = h.Find("queue");
  while (lines.Next(&line)) {
    const std::string where = fmt::format("{}:{}", filename, lines.line_number());
    if (Trim(line).empty()) continue;
    GPOOL_ASSIGN_OR_RETURN(auto cells, Row(line, h.size(), where));
    SimJob j;
    j.source = where;
    j.name = "helios-" + std::string(Trim(cells[c_id]));
    if (Trim(cells[c_id]).empty()) {
      return Status::InvalidArgument(fmt::format("{}: field 'job_id': empty", where));
    }
    j.tenant = std::string(Trim(cells[c_vc]));
    GPOOL_RETURN_IF_ERROR(CheckTenant(j.tenant, "vc", where));
    GPOOL_ASSIGN_OR_RETURN(int64_t gpus, ParseIntField(cells[c_gpu], "gpu_num", where));
    GPOOL_ASSIGN_OR_RETURN(int64_t cpus, ParseIntField(cells[c_cpu], "cpu_num", where));
    if (gpus < 0 || gpus > 1'000'000) {
      return Status::InvalidArgument(fmt::format("{}: field 'gpu_num': out of range 0..1000000 ({})", where, gpus));
    }
    if (cpus < 0 || cpus > 1'000'000) {
      return Status::InvalidArgument(fmt::format("{}: field 'cpu_num': out of range 0..1000000 ({})", where, cpus));
    }
    GPOOL_ASSIGN_OR_RETURN(int64_t submit, ParseTraceDateTime(cells[c_submit], "submit_time", where));
    for (int c : {c_start, c_end}) {
      // A job cancelled while pending has no start or end; when present they must be times.
      if (!Trim(cells[c]).empty()) {
        GPOOL_RETURN_IF_ERROR(ParseTraceDateTime(cells[c], h.names()[c], where).status());
      }
    }
    GPOOL_ASSIGN_OR_RETURN(int64_t duration, ParseIntField(cells[c_dur], "duration", where));
    if (duration < 0) {
      return Status::InvalidArgument(fmt::format("{}: field 'duration': negative ({})", where, duration));
    }
    if (c_queue >= 0 && !Trim(cells[c_queue]).empty()) {
      GPOOL_ASSIGN_OR_RETURN(int64_t queue, ParseIntField(cells[c_queue], "queue", where));
      if (queue < 0) return Status::InvalidArgument(fmt::format("{}: field 'queue': negative ({})", where, queue));
    }
    if (gpus == 0) {
      w.Skip("CPU-only job (gpu_num 0)", where);
      continue;
    }
    if (duration == 0) {
      w.Skip("job ran 0 s (duration 0)", where);
      continue;
    }
    j.num_gpus = static_cast<int32_t>(gpus);
    j.cpu_milli = cpus * 1000;
    j.submit_s = static_cast<double>(submit);
    j.run_s = static_cast<double>(duration);
    j.has_estimate = false;  // Slurm time limits are not in the trace
    w.jobs.push_back(std::move(j));
  }
  Rebase(&w);
  for (const auto& j : w.jobs) GPOOL_RETURN_IF_ERROR(ValidateJob(j, j.source));
  w.description = fmt::format("Helios cluster_log {} ({} GPU jobs)", filename, w.jobs.size());
  return w;
}

StatusOr<Workload> ParsePhillyJobLog(std::string_view text, std::string_view filename) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    // The byte offset -> line, so the error names file:line like the CSV readers.
    const size_t at = std::min<size_t>(e.byte, text.size());
    const int64_t line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
    return Status::InvalidArgument(fmt::format("{}:{}: not valid JSON: {}", filename, line, e.what()));
  }
  if (!doc.is_array()) {
    return Status::InvalidArgument(fmt::format("{}: expected a JSON array of jobs (Philly cluster_job_log)", filename));
  }
  Workload w;
  for (size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& o = doc[i];
    std::string where = fmt::format("{}: job {}", filename, i);
    if (!o.is_object()) return Status::InvalidArgument(where + ": expected an object");
    auto str = [&](const nlohmann::json& obj, const char* key, const std::string& path) -> StatusOr<std::string> {
      auto it = obj.find(key);
      if (it == obj.end()) return Status::InvalidArgument(fmt::format("{}: field '{}': missing", where, path));
      if (!it->is_string()) {
        return Status::InvalidArgument(fmt::format("{}: field '{}': expected a string, got {}", where, path,
                                                   EscapeForMessage(it->dump())));
      }
      return it->get<std::string>();
    };
    GPOOL_ASSIGN_OR_RETURN(std::string jobid, str(o, "jobid", "jobid"));
    where += " (" + EscapeForMessage(jobid) + ")";
    SimJob j;
    j.source = where;
    j.name = jobid;
    GPOOL_ASSIGN_OR_RETURN(j.tenant, str(o, "vc", "vc"));
    GPOOL_RETURN_IF_ERROR(CheckTenant(j.tenant, "vc", where));
    GPOOL_ASSIGN_OR_RETURN(std::string submitted, str(o, "submitted_time", "submitted_time"));
    GPOOL_ASSIGN_OR_RETURN(int64_t submit, ParseTraceDateTime(submitted, "submitted_time", where));
    auto att = o.find("attempts");
    if (att == o.end() || !att->is_array()) {
      return Status::InvalidArgument(fmt::format("{}: field 'attempts': expected an array", where));
    }
    if (att->empty()) {
      w.Skip("job never ran (no attempts)", where);
      continue;
    }
    double run_s = 0;
    int64_t gpus = 0;
    bool unfinished = false;
    for (size_t a = 0; a < att->size(); ++a) {
      const nlohmann::json& at = (*att)[a];
      const std::string path = fmt::format("attempts[{}]", a);
      if (!at.is_object()) return Status::InvalidArgument(fmt::format("{}: field '{}': expected an object", where, path));
      auto start = at.find("start_time"), end = at.find("end_time");
      if (start == at.end() || end == at.end() || start->is_null() || end->is_null()) {
        unfinished = true;  // the trace writes null (or leaves out) times of attempts that never ended
        break;
      }
      GPOOL_ASSIGN_OR_RETURN(std::string s0, str(at, "start_time", path + ".start_time"));
      GPOOL_ASSIGN_OR_RETURN(std::string s1, str(at, "end_time", path + ".end_time"));
      GPOOL_ASSIGN_OR_RETURN(int64_t t0, ParseTraceDateTime(s0, path + ".start_time", where));
      GPOOL_ASSIGN_OR_RETURN(int64_t t1, ParseTraceDateTime(s1, path + ".end_time", where));
      if (t1 < t0) {
        return Status::InvalidArgument(fmt::format("{}: field '{}.end_time': {} is before start_time {}", where,
                                                   path, s1, s0));
      }
      run_s += static_cast<double>(t1 - t0);
      auto detail = at.find("detail");
      if (detail == at.end() || !detail->is_array()) {
        return Status::InvalidArgument(fmt::format("{}: field '{}.detail': expected an array", where, path));
      }
      int64_t g = 0;
      for (size_t k = 0; k < detail->size(); ++k) {
        const nlohmann::json& dk = (*detail)[k];
        auto gl = dk.is_object() ? dk.find("gpus") : dk.end();
        if (!dk.is_object() || gl == dk.end() || !gl->is_array()) {
          return Status::InvalidArgument(
              fmt::format("{}: field '{}.detail[{}].gpus': expected an array", where, path, k));
        }
        g += static_cast<int64_t>(gl->size());
      }
      gpus = g;  // the last attempt's GPUs
    }
    if (unfinished) {
      w.Skip("attempt without start or end time (never ended in the trace)", where);
      continue;
    }
    if (gpus == 0) {
      w.Skip("job without GPUs in its last attempt", where);
      continue;
    }
    if (run_s <= 0) {
      w.Skip("job ran 0 s", where);
      continue;
    }
    if (gpus > 1'000'000) return Status::InvalidArgument(fmt::format("{}: more than 1000000 GPUs", where));
    j.num_gpus = static_cast<int32_t>(gpus);
    j.submit_s = static_cast<double>(submit);
    j.run_s = run_s;
    j.has_estimate = false;
    w.jobs.push_back(std::move(j));
  }
  Rebase(&w);
  for (const auto& j : w.jobs) GPOOL_RETURN_IF_ERROR(ValidateJob(j, j.source));
  w.description = fmt::format("Philly cluster_job_log {} ({} GPU jobs)", filename, w.jobs.size());
  return w;
}

StatusOr<std::vector<TenantSlice>> ParseSlices(std::string_view text, std::string_view filename,
                                               std::string_view date, int32_t gpus_per_host) {
  if (gpus_per_host < 1) return Status::InvalidArgument("slices: gpus_per_host must be >= 1");
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) return Status::InvalidArgument(fmt::format("{}: empty file, expected a header", filename));
  const std::string hwhere = fmt::format("{}:1", filename);
  std::vector<std::string_view> head = Split(line, ',');
  for (auto& c : head) c = Trim(c);
  std::vector<TenantSlice> out;
  std::map<std::string, std::string> seen;
  auto add = [&](std::string tenant, int64_t gpus, const std::string& where) -> Status {
    GPOOL_RETURN_IF_ERROR(CheckTenant(tenant, "tenant", where));
    if (gpus < 0 || gpus > 10'000'000) {
      return Status::InvalidArgument(fmt::format("{}: tenant '{}': GPUs out of range 0..10000000 ({})", where, tenant, gpus));
    }
    auto [it, fresh] = seen.emplace(tenant, where);
    if (!fresh) {
      return Status::InvalidArgument(fmt::format("{}: tenant '{}' listed twice (first at {})", where, tenant, it->second));
    }
    if (gpus > 0) out.push_back({std::move(tenant), gpus, where});
    return Status::Ok();
  };
  if (!head.empty() && head[0] == "date") {
    // Helios cluster_gpu_number.csv: date,vc...,total.
    GPOOL_ASSIGN_OR_RETURN(CsvHeader h, CsvHeader::Parse(line, hwhere));
    const int c_total = h.Find("total");
    std::vector<std::string_view> row;
    std::string row_where;
    while (lines.Next(&line)) {
      const std::string where = fmt::format("{}:{}", filename, lines.line_number());
      if (Trim(line).empty()) continue;
      GPOOL_ASSIGN_OR_RETURN(auto cells, Row(line, h.size(), where));
      if (date.empty() || Trim(cells[0]) == date) {
        row = cells;
        row_where = where;
        if (!date.empty()) break;
      }
    }
    if (row.empty()) {
      return Status::InvalidArgument(date.empty() ? fmt::format("{}: no data rows", filename)
                                                  : fmt::format("{}: no row for date '{}'", filename,
                                                                EscapeForMessage(date)));
    }
    int64_t sum = 0;
    for (size_t c = 1; c < row.size(); ++c) {
      if (static_cast<int>(c) == c_total) continue;
      GPOOL_ASSIGN_OR_RETURN(int64_t g, ParseIntField(row[c], h.names()[c], row_where));
      GPOOL_RETURN_IF_ERROR(add(h.names()[c], g, row_where));
      sum += g;
    }
    if (c_total >= 0) {
      GPOOL_ASSIGN_OR_RETURN(int64_t total, ParseIntField(row[c_total], "total", row_where));
      if (total != sum) {
        return Status::InvalidArgument(
            fmt::format("{}: field 'total': {} is not the sum of the VCs' GPUs ({})", row_where, total, sum));
      }
    }
  } else {
    // "tenant,gpus", "tenant,nodes", or Lucid's ",num" (nodes).
    int64_t per = 0;
    if (head.size() == 2 && head[0] == "tenant" && head[1] == "gpus") per = 1;
    if (head.size() == 2 && (head[0] == "tenant" || head[0].empty()) && (head[1] == "nodes" || head[1] == "num")) {
      per = gpus_per_host;
    }
    if (per == 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: unknown slices header '{}': expected Helios' cluster_gpu_number.csv (date,vc...,total), "
          "'tenant,gpus', 'tenant,nodes' or Lucid's vc_config.csv (,num)",
          hwhere, EscapeForMessage(line)));
    }
    while (lines.Next(&line)) {
      const std::string where = fmt::format("{}:{}", filename, lines.line_number());
      if (Trim(line).empty()) continue;
      GPOOL_ASSIGN_OR_RETURN(auto cells, Row(line, 2, where));
      GPOOL_ASSIGN_OR_RETURN(int64_t n, ParseIntField(cells[1], head[1], where));
      if (n < 0 || n > 10'000'000) {
        return Status::InvalidArgument(fmt::format("{}: field '{}': out of range 0..10000000 ({})", where, head[1], n));
      }
      GPOOL_RETURN_IF_ERROR(add(std::string(Trim(cells[0])), n * per, where));
    }
  }
  if (out.empty()) return Status::InvalidArgument(fmt::format("{}: no tenant has GPUs", filename));
  return out;
}

}  // namespace gpool::sim
