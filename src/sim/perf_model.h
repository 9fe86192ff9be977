// The performance model: how a job's placement stretches its run time.
//
// A job spends `comm_fraction` of its base run time in ring all-reduce at full bandwidth (its
// hosts' NIC rate). Placed on several hosts, its ring visits them in host order (hosts are
// numbered leaf by leaf, so the ring leaves and re-enters each leaf once); every ring edge
// (host i -> host i+1, and last -> first) is a flow that wants a whole NIC. The flow's path
// crosses, in the tree of domains, the sending host's uplink, its leaf's uplink and pod's uplink
// when the peer is outside them, then the matching downlinks. A link of capacity C carrying F
// flows gives each C / F. The ring runs at its slowest flow, so
//   bottleneck = min over edges, over links on the edge's path, of min(NIC, C / F)
//   slowdown   = (1 - comm_fraction) + comm_fraction * NIC / bottleneck.
// F counts the flows of every running job, the new one included. A job inside one host talks
// over NVLink and has slowdown 1.
//
// Limits (stated in docs/simulator.md): the slowdown is fixed when the job starts, from the
// flows running then; it is not revised as other jobs come and go. Uplinks are aggregate pipes
// (perfect ECMP); routes of a real fabric and hash collisions are not modelled.
//
// Thread safety: thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/cluster.h"

namespace gpool::sim {

class NetModel {
 public:
  explicit NetModel(const SimCluster& cluster);

  // Adds (sign +1) or removes (-1) the ring flows over `hosts` (distinct host indices in ring
  // order). A single host adds nothing.
  void AddRing(const std::vector<uint32_t>& hosts, int sign);
  // Slowest per-flow rate of the ring over `hosts`, with the flows as they are now (call after
  // AddRing for the job itself). Infinity for a single host.
  double RingRateGbps(const std::vector<uint32_t>& hosts) const;
  // Run-time multiplier of a job with this communication share on `hosts` (flows already added).
  double Slowdown(double comm_fraction, const std::vector<uint32_t>& hosts) const;

  // Flows on each modelled link (tests): host up/down, leaf up/down, pod up/down.
  int32_t host_up_flows(uint32_t h) const { return flows_[HostUp(h)]; }
  int32_t leaf_up_flows(int32_t leaf) const { return flows_[LeafUp(leaf)]; }
  int32_t pod_up_flows(int32_t pod) const { return flows_[PodUp(pod)]; }
  // True when no flow is left (every AddRing(+1) was matched by a -1).
  bool idle() const;

 private:
  size_t HostUp(uint32_t h) const { return 2 * h; }
  size_t HostDown(uint32_t h) const { return 2 * h + 1; }
  size_t LeafUp(int32_t l) const { return leaf_base_ + 2 * static_cast<size_t>(l); }
  size_t LeafDown(int32_t l) const { return leaf_base_ + 2 * static_cast<size_t>(l) + 1; }
  size_t PodUp(int32_t p) const { return pod_base_ + 2 * static_cast<size_t>(p); }
  size_t PodDown(int32_t p) const { return pod_base_ + 2 * static_cast<size_t>(p) + 1; }
  template <typename Fn>
  void ForEachLink(uint32_t a, uint32_t b, Fn&& fn) const;

  const SimCluster* cluster_;
  size_t leaf_base_ = 0, pod_base_ = 0;
  std::vector<double> capacity_;  // Gb/s per directed link
  std::vector<int32_t> flows_;
};

}  // namespace gpool::sim
