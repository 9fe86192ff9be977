// The InfiniBand fabric model.
//
// A fabric is nodes (channel adapters, switches, routers), their numbered ports, and the links
// between ports. Everything lives in flat arrays indexed by dense ids, with a CSR adjacency built
// once by FabricBuilder::Build(): a 100,000-endpoint fabric is a few arrays, not a web of
// pointers, so it loads, routes and re-routes in milliseconds to seconds.
//
// Port numbering follows InfiniBand: a node's physical ports are 1..num_ports; a switch's port 0
// is its management port (it carries the switch's LID) and is not stored as a Port here.
//
// Thread safety: a built Fabric is immutable except for link state (SetLinkUp/SetNodeUp), which
// needs external synchronisation; concurrent const use is safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "common/units.h"

namespace gpool::fabric {

using NodeId = Id<struct NodeTag>;
using PortId = Id<struct PortTag>;  // global index into Fabric::ports()
using LinkId = Id<struct LinkTag>;
using Lid = uint16_t;  // 0 = unassigned; unicast LIDs are 1..0xBFFF

inline constexpr Lid kMaxUnicastLid = 0xBFFF;

enum class NodeType : uint8_t { kCa, kSwitch, kRouter };
std::string_view NodeTypeName(NodeType t);  // "Ca", "Switch", "Rtr" as ibnetdiscover writes them

enum class LinkSpeed : uint8_t { kSdr, kDdr, kQdr, kFdr10, kFdr, kEdr, kHdr, kNdr, kXdr };
// Per-lane signalling rate in Gb/s, as IB names it: SDR 2.5 ... NDR 100, XDR 200.
double LaneGbps(LinkSpeed s);
std::string_view LinkSpeedName(LinkSpeed s);  // "SDR", ..., "XDR"
std::optional<LinkSpeed> ParseLinkSpeed(std::string_view name);  // case-insensitive

// Lanes: 1x, 2x, 4x, 8x, 12x.
using LinkWidth = uint8_t;
// Parses "4xNDR" style tokens into width and speed.
bool ParseWidthSpeed(std::string_view token, LinkWidth* width, LinkSpeed* speed);

struct Node {
  NodeType type = NodeType::kCa;
  uint64_t guid = 0;         // node GUID (switchguid / caguid)
  uint64_t sysimg_guid = 0;  // 0 when unknown
  std::string name;          // the quoted name in ibnetdiscover ("S-0008f1...", "node001 HCA-1")
  std::string description;   // node description from the comment, if any
  uint16_t num_ports = 0;
  Lid lid = 0;      // switches: the LID of port 0; CAs: the LID of their first connected port
  uint8_t lmc = 0;
  uint32_t first_port = 0;  // ports of this node are [first_port, first_port + num_ports)
  int16_t level = -1;       // switch tier set by generators (0 = leaf); -1 unknown
  bool up = true;           // false when the node has failed
};

struct Port {
  NodeId node;
  // width/speed: this end's active rate. Both ends of a link normally agree; when a dump says they
  // do not, each keeps its own and the link runs at the lower of each (Fabric::link_gbps).
  uint16_t num = 0;          // 1-based port number on its node
  uint64_t guid = 0;         // CA port GUID; 0 for switch ports (they share the switch's)
  Lid lid = 0;               // CA ports only; switch ports use the node's LID
  LinkWidth width = 4;
  LinkSpeed speed = LinkSpeed::kNdr;
  LinkId link;               // invalid when nothing is connected
};

struct Link {
  PortId a, b;
  bool up = true;
};

// One entry of a node's adjacency: through local port `port` over `link` to `peer`.
struct Adjacent {
  NodeId peer;
  uint16_t port;       // local port number
  uint16_t peer_port;  // remote port number
  LinkId link;
};

class Fabric {
 public:
  Fabric() = default;

  size_t num_nodes() const { return nodes_.size(); }
  size_t num_links() const { return links_.size(); }
  size_t num_ports() const { return ports_.size(); }
  size_t num_switches() const { return num_switches_; }
  size_t num_cas() const { return num_cas_; }

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Port>& ports() const { return ports_; }
  const std::vector<Link>& links() const { return links_; }
  const Node& node(NodeId id) const { return nodes_[id.value()]; }
  const Port& port(PortId id) const { return ports_[id.value()]; }
  const Link& link(LinkId id) const { return links_[id.value()]; }
  // Port `num` (1-based) of `node`; invalid PortId when out of range.
  PortId port_of(NodeId node, uint16_t num) const;

