#include "sched/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <unordered_set>

#include "common/file.h"
#include "common/units.h"
#include "sched/backfill.h"
#include "sched/placement.h"
#include "sched/power.h"
#include "sched/preemption.h"
#include "sched/short_job_preemption.h"

namespace gpool::sched {

Status ValidatePolicyConfig(const PolicyConfig& c) {
  auto err = [](std::string_view field, const std::string& what) {
    return Status::InvalidArgument(fmt::format("policy.{}: {}", field, what));
  };
  if (!(c.fairshare_half_life_s > 0) || !std::isfinite(c.fairshare_half_life_s)) {
    return err("fairshare_half_life_s", fmt::format("must be > 0, got {}", c.fairshare_half_life_s));
  }
  GPOOL_RETURN_IF_ERROR(ValidateRemoteCostModel(c.remote_cost).WithContext("policy"));
  if (!(c.starvation_age_s > 0)) {
    return err("starvation_age_s", fmt::format("must be > 0, got {}", c.starvation_age_s));
  }
  if (!(c.assumed_runtime_s >= 0)) {
    return err("assumed_runtime_s", fmt::format("must be >= 0, got {}", c.assumed_runtime_s));
  }
  if (!(c.reserve_after_s >= 0)) {
    return err("reserve_after_s", fmt::format("must be >= 0, got {}", c.reserve_after_s));
  }
  if (c.max_reservations < 0) {
    return err("max_reservations", fmt::format("must be >= 0, got {}", c.max_reservations));
  }
  if (c.max_preemptions_per_cycle < 0) {
    return err("max_preemptions_per_cycle",
               fmt::format("must be >= 0, got {}", c.max_preemptions_per_cycle));
  }
  GPOOL_RETURN_IF_ERROR(ValidateShortJobPreemptionConfig(c.short_preempt));
  const PowerConfig& p = c.power;
  if (!(p.idle_timeout_s > 0)) return err("power.idle_timeout_s", fmt::format("must be > 0, got {}", p.idle_timeout_s));
  if (p.warm_buffer_gpus < 0) return err("power.warm_buffer_gpus", fmt::format("must be >= 0, got {}", p.warm_buffer_gpus));
  if (!(p.arrival_window_s >= 0)) {
    return err("power.arrival_window_s", fmt::format("must be >= 0, got {}", p.arrival_window_s));
  }
  if (!(p.boot_latency_s >= 0)) return err("power.boot_latency_s", fmt::format("must be >= 0, got {}", p.boot_latency_s));
  if (p.max_resumes_per_cycle < 0) {
    return err("power.max_resumes_per_cycle", fmt::format("must be >= 0, got {}", p.max_resumes_per_cycle));
  }
  if (p.max_suspends_per_cycle < 0) {
    return err("power.max_suspends_per_cycle", fmt::format("must be >= 0, got {}", p.max_suspends_per_cycle));
  }
  if (p.max_resuming < 1) return err("power.max_resuming", fmt::format("must be >= 1, got {}", p.max_resuming));
  if (!(p.max_resuming_fraction >= 0 && p.max_resuming_fraction <= 1)) {
    return err("power.max_resuming_fraction", fmt::format("must be in [0, 1], got {}", p.max_resuming_fraction));
  }
  if (!(p.resume_timeout_s > 0)) {
    return err("power.resume_timeout_s", fmt::format("must be > 0, got {}", p.resume_timeout_s));
  }
  if (p.resume_retries < 0) return err("power.resume_retries", fmt::format("must be >= 0, got {}", p.resume_retries));
  return Status::Ok();
}

namespace {

StatusOr<bool> ParseBool(std::string_view key, std::string_view v) {
  if (v == "true" || v == "1" || v == "yes" || v == "on") return true;
  if (v == "false" || v == "0" || v == "no" || v == "off") return false;
  return Status::InvalidArgument(fmt::format("policy.{}: '{}' is not a boolean", key, v));
}

template <typename Int>
StatusOr<Int> ParseInt(std::string_view key, std::string_view v) {
  Int x{};
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size()) {
    return Status::InvalidArgument(fmt::format("policy.{}: '{}' is not an integer", key, v));
  }
  return x;
}

StatusOr<double> ParseDouble(std::string_view key, std::string_view v) {
  double x = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || !std::isfinite(x)) {
    return Status::InvalidArgument(fmt::format("policy.{}: '{}' is not a number", key, v));
  }
  return x;
}

