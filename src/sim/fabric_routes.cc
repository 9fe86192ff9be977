#include "sim/fabric_routes.h"

#include <algorithm>
#include <deque>
#include <set>

#include <fmt/format.h>

#include "sim/cluster.h"

namespace gpool::sim {

using fabric::LinkId;
using fabric::NodeId;
using fabric::NodeType;
using fabric::PortId;

StatusOr<std::shared_ptr<const FabricRoutes>> FabricRoutes::Build(fabric::Fabric f,
                                                                  fabric::RoutingTables tables,
                                                                  const SimCluster& cluster) {
  std::shared_ptr<FabricRoutes> r(new FabricRoutes());
  r->fabric_ = std::move(f);
  r->tables_ = std::move(tables);
  const fabric::Fabric& fab = r->fabric_;
  r->capacity_.assign(2 * fab.num_links(), 0);
  for (size_t l = 0; l < fab.num_links(); ++l) {
    const LinkId id(static_cast<uint32_t>(l));
    if (!fab.link_usable(id)) continue;
    r->capacity_[2 * l] = r->capacity_[2 * l + 1] = fab.link_gbps(id);
  }
  const size_t n = cluster.hosts.size();
  r->ports_.resize(n);
  r->dst_lid_.resize(n);
  r->port_gbps_.resize(n);
  for (size_t h = 0; h < n; ++h) {
    const SimHost& host = cluster.hosts[h];
    if (host.ca < 0 || static_cast<size_t>(host.ca) >= fab.num_nodes() ||
        fab.node(NodeId(static_cast<uint32_t>(host.ca))).type != NodeType::kCa) {
      return Status::InvalidArgument(fmt::format(
          "route model: host {} ({}) has no channel adapter in the fabric (cluster not built from it?)",
          h, host.name));
    }
    const NodeId ca(static_cast<uint32_t>(host.ca));
    for (auto* a = fab.adj_begin(ca); a != fab.adj_end(ca); ++a) {
      if (!fab.link_usable(a->link)) continue;
      const PortId p = fab.port_of(ca, a->port);
      if (fab.lid_of_port(p) == 0) {
        return Status::InvalidArgument(
            fmt::format("route model: CA '{}' port {} has no LID", fab.node(ca).name, a->port));
      }
      r->ports_[h].push_back(p);
      r->dst_lid_[h].push_back(fab.lid_of_port(p));
      r->port_gbps_[h].push_back(fab.link_gbps(a->link));
    }
    if (r->ports_[h].empty()) {
      return Status::InvalidArgument(
          fmt::format("route model: CA '{}' has no usable link", fab.node(ca).name));
    }
  }
  GPOOL_RETURN_IF_ERROR(r->CheckReachable(cluster));
  r->FindUplinks(cluster);
  return std::shared_ptr<const FabricRoutes>(std::move(r));
}

void FabricRoutes::FindUplinks(const SimCluster& cluster) {
  const fabric::Fabric& fab = fabric_;
  const std::vector<int> tier = SwitchTiers(fab);  // as ClusterFromFabric numbers them
  int top = 0;
  for (int t : tier) top = std::max(top, t);
  // The directed links from the switches in `inside` to switches outside it.
  auto uplinks_of = [&](const std::vector<NodeId>& inside) {
    std::set<uint32_t> in;
    for (NodeId s : inside) in.insert(s.value());
    Uplinks u;
    for (NodeId s : inside) {
      for (auto* a = fab.adj_begin(s); a != fab.adj_end(s); ++a) {
        if (fab.node(a->peer).type == NodeType::kCa || in.count(a->peer.value())) continue;
        const fabric::Link& link = fab.link(a->link);
        const bool forward = fab.port(link.a).node == s;  // direction 0 runs a -> b
        const size_t l = 2 * static_cast<size_t>(a->link.value());
        u.up.push_back(forward ? l : l + 1);
        u.down.push_back(forward ? l + 1 : l);
      }
    }
    return u;
  };
  // Each leaf's switch: the first switch its hosts' CAs link to (ClusterFromFabric's choice).
  std::vector<NodeId> leaf_switch(cluster.leaf_names.size());
  std::vector<std::vector<NodeId>> pod_leaves(cluster.pod_names.size());
  for (const SimHost& h : cluster.hosts) {
    if (leaf_switch[h.leaf].valid()) continue;
    const NodeId ca(static_cast<uint32_t>(h.ca));
    for (auto* a = fab.adj_begin(ca); a != fab.adj_end(ca); ++a) {
      if (fab.node(a->peer).type != NodeType::kCa) {
        leaf_switch[h.leaf] = a->peer;
        pod_leaves[h.pod].push_back(a->peer);
        break;
      }
    }
  }
  leaf_uplinks_.clear();
  for (NodeId s : leaf_switch) leaf_uplinks_.push_back(s.valid() ? uplinks_of({s}) : Uplinks{});
  // A pod's switches: its leaves and every switch below the top tier joined to them.
  pod_uplinks_.clear();
  for (const auto& leaves : pod_leaves) {
    std::vector<NodeId> inside;
    std::set<uint32_t> seen;
    std::deque<NodeId> todo(leaves.begin(), leaves.end());
    for (NodeId s : leaves) seen.insert(s.value());
    while (!todo.empty()) {
      const NodeId s = todo.front();
      todo.pop_front();
      inside.push_back(s);
      if (top < 2) continue;  // two tiers: a pod is one leaf
      for (auto* a = fab.adj_begin(s); a != fab.adj_end(s); ++a) {
        const int t = tier[a->peer.value()];
        if (t < 0 || t >= top || !seen.insert(a->peer.value()).second) continue;
        todo.push_back(a->peer);
      }
    }
    pod_uplinks_.push_back(uplinks_of(inside));
  }
}

Status FabricRoutes::CheckReachable(const SimCluster& cluster) const {
  const fabric::Fabric& fab = fabric_;
  // Every switch a host port hangs off, once.
  std::set<uint32_t> edge;
  for (const auto& ports : ports_) {
    for (PortId p : ports) {
      const fabric::Link& l = fab.link(fab.port(p).link);
      edge.insert(fab.port(l.a == p ? l.b : l.a).node.value());
    }
  }
  for (uint32_t s0 : edge) {
    const NodeId start(s0);
    if (fab.node(start).type != NodeType::kSwitch) {
      return Status::InvalidArgument(fmt::format(
          "route model: CA linked to '{}', not a switch (back-to-back hosts are not modelled)",
          fab.node(start).name));
    }
    for (size_t b = 0; b < ports_.size(); ++b) {
      const NodeId want = fab.port(ports_[b][0]).node;
      for (fabric::Lid dst : dst_lid_[b]) {
        NodeId node = start;
        int hop = 0;
        for (; hop < kMaxHops && fab.node(node).type == NodeType::kSwitch; ++hop) {
          const uint8_t out = tables_.out_port(node, dst);
          const PortId p = out == fabric::kNoRoute || out == 0 ? PortId() : fab.port_of(node, out);
          if (!p.valid() || !fab.port(p).link.valid() || !fab.link_usable(fab.port(p).link)) {
            return Status::FailedPrecondition(fmt::format(
                "route model: no route at switch '{}' to LID {} (host {}); the {} tables do not "
                "cover this fabric",
                fab.node(node).name, dst, cluster.hosts[b].name, tables_.engine));
          }
          node = fab.link_peer(fab.port(p).link, node);
        }
        if (node != want) {
          return Status::FailedPrecondition(fmt::format(
              "route model: the route from switch '{}' to LID {} (host {}) {}", fab.node(start).name,
              dst, cluster.hosts[b].name,
              hop >= kMaxHops ? "loops" : "ends at '" + fab.node(node).name + "'"));
        }
      }
    }
  }
  return Status::Ok();
}

StatusOr<SimCluster> RoutedClusterFromFabric(fabric::Fabric f, const FabricClusterOptions& options,
                                             const fabric::RouteOptions& route,
                                             const fabric::RoutingTables* tables) {
  GPOOL_ASSIGN_OR_RETURN(SimCluster c, ClusterFromFabric(f, options));
  fabric::RoutingTables t;
  if (tables != nullptr) {
    t = *tables;
  } else {
    GPOOL_ASSIGN_OR_RETURN(t, fabric::Route(f, route));
  }
  GPOOL_ASSIGN_OR_RETURN(c.routes, FabricRoutes::Build(std::move(f), std::move(t), c));
  return c;
}

}  // namespace gpool::sim
