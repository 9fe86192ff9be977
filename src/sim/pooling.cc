#include "sim/pooling.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numbers>

#include <fmt/format.h>

#include "common/file.h"
#include "sim/baselines.h"
#include "sim/engine.h"
#include "sim/parse_util.h"
#include "sim/rng.h"
#include "sim/trace.h"

namespace gpool::sim {

namespace {

// Per job of the experiment's workload: what a configuration did with it.
struct JobTrack {
  int32_t tenant = 0;
  int64_t alloc_milli = 0;  // GPU capacity it held while running (rounded up when whole GPUs)
  int64_t busy_milli = 0;   // what it asked for
  double submit_s = 0, start_s = -1, finish_s = -1;
  bool rejected = false;
};

struct Span {
  uint32_t job;
  double start_s, end_s;
};

double Overlap(double a0, double a1, double b0, double b1) { return std::max(0.0, std::min(a1, b1) - std::max(a0, b0)); }

// Fills a row from the jobs of `tenant` (-1: all) and their spans.
// Jobs submitted before w0 (the warm-up) load the cluster, and their GPU time inside the windows
// counts, but they are not counted as jobs nor in the waits and JCTs.
PoolingRow MakeRow(const std::string& name, int32_t tenant, int64_t gpus, const std::vector<JobTrack>& jobs,
                   const std::vector<Span>& spans, double w0, double w1, double r0, double r1) {
  PoolingRow row;
  row.tenant = name;
  row.gpus = gpus;
  std::vector<double> waits, jcts;
  for (const auto& j : jobs) {
    if (tenant >= 0 && j.tenant != tenant) continue;
    if (j.submit_s < w0) continue;
    ++row.jobs;
    if (j.rejected) {
      ++row.rejected;
    } else if (j.finish_s < 0) {
      ++row.unfinished;
    } else {
      ++row.finished;
      waits.push_back(j.start_s - j.submit_s);
      jcts.push_back(j.finish_s - j.submit_s);
    }
  }
  double a = 0, b = 0, ar = 0, br = 0;
  for (const auto& s : spans) {
    const JobTrack& j = jobs[s.job];
    if (tenant >= 0 && j.tenant != tenant) continue;
    const double in_w = Overlap(s.start_s, s.end_s, w0, w1), in_r = Overlap(s.start_s, s.end_s, r0, r1);
    a += in_w * static_cast<double>(j.alloc_milli);
    b += in_w * static_cast<double>(j.busy_milli);
    ar += in_r * static_cast<double>(j.alloc_milli);
    br += in_r * static_cast<double>(j.busy_milli);
  }
  const double cap = static_cast<double>(gpus) * 1000;
  if (w1 > w0 && cap > 0) {
    row.alloc = a / (cap * (w1 - w0));
    row.busy = b / (cap * (w1 - w0));
  }
  if (r1 > r0 && cap > 0) {
    row.alloc_run = ar / (cap * (r1 - r0));
    row.busy_run = br / (cap * (r1 - r0));
  }
  if (!waits.empty()) {
    double sw = 0, sj = 0;
    for (double v : waits) sw += v;
    for (double v : jcts) sj += v;
    row.avg_wait_s = sw / static_cast<double>(waits.size());
    row.avg_jct_s = sj / static_cast<double>(jcts.size());
    row.p99_wait_s = Percentile(&waits, 99);
    row.max_wait_s = waits.back();  // sorted by Percentile
    row.p99_jct_s = Percentile(&jcts, 99);
  }
  return row;
}

// One engine run of `w` (whose job i is the experiment's job ids[i]); records into `tracks`.
Status RunOne(const SimCluster& cluster, const Workload& w, const std::vector<uint32_t>& ids,
              const std::string& policy_name, const PolicyContext& ctx, const TenantQueues* queues,
              const PoolingOptions& o, std::vector<JobTrack>* tracks, std::vector<Span>* spans, int64_t* preemptions,
              int64_t* remote_jobs) {
  GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<sched::Policy> policy, MakePolicy(policy_name, ctx));
  EngineOptions eo;
  eo.seed = o.seed;
  eo.queues = queues;
  eo.min_cycle_interval_s = o.min_cycle_s;
  GPOOL_ASSIGN_OR_RETURN(RunResult r, RunSimulation(cluster, w, *policy, eo));
  for (size_t i = 0; i < r.jobs.size(); ++i) {
    JobTrack& t = (*tracks)[ids[i]];
    const JobOutcome& o = r.jobs[i];
    t.submit_s = o.submit_s;
    t.start_s = o.start_s;
    t.finish_s = o.finish_s;
    t.rejected = o.rejected;
    t.alloc_milli = int64_t{o.gpus} * o.gpu_milli;
    if (o.remote_gpus > 0) ++*remote_jobs;
  }
  for (const auto& s : r.spans) spans->push_back({ids[s.job], s.start_s, s.end_s});
  *preemptions += r.preemptions;
  return Status::Ok();
}

Workload RoundedUp(const Workload& w) {
  Workload out = w;
  for (auto& j : out.jobs) j.gpu_milli = 1000;
  return out;
}

}  // namespace

