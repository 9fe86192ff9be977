// Short-job preemption: a pending job with a short run-time estimate may checkpoint-preempt
// running jobs with much more estimated work left (shortest remaining time first, as far as the
// estimates and the guarantees below allow).
//
// Why: least-work-first ordering (fairshare.h) only reorders the queue; when long jobs hold the
// GPUs, a one-hour job still waits for days-long jobs to end. Tiresias (NSDI '19) gets its low
// average JCT by preempting jobs that have attained a lot of service for newcomers; with
// run-time estimates the same idea can be aimed: preempt only jobs whose remaining time is at
// least `ratio` times the newcomer's whole estimate, so the victim's completion is delayed by a
// small fraction of what is left of it while the newcomer's is cut by its whole wait.
//
// Guarantees kept (each is a rule on the victim V of a pending job J):
//   - priority: when V is of J's own queue, V's priority class is not above J's (priorities
//     do not compare across queues: preemption.h);
//   - quotas: V is of J's own queue, or of a queue that stays at or above its quota without V
//     (only borrowed capacity is taken from another tenant);
//   - minimum run time: V is preemptible, past its own min_runtime_s, and has run at least
//     `min_run_s` in its current run;
//   - no starvation of long jobs: V has run at least `min_run_fraction` of its age (now - its
//     submit time) in its current run, so every re-run is longer than the last by a constant
//     factor of the job's age: a job is preempted this way O(log(JCT / min_run_s)) times;
//   - both J and V have run-time estimates (V's remaining time is its estimate minus the time
//     of its current run, which over-counts what is left after an earlier preemption: a
//     re-started job looks longer, never shorter, than it is).
// Victims are taken largest first (most GPUs; then most remaining time) until J fits, then any
// victim whose removal still leaves a fit is spared (last taken first). Each victim is delayed
// about J's run time, whatever its size, so the fewest victims cost least: a big short gang
// preempts a few big long jobs rather than many small ones. At most
// min(`max_victims`, J's expected wait / (J's estimate + restart_cost_s)) victims: J's expected
// wait (given by the caller, e.g. from ReleaseProfile with the demand queued ahead of J) must
// pay for the delay of every victim, not just one.
//
// Thread safety: pure functions over a const ClusterState.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_set>
#include <vector>

#include "sched/cluster.h"
#include "sched/placement.h"
#include "sched/preemption.h"
#include "sched/types.h"

namespace gpool::sched {

struct ShortJobPreemptionConfig {
  bool enabled = true;
  // A victim's estimated remaining run time must be at least ratio x the job's estimate.
  double ratio = 2;
  double min_run_s = 600;          // a victim's current run is at least this long
  double min_run_fraction = 0.1;   // ... and at least this share of its age
  int max_victims = 16;            // per pending job
  // Preempt only when it pays: the job's expected wait without preemption (ReleaseProfile) is
  // at least victims x (its estimate + restart_cost_s), the delay the victims take. Under light
  // load a blocked job starts soon anyway and preempting would only cost the victims.
  double restart_cost_s = 60;
};

// When capacity comes back without preemption: running jobs' expected ends (est_runtime_s, or
// assumed_runtime_s for jobs without one) against their GPUs. Ignores topology and GPU models:
// an estimate of a blocked job's wait, not a plan. Built once per cycle, O(running log running).
class ReleaseProfile {
 public:
  ReleaseProfile() = default;
  ReleaseProfile(const ClusterState& state, int64_t now_ns, double assumed_runtime_s);
  // Seconds from now until free capacity reaches need_milli (0 if it already does; +inf if the
  // running jobs' ends never free that much).
  double WaitS(int64_t need_milli) const;

 private:
  int64_t free_milli_ = 0;
  std::vector<double> end_s_;     // seconds from now, ascending
  std::vector<int64_t> freed_;    // cumulative milli-GPUs freed by then
};

// Returns an error naming the field ("policy.short_preempt.ratio: must be >= 1, got 0.5").
Status ValidateShortJobPreemptionConfig(const ShortJobPreemptionConfig& c);

// Cheap upper bound for a cycle: the largest estimated remaining run time (seconds) among
// running jobs that the run-length rules above allow to be preempted now; 0 when none. A job
// whose ratio x estimate exceeds it can't preempt anything.
double MaxPreemptibleRemainingS(const ClusterState& state, int64_t now_ns,
                                const ShortJobPreemptionConfig& c);

// Finds victims that let `job` start under the rules above, or nullopt. Every victim's reason
// is kReclaim when it is of another queue, kPriority when of a lower class; the caller labels
// the decision "short job".
std::optional<PreemptionPlan> PlanShortJobPreemption(
    const ClusterState& state, const JobSpec& job, const std::vector<QueueSpec>& queues,
    int64_t now_ns, const ShortJobPreemptionConfig& c, int max_victims, double expected_wait_s,
    const PlacementOptions& placement, const std::unordered_set<JobId>* not_victims);

}  // namespace gpool::sched
