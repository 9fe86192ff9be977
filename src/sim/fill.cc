#include "sim/fill.h"

#include <time.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "sched/cluster.h"
#include "sim/adapter.h"
#include "sim/baselines.h"
#include "sim/metrics.h"
#include "sim/score_policies.h"

namespace gpool::sim {

namespace {

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

// The score policies' fast path: each node's score for each pod shape, kept until the node
// changes (a fill changes one node per pod, so most scores are reused). Same decisions as
// ScorePolicy::Schedule: the same scores and tie ranks, nodes offered in the same order, the
// same random stream for random's choices.
class ScoreCache {
 public:
  ScoreCache(const ScorePolicy& p, size_t nodes, uint64_t seed)
      : p_(p), nodes_(nodes), node_ver_(nodes, 1), ranks_(NodeRanks(seed, nodes)) {}

  // The node the policy picks for pod (nullopt: none feasible) and the GPUs it takes there.
  std::optional<std::pair<uint32_t, uint32_t>> Pick(const std::vector<NodeRes>& res,
                                                     const std::vector<uint8_t>& schedulable,
                                                     const PodRes& pod, SplitMix* rng) {
    const size_t s = ShapeOf(pod);
    int64_t* score = &score_[s * nodes_];
    uint32_t* ver = &ver_[s * nodes_];
    BestPicker pick(&ranks_, p_.kind() == ScoreKind::kRandom ? rng : nullptr);
    for (size_t n = 0; n < nodes_; ++n) {
      if (!schedulable[n]) continue;
      if (ver[n] != node_ver_[n]) {
        score[n] = Feasible(res[n], pod) ? p_.Score(res[n], pod) : kInfeasible;
        ver[n] = node_ver_[n];
      }
      if (score[n] != kInfeasible) pick.Offer(score[n], static_cast<uint32_t>(n));
    }
    if (!pick.found()) return std::nullopt;
    return std::make_pair(pick.node(), p_.ChooseGpus(res[pick.node()], pod, rng));
  }
  void Changed(size_t n) { ++node_ver_[n]; }

