#include "sched/short_job_preemption.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sched/fairshare.h"
#include "sched/preemption.h"

namespace gpool::sched {

Status ValidateShortJobPreemptionConfig(const ShortJobPreemptionConfig& c) {
  auto err = [](std::string_view field, double v, std::string_view rule) {
    return Status::InvalidArgument(fmt::format("policy.short_preempt.{}: must be {}, got {}", field, rule, v));
  };
  if (!(c.ratio >= 1) || !std::isfinite(c.ratio)) return err("ratio", c.ratio, ">= 1");
  if (!(c.min_run_s >= 0) || !std::isfinite(c.min_run_s)) return err("min_run_s", c.min_run_s, ">= 0");
  if (!(c.min_run_fraction >= 0 && c.min_run_fraction <= 1)) {
    return err("min_run_fraction", c.min_run_fraction, "in [0, 1]");
  }
  if (c.max_victims < 1) return err("max_victims", c.max_victims, ">= 1");
  if (!(c.restart_cost_s >= 0) || !std::isfinite(c.restart_cost_s)) {
    return err("restart_cost_s", c.restart_cost_s, ">= 0");
  }
  return Status::Ok();
}

namespace {

double RanS(const RunningJob& r, int64_t now_ns) {
  return static_cast<double>(std::max<int64_t>(0, now_ns - r.start_ns)) * 1e-9;
}

// Remaining estimated seconds of `r` if the run-length rules let it be preempted now, else -1.
double PreemptibleRemaining(const RunningJob& r, int64_t now_ns, const ShortJobPreemptionConfig& c) {
  if (!(r.spec.est_runtime_s > 0) || !PastMinRuntime(r, now_ns)) return -1;
  const double ran = RanS(r, now_ns);
  const double age = static_cast<double>(std::max<int64_t>(0, now_ns - r.spec.submit_ns)) * 1e-9;
  if (ran < c.min_run_s || ran < c.min_run_fraction * age) return -1;
  return std::max(0.0, r.spec.est_runtime_s - ran);
}

}  // namespace

ReleaseProfile::ReleaseProfile(const ClusterState& state, int64_t now_ns, double assumed_runtime_s) {
  free_milli_ = state.total_gpus() * 1000 - state.used_milli();
  std::vector<std::pair<double, int64_t>> ends;
  ends.reserve(state.running().size());
  for (const RunningJob& r : state.running()) {
    const double ran = RanS(r, now_ns);
    const double est = r.spec.est_runtime_s > 0 ? r.spec.est_runtime_s : assumed_runtime_s;
    if (!(est > 0)) continue;  // no estimate and no assumption: never ends as far as we know
    ends.emplace_back(std::max(0.0, est - ran), r.spec.total_milli_gpus());
  }
  std::sort(ends.begin(), ends.end());
  end_s_.reserve(ends.size());
  freed_.reserve(ends.size());
  int64_t sum = 0;
  for (const auto& [t, m] : ends) {
    sum += m;
    end_s_.push_back(t);
    freed_.push_back(sum);
  }
}

double ReleaseProfile::WaitS(int64_t need_milli) const {
  const int64_t more = need_milli - free_milli_;
  if (more <= 0) return 0;
  auto it = std::lower_bound(freed_.begin(), freed_.end(), more);
  if (it == freed_.end()) return std::numeric_limits<double>::infinity();
  return end_s_[static_cast<size_t>(it - freed_.begin())];
}

double MaxPreemptibleRemainingS(const ClusterState& state, int64_t now_ns,
                                const ShortJobPreemptionConfig& c) {
  double best = 0;
  for (const RunningJob& r : state.running()) best = std::max(best, PreemptibleRemaining(r, now_ns, c));
  return best;
}

std::optional<PreemptionPlan> PlanShortJobPreemption(
    const ClusterState& state, const JobSpec& job, const std::vector<QueueSpec>& queues,
    int64_t now_ns, const ShortJobPreemptionConfig& c, int max_victims, double expected_wait_s,
    const PlacementOptions& placement_options, const std::unordered_set<JobId>* not_victims) {
  if (!(job.est_runtime_s > 0)) return std::nullopt;
  const double delay_per_victim = job.est_runtime_s + c.restart_cost_s;
  if (expected_wait_s < delay_per_victim) return std::nullopt;  // not worth even one victim
  const double need_remaining = c.ratio * job.est_runtime_s;
  const size_t nq = queues.size();
  std::vector<int64_t> quota, used;
  QueueQuotaAndUse(state, queues, &quota, &used);
  const size_t jq = job.queue.value();

  struct Cand {
    double remaining;
    JobId id;
    size_t queue;
    int64_t milli;
    bool lower_priority;
  };
  std::vector<Cand> cands;
  for (const RunningJob& r : state.running()) {
    const size_t rq = r.spec.queue.value();
    // Priorities compare inside a queue only (preemption.h).
    if (rq == jq && r.spec.priority > job.priority) continue;
    const double rem = PreemptibleRemaining(r, now_ns, c);
    if (rem < need_remaining) continue;
    if (not_victims != nullptr && not_victims->count(r.spec.id)) continue;
    if (rq >= nq) continue;
    if (rq != jq && used[rq] - r.spec.total_milli_gpus() < quota[rq]) continue;  // not borrowed
    if (!HoldsUsefulGpus(state, r, job)) continue;
    cands.push_back({rem, r.spec.id, rq, r.spec.total_milli_gpus(),
                     rq == jq && r.spec.priority < job.priority});
  }
  if (cands.empty()) return std::nullopt;
  // Not even every candidate and the free GPUs together hold the job (the dry walk below only
  // takes a subset): no search. The usual failure on an overloaded cluster, found in one sum.
  const int64_t need = job.total_milli_gpus();
  const int64_t free_milli = state.total_gpus() * 1000 - state.used_milli();
  int64_t all_milli = 0;
  for (const Cand& v : cands) all_milli += v.milli;
  if (free_milli + all_milli < need) return std::nullopt;
  // Largest victims first: every victim is delayed about as long whatever its size, so the
  // fewest victims cost least (a 1,024-GPU gang preempting 8-GPU jobs, not 1-GPU ones).
  // A heap: the walk below rarely looks at more than a few of them.
  auto after = [](const Cand& a, const Cand& b) {  // a comes after b
    if (a.milli != b.milli) return a.milli < b.milli;
    if (a.remaining != b.remaining) return a.remaining < b.remaining;
    return a.id < b.id;
  };
  std::make_heap(cands.begin(), cands.end(), after);
  auto heap_end = cands.end();
  // The next candidate in order (cands[heap_end..] holds those taken so far, last first).
  auto next = [&]() -> const Cand* {
    if (heap_end == cands.begin()) return nullptr;
    std::pop_heap(cands.begin(), heap_end, after);
    return &*--heap_end;
  };

  // Each victim is delayed about the job's run time (plus the restart): take no more victims
  // than the job's expected wait pays for.
  const double paid = std::floor(expected_wait_s / delay_per_victim);
  const int limit = static_cast<int>(std::min<double>({static_cast<double>(max_victims),
                                                       static_cast<double>(c.max_victims), paid}));
  // Most searches fail (2.5 million of 2.53 million on the 100,000-job replay): before copying
  // the state, walk the victims the loop below would take, without releasing them, and stop if
  // all the GPUs they and the free ones add up to can't hold the job. Same victims, same order,
  // same quota rule as the loop, so a search skipped here is one the loop would have failed.
  std::vector<const Cand*> order;  // the candidates in the loop's order, as far as it may go
  {
    std::vector<int64_t> dry_used = used;
    int64_t room = free_milli;
    int taken = 0;
    while (taken < limit) {
      const Cand* v = next();
      if (v == nullptr) break;
      order.push_back(v);
      if (v->queue != jq && dry_used[v->queue] - v->milli < quota[v->queue]) continue;
      dry_used[v->queue] -= v->milli;
      room += v->milli;
      ++taken;
    }
    if (room < need) return std::nullopt;
  }

  ClusterState trial = state;
  std::vector<const Cand*> chosen;
  std::optional<Placement> placement;
  int64_t room = free_milli;
  for (size_t k = 0;; ++k) {
    if (static_cast<int>(chosen.size()) >= limit) break;
    // The dry walk's candidates, then more from the heap should a release fail.
    const Cand* v = k < order.size() ? order[k] : next();
    if (v == nullptr) break;
    // Another tenant's job only while its queue keeps its quota (checked again: earlier
    // victims of the same queue lowered its use).
    if (v->queue != jq && used[v->queue] - v->milli < quota[v->queue]) continue;
    if (!trial.Release(v->id, now_ns).ok()) continue;
    used[v->queue] -= v->milli;
    chosen.push_back(v);
    room += v->milli;
    if (room < need) continue;  // can't fit yet: no placement to try
    placement = PlaceGang(trial, job, placement_options);
    if (placement) break;
  }
  if (!placement) return std::nullopt;

  // Spare victims that turned out not to be needed, least remaining first (they are the ones
  // whose delay costs most relative to what is left of them).
  for (size_t k = chosen.size(); k-- > 0;) {
    const RunningJob* r = state.FindRunning(chosen[k]->id);
    if (r == nullptr || !trial.Bind(r->spec, r->placement, r->start_ns).ok()) continue;
    if (std::optional<Placement> p = PlaceGang(trial, job, placement_options)) {
      placement = std::move(p);
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      (void)trial.Release(chosen[k]->id, now_ns);
    }
  }
  PreemptionPlan plan;
  for (const Cand* v : chosen) {
    plan.victims.push_back(v->id);
    plan.reasons.push_back(v->lower_priority ? PreemptReason::kPriority : PreemptReason::kReclaim);
  }
  plan.placement = std::move(*placement);
  return plan;
}

}  // namespace gpool::sched
