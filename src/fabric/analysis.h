// Fabric analysis: locality domains, distances, link load under traffic patterns, bisection.
//
// Everything here runs on the routes the fabric really uses: the LFTs in RoutingTables (computed
// by an engine or read from OpenSM), followed hop by hop. Nothing assumes a particular topology,
// but the locality domains (leaf, pod, fabric) are defined with tree-like fabrics in mind; see
// ComputeLocality for how they are inferred and where the inference stops being meaningful.
//
// Thread safety: all functions are pure over const inputs and may run concurrently. RouteTree
// holds scratch buffers: one object per thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"
#include "fabric/routing.h"

namespace gpool::fabric {

// ---------------------------------------------------------------------------------------------
// Locality

// How far apart two endpoints are in the tree: the smallest domain that holds both.
enum class DistanceClass : uint8_t {
  kSameNode,   // two ports of one CA
  kSameLeaf,   // attached to the same leaf switch
  kSamePod,    // different leaves of one pod (only fabrics with three or more tiers have pods)
  kFabric,     // across the top tier (the spine), or not connected at all
};
// "node", "leaf", "pod", "fabric".
std::string_view DistanceClassName(DistanceClass c);

// Locality domains for the scheduler: for each CA its leaf switch and pod.
//
// Tiers come from ComputeSwitchLevels (levels.h): Node::level when every switch has one, else
// inferred from the switch graph -- from the top tier down when the fabric is a tree layering
// (so leaves without hosts stay leaves), else by hop distance from the switches with CAs.
// Switches not connected to any CA-facing switch get level -1 and belong to no pod.
//
// Pods. With three or more tiers, a pod is a connected component of the switches below the top
// tier (remove the top tier, what stays connected is a pod) -- in a three-level fat-tree these
// are exactly the leaves that share the same set of level-1 switches. With one or two tiers
// (leaf/spine, torus, dragonfly seen as one tier) there is no level between leaf and fabric:
// every connected component of the fabric is one pod, and DistanceClass never says kSamePod.
struct Locality {
  // Indexed by NodeId. For a CA: the switch its first connected port attaches to (invalid when
  // the CA is unconnected or cabled to another CA). For a leaf switch: itself. Others: invalid.
  std::vector<NodeId> leaf_of;
  // Indexed by NodeId: pod of a CA or a switch below the top tier; -1 when none.
  std::vector<int32_t> pod_of;
  // Indexed by NodeId: switch tier (0 = leaf); -1 for CAs and unplaced switches.
  std::vector<int16_t> level;
  int num_levels = 0;      // tiers in use (max level + 1)
  int num_pods = 0;
  bool inferred = false;   // true when levels were inferred rather than read from Node::level
  std::vector<NodeId> leaves;     // leaf switches, in id order
  std::vector<std::string> notes;  // what an operator should know about the inference

  // Smallest common domain of two CAs (or CA nodes of two endpoints).
  DistanceClass Classify(NodeId a, NodeId b) const;
};

Locality ComputeLocality(const Fabric& fabric);

// ---------------------------------------------------------------------------------------------
// Endpoints and distances

// A traffic endpoint: one connected CA port with a LID.
struct Endpoint {
  NodeId ca;
  PortId port;
  Lid lid = 0;
};
// All endpoints in port order (CA by CA).
std::vector<Endpoint> Endpoints(const Fabric& fabric);

struct PairDistance {
  DistanceClass cls = DistanceClass::kFabric;
  int links = 0;     // links the route crosses (CA-leaf-CA is 2)
  int switches = 0;  // switches the route crosses (links - 1)
  int min_links = 0; // shortest possible over usable links (BFS); the route may be longer
};
// Distance between two endpoints over the routes in `tables`. Error when the route does not
// reach (the message names the switch where it ends) or there is no usable path at all.
StatusOr<PairDistance> Distance(const Fabric& fabric, const RoutingTables& tables,
                                const Locality& locality, const Endpoint& src,
                                const Endpoint& dst);

// ---------------------------------------------------------------------------------------------
// Route trees

// LFTs are destination-based, so the routes of all sources toward one destination LID form a
// tree (a forest when some switches cannot reach it). RouteTree materialises that tree for one
// LID at a time, in O(switches), which is what makes all-to-all load and failure impact cheap:
// O(destinations x switches) instead of O(pairs x hops).
//
// Thread-compatible: holds per-fabric scratch buffers; reuse one object across destinations.
class RouteTree {
 public:
  explicit RouteTree(const Fabric& fabric);

  // Recomputes the tree toward `lid` from `tables`.
  void Build(const RoutingTables& tables, Lid lid);

  Lid lid() const { return lid_; }
  // Dense switch index (0..num_switches-1) of a switch node; UINT32_MAX for other nodes.
  uint32_t switch_index(NodeId n) const { return sw_index_[n.value()]; }
  NodeId switch_node(uint32_t si) const { return fabric_.switches()[si]; }
  // True when traffic entering switch `si` reaches the destination.
  bool reaches(uint32_t si) const { return depth_[si] >= 0; }
  // The link traffic at switch `si` leaves on (valid only when reaches() and the destination is
  // not the switch itself).
  LinkId out_link(uint32_t si) const { return out_link_[si]; }
  // The next switch, or UINT32_MAX when the next hop is the destination CA.
  uint32_t next(uint32_t si) const { return next_[si]; }
  // Reaching switches ordered farthest first, so every switch precedes its next hop.
  const std::vector<uint32_t>& order() const { return order_; }
  // Why the route from `si` ends short ("no LFT entry", "link down", "loop", ...); for messages.
  std::string_view failure(uint32_t si) const;

