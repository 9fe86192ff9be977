#include "sim/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace gpool::sim {

double Percentile(std::vector<double>* v, double p) {
  if (v->empty()) return 0;
  std::sort(v->begin(), v->end());
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v->size())));
  rank = std::clamp<size_t>(rank, 1, v->size());
  return (*v)[rank - 1];
}

std::string GangBucketLabel(int32_t gpus, int32_t gpu_milli) {
  if (gpus == 1 && gpu_milli < 1000) return "<1";
  if (gpus == 0) return "0";
  if (gpus == 1) return "1";
  if (gpus <= 8) return "2-8";
  if (gpus <= 64) return "9-64";
  if (gpus <= 256) return "65-256";
  if (gpus <= 1024) return "257-1024";
  return ">1024";
}

Metrics ComputeMetrics(const RunResult& r) {
  Metrics m;
  m.policy = r.policy;
  m.jobs = static_cast<int64_t>(r.jobs.size());
  m.rejected = r.rejected;
  m.unfinished = r.unfinished;
  std::vector<double> jct, wait;
  double slow = 0;
  static const char* kOrder[] = {"0", "<1", "1", "2-8", "9-64", "65-256", "257-1024", ">1024"};
  std::vector<std::vector<double>> bucket_waits(std::size(kOrder));
  for (const auto& j : r.jobs) {
    if (j.finish_s < 0) continue;
    ++m.finished;
    jct.push_back(j.jct_s());
    wait.push_back(j.wait_s());
    slow += j.slowdown;
    std::string label = GangBucketLabel(j.gpus, j.gpu_milli);
    for (size_t b = 0; b < std::size(kOrder); ++b) {
      if (label == kOrder[b]) bucket_waits[b].push_back(j.wait_s());
    }
  }
  if (!jct.empty()) {
    double sum = 0;
    for (double x : jct) sum += x;
    m.avg_jct_s = sum / static_cast<double>(jct.size());
    sum = 0;
    for (double x : wait) sum += x;
    m.avg_wait_s = sum / static_cast<double>(wait.size());
    m.avg_slowdown = slow / static_cast<double>(jct.size());
    m.p50_jct_s = Percentile(&jct, 50);
    m.p99_jct_s = Percentile(&jct, 99);
  }
  for (size_t b = 0; b < std::size(kOrder); ++b) {
    auto& w = bucket_waits[b];
    if (w.empty()) continue;
    GangBucket g;
    g.label = kOrder[b];
    g.jobs = static_cast<int64_t>(w.size());
    double sum = 0;
    for (double x : w) sum += x;
    g.avg_wait_s = sum / static_cast<double>(w.size());
    g.p99_wait_s = Percentile(&w, 99);
    m.wait_by_gang.push_back(std::move(g));
  }
  m.remote_attach = r.remote_attach;
  if (r.remote_attach) {
    int64_t started = 0;
    double milli = 0, remote_milli = 0;
    std::vector<double> slow_remote;
    for (const auto& j : r.jobs) {
      if (j.start_s < 0 || j.gpus == 0) continue;
      ++started;
      milli += static_cast<double>(j.gpus) * j.gpu_milli;
      if (j.remote_gpus == 0) continue;
      remote_milli += static_cast<double>(j.remote_gpus) * j.gpu_milli;
      slow_remote.push_back(j.remote_slowdown);
    }
    m.remote_jobs = static_cast<int64_t>(slow_remote.size());
    if (started > 0) m.remote_job_share = static_cast<double>(m.remote_jobs) / static_cast<double>(started);
    if (milli > 0) m.remote_gpu_share = remote_milli / milli;
    if (!slow_remote.empty()) {
      double sum = 0;
      for (double x : slow_remote) sum += x;
      m.avg_remote_slowdown = sum / static_cast<double>(slow_remote.size());
      m.p99_remote_slowdown = Percentile(&slow_remote, 99);
    }
  }
  if (r.first_fail_s >= 0) m.first_failed_placement_s = r.first_fail_s;
  m.unallocated_gpus = r.first_fail_s >= 0 ? r.unallocated_gpus_at_first_fail : kUndefined;
  m.avg_unallocated_gpus_blocked = r.blocked_s > 0 ? r.blocked_unallocated_gpu_s / r.blocked_s : kUndefined;
  m.blocked_s = r.blocked_s;
  // The busy span exists once a job finished (end_s is the last finish).
  if (m.finished > 0) m.makespan_s = std::max(0.0, r.end_s - r.start_s);
  // Allocation rate: integrate the timeline's step function over [start, end].
  if (m.makespan_s > 0 && r.total_gpu_milli > 0) {
    double area = 0;
    for (size_t i = 0; i < r.timeline.size(); ++i) {
      double t0 = std::max(r.timeline[i].t, r.start_s);
      double t1 = i + 1 < r.timeline.size() ? r.timeline[i + 1].t : r.end_s;
      t1 = std::min(t1, r.end_s);
      if (t1 > t0) area += static_cast<double>(r.timeline[i].used_milli) * (t1 - t0);
    }
    m.allocation_rate = area / (static_cast<double>(r.total_gpu_milli) * m.makespan_s);
  }
  m.preemptions = r.preemptions;
  m.duplicate_preemptions = r.duplicate_preemptions;
  m.energy_kwh = r.energy_j / 3.6e6;
  if (m.finished > 0 && r.energy_busy_span_j >= 0) m.energy_busy_span_kwh = r.energy_busy_span_j / 3.6e6;
  m.work_s = r.work_s;
  m.energy_with_work_kwh = r.energy_with_work_j / 3.6e6;
  m.idle_power_off_s = r.idle_power_off_s;
  m.idle_power_offs = r.idle_power_offs;
  m.boot_waits = r.boot_waits;
  m.cycles = r.cycles;
  m.wall_s = r.wall_s;
  double total_gpu_s = 0;
  for (double g : r.tenant_gpu_s) total_gpu_s += g;
  for (size_t t = 0; t < r.tenants.size(); ++t) {
    m.tenants.push_back({.tenant = r.tenants[t],
                         .entitlement = r.tenant_entitlement[t],
                         .share = total_gpu_s > 0 ? r.tenant_gpu_s[t] / total_gpu_s : kUndefined,
                         .gpu_hours = r.tenant_gpu_s[t] / 3600});
  }
  return m;
}

