// The routes of a real fabric, for the route-based performance model (perf_model.h).
//
// A SimCluster built from a fabric (ClusterFromFabric) has one host per channel adapter (CA).
// FabricRoutes keeps the fabric and its linear forwarding tables (LFTs: computed by one of gpool's
// routing engines, src/fabric/routing.h, or read from OpenSM's dump) and follows them hop by hop:
// the route of a flow from host a to host b is exactly the links a packet from a's CA port to b's
// LID crosses. Links are directed (each fabric link is two: index 2 * link for the a -> b
// direction, 2 * link + 1 for b -> a), since a ring's flows use each cable one way.
//
// A host with several connected CA ports has one channel per port: channel k of the edge a -> b
// goes from a's k-th port to the LID of b's k-th port (modulo b's port count), as NCCL pins one
// ring channel per NIC.
//
// Following LFTs costs one table lookup per hop, so routes are not cached: a 3-level tree route
// is at most 6 hops. Build() checks that every host reaches every other host's ports, so the hot
// path never meets a broken route (the check follows each route from each CA-facing switch
// once: O(leaf switches x CA ports x hops)).
//
// Thread safety: immutable after Build(); const use from many threads is safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"
#include "fabric/routing.h"

namespace gpool::sim {

struct SimCluster;
struct FabricClusterOptions;

class FabricRoutes {
 public:
  // `cluster` must come from ClusterFromFabric(f) (SimHost::ca names each host's CA). `tables`
  // must be routes of `f` (Route() or an OpenSM LFT dump read into RoutingTables).
  static StatusOr<std::shared_ptr<const FabricRoutes>> Build(fabric::Fabric f,
                                                             fabric::RoutingTables tables,
                                                             const SimCluster& cluster);

  size_t num_directed_links() const { return 2 * fabric_.num_links(); }
  // Capacity of a directed link in Gb/s (the fabric's link rate; 0 when the link is unusable).
  double capacity_gbps(size_t dlink) const { return capacity_[dlink]; }
  int channels(uint32_t host) const { return static_cast<int>(ports_[host].size()); }
  // The rate channel k of host h can inject (its CA port's link rate).
  double channel_gbps(uint32_t host, int k) const { return port_gbps_[host][k]; }
  const std::string& engine() const { return tables_.engine; }
  // The uplinks of each leaf (SimHost::leaf) and pod (SimHost::pod) of the cluster, as directed
  // links: `up` leaves the domain's switches towards a higher tier, `down` enters them from it
  // (the same cables, the other way). A leaf's are its switch's links to other switches; a
  // pod's, the links from its switches (those below the top tier, joined as ClusterFromFabric
  // joins them) to switches outside it. For the fabric load view (load_view.h).
  struct Uplinks {
    std::vector<size_t> up, down;
  };
  const std::vector<Uplinks>& leaf_uplinks() const { return leaf_uplinks_; }
  const std::vector<Uplinks>& pod_uplinks() const { return pod_uplinks_; }
  const fabric::Fabric& fabric() const { return fabric_; }

  // Calls fn(directed link) for each link on the route of channel k from host a to host b
  // (a != b), source CA link first.
  template <typename Fn>
  void ForEachHop(uint32_t a, uint32_t b, int k, Fn&& fn) const {
    const std::vector<fabric::PortId>& pa = ports_[a];
    const std::vector<fabric::PortId>& pb = ports_[b];
    const fabric::PortId src = pa[static_cast<size_t>(k) % pa.size()];
    const fabric::Lid dst = dst_lid_[b][static_cast<size_t>(k) % pb.size()];
    fabric::PortId p = src;
    for (int hop = 0; hop < kMaxHops; ++hop) {
      const fabric::LinkId l = fabric_.port(p).link;
      const fabric::Link& link = fabric_.link(l);
      const bool forward = link.a == p;
      fn(2 * static_cast<size_t>(l.value()) + (forward ? 0 : 1));
      const fabric::PortId in = forward ? link.b : link.a;
      const fabric::NodeId node = fabric_.port(in).node;
      if (fabric_.node(node).type != fabric::NodeType::kSwitch) return;  // arrived at b's CA
      p = fabric_.port_of(node, tables_.out_port(node, dst));
    }
  }

  static constexpr int kMaxHops = 64;

 private:
  FabricRoutes() = default;
  Status CheckReachable(const SimCluster& cluster) const;
  void FindUplinks(const SimCluster& cluster);

  fabric::Fabric fabric_;
  fabric::RoutingTables tables_;
  std::vector<double> capacity_;                       // per directed link
  std::vector<std::vector<fabric::PortId>> ports_;     // per host: its connected CA ports
  std::vector<std::vector<fabric::Lid>> dst_lid_;      // per host: the LIDs of those ports
  std::vector<std::vector<double>> port_gbps_;         // per host: their link rates
  std::vector<Uplinks> leaf_uplinks_, pod_uplinks_;    // per SimCluster leaf / pod
};

// A cluster from the fabric (ClusterFromFabric) that carries its routes, so that the performance
// model follows them: `tables` when given (e.g. OpenSM's LFTs read with fabric::ReadLftDump),
// else routes computed with `route`.
StatusOr<SimCluster> RoutedClusterFromFabric(fabric::Fabric f, const FabricClusterOptions& options,
                                             const fabric::RouteOptions& route,
                                             const fabric::RoutingTables* tables = nullptr);

}  // namespace gpool::sim
