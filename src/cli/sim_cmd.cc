// `gpool sim`: replays a trace or a synthetic workload on a cluster under gpool's policy and the
// baselines, and writes metrics.json, timeline.csv, jobs.csv and report.html (docs/simulator.md).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/sim_pooling_cmd.h"
#include "common/file.h"
#include "fabric/lft_dump.h"
#include "fabric/load.h"
#include "fabric/routing.h"
#include "sim/baselines.h"
#include "sim/cluster.h"
#include "sim/engine.h"
#include "sim/fabric_routes.h"
#include "sim/fill.h"
#include "sim/metrics.h"
#include "sim/queues.h"
#include "sim/report.h"
#include "sim/trace.h"
#include "sim/workload_gen.h"

namespace gpool::cli {
namespace {

struct SimFlags {
  std::string trace, trace_format, nodes, fabric, policy, compare, out, policy_config, output;
  std::string queues;  // YAML per-tenant queues (sim/queues.h); empty: equal shares
  // Performance model: "route" (follow the fabric's routes; --fabric only) or "aggregate"
  // (pipes per leaf/pod). Empty: route with --fabric, aggregate with --nodes.
  std::string net_model;
  std::string routing = "ftree";  // engine for the routes, unless --lfts gives OpenSM's
  std::string lfts;               // OpenSM LFT dump of the fabric
  int clos_tor_uplinks = 1;       // Clos CSV fabrics: parallel ToR -> aggregation links
  int clos_agg_uplinks = 1;       // ... aggregation -> core links
  uint64_t seed = 1;
  int gpus_per_host = 8;
  double host_gbps = 1600;
  double min_cycle_s = 0;
  double arrival_scale = 1;
  // A loaded replay (docs/simulator/loaded-replay.md): run times x duration_scale, capped (0: no
  // cap); and each baseline also run with the engine's idle power-off after this many s (0: not).
  double duration_scale = 1;
  double duration_cap_s = 0;
  double baseline_power_off_s = 0;
  bool quiet = false;
  bool seed_given = false;
  bool fill = false;   // FGD's fill experiment (sim/fill.h) instead of a time replay
  bool fill_first_failure = false;  // fill until the first failed placement
  int fill_runs = -1;  // fill repetitions (seeds seed, seed+1, ...); unset: 10 (FGD's), 1 (first failure)
  double fill_load = 1.3;  // fill: GPU request of the workload, x the cluster's GPUs
  // Remote attachment (sim/adapter.h RemoteAttach; policy gpool+remote): --remote-attach[=MODE]
  // (given: remote_attach_given; a bare flag means pooled), --remote-within, --max-slowdown.
  bool remote_attach_given = false;
  std::string remote_attach;
  std::string remote_within;
  double max_slowdown = 0;
  bool max_slowdown_given = false;
  // The pooling experiment (sim/pooling.h, sim_pooling_cmd.h): --pooling --slices FILE
  // [--slices-date D] [--shapes FILE].
  bool pooling = false;
  std::string slices, slices_date, shapes;
  double warmup_s = 0;  // --warmup-s: measure from the first submit + this
  std::vector<std::string> argv;
};

StatusOr<sim::Workload> LoadWorkload(const SimFlags& f, const sim::SimCluster& cluster) {
  std::string format = f.trace_format;
  if (format.rfind("synthetic", 0) == 0) {
    std::string spec = format.size() > 9 && format[9] == ':' ? format.substr(10) : "";
    sim::SyntheticOptions base;
    base.seed = f.seed;
    GPOOL_ASSIGN_OR_RETURN(sim::SyntheticOptions o, sim::ParseSyntheticSpec(spec, base));
    GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(f.trace));
    GPOOL_ASSIGN_OR_RETURN(auto runtimes, sim::ReadRuntimes(text, f.trace));
    return sim::GenerateSynthetic(o, runtimes, cluster.total_gpus());
  }
  if (format.empty()) {
    // Sniff: an openb header, a .jsonl name, else the generic CSV.
    GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(f.trace));
    if (text.rfind("name,cpu_milli", 0) == 0) {
      format = "openb";
    } else if (f.trace.size() > 6 && f.trace.substr(f.trace.size() - 6) == ".jsonl") {
      format = "jobs-jsonl";
    } else {
      format = "jobs-csv";
    }
  }
  GPOOL_ASSIGN_OR_RETURN(sim::TraceFormat tf, sim::ParseTraceFormat(format));
  if (f.fill && !f.fill_first_failure && tf == sim::TraceFormat::kOpenb) {
    // FGD's workload: every pod of the list, times or not (sim/fill.h).
    GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(f.trace));
    return sim::ParseOpenbPodList(text, f.trace);
  }
  return sim::ReadTrace(f.trace, tf);
}

StatusOr<sim::SimCluster> LoadCluster(const SimFlags& f) {
  if (f.nodes.empty() == f.fabric.empty()) {
    return Status::InvalidArgument("give exactly one of --nodes FILE or --fabric FILE");
  }
  if (f.gpus_per_host < 1 || f.gpus_per_host > 16) {
    return Status::InvalidArgument("--gpus-per-host: must be 1..16");
  }
  if (!f.net_model.empty() && f.net_model != "route" && f.net_model != "aggregate") {
    return Status::InvalidArgument(
        fmt::format("--net-model '{}': expected route or aggregate", f.net_model));
  }
  if (!f.nodes.empty()) {
    if (f.net_model == "route") {
      return Status::InvalidArgument(
          "--net-model route needs a fabric (--fabric FILE): a node list has no routes");
    }
    if (!f.lfts.empty()) return Status::InvalidArgument("--lfts needs --fabric");
    sim::ClosCsvOptions o;
    o.gpus_per_host = f.gpus_per_host;
    o.net.host_gbps = f.host_gbps;
    return sim::ReadNodesFile(f.nodes, o);
  }
  fabric::LoadOptions lo;
  lo.clos.tor_uplinks = f.clos_tor_uplinks;
  lo.clos.agg_uplinks = f.clos_agg_uplinks;
  GPOOL_ASSIGN_OR_RETURN(fabric::Fabric fab, fabric::LoadFabric(f.fabric, lo));
  sim::FabricClusterOptions o;
  o.gpus_per_host = f.gpus_per_host;
  if (f.net_model == "aggregate") {
    GPOOL_ASSIGN_OR_RETURN(sim::SimCluster c, sim::ClusterFromFabric(fab, o));
    c.description = f.fabric + ": " + c.description + ", aggregate-pipe network model";
    return c;
  }
  fabric::RouteOptions ro;
  GPOOL_ASSIGN_OR_RETURN(ro.engine, fabric::ParseEngine(f.routing));
  std::optional<fabric::RoutingTables> tables;
  if (!f.lfts.empty()) {
    GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(f.lfts));
    fabric::LftReadOptions lro;
    lro.source_name = f.lfts;
    GPOOL_ASSIGN_OR_RETURN(tables, fabric::ReadLftDump(text, fab, lro));
  }
  StatusOr<sim::SimCluster> c =
      sim::RoutedClusterFromFabric(std::move(fab), o, ro, tables ? &*tables : nullptr);
  if (!c.ok()) return c.status().WithContext(f.fabric);
  c->description = fmt::format("{}: {}, route-based network model ({} routes)", f.fabric,
                               c->description, c->routes->engine());
  return c;
}

