// Remote attachment: placing a task on one node and its GPUs on the GPU servers of others.
//
// A job with JobSpec::remote.source kPooled is placed locally (placement.h) when its gang fits
// so, and here otherwise; kRemote is always placed here. PlaceGang dispatches, so backfill,
// preemption and reclaim treat these placements as any other.
//
// The rule, per task of the gang, in task order (earlier tasks' takings count for later ones):
//   1. Hosts: schedulable nodes with the task's CPU and memory free. For each, the smallest
//      distance (node, leaf, pod, fabric; at most remote.within) at which lending nodes hold
//      its GPUs, and whose estimated slowdown (EstimateSlowdown) is within remote.max_slowdown.
//      The host with the smallest such distance wins; ties go to the host nearest the gang's
//      first task's host (a gang stays together), then to the host with the fewest free
//      GPUs (a CPU-only node, or one whose GPUs are taken, so no GPU is stranded by using its
//      CPU), then the least free CPU after the task (best fit), then the lowest node id.
//   2. GPUs, nearest first: the host's own (when it serves them), then its leaf, its pod, the
//      fabric. At each distance, GPUs of nodes that could not host the task themselves come
//      first (their GPUs are stranded: FGD-style packing could never use them), then nodes with
//      the fewest free GPUs (best fit); a fraction goes on the fullest GPU that holds it.
//   A lending node is schedulable, serves GPUs (NodeSpec::serves_gpus), has an allowed model and
//   is not excluded. A gang with required locality keeps its hosts in the first host's domain
//   of that level (it is not retried in other domains).
//
// Limits: the cost model is a model (below), not a measurement of the job; the fabric load
// view (fabric_load.h) is not consulted; one task's GPUs may come from several nodes
// (aggregation) but a fraction is always one GPU.
//
// Thread safety: pure functions over a const ClusterState.
#pragma once

#include <optional>

#include "sched/cluster.h"
#include "sched/placement.h"
#include "sched/remote_cost.h"
#include "sched/types.h"

namespace gpool::sched {

// Places every task of `job` with remote attachment, or returns nullopt. Bindings have
// via_server set, their remote GPUs listed, and their estimated slowdown (the worst of their
// GPUs'). options.remote_cost null = the defaults.
std::optional<Placement> PlaceRemote(const ClusterState& state, const JobSpec& job,
                                     const PlacementOptions& options);

// GPUs a placement draws from nodes other than their task's (for metrics and the simulator).
int CountRemoteGpus(const Placement& p);

}  // namespace gpool::sched