StatusOr<double> ParseSeconds(std::string_view key, std::string_view v) {
  StatusOr<double> s = ParseDurationSeconds(v);
  if (!s.ok()) return s.status().WithContext(fmt::format("policy.{}", key));
  return *s;
}

}  // namespace

StatusOr<PolicyConfig> ParsePolicyConfig(std::string_view text) {
  PolicyConfig c;
  for (std::string_view item : Split(text, ',')) {
    item = Trim(item);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Status::InvalidArgument(fmt::format("policy: '{}' is not key=value", item));
    }
    const std::string_view k = Trim(item.substr(0, eq));
    const std::string_view v = Trim(item.substr(eq + 1));
    if (k == "fairshare_half_life_s") {
      GPOOL_ASSIGN_OR_RETURN(c.fairshare_half_life_s, ParseSeconds(k, v));
    } else if (k == "starvation_age_s") {
      GPOOL_ASSIGN_OR_RETURN(c.starvation_age_s, ParseSeconds(k, v));
    } else if (k == "least_work_first") {
      GPOOL_ASSIGN_OR_RETURN(c.least_work_first, ParseBool(k, v));
    } else if (k == "least_work_unknown") {
      StatusOr<UnknownEstimate> u = ParseUnknownEstimate(v);
      if (!u.ok()) return u.status().WithContext(fmt::format("policy.{}", k));
      c.least_work_unknown = *u;
    } else if (k == "backfill") {
      GPOOL_ASSIGN_OR_RETURN(c.backfill, ParseBool(k, v));
    } else if (k == "assumed_runtime_s") {
      GPOOL_ASSIGN_OR_RETURN(c.assumed_runtime_s, ParseSeconds(k, v));
    } else if (k == "reserve_oldest") {
      GPOOL_ASSIGN_OR_RETURN(c.reserve_oldest, ParseBool(k, v));
    } else if (k == "reserve_after_s") {
      GPOOL_ASSIGN_OR_RETURN(c.reserve_after_s, ParseSeconds(k, v));
    } else if (k == "backfill_reserved_nodes") {
      GPOOL_ASSIGN_OR_RETURN(c.backfill_reserved_nodes, ParseBool(k, v));
    } else if (k == "max_reservations") {
      GPOOL_ASSIGN_OR_RETURN(c.max_reservations, ParseInt<int>(k, v));
    } else if (k == "priority_preemption") {
      GPOOL_ASSIGN_OR_RETURN(c.priority_preemption, ParseBool(k, v));
    } else if (k == "reclaim") {
      GPOOL_ASSIGN_OR_RETURN(c.reclaim, ParseBool(k, v));
    } else if (k == "fragmentation_aware") {
      GPOOL_ASSIGN_OR_RETURN(c.fragmentation_aware, ParseBool(k, v));
    } else if (k == "max_preemptions_per_cycle") {
      GPOOL_ASSIGN_OR_RETURN(c.max_preemptions_per_cycle, ParseInt<int>(k, v));
    } else if (k == "short_preempt.enabled") {
      GPOOL_ASSIGN_OR_RETURN(c.short_preempt.enabled, ParseBool(k, v));
    } else if (k == "short_preempt.ratio") {
      GPOOL_ASSIGN_OR_RETURN(c.short_preempt.ratio, ParseDouble(k, v));
    } else if (k == "short_preempt.min_run_s") {
      GPOOL_ASSIGN_OR_RETURN(c.short_preempt.min_run_s, ParseSeconds(k, v));
    } else if (k == "short_preempt.min_run_fraction") {
      GPOOL_ASSIGN_OR_RETURN(c.short_preempt.min_run_fraction, ParseDouble(k, v));
    } else if (k == "short_preempt.restart_cost_s") {
      GPOOL_ASSIGN_OR_RETURN(c.short_preempt.restart_cost_s, ParseSeconds(k, v));
    } else if (k == "short_preempt.max_victims") {
      GPOOL_ASSIGN_OR_RETURN(c.short_preempt.max_victims, ParseInt<int>(k, v));
    } else if (k == "power.enabled") {
      GPOOL_ASSIGN_OR_RETURN(c.power.enabled, ParseBool(k, v));
    } else if (k == "power.idle_timeout_s") {
      GPOOL_ASSIGN_OR_RETURN(c.power.idle_timeout_s, ParseSeconds(k, v));
    } else if (k == "power.warm_buffer_gpus") {
      GPOOL_ASSIGN_OR_RETURN(c.power.warm_buffer_gpus, ParseInt<int64_t>(k, v));
    } else if (k == "power.arrival_window_s") {
      GPOOL_ASSIGN_OR_RETURN(c.power.arrival_window_s, ParseSeconds(k, v));
    } else if (k == "power.boot_latency_s") {
      GPOOL_ASSIGN_OR_RETURN(c.power.boot_latency_s, ParseSeconds(k, v));
    } else if (k == "power.max_resumes_per_cycle") {
      GPOOL_ASSIGN_OR_RETURN(c.power.max_resumes_per_cycle, ParseInt<int>(k, v));
    } else if (k == "power.max_suspends_per_cycle") {
      GPOOL_ASSIGN_OR_RETURN(c.power.max_suspends_per_cycle, ParseInt<int>(k, v));
    } else if (k == "power.max_resuming") {
      GPOOL_ASSIGN_OR_RETURN(c.power.max_resuming, ParseInt<int>(k, v));
    } else if (k == "power.max_resuming_fraction") {
      GPOOL_ASSIGN_OR_RETURN(c.power.max_resuming_fraction, ParseDouble(k, v));
    } else if (k == "power.resume_timeout_s") {
      GPOOL_ASSIGN_OR_RETURN(c.power.resume_timeout_s, ParseSeconds(k, v));
    } else if (k == "power.resume_retries") {
      GPOOL_ASSIGN_OR_RETURN(c.power.resume_retries, ParseInt<int>(k, v));
    } else if (k == "remote.call_overhead") {
      GPOOL_ASSIGN_OR_RETURN(c.remote_cost.call_overhead, ParseDouble(k, v));
    } else if (k == "remote.transfer_share") {
      GPOOL_ASSIGN_OR_RETURN(c.remote_cost.transfer_share, ParseDouble(k, v));
    } else if (k == "remote.host_link_gbps") {
      GPOOL_ASSIGN_OR_RETURN(c.remote_cost.host_link_gbps, ParseDouble(k, v));
    } else if (k == "remote.node_link_gbps") {
      GPOOL_ASSIGN_OR_RETURN(c.remote_cost.node_link_gbps, ParseDouble(k, v));
    } else if (k == "remote.copy_efficiency") {
      GPOOL_ASSIGN_OR_RETURN(c.remote_cost.copy_efficiency, ParseDouble(k, v));
    } else {
      return Status::InvalidArgument(fmt::format("policy: unknown key '{}'", k));
    }
  }
  GPOOL_RETURN_IF_ERROR(ValidatePolicyConfig(c));
  return c;
}