StatusOr<std::vector<std::string>> PolicyList(const SimFlags& f) {
  if (!f.policy.empty() && !f.compare.empty()) {
    return Status::InvalidArgument("give --policy or --compare, not both");
  }
  if (f.compare.empty()) return std::vector<std::string>{f.policy.empty() ? "gpool" : f.policy};
  if (f.compare == "all") return f.fill ? sim::FillPolicyNames() : sim::ReplayPolicyNames();
  std::vector<std::string> out;
  for (auto p : Split(f.compare, ',')) {
    std::string name(Trim(p));
    if (name.empty()) continue;
    const auto& known = sim::PolicyNames();
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return Status::InvalidArgument(fmt::format("--compare: unknown policy '{}' (expected all or {})",
                                                 name, fmt::join(known, ", ")));
    }
    out.push_back(name);
  }
  if (out.empty()) return Status::InvalidArgument("--compare: no policies named");
  return out;
}

// Remote attachment: --remote-attach turns gpool's runs into gpool+remote (one row each);
// --remote-within and --max-slowdown set how gpool+remote's jobs ask. Each flag is an error
// when no gpool+remote run would read it.
StatusOr<std::vector<std::string>> ApplyRemoteFlags(const SimFlags& f, std::vector<std::string> policies,
                                                    sim::RemoteAttach* out) {
  const std::string remote(sim::kGpoolRemote);
  if (f.remote_attach_given) {
    GPOOL_ASSIGN_OR_RETURN(sched::GpuSource src, sched::ParseGpuSource(f.remote_attach.empty() ? "pooled" : f.remote_attach));
    if (src == sched::GpuSource::kLocal) {
      return Status::InvalidArgument(
          fmt::format("--remote-attach '{}': expected pooled or remote", f.remote_attach));
    }
    out->source = src;
    std::vector<std::string> renamed;
    for (const auto& p : policies) {
      const std::string name = p == "gpool" ? remote : p;
      if (std::find(renamed.begin(), renamed.end(), name) == renamed.end()) renamed.push_back(name);
    }
    policies = std::move(renamed);
  }
  if (!f.remote_within.empty()) {
    StatusOr<sched::Level> l = sched::ParseLevel(f.remote_within);
    if (!l.ok()) return l.status().WithContext("--remote-within");
    out->within = *l;
  }
  if (f.max_slowdown_given) out->max_slowdown = f.max_slowdown;
  const bool runs_remote = std::find(policies.begin(), policies.end(), remote) != policies.end();
  for (const auto& [given, flag] : {std::pair{f.remote_attach_given, "--remote-attach"},
                                    std::pair{!f.remote_within.empty(), "--remote-within"},
                                    std::pair{f.max_slowdown_given, "--max-slowdown"}}) {
    if (given && !runs_remote) {
      return Status::InvalidArgument(fmt::format(
          "{} configures remote attachment, which only gpool runs use (--policy gpool or "
          "gpool+remote, or --compare with either)", flag));
    }
  }
  sim::RemoteAttach check = *out;
  check.enabled = true;
  Status ok = sim::ValidateRemoteAttach(check);
  if (!ok.ok()) return ok.WithContext("--max-slowdown");
  return policies;
}

// What both fill modes share: power management off (nothing ends in a fill, so nodes never idle
// out) and fill.json's head (mode, workload, cluster, seed, runs, the command line).
nlohmann::json StartFill(const char* mode, const SimFlags& f, const sim::SimCluster& cluster,
                         const sim::Workload& work, sim::PolicyContext* ctx) {
  ctx->gpool_config = ctx->gpool_config.empty() ? "power.enabled=false"
                                                : "power.enabled=false," + ctx->gpool_config;
  nlohmann::json doc;
  doc["mode"] = mode;
  doc["workload"] = work.description;
  doc["cluster"] = cluster.description;
  doc["seed"] = f.seed;
  doc["runs"] = f.fill_runs;
  std::string command;
  for (size_t i = 0; i < f.argv.size(); ++i) command += (i ? " " : "") + f.argv[i];
  doc["command"] = command;
  return doc;
}

// --fill --fill-until-first-failure: the first-failure variant (sim/fill.h), per policy over
// `fill_runs` seeds; writes fill.json.
// Both fill modes' last step: fill.json into --out, and on stdout with -o json.
Status WriteFillJson(const SimFlags& f, const nlohmann::json& doc) {
  std::error_code ec;
  std::filesystem::create_directories(f.out, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create directory: {}", f.out, ec.message()));
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(f.out + "/fill.json", doc.dump(2) + "\n"));
  if (f.output == "json") {
    std::puts(doc.dump(2).c_str());
  } else {
    std::printf("wrote %s/fill.json\n", f.out.c_str());
  }
  return Status::Ok();
}

