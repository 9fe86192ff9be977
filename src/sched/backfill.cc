#include "sched/backfill.h"

#include <algorithm>
#include <climits>

namespace gpool::sched {

std::optional<Reservation> ComputeReservation(const ClusterState& state, const JobSpec& job,
                                              const PlacementOptions& options, int64_t now_ns,
                                              double assumed_runtime_s) {
  bool waits_for_resume = false;
  auto reserve_with = [&](const ClusterState& s, int64_t at,
                          const PlacementOptions& o) -> std::optional<Reservation> {
    std::optional<Placement> p = PlaceGang(s, job, o, &waits_for_resume);
    if (!p) return std::nullopt;
    Reservation r{.job = job.id, .start_ns = at};
    for (const TaskBinding& b : p->tasks) r.nodes.push_back(b.node);
    std::sort(r.nodes.begin(), r.nodes.end());
    r.nodes.erase(std::unique(r.nodes.begin(), r.nodes.end()), r.nodes.end());
    return r;
  };
  if (auto r = reserve_with(state, now_ns, options)) return r;
  // The powered-on nodes hold it but it waits for resumes (PlacementOptions::resume_latency_s):
  // it is not going to start on them, so it holds none (see backfill.h).
  if (waits_for_resume) return std::nullopt;

  // Jobs with an estimated end, soonest first (ties on id, for determinism).
  std::vector<std::pair<int64_t, JobId>> ends;
  for (const RunningJob& r : state.running()) {
    int64_t end = r.expected_end_ns();
    if (end == INT64_MAX && assumed_runtime_s > 0) {
      end = r.start_ns + static_cast<int64_t>(assumed_runtime_s * 1e9);
    }
    if (end != INT64_MAX) ends.push_back({std::max(end, now_ns), r.spec.id});
  }
  if (ends.empty()) return std::nullopt;
  std::sort(ends.begin(), ends.end());

  // The future start is the first end after which the powered-on nodes hold the gang, however
  // many leaves that takes: the latest start it is promised. Resumed nodes may let it start
  // sooner and whole (PlaceGang decides that each cycle, while the gang is within its wait).
  PlacementOptions walk = options;
  walk.resume_latency_s = 0;
  ClusterState future = state;
  // A cheap test before each placement attempt: the gang's tasks must fit in some fabric by the
  // aggregates (or across fabrics when it may split).
  auto may_fit = [&]() {
    int64_t sum = 0;
    for (DomainId f : future.domains_at(Level::kFabric)) {
      const int64_t b = future.TaskCapacityBound(f, job.task, job.gpu_models);
      if (b >= job.num_tasks) return true;
      sum += b;
    }
    return job.allow_split && sum >= job.num_tasks;
  };
  size_t i = 0;
  while (i < ends.size()) {
    const int64_t t = ends[i].first;
    for (; i < ends.size() && ends[i].first == t; ++i) {
      (void)future.Release(ends[i].second, t);
    }
    if (!may_fit()) continue;
    if (auto r = reserve_with(future, t, walk)) return r;
  }
  return std::nullopt;
}

void ExcludeReserved(const Reservation& r, std::vector<uint8_t>* excluded) {
  for (NodeId n : r.nodes) {
    if (excluded->size() <= n.value()) excluded->resize(n.value() + 1, 0);
    (*excluded)[n.value()] = 1;
  }
}

}  // namespace gpool::sched
