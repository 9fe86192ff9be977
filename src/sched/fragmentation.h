// GPU fragmentation as a measured cost, after FGD (Weng et al., "Beware of Fragmentation:
// Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC 2023).
//
// A node's fragmentation with respect to a target workload (a distribution of task shapes) is
// the expected free GPU capacity, in milli-GPU, that a task drawn from the workload could not
// use on that node:
//   - if the task can't run on the node at all (too little CPU, memory, free GPUs, or the wrong
//     model), or uses no GPU, all of the node's free GPU capacity is fragmented for it;
//   - otherwise, for a fractional task the free capacity of GPUs with less free than it asks is
//     fragmented, and for a whole-GPU task every partially free GPU is fragmented.
// FGD places a task where this expectation grows least. Summed over the cluster it is the
// "unallocated GPUs" figure the paper reports (in milli-GPU; divide by 1000 for GPUs).
//
// Thread safety: thread-compatible values and pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "sched/cluster.h"
#include "sched/types.h"

namespace gpool::sched {

struct WorkloadClass {
  TaskRequest task;
  ModelMask models = kAnyModel;
  double weight = 1;  // relative popularity; normalised by the distribution
};

// A target workload: task shapes with their popularity.
class WorkloadDistribution {
 public:
  WorkloadDistribution() = default;
  explicit WorkloadDistribution(std::vector<WorkloadClass> classes);
  // The shapes of `jobs`' tasks, weighted by how often each appears (identical shapes merged).
  static WorkloadDistribution FromJobs(const std::vector<JobSpec>& jobs);
  // The same over `jobs` plus the running jobs of *running_of (when not null), without copying
  // them: policies rebuild this every cycle from the pending and running jobs.
  static WorkloadDistribution FromJobs(const std::vector<JobSpec>& jobs, const ClusterState* running_of);

  const std::vector<WorkloadClass>& classes() const { return classes_; }
  bool empty() const { return classes_.empty(); }

 private:
  std::vector<WorkloadClass> classes_;  // weights sum to 1
};

// Fragmentation of node n in milli-GPU, as defined above. 0 for an unschedulable node.
double NodeFragmentation(const ClusterState& state, NodeId n, const WorkloadDistribution& w);
// The same for a hypothetical node state: per-GPU free milli, free CPU and memory.
double FragmentationOf(const NodeSpec& node, const int32_t* gpu_free_milli,
                       const uint64_t* gpu_free_mem, int64_t free_cpu, uint64_t free_mem,
                       const WorkloadDistribution& w);
// Sum of NodeFragmentation over all schedulable nodes.
double ClusterFragmentation(const ClusterState& state, const WorkloadDistribution& w);
// Increase of node n's fragmentation if `b` (for task t) were applied. Requires CheckBinding OK.
double FragmentationDelta(const ClusterState& state, const TaskBinding& b, const TaskRequest& t,
                          const WorkloadDistribution& w);

}  // namespace gpool::sched