Status RunFirstFailureMode(const SimFlags& f, const std::vector<std::string>& policies,
                   const sim::SimCluster& cluster, const sim::Workload& work, sim::PolicyContext ctx) {
  const int fill_runs = f.fill_runs;
  nlohmann::json doc = StartFill("fill-until-first-failure", f, cluster, work, &ctx);
  if (f.output != "json") {
    std::printf("%-9s %14s %14s %9s %9s %12s %8s\n", "policy", "unalloc_gpus", "(min..max)",
                "unalloc%", "placed", "preempt_end", "cpu_s");
  }
  // Rows the reader skipped, then jobs the fill leaves out (the same for every policy and seed).
  std::vector<sim::SkippedRows> skipped = work.skipped;
  bool left_out_counted = false;
  for (const auto& name : policies) {
    GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> policy, sim::MakePolicy(name, ctx));
    nlohmann::json runs = nlohmann::json::array();
    double sum = 0, lo = 1e300, hi = -1e300, placed = 0, cpu = 0, total = 0;
    int64_t by_preemption = 0;
    for (int k = 0; k < fill_runs; ++k) {
      sim::FirstFailureOptions o;
      o.seed = f.seed + static_cast<uint64_t>(k);
      if (!f.quiet) {
        o.progress = [&name, k, fill_runs](int64_t placed_now, double gpus) {
          std::fprintf(stderr, "sim[%s]: fill run %d/%d: %lld jobs placed, %.1f GPUs allocated\n",
                       name.c_str(), k + 1, fill_runs, static_cast<long long>(placed_now), gpus);
        };
      }
      GPOOL_ASSIGN_OR_RETURN(sim::FirstFailureResult r,
                             sim::RunFillUntilFirstFailure(cluster, work, *policy, o));
      if (!left_out_counted) {
        skipped.insert(skipped.end(), r.left_out.begin(), r.left_out.end());
        left_out_counted = true;
      }
      sum += r.unallocated_gpus;
      lo = std::min(lo, r.unallocated_gpus);
      hi = std::max(hi, r.unallocated_gpus);
      placed += static_cast<double>(r.placed_jobs);
      cpu += r.cpu_s;
      total = r.total_gpus;
      by_preemption += r.ended_by_preemption ? 1 : 0;
      runs.push_back({{"seed", o.seed}, {"unallocated_gpus", r.unallocated_gpus},
                      {"allocated_gpus", r.allocated_gpus}, {"placed_jobs", r.placed_jobs},
                      {"failed_job", r.failed_job}, {"ended_by_preemption", r.ended_by_preemption},
                      {"hit_max_jobs", r.hit_max_jobs}, {"cpu_s", r.cpu_s}, {"wall_s", r.wall_s}});
    }
    const double n = fill_runs;
    doc["policies"][name] = {{"avg_unallocated_gpus", sum / n}, {"min_unallocated_gpus", lo},
                             {"max_unallocated_gpus", hi}, {"total_gpus", total},
                             {"avg_placed_jobs", placed / n}, {"ended_by_preemption", by_preemption},
                             {"cpu_s", cpu}, {"runs", runs}};
    if (f.output != "json") {
      std::printf("%-9s %14.1f %6.1f..%-7.1f %8.2f%% %9.0f %12lld %8.2f\n", name.c_str(), sum / n, lo, hi,
                  total > 0 ? 100 * sum / n / total : 0.0, placed / n,
                  static_cast<long long>(by_preemption), cpu);
      std::fflush(stdout);
    }
  }
  nlohmann::json skipped_rows = nlohmann::json::array();
  for (const auto& sk : skipped) {
    skipped_rows.push_back({{"reason", sk.reason}, {"count", sk.count}, {"example", sk.example}});
    if (f.output != "json") {
      std::printf("skipped %lld rows: %s (first at %s)\n", static_cast<long long>(sk.count),
                  sk.reason.c_str(), sk.example.c_str());
    }
  }
  doc["skipped_rows"] = skipped_rows;
  return WriteFillJson(f, doc);
}

// A number, or "undefined" (a measure with no data: no pod arrived at that load).
std::string Num(double v, const char* spec = "{:.1f}") {
  return std::isnan(v) ? std::string("undefined") : fmt::format(fmt::runtime(spec), v);
}