StatusOr<SlicedCluster> BuildSlicedCluster(const std::vector<TenantSlice>& slices, const SliceHost& host,
                                           int32_t hosts_per_leaf) {
  if (slices.empty()) return Status::InvalidArgument("pooling: no slices");
  if (host.gpus < 1 || host.gpus > 16) return Status::InvalidArgument("pooling: GPUs per host must be 1..16");
  if (hosts_per_leaf < 1) return Status::InvalidArgument("pooling: hosts per leaf must be >= 1");
  SlicedCluster sc;
  sc.slices = slices;
  SimCluster& c = sc.cluster;
  c.pod_names = {"pod-0"};
  std::map<std::string, std::string> seen;
  for (const auto& s : slices) {
    if (s.gpus < 1) return Status::InvalidArgument(fmt::format("{}: slice of '{}' has no GPUs", s.where, s.tenant));
    if (!seen.emplace(s.tenant, s.where).second) {
      return Status::InvalidArgument(fmt::format("{}: tenant '{}' has two slices", s.where, s.tenant));
    }
    sc.first_host.push_back(static_cast<int32_t>(c.hosts.size()));
    for (int64_t left = s.gpus, k = 0; left > 0; left -= host.gpus, ++k) {
      SimHost h;
      h.name = fmt::format("{}-n{}", s.tenant, k);
      h.gpus = static_cast<int32_t>(std::min<int64_t>(left, host.gpus));
      h.cpu_milli = host.cpu_milli;
      h.mem_mib = host.mem_mib;
      h.model = host.model;
      h.nic_gbps = host.nic_gbps;
      h.leaf = static_cast<int32_t>(c.hosts.size()) / hosts_per_leaf;
      h.pod = 0;
      c.hosts.push_back(std::move(h));
    }
    sc.end_host.push_back(static_cast<int32_t>(c.hosts.size()));
  }
  const int32_t leaves = (static_cast<int32_t>(c.hosts.size()) + hosts_per_leaf - 1) / hosts_per_leaf;
  for (int32_t l = 0; l < leaves; ++l) {
    c.leaf_names.push_back(fmt::format("leaf-{}", l));
    c.leaf_uplink_gbps.push_back(0);
  }
  for (const auto& h : c.hosts) c.leaf_uplink_gbps[h.leaf] += h.nic_gbps;  // 1:1 to the pod
  double pod = 0;
  for (double g : c.leaf_uplink_gbps) pod += g;
  c.pod_uplink_gbps = {pod / 2};
  c.description = fmt::format("{} tenants' slices: {} hosts, {} GPUs ({} GPUs, {} CPUs, {} GiB per host)",
                              slices.size(), c.hosts.size(), c.total_gpus(), host.gpus, host.cpu_milli / 1000,
                              host.mem_mib / 1024);
  GPOOL_RETURN_IF_ERROR(c.Validate());
  return sc;
}

SimCluster SubCluster(const SimCluster& c, int32_t first, int32_t end) {
  SimCluster s;
  s.pod_names = {c.pod_names.empty() ? std::string("pod-0") : c.pod_names[0]};
  std::map<int32_t, int32_t> leaf_of;
  for (int32_t i = first; i < end; ++i) {
    SimHost h = c.hosts[i];
    auto [it, fresh] = leaf_of.emplace(h.leaf, static_cast<int32_t>(s.leaf_names.size()));
    if (fresh) {
      s.leaf_names.push_back(c.leaf_names[h.leaf]);
      s.leaf_uplink_gbps.push_back(c.leaf_uplink_gbps[h.leaf]);
    }
    h.leaf = it->second;
    h.pod = 0;
    s.hosts.push_back(std::move(h));
  }
  double pod = 0;
  for (double g : s.leaf_uplink_gbps) pod += g;
  s.pod_uplink_gbps = {pod / 2};
  s.description = fmt::format("hosts {}..{} of {}", first, end - 1, c.description);
  return s;
}