 private:
  const Fabric& fabric_;
  Lid lid_ = 0;
  std::vector<uint32_t> sw_index_;
  std::vector<LinkId> out_link_;
  std::vector<uint32_t> next_;
  std::vector<int32_t> depth_;  // hops to the destination; -1 unknown/-2 in progress/-3.. dead
  std::vector<uint8_t> why_;
  std::vector<uint32_t> order_, stack_;
};

// ---------------------------------------------------------------------------------------------
// Traffic patterns and link load

enum class PatternKind : uint8_t { kAllToAll, kShift, kRing };

struct TrafficPattern {
  PatternKind kind = PatternKind::kAllToAll;
  // Ring: the member endpoints in ring order (each sends to the next, the last to the first).
  std::vector<Endpoint> ring;
};

// Parses "all-to-all", "shift" or "ring:MEMBERS", where MEMBERS is "all", a count N (the first N
// endpoints in order), or a comma-separated list of CA names (first connected port of each).
StatusOr<TrafficPattern> ParsePattern(const Fabric& fabric, std::string_view text);
std::string PatternName(const TrafficPattern& p);

struct TrafficOptions {
  // Shift: how many shifts k to evaluate, spread evenly over 1..N-1; 0 evaluates all of them.
  size_t max_shifts = 0;
  // Fill LoadReport::link_flows/link_gbps (for the worst shift, for shift).
  bool keep_per_link = false;
};

// Index of one direction of a link in per-link arrays: 2 * link + 0 for Link::a to Link::b,
// + 1 for the reverse.
inline uint32_t DirectedIndex(LinkId link, bool a_to_b) { return link.value() * 2 + (a_to_b ? 0 : 1); }

struct HistogramBin {
  uint64_t lo = 0, hi = 0;  // flows per directed link, inclusive
  size_t links = 0;         // directed links in the bin
};

// Link load of one traffic pattern. Links are full duplex, so load is counted per direction:
// "directed link" below means one direction of one cable.
//
// Rate model: every source injects at the rate of its own CA link, split evenly over its flows
// (all-to-all: N-1 flows, shift and ring: one). A link's load in Gb/s is the sum of its flows'
// rates; load_ratio = load / link rate, so > 1 means the link is the bottleneck and flows crossing
// it get (at most) rate / ratio.
struct LoadReport {
  std::string pattern;
  size_t endpoints = 0;
  // Flows routed to their destination, and those whose route does not reach (counted, never
  // loaded). For shift: summed over every evaluated shift.
  size_t flows = 0;
  size_t unroutable = 0;
  std::vector<std::string> problems;  // the first few unroutable flows, human-readable

  uint64_t max_flows = 0;       // most flows on one directed link
  double max_load_gbps = 0;     // load of the directed link with max_load_ratio, in Gb/s
  double max_load_ratio = 0;    // worst load / link rate over all directed links
  LinkId worst_link;            // the directed link with max_load_ratio (invalid when idle)
  bool worst_a_to_b = true;     // its direction (Link::a to Link::b)
  size_t directed_links = 0;    // directed links whose both ends are usable (2 per usable link)
  size_t directed_links_used = 0;
  // Flows per directed link over the used ones: exact values when there are few distinct ones,
  // else power-of-two bins.
  std::vector<HistogramBin> histogram;

  // With keep_per_link: flows and Gb/s per directed link (DirectedIndex), 2 * num_links entries.
  std::vector<uint64_t> link_flows;
  std::vector<double> link_gbps;

  // Shift only: the worst shift k (the one reported above), how many shifts were evaluated and
  // the mean of their per-shift max_flows.
  uint32_t worst_shift = 0;
  size_t shifts_evaluated = 0;
  double mean_max_flows = 0;
};

StatusOr<LoadReport> AnalyzeLoad(const Fabric& fabric, const RoutingTables& tables,
                                 const TrafficPattern& pattern, const TrafficOptions& options);

// ---------------------------------------------------------------------------------------------
// Bisection bandwidth

// Bisection bandwidth by max-flow (Dinic) between the two halves of the CAs, with each link's
// rate as its capacity in each direction (usable links only). The split orders CAs by (pod, leaf,
// id) and cuts the list in the middle, so in a fat-tree it falls on pod (or leaf) boundaries --
// the cut the tree's top tier has to carry. Limits: this is the min cut of that one split, not
// the minimum over all balanced splits (NP-hard in general); for a symmetric fat-tree they agree,
// for irregular fabrics another split may be worse. Routing is not considered: it is the bound
// any routing can reach, not what the LFTs achieve (AnalyzeLoad says that).
struct BisectionReport {
  size_t side_a = 0, side_b = 0;   // CAs on each side
  double cut_gbps = 0;             // max-flow = min cut between the sides, one direction
  double injection_gbps = 0;       // the smaller side's total CA link rate
  double ratio = 0;                // cut / injection: 1 = full bisection, 0.5 = 2:1 blocking
};
StatusOr<BisectionReport> Bisection(const Fabric& fabric, const Locality& locality);

}  // namespace gpool::fabric