// --fill: FGD's experiment as its artifact runs it (sim/fill.h), per policy over `fill_runs`
// seeds; prints the unallocated GPUs at 100% arrived and against the arrived load; writes
// fill.json.
Status RunFillMode(const SimFlags& f, const std::vector<std::string>& policies,
                   const sim::SimCluster& cluster, const sim::Workload& work, sim::PolicyContext ctx) {
  const int fill_runs = f.fill_runs;
  nlohmann::json doc = StartFill("fill", f, cluster, work, &ctx);
  doc["load_ratio"] = f.fill_load;
  const size_t buckets = sim::kFillMaxPct + 1;
  std::vector<std::vector<double>> curves;  // per policy: mean unallocated GPUs per arrived %
  std::string table;
  std::vector<std::string> remote_rows;  // policies with remote attachment
  for (const auto& name : policies) {
    GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> policy, sim::MakePolicy(name, ctx));
    nlohmann::json runs = nlohmann::json::array();
    double sum = 0, lo = 1e300, hi = -1e300, failed = 0, cpu = 0, total = 0, frag100 = 0;
    int64_t submitted = 0, copies = 0;
    std::vector<double> unalloc(buckets, 0), frag(buckets, 0);
    // Remote attachment (gpool+remote): sums over the seeds; slowdowns over the seeds that
    // placed a remote pod by 100% arrived.
    const sim::RemoteAttach* attach = sim::RemoteAttachOf(*policy);
    const sim::RemoteAttach r_remote = attach ? *attach : sim::RemoteAttach{};
    double remote_gpus = 0, recovered = 0, remote_share = 0, slow_avg = 0, slow_p99 = 0;
    int64_t remote_pods = 0, slow_n = 0;
    for (int k = 0; k < fill_runs; ++k) {
      sim::FillOptions o;
      o.seed = f.seed + static_cast<uint64_t>(k);
      o.tune_ratio = f.fill_load;
      if (!f.quiet) {
        o.progress = [&name, k, fill_runs](int64_t done, double gpus) {
          std::fprintf(stderr, "sim[%s]: fill run %d/%d: %lld pods submitted, %.1f GPUs allocated\n",
                       name.c_str(), k + 1, fill_runs, static_cast<long long>(done), gpus);
        };
      }
      GPOOL_ASSIGN_OR_RETURN(sim::FillResult r, sim::RunFill(cluster, work, *policy, o));
      total = r.total_gpus;
      submitted = r.submitted;
      copies = r.copies;
      sum += r.unallocated_at_100;
      lo = std::min(lo, r.unallocated_at_100);
      hi = std::max(hi, r.unallocated_at_100);
      failed += static_cast<double>(r.failed);
      cpu += r.cpu_s;
      frag100 += r.frag_rate_at_pct[100];
      for (size_t b = 0; b < buckets; ++b) {
        unalloc[b] += r.total_gpus - r.allocated_at_pct[b];
        frag[b] += r.frag_rate_at_pct[b];
      }
      runs.push_back({{"seed", o.seed}, {"unallocated_gpus", r.unallocated_at_100},
                      {"frag_rate", r.frag_rate_at_pct[100]}, {"submitted_pods", r.submitted},
                      {"copies", r.copies}, {"placed_pods", r.placed}, {"failed_pods", r.failed},
                      {"failed_gpu_pods", r.failed_gpu_pods}, {"preemptions", r.preemptions},
                      {"allocated_gpus_at_end", r.allocated_end}, {"cpu_s", r.cpu_s},
                      {"wall_s", r.wall_s}});
      if (r.remote_attach) {
        auto jnum = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
        runs.back()["remote_gpus"] = jnum(r.remote_gpus_at_100);
        runs.back()["recovered_gpus"] = jnum(r.recovered_gpus_at_100);
        runs.back()["remote_pod_share"] = jnum(r.remote_pod_share_at_100);
        runs.back()["remote_pods_by_100"] = r.remote_pods_by_100;
        runs.back()["remote_pods"] = r.remote_pods;
        runs.back()["avg_remote_slowdown"] = jnum(r.avg_remote_slowdown_at_100);
        runs.back()["p99_remote_slowdown"] = jnum(r.p99_remote_slowdown_at_100);
        remote_gpus += r.remote_gpus_at_100;
        recovered += r.recovered_gpus_at_100;
        remote_share += r.remote_pod_share_at_100;
        remote_pods += r.remote_pods_by_100;
        if (!std::isnan(r.avg_remote_slowdown_at_100)) {
          slow_avg += r.avg_remote_slowdown_at_100;
          slow_p99 += r.p99_remote_slowdown_at_100;
          ++slow_n;
        }
      }
    }
    const double n = fill_runs;
    for (size_t b = 0; b < buckets; ++b) {
      unalloc[b] /= n;  // NaN stays NaN: a percent no pod reached in some run is undefined
      frag[b] /= n;
    }
    nlohmann::json pct = nlohmann::json::array();
    for (size_t b = 0; b < buckets; ++b) pct.push_back(b);
    auto arr = [](const std::vector<double>& v) {
      nlohmann::json a = nlohmann::json::array();
      for (double x : v) a.push_back(std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x));
      return a;
    };
    auto num = [](double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); };
    doc["policies"][name] = {{"avg_unallocated_gpus", num(sum / n)},
                             {"min_unallocated_gpus", num(lo)},
                             {"max_unallocated_gpus", num(hi)},
                             {"total_gpus", total},
                             {"avg_unallocated_share", num(total > 0 ? sum / n / total : std::nan(""))},
                             {"avg_frag_rate", num(frag100 / n)},
                             {"avg_failed_pods", failed / n},
                             {"submitted_pods", submitted},
                             {"copies", copies},
                             {"cpu_s", cpu},
                             {"curve", {{"arrived_pct", pct}, {"unallocated_gpus", arr(unalloc)},
                                        {"frag_rate", arr(frag)}}},
                             {"runs", runs}};
    if (r_remote.enabled) {
      nlohmann::json rj = {{"source", sched::GpuSourceName(r_remote.source)},
                           {"within", sched::LevelName(r_remote.within)},
                           {"max_slowdown", r_remote.max_slowdown},
                           {"avg_remote_gpus", num(remote_gpus / n)},
                           {"avg_recovered_gpus", num(recovered / n)},
                           {"avg_remote_pod_share", num(remote_share / n)},
                           {"avg_remote_pods", static_cast<double>(remote_pods) / n},
                           {"avg_remote_slowdown", num(slow_n > 0 ? slow_avg / slow_n : std::nan(""))},
                           {"p99_remote_slowdown", num(slow_n > 0 ? slow_p99 / slow_n : std::nan(""))}};
      doc["policies"][name]["remote_attach"] = rj;
      remote_rows.push_back(name);
    }
    curves.push_back(unalloc);
    if (f.output != "json") {
      table += fmt::format("{:<12} {:>12} {:>15} {:>9} {:>10} {:>12} {:>8.2f}\n", name, Num(sum / n),
                           Num(lo) + ".." + Num(hi), Num(total > 0 ? 100 * sum / n / total : std::nan(""), "{:.2f}%"),
                           Num(100 * frag100 / n, "{:.1f}%"), Num(failed / n, "{:.0f}"), cpu);
      if (policies.size() > 1 && !f.quiet) std::fprintf(stderr, "sim[%s]: fill done\n", name.c_str());
    }
  }
  if (f.output != "json") {
    std::printf("fill (FGD's method): %lld pods (every pod of the trace, plus random copies to %.2f x "
                "the GPUs), shuffled; %d seed(s) from %llu; %s\n",
                static_cast<long long>(doc["policies"][policies[0]]["submitted_pods"].get<int64_t>()),
                f.fill_load, fill_runs, static_cast<unsigned long long>(f.seed), cluster.description.c_str());
    std::printf("%-12s %12s %15s %9s %10s %12s %8s\n", "policy", "unalloc@100%", "(min..max)",
                "unalloc%", "frag_rate", "failed_pods", "cpu_s");
    std::fputs(table.c_str(), stdout);
    std::printf("unallocated GPUs against the arrived GPU request (%% of the cluster's GPUs), mean of "
                "the seeds:\n%-8s", "arrived");
    for (const auto& name : policies) std::printf(" %12s", name.c_str());
    std::printf("\n");
    for (size_t b = 0; b < buckets; b += 10) {
      std::printf("%-8s", fmt::format("{}%", b).c_str());
      for (const auto& c : curves) std::printf(" %12s", Num(c[b]).c_str());
      std::printf("\n");
    }
  }
  // Remote attachment's own figures; against gpool's row when the run has one.
  for (const auto& name : remote_rows) {
    nlohmann::json& rj = doc["policies"][name]["remote_attach"];
    if (doc["policies"].contains("gpool")) {
      const auto& g = doc["policies"]["gpool"]["avg_unallocated_gpus"];
      const auto& mine = doc["policies"][name]["avg_unallocated_gpus"];
      rj["unallocated_reduction_vs_gpool"] =
          g.is_number() && mine.is_number() ? nlohmann::json(g.get<double>() - mine.get<double>()) : nlohmann::json(nullptr);
    }
    if (f.output == "json") continue;
    auto get = [&rj](const char* key, const char* spec) {
      return rj[key].is_number() ? fmt::format(fmt::runtime(spec), rj[key].get<double>()) : std::string("undefined");
    };
    std::printf("%s (remote attachment %s, within %s, max slowdown %s), at 100%% arrived, mean of the "
                "seeds: %s GPUs on remote nodes, %s of them stranded GPUs recovered (lent by nodes "
                "short of the pod's CPU or memory)%s; %s of the placed pods remote; estimated "
                "slowdown of remote pods (cost model, not measured) mean %s, p99 %s\n",
                name.c_str(), rj["source"].get<std::string>().c_str(), rj["within"].get<std::string>().c_str(),
                rj["max_slowdown"].get<double>() > 0 ? fmt::format("{}", rj["max_slowdown"].get<double>()).c_str() : "any",
                get("avg_remote_gpus", "{:.1f}").c_str(), get("avg_recovered_gpus", "{:.1f}").c_str(),
                rj.contains("unallocated_reduction_vs_gpool")
                    ? fmt::format("; {} fewer unallocated than gpool", get("unallocated_reduction_vs_gpool", "{:.1f}")).c_str()
                    : "",
                rj["avg_remote_pod_share"].is_number()
                    ? fmt::format("{:.2f}%", 100 * rj["avg_remote_pod_share"].get<double>()).c_str()
                    : "undefined",
                get("avg_remote_slowdown", "{:.4f}").c_str(), get("p99_remote_slowdown", "{:.4f}").c_str());
  }
  return WriteFillJson(f, doc);
}