  // Neighbours of a node in port order (only connected ports). Includes links that are down;
  // callers check link_usable().
  const Adjacent* adj_begin(NodeId n) const { return &adj_[adj_offset_[n.value()]]; }
  const Adjacent* adj_end(NodeId n) const { return &adj_[adj_offset_[n.value() + 1]]; }
  size_t degree(NodeId n) const { return adj_offset_[n.value() + 1] - adj_offset_[n.value()]; }

  // A link carries traffic when it and both its end nodes are up.
  bool link_usable(LinkId l) const;
  // Rate of a link in Gb/s: lanes times the lane rate of the slower end.
  double link_gbps(LinkId l) const;
  // The other end of link `l` seen from `n`.
  NodeId link_peer(LinkId l, NodeId n) const;

  std::optional<NodeId> FindByName(std::string_view name) const;
  std::optional<NodeId> FindByGuid(uint64_t guid) const;
  // The node owning a LID (switch LID or CA port LID), if any.
  std::optional<NodeId> FindByLid(Lid lid) const;

  // Ids of all CAs / all switches in id order.
  const std::vector<NodeId>& cas() const { return cas_; }
  const std::vector<NodeId>& switches() const { return switches_; }

  // Highest assigned LID.
  Lid max_lid() const { return max_lid_; }
  // The LID a packet to CA port `p` (or switch `n`) is addressed to.
  Lid lid_of_port(PortId p) const;

  // Failure injection. Returns NotFound for a bad id.
  Status SetLinkUp(LinkId l, bool up);
  Status SetNodeUp(NodeId n, bool up);

  // Approximate heap bytes used by the model (for the bytes-per-HCA benchmark).
  size_t MemoryBytes() const;

 private:
  friend class FabricBuilder;
  void Index();

  std::vector<Node> nodes_;
  std::vector<Port> ports_;
  std::vector<Link> links_;
  std::vector<uint32_t> adj_offset_;  // size num_nodes + 1
  std::vector<Adjacent> adj_;
  std::vector<NodeId> cas_, switches_;
  std::vector<NodeId> lid_owner_;  // indexed by LID
  std::unordered_map<std::string, NodeId> by_name_;
  std::unordered_map<uint64_t, NodeId> by_guid_;
  size_t num_switches_ = 0, num_cas_ = 0;
  Lid max_lid_ = 0;
};

struct NodeSpec {
  NodeType type = NodeType::kCa;
  std::string name;
  uint16_t num_ports = 1;
  uint64_t guid = 0;  // 0: derived from the node id
  uint64_t sysimg_guid = 0;
  std::string description;
  Lid lid = 0;
  uint8_t lmc = 0;
  int16_t level = -1;
};
struct LinkSpec {
  LinkWidth width = 4;
  LinkSpeed speed = LinkSpeed::kNdr;
};


// Builds a Fabric. Nodes are added with their port counts, then links by (node, port) pairs.
// Build() checks consistency (each port linked at most once, port numbers in range), fills the
// CSR adjacency and, if asked, assigns LIDs the way OpenSM does on a fresh subnet (switches and
// CA ports numbered in discovery order from 1).
//
// Thread-compatible.
class FabricBuilder {
 public:
  // Adds a node; names must be unique. Returns its id.
  StatusOr<NodeId> AddNode(NodeSpec spec);
  // Connects port a_port of a to port b_port of b. Linking the same pair of ports twice with the
  // same ends is accepted once (ibnetdiscover lists each link from both sides).
  Status AddLink(NodeId a, uint16_t a_port, NodeId b, uint16_t b_port, LinkSpec spec = {});
  // Sets a CA port's GUID and LID (as read from a dump).
  Status SetPortAddress(NodeId n, uint16_t port, uint64_t guid, Lid lid);
  // Sets one end's width and speed after AddLink, for a link whose ends report different rates
  // (a dump lists each end's own). The link runs at the lower of each (Fabric::link_gbps);
  // RateMismatches (compare.h) lists such links. NotFound for a bad port, FailedPrecondition for
  // an unconnected one.
  Status SetPortRate(NodeId n, uint16_t port, LinkSpec rate);

  std::optional<NodeId> FindByName(std::string_view name) const;
  size_t num_nodes() const { return f_.nodes_.size(); }

  struct BuildOptions {
    // Assign LIDs to every node/port that has none (CAs get one per connected port).
    bool assign_lids = true;
  };
  StatusOr<Fabric> Build(const BuildOptions& options);
  StatusOr<Fabric> Build() { return Build(BuildOptions{}); }

 private:
  Fabric f_;
};

// Formats a GUID as ibnetdiscover does: 0x0008f10403960558.
std::string FormatGuid(uint64_t guid);

}  // namespace gpool::fabric
