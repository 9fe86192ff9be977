#include "sched/preemption.h"

#include <algorithm>

#include "sched/fairshare.h"

namespace gpool::sched {

double PreemptionCost(const RunningJob& r, int64_t now_ns) {
  const double ran_s = static_cast<double>(std::max<int64_t>(0, now_ns - r.start_ns)) * 1e-9;
  return static_cast<double>(r.spec.total_milli_gpus()) * ran_s;
}

bool PastMinRuntime(const RunningJob& r, int64_t now_ns) {
  if (!r.spec.preemptible) return false;
  return static_cast<double>(now_ns - r.start_ns) * 1e-9 >= r.spec.min_runtime_s;
}

void QueueQuotaAndUse(const ClusterState& state, const std::vector<QueueSpec>& queues,
                      std::vector<int64_t>* quota, std::vector<int64_t>* used) {
  quota->resize(queues.size());
  used->resize(queues.size());
  for (size_t q = 0; q < queues.size(); ++q) {
    (*quota)[q] = QueueQuotaMilli(state, queues[q]);
    (*used)[q] = state.queue_used_milli(QueueId(static_cast<uint32_t>(q)));
  }
}

bool HoldsUsefulGpus(const ClusterState& s, const RunningJob& r, const JobSpec& job) {
  if (job.task.gpus == 0) return true;
  for (const TaskBinding& b : r.placement.tasks) {
    const int m = s.node(b.node).gpu_model;
    if (m >= 0 && (job.gpu_models & (ModelMask{1} << m))) return true;
  }
  return false;
}

std::optional<PreemptionPlan> PlanPreemption(const ClusterState& state, const JobSpec& job,
                                             const std::vector<QueueSpec>& queues,
                                             int64_t now_ns, const PreemptionOptions& options) {
  const size_t nq = queues.size();
  std::vector<int64_t> quota, used;
  QueueQuotaAndUse(state, queues, &quota, &used);
  const size_t jq = job.queue.value();
  const bool in_quota = jq < nq && used[jq] + job.total_milli_gpus() <= quota[jq];

  struct Cand {
    double cost;
    int32_t priority;
    int64_t start;
    JobId id;
    size_t queue;
    int64_t milli;
    bool by_priority;
  };
  // A victim with GPU tasks holds GPUs of some model (a GPU task can only be bound on a node
  // with GPUs, all of one model): when the job takes any model, it is useful without looking
  // at its nodes.
  const bool reference = options.placement.reference_scan;
  bool any_model = !reference;
  for (size_t m = 0; m < state.num_models(); ++m) any_model &= (job.gpu_models & (ModelMask{1} << m)) != 0;
  std::vector<Cand> cands;
  cands.reserve(state.running().size());
  // The same filters as ever, cheapest first: the spec's own fields, then the bound-this-cycle
  // set, then the victim's nodes.
  for (const RunningJob& r : state.running()) {
    const size_t rq = r.spec.queue.value();
    // Priority orders a queue's own jobs only; reclaim ignores priorities (preemption.h).
    const bool by_priority = options.priority && rq == jq && r.spec.priority < job.priority;
    const bool by_reclaim =
        options.reclaim && in_quota && rq < nq && rq != jq && used[rq] > quota[rq];
    if (!by_priority && !by_reclaim) continue;
    if (!PastMinRuntime(r, now_ns)) continue;
    if (options.not_victims != nullptr && options.not_victims->count(r.spec.id)) continue;
    if (!(any_model && r.spec.task.gpus > 0) && !HoldsUsefulGpus(state, r, job)) continue;
    cands.push_back({PreemptionCost(r, now_ns), r.spec.priority, r.start_ns, r.spec.id, rq,
                     r.spec.total_milli_gpus(), by_priority});
  }
  if (cands.empty()) return std::nullopt;
  // A total order (ids are unique among running jobs), so the victims don't depend on how the
  // candidates are ordered: usually a handful of the thousands are looked at, so they come off
  // a heap (O(n) to build, O(log n) a victim) rather than out of a full sort.
  auto cheaper = [](const Cand& a, const Cand& b) {
    if (a.cost != b.cost) return a.cost < b.cost;
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.start != b.start) return a.start > b.start;
    return a.id > b.id;
  };
  auto costlier = [&](const Cand& a, const Cand& b) { return cheaper(b, a); };
  if (reference) {
    std::sort(cands.begin(), cands.end(), cheaper);
    std::reverse(cands.begin(), cands.end());  // cheapest last, popped from the back like the heap
  } else {
    std::make_heap(cands.begin(), cands.end(), costlier);  // cheapest at the front
  }
  auto next_cheapest = [&]() -> Cand {
    if (!reference) std::pop_heap(cands.begin(), cands.end(), costlier);
    Cand c = cands.back();
    cands.pop_back();
    return c;
  };

  std::optional<ClusterState> own;
  std::optional<ClusterState>& slot = options.scratch != nullptr && !reference ? *options.scratch : own;
  if (slot) {
    *slot = state;  // reuses the buffers of an earlier call
  } else {
    slot.emplace(state);
  }
  ClusterState& trial = *slot;
  std::vector<Cand> chosen;
  std::optional<Placement> placement;
  while (!cands.empty()) {
    if (static_cast<int>(chosen.size()) >= options.max_victims) break;
    const Cand c = next_cheapest();
    // Reclaim may take only what a queue borrowed: it must stay at or above its quota.
    if (!c.by_priority && c.queue < nq && used[c.queue] - c.milli < quota[c.queue]) continue;
    if (!trial.Release(c.id, now_ns).ok()) continue;
    if (c.queue < nq) used[c.queue] -= c.milli;
    chosen.push_back(c);
    placement = PlaceGang(trial, job, options.placement);
    if (placement) break;
  }
  if (!placement) return std::nullopt;

  // Spare victims that turned out not to be needed, most costly first.
  for (size_t k = chosen.size(); k-- > 0;) {
    const RunningJob* r = state.FindRunning(chosen[k].id);
    if (r == nullptr || !trial.Bind(r->spec, r->placement, r->start_ns).ok()) continue;
    if (std::optional<Placement> p = PlaceGang(trial, job, options.placement)) {
      placement = std::move(p);
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      (void)trial.Release(chosen[k].id, now_ns);
    }
  }
  PreemptionPlan plan;
  for (const Cand& c : chosen) {
    plan.victims.push_back(c.id);
    plan.reasons.push_back(c.by_priority ? PreemptReason::kPriority : PreemptReason::kReclaim);
  }
  plan.placement = std::move(*placement);
  return plan;
}

}  // namespace gpool::sched