// The loaded replay's flags (docs/simulator/loaded-replay.md): --duration-scale and
// --duration-cap-s change the workload's run times; --baseline-power-off-s adds, after the
// policies named, a "<baseline>+poweroff" row per baseline (every policy but gpool and
// gpool+remote, which manage power themselves) that runs with the engine's idle power-off.
constexpr std::string_view kPowerOffSuffix = "+poweroff";

Status ApplyLoadFlags(const SimFlags& f, sim::Workload* work, std::vector<std::string>* policies) {
  const bool durations = f.duration_scale != 1 || f.duration_cap_s != 0;
  if (f.fill && (durations || f.baseline_power_off_s != 0)) {
    return Status::InvalidArgument(
        "--duration-scale, --duration-cap-s and --baseline-power-off-s apply to a time replay; a "
        "fill (--fill) has no run times or idle nodes");
  }
  if (!std::isfinite(f.duration_scale) || f.duration_scale <= 0) {
    return Status::InvalidArgument(
        fmt::format("--duration-scale {}: must be a finite number > 0 (0.1 = run times a tenth as long)",
                    f.duration_scale));
  }
  if (!std::isfinite(f.duration_cap_s) || f.duration_cap_s < 0) {
    return Status::InvalidArgument(
        fmt::format("--duration-cap-s {}: must be a finite number of seconds > 0 (0: no cap)", f.duration_cap_s));
  }
  if (durations) {
    StatusOr<int64_t> capped = work->ScaleDurations(f.duration_scale, f.duration_cap_s);
    if (!capped.ok()) return capped.status().WithContext("--duration-scale/--duration-cap-s");
  }
  if (f.baseline_power_off_s == 0) return Status::Ok();
  if (!std::isfinite(f.baseline_power_off_s) || f.baseline_power_off_s < 0) {
    return Status::InvalidArgument(fmt::format(
        "--baseline-power-off-s {}: must be a finite number of seconds > 0", f.baseline_power_off_s));
  }
  std::vector<std::string> variants;
  for (const auto& p : *policies) {
    if (p != "gpool" && p != sim::kGpoolRemote) variants.push_back(p + std::string(kPowerOffSuffix));
  }
  if (variants.empty()) {
    return Status::InvalidArgument(
        "--baseline-power-off-s adds an idle power-off variant of each baseline, and this run has "
        "none (gpool manages power itself): add one with --compare");
  }
  policies->insert(policies->end(), variants.begin(), variants.end());
  return Status::Ok();
}

// --policy-config is gpool's: checked before anything runs (an unknown key or bad value is an
// error naming the key), and an error when no gpool run would read it.
Status CheckPolicyConfig(const SimFlags& f, const std::vector<std::string>& policies) {
  if (f.policy_config.empty()) return Status::Ok();
  StatusOr<sched::PolicyConfig> c = sched::ParsePolicyConfig(f.policy_config);
  if (!c.ok()) return c.status().WithContext("--policy-config");
  if (std::find(policies.begin(), policies.end(), "gpool") == policies.end() &&
      std::find(policies.begin(), policies.end(), sim::kGpoolRemote) == policies.end()) {
    return Status::InvalidArgument(
        "--policy-config configures the gpool policy, which this run doesn't include (add it with "
        "--policy gpool or --compare ...,gpool, or drop --policy-config)");
  }
  return Status::Ok();
}

// --pooling: the flags that make sense there go to RunPoolingCommand; the others are errors.
Status RunPoolingMode(const SimFlags& f) {
  for (const auto& [given, flag] :
       {std::pair{!f.nodes.empty() || !f.fabric.empty(), "--nodes/--fabric (the cluster is made of the slices)"},
        std::pair{!f.policy.empty() || !f.compare.empty(), "--policy/--compare (the configurations are fixed)"},
        std::pair{f.fill || f.fill_first_failure, "--fill"},
        std::pair{!f.queues.empty(), "--queues (the slices set the quotas)"},
        std::pair{!f.net_model.empty() || !f.lfts.empty(), "--net-model/--lfts (no fabric: aggregate pipes)"}}) {
    if (given) return Status::InvalidArgument(fmt::format("--pooling: {} doesn't apply", flag));
  }
  PoolingCliFlags p;
  p.trace = f.trace;
  p.trace_format = f.trace_format;
  p.slices = f.slices;
  p.slices_date = f.slices_date;
  p.shapes = f.shapes;
  p.out = f.out;
  p.output = f.output;
  p.policy_config = f.policy_config;
  p.arrival_scale = f.arrival_scale;
  p.min_cycle_s = f.min_cycle_s;
  p.warmup_s = f.warmup_s;
  p.seed = f.seed;
  p.gpus_per_host = f.gpus_per_host;
  p.quiet = f.quiet;
  for (size_t i = 0; i < f.argv.size(); ++i) p.command += (i ? " " : "") + f.argv[i];
  if (!f.policy_config.empty()) {
    StatusOr<sched::PolicyConfig> c = sched::ParsePolicyConfig(f.policy_config);
    if (!c.ok()) return c.status().WithContext("--policy-config");
  }
  // The pool+remote row's settings.
  std::vector<std::string> rows = {std::string(sim::kGpoolRemote)};
  GPOOL_ASSIGN_OR_RETURN(rows, ApplyRemoteFlags(f, std::move(rows), &p.remote));
  return RunPoolingCommand(p);
}