StatusOr<StandInOptions> ParseStandInSpec(std::string_view spec, StandInOptions o) {
  for (auto part : Split(spec, ',')) {
    part = Trim(part);
    if (part.empty()) continue;
    const size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument(fmt::format("pooling-synthetic: '{}': expected key=value", part));
    }
    const std::string key(Trim(part.substr(0, eq)));
    const std::string where = "pooling-synthetic";
    GPOOL_ASSIGN_OR_RETURN(double v, ParseDoubleField(part.substr(eq + 1), key, where));
    if (key == "days") {
      o.days = v;
    } else if (key == "load") {
      o.load = v;
    } else if (key == "skew") {
      o.skew = v;
    } else if (key == "min_run_s") {
      o.min_run_s = v;
    } else if (key == "max_run_s") {
      o.max_run_s = v;
    } else {
      return Status::InvalidArgument(fmt::format(
          "pooling-synthetic: unknown key '{}' (expected days, load, skew, min_run_s, max_run_s)", key));
    }
  }
  if (!(o.days > 0 && o.days <= 365)) return Status::InvalidArgument("pooling-synthetic: days must be in (0, 365]");
  if (!(o.load > 0 && o.load <= 10)) return Status::InvalidArgument("pooling-synthetic: load must be in (0, 10]");
  if (!(o.skew >= 0 && o.skew <= 5)) return Status::InvalidArgument("pooling-synthetic: skew must be in [0, 5]");
  if (!(o.min_run_s > 0 && o.max_run_s >= o.min_run_s)) {
    return Status::InvalidArgument("pooling-synthetic: need 0 < min_run_s <= max_run_s");
  }
  return o;
}

StatusOr<StandIn> GenerateStandIn(const std::vector<TenantSlice>& slices, const SliceHost& host,
                                  const Workload& shapes, const std::vector<double>& runtimes,
                                  const StandInOptions& o) {
  // Shapes: GPU pods that fit one host (the pod list's own CPU-only pods are left out: the
  // experiment is about GPUs).
  std::vector<const SimJob*> pool;
  for (const auto& j : shapes.jobs) {
    if (j.num_gpus >= 1 && j.num_gpus <= host.gpus && j.cpu_milli <= host.cpu_milli && j.mem_mib <= host.mem_mib) {
      pool.push_back(&j);
    }
  }
  if (pool.empty()) return Status::InvalidArgument("pooling-synthetic: no GPU job shape of the trace fits one host");
  if (runtimes.empty()) return Status::InvalidArgument("pooling-synthetic: empty run-time list");
  double mean_gpus = 0, mean_run = 0;
  for (const SimJob* j : pool) mean_gpus += static_cast<double>(j->gpu_demand_milli()) / 1000;
  mean_gpus /= static_cast<double>(pool.size());
  for (double r : runtimes) mean_run += std::clamp(r, o.min_run_s, o.max_run_s);
  mean_run /= static_cast<double>(runtimes.size());

  SplitMix rng(o.seed, SplitMix::kWorkloadSalt);
  std::vector<double> f(slices.size());
  double offered = 0, total = 0;
  for (size_t k = 0; k < slices.size(); ++k) {
    f[k] = std::exp(o.skew * rng.Normal());
    offered += f[k] * static_cast<double>(slices[k].gpus);
    total += static_cast<double>(slices[k].gpus);
  }
  for (double& x : f) x *= o.load * total / offered;

  StandIn out;
  out.offered = f;
  const double horizon = o.days * 86400;
  for (size_t k = 0; k < slices.size(); ++k) {
    // Offered GPU load = rate x mean GPUs x mean run time.
    const double rate = f[k] * static_cast<double>(slices[k].gpus) / (mean_gpus * mean_run);
    SplitMix r(o.seed * 1000003 + k + 1, SplitMix::kWorkloadSalt);  // a stream per tenant: a tenant's jobs don't depend on the others'
    int64_t n = 0;
    for (double t = r.Exp(rate); t < horizon; t += r.Exp(rate)) {
      const SimJob& shape = *pool[r.Index(pool.size())];
      SimJob j;
      j.tenant = slices[k].tenant;
      j.name = fmt::format("{}-{}", slices[k].tenant, n++);
      j.source = fmt::format("pooling-synthetic:{}", j.name);
      j.submit_s = t;
      j.run_s = std::clamp(runtimes[r.Index(runtimes.size())], o.min_run_s, o.max_run_s);
      j.num_gpus = shape.num_gpus;
      j.gpu_milli = shape.gpu_milli;
      j.cpu_milli = shape.cpu_milli;
      j.mem_mib = shape.mem_mib;
      j.has_estimate = false;  // as in the real traces
      out.workload.jobs.push_back(std::move(j));
    }
  }
  out.workload.Finalize();
  out.workload.description = fmt::format(
      "pooling stand-in: {} jobs of {} tenants over {} days, offered load {} x the GPUs, skew {} (shapes of {}, "
      "run times of a run-time list clamped to [{}, {}] s; tenant assignment synthetic)",
      out.workload.jobs.size(), slices.size(), o.days, o.load, o.skew, shapes.description, o.min_run_s, o.max_run_s);
  return out;
}

