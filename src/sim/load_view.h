// The scheduler's view of fabric load (sched::FabricLoad) filled from the performance model.
//
// Per leaf and pod domain: the rate one more flow crossing its uplinks (and downlinks) could get
// with the flows running now. Route model (SimCluster::routes): the mean over the domain's
// parallel uplinks (FabricRoutes::leaf_uplinks / pod_uplinks) of capacity / (flows + 1), since
// the routes hash a new ring onto one of them; links with no capacity (down) are skipped, and a
// domain with none left gets 0. Aggregate pipes: the domain's pipe capacity / (flows + 1).
// A flow's demand (FabricLoad::flow_gbps) is the fastest host channel: a CA port's rate with
// routes, a host's NIC with pipes.
//
// Domain ids follow ToClusterSpec (adapter.h): 0 = the fabric (left unknown), 1 + pod, then
// 1 + pods + leaf.
//
// Thread safety: pure function over a const model.
#pragma once

#include <memory>

#include "sched/fabric_load.h"
#include "sim/cluster.h"
#include "sim/perf_model.h"

namespace gpool::sim {

std::shared_ptr<const sched::FabricLoad> FabricLoadOf(const SimCluster& cluster, const NetModel& net);

}  // namespace gpool::sim
