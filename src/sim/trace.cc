#include "sim/trace.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "sim/parse_util.h"

namespace gpool::sim {

void Workload::Skip(const std::string& reason, const std::string& where) {
  for (auto& s : skipped) {
    if (s.reason == reason) {
      ++s.count;
      return;
    }
  }
  skipped.push_back({reason, 1, where});
}

void Workload::Finalize() {
  std::stable_sort(jobs.begin(), jobs.end(),
                   [](const SimJob& a, const SimJob& b) { return a.submit_s < b.submit_s; });
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].id = static_cast<uint32_t>(i);
}

void Workload::ScaleArrivals(double factor) {
  if (jobs.empty() || factor == 1) return;
  double t0 = jobs.front().submit_s;
  for (auto& j : jobs) j.submit_s = t0 + (j.submit_s - t0) * factor;
  description += fmt::format(", arrivals scaled by {}", factor);
}

StatusOr<int64_t> Workload::ScaleDurations(double factor, double cap_s) {
  if (!std::isfinite(factor) || factor <= 0) {
    return Status::InvalidArgument(fmt::format("duration scale must be a finite number > 0, got {}", factor));
  }
  if (!std::isfinite(cap_s) || cap_s < 0) {
    return Status::InvalidArgument(
        fmt::format("duration cap must be a finite number of seconds > 0 (0: none), got {}", cap_s));
  }
  if (factor == 1 && cap_s == 0) return int64_t{0};
  int64_t capped = 0;
  for (auto& j : jobs) {
    j.run_s *= factor;
    if (j.est_s >= 0) j.est_s *= factor;
    if (cap_s > 0 && j.run_s > cap_s) {
      j.run_s = cap_s;
      ++capped;
    }
    if (cap_s > 0 && j.est_s > cap_s) j.est_s = cap_s;
  }
  if (factor != 1) description += fmt::format(", run times scaled by {}", factor);
  if (cap_s > 0) description += fmt::format(", run times capped at {} s ({} jobs capped)", cap_s, capped);
  return capped;
}

int64_t Workload::total_skipped() const {
  int64_t n = 0;
  for (const auto& s : skipped) n += s.count;
  return n;
}

StatusOr<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "openb") return TraceFormat::kOpenb;
  if (name == "jobs-csv") return TraceFormat::kJobsCsv;
  if (name == "jobs-jsonl") return TraceFormat::kJobsJsonl;
  return Status::InvalidArgument(fmt::format(
      "unknown trace format '{}' (expected openb, jobs-csv, jobs-jsonl or synthetic:...)", name));
}

std::string_view TraceFormatName(TraceFormat f) {
  switch (f) {
    case TraceFormat::kOpenb: return "openb";
    case TraceFormat::kJobsCsv: return "jobs-csv";
    case TraceFormat::kJobsJsonl: return "jobs-jsonl";
  }
  return "?";
}

Status ValidateJob(const SimJob& j, std::string_view where) {
  auto bad = [&](std::string_view field, const std::string& why) {
    return Status::InvalidArgument(fmt::format("{}: field '{}': {}", where, field, why));
  };
  if (j.submit_s < 0) return bad("submit_s", fmt::format("negative ({})", j.submit_s));
  if (j.run_s < 0) return bad("run_s", fmt::format("negative ({})", j.run_s));
  if (j.num_gpus < 0 || j.num_gpus > 1'000'000) {
    return bad("gpus", fmt::format("out of range 0..1000000 ({})", j.num_gpus));
  }
  if (j.gpu_milli < 1 || j.gpu_milli > 1000) {
    return bad("gpu_milli", fmt::format("out of range 1..1000 ({})", j.gpu_milli));
  }
  if (j.gpu_milli < 1000 && j.num_gpus != 1) {
    return bad("gpu_milli", fmt::format("a fraction ({}) needs exactly one GPU, not {}",
                                        j.gpu_milli, j.num_gpus));
  }
  if (j.cpu_milli < 0) return bad("cpu_milli", "negative");
  if (j.mem_mib < 0) return bad("mem_mib", "negative");
  if (!(j.comm_fraction >= 0 && j.comm_fraction <= 1)) {
    return bad("comm", fmt::format("out of range 0..1 ({})", j.comm_fraction));
  }
  if (!(j.min_runtime_s >= 0)) {
    return bad("min_runtime_s", fmt::format("negative ({})", j.min_runtime_s));
  }
  return Status::Ok();
}

