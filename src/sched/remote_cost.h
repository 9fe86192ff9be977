// The cost model of remote attachment: how much slower a task runs when its GPU is reached
// through a GPU server over the fabric (remote_placement.h uses it to place and to honour
// RemoteGpuRequest::max_slowdown; the simulator stretches run times by it).
//
// Thread safety: pure functions.
#pragma once

#include "common/status.h"
#include "sched/cluster.h"
#include "sched/types.h"

namespace gpool::sched {

// The slowdown a task sees when its GPU sits behind the fabric instead of the host's PCIe link:
//   slowdown = 1 + call_overhead + transfer_share * max(0, host_link_gbps / path_gbps - 1)
// where path_gbps = copy_efficiency * the narrowest of: the node's fabric link, and for each
// domain uplink crossed (the leaf's when the two nodes are in different leaves, the pod's when
// in different pods) that domain's usable uplink bandwidth per node (bandwidth_gbps over its
// nodes, which is how an oversubscribed or degraded uplink shows; unknown bandwidth = no
// narrowing). A GPU on the task's own node through its server costs call_overhead only.
//
// Defaults: copy_efficiency 0.95 and the call overhead from docs/benchmarks.md ("Remoting":
// copies reach >= 95% of the raw transport; a synchronous call costs one network round trip,
// ~20-35 us over TCP against ~5 us locally, which is 2% of a step that makes a sync call per
// millisecond); transfer_share is a nominal workload's (5% of its time in host-device copies);
// links are PCIe Gen5 x16 (512 Gb/s) and NDR (400 Gb/s). All are PolicyConfig keys.
struct RemoteCostModel {
  double call_overhead = 0.02;
  double transfer_share = 0.05;
  double host_link_gbps = 512;
  double node_link_gbps = 400;
  double copy_efficiency = 0.95;
};
// Errors name the field: "remote.transfer_share: must be in 0..1, got 2".
Status ValidateRemoteCostModel(const RemoteCostModel& m);

// The estimated slowdown of a task running on `host` with a GPU of `gpu_node` (>= 1). A GPU of
// the host used directly is 1; through the host's own server, 1 + call_overhead.
double EstimateSlowdown(const ClusterState& state, NodeId host, NodeId gpu_node,
                        const RemoteCostModel& model);

}  // namespace gpool::sched
