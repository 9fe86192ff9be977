// Per-tenant queue settings for the simulator (`gpool sim --queues FILE`): each tenant's
// guaranteed quota (GPUs and/or whole leaf/pod domains named as the cluster names them), its
// borrowing weight and its limits. Without a file every tenant gets an equal share
// (MakeTenantQueues in adapter.h), as before.
//
// File format (YAML; docs/simulator.md "Queues"):
//   queues:
//     team-a: {guaranteed_gpus: 64, guaranteed_domains: [S14], weight: 2, max_gpus: 128,
//              max_running_jobs: 10}
//     team-b: {guaranteed_gpus: 32}
//   default: {weight: 1}     # optional: settings for every tenant not listed under queues
// Every key is optional except `queues`. A tenant of the workload that is neither listed nor
// covered by `default` is an error naming it; so are unknown keys, bad values (file:line and
// the key), unknown or overlapping domains, and quotas that add up to more GPUs than the
// cluster has. Listed tenants without jobs keep their queue (their quota is still theirs).
//
// Entitlement (metrics.json `tenants[].entitlement`, report.html): each queue's quota (its
// guaranteed GPUs plus the GPUs of its guaranteed domains) over the sum of all quotas; when no
// queue has a quota, its weight over the sum of weights.
//
// Thread safety: free functions over their arguments; safe to call concurrently.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "sched/types.h"
#include "sim/adapter.h"
#include "sim/job.h"

namespace gpool::sim {

struct QueueEntry {
  std::string tenant;
  int64_t guaranteed_gpus = 0;
  std::vector<std::string> guaranteed_domains;  // leaf or pod names
  double weight = 1;
  int64_t max_gpus = -1;          // -1: no limit
  int32_t max_running_jobs = -1;  // -1: no limit
  std::string where;              // "file:line" of the entry, for errors
};

struct QueueConfig {
  std::vector<QueueEntry> queues;          // in file order
  std::optional<QueueEntry> default_queue;  // for tenants not listed
  std::string source;                       // file name
};

StatusOr<QueueConfig> ParseQueueConfig(std::string_view text, std::string_view filename);
StatusOr<QueueConfig> ReadQueueConfig(const std::string& path);

// The queues for `w` on the cluster `spec`: the listed queues in file order, then each tenant
// of `w` not listed (in order of first appearance) with the default settings.
StatusOr<TenantQueues> MakeConfiguredQueues(const QueueConfig& config, const Workload& w,
                                            const sched::ClusterSpec& spec);

}  // namespace gpool::sim