namespace {

// Splits a data row and checks it has the header's width.
StatusOr<std::vector<std::string_view>> Cells(std::string_view line, size_t width,
                                              const std::string& where) {
  std::vector<std::string_view> cells = Split(line, ',');
  if (cells.size() != width) {
    return Status::InvalidArgument(
        fmt::format("{}: expected {} fields, got {}", where, width, cells.size()));
  }
  return cells;
}

std::string GpuSpec(std::string_view cell) {
  std::string_view t = Trim(cell);
  if (t.empty() || t == "nan" || t == "NaN") return "";
  return std::string(t);
}

// The columns an openb pod list and trace share: what a pod asks for.
struct PodColumns {
  int name, cpu, mem, ngpu, milli, spec;  // spec: -1 when the file has no gpu_spec
  static PodColumns Of(const CsvHeader& h) {
    return {h.Find("name"),    h.Find("cpu_milli"), h.Find("memory_mib"),
            h.Find("num_gpu"), h.Find("gpu_milli"), h.Find("gpu_spec")};
  }
};

// A pod's name and resources from its row: CPU, memory, GPUs (a CPU-only pod has num_gpu 0 and
// gpu_milli 0) and the GPU models it may use.
Status ParsePodResources(const std::vector<std::string_view>& cells, const PodColumns& c,
                         const std::string& where, SimJob* j) {
  j->name = std::string(Trim(cells[c.name]));
  j->source = where;
  GPOOL_ASSIGN_OR_RETURN(j->cpu_milli, ParseIntField(cells[c.cpu], "cpu_milli", where));
  GPOOL_ASSIGN_OR_RETURN(j->mem_mib, ParseIntField(cells[c.mem], "memory_mib", where));
  GPOOL_ASSIGN_OR_RETURN(int64_t ngpu, ParseIntField(cells[c.ngpu], "num_gpu", where));
  GPOOL_ASSIGN_OR_RETURN(int64_t milli, ParseIntField(cells[c.milli], "gpu_milli", where));
  if (ngpu < 0 || ngpu > 1'000'000) {
    return Status::InvalidArgument(fmt::format("{}: field 'num_gpu': out of range ({})", where, ngpu));
  }
  j->num_gpus = static_cast<int32_t>(ngpu);
  if (ngpu == 0) {
    if (milli != 0) {
      return Status::InvalidArgument(fmt::format(
          "{}: field 'gpu_milli': {} with num_gpu 0 (a CPU task has no GPU share)", where, milli));
    }
    j->gpu_milli = 1000;
  } else {
    if (milli < 1 || milli > 1000) {
      return Status::InvalidArgument(
          fmt::format("{}: field 'gpu_milli': out of range 1..1000 ({})", where, milli));
    }
    j->gpu_milli = static_cast<int32_t>(milli);
  }
  if (c.spec >= 0) j->gpu_model = GpuSpec(cells[c.spec]);
  return Status::Ok();
}

}  // namespace

