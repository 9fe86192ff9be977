// Fair share and job ordering.
//
// Fair share is DRF (dominant resource fairness) over GPU, CPU and memory. A queue's share of a
// resource is (what it holds now + its decayed past usage / half-life) over the cluster's total;
// its dominant share is the largest of the three, divided by its weight. Past usage decays with
// a half-life, so a queue that ran big jobs yesterday is not punished forever.
//
// The usage history is state the caller keeps between cycles (the library keeps none): call
// UsageLedger::Advance once per cycle, before ordering, with the cluster's current allocations.
//
// Ordering: each queue orders its own jobs by priority class (higher first), then its starved
// jobs by age, then least work or age. Priority stops at the queue: a tenant's priority orders
// its own jobs and nothing else, so no tenant buys another's place by raising its priorities.
// Across queues the next job comes from the queue whose head (1) fits in what is left of the
// queue's guarantee (before every head that would borrow), (2) has starved (by age), (3) has
// the lowest dominant share, then the older head, then job id. Shares are progressive: after a
// queue's job is ordered, its share counts that job, so queues interleave as DRF would
// allocate rather than one queue taking a cycle. A job that has waited longer than the
// starvation age moves to the front of its priority class in its queue, and ahead of the
// unstarved heads of the other queues that borrow, so no job starves behind a stream of jobs
// from low-share queues.
//
// Thread safety: thread-compatible values and pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/cluster.h"
#include "sched/types.h"

namespace gpool::sched {

// Decayed resource-seconds used by each queue.
struct QueueUsage {
  double gpu_milli_s = 0;
  double cpu_milli_s = 0;
  double memory_byte_s = 0;
};

class UsageLedger {
 public:
  explicit UsageLedger(double half_life_s = 7 * 24 * 3600.0) : half_life_s_(half_life_s) {}

  // Decays the ledger to now_ns and adds what `state`'s running jobs used since the last call
  // (their allocations times the elapsed time). The first call only sets the time.
  void Advance(const ClusterState& state, int64_t now_ns);
  // Adds usage directly (e.g. a finished job's account when cycles are sparse).
  void Add(QueueId q, const QueueUsage& u);

  const QueueUsage& usage(QueueId q) const;
  double half_life_s() const { return half_life_s_; }
  int64_t last_ns() const { return last_ns_; }

 private:
  double half_life_s_;
  int64_t last_ns_ = -1;
  std::vector<QueueUsage> usage_;
};

// DRF dominant share of queue q (divided by its weight), from its current allocation in `state`
// and its decayed usage in `ledger` (nullptr = current allocation only).
double DominantShare(const ClusterState& state, const UsageLedger* ledger,
                     const std::vector<QueueSpec>& queues, QueueId q);

// How least_work_first ranks a job that has no run-time estimate.
enum class UnknownEstimate : uint8_t {
  kLast,  // after every job with an estimate (age order among themselves)
  kMean,  // as if it ran the mean estimate of the pending jobs that have one (x its GPUs)
};
std::string_view UnknownEstimateName(UnknownEstimate u);  // "last", "mean"
StatusOr<UnknownEstimate> ParseUnknownEstimate(std::string_view s);

struct OrderOptions {
  double starvation_age_s = 3600;  // waited this long: first in its priority class
  // Inside each queue (same priority class, not starved), the job with the least estimated
  // work (GPUs x est_runtime_s) first instead of the oldest; jobs without an estimate rank as
  // unknown_estimate says (after those with one, oldest first, or at the mean estimate). Age still bounds the wait: a job that waits
  // starvation_age_s goes ahead of every unstarved job of its class. Shortest-work-first cuts
  // the average completion time when jobs queue (it is what minimises it on one machine).
  bool least_work_first = false;
  UnknownEstimate unknown_estimate = UnknownEstimate::kLast;
};

// Returns indices into `pending` in scheduling order. Deterministic: ties end on job id. Jobs of
// a queue that `queues` lacks (an invalid input) go last.
std::vector<size_t> OrderJobs(const std::vector<JobSpec>& pending, const ClusterState& state,
                              const UsageLedger* ledger, const std::vector<QueueSpec>& queues,
                              int64_t now_ns, const OrderOptions& options);

// Quota of queue q in milli-GPU: guaranteed_gpus plus the GPUs of its guaranteed domains.
int64_t QueueQuotaMilli(const ClusterState& state, const QueueSpec& q);

}  // namespace gpool::sched
