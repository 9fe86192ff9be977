// FabricLoad: how loaded the fabric's uplinks are now, as seen by whoever fills it.
//
// Placement (placement.h) uses it to keep gangs that must span several leaves (or pods) off
// uplinks that running jobs already share: a ring all-reduce runs at its slowest edge, so one
// shared uplink slows the whole gang. The simulator fills it from its performance model
// (sim/load_view.h: flows per link over the fabric's routes, or per aggregate pipe); the
// controller leaves it empty today, and placement then decides exactly as without it.
//
// Per domain (indexed by DomainId, like ClusterSpec::domains), the rate in Gb/s that one more
// flow leaving the domain through its uplinks (up_gbps) or entering it through its downlinks
// (down_gbps) can expect now: link capacity over (flows on it + 1), averaged over the parallel
// uplinks a route may hash onto. A domain missing from the vectors (or with a negative entry)
// is unknown and counts as unloaded. `flow_gbps` is what one flow wants (a host's NIC): a
// domain whose rates reach it adds no contention.
//
// Limits: a snapshot of the flows when the cycle starts; flows placed during the cycle are not
// added (placement would need the routes of the new rings). It describes uplinks only: links
// inside a leaf (host to leaf switch) are not modelled here.
//
// Thread safety: a value; const use from many threads is safe.
#pragma once

#include <algorithm>
#include <vector>

#include "sched/types.h"

namespace gpool::sched {

struct FabricLoad {
  std::vector<float> up_gbps;    // per DomainId
  std::vector<float> down_gbps;  // per DomainId
  double flow_gbps = 0;          // a flow's demand (host NIC); <= 0: the view is empty

  bool empty() const { return !(flow_gbps > 0); }
  // Rate a new flow crossing d's uplinks in both directions can expect, capped at flow_gbps.
  double Rate(DomainId d) const {
    double r = flow_gbps;
    const size_t i = d.value();
    if (i < up_gbps.size() && up_gbps[i] >= 0) r = std::min<double>(r, up_gbps[i]);
    if (i < down_gbps.size() && down_gbps[i] >= 0) r = std::min<double>(r, down_gbps[i]);
    return r;
  }
  // How many times slower than its demand such a flow runs (1 = no contention).
  double Contention(DomainId d) const {
    const double r = Rate(d);
    return r > 0 ? flow_gbps / r : 1e9;
  }
};

}  // namespace gpool::sched