StatusOr<Workload> ParseOpenbPodList(std::string_view text, std::string_view filename) {
  Workload w;
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) {
    return Status::InvalidArgument(fmt::format("{}: empty file, expected an openb header", filename));
  }
  std::string hwhere = fmt::format("{}:1", filename);
  GPOOL_ASSIGN_OR_RETURN(CsvHeader h, CsvHeader::Parse(line, hwhere));
  GPOOL_RETURN_IF_ERROR(h.Require({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"}, hwhere));
  const PodColumns cols = PodColumns::Of(h);
  while (lines.Next(&line)) {
    std::string where = fmt::format("{}:{}", filename, lines.line_number());
    if (Trim(line).empty()) continue;
    GPOOL_ASSIGN_OR_RETURN(auto cells, Cells(line, h.size(), where));
    SimJob j;
    GPOOL_RETURN_IF_ERROR(ParsePodResources(cells, cols, where, &j));
    GPOOL_RETURN_IF_ERROR(ValidateJob(j, where));
    w.jobs.push_back(std::move(j));
  }
  w.Finalize();  // every submit time is 0: the file's order is kept
  w.description = fmt::format("openb pod list {} ({} pods)", filename, w.jobs.size());
  return w;
}

StatusOr<Workload> ParseOpenbTrace(std::string_view text, std::string_view filename) {
  Workload w;
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) {
    return Status::InvalidArgument(fmt::format("{}: empty file, expected an openb header", filename));
  }
  std::string hwhere = fmt::format("{}:1", filename);
  GPOOL_ASSIGN_OR_RETURN(CsvHeader h, CsvHeader::Parse(line, hwhere));
  GPOOL_RETURN_IF_ERROR(h.Require({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli",
                                   "creation_time", "deletion_time", "scheduled_time"},
                                  hwhere));
  const PodColumns cols = PodColumns::Of(h);
  const int c_create = h.Find("creation_time"), c_delete = h.Find("deletion_time"),
            c_sched = h.Find("scheduled_time"), c_qos = h.Find("qos");
  while (lines.Next(&line)) {
    std::string where = fmt::format("{}:{}", filename, lines.line_number());
    if (Trim(line).empty()) continue;
    GPOOL_ASSIGN_OR_RETURN(auto cells, Cells(line, h.size(), where));
    SimJob j;
    GPOOL_RETURN_IF_ERROR(ParsePodResources(cells, cols, where, &j));
    if (c_qos >= 0) j.priority = Trim(cells[c_qos]) == "BE" ? 0 : 1;
    GPOOL_ASSIGN_OR_RETURN(double create, ParseDoubleField(cells[c_create], "creation_time", where));
    GPOOL_ASSIGN_OR_RETURN(double del, ParseDoubleField(cells[c_delete], "deletion_time", where));
    std::string_view sched_cell = Trim(cells[c_sched]);
    if (sched_cell.empty() || sched_cell == "nan") {
      w.Skip("pod never scheduled in production (no scheduled_time)", where);
      continue;
    }
    GPOOL_ASSIGN_OR_RETURN(double sched, ParseDoubleField(sched_cell, "scheduled_time", where));
    if (sched < create) {
      return Status::InvalidArgument(fmt::format(
          "{}: field 'scheduled_time': {} is before creation_time {}", where, sched, create));
    }
    if (del < sched) {
      return Status::InvalidArgument(fmt::format(
          "{}: field 'deletion_time': {} is before scheduled_time {}", where, del, sched));
    }
    j.submit_s = create;
    j.run_s = del - sched;
    GPOOL_RETURN_IF_ERROR(ValidateJob(j, where));
    w.jobs.push_back(std::move(j));
  }
  w.Finalize();
  w.description = fmt::format("openb trace {} ({} jobs)", filename, w.jobs.size());
  return w;
}

namespace {

// "true"/"false"/"1"/"0" (any case).
StatusOr<bool> ParseBoolField(std::string_view cell, std::string_view field,
                              const std::string& where) {
  std::string_view t = Trim(cell);
  std::string l;
  for (char c : t) l += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (l == "true" || l == "1") return true;
  if (l == "false" || l == "0") return false;
  return Status::InvalidArgument(
      fmt::format("{}: field '{}': expected true, false, 1 or 0, got '{}'", where, field, t));
}

// LEVEL (preferred) or LEVEL! (required); LEVEL is node, leaf, pod or any (fabric).
StatusOr<sched::Locality> ParseLocality(std::string_view cell, const std::string& where) {
  std::string_view t = Trim(cell);
  sched::Locality loc;
  if (!t.empty() && t.back() == '!') {
    loc.required = true;
    t = Trim(t.substr(0, t.size() - 1));
  }
  auto level = sched::ParseLevel(t);
  if (t.empty() || !level.ok()) {
    return Status::InvalidArgument(fmt::format(
        "{}: field 'locality': expected node, leaf, pod or any, with a trailing '!' when "
        "required (e.g. leaf!), got '{}'",
        where, Trim(cell)));
  }
  loc.level = *level;
  return loc;
}

// Applies one named field (from a CSV cell or a JSON value rendered as text) to a job.
Status SetField(SimJob* j, std::string_view key, std::string_view value, const std::string& where,
                bool* has_submit, bool* has_run, bool* has_gpus) {
  if (key == "name") {
    j->name = std::string(Trim(value));
  } else if (key == "tenant") {
    std::string_view t = Trim(value);
    j->tenant = t.empty() ? "default" : std::string(t);
  } else if (key == "gpu_model") {
    j->gpu_model = GpuSpec(value);
  } else if (key == "submit_s") {
    GPOOL_ASSIGN_OR_RETURN(j->submit_s, ParseDoubleField(value, key, where));
    *has_submit = true;
  } else if (key == "run_s") {
    GPOOL_ASSIGN_OR_RETURN(j->run_s, ParseDoubleField(value, key, where));
    *has_run = true;
  } else if (key == "gpus") {
    GPOOL_ASSIGN_OR_RETURN(int64_t v, ParseIntField(value, key, where));
    if (v < 0 || v > 1'000'000) {
      return Status::InvalidArgument(fmt::format("{}: field 'gpus': out of range ({})", where, v));
    }
    j->num_gpus = static_cast<int32_t>(v);
    *has_gpus = true;
  } else if (key == "gpu_milli") {
    GPOOL_ASSIGN_OR_RETURN(int64_t v, ParseIntField(value, key, where));
    if (v < 1 || v > 1000) {
      return Status::InvalidArgument(
          fmt::format("{}: field 'gpu_milli': out of range 1..1000 ({})", where, v));
    }
    j->gpu_milli = static_cast<int32_t>(v);
  } else if (key == "cpu_milli") {
    GPOOL_ASSIGN_OR_RETURN(j->cpu_milli, ParseIntField(value, key, where));
  } else if (key == "mem_mib") {
    GPOOL_ASSIGN_OR_RETURN(j->mem_mib, ParseIntField(value, key, where));
  } else if (key == "comm") {
    GPOOL_ASSIGN_OR_RETURN(j->comm_fraction, ParseDoubleField(value, key, where));
  } else if (key == "priority") {
    GPOOL_ASSIGN_OR_RETURN(int64_t v, ParseIntField(value, key, where));
    if (v < -1'000'000 || v > 1'000'000) {
      return Status::InvalidArgument(fmt::format("{}: field 'priority': out of range", where));
    }
    j->priority = static_cast<int32_t>(v);
  } else if (key == "locality") {
    GPOOL_ASSIGN_OR_RETURN(j->locality, ParseLocality(value, where));
  } else if (key == "preemptible") {
    GPOOL_ASSIGN_OR_RETURN(j->preemptible, ParseBoolField(value, key, where));
  } else if (key == "allow_split") {
    GPOOL_ASSIGN_OR_RETURN(j->allow_split, ParseBoolField(value, key, where));
  } else if (key == "min_runtime_s") {
    GPOOL_ASSIGN_OR_RETURN(j->min_runtime_s, ParseDoubleField(value, key, where));
  } else if (key == "est_s") {
    std::string_view t = Trim(value);
    if (t.empty() || t == "none") {
      j->has_estimate = false;
      j->est_s = -1;
    } else {
      GPOOL_ASSIGN_OR_RETURN(j->est_s, ParseDoubleField(t, key, where));
      if (!(j->est_s > 0)) {
        return Status::InvalidArgument(fmt::format(
            "{}: field 'est_s': must be > 0, got {} (write none for no estimate)", where, t));
      }
      j->has_estimate = true;
    }
  } else if (key == "kind") {
    auto k = sched::ParseJobKind(value);
    if (!k.ok()) {
      return Status::InvalidArgument(fmt::format(
          "{}: field 'kind': expected training, inference or interactive, got '{}'", where,
          Trim(value)));
    }
    j->kind = *k;
  } else {
    return Status::InvalidArgument(fmt::format(
        "{}: unknown field '{}' (known: name, submit_s, run_s, gpus, gpu_milli, cpu_milli, "
        "mem_mib, tenant, comm, priority, gpu_model, locality, preemptible, min_runtime_s, est_s, "
        "kind, allow_split)",
        where, key));
  }
  return Status::Ok();
}

Status CheckRequired(bool has_submit, bool has_run, bool has_gpus, const std::string& where) {
  if (!has_submit) return Status::InvalidArgument(fmt::format("{}: missing field 'submit_s'", where));
  if (!has_run) return Status::InvalidArgument(fmt::format("{}: missing field 'run_s'", where));
  if (!has_gpus) return Status::InvalidArgument(fmt::format("{}: missing field 'gpus'", where));
  return Status::Ok();
}

}  // namespace

StatusOr<Workload> ParseJobsCsv(std::string_view text, std::string_view filename) {
  Workload w;
  LineReader lines(text);
  std::string_view line;
  // Skip leading comment lines ('#') so a file can carry its provenance.
  bool have_header = false;
  while (lines.Next(&line)) {
    if (Trim(line).empty() || Trim(line).front() == '#') continue;
    have_header = true;
    break;
  }
  if (!have_header) {
    return Status::InvalidArgument(fmt::format("{}: empty file, expected a header row", filename));
  }
  std::string hwhere = fmt::format("{}:{}", filename, lines.line_number());
  GPOOL_ASSIGN_OR_RETURN(CsvHeader h, CsvHeader::Parse(line, hwhere));
  GPOOL_RETURN_IF_ERROR(h.Require({"submit_s", "run_s", "gpus"}, hwhere));
  // Check column names once, so a typo is reported at the header.
  {
    SimJob probe;
    bool a, b, c;
    for (const auto& n : h.names()) {
      Status s = SetField(&probe, n, "0", hwhere, &a, &b, &c);
      if (!s.ok() && s.message().find("unknown field") != std::string::npos) return s;
    }
  }
  while (lines.Next(&line)) {
    std::string where = fmt::format("{}:{}", filename, lines.line_number());
    if (Trim(line).empty() || Trim(line).front() == '#') continue;
    GPOOL_ASSIGN_OR_RETURN(auto cells, Cells(line, h.size(), where));
    SimJob j;
    j.source = where;
    j.name = fmt::format("job-{}", lines.line_number());
    bool has_submit = false, has_run = false, has_gpus = false;
    for (size_t i = 0; i < cells.size(); ++i) {
      // Empty optional cells keep their defaults, except est_s, where empty means "no estimate".
      if (Trim(cells[i]).empty() && h.names()[i] != "submit_s" && h.names()[i] != "run_s" &&
          h.names()[i] != "gpus" && h.names()[i] != "est_s") {
        continue;
      }
      GPOOL_RETURN_IF_ERROR(
          SetField(&j, h.names()[i], cells[i], where, &has_submit, &has_run, &has_gpus));
    }
    GPOOL_RETURN_IF_ERROR(CheckRequired(has_submit, has_run, has_gpus, where));
    GPOOL_RETURN_IF_ERROR(ValidateJob(j, where));
    w.jobs.push_back(std::move(j));
  }
  w.Finalize();
  w.description = fmt::format("jobs-csv {} ({} jobs)", filename, w.jobs.size());
  return w;
}

StatusOr<Workload> ParseJobsJsonl(std::string_view text, std::string_view filename) {
  Workload w;
  LineReader lines(text);
  std::string_view line;
  while (lines.Next(&line)) {
    std::string where = fmt::format("{}:{}", filename, lines.line_number());
    std::string_view t = Trim(line);
    if (t.empty() || t.front() == '#') continue;
    nlohmann::json obj = nlohmann::json::parse(t, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) {
      return Status::InvalidArgument(fmt::format("{}: not valid JSON", where));
    }
    if (!obj.is_object()) {
      return Status::InvalidArgument(fmt::format("{}: expected a JSON object per line", where));
    }
    SimJob j;
    j.source = where;
    j.name = fmt::format("job-{}", lines.line_number());
    bool has_submit = false, has_run = false, has_gpus = false;
    for (const auto& [key, v] : obj.items()) {
      std::string text_value;
      if (v.is_string()) {
        text_value = v.get<std::string>();
      } else if (v.is_number()) {
        text_value = v.dump();
      } else if (v.is_boolean()) {
        text_value = v.get<bool>() ? "true" : "false";
      } else if (v.is_null()) {
        // null keeps the default, except est_s, where it means "no estimate".
        if (key != "est_s") continue;
      } else {
        return Status::InvalidArgument(
            fmt::format("{}: field '{}': expected a number, a string or a boolean", where, key));
      }
      GPOOL_RETURN_IF_ERROR(SetField(&j, key, text_value, where, &has_submit, &has_run, &has_gpus));
    }
    GPOOL_RETURN_IF_ERROR(CheckRequired(has_submit, has_run, has_gpus, where));
    GPOOL_RETURN_IF_ERROR(ValidateJob(j, where));
    w.jobs.push_back(std::move(j));
  }
  w.Finalize();
  w.description = fmt::format("jobs-jsonl {} ({} jobs)", filename, w.jobs.size());
  return w;
}

StatusOr<Workload> ReadTrace(const std::string& path, TraceFormat format) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  switch (format) {
    case TraceFormat::kOpenb: return ParseOpenbTrace(text, path);
    case TraceFormat::kJobsCsv: return ParseJobsCsv(text, path);
    case TraceFormat::kJobsJsonl: return ParseJobsJsonl(text, path);
  }
  return Status::Internal("unknown trace format");
}

}  // namespace gpool::sim
