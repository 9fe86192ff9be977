// Simulator speed (src/sim): whole-run time of `gpool sim` workloads, per policy, as wall time and
// as this thread's CPU time (the figure a machine shared with other builds doesn't inflate much).
//
// A small driver rather than Google Benchmark: one run is seconds to a minute, so it is timed
// once. The inputs are the data sets of docs/simulator.md, which are not in the repository;
// pass their paths:
//
//   sim_bench --openb-pods P --openb-nodes N      openb whole-trace replay (7,255 pods, 1,213
//                                                 nodes, --arrival-scale 0.003, --min-cycle-s 10)
//   sim_bench --lingjun T --runtimes R [--jobs 100000] [--load 0.9]
//                                                 synthetic gangs on the Lingjun Clos topology
//   --policies gpool,fifo,...  (default: all)     --fill-runs K (openb fill mode, K seeds)
//   --gpool-config k=v,...  (gpool policy keys, as gpool sim --policy-config)
//
// Each line: case, policy, jobs, cycles, wall_s, cpu_s, and the run's avg JCT (so a speed-up
// that changed the schedule shows).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/file.h"
#include "sim/baselines.h"
#include "sim/cluster.h"
#include "sim/engine.h"
#include "sim/fill.h"
#include "sim/metrics.h"
#include "sim/trace.h"
#include "sim/workload_gen.h"

namespace gpool::sim {
namespace {

double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Args {
  std::string openb_pods, openb_nodes, lingjun, runtimes;
  std::vector<std::string> policies = ReplayPolicyNames();
  int64_t jobs = 100000;
  double load = 0.9;
  double arrival_scale = 0.003;
  double min_cycle_s = 10;
  int fill_runs = 0;
  std::string gpool_config;  // extra gpool policy keys (ablations), as --policy-config
};

int Fail(const Status& s) {
  std::fprintf(stderr, "sim_bench: %s\n", s.ToString().c_str());
  return 1;
}

Status Run(const std::string& label, const SimCluster& cluster, const Workload& work,
           const Args& a, double min_cycle_s) {
  SimFeedback feedback;
  PolicyContext ctx;
  ctx.feedback = &feedback;
  ctx.gpool_config = a.gpool_config;
  for (const auto& p : a.policies) {
    if (p == "fgd") {
      GPOOL_ASSIGN_OR_RETURN(ctx.target, TargetWorkload(cluster, work));
    }
  }
  for (const auto& name : a.policies) {
    GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> policy, MakePolicy(name, ctx));
    EngineOptions eo;
    eo.feedback = &feedback;
    eo.min_cycle_interval_s = min_cycle_s;
    const double cpu0 = CpuSeconds();
    const auto w0 = std::chrono::steady_clock::now();
    GPOOL_ASSIGN_OR_RETURN(RunResult r, RunSimulation(cluster, work, *policy, eo));
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
    const double cpu = CpuSeconds() - cpu0;
    const Metrics m = ComputeMetrics(r);
    std::printf("%-20s %-9s jobs=%-7zu cycles=%-7lld wall_s=%-8.2f cpu_s=%-8.2f jct avg/p50/p99=%.0f/%.0f/%.0f wait",
                label.c_str(), name.c_str(), work.jobs.size(), static_cast<long long>(r.cycles), wall, cpu,
                m.avg_jct_s, m.p50_jct_s, m.p99_jct_s);
    for (const GangBucket& b : m.wait_by_gang) std::printf(" %s:%.0f", b.label.c_str(), b.avg_wait_s);
    std::printf(" preempt=%lld kwh=%.0f\n", static_cast<long long>(m.preemptions), m.energy_kwh);
    std::fflush(stdout);
  }
  if (a.fill_runs > 0) {
    ctx.gpool_config = a.gpool_config.empty() ? "power.enabled=false" : "power.enabled=false," + a.gpool_config;
    for (const auto& name : a.policies) {
      GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> policy, MakePolicy(name, ctx));
      double cpu = 0, unalloc = 0;
      for (int k = 0; k < a.fill_runs; ++k) {
        // FGD's fill (sim/fill.h), seeds 42.. as the paper's; the figure at 100% arrived.
        GPOOL_ASSIGN_OR_RETURN(FillResult f, RunFill(cluster, work, *policy, {.seed = 42 + static_cast<uint64_t>(k)}));
        cpu += f.cpu_s;
        unalloc += f.unallocated_at_100;
      }
      std::printf("%-28s %-9s fill runs=%d cpu_s=%.2f avg_unallocated_gpus=%.1f\n", (label + " fill").c_str(),
                  name.c_str(), a.fill_runs, cpu, unalloc / a.fill_runs);
      std::fflush(stdout);
    }
  }
  return Status::Ok();
}

int Main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "sim_bench: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--openb-pods") a.openb_pods = next();
    else if (k == "--openb-nodes") a.openb_nodes = next();
    else if (k == "--lingjun") a.lingjun = next();
    else if (k == "--runtimes") a.runtimes = next();
    else if (k == "--jobs") a.jobs = std::atoll(next().c_str());
    else if (k == "--load") a.load = std::atof(next().c_str());
    else if (k == "--arrival-scale") a.arrival_scale = std::atof(next().c_str());
    else if (k == "--min-cycle-s") a.min_cycle_s = std::atof(next().c_str());
    else if (k == "--fill-runs") a.fill_runs = std::atoi(next().c_str());
    else if (k == "--gpool-config") a.gpool_config = next();
    else if (k == "--policies") {
      a.policies.clear();
      const std::string list = next();  // Split returns views into it
      for (auto p : Split(list, ',')) a.policies.emplace_back(Trim(p));
    } else {
      std::fprintf(stderr, "sim_bench: unknown argument '%s' (see the comment at the top of bench/sim_bench.cc)\n",
                   k.c_str());
      return 2;
    }
  }
  if (a.openb_pods.empty() && a.lingjun.empty()) {
    std::fprintf(stderr, "sim_bench: give --openb-pods/--openb-nodes and/or --lingjun/--runtimes\n");
    return 2;
  }
  if (!a.openb_pods.empty()) {
    auto cluster = ReadNodesFile(a.openb_nodes, {});
    if (!cluster.ok()) return Fail(cluster.status());
    auto work = ReadTrace(a.openb_pods, TraceFormat::kOpenb);
    if (!work.ok()) return Fail(work.status());
    work->ScaleArrivals(a.arrival_scale);
    Status s = Run("openb", *cluster, *work, a, a.min_cycle_s);
    if (!s.ok()) return Fail(s);
  }
  if (!a.lingjun.empty()) {
    auto cluster = ReadNodesFile(a.lingjun, {});
    if (!cluster.ok()) return Fail(cluster.status());
    auto text = ReadFile(a.runtimes);
    if (!text.ok()) return Fail(text.status());
    auto runtimes = ReadRuntimes(*text, a.runtimes);
    if (!runtimes.ok()) return Fail(runtimes.status());
    SyntheticOptions o;
    o.jobs = a.jobs;
    o.load = a.load;
    auto work = GenerateSynthetic(o, *runtimes, cluster->total_gpus());
    if (!work.ok()) return Fail(work.status());
    Args no_fill = a;
    no_fill.fill_runs = 0;
    Status s = Run("synthetic-lingjun", *cluster, *work, no_fill, 0);
    if (!s.ok()) return Fail(s);
  }
  return 0;
}

}  // namespace
}  // namespace gpool::sim

int main(int argc, char** argv) { return gpool::sim::Main(argc, argv); }
