// The performance model: how a job's placement stretches its run time.
//
// A job spends `comm_fraction` of its base run time in ring all-reduce at full bandwidth (its
// hosts' NIC rate). Placed on several hosts, its ring visits them in host order (hosts are
// numbered leaf by leaf, so the ring leaves and re-enters each leaf once); every ring edge
// (host i -> host i+1, and last -> first) carries flows that want the sender's NICs. A directed
// link of capacity C carrying F flows (of every running job, the new one included) gives each
// C / F. The ring runs at its slowest edge, so
//   bottleneck = min over ring edges, over links on the edge's path, of min(NIC, C / F)
//   slowdown   = (1 - comm_fraction) + comm_fraction * NIC / bottleneck.
// A job inside one host talks over NVLink and has slowdown 1.
//
// Two ways to find an edge's path (docs/simulator.md "Performance model"):
//  - route-based, when the cluster carries the fabric's routes (SimCluster::routes, a cluster
//    built from a fabric): the edge's flows follow the fabric's linear forwarding tables link by
//    link (fabric_routes.h), one flow per CA port of the sender (channel k from port k to the
//    peer's port k), so two rings that hash onto the same uplink share it and rings on disjoint
//    routes don't, as on the real fabric. An edge's rate is then its channels' total ideal rate
//    times the worst channel's fraction of its own ideal rate (the channels split the data evenly).
//  - aggregate pipes otherwise (node lists, Clos CSVs without a fabric): one flow per edge
//    crossing, in the tree of domains, the sender's host uplink, its leaf's and pod's uplink
//    when the peer is outside them, then the matching downlinks. Each uplink is one pipe of the
//    domain's total uplink capacity (perfect ECMP: no route or hash collision is modelled).
//
// Limits (stated in docs/simulator.md): the slowdown is fixed when the job starts, from the
// flows running then; it is not revised as other jobs come and go (flow counts are kept exact:
// added on start, removed on finish or preemption). Flows share a link equally (no max-min
// fairness across links, no congestion control, no adaptive routing).
//
// Thread safety: thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

#include "sim/cluster.h"

namespace gpool::sim {

class FabricRoutes;

class NetModel {
 public:
  // Route-based when cluster.routes is set, aggregate pipes otherwise. `cluster` must outlive
  // the model.
  explicit NetModel(const SimCluster& cluster);

  bool routed() const { return routes_ != nullptr; }
  // Adds (sign +1) or removes (-1) the ring flows over `hosts` (distinct host indices in ring
  // order). A single host adds nothing.
  void AddRing(const std::vector<uint32_t>& hosts, int sign);
  // Slowest edge rate of the ring over `hosts`, with the flows as they are now (call after
  // AddRing for the job itself). Infinity for a single host.
  double RingRateGbps(const std::vector<uint32_t>& hosts) const;
  // Run-time multiplier of a job with this communication share on `hosts` (flows already added).
  double Slowdown(double comm_fraction, const std::vector<uint32_t>& hosts) const;

  // Flows on each modelled link (tests). Aggregate model: host up/down, leaf up/down, pod
  // up/down. Route model: directed fabric link (FabricRoutes numbering).
  int32_t host_up_flows(uint32_t h) const { return flows_[HostUp(h)]; }
  int32_t leaf_up_flows(int32_t leaf) const { return flows_[LeafUp(leaf)]; }
  int32_t pod_up_flows(int32_t pod) const { return flows_[PodUp(pod)]; }
  int32_t leaf_down_flows(int32_t leaf) const { return flows_[LeafDown(leaf)]; }
  int32_t pod_down_flows(int32_t pod) const { return flows_[PodDown(pod)]; }
  int32_t link_flows(size_t directed_link) const { return flows_[directed_link]; }
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
  double EdgeRateGbps(uint32_t a, uint32_t b) const;

  const SimCluster* cluster_;
  const FabricRoutes* routes_ = nullptr;
  size_t leaf_base_ = 0, pod_base_ = 0;
  std::vector<double> capacity_;  // Gb/s per directed link
  std::vector<int32_t> flows_;
};

}  // namespace gpool::sim