Status RunSim(const SimFlags& f) {
  if (f.pooling) return RunPoolingMode(f);
  if (!f.slices.empty() || !f.slices_date.empty() || !f.shapes.empty() || f.warmup_s != 0) {
    return Status::InvalidArgument("--slices, --slices-date, --shapes and --warmup-s need --pooling");
  }
  GPOOL_ASSIGN_OR_RETURN(std::vector<std::string> policies, PolicyList(f));
  sim::RemoteAttach remote;
  GPOOL_ASSIGN_OR_RETURN(policies, ApplyRemoteFlags(f, std::move(policies), &remote));
  GPOOL_RETURN_IF_ERROR(CheckPolicyConfig(f, policies));
  GPOOL_ASSIGN_OR_RETURN(sim::SimCluster cluster, LoadCluster(f));
  GPOOL_ASSIGN_OR_RETURN(sim::Workload work, LoadWorkload(f, cluster));
  if (!(f.arrival_scale > 0)) return Status::InvalidArgument("--arrival-scale: must be > 0");
  work.ScaleArrivals(f.arrival_scale);
  GPOOL_RETURN_IF_ERROR(ApplyLoadFlags(f, &work, &policies));
  if (!f.quiet) {
    std::fprintf(stderr, "sim: %s\nsim: %s\n", work.description.c_str(), cluster.description.c_str());
    for (const auto& s : work.skipped) {
      std::fprintf(stderr, "sim: skipped %lld rows: %s (first at %s)\n",
                   static_cast<long long>(s.count), s.reason.c_str(), s.example.c_str());
    }
  }
  sim::SimFeedback feedback;
  sim::PolicyContext ctx;
  ctx.feedback = &feedback;
  ctx.gpool_config = f.policy_config;
  ctx.remote = remote;
  for (const auto& p : policies) {
    if (p == "fgd") {
      GPOOL_ASSIGN_OR_RETURN(ctx.target, sim::TargetWorkload(cluster, work));
    }
  }
  if (f.fill) {
    if (!f.queues.empty()) {
      return Status::InvalidArgument("--queues: not used by --fill (a fill has one queue)");
    }
    if (f.fill_runs < 1 || f.fill_runs > 1000) return Status::InvalidArgument("--fill-runs: must be 1..1000");
    if (!(f.fill_load > 0 && f.fill_load <= 100)) {
      return Status::InvalidArgument(fmt::format("--fill-load: must be in (0, 100], got {}", f.fill_load));
    }
    if (f.fill_first_failure) return RunFirstFailureMode(f, policies, cluster, work, ctx);
    return RunFillMode(f, policies, cluster, work, ctx);
  }
  if (f.fill_first_failure) return Status::InvalidArgument("--fill-until-first-failure needs --fill");
  std::optional<sim::TenantQueues> queues;
  if (!f.queues.empty()) {
    GPOOL_ASSIGN_OR_RETURN(sim::QueueConfig qc, sim::ReadQueueConfig(f.queues));
    GPOOL_ASSIGN_OR_RETURN(queues, sim::MakeConfiguredQueues(qc, work, sim::ToClusterSpec(cluster)));
  }
  std::vector<sim::RunResult> runs;
  std::vector<sim::Metrics> metrics;
  for (const auto& name : policies) {
    // "<baseline>+poweroff": the baseline's policy, with the engine's idle power-off.
    const bool power_off = name.size() > kPowerOffSuffix.size() &&
                           name.compare(name.size() - kPowerOffSuffix.size(), kPowerOffSuffix.size(),
                                        kPowerOffSuffix) == 0;
    const std::string base = power_off ? name.substr(0, name.size() - kPowerOffSuffix.size()) : name;
    GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> policy, sim::MakePolicy(base, ctx));
    sim::EngineOptions eo;
    if (power_off) eo.idle_power_off_s = f.baseline_power_off_s;
    eo.seed = f.seed;
    eo.feedback = &feedback;
    eo.min_cycle_interval_s = f.min_cycle_s;
    eo.queues = queues ? &*queues : nullptr;
    if (!f.quiet) {
      eo.progress = [&name](double t, int64_t done, int64_t total) {
        std::fprintf(stderr, "sim[%s]: t=%.0fs finished %lld/%lld jobs\n", name.c_str(), t,
                     static_cast<long long>(done), static_cast<long long>(total));
      };
    }
    GPOOL_ASSIGN_OR_RETURN(sim::RunResult r, sim::RunSimulation(cluster, work, *policy, eo));
    r.policy = name;
    metrics.push_back(sim::ComputeMetrics(r));
    if (!f.quiet) {
      const auto& m = metrics.back();
      std::fprintf(stderr, "sim[%s]: done in %.2fs wall (%lld cycles, %lld finished, %lld rejected, %lld unfinished)\n",
                   name.c_str(), r.wall_s, static_cast<long long>(r.cycles),
                   static_cast<long long>(m.finished), static_cast<long long>(m.rejected),
                   static_cast<long long>(m.unfinished));
      for (const auto& ex : r.rejected_examples) std::fprintf(stderr, "sim[%s]: rejected %s\n", name.c_str(), ex.c_str());
    }
    runs.push_back(std::move(r));
  }
  sim::RunInfo info;
  info.workload = work.description;
  info.cluster = cluster.description;
  info.seed = f.seed;
  info.skipped = work.skipped;
  info.offered_load = sim::ComputeOfferedLoad(work, static_cast<double>(cluster.total_gpus()));
  for (size_t i = 0; i < f.argv.size(); ++i) info.command += (i ? " " : "") + f.argv[i];
  GPOOL_RETURN_IF_ERROR(sim::WriteOutputs(f.out, info, runs, metrics));
  if (f.output == "json") {
    std::puts(sim::MetricsDocument(info, metrics).dump(2).c_str());
  } else {
    const sim::OfferedLoad& ol = *info.offered_load;
    std::printf("offered load (each job from its submit for its base run time): peak %s GPUs (%s of "
                "%.0f), average %s (%s) over %.0f s\n",
                sim::FormatMetric(ol.peak_gpus, "{:.0f}").c_str(),
                sim::FormatMetric(100 * ol.peak_share(), "{:.0f}%").c_str(), ol.capacity_gpus,
                sim::FormatMetric(ol.avg_gpus, "{:.0f}").c_str(),
                sim::FormatMetric(100 * ol.avg_share(), "{:.0f}%").c_str(), ol.span_s);
    std::printf("%-17s %11s %11s %11s %9s %9s %12s %8s %11s %11s\n", "policy", "avg_jct_s", "p50_jct_s",
                "p99_jct_s", "unalloc", "alloc", "makespan_s", "preempt", "energy_kwh", "busy_kwh");
    for (const auto& m : metrics) {
      // A measure with nothing to measure (no failed placement, no finished job) is undefined.
      std::printf("%-17s %11s %11s %11s %9s %9s %12s %8lld %11.0f %11s\n", m.policy.c_str(),
                  sim::FormatMetric(m.avg_jct_s, "{:.0f}").c_str(),
                  sim::FormatMetric(m.p50_jct_s, "{:.0f}").c_str(),
                  sim::FormatMetric(m.p99_jct_s, "{:.0f}").c_str(),
                  sim::FormatMetric(m.unallocated_gpus, "{:.1f}").c_str(),
                  sim::FormatMetric(m.allocation_rate, "{:.3f}").c_str(),
                  sim::FormatMetric(m.makespan_s, "{:.0f}").c_str(), static_cast<long long>(m.preemptions),
                  m.energy_kwh, sim::FormatMetric(m.energy_busy_span_kwh, "{:.0f}").c_str());
    }
    for (const auto& m : metrics) {
      if (!m.remote_attach) continue;
      std::printf("%s: %lld jobs with remote GPUs (%s of the GPU jobs started, %s of their "
                  "GPUs); estimated slowdown of those jobs (cost model, not measured): mean %s, p99 %s\n",
                  m.policy.c_str(), static_cast<long long>(m.remote_jobs),
                  sim::FormatMetric(100 * m.remote_job_share, "{:.2f}%").c_str(),
                  sim::FormatMetric(100 * m.remote_gpu_share, "{:.2f}%").c_str(), sim::FormatMetric(m.avg_remote_slowdown, "{:.4f}").c_str(),
                  sim::FormatMetric(m.p99_remote_slowdown, "{:.4f}").c_str());
    }
    std::printf("wrote %s/metrics.json, timeline.csv, jobs.csv, report.html\n", f.out.c_str());
  }
  return Status::Ok();
}