 private:
  static constexpr int64_t kInfeasible = std::numeric_limits<int64_t>::min();
  size_t ShapeOf(const PodRes& p) {
    auto [it, added] = shapes_.emplace(std::make_tuple(p.cpu, p.mem, p.gpus, p.milli, p.models),
                                       shapes_.size());
    if (added) {
      score_.resize(shapes_.size() * nodes_, 0);
      ver_.resize(shapes_.size() * nodes_, 0);  // node versions start at 1: all stale
    }
    return it->second;
  }
  const ScorePolicy& p_;
  size_t nodes_;
  std::vector<uint32_t> node_ver_;
  std::vector<uint32_t> ranks_;
  std::map<std::tuple<int64_t, uint64_t, int32_t, int32_t, sched::ModelMask>, size_t> shapes_;
  std::vector<int64_t> score_;
  std::vector<uint32_t> ver_;
};

// Mean over the pods of each arrived percent (merge_alloc_discrete.py): the exact percent, else
// the percents next to it; NaN when neither has a pod.
std::vector<double> PerPct(const std::vector<double>& sum, const std::vector<int64_t>& count) {
  std::vector<double> out(sum.size(), std::numeric_limits<double>::quiet_NaN());
  for (size_t p = 0; p < sum.size(); ++p) {
    if (count[p] > 0) {
      out[p] = sum[p] / static_cast<double>(count[p]);
      continue;
    }
    double s = 0;
    int64_t c = 0;
    for (size_t q = p == 0 ? 0 : p - 1; q <= p + 1 && q < sum.size(); ++q) {
      s += sum[q];
      c += count[q];
    }
    if (c > 0) out[p] = s / static_cast<double>(c);
  }
  return out;
}

}  // namespace

StatusOr<FillWorkload> BuildFillWorkload(const Workload& w, int64_t cluster_gpus, double tune_ratio,
                                         uint64_t seed) {
  if (w.jobs.empty()) return Status::InvalidArgument("fill: the workload has no pods");
  if (cluster_gpus <= 0) return Status::InvalidArgument("fill: the cluster has no GPUs");
  if (!(tune_ratio > 0)) {
    return Status::InvalidArgument(fmt::format("fill: load ratio must be > 0, got {}", tune_ratio));
  }
  FillWorkload f;
  SplitMix rng(seed);
  f.order.resize(w.jobs.size());
  for (size_t i = 0; i < f.order.size(); ++i) f.order[i] = static_cast<uint32_t>(i);
  for (size_t i = f.order.size(); i > 1; --i) std::swap(f.order[i - 1], f.order[rng.Below(i)]);
  f.trace_pods = static_cast<int64_t>(w.jobs.size());
  for (const SimJob& j : w.jobs) f.gpu_milli += j.gpu_demand_milli();
  const double target = tune_ratio * static_cast<double>(cluster_gpus) * 1000;
  if (static_cast<double>(f.gpu_milli) > target) {
    // tuneDownPods: random pods out until the request fits the ratio.
    while (static_cast<double>(f.gpu_milli) > target && !f.order.empty()) {
      const size_t k = rng.Below(f.order.size());
      f.gpu_milli -= w.jobs[f.order[k]].gpu_demand_milli();
      f.order.erase(f.order.begin() + static_cast<std::ptrdiff_t>(k));
      ++f.removed;
    }
    return f;
  }
  // tuneUpPods: random copies until the next one would pass the target. The artifact tests the
  // copy's per-GPU milli against the target but adds its whole request; kept as it is.
  if (f.gpu_milli == 0) return f;  // CPU-only trace: no copy can raise the GPU request
  for (;;) {
    const uint32_t k = static_cast<uint32_t>(rng.Below(w.jobs.size()));
    const SimJob& j = w.jobs[k];
    const int64_t per_gpu = j.num_gpus == 0 ? 0 : j.gpu_milli;
    if (static_cast<double>(f.gpu_milli + per_gpu) > target) break;
    f.gpu_milli += j.gpu_demand_milli();
    f.order.push_back(k);
    ++f.copies;
  }
  return f;
}

namespace {

// What both fill modes start from: the cluster as the policy sees it (its GPUs lent when the
// policy attaches remote GPUs), and the workload in one queue: tenants and their quotas are not
// part of the experiment (and quota reclaim would be a departure).
struct FillSetup {
  RemoteAttach remote;  // the policy's, or none
  sched::ClusterSpec spec;
  sched::ClusterState state;
  Workload one_tenant;
  TenantQueues queues;
  int32_t max_gpus = 0;  // the most GPUs of one host
};

StatusOr<FillSetup> PrepareFill(const SimCluster& cluster, const Workload& workload,
                                const sched::Policy& policy) {
  GPOOL_RETURN_IF_ERROR(cluster.Validate());
  const RemoteAttach* attach = RemoteAttachOf(policy);
  const RemoteAttach remote = attach ? *attach : RemoteAttach{};
  GPOOL_RETURN_IF_ERROR(ValidateRemoteAttach(remote));
  sched::ClusterSpec spec = ToClusterSpec(cluster, remote);
  GPOOL_ASSIGN_OR_RETURN(sched::ClusterState state, sched::ClusterState::Create(spec));
  Workload one_tenant;
  one_tenant.jobs = workload.jobs;
  for (SimJob& j : one_tenant.jobs) j.tenant = "default";
  TenantQueues queues = MakeTenantQueues(one_tenant, cluster.total_gpus());
  int32_t max_gpus = 0;
  for (const auto& h : cluster.hosts) max_gpus = std::max(max_gpus, h.gpus);
  return FillSetup{.remote = remote,
                   .spec = std::move(spec),
                   .state = std::move(state),
                   .one_tenant = std::move(one_tenant),
                   .queues = std::move(queues),
                   .max_gpus = max_gpus};
}

}  // namespace

StatusOr<FillResult> RunFill(const SimCluster& cluster, const Workload& workload,
                             const sched::Policy& policy, const FillOptions& options) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  GPOOL_ASSIGN_OR_RETURN(FillSetup setup, PrepareFill(cluster, workload, policy));
  const sched::ClusterSpec& spec = setup.spec;
  sched::ClusterState& state = setup.state;
  const Workload& one_tenant = setup.one_tenant;
  const TenantQueues& queues = setup.queues;
  const int32_t max_gpus = setup.max_gpus;
  const RemoteAttach& remote = setup.remote;
  std::vector<sched::JobSpec> specs;
  std::vector<uint8_t> never_fits;  // per job: no node of its models can ever hold it
  specs.reserve(one_tenant.jobs.size());
  for (const SimJob& j : one_tenant.jobs) {
    GPOOL_ASSIGN_OR_RETURN(sched::JobSpec s, ToJobSpec(j, spec, queues, max_gpus));
    ApplyRemoteAttach(remote, &s);
    s.priority = 0;
    s.est_runtime_s = 0;
    s.submit_ns = 0;
    never_fits.push_back(FitsEmptyCluster(s, spec).ok() ? 0 : 1);
    specs.push_back(std::move(s));
  }
  GPOOL_ASSIGN_OR_RETURN(FillWorkload fw,
                         BuildFillWorkload(one_tenant, state.total_gpus(), options.tune_ratio, options.seed));

