// Routing: linear forwarding tables (LFTs) computed by gpool's engines, or read from OpenSM.
//
// An LFT maps, per switch, a destination LID to the output port, exactly what OpenSM programs
// into real switches. gpool computes them to predict contention and plan (minhop, updn, ftree,
// dor); in production the tables are OpenSM's, read from its dumps into the same structure, so
// every analysis runs on the routes the fabric really uses.
//
// Thread safety: RoutingTables is a value; const use from many threads is safe.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"

namespace gpool::fabric {

inline constexpr uint8_t kNoRoute = 255;

// Torus coordinates that `dor` routes by, kept with its tables so that the per-hop virtual lane
// (dateline rule, see HopVls) can be recomputed by Verify and the analysis code.
struct TorusLayout {
  std::array<uint16_t, 3> dims = {1, 1, 1};
  std::vector<std::array<uint16_t, 3>> coord;  // indexed by NodeId; switches only
};

class RoutingTables {
 public:
  RoutingTables() = default;
  // Empty tables (every entry kNoRoute) for every switch of `f`.
  explicit RoutingTables(const Fabric& f);

  // Output port of switch `sw` for `lid`; kNoRoute when unset; 0 means the switch itself.
  uint8_t out_port(NodeId sw, Lid lid) const {
    uint32_t si = switch_index_[sw.value()];
    return lid > max_lid_ ? kNoRoute : lft_[static_cast<size_t>(si) * stride_ + lid];
  }
  void set_out_port(NodeId sw, Lid lid, uint8_t port) {
    lft_[static_cast<size_t>(switch_index_[sw.value()]) * stride_ + lid] = port;
  }
  Lid max_lid() const { return max_lid_; }

  std::string engine;               // the engine that produced the routes ("ftree", "opensm:updn")
  std::vector<std::string> notes;   // what an operator should know, e.g. a fallback to updn
  // Virtual lanes the engine uses; vl_of(src switch, dst lid) for engines that split layers
  // (dor on a torus uses 2 to break ring cycles). Empty means every route is on VL 0.
  uint8_t num_vls = 1;
  std::vector<uint8_t> dst_vl;  // indexed by destination LID when the VL depends on it only
  // Set by dor: VLs change per hop at each ring's dateline (see HopVls); num_vls is then 2.
  std::shared_ptr<const TorusLayout> torus;

 private:
  Lid max_lid_ = 0;
  size_t stride_ = 0;
  std::vector<uint32_t> switch_index_;  // NodeId -> row; UINT32_MAX for non-switches
  std::vector<uint8_t> lft_;
};

enum class Engine { kMinhop, kUpdn, kFtree, kDor };
std::string_view EngineName(Engine e);
StatusOr<Engine> ParseEngine(std::string_view name);

struct RouteOptions {
  Engine engine = Engine::kMinhop;
  // updn/ftree roots (top-tier switches). Empty: derived from Node::level, else by BFS rank.
  std::vector<NodeId> roots;
};

// Computes LFTs for every switch and every destination LID of the fabric, over usable links.
StatusOr<RoutingTables> Route(const Fabric& fabric, const RouteOptions& options);

// Recomputes only the entries for `dest_lids` after a failure (incremental re-route). The engine
// is the one recorded in `tables`. Destinations whose routes did not cross the failed element
// keep their entries bit for bit.
Status Reroute(const Fabric& fabric, std::span<const Lid> dest_lids, const RouteOptions& options,
               RoutingTables* tables);

// Follows the LFTs from CA port `src` to `dst`. Returns the links crossed in order, or an error
// naming the switch where the route ends or loops.
StatusOr<std::vector<LinkId>> TracePath(const Fabric& fabric, const RoutingTables& tables,
                                        PortId src, Lid dst);

// The virtual lane of each link of `path` (as TracePath returns it, starting at a CA). VL 0
// unless the tables say otherwise: dst_vl[dst] when set; with a torus layout (dor), the dateline
// rule: within one dimension a packet starts on VL 0 and moves to VL 1 on the hop that wraps
// around the ring (from coordinate n-1 to 0 or back), keeping VL 1 until it turns into the next
// dimension. InfiniBand realises this with one SL bit per dimension ("this path wraps") and
// SL-to-VL tables by switch position, as OpenSM's torus-2QoS does.
std::vector<uint8_t> HopVls(const Fabric& fabric, const RoutingTables& tables,
                            std::span<const LinkId> path, Lid dst);

struct VerifyOptions {
  bool check_deadlock = true;  // build the channel dependency graph per VL and look for cycles
  // Above this many destination LIDs, check every k-th destination only (all sources each) and
  // say so in the report; 0 = all. The cost is O(destinations x switches).
  size_t max_destinations = 4096;
};
struct VerifyReport {
  size_t pairs_checked = 0;
  size_t unreachable = 0;   // CA pairs with no route
  size_t loops = 0;         // CA pairs whose route revisits a switch
  bool deadlock_free = true;
  size_t destinations_checked = 0;
  bool sampled = false;              // true when max_destinations cut the destinations
  std::vector<std::string> problems;  // the first few, human-readable
  bool ok() const { return unreachable == 0 && loops == 0 && deadlock_free; }
};
// Checks every CA-port-to-CA-port pair (over usable links; CAs whose own link is down are not
// endpoints): reachable, loop-free, and (if asked) that the channel dependency graph of (link,
// VL) channels is acyclic. Per-hop VLs follow HopVls.
VerifyReport Verify(const Fabric& fabric, const RoutingTables& tables,
                    const VerifyOptions& options);

}  // namespace gpool::fabric
