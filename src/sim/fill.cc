#include "sim/fill.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "sched/cluster.h"
#include "sim/adapter.h"

namespace gpool::sim {

namespace {

// splitmix64, as in workload_gen.cc: the permutation must not depend on the standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed ^ 0xD1B54A32D192ED03ull) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) (n > 0); the modulo bias is negligible for trace sizes.
  size_t Below(size_t n) { return static_cast<size_t>(Next() % n); }

 private:
  uint64_t s_;
};

// Counts one left-out job under `reason` (the first one's `where` is kept).
void LeaveOut(std::vector<SkippedRows>* rows, const std::string& reason, const std::string& where) {
  for (SkippedRows& r : *rows) {
    if (r.reason == reason) {
      ++r.count;
      return;
    }
  }
  rows->push_back({reason, 1, where});
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

StatusOr<FillResult> RunFill(const SimCluster& cluster, const Workload& workload,
                             const sched::Policy& policy, const FillOptions& options) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  GPOOL_RETURN_IF_ERROR(cluster.Validate());
  const sched::ClusterSpec spec = ToClusterSpec(cluster);
  GPOOL_ASSIGN_OR_RETURN(sched::ClusterState state, sched::ClusterState::Create(spec));
  // One queue for everything: tenants and their quotas are not part of the experiment (and
  // quota reclaim would be a departure).
  Workload one_tenant;
  one_tenant.jobs = workload.jobs;
  for (SimJob& j : one_tenant.jobs) j.tenant = "default";
  const TenantQueues queues = MakeTenantQueues(one_tenant, cluster.total_gpus());
  int32_t max_gpus = 0;
  for (const auto& h : cluster.hosts) max_gpus = std::max(max_gpus, h.gpus);

  FillResult r;
  std::vector<sched::JobSpec> pool;
  pool.reserve(one_tenant.jobs.size());
  for (const SimJob& j : one_tenant.jobs) {
    GPOOL_ASSIGN_OR_RETURN(sched::JobSpec s, ToJobSpec(j, spec, queues, max_gpus));
    // Rejected in a replay too: such a job never "fails" a placement.
    if (Status fits = FitsEmptyCluster(s, spec); !fits.ok()) {
      LeaveOut(&r.left_out, "can't fit the empty cluster", fmt::format("{} ({})", j.source, fits.message()));
      continue;
    }
    if (s.task.gpus == 0) {  // CPU-only pods take no GPU: no bearing on the metric
      LeaveOut(&r.left_out, "CPU-only (takes no GPU)", j.source);
      continue;
    }
    s.priority = 0;
    s.est_runtime_s = 0;
    s.submit_ns = 0;
    pool.push_back(std::move(s));
  }
  if (pool.empty()) {
    return Status::InvalidArgument("fill: no job of the workload needs GPUs and fits the empty cluster");
  }

  r.policy = std::string(policy.name());
  r.total_gpus = static_cast<double>(state.total_gpus());
  const int64_t max_jobs = options.max_jobs > 0 ? options.max_jobs : 20 * state.total_gpus() + 1;
  Rng rng(options.seed);
  std::vector<size_t> perm(pool.size());
  size_t next = perm.size();  // exhausted: draw a fresh permutation
  std::vector<sched::JobSpec> pending(1);
  sched::UsageLedger ledger(policy.usage_half_life_s());
  auto last_progress = wall0;
  for (int64_t placed = 0;; ++placed) {
    if (placed >= max_jobs) {
      r.hit_max_jobs = true;
      break;
    }
    if (next == perm.size()) {
      for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
      for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.Below(i)]);
      next = 0;
    }
    pending[0] = pool[perm[next++]];
    pending[0].id = sched::JobId(static_cast<uint64_t>(placed));
    sched::SchedulingInput in{.state = &state, .pending = &pending, .queues = &queues.queues,
                              .usage = &ledger, .now_ns = 0, .seed = options.seed};
    auto decided = policy.Schedule(in);
    if (!decided.ok()) return decided.status().WithContext(fmt::format("fill: policy '{}'", policy.name()));
    const sched::JobSpec& job = pending[0];
    // Victims first (their room is what the bind needs); any preemption ends the run.
    for (const auto& p : decided->preemptions) {
      GPOOL_RETURN_IF_ERROR(state.Release(p.victim, 0).WithContext(
          fmt::format("fill: policy '{}' preempted job {}", policy.name(), p.victim.value())));
      r.ended_by_preemption = true;
    }
    bool bound = false;
    for (const auto& b : decided->binds) {
      if (b.job != job.id) {
        return Status::Internal(fmt::format("fill: policy '{}' bound job {}, which is not pending",
                                            policy.name(), b.job.value()));
      }
      GPOOL_RETURN_IF_ERROR(state.Bind(job, b.placement, 0).WithContext(
          fmt::format("fill: policy '{}': bind of job {}", policy.name(), job.id.value())));
      bound = true;
    }
    if (!bound || r.ended_by_preemption) {
      r.placed_jobs = placed + (bound ? 1 : 0);
      r.failed_job = fmt::format("{}: {} GPU x {} milli, {} task(s)", job.name, job.task.gpus,
                                 job.task.fractional() ? job.task.gpu_milli : 1000, job.num_tasks);
      break;
    }
    r.placed_jobs = placed + 1;
    if (options.progress) {
      const auto w = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(w - last_progress).count() >= options.progress_every_s) {
        last_progress = w;
        options.progress(r.placed_jobs, static_cast<double>(state.used_milli()) / 1000.0);
      }
    }
  }
  r.allocated_gpus = static_cast<double>(state.used_milli()) / 1000.0;
  r.unallocated_gpus = r.total_gpus - r.allocated_gpus;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  r.cpu_s = ThreadCpuSeconds() - cpu0;
  return r;
}

}  // namespace gpool::sim
