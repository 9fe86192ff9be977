// Internal to the routing engines: the switch-only view of a fabric that every engine routes on.
//
// SwitchGraph is built once per Route()/Reroute() call from the usable links: dense switch
// indices, a CSR of switch-to-switch links, and per switch the CA ports cabled to it (the
// destination LIDs that share the switch's BFS). Engines then run one BFS per destination switch
// over flat arrays, with no per-entry allocation.
//
// Thread-compatible; not part of the public API.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fabric/model.h"
#include "fabric/routing.h"

namespace gpool::fabric::internal {

inline constexpr uint32_t kNoSwitch = UINT32_MAX;
inline constexpr uint32_t kInf = UINT32_MAX;

struct SwitchEdge {
  uint32_t peer;       // switch index of the neighbour
  uint16_t port;       // local port number
  uint16_t peer_port;  // the neighbour's port number
  uint32_t gport;      // global PortId of the local port (usage counters are indexed by it)
  uint32_t peer_gport;
};

struct CaDest {
  Lid lid;
  uint16_t port;  // the switch port the CA port is cabled to
};

struct SwitchGraph {
  explicit SwitchGraph(const Fabric& f);

  const Fabric& fabric;
  std::vector<NodeId> nodes;          // switch index -> node
  std::vector<uint32_t> index;        // node -> switch index, kNoSwitch for non-switches
  std::vector<uint32_t> edge_offset;  // CSR over usable switch-to-switch links
  std::vector<SwitchEdge> edges;
  std::vector<uint32_t> ca_offset;    // CSR: CA ports cabled (by a usable link) to each switch
  std::vector<CaDest> cas;
  std::vector<uint32_t> lid_switch;   // LID -> switch index that delivers it (kNoSwitch: none)

  size_t size() const { return nodes.size(); }
  std::span<const SwitchEdge> adj(uint32_t s) const {
    return {edges.data() + edge_offset[s], edges.data() + edge_offset[s + 1]};
  }
  std::span<const CaDest> ca_dests(uint32_t s) const {
    return {cas.data() + ca_offset[s], cas.data() + ca_offset[s + 1]};
  }
  bool is_switch_lid(Lid lid) const;
};

// Per-port route counts (CA destination LIDs routed out of each port), indexed by global
// PortId, as OpenSM's minhop and ftree count them to balance ties.
using Usage = std::vector<uint32_t>;

// Counts CA-destination entries of `tables` per output port, skipping the LIDs in `skip`
// (sorted), which are about to be recomputed.
Usage CountUsage(const SwitchGraph& g, const RoutingTables& t, std::span<const Lid> skip);

// Per-destination-LID mask: which LIDs an engine call must (re)compute.
class LidSet {
 public:
  LidSet() = default;
  // All LIDs when `lids` is null.
  LidSet(Lid max_lid, const std::vector<Lid>* lids);
  bool contains(Lid lid) const { return all_ || (lid < mask_.size() && mask_[lid]); }
  bool all() const { return all_; }

 private:
  bool all_ = true;
  std::vector<uint8_t> mask_;
};

// The shared core of minhop and updn: for every switch with candidates for destination switch
// `dst`, route the selected LIDs delivered by `dst` through the least-used candidate port
// (ties: lowest port). `cand_offset`/`cand` is a CSR over switch indices listing the candidate
// ports. Switch LIDs are routed but not counted.
void AssignBalanced(const SwitchGraph& g, uint32_t dst, const std::vector<uint32_t>& cand_offset,
                    const std::vector<const SwitchEdge*>& cand, const LidSet& lids, Usage* usage,
                    RoutingTables* t);

// Engines. Each fills the entries of `lids` (all when lids.all()) and appends notes. An error
// only for inputs the engine cannot work with at all (dor without coordinates).
Status RouteMinhop(const SwitchGraph& g, const LidSet& lids, Usage* usage, RoutingTables* t);
// up*/down*: ranks by BFS from `roots` (switch indices; empty = automatic choice).
Status RouteUpdn(const SwitchGraph& g, const LidSet& lids, const std::vector<uint32_t>& roots,
                 Usage* usage, RoutingTables* t);
// ftree: returns FailedPrecondition (with the reason) when the fabric is not a fat-tree or a
// CA-facing switch is left without a route; the caller then falls back to updn.
Status RouteFtree(const SwitchGraph& g, const LidSet& lids, Usage* usage, RoutingTables* t);
Status RouteDor(const SwitchGraph& g, const LidSet& lids, RoutingTables* t);

// Fat-tree levels of every switch, as ComputeSwitchLevels (levels.h) gives them. Empty with *why
// set when the usable links do not form levels.
std::vector<int> FatTreeLevels(const SwitchGraph& g, std::string* why);

// Connected component id of every switch over the graph's usable links.
std::vector<uint32_t> Components(const SwitchGraph& g);

}  // namespace gpool::fabric::internal
