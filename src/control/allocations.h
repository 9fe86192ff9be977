// The job record's side of placement: between the API's Job / Allocation (gpool.v1) and the
// scheduler's JobSpec::remote / TaskBinding (sched/types.h), for local and remote attachment.
//
// An allocation's task runs on `node`; its GPUs are `gpu_mask` (the node's own) and then each
// `remote` entry's (other nodes' GPUs, lent through their GPU servers), in that order: the order
// the task sees them (GPOOL_DEVICES), which leases follow. `via_server` means the task reaches
// all its GPUs through GPU servers (the remoting runtime), its own node's included.
//
// Thread safety: free functions, no state.
#pragma once

#include <map>
#include <set>
#include <string>

#include "common/status.h"
#include "control/allocation_text.h"
#include "gpool/v1/gpool.pb.h"
#include "sched/cluster.h"
#include "sched/types.h"

namespace gpool::control {

// Checks and normalizes a submit's gpu_source / gpu_within / max_slowdown into the job: source
// "local" (the default), "pooled" or "remote"; within "any" (the default), "pod", "leaf" or
// "node", only with pooled/remote; max_slowdown 0 (any) or a factor >= 1, only with
// pooled/remote. Errors name the field.
Status SetGpuSource(const v1::SubmitJobRequest& req, v1::Job* job);

// The scheduler's RemoteGpuRequest of a job record ("" source = local, "" within = any).
StatusOr<sched::RemoteGpuRequest> RemoteRequestOf(const v1::Job& job);

// Every node an allocation holds something on: its host, then the nodes lending it GPUs.
std::set<std::string> AllocationNodes(const v1::Allocation& a);
// Nodes any allocation of the job holds something on.
std::set<std::string> JobNodeNames(const v1::Job& job);
// GPUs the allocation holds on `node` (its own and lent ones; a fraction counts as one).
int32_t GpusOn(const v1::Allocation& a, const std::string& node);
// GPUs the allocation uses on nodes other than its host.
int32_t RemoteGpuCount(const v1::Allocation& a);

// The allocation of a scheduler binding (task index `task`), node names from `state`.
void FillAllocation(const sched::TaskBinding& b, const sched::ClusterState& state, int32_t task,
                    v1::Allocation* a);
// The scheduler binding of a stored allocation; node names resolve through `node_index`
// (InternalError naming the node when one is not registered).
StatusOr<sched::TaskBinding> BindingOf(const v1::Allocation& a,
                                       const std::map<std::string, int>& node_index);

}  // namespace gpool::control