void LeaveOutUnsliced(const std::vector<TenantSlice>& slices, Workload* w) {
  std::map<std::string, int> has;
  for (const auto& s : slices) has[s.tenant] = 1;
  std::vector<SimJob> kept;
  for (auto& j : w->jobs) {
    if (has.count(j.tenant)) {
      kept.push_back(std::move(j));
    } else {
      w->Skip(fmt::format("tenant '{}' has no slice", j.tenant), j.source);
    }
  }
  w->jobs = std::move(kept);
  w->Finalize();
}

StatusOr<PoolingResult> RunPooling(const SlicedCluster& sc, const Workload& work, const PoolingOptions& o,
                                   const std::vector<double>& offered) {
  const size_t nt = sc.slices.size();
  std::map<std::string, int32_t> index;
  for (size_t k = 0; k < nt; ++k) index[sc.slices[k].tenant] = static_cast<int32_t>(k);
  std::vector<JobTrack> base(work.jobs.size());
  for (size_t i = 0; i < work.jobs.size(); ++i) {
    const SimJob& j = work.jobs[i];
    if (j.id != i) return Status::Internal("pooling: workload not finalized");
    auto it = index.find(j.tenant);
    if (it == index.end()) {
      return Status::InvalidArgument(fmt::format("{}: tenant '{}' has no slice", j.source, j.tenant));
    }
    base[i].tenant = it->second;
    base[i].busy_milli = j.gpu_demand_milli();
  }
  PoolingResult res;
  res.total_gpus = sc.cluster.total_gpus();
  res.jobs = static_cast<int64_t>(work.jobs.size());
  if (!work.jobs.empty()) {
    res.window_start_s = work.jobs.front().submit_s;
    res.window_end_s = work.jobs.back().submit_s;
  }
  if (!(o.warmup_s >= 0) || !std::isfinite(o.warmup_s)) {
    return Status::InvalidArgument(fmt::format("pooling: warm-up {} s: must be >= 0", o.warmup_s));
  }
  if (o.warmup_s > 0) {
    if (res.window_start_s + o.warmup_s >= res.window_end_s) {
      return Status::InvalidArgument(
          fmt::format("pooling: warm-up {} s leaves no window: the jobs arrive over [{}, {}] s", o.warmup_s,
                      res.window_start_s, res.window_end_s));
    }
    res.window_start_s += o.warmup_s;
  }
  res.warmup_s = o.warmup_s;
  // Without a generator's figure, the load that arrived: per tenant, the GPU time its jobs
  // submitted in the window ask for (requested GPUs x base run time), over its slice's GPU time.
  std::vector<double> arrived;
  if (offered.empty() && res.window_end_s > res.window_start_s) {
    arrived.assign(nt, 0.0);
    for (const auto& j : work.jobs) {
      if (j.submit_s < res.window_start_s) continue;
      const double gpus = static_cast<double>(j.gpu_demand_milli()) / 1000.0;
      arrived[static_cast<size_t>(base[j.id].tenant)] += gpus * j.run_s;
    }
    for (size_t k = 0; k < nt; ++k) {
      arrived[k] /= static_cast<double>(sc.slices[k].gpus) * (res.window_end_s - res.window_start_s);
    }
  }
  const std::vector<double>& load = offered.empty() ? arrived : offered;
  PolicyContext ctx;
  ctx.gpool_config = o.gpool_config.empty() ? "power.enabled=false" : "power.enabled=false," + o.gpool_config;
  ctx.remote = o.remote;

  // The pool's queues: each tenant guaranteed its slice's GPUs, weight 1, no limits.
  TenantQueues pool_queues;
  for (size_t k = 0; k < nt; ++k) {
    sched::QueueSpec q;
    q.name = sc.slices[k].tenant;
    q.tenant = sc.slices[k].tenant;
    q.guaranteed_gpus = sc.slices[k].gpus;
    q.weight = 1;
    pool_queues.tenants.push_back(q.tenant);
    pool_queues.queues.push_back(std::move(q));
    pool_queues.entitlement.push_back(static_cast<double>(sc.slices[k].gpus) / static_cast<double>(res.total_gpus));
  }
  const Workload rounded = RoundedUp(work);
  std::vector<uint32_t> identity(work.jobs.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<uint32_t>(i);

  struct Plan {
    const char* name;
    const char* description;
  };
  std::vector<Plan> plans = {
      {"static", "each tenant alone on its own slice, whole GPUs (fractions rounded up)"},
      {"pool", "one pool: quotas = slices, borrowing idle GPUs, reclaim; whole GPUs"},
      {"pool+frac", "the pool with fractional GPU sharing"},
  };
  if (o.remote_row) plans.push_back({"pool+remote", "the pool with fractions and remote attachment (gpool+remote)"});
  for (const auto& plan : plans) {
    const auto wall0 = std::chrono::steady_clock::now();
    const std::string name = plan.name;
    PoolingConfig cfg;
    cfg.name = name;
    cfg.description = plan.description;
    std::vector<JobTrack> tracks = base;
    std::vector<Span> spans;
    if (name == "static") {
      for (size_t k = 0; k < nt; ++k) {
        Workload sub;
        std::vector<uint32_t> ids;
        for (const auto& j : rounded.jobs) {
          if (base[j.id].tenant != static_cast<int32_t>(k)) continue;
          ids.push_back(j.id);
          sub.jobs.push_back(j);
          sub.jobs.back().id = static_cast<uint32_t>(sub.jobs.size() - 1);
        }
        if (sub.jobs.empty()) continue;
        const SimCluster slice = SubCluster(sc.cluster, sc.first_host[k], sc.end_host[k]);
        Status s = RunOne(slice, sub, ids, "gpool", ctx, nullptr, o, &tracks, &spans, &cfg.preemptions,
                          &cfg.remote_jobs);
        if (!s.ok()) return s.WithContext(fmt::format("pooling: static slice of '{}'", sc.slices[k].tenant));
      }
    } else {
      const Workload& w = name == "pool" ? rounded : work;
      Status s = RunOne(sc.cluster, w, identity, name == "pool+remote" ? std::string(kGpoolRemote) : "gpool", ctx,
                        &pool_queues, o, &tracks, &spans, &cfg.preemptions, &cfg.remote_jobs);
      if (!s.ok()) return s.WithContext("pooling: " + name);
    }
    // Busy counts the request; alloc what was held (RunOne set alloc from the run's own shape).
    for (size_t i = 0; i < tracks.size(); ++i) tracks[i].busy_milli = base[i].busy_milli;
    double run_end = res.window_start_s;
    for (const auto& t : tracks) run_end = std::max(run_end, t.finish_s);
    cfg.all = MakeRow("all", -1, res.total_gpus, tracks, spans, res.window_start_s, res.window_end_s,
                      res.window_start_s, run_end);
    for (size_t k = 0; k < nt; ++k) {
      cfg.tenants.push_back(MakeRow(sc.slices[k].tenant, static_cast<int32_t>(k), sc.slices[k].gpus, tracks, spans,
                                    res.window_start_s, res.window_end_s, res.window_start_s, run_end));
      if (k < load.size()) cfg.tenants.back().offered = load[k];
    }
    if (!load.empty()) {
      double sum = 0;
      for (size_t k = 0; k < nt && k < load.size(); ++k) sum += load[k] * static_cast<double>(sc.slices[k].gpus);
      cfg.all.offered = sum / static_cast<double>(res.total_gpus);
    }
    cfg.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    if (o.progress) {
      o.progress(fmt::format("{}: alloc {}, busy {}, avg wait {} s ({:.1f} s wall)", name,
                             FormatMetric(cfg.all.alloc, "{:.3f}"), FormatMetric(cfg.all.busy, "{:.3f}"),
                             FormatMetric(cfg.all.avg_wait_s, "{:.0f}"), cfg.wall_s));
    }
    res.configs.push_back(std::move(cfg));
  }
  return res;
}

namespace {

nlohmann::json Num(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

nlohmann::json RowJson(const PoolingRow& r) {
  return {{"tenant", r.tenant},
          {"gpus", r.gpus},
          {"offered_load", Num(r.offered)},
          {"jobs", r.jobs},
          {"finished", r.finished},
          {"rejected", r.rejected},
          {"unfinished", r.unfinished},
          {"alloc", Num(r.alloc)},
          {"busy", Num(r.busy)},
          {"alloc_run", Num(r.alloc_run)},
          {"busy_run", Num(r.busy_run)},
          {"avg_wait_s", Num(r.avg_wait_s)},
          {"p99_wait_s", Num(r.p99_wait_s)},
          {"max_wait_s", Num(r.max_wait_s)},
          {"avg_jct_s", Num(r.avg_jct_s)},
          {"p99_jct_s", Num(r.p99_jct_s)}};
}

std::string RowLine(const std::string& config, const PoolingRow& r) {
  return fmt::format("{:<12} {:<10} {:>6} {:>7} {:>7} {:>6} {:>4} {:>6} {:>6} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}\n",
                     config, r.tenant, r.gpus, FormatMetric(r.offered, "{:.2f}"), r.jobs, r.finished,
                     r.rejected + r.unfinished, FormatMetric(r.alloc, "{:.3f}"), FormatMetric(r.busy, "{:.3f}"),
                     FormatMetric(r.alloc_run, "{:.3f}"), FormatMetric(r.busy_run, "{:.3f}"),
                     FormatMetric(r.avg_wait_s, "{:.0f}"), FormatMetric(r.p99_wait_s, "{:.0f}"),
                     FormatMetric(r.avg_jct_s, "{:.0f}"), FormatMetric(r.p99_jct_s, "{:.0f}"));
}

}  // namespace

nlohmann::json PoolingToJson(const PoolingResult& r) {
  nlohmann::json configs = nlohmann::json::array();
  for (const auto& c : r.configs) {
    nlohmann::json tenants = nlohmann::json::array();
    for (const auto& t : c.tenants) tenants.push_back(RowJson(t));
    configs.push_back({{"name", c.name},
                       {"description", c.description},
                       {"all", RowJson(c.all)},
                       {"tenants", tenants},
                       {"preemptions", c.preemptions},
                       {"remote_jobs", c.remote_jobs},
                       {"wall_s", c.wall_s}});
  }
  return {{"window_start_s", r.window_start_s}, {"window_end_s", r.window_end_s},
          {"warmup_s", r.warmup_s},
          {"total_gpus", r.total_gpus},         {"jobs", r.jobs},
          {"configs", configs}};
}

std::string FormatPoolingTable(const PoolingResult& r) {
  const std::string head = fmt::format(
      "{:<12} {:<10} {:>6} {:>7} {:>7} {:>6} {:>4} {:>6} {:>6} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9}\n", "config",
      "tenant", "gpus", "offered", "jobs", "fin", "left", "alloc", "busy", "alloc_run", "busy_run", "avg_wait",
      "p99_wait", "avg_jct", "p99_jct");
  std::string out = head;
  for (const auto& c : r.configs) out += RowLine(c.name, c.all);
  out += "\nper tenant:\n" + head;
  for (const auto& c : r.configs) {
    for (const auto& t : c.tenants) out += RowLine(c.name, t);
  }
  return out;
}

}  // namespace gpool::sim
