// The adapter between the simulator's world (SimCluster, SimJob) and the scheduler's (sched::
// ClusterSpec, JobSpec, QueueSpec). The controller has its own adapter over live nodes; the
// policy sees the same types either way.
//
// Clusters: domains fabric -> pods -> leaves, with each domain's uplink bandwidth; nodes in host
// order (so a sched NodeId equals the host index). Jobs: a gang of G GPUs becomes tasks of at
// most one host's GPUs (the largest divisor of G that fits a host, e.g. 1,024 GPUs on 8-GPU
// hosts = 128 tasks of 8); CPU and memory are split evenly over the tasks. Tenants become queues
// whose quota is their entitlement (an equal share of the GPUs unless configured).
//
// Remote attachment (RemoteAttach, `gpool sim --remote-attach`): every GPU host runs a GPU server
// (NodeSpec::serves_gpus) and GPU jobs ask for their GPUs with JobSpec::remote, so a GPU whose
// host has no CPU or memory left can serve a task running elsewhere (sched/remote_placement.h).
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "sched/types.h"
#include "sim/cluster.h"
#include "sim/job.h"

namespace gpool::sim {

// How the simulator submits GPU jobs under remote attachment. `enabled` false: local GPUs
// only (every other field ignored).
struct RemoteAttach {
  bool enabled = false;
  sched::GpuSource source = sched::GpuSource::kPooled;  // kPooled or kRemote
  sched::Level within = sched::Level::kFabric;          // RemoteGpuRequest::within
  double max_slowdown = 0;                              // RemoteGpuRequest::max_slowdown; 0 any
};
// Errors name the field: "remote attach: max_slowdown must be 0 (any) or >= 1, got 0.5".
Status ValidateRemoteAttach(const RemoteAttach& r);

// With `remote.enabled`, every host with GPUs serves them (NodeSpec::serves_gpus).
sched::ClusterSpec ToClusterSpec(const SimCluster& cluster, const RemoteAttach& remote = {});
// Sets job->remote from `remote` for a job with GPUs (a CPU-only job stays local).
void ApplyRemoteAttach(const RemoteAttach& remote, sched::JobSpec* job);

struct TenantQueues {
  std::vector<std::string> tenants;       // queue index -> tenant name
  std::vector<sched::QueueSpec> queues;   // one per tenant
  std::vector<double> entitlement;        // share of the cluster's GPUs, sums to 1
  int Find(const std::string& tenant) const;  // -1 when unknown
};
// One queue per tenant that appears in `w`, in order of first appearance; each is entitled to an
// equal share of the cluster's GPUs (guaranteed_gpus), weight 1.
TenantQueues MakeTenantQueues(const Workload& w, int64_t cluster_gpus);

// Converts one job. Errors name the job's source (file:line) and field (an unknown GPU model).
StatusOr<sched::JobSpec> ToJobSpec(const SimJob& job, const sched::ClusterSpec& spec,
                                   const TenantQueues& queues, int32_t max_gpus_per_host);

// Whether a job could ever run on the empty cluster (enough GPUs of its models, a host big
// enough for one task). Returns an explanation when it can't. A job with remote attachment
// (job.remote, GPUs lent by serving nodes, `within` beyond the node) needs only a host with one
// task's CPU and memory and enough lendable GPUs of its models in the cluster: an upper bound,
// as sched::ValidateJob's (the distance and slowdown limits are the placement's).
Status FitsEmptyCluster(const sched::JobSpec& job, const sched::ClusterSpec& spec);

}  // namespace gpool::sim