  FillResult r;
  r.policy = std::string(policy.name());
  r.remote_attach = remote.enabled;
  r.total_gpus = static_cast<double>(state.total_gpus());
  r.submitted = static_cast<int64_t>(fw.order.size());
  r.copies = fw.copies;
  // The fragmentation report's measure, the same for every policy: the trace's typical pods.
  const TypicalPods typical = MakeTypicalPods(specs);
  const size_t num_nodes = state.num_nodes();
  std::vector<NodeRes> res(num_nodes);
  std::vector<uint8_t> schedulable(num_nodes);
  std::vector<double> frag(num_nodes);
  double frag_sum = 0;
  for (size_t n = 0; n < num_nodes; ++n) {
    const sched::NodeId id(static_cast<uint32_t>(n));
    res[n] = NodeResOf(state, id);
    schedulable[n] = state.schedulable(id) ? 1 : 0;
    frag[n] = schedulable[n] ? NodeFrag(res[n], typical) : 0;
    frag_sum += frag[n];
  }
  const ScorePolicy* fast = dynamic_cast<const ScorePolicy*>(&policy);
  std::optional<ScoreCache> cache;
  if (fast) cache.emplace(*fast, num_nodes, options.seed);
  auto refresh = [&](sched::NodeId id, int cls) {
    const size_t n = id.value();
    const uint32_t classes = res[n].classes | (cls > 0 ? 1u << cls : 0u);
    res[n] = NodeResOf(state, id);
    res[n].classes = classes;
    frag_sum -= frag[n];
    frag[n] = schedulable[n] ? NodeFrag(res[n], typical) : 0;
    frag_sum += frag[n];
    if (cache) cache->Changed(n);
  };