std::string FormatMetric(double v, const char* spec) {
  return std::isnan(v) ? std::string("undefined") : fmt::format(fmt::runtime(spec), v);
}

namespace {
nlohmann::json Defined(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }
}  // namespace

nlohmann::json MetricsToJson(const Metrics& m) {
  nlohmann::json j;
  j["jobs"] = m.jobs;
  j["finished"] = m.finished;
  j["rejected"] = m.rejected;
  j["unfinished"] = m.unfinished;
  j["avg_jct_s"] = Defined(m.avg_jct_s);
  j["p50_jct_s"] = Defined(m.p50_jct_s);
  j["p99_jct_s"] = Defined(m.p99_jct_s);
  j["avg_wait_s"] = Defined(m.avg_wait_s);
  j["avg_slowdown"] = Defined(m.avg_slowdown);
  j["unallocated_gpus"] = Defined(m.unallocated_gpus);
  j["first_failed_placement_s"] = Defined(m.first_failed_placement_s);
  j["avg_unallocated_gpus_while_blocked"] = Defined(m.avg_unallocated_gpus_blocked);
  j["blocked_s"] = m.blocked_s;
  j["allocation_rate"] = Defined(m.allocation_rate);
  j["makespan_s"] = Defined(m.makespan_s);
  j["preemptions"] = m.preemptions;
  j["duplicate_preemption_decisions"] = m.duplicate_preemptions;
  j["energy_kwh"] = m.energy_kwh;
  j["energy_busy_span_kwh"] = Defined(m.energy_busy_span_kwh);
  j["work_s"] = m.work_s;
  j["energy_with_work_kwh"] = m.energy_with_work_kwh;
  j["idle_power_off_s"] = m.idle_power_off_s;
  j["idle_power_offs"] = m.idle_power_offs;
  j["boot_waits"] = m.boot_waits;
  j["cycles"] = m.cycles;
  j["wall_s"] = m.wall_s;
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& b : m.wait_by_gang) {
    buckets.push_back({{"gang_gpus", b.label}, {"jobs", b.jobs}, {"avg_wait_s", b.avg_wait_s},
                       {"p99_wait_s", b.p99_wait_s}});
  }
  j["wait_by_gang_size"] = buckets;
  nlohmann::json tenants = nlohmann::json::array();
  for (const auto& t : m.tenants) {
    tenants.push_back({{"tenant", t.tenant}, {"entitlement", t.entitlement}, {"share", Defined(t.share)},
                       {"gpu_hours", t.gpu_hours}});
  }
  j["tenants"] = tenants;
  if (m.remote_attach) {
    j["remote_attach"] = {{"remote_jobs", m.remote_jobs},
                          {"remote_job_share", Defined(m.remote_job_share)},
                          {"remote_gpu_share", Defined(m.remote_gpu_share)},
                          {"avg_remote_slowdown", Defined(m.avg_remote_slowdown)},
                          {"p99_remote_slowdown", Defined(m.p99_remote_slowdown)}};
  }
  return j;
}

OfferedLoad ComputeOfferedLoad(const Workload& w, double capacity_gpus) {
  OfferedLoad o;
  o.capacity_gpus = capacity_gpus;
  // (time, +/- milli) steps; a job of run 0 adds nothing.
  std::vector<std::pair<double, int64_t>> steps;
  steps.reserve(2 * w.jobs.size());
  for (const auto& j : w.jobs) {
    if (j.run_s <= 0 || j.gpu_demand_milli() == 0) continue;
    steps.push_back({j.submit_s, j.gpu_demand_milli()});
    steps.push_back({j.submit_s + j.run_s, -j.gpu_demand_milli()});
  }
  if (w.jobs.empty()) return o;
  double t0 = w.jobs.front().submit_s, t1 = t0;
  for (const auto& j : w.jobs) {
    t0 = std::min(t0, j.submit_s);
    t1 = std::max(t1, j.submit_s + j.run_s);
  }
  // Ends before starts at the same instant: a job that ends as another starts doesn't overlap it.
  std::sort(steps.begin(), steps.end());
  int64_t cur = 0, peak = 0;
  double area = 0, last = t0;
  for (const auto& [t, d] : steps) {
    area += static_cast<double>(cur) * (t - last);
    last = t;
    cur += d;
    peak = std::max(peak, cur);
  }
  o.span_s = t1 - t0;
  o.peak_gpus = static_cast<double>(peak) / 1000.0;
  o.avg_gpus = o.span_s > 0 ? area / 1000.0 / o.span_s : kUndefined;
  return o;
}

nlohmann::json OfferedLoadToJson(const OfferedLoad& o) {
  const bool cap = o.capacity_gpus > 0;
  return {{"capacity_gpus", o.capacity_gpus},
          {"peak_gpus", Defined(o.peak_gpus)},
          {"avg_gpus", Defined(o.avg_gpus)},
          {"peak_share", cap ? Defined(o.peak_share()) : nlohmann::json(nullptr)},
          {"avg_share", cap ? Defined(o.avg_share()) : nlohmann::json(nullptr)},
          {"span_s", o.span_s}};
}

}  // namespace gpool::sim
