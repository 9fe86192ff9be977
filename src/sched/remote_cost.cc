#include "sched/remote_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace gpool::sched {
namespace {

// Usable uplink bandwidth per node of domain d, or +inf when unknown.
double PerNodeUplinkGbps(const ClusterState& state, DomainId d) {
  const DomainSpec& dom = state.domain(d);
  if (!(dom.bandwidth_gbps > 0)) return INFINITY;
  size_t nodes = 0;
  if (dom.level == Level::kLeaf) {
    nodes = state.leaf_nodes(d).size();
  } else {
    for (DomainId leaf : state.children(d)) nodes += state.leaf_nodes(leaf).size();
  }
  return nodes == 0 ? INFINITY : dom.bandwidth_gbps / static_cast<double>(nodes);
}

}  // namespace

Status ValidateRemoteCostModel(const RemoteCostModel& m) {
  auto err = [](std::string_view field, double v, std::string_view want) {
    return Status::InvalidArgument(fmt::format("remote.{}: must be {}, got {}", field, want, v));
  };
  if (!(m.call_overhead >= 0) || !std::isfinite(m.call_overhead)) {
    return err("call_overhead", m.call_overhead, ">= 0");
  }
  if (!(m.transfer_share >= 0 && m.transfer_share <= 1)) {
    return err("transfer_share", m.transfer_share, "in 0..1");
  }
  if (!(m.host_link_gbps > 0) || !std::isfinite(m.host_link_gbps)) {
    return err("host_link_gbps", m.host_link_gbps, "> 0");
  }
  if (!(m.node_link_gbps > 0) || !std::isfinite(m.node_link_gbps)) {
    return err("node_link_gbps", m.node_link_gbps, "> 0");
  }
  if (!(m.copy_efficiency > 0 && m.copy_efficiency <= 1)) {
    return err("copy_efficiency", m.copy_efficiency, "in (0, 1]");
  }
  return Status::Ok();
}

double EstimateSlowdown(const ClusterState& state, NodeId host, NodeId gpu_node,
                        const RemoteCostModel& m) {
  if (host == gpu_node) return 1 + m.call_overhead;
  double path = m.node_link_gbps;
  Level level = Level::kFabric;
  if (!state.Distance(host, gpu_node, &level)) return INFINITY;  // different fabrics
  {
    // Uplinks crossed: both leaves' when the nodes are in different leaves, both pods' when in
    // different pods. The narrowest per-node share bounds the copy.
    if (level >= Level::kPod) {
      path = std::min({path, PerNodeUplinkGbps(state, state.ancestor(host, Level::kLeaf)),
                       PerNodeUplinkGbps(state, state.ancestor(gpu_node, Level::kLeaf))});
    }
    if (level >= Level::kFabric) {
      path = std::min({path, PerNodeUplinkGbps(state, state.ancestor(host, Level::kPod)),
                       PerNodeUplinkGbps(state, state.ancestor(gpu_node, Level::kPod))});
    }
  }
  path *= m.copy_efficiency;
  return 1 + m.call_overhead + m.transfer_share * std::max(0.0, m.host_link_gbps / path - 1);
}

}  // namespace gpool::sched