  const size_t buckets = kFillMaxPct + 1;
  std::vector<double> alloc_sum(buckets, 0), frag_rate_sum(buckets, 0);
  std::vector<int64_t> count(buckets, 0);
  // Remote attachment: running totals (milli), their per-percent sums, and per pod what it
  // added (a preempted pod takes it back). See fill.h for the definitions.
  int64_t remote_milli = 0, recovered_milli = 0, remote_pods = 0;
  std::vector<double> remote_sum(buckets, 0), recovered_sum(buckets, 0), remote_share_sum(buckets, 0);
  struct RemoteTake {
    int64_t remote_milli = 0, recovered_milli = 0;
  };
  std::vector<RemoteTake> took(remote.enabled ? fw.order.size() : 0);
  std::vector<double> slowdown_by_100;  // remote pods placed up to 100% arrived
  const double total_milli = r.total_gpus * 1000;
  int64_t arrived = 0;
  std::vector<sched::JobSpec> pending(1);
  sched::UsageLedger ledger(policy.usage_half_life_s());
  auto last_progress = wall0;
  for (size_t k = 0; k < fw.order.size(); ++k) {
    sched::JobSpec& job = pending[0];
    job = specs[fw.order[k]];
    job.id = sched::JobId(static_cast<uint64_t>(k));
    arrived += job.total_milli_gpus();
    const int cls = PodRes::Of(job).gpu_class();
    bool bound = false;
    if (never_fits[fw.order[k]]) {
      // Fails wherever it arrives (a replay rejects such a job): recorded, not submitted, since
      // a policy may refuse it as invalid input.
    } else if (fast && job.num_tasks == 1 && !job.locality.required) {
      const PodRes pod = PodRes::Of(job);
      SplitMix rng(ScorePolicy::TieSeed(options.seed, k));
      if (auto pick = cache->Pick(res, schedulable, pod, &rng)) {
        const sched::NodeId id(pick->first);
        sched::TaskBinding b{.node = id, .gpu_mask = pick->second,
                             .gpu_milli = pod.shared() ? pod.milli : (pod.gpus > 0 ? 1000 : 0),
                             .gpu_memory_bytes = pod.shared() ? job.task.gpu_memory_bytes : 0};
        GPOOL_RETURN_IF_ERROR(state.Bind(job, sched::Placement{.tasks = {b}}, 0).WithContext(
            fmt::format("fill: policy '{}': bind of pod {}", policy.name(), job.name)));
        refresh(id, cls);
        bound = true;
      }
    } else {
      sched::SchedulingInput in{.state = &state, .pending = &pending, .queues = &queues.queues,
                                .usage = &ledger, .now_ns = 0, .seed = options.seed};
      auto decided = policy.Schedule(in);
      if (!decided.ok()) return decided.status().WithContext(fmt::format("fill: policy '{}'", policy.name()));
      // A preempted pod departs, which the experiment doesn't allow: it is released (its
      // room is what the bind needs) and counted as failed.
      for (const auto& p : decided->preemptions) {
        const sched::RunningJob* v = state.FindRunning(p.victim);
        if (v == nullptr) {
          return Status::Internal(fmt::format("fill: policy '{}' preempted job {}, which is not running",
                                              policy.name(), p.victim.value()));
        }
        const sched::Placement where = v->placement;
        GPOOL_RETURN_IF_ERROR(state.Release(p.victim, 0));
        for (const auto& t : where.tasks) {
          refresh(t.node, 0);
          for (const auto& g : t.remote) refresh(g.node, 0);
        }
        if (const uint64_t vk = p.victim.value(); vk < took.size() && took[vk].remote_milli > 0) {
          remote_milli -= took[vk].remote_milli;
          recovered_milli -= took[vk].recovered_milli;
          --remote_pods;
          took[vk] = {};
        }
        ++r.preemptions;
        ++r.failed;
        --r.placed;
      }
      for (const auto& b : decided->binds) {
        if (b.job != job.id) {
          return Status::Internal(fmt::format("fill: policy '{}' bound job {}, which is not pending",
                                              policy.name(), b.job.value()));
        }
        // Remote GPUs, and those of them whose node could not have hosted the pod itself (its
        // CPU or memory short of the pod's), measured before the bind takes anything.
        RemoteTake take;
        double slowdown = 1;
        const int64_t per_gpu = job.task.fractional() ? job.task.gpu_milli : 1000;
        for (const auto& t : b.placement.tasks) {
          slowdown = std::max(slowdown, t.slowdown);
          for (const auto& g : t.remote) {
            const int64_t milli = std::popcount(g.gpu_mask) * per_gpu;
            take.remote_milli += milli;
            if (state.free_cpu(g.node) < job.task.cpu_milli ||
                state.free_memory(g.node) < job.task.memory_bytes) {
              take.recovered_milli += milli;
            }
          }
        }
        GPOOL_RETURN_IF_ERROR(state.Bind(job, b.placement, 0).WithContext(
            fmt::format("fill: policy '{}': bind of pod {}", policy.name(), job.name)));
        for (const auto& t : b.placement.tasks) {
          refresh(t.node, cls);
          for (const auto& g : t.remote) refresh(g.node, cls);
        }
        if (take.remote_milli > 0) {
          if (k < took.size()) took[k] = take;
          remote_milli += take.remote_milli;
          recovered_milli += take.recovered_milli;
          ++remote_pods;
          ++r.remote_pods;
          if (std::nearbyint(static_cast<double>(arrived) / total_milli * 100) <= 100) {
            slowdown_by_100.push_back(slowdown);
          }
        }
        bound = true;
      }
    }
    if (bound) {
      ++r.placed;
    } else {
      ++r.failed;
      if (job.task.gpus > 0) ++r.failed_gpu_pods;
    }
    // The artifact's "[Alloc]" line after every pod: arrived and allocated GPU milli.
    const double pct = std::nearbyint(static_cast<double>(arrived) / total_milli * 100);
    if (pct >= 0 && pct <= kFillMaxPct) {
      const size_t b = static_cast<size_t>(pct);
      const double used = static_cast<double>(state.used_milli());
      alloc_sum[b] += used / 1000;
      const double idle = total_milli - used;
      frag_rate_sum[b] += idle > 0 ? frag_sum / idle : 0;
      if (remote.enabled) {
        remote_sum[b] += static_cast<double>(remote_milli) / 1000;
        recovered_sum[b] += static_cast<double>(recovered_milli) / 1000;
        remote_share_sum[b] += r.placed > 0 ? static_cast<double>(remote_pods) / static_cast<double>(r.placed) : 0;
      }
      ++count[b];
    }
    if (options.progress) {
      const auto w = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(w - last_progress).count() >= options.progress_every_s) {
        last_progress = w;
        options.progress(static_cast<int64_t>(k + 1), static_cast<double>(state.used_milli()) / 1000.0);
      }
    }
  }
  r.allocated_at_pct = PerPct(alloc_sum, count);
  r.frag_rate_at_pct = PerPct(frag_rate_sum, count);
  r.unallocated_at_100 = r.total_gpus - r.allocated_at_pct[100];
  if (remote.enabled) {
    r.remote_gpus_at_100 = PerPct(remote_sum, count)[100];
    r.recovered_gpus_at_100 = PerPct(recovered_sum, count)[100];
    r.remote_pod_share_at_100 = PerPct(remote_share_sum, count)[100];
    r.remote_pods_by_100 = static_cast<int64_t>(slowdown_by_100.size());
    if (!slowdown_by_100.empty()) {
      double sum = 0;
      for (double x : slowdown_by_100) sum += x;
      r.avg_remote_slowdown_at_100 = sum / static_cast<double>(slowdown_by_100.size());
      r.p99_remote_slowdown_at_100 = Percentile(&slowdown_by_100, 99);
    }
  }
  r.allocated_end = static_cast<double>(state.used_milli()) / 1000;
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  r.cpu_s = ThreadCpuSeconds() - cpu0;
  return r;
}

StatusOr<FirstFailureResult> RunFillUntilFirstFailure(const SimCluster& cluster,
                                                      const Workload& workload,
                                                      const sched::Policy& policy,
                                                      const FirstFailureOptions& options) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = ThreadCpuSeconds();
  GPOOL_ASSIGN_OR_RETURN(FillSetup setup, PrepareFill(cluster, workload, policy));
  const sched::ClusterSpec& spec = setup.spec;
  sched::ClusterState& state = setup.state;
  const Workload& one_tenant = setup.one_tenant;
  const TenantQueues& queues = setup.queues;
  const int32_t max_gpus = setup.max_gpus;
  const RemoteAttach& remote = setup.remote;

  FirstFailureResult r;
  std::vector<sched::JobSpec> pool;
  pool.reserve(one_tenant.jobs.size());
  for (const SimJob& j : one_tenant.jobs) {
    GPOOL_ASSIGN_OR_RETURN(sched::JobSpec s, ToJobSpec(j, spec, queues, max_gpus));
    ApplyRemoteAttach(remote, &s);
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
  SplitMix rng(options.seed);
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