Status ValidateInput(const SchedulingInput& in) {
  if (in.state == nullptr) return Status::InvalidArgument("scheduling input: state is null");
  if (in.pending == nullptr) return Status::InvalidArgument("scheduling input: pending is null");
  if (in.queues == nullptr) return Status::InvalidArgument("scheduling input: queues is null");
  for (const QueueSpec& q : *in.queues) GPOOL_RETURN_IF_ERROR(ValidateQueue(q, in.state->spec()));
  std::unordered_set<JobId> ids;
  ids.reserve(in.pending->size());
  for (const JobSpec& j : *in.pending) {
    GPOOL_RETURN_IF_ERROR(ValidateJob(j, in.state->spec(), in.queues->size()));
    if (!ids.insert(j.id).second) {
      return Status::InvalidArgument(fmt::format("job {} ({}): id: pending twice", j.id.value(), j.name));
    }
    if (in.state->FindRunning(j.id) != nullptr) {
      return Status::InvalidArgument(
          fmt::format("job {} ({}): id: pending and running at once", j.id.value(), j.name));
    }
  }
  return Status::Ok();
}

namespace {

// The default policy. See scheduler.h. Stateless: everything comes from the input.
class GpoolPolicy final : public Policy {
 public:
  explicit GpoolPolicy(PolicyConfig c) : c_(std::move(c)) {}
  std::string_view name() const override { return "gpool"; }
  StatusOr<Decisions> Schedule(const SchedulingInput& in) const override;
  double usage_half_life_s() const override { return c_.fairshare_half_life_s; }

