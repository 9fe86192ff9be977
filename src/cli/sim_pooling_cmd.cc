// `gpool sim --pooling`: see sim_pooling_cmd.h and docs/simulator.md "Pooling mode".
#include "cli/sim_pooling_cmd.h"

#include <cstdio>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "sim/pooling.h"
#include "sim/tenant_traces.h"
#include "sim/trace.h"
#include "sim/workload_gen.h"

namespace gpool::cli {

namespace {

constexpr std::string_view kStandIn = "pooling-synthetic";

StatusOr<sim::Workload> LoadTenantWorkload(const PoolingCliFlags& f) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(f.trace));
  if (f.trace_format == "helios") return sim::ParseHeliosLog(text, f.trace);
  if (f.trace_format == "philly") return sim::ParsePhillyJobLog(text, f.trace);
  if (f.trace_format == "jobs-csv") return sim::ParseJobsCsv(text, f.trace);
  if (f.trace_format == "jobs-jsonl") return sim::ParseJobsJsonl(text, f.trace);
  return Status::InvalidArgument(fmt::format(
      "--trace-format '{}': --pooling reads helios, philly, jobs-csv, jobs-jsonl or pooling-synthetic[:key=value,...]",
      f.trace_format));
}

}  // namespace

Status RunPoolingCommand(const PoolingCliFlags& f) {
  if (f.slices.empty()) return Status::InvalidArgument("--pooling needs --slices FILE (the tenants' slices)");
  if (f.gpus_per_host < 1 || f.gpus_per_host > 16) return Status::InvalidArgument("--gpus-per-host: must be 1..16");
  if (!(f.arrival_scale > 0)) return Status::InvalidArgument("--arrival-scale: must be > 0");
  GPOOL_ASSIGN_OR_RETURN(std::string slices_text, ReadFile(f.slices));
  GPOOL_ASSIGN_OR_RETURN(std::vector<sim::TenantSlice> slices,
                         sim::ParseSlices(slices_text, f.slices, f.slices_date, f.gpus_per_host));
  sim::SliceHost host;
  host.gpus = f.gpus_per_host;
  GPOOL_ASSIGN_OR_RETURN(sim::SlicedCluster sc, sim::BuildSlicedCluster(slices, host));
  const bool stand_in = f.trace_format.rfind(kStandIn, 0) == 0;
  if (!f.shapes.empty() && !stand_in) return Status::InvalidArgument("--shapes is read only by --trace-format pooling-synthetic");
  sim::Workload work;
  std::vector<double> offered;
  if (stand_in) {
    std::string spec;
    if (f.trace_format.size() > kStandIn.size()) {
      if (f.trace_format[kStandIn.size()] != ':') {
        return Status::InvalidArgument(fmt::format("--trace-format '{}': expected pooling-synthetic:key=value,...", f.trace_format));
      }
      spec = f.trace_format.substr(kStandIn.size() + 1);
    }
    if (f.shapes.empty()) return Status::InvalidArgument("pooling-synthetic needs --shapes FILE (an openb pod list)");
    sim::StandInOptions base;
    base.seed = f.seed;
    GPOOL_ASSIGN_OR_RETURN(sim::StandInOptions o, sim::ParseStandInSpec(spec, base));
    GPOOL_ASSIGN_OR_RETURN(std::string rt_text, ReadFile(f.trace));
    GPOOL_ASSIGN_OR_RETURN(std::vector<double> runtimes, sim::ReadRuntimes(rt_text, f.trace));
    GPOOL_ASSIGN_OR_RETURN(std::string shapes_text, ReadFile(f.shapes));
    GPOOL_ASSIGN_OR_RETURN(sim::Workload shapes, sim::ParseOpenbPodList(shapes_text, f.shapes));
    shapes.description = f.shapes;
    GPOOL_ASSIGN_OR_RETURN(sim::StandIn s, sim::GenerateStandIn(slices, host, shapes, runtimes, o));
    work = std::move(s.workload);
    offered = std::move(s.offered);
  } else {
    GPOOL_ASSIGN_OR_RETURN(work, LoadTenantWorkload(f));
    sim::LeaveOutUnsliced(slices, &work);
  }
  work.ScaleArrivals(f.arrival_scale);
  if (work.jobs.empty()) return Status::InvalidArgument(fmt::format("{}: no jobs of a tenant with a slice", f.trace));
  if (!f.quiet) {
    std::fprintf(stderr, "sim: %s\nsim: %s\n", work.description.c_str(), sc.cluster.description.c_str());
    for (const auto& s : work.skipped) {
      std::fprintf(stderr, "sim: skipped %lld rows: %s (first at %s)\n", static_cast<long long>(s.count),
                   s.reason.c_str(), s.example.c_str());
    }
  }
  sim::PoolingOptions po;
  po.seed = f.seed;
  po.gpool_config = f.policy_config;
  po.remote = f.remote;
  if (f.min_cycle_s < 0) return Status::InvalidArgument("--min-cycle-s: must be >= 0");
  po.min_cycle_s = f.min_cycle_s;
  if (f.warmup_s < 0) return Status::InvalidArgument("--warmup-s: must be >= 0");
  po.warmup_s = f.warmup_s;
  if (!f.quiet) po.progress = [](const std::string& line) { std::fprintf(stderr, "sim[pooling]: %s\n", line.c_str()); };
  GPOOL_ASSIGN_OR_RETURN(sim::PoolingResult r, sim::RunPooling(sc, work, po, offered));

  nlohmann::json doc = sim::PoolingToJson(r);
  doc["mode"] = "pooling";
  doc["command"] = f.command;
  doc["workload"] = work.description;
  doc["cluster"] = sc.cluster.description;
  doc["seed"] = f.seed;
  nlohmann::json sl = nlohmann::json::array();
  for (const auto& s : slices) sl.push_back({{"tenant", s.tenant}, {"gpus", s.gpus}, {"source", s.where}});
  doc["slices"] = sl;
  nlohmann::json skipped = nlohmann::json::array();
  for (const auto& s : work.skipped) skipped.push_back({{"reason", s.reason}, {"count", s.count}, {"example", s.example}});
  doc["skipped_rows"] = skipped;

  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create directory: {}", f.out, ec.message()));
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(f.out + "/pooling.json", doc.dump(2) + "\n"));
  if (f.output == "json") {
    std::puts(doc.dump(2).c_str());
  } else {
    const std::string warmup = r.warmup_s > 0 ? fmt::format(" + {:.0f} s warm-up", r.warmup_s) : "";
    std::printf("window: [%.0f, %.0f] s (first submit%s to last submit), %lld jobs, %lld GPUs\n",
                r.window_start_s, r.window_end_s, warmup.c_str(), static_cast<long long>(r.jobs),
                static_cast<long long>(r.total_gpus));
    std::fputs(sim::FormatPoolingTable(r).c_str(), stdout);
    for (const auto& c : r.configs) {
      std::printf("%s: %s; %lld preemptions%s\n", c.name.c_str(), c.description.c_str(),
                  static_cast<long long>(c.preemptions),
                  c.name == "pool+remote" ? fmt::format(", {} jobs with remote GPUs", c.remote_jobs).c_str() : "");
    }
    std::printf("wrote %s/pooling.json\n", f.out.c_str());
  }
  return Status::Ok();
}

}  // namespace gpool::cli
