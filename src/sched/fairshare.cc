#include "sched/fairshare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
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

std::vector<Held> HeldByQueue(const ClusterState& state, size_t num_queues) {
  std::vector<Held> held(num_queues);
  for (const RunningJob& r : state.running()) {
    if (!r.spec.queue.valid() || r.spec.queue.value() >= num_queues) continue;
    Held& h = held[r.spec.queue.value()];
    h.gpu_milli += static_cast<double>(r.spec.total_milli_gpus());
    h.cpu_milli += static_cast<double>(r.spec.task.cpu_milli) * r.spec.num_tasks;
    h.memory += static_cast<double>(r.spec.task.memory_bytes) * r.spec.num_tasks;
  }
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
  const std::vector<Held> held = HeldByQueue(state, queues.size());
  return Share(state, ledger, queues[q.value()], q, held[q.value()]);
}

std::vector<size_t> OrderJobs(const std::vector<JobSpec>& pending, const ClusterState& state,
                              const UsageLedger* ledger, const std::vector<QueueSpec>& queues,
                              int64_t now_ns, const OrderOptions& options) {
  std::vector<Held> held = HeldByQueue(state, queues.size());
  const double starve_ns = options.starvation_age_s * 1e9;
  auto starved = [&](const JobSpec& j) { return static_cast<double>(now_ns - j.submit_ns) >= starve_ns; };
  // Age order inside each priority class, starved jobs first.
  std::vector<size_t> by_age(pending.size());
  std::iota(by_age.begin(), by_age.end(), 0);
  std::sort(by_age.begin(), by_age.end(), [&](size_t a, size_t b) {
    const JobSpec& x = pending[a];
    const JobSpec& y = pending[b];
    if (x.priority != y.priority) return x.priority > y.priority;
    const bool sx = starved(x), sy = starved(y);
    if (sx != sy) return sx;
    if (x.submit_ns != y.submit_ns) return x.submit_ns < y.submit_ns;
    return x.id < y.id;
  });
  // Within a class, the non-starved jobs interleave by queue as progressive DRF would: the next
  // job comes from the queue with the lowest dominant share, counting the jobs already ordered
  // as if they had started. Each queue keeps its own age order.
  std::vector<size_t> order;
  order.reserve(pending.size());
  std::vector<std::vector<size_t>> per_queue(queues.size());
  size_t i = 0;
  while (i < by_age.size()) {
    const int32_t prio = pending[by_age[i]].priority;
    size_t end = i;
    while (end < by_age.size() && pending[by_age[end]].priority == prio) ++end;
    for (; i < end && starved(pending[by_age[i]]); ++i) order.push_back(by_age[i]);
    for (auto& v : per_queue) v.clear();
    for (size_t k = i; k < end; ++k) {
      const size_t q = pending[by_age[k]].queue.value();
      if (q < per_queue.size()) {
        per_queue[q].push_back(by_age[k]);
      } else {
        order.push_back(by_age[k]);  // unknown queue: ValidateInput rejects it anyway
      }
    }
    if (options.least_work_first) {
      double unknown_s = std::numeric_limits<double>::infinity();
      if (options.unknown_estimate == UnknownEstimate::kMean) {
        double sum = 0;
        int64_t known = 0;
        for (size_t k = i; k < end; ++k) {
          const double e = pending[by_age[k]].est_runtime_s;
          if (e > 0) {
            sum += e;
            ++known;
          }
        }
        if (known > 0) unknown_s = sum / static_cast<double>(known);
      }
      auto work = [&](size_t k) {
        const JobSpec& j = pending[k];
        const double est = j.est_runtime_s > 0 ? j.est_runtime_s : unknown_s;
        if (std::isinf(est)) return est;  // not inf x 0 (a job without GPUs): NaN breaks the sort
        return est * static_cast<double>(j.total_milli_gpus());
      };
      // Stable: equal work (and every job without an estimate) keeps the age order.
      for (auto& v : per_queue) {
        std::stable_sort(v.begin(), v.end(), [&](size_t a, size_t b) { return work(a) < work(b); });
      }
    }
    // (share, head submit, head id, queue, position); smallest first.
    using Entry = std::tuple<double, int64_t, JobId, size_t, size_t>;
    std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
    auto push = [&](size_t q, size_t pos) {
      if (pos >= per_queue[q].size()) return;
      const JobSpec& j = pending[per_queue[q][pos]];
      heap.push({Share(state, ledger, queues[q], QueueId(static_cast<uint32_t>(q)), held[q]),
                 j.submit_ns, j.id, q, pos});
    };
    for (size_t q = 0; q < per_queue.size(); ++q) push(q, 0);
    while (!heap.empty()) {
      const auto [share, submit, id, q, pos] = heap.top();
      heap.pop();
      const JobSpec& j = pending[per_queue[q][pos]];
      order.push_back(per_queue[q][pos]);
      held[q].gpu_milli += static_cast<double>(j.total_milli_gpus());
      held[q].cpu_milli += static_cast<double>(j.task.cpu_milli) * j.num_tasks;
      held[q].memory += static_cast<double>(j.task.memory_bytes) * j.num_tasks;
      push(q, pos + 1);
    }
    i = end;
  }
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