 private:
  PolicyConfig c_;
};

// Jobs of the same shape fail alike within a cycle (capacity only shrinks until a preemption):
// remember the shapes that didn't fit. The queue is part of the key only where it changes
// placement (guaranteed domains).
// Everything placement looks at: jobs with equal keys fit or fail alike within a cycle.
using ShapeKey = std::tuple<int32_t, int32_t, uint64_t, int64_t, uint64_t, ModelMask, int32_t,
                            uint8_t, bool, bool, uint32_t, uint8_t, uint8_t, double>;
ShapeKey KeyOf(const JobSpec& j, bool queue_matters) {
  return {j.task.gpus, j.task.gpu_milli, j.task.gpu_memory_bytes, j.task.cpu_milli,
          j.task.memory_bytes, j.gpu_models, j.num_tasks, static_cast<uint8_t>(j.locality.level),
          j.locality.required, j.allow_split, queue_matters ? j.queue.value() : ~0u,
          static_cast<uint8_t>(j.remote.source), static_cast<uint8_t>(j.remote.within),
          j.remote.max_slowdown};
}

// ---- Wait reasons (Decisions::waits) ----

std::string GpusText(int64_t milli) { return fmt::format("{:g}", static_cast<double>(milli) / 1000.0); }

std::string OwnerText(const QueueSpec& q) {
  return q.tenant.empty() ? fmt::format("queue {}", q.name) : fmt::format("tenant {}", q.tenant);
}

// The models of `mask` by name ("" when the mask holds every model of the cluster).
std::string ModelsText(const ClusterSpec& spec, ModelMask mask) {
  std::string out;
  bool all = true;
  for (size_t m = 0; m < spec.gpu_models.size() && m < kMaxGpuModels; ++m) {
    if (mask & (ModelMask{1} << m)) {
      out += (out.empty() ? "" : "|") + spec.gpu_models[m];
    } else {
      all = false;
    }
  }
  return all ? "" : out;
}

// Milli-GPUs of the models in `mask` on every node of the cluster, healthy or not, on or off:
// a job asking more can never start on this cluster.
int64_t ClusterMilliOf(const ClusterState& s, ModelMask mask, std::map<ModelMask, int64_t>* cache) {
  auto it = cache->find(mask);
  if (it != cache->end()) return it->second;
  int64_t gpus = 0;
  for (const NodeSpec& n : s.spec().nodes) {
    if (n.gpu_model >= 0 && n.gpu_model < kMaxGpuModels && (mask & (ModelMask{1} << n.gpu_model))) gpus += n.gpus;
  }
  return (*cache)[mask] = gpus * 1000;
}

// Why `job` can never start, or "" when it may: more GPUs than its queue's cap, or than the
// cluster has of its models.
std::string NeverFits(const ClusterState& s, const JobSpec& job, const QueueSpec& queue,
                      std::map<ModelMask, int64_t>* cache) {
  const int64_t need = job.total_milli_gpus();
  if (queue.max_gpus >= 0 && need > queue.max_gpus * 1000) {
    return fmt::format("asks {} GPUs, more than {} may ever hold (its cap, max_gpus, is {})",
                       GpusText(need), OwnerText(queue), queue.max_gpus);
  }
  if (job.task.gpus == 0) return "";
  const int64_t have = ClusterMilliOf(s, job.gpu_models, cache);
  if (need > have) {
    const std::string models = ModelsText(s.spec(), job.gpu_models);
    return fmt::format("asks {} GPUs; the cluster has {}{} in all", GpusText(need), GpusText(have),
                       models.empty() ? "" : fmt::format(" of model {}", models));
  }
  return "";
}

// Where a job that found no placement stands against its queue's guarantee: within it (it may
// reclaim what others borrow) or beyond it (it borrows idle GPUs only).
std::string GuaranteeText(const ClusterState& s, const JobSpec& job, const QueueSpec& queue) {
  const int64_t quota = QueueQuotaMilli(s, queue);
  if (quota == 0) return fmt::format("{} has no guarantee, so it runs on idle GPUs only", OwnerText(queue));
  if (s.queue_used_milli(job.queue) + job.total_milli_gpus() <= quota) {
    return fmt::format("within {}'s guarantee of {} GPUs: it may reclaim GPUs other tenants "
                       "borrowed once their jobs pass their minimum run time",
                       OwnerText(queue), GpusText(quota));
  }
  return fmt::format("it would take {} past its guarantee of {} GPUs, so it runs on idle GPUs "
                     "only", OwnerText(queue), GpusText(quota));
}

std::string NoRoomText(const ClusterState& s, const JobSpec& job, const QueueSpec& queue) {
  const int64_t need = job.total_milli_gpus();
  if (need == 0) return "waiting for a node with room for its CPU and memory";
  return fmt::format("waiting for room for {} GPU{}: {}", GpusText(need), need == 1000 ? "" : "s",
                     GuaranteeText(s, job, queue));
}

StatusOr<Decisions> GpoolPolicy::Schedule(const SchedulingInput& in) const {
  GPOOL_RETURN_IF_ERROR(ValidateInput(in));
  const std::vector<JobSpec>& pending = *in.pending;
  const std::vector<QueueSpec>& queues = *in.queues;
  const int64_t now = in.now_ns;
  Decisions out;
  ClusterState work = *in.state;  // the cycle's scratch copy: binds and holds land here

  const std::vector<size_t> order = OrderJobs(pending, work, in.usage, queues, now,
                                              {.starvation_age_s = c_.starvation_age_s,
                                               .least_work_first = c_.least_work_first,
                                               .unknown_estimate = c_.least_work_unknown});
  WorkloadDistribution workload;
  if (c_.fragmentation_aware) workload = WorkloadDistribution::FromJobs(pending, &work);

  std::vector<int32_t> running_jobs(queues.size(), 0);
  for (size_t q = 0; q < queues.size(); ++q) {
    running_jobs[q] = work.queue_running_jobs(QueueId(static_cast<uint32_t>(q)));
  }
  std::set<ShapeKey> failed;
  std::set<std::tuple<ShapeKey, int32_t, uint32_t>> failed_preempt;
  // Cheap gates before PlanPreemption, which copies the state: the lowest priority among jobs
  // that may be preempted now, and whether any queue runs over its quota (reclaim needs one).
  // Priority preemption stays inside a queue (preemption.h), so the gate is per queue.
  // Computed on first need (a job that did not fit), from the cycle's input state.
  std::vector<int32_t> min_victim_priority;
  auto min_victim_priority_of = [&](size_t q) {
    if (min_victim_priority.empty()) {
      min_victim_priority.assign(queues.size(), INT32_MAX);
      for (const RunningJob& r : in.state->running()) {
        const size_t rq = r.spec.queue.value();
        if (rq < queues.size() && PastMinRuntime(r, now)) {
          min_victim_priority[rq] = std::min(min_victim_priority[rq], r.spec.priority);
        }
      }
    }
    return min_victim_priority[q];
  };
  bool any_over_quota = false;
  for (size_t q = 0; q < queues.size(); ++q) {
    any_over_quota |= work.queue_used_milli(QueueId(static_cast<uint32_t>(q))) > QueueQuotaMilli(work, queues[q]);
  }
  std::vector<uint8_t> held;
  std::vector<NodeId> held_nodes;           // nodes of this cycle's reservations
  int64_t earliest_reserved_ns = INT64_MAX;  // earliest start among them
  std::set<ShapeKey> failed_short;          // shapes that failed even on reserved nodes
  // `work` without this cycle's holds, for backfill onto reserved nodes: made when the first
  // reservation is taken and kept in step with `work` (binds, preemptions) since. Trying such a
  // job on it gives the same placement as un-holding every reserved node of `work`, placing and
  // re-holding, which cost two aggregate updates per reserved node per try.
  std::optional<ClusterState> unheld_work;
  std::unordered_set<JobId> bound_now;  // bound this cycle: never victims in the same cycle
  std::optional<ClusterState> preempt_scratch;  // PlanPreemption's trial copy, reused per call
  // Short-job preemption: the longest remaining time any running job may be preempted for,
  // and per (shape, priority, queue) the shortest estimate that found no victims.
  // Both are computed when first needed (a job with an estimate that did not fit), from the
  // cycle's input state, which is what `work` was when the cycle began: most cycles never need
  // them, and each costs a pass (and a sort) over every running job.
  std::optional<double> sjp_max_remaining;
  auto sjp_max_remaining_s = [&] {
    if (!sjp_max_remaining) sjp_max_remaining = MaxPreemptibleRemainingS(*in.state, now, c_.short_preempt);
    return *sjp_max_remaining;
  };
  std::map<std::tuple<ShapeKey, int32_t, uint32_t>, double> failed_short_preempt;
  std::optional<ReleaseProfile> release;
  int preemptions = 0;
  int64_t demand_gpus = 0;
  int64_t bound_milli = 0;  // taken by this cycle's binds
  bool blocked = false;  // strict order when backfill is off: nothing passes a blocked job
  std::map<ModelMask, int64_t> cluster_milli;  // NeverFits' cache
  auto note_wait = [&](const JobSpec& job, WaitKind kind, auto&& text) {
    if (in.explain) out.waits.push_back({.job = job.id, .kind = kind, .text = text()});
  };

  // reserve_oldest: per queue, the submit times of the jobs that may still take the
  // reservation in this cycle, i.e. not bound yet and not held back by a cap or a size no
  // cluster holds (checked against the cycle's starting state here, and dropped again when the
  // loop skips them). The reservation goes to the queue of the first blocked job in the order
  // (`reserve_queue`: the tenant fair share and the guarantees put next) and, inside it, to
  // its oldest such job.
  std::vector<std::multiset<int64_t>> candidates(c_.reserve_oldest ? queues.size() : 0);
  constexpr size_t kNoQueue = SIZE_MAX;
  size_t reserve_queue = kNoQueue;  // (not std::optional: GCC's -Wmaybe-uninitialized misfires)
  if (c_.reserve_oldest) {
    for (size_t k : order) {
      const JobSpec& j = pending[k];
      const size_t jq = j.queue.value();
      if (jq >= queues.size()) continue;
      const QueueSpec& qs = queues[jq];
      if (!NeverFits(work, j, qs, &cluster_milli).empty()) continue;
      if (qs.max_gpus >= 0 && work.queue_used_milli(j.queue) + j.total_milli_gpus() > qs.max_gpus * 1000) continue;
      if (qs.max_running_jobs >= 0 && running_jobs[jq] >= qs.max_running_jobs) continue;
      candidates[jq].insert(j.submit_ns);
    }
  }
  auto drop_candidate = [&](const JobSpec& j) {
    const size_t jq = j.queue.value();
    if (jq >= candidates.size()) return;
    if (auto it = candidates[jq].find(j.submit_ns); it != candidates[jq].end()) candidates[jq].erase(it);
  };
  // Whether `job` (blocked) may take the reservation under reserve_oldest; the first blocked
  // job to ask names the queue.
  auto oldest_of_turn = [&](const JobSpec& job) {
    if (!c_.reserve_oldest) return true;
    const size_t jq = job.queue.value();
    if (reserve_queue == kNoQueue) reserve_queue = jq;
    if (reserve_queue != jq) return false;
    return candidates[jq].empty() || job.submit_ns <= *candidates[jq].begin();
  };
  for (size_t oi = 0; oi < order.size(); ++oi) {
    const size_t idx = order[oi];
    const JobSpec& job = pending[idx];
    const size_t q = job.queue.value();
    const QueueSpec& queue = queues[q];
    if (std::string never = NeverFits(work, job, queue, &cluster_milli); !never.empty()) {
      // Not even an empty cluster (or its queue's cap) holds it: no placement, no reservation,
      // no preemption, no resumes for it.
      note_wait(job, WaitKind::kNeverFits, [&] { return never; });
      drop_candidate(job);
      continue;
    }
    if (blocked) {
      note_wait(job, WaitKind::kBlocked, [] { return std::string("behind a job that cannot start yet (strict order: backfill is off)"); });
      continue;
    }
    if (queue.max_gpus >= 0 && work.queue_used_milli(job.queue) + job.total_milli_gpus() > queue.max_gpus * 1000) {
      // Over the queue's hard limit: waits, takes no reservation.
      note_wait(job, WaitKind::kQueueCap, [&] {
        return fmt::format("{}'s running jobs and this one would pass its cap of {} GPUs "
                           "(max_gpus): it waits for them to end", OwnerText(queue), queue.max_gpus);
      });
      drop_candidate(job);
      continue;
    }
    if (queue.max_running_jobs >= 0 && running_jobs[q] >= queue.max_running_jobs) {
      note_wait(job, WaitKind::kQueueJobs, [&] {
        return fmt::format("{} runs its limit of {} jobs (max_running_jobs)", OwnerText(queue),
                           queue.max_running_jobs);
      });
      drop_candidate(job);
      continue;
    }

    const bool queue_matters = !queue.guaranteed_domains.empty();
    PlacementOptions popts{.workload = c_.fragmentation_aware ? &workload : nullptr,
                           .preferred_domains = queue_matters ? &queue.guaranteed_domains : nullptr,
                           .resume_latency_s = c_.power.enabled ? c_.power.boot_latency_s : 0,
                           .now_ns = now,
                           .remote_cost = &c_.remote_cost};
    const ShapeKey key = KeyOf(job, queue_matters);
    std::optional<Placement> placement;
    if (!failed.count(key)) {
      placement = PlaceGang(work, job, popts);
      if (!placement) failed.insert(key);
    }
    // EASY backfill proper: a job whose estimated end comes before every reservation's start
    // may use the reserved nodes too, since it is gone before the reserved gang needs them.
    // Without this, reserved nodes stand idle until the shadow time.
    bool unheld = false;
    if (!placement && c_.backfill_reserved_nodes && !held_nodes.empty() && job.est_runtime_s > 0 &&
        static_cast<double>(now) + job.est_runtime_s * 1e9 <= static_cast<double>(earliest_reserved_ns) &&
        !failed_short.count(key)) {
      placement = PlaceGang(*unheld_work, job, popts);
      unheld = placement.has_value();
      if (!placement) failed_short.insert(key);
    }
    auto may_preempt = [&] {
      return (c_.priority_preemption && job.priority > min_victim_priority_of(q)) ||
             (c_.reclaim && any_over_quota &&
              work.queue_used_milli(job.queue) + job.total_milli_gpus() <= QueueQuotaMilli(work, queue));
    };
    const auto pkey = std::make_tuple(key, job.priority, job.queue.value());
    if (!placement && may_preempt() && preemptions < c_.max_preemptions_per_cycle &&
        !failed_preempt.count(pkey)) {
      PreemptionOptions po{.priority = c_.priority_preemption,
                           .reclaim = c_.reclaim,
                           .max_victims = c_.max_preemptions_per_cycle - preemptions,
                           .placement = popts,
                           .not_victims = &bound_now,
                           .scratch = &preempt_scratch};
      if (std::optional<PreemptionPlan> plan = PlanPreemption(work, job, queues, now, po)) {
        for (size_t v = 0; v < plan->victims.size(); ++v) {
          const RunningJob* r = work.FindRunning(plan->victims[v]);
          if (r != nullptr && r->spec.queue.value() < queues.size()) --running_jobs[r->spec.queue.value()];
          GPOOL_RETURN_IF_ERROR(work.Release(plan->victims[v], now));
          if (unheld_work) GPOOL_RETURN_IF_ERROR(unheld_work->Release(plan->victims[v], now));
          out.preemptions.push_back({.victim = plan->victims[v],
                                     .for_job = job.id,
                                     .reason = plan->reasons[v] == PreemptReason::kPriority ? "priority" : "reclaim"});
          ++preemptions;
        }
        placement = std::move(plan->placement);
        failed.clear();  // room was freed: earlier failures may fit now
        failed_short.clear();
      } else {
        failed_preempt.insert(pkey);
      }
    }
    // Short-job preemption: checkpoint-preempt jobs with far more work left, when the job's
    // expected wait (counting the capacity this cycle's binds took and the blocked jobs ahead
    // want) is worth the victims' delay. A shape that found no victims with estimate E finds
    // none with a longer one either (fewer victims qualify): the cache keeps the shortest.
    if (!placement && c_.short_preempt.enabled && job.est_runtime_s > 0 &&
        preemptions < c_.max_preemptions_per_cycle &&
        c_.short_preempt.ratio * job.est_runtime_s <= sjp_max_remaining_s()) {
      if (!release) release = ReleaseProfile(*in.state, now, c_.assumed_runtime_s);
      const double wait_s = release->WaitS(bound_milli + demand_gpus * 1000 + job.total_milli_gpus());
      auto it = failed_short_preempt.find(pkey);
      const bool cached_fail = it != failed_short_preempt.end() && job.est_runtime_s >= it->second;
      if (wait_s >= job.est_runtime_s + c_.short_preempt.restart_cost_s && !cached_fail) {
        if (std::optional<PreemptionPlan> plan = PlanShortJobPreemption(
                work, job, queues, now, c_.short_preempt, c_.max_preemptions_per_cycle - preemptions,
                wait_s, popts, &bound_now)) {
          for (JobId v : plan->victims) {
            const RunningJob* r = work.FindRunning(v);
            if (r != nullptr && r->spec.queue.value() < queues.size()) --running_jobs[r->spec.queue.value()];
            GPOOL_RETURN_IF_ERROR(work.Release(v, now));
            if (unheld_work) GPOOL_RETURN_IF_ERROR(unheld_work->Release(v, now));
            out.preemptions.push_back({.victim = v, .for_job = job.id, .reason = "short job"});
            ++preemptions;
          }
          placement = std::move(plan->placement);
          failed.clear();  // room was freed: earlier failures may fit now
          failed_short.clear();
          sjp_max_remaining = MaxPreemptibleRemainingS(work, now, c_.short_preempt);
        } else {
          failed_short_preempt[pkey] = job.est_runtime_s;
        }
      }
    }
    if (placement) {
      // A placement on reserved nodes binds with those nodes un-held for the moment.
      std::vector<NodeId> rehold;
      if (unheld) {
        for (const TaskBinding& b : placement->tasks) {
          if (work.held(b.node)) {
            work.SetHeld(b.node, false);
            rehold.push_back(b.node);
          }
        }
      }
      const Status bound = work.Bind(job, *placement, now);
      for (NodeId n : rehold) work.SetHeld(n, true);
      GPOOL_RETURN_IF_ERROR(bound);
      if (unheld_work) GPOOL_RETURN_IF_ERROR(unheld_work->Bind(job, *placement, now));
      bound_now.insert(job.id);
      drop_candidate(job);
      bound_milli += job.total_milli_gpus();
      ++running_jobs[q];
      out.binds.push_back({.job = job.id,
                           .placement = std::move(*placement),
                           .backfilled = !out.reservations.empty()});
      continue;
    }
    if (job.task.gpus > 0) demand_gpus += int64_t{job.task.gpus} * job.num_tasks;
    if (!c_.backfill) {
      blocked = true;
      note_wait(job, WaitKind::kNoRoom, [&] { return NoRoomText(work, job, queue); });
      continue;
    }
    bool reserved = false;
    // A reservation holds nodes against the jobs after this one, keeps its nodes powered on,
    // and is a wait reason. For the last job of a cycle without power management or
    // explanations it would change nothing, and computing it walks every running job's end: a
    // cycle with one pending job that does not fit (every arrival in a full cluster) skips it.
    const bool reservation_matters = oi + 1 < order.size() || c_.power.enabled || in.explain;
    if (reservation_matters && static_cast<int>(out.reservations.size()) < c_.max_reservations &&
        static_cast<double>(now - job.submit_ns) >= c_.reserve_after_s * 1e9 && oldest_of_turn(job)) {
      if (std::optional<Reservation> r = ComputeReservation(work, job, popts, now, c_.assumed_runtime_s)) {
        reserved = true;
        reserve_queue = kNoQueue;  // a further reservation goes to the next blocked job's queue
        if (c_.backfill_reserved_nodes && !unheld_work) unheld_work = work;
        for (NodeId n : r->nodes) work.SetHeld(n, true);
        held_nodes.insert(held_nodes.end(), r->nodes.begin(), r->nodes.end());
        earliest_reserved_ns = std::min(earliest_reserved_ns, r->start_ns);
        failed_short.clear();  // a new reservation: the set of reserved nodes changed
        ExcludeReserved(*r, &held);
        out.reservations.push_back(std::move(*r));
      }
    }
    drop_candidate(job);  // processed: a newer blocked job may take the reservation now
    if (reserved) {
      note_wait(job, WaitKind::kReserved, [&] {
        return fmt::format("next to start: nodes are held for its {} GPUs while running jobs "
                           "end; {}", GpusText(job.total_milli_gpus()), GuaranteeText(work, job, queue));
      });
    } else {
      note_wait(job, WaitKind::kNoRoom, [&] { return NoRoomText(work, job, queue); });
    }
  }

  // Power acts on what is left after this cycle's binds; reserved nodes stay on.
  if (c_.power.enabled) {
    out.power = PlanPower(work, c_.power,
                          {.now_ns = now,
                           .demand_gpus = demand_gpus,
                           .keep_on = &held,
                           .recent_arrival_gpus = RecentArrivalGpus(work, pending, now, c_.power.arrival_window_s)});
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Policy>> MakeDefaultPolicy(const PolicyConfig& config) {
  GPOOL_RETURN_IF_ERROR(ValidatePolicyConfig(config));
  return std::unique_ptr<Policy>(std::make_unique<GpoolPolicy>(config));
}

}  // namespace gpool::sched