void RegisterSim(CLI::App& app, const GlobalFlags&, int* exit_code) {
  auto f = std::make_shared<SimFlags>();
  CLI::App* cmd = app.add_subcommand("sim", "replay a workload on a cluster under scheduling policies");
  cmd->add_option("--trace", f->trace, "trace file (for synthetic: the run-time list to sample)")->required();
  cmd->add_option("--trace-format", f->trace_format,
                  "openb | jobs-csv | jobs-jsonl | synthetic:key=value,... (default: sniffed)");
  cmd->add_option("--nodes", f->nodes, "node file: openb node list or Clos CSV (ip,DSW,PSW,ASW)");
  cmd->add_option("--fabric", f->fabric, "fabric file (any format gpool fabric load reads)");
  cmd->add_option("--policy", f->policy,
                  "gpool | fifo | slurm | tiresias | random | dotprod | clustering | packing | bestfit | fgd "
                  "| gpool+remote (default gpool)");
  cmd->add_option("--compare", f->compare, "all, or a comma-separated list of policies");
  cmd->add_option("--policy-config", f->policy_config, "gpool policy config, key=value,...");
  cmd->add_option("--seed", f->seed, "seed (synthetic workloads, policies; --fill: the first seed, default 42)");
  cmd->add_option("--gpus-per-host", f->gpus_per_host, "GPUs per host for Clos CSV and fabrics (default 8)");
  cmd->add_option("--host-gbps", f->host_gbps, "host NIC bandwidth for node files (default 1600)");
  cmd->add_option("--min-cycle-s", f->min_cycle_s, "merge scheduling cycles closer than this (default 0)");
  cmd->add_option("--arrival-scale", f->arrival_scale,
                  "multiply submit times by this (0.01 = arrivals 100x as fast; default 1)");
  cmd->add_option("--duration-scale", f->duration_scale,
                  "multiply run times (and estimates) by this (0.1 = a tenth as long; default 1)");
  cmd->add_option("--duration-cap-s", f->duration_cap_s,
                  "cap run times (and estimates) at this many seconds, after --duration-scale (default 0: no cap)");
  cmd->add_option("--baseline-power-off-s", f->baseline_power_off_s,
                  "also run each baseline as <name>+poweroff: the engine suspends nodes idle this "
                  "long and resumes them (180 s boot) for the jobs bound to them (default 0: not)");
  cmd->add_option("--queues", f->queues,
                  "YAML file of per-tenant queues: guaranteed_gpus, guaranteed_domains, weight, "
                  "max_gpus, max_running_jobs (default: an equal share each)");
  cmd->add_option("--out", f->out, "output directory")->required();
  cmd->add_option("-o,--output", f->output, "json: print metrics.json to stdout");
  cmd->add_flag("-q,--quiet", f->quiet, "no progress on stderr");
  cmd->add_flag("--fill", f->fill,
                "FGD's fragmentation experiment: every pod of the trace plus random copies up to "
                "--fill-load x the GPUs, shuffled, arriving one by one and never leaving; reports "
                "unallocated GPUs against the arrived load; writes fill.json");
  cmd->add_option("--fill-runs", f->fill_runs,
                  "with --fill: repetitions over seeds seed.. (default 10; 1 with --fill-until-first-failure)");
  cmd->add_option("--fill-load", f->fill_load,
                  "with --fill: the workload's GPU request, x the cluster's GPUs (default 1.3)");
  cmd->add_flag("--fill-until-first-failure", f->fill_first_failure,
                "with --fill: GPU jobs only, until the first failed placement (not FGD's method)");
  auto* remote_opt = cmd->add_option("--remote-attach", f->remote_attach,
                                     "gpool runs with remote attachment (reported as gpool+remote): GPU "
                                     "hosts serve their GPUs and GPU jobs take them from other nodes "
                                     "when they don't fit locally (pooled, the default) or always "
                                     "(remote); give the mode as --remote-attach=remote")
                         ->expected(0, 1);
  cmd->add_option("--remote-within", f->remote_within,
                  "gpool+remote: the farthest a task's GPU may be from its node: node, leaf, pod, "
                  "fabric (default fabric)");
  auto* slowdown_opt = cmd->add_option("--max-slowdown", f->max_slowdown,
                                       "gpool+remote: the estimated slowdown a job accepts, a factor "
                                       ">= 1 (default 0 = any)");
  cmd->add_flag("--pooling", f->pooling,
                "the pooling experiment: static slices per tenant vs one pool (quotas, borrowing, "
                "reclaim), with fractions, with remote attachment; writes pooling.json "
                "(needs --slices; --trace-format helios|philly|jobs-csv|jobs-jsonl|pooling-synthetic:...)");
  cmd->add_option("--slices", f->slices,
                  "with --pooling: the tenants' slices: Helios cluster_gpu_number.csv, Lucid vc_config.csv "
                  "(,num nodes), or tenant,gpus / tenant,nodes");
  cmd->add_option("--slices-date", f->slices_date,
                  "with --pooling and a Helios cluster_gpu_number.csv: the day whose VC sizes to use (default the last)");
  cmd->add_option("--shapes", f->shapes,
                  "with --trace-format pooling-synthetic: the openb pod list whose GPU job shapes to draw");
  cmd->add_option("--warmup-s", f->warmup_s,
                  "with --pooling: measure from the first submit + this many seconds; the jobs submitted "
                  "before load the cluster but are not counted (default 0)");
  cmd->add_option("--net-model", f->net_model,
                  "route (follow the fabric's routes; default with --fabric) or aggregate (pipes per "
                  "leaf/pod; default with --nodes)");
  cmd->add_option("--routing", f->routing, "routing engine for --net-model route: minhop, updn, ftree (default), dor");
  cmd->add_option("--lfts", f->lfts, "OpenSM LFT dump of the --fabric (routes as OpenSM set them)");
  cmd->add_option("--clos-tor-uplinks", f->clos_tor_uplinks,
                  "Clos CSV fabrics: parallel links from each ToR to its aggregation switch (default 1)");
  cmd->add_option("--clos-agg-uplinks", f->clos_agg_uplinks,
                  "Clos CSV fabrics: parallel links from each aggregation switch to each core (default 1)");
  cmd->callback([f, exit_code, &app, cmd, remote_opt, slowdown_opt] {
    f->seed_given = cmd->count("--seed") > 0;
    f->remote_attach_given = remote_opt->count() > 0;
    f->max_slowdown_given = slowdown_opt->count() > 0;
    f->argv = {"gpool", "sim"};
    for (const auto& [flag, val] : std::vector<std::pair<std::string, std::string>>{
             {"--trace", f->trace}, {"--trace-format", f->trace_format}, {"--nodes", f->nodes},
             {"--fabric", f->fabric}, {"--policy", f->policy}, {"--compare", f->compare},
             {"--policy-config", f->policy_config}, {"--queues", f->queues},
             {"--slices", f->slices}, {"--slices-date", f->slices_date}, {"--shapes", f->shapes},
             {"--net-model", f->net_model},
             {"--lfts", f->lfts}, {"--out", f->out}}) {
      if (!val.empty()) {
        f->argv.push_back(flag);
        f->argv.push_back(val);
      }
    }
    // Every flag that changes the result (not -q, -o): the command re-runs the same experiment.
    f->argv.push_back(fmt::format("--gpus-per-host {}", f->gpus_per_host));
    f->argv.push_back(fmt::format("--host-gbps {}", f->host_gbps));
    if (f->arrival_scale != 1) f->argv.push_back(fmt::format("--arrival-scale {}", f->arrival_scale));
    if (f->duration_scale != 1) f->argv.push_back(fmt::format("--duration-scale {}", f->duration_scale));
    if (f->duration_cap_s != 0) f->argv.push_back(fmt::format("--duration-cap-s {}", f->duration_cap_s));
    if (f->baseline_power_off_s != 0) {
      f->argv.push_back(fmt::format("--baseline-power-off-s {}", f->baseline_power_off_s));
    }
    if (f->min_cycle_s != 0) f->argv.push_back(fmt::format("--min-cycle-s {}", f->min_cycle_s));
    if (!f->fabric.empty() && f->net_model != "aggregate" && f->lfts.empty()) {
      f->argv.push_back("--routing " + f->routing);
    }
    if (f->clos_tor_uplinks != 1) f->argv.push_back(fmt::format("--clos-tor-uplinks {}", f->clos_tor_uplinks));
    if (f->clos_agg_uplinks != 1) f->argv.push_back(fmt::format("--clos-agg-uplinks {}", f->clos_agg_uplinks));
    if (f->fill) {
      // FGD's seeds are 42..51 (the artifact's run scripts); the replay's default seed stays 1.
      if (!f->seed_given) f->seed = f->fill_first_failure ? 1 : 42;
      if (f->fill_runs < 0) f->fill_runs = f->fill_first_failure ? 1 : 10;
      f->argv.push_back(fmt::format("--fill --fill-runs {}", f->fill_runs));
      if (f->fill_first_failure) {
        f->argv.push_back("--fill-until-first-failure");
      } else {
        f->argv.push_back(fmt::format("--fill-load {}", f->fill_load));
      }
    }
    if (f->pooling) f->argv.push_back("--pooling");
    if (f->warmup_s != 0) f->argv.push_back(fmt::format("--warmup-s {}", f->warmup_s));
    if (f->remote_attach_given) {
      f->argv.push_back("--remote-attach=" + (f->remote_attach.empty() ? std::string("pooled") : f->remote_attach));
    }
    if (!f->remote_within.empty()) f->argv.push_back("--remote-within " + f->remote_within);
    if (f->max_slowdown_given) f->argv.push_back(fmt::format("--max-slowdown {}", f->max_slowdown));
    f->argv.push_back(fmt::format("--seed {}", f->seed));
    (void)app;
    Status s = RunSim(*f);
    if (!s.ok()) {
      std::fprintf(stderr, "gpool sim: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace

GPOOL_REGISTER_COMMAND(RegisterSim);

}  // namespace gpool::cli
