#include "sched/fairshare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <tuple>

namespace gpool::sched {
namespace {

struct Held {
  double gpu_milli = 0;
  double cpu_milli = 0;
  double memory = 0;
};

// From the state's per-queue sums (ClusterState keeps them as jobs start and end).
Held HeldOf(const ClusterState& state, QueueId q) {
  return {.gpu_milli = static_cast<double>(state.queue_used_milli(q)),
          .cpu_milli = static_cast<double>(state.queue_used_cpu(q)),
          .memory = static_cast<double>(state.queue_used_memory(q))};
}

std::vector<Held> HeldByQueue(const ClusterState& state, size_t num_queues) {
  std::vector<Held> held(num_queues);
  for (size_t i = 0; i < num_queues; ++i) held[i] = HeldOf(state, QueueId(static_cast<uint32_t>(i)));
  return held;
}

double Share(const ClusterState& state, const UsageLedger* ledger, const QueueSpec& q,
             QueueId id, const Held& h) {
  // Decayed resource-seconds over the mean lifetime give an average rate comparable to `h`.
  double gpu = h.gpu_milli, cpu = h.cpu_milli, mem = h.memory;
  if (ledger != nullptr && ledger->half_life_s() > 0) {
    const double tau = ledger->half_life_s() / std::log(2.0);
    const QueueUsage& u = ledger->usage(id);
    gpu += u.gpu_milli_s / tau;
    cpu += u.cpu_milli_s / tau;
    mem += u.memory_byte_s / tau;
  }
  double dominant = 0;
  if (state.total_gpus() > 0) dominant = std::max(dominant, gpu / (1000.0 * state.total_gpus()));
  if (state.total_cpu() > 0) dominant = std::max(dominant, cpu / static_cast<double>(state.total_cpu()));
  if (state.total_memory() > 0) dominant = std::max(dominant, mem / static_cast<double>(state.total_memory()));
  return dominant / (q.weight > 0 ? q.weight : 1);
}

}  // namespace

void UsageLedger::Advance(const ClusterState& state, int64_t now_ns) {
  if (last_ns_ < 0 || now_ns <= last_ns_) {
    if (last_ns_ < 0) last_ns_ = now_ns;
    return;
  }
  const double dt = static_cast<double>(now_ns - last_ns_) * 1e-9;
  const double decay = half_life_s_ > 0 ? std::exp2(-dt / half_life_s_) : 0;
  for (QueueUsage& u : usage_) {
    u.gpu_milli_s *= decay;
    u.cpu_milli_s *= decay;
    u.memory_byte_s *= decay;
  }
  for (const RunningJob& r : state.running()) {
    if (!r.spec.queue.valid()) continue;
    QueueUsage add;
    add.gpu_milli_s = static_cast<double>(r.spec.total_milli_gpus()) * dt;
    add.cpu_milli_s = static_cast<double>(r.spec.task.cpu_milli) * r.spec.num_tasks * dt;
    add.memory_byte_s = static_cast<double>(r.spec.task.memory_bytes) * r.spec.num_tasks * dt;
    Add(r.spec.queue, add);
  }
  last_ns_ = now_ns;
}

void UsageLedger::Add(QueueId q, const QueueUsage& u) {
  if (usage_.size() <= q.value()) usage_.resize(q.value() + 1);
  QueueUsage& x = usage_[q.value()];
  x.gpu_milli_s += u.gpu_milli_s;
  x.cpu_milli_s += u.cpu_milli_s;
  x.memory_byte_s += u.memory_byte_s;
}

const QueueUsage& UsageLedger::usage(QueueId q) const {
  static const QueueUsage kZero;
  return q.value() < usage_.size() ? usage_[q.value()] : kZero;
}

double DominantShare(const ClusterState& state, const UsageLedger* ledger,
                     const std::vector<QueueSpec>& queues, QueueId q) {
  return Share(state, ledger, queues[q.value()], q, HeldOf(state, q));
}

std::vector<size_t> OrderJobs(const std::vector<JobSpec>& pending, const ClusterState& state,
                              const UsageLedger* ledger, const std::vector<QueueSpec>& queues,
                              int64_t now_ns, const OrderOptions& options) {
  std::vector<Held> held = HeldByQueue(state, queues.size());
  const double starve_ns = options.starvation_age_s * 1e9;
  auto starved = [&](const JobSpec& j) { return static_cast<double>(now_ns - j.submit_ns) >= starve_ns; };
  // Least work: a job without an estimate ranks at the mean estimate of its priority class
  // (across queues, so that one queue's estimates don't make another's unknowns look long).
  std::map<int32_t, double> unknown_s;
  if (options.least_work_first) {
    std::map<int32_t, std::pair<double, int64_t>> sums;
    for (const JobSpec& j : pending) {
      auto& [sum, known] = sums[j.priority];
      if (j.est_runtime_s > 0) {
        sum += j.est_runtime_s;
        ++known;
      }
    }
    for (const auto& [prio, s] : sums) {
      unknown_s[prio] = options.unknown_estimate == UnknownEstimate::kMean && s.second > 0
                            ? s.first / static_cast<double>(s.second)
                            : std::numeric_limits<double>::infinity();
    }
  }
  // Sort keys computed once per job (the sort compares each job many times).
  std::vector<uint8_t> is_starved(pending.size());
  std::vector<double> work(pending.size(), 0);
  for (size_t k = 0; k < pending.size(); ++k) {
    const JobSpec& j = pending[k];
    is_starved[k] = starved(j);
    if (!options.least_work_first) continue;
    const double est = j.est_runtime_s > 0 ? j.est_runtime_s : unknown_s.at(j.priority);
    // Not inf x 0 (a job without GPUs): NaN breaks the sort.
    work[k] = std::isinf(est) ? est : est * static_cast<double>(j.total_milli_gpus());
  }
  // Each queue's own order: priority class (higher first), then its starved jobs by age, then
  // least work (or age). Priority orders a queue's own jobs only: across queues it counts for
  // nothing, so no tenant buys another's place by raising its priorities.
  std::vector<std::vector<size_t>> per_queue(queues.size());
  std::vector<size_t> unknown_queue;  // ValidateInput rejects these anyway; they go last
  for (size_t k = 0; k < pending.size(); ++k) {
    const size_t q = pending[k].queue.value();
    (q < per_queue.size() ? per_queue[q] : unknown_queue).push_back(k);
  }
  for (auto& v : per_queue) {
    std::sort(v.begin(), v.end(), [&](size_t a, size_t b) {
      const JobSpec& x = pending[a];
      const JobSpec& y = pending[b];
      if (x.priority != y.priority) return x.priority > y.priority;
      const bool sx = is_starved[a], sy = is_starved[b];
      if (sx != sy) return sx;
      if (!sx && work[a] != work[b]) return work[a] < work[b];
      if (x.submit_ns != y.submit_ns) return x.submit_ns < y.submit_ns;
      return x.id < y.id;
    });
  }
  // Across queues, progressive DRF: the next job comes from the queue whose head ranks first by
  // (within its guarantee, starved by age, lowest dominant share counting the jobs already
  // ordered as if they had started, head's age, head's id). A head that fits in what is left
  // of its queue's guarantee goes before every head that would borrow: a tenant waiting within
  // its guarantee is served first, whatever the others' priorities or shares.
  std::vector<int64_t> quota(queues.size());
  for (size_t q = 0; q < queues.size(); ++q) quota[q] = QueueQuotaMilli(state, queues[q]);
  // (borrows, not starved, starved head's submit, share, head submit, head id, queue); smallest
  // first.
  using Entry = std::tuple<bool, bool, int64_t, double, int64_t, JobId, size_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  std::vector<size_t> next(queues.size(), 0);
  auto push = [&](size_t q) {
    if (next[q] >= per_queue[q].size()) return;
    const size_t k = per_queue[q][next[q]];
    const JobSpec& j = pending[k];
    const bool borrows =
        !(quota[q] > 0 && held[q].gpu_milli + static_cast<double>(j.total_milli_gpus()) <=
                              static_cast<double>(quota[q]));
    const bool s = is_starved[k];
    heap.push({borrows, !s, s ? j.submit_ns : 0,
               Share(state, ledger, queues[q], QueueId(static_cast<uint32_t>(q)), held[q]),
               j.submit_ns, j.id, q});
  };
  for (size_t q = 0; q < per_queue.size(); ++q) push(q);
  std::vector<size_t> order;
  order.reserve(pending.size());
  while (!heap.empty()) {
    const size_t q = std::get<6>(heap.top());
    heap.pop();
    const size_t k = per_queue[q][next[q]++];
    const JobSpec& j = pending[k];
    order.push_back(k);
    held[q].gpu_milli += static_cast<double>(j.total_milli_gpus());
    held[q].cpu_milli += static_cast<double>(j.task.cpu_milli) * j.num_tasks;
    held[q].memory += static_cast<double>(j.task.memory_bytes) * j.num_tasks;
    push(q);
  }
  order.insert(order.end(), unknown_queue.begin(), unknown_queue.end());
  return order;
}

std::string_view UnknownEstimateName(UnknownEstimate u) {
  return u == UnknownEstimate::kMean ? "mean" : "last";
}

StatusOr<UnknownEstimate> ParseUnknownEstimate(std::string_view s) {
  if (s == "last") return UnknownEstimate::kLast;
  if (s == "mean") return UnknownEstimate::kMean;
  return Status::InvalidArgument(fmt::format("'{}' is not last or mean", s));
}

int64_t QueueQuotaMilli(const ClusterState& state, const QueueSpec& q) {
  int64_t milli = q.guaranteed_gpus * 1000;
  for (DomainId d : q.guaranteed_domains) {
    if (d.valid() && d.value() < state.num_domains()) milli += state.domain_total_gpus(d) * 1000;
  }
  return milli;
}

}  // namespace gpool::sched
