#include "fabric/analysis.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <limits>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "common/file.h"
#include "fabric/levels.h"

namespace gpool::fabric {
namespace {

constexpr uint32_t kNoSwitch = std::numeric_limits<uint32_t>::max();
constexpr size_t kMaxAnalysisProblems = 5;

// Direction of `link` when entered from node `from`: 0 = Link::a to Link::b, 1 = the reverse.
inline uint32_t Directed(const Fabric& f, LinkId link, NodeId from) {
  const Link& l = f.link(link);
  return link.value() * 2 + (f.port(l.a).node == from ? 0u : 1u);
}

// Follows the LFTs from CA port `src` to `dst` like TracePath, without allocating: appends the
// directed link indices crossed to `path`. Returns false when the route ends short or loops;
// callers ask TracePath for the reason (it is only needed for messages).
bool Walk(const Fabric& f, const RoutingTables& t, PortId src, Lid dst,
          std::vector<uint32_t>* path) {
  path->clear();
  PortId at = src;
  NodeId cur = f.port(src).node;
  const size_t max_hops = f.num_switches() + 2;
  for (size_t hop = 0; hop <= max_hops; ++hop) {
    LinkId link = f.port(at).link;
    if (!link.valid() || !f.link_usable(link)) return false;
    path->push_back(Directed(f, link, cur));
    const Link& l = f.link(link);
    PortId other = l.a == at ? l.b : l.a;
    const Port& op = f.port(other);
    const Node& next = f.node(op.node);
    if (next.type != NodeType::kSwitch) return op.lid == dst;
    if (next.lid == dst) return true;
    uint8_t out = t.out_port(op.node, dst);
    if (out == kNoRoute || out == 0) return false;
    at = f.port_of(op.node, out);
    if (!at.valid()) return false;
    cur = op.node;
  }
  return false;  // longer than any loop-free route: a loop
}

// Per directed link accumulators with a list of touched entries, so a pattern evaluated many
// times (one shift after another) resets in O(touched).
class LinkLoad {
 public:
  explicit LinkLoad(const Fabric& f) : f_(f), flows_(f.num_links() * 2, 0), gbps_(f.num_links() * 2, 0) {}

  void Add(uint32_t directed, uint64_t flows, double gbps) {
    if (flows_[directed] == 0) touched_.push_back(directed);
    flows_[directed] += flows;
    gbps_[directed] += gbps;
  }
  void Clear() {
    for (uint32_t d : touched_) flows_[d] = 0, gbps_[d] = 0;
    touched_.clear();
  }
  // Worst link by flows (then ratio) and by ratio, without the histogram.
  void Summarise(LoadReport* r) const {
    r->max_flows = 0;
    r->max_load_ratio = 0;
    r->max_load_gbps = 0;
    r->worst_link = LinkId();
    r->directed_links_used = touched_.size();
    for (uint32_t d : touched_) {
      LinkId link(d / 2);
      double ratio = gbps_[d] / f_.link_gbps(link);
      r->max_flows = std::max(r->max_flows, flows_[d]);
      if (ratio > r->max_load_ratio) {
        r->max_load_ratio = ratio;
        r->max_load_gbps = gbps_[d];
        r->worst_link = link;
        r->worst_a_to_b = d % 2 == 0;
      }
    }
  }
  void Export(LoadReport* r) const {
    r->link_flows = flows_;
    r->link_gbps = gbps_;
  }
  std::vector<HistogramBin> Histogram() const {
    std::map<uint64_t, size_t> exact;
    for (uint32_t d : touched_) ++exact[flows_[d]];
    std::vector<HistogramBin> bins;
    constexpr size_t kMaxExact = 16;
    if (exact.size() <= kMaxExact) {
      for (auto [v, n] : exact) bins.push_back({v, v, n});
      return bins;
    }
    for (auto [v, n] : exact) {
      uint64_t lo = std::bit_floor(v);
      uint64_t hi = lo * 2 - 1;
      if (bins.empty() || bins.back().lo != lo) bins.push_back({lo, hi, 0});
      bins.back().links += n;
    }
    return bins;
  }

 private:
  const Fabric& f_;
  std::vector<uint64_t> flows_;
  std::vector<double> gbps_;
  std::vector<uint32_t> touched_;
};

size_t UsableDirectedLinks(const Fabric& f) {
  size_t n = 0;
  for (uint32_t l = 0; l < f.num_links(); ++l) n += f.link_usable(LinkId(l)) ? 2 : 0;
  return n;
}

double PortGbps(const Fabric& f, PortId p) {
  LinkId l = f.port(p).link;
  return l.valid() ? f.link_gbps(l) : 0;
}

void NoteProblem(const Fabric& f, const RoutingTables& t, const Endpoint& s, const Endpoint& d,
                 LoadReport* r) {
  if (r->problems.size() >= kMaxAnalysisProblems) return;
  auto path = TracePath(f, t, s.port, d.lid);
  r->problems.push_back(fmt::format("{} -> {} (LID {}): {}", f.node(s.ca).name, f.node(d.ca).name,
                                    d.lid,
                                    path.ok() ? "route does not reach" : path.status().message()));
}

// One explicit flow per (src, dst) pair, at the source's full link rate.
template <typename PairFn>
void AddPairs(const Fabric& f, const RoutingTables& t, const std::vector<Endpoint>& eps,
              size_t num_pairs, PairFn pair, LinkLoad* load, LoadReport* r,
              std::vector<uint32_t>* path) {
  for (size_t i = 0; i < num_pairs; ++i) {
    auto [si, di] = pair(i);
    const Endpoint& s = eps[si];
    const Endpoint& d = eps[di];
    if (s.ca == d.ca) continue;
    if (!Walk(f, t, s.port, d.lid, path)) {
      ++r->unroutable;
      NoteProblem(f, t, s, d, r);
      continue;
    }
    ++r->flows;
    double g = PortGbps(f, s.port);
    for (uint32_t dl : *path) load->Add(dl, 1, g);
  }
}

StatusOr<LoadReport> AllToAll(const Fabric& f, const RoutingTables& t,
                              const std::vector<Endpoint>& eps, const TrafficOptions& options) {
  LoadReport r;
  const size_t n = eps.size();
  const size_t num_sw = f.num_switches();
  LinkLoad load(f);
  RouteTree tree(f);

  // Endpoints per CA node, so a CA never "sends" to its own other ports.
  std::vector<uint32_t> per_node(f.num_nodes(), 0);
  for (const Endpoint& e : eps) ++per_node[e.ca.value()];
  // Each source's attachment: the switch its port is cabled to (kNoSwitch when it is cabled to a CA
  // or its link is down) and its per-flow rate.
  std::vector<uint32_t> attach(n, kNoSwitch);
  std::vector<double> rate(n, 0);
  std::vector<uint64_t> inj_cnt(num_sw, 0);
  std::vector<double> inj_gbps(num_sw, 0);
  std::vector<std::vector<uint32_t>> eps_of_node(f.num_nodes());
  for (uint32_t i = 0; i < n; ++i) {
    const Endpoint& e = eps[i];
    eps_of_node[e.ca.value()].push_back(i);
    size_t dests = n - per_node[e.ca.value()];
    LinkId l = f.port(e.port).link;
    if (dests == 0 || !f.link_usable(l)) continue;
    rate[i] = f.link_gbps(l) / static_cast<double>(dests);
    NodeId peer = f.link_peer(l, e.ca);
    if (f.node(peer).type != NodeType::kSwitch) continue;
    attach[i] = tree.switch_index(peer);
    ++inj_cnt[attach[i]];
    inj_gbps[attach[i]] += rate[i];
  }

  // Flows that leave each source: counted per destination at the source's switch.
  std::vector<uint64_t> reach_cnt(num_sw, 0);  // destinations reached from switch si
  std::vector<uint64_t> excluded(n, 0);        // of those, the source's own node's ports
  std::vector<uint64_t> acc_cnt(num_sw, 0);
  std::vector<double> acc_gbps(num_sw, 0);

  for (uint32_t di = 0; di < n; ++di) {
    const Endpoint& d = eps[di];
    tree.Build(t, d.lid);
    const auto& same = eps_of_node[d.ca.value()];
    // The destination's node does not send to itself: take its ports out of the injection.
    for (uint32_t e : same)
      if (attach[e] != kNoSwitch) --inj_cnt[attach[e]], inj_gbps[attach[e]] -= rate[e];

    size_t expected = n - same.size();
    size_t routed = 0;
    for (uint32_t si : tree.order()) {
      uint64_t c = acc_cnt[si] + inj_cnt[si];
      double g = acc_gbps[si] + inj_gbps[si];
      ++reach_cnt[si];
      routed += inj_cnt[si];
      acc_cnt[si] = 0;
      acc_gbps[si] = 0;
      if (c == 0 || !tree.out_link(si).valid()) continue;
      NodeId sw = tree.switch_node(si);
      load.Add(Directed(f, tree.out_link(si), sw), c, g);
      uint32_t nx = tree.next(si);
      if (nx != kNoSwitch) acc_cnt[nx] += c, acc_gbps[nx] += g;
    }
    for (uint32_t e : same) {
      if (attach[e] == kNoSwitch) continue;
      ++inj_cnt[attach[e]], inj_gbps[attach[e]] += rate[e];
      if (tree.reaches(attach[e])) ++excluded[e];
    }
    // Sources cabled straight to the destination (back-to-back CAs) need no switch.
    for (uint32_t si = 0; si < n; ++si) {
      if (attach[si] != kNoSwitch || rate[si] == 0 || eps[si].ca == d.ca) continue;
      LinkId l = f.port(eps[si].port).link;
      const Link& k = f.link(l);
      PortId other = k.a == eps[si].port ? k.b : k.a;
      if (f.port(other).lid != d.lid) continue;
      load.Add(Directed(f, l, eps[si].ca), 1, rate[si]);
      ++routed;
    }
    r.flows += routed;
    if (routed < expected) {
      r.unroutable += expected - routed;
      for (uint32_t si = 0; si < n && r.problems.size() < kMaxAnalysisProblems; ++si) {
        if (eps[si].ca == d.ca) continue;
        if (attach[si] == kNoSwitch || !tree.reaches(attach[si])) NoteProblem(f, t, eps[si], d, &r);
      }
    }
  }
  // Source uplinks: one flow per reached destination.
  for (uint32_t i = 0; i < n; ++i) {
    if (attach[i] == kNoSwitch) continue;
    uint64_t c = reach_cnt[attach[i]] - excluded[i];
    if (c) load.Add(Directed(f, f.port(eps[i].port).link, eps[i].ca), c, rate[i] * c);
  }
  load.Summarise(&r);
  r.histogram = load.Histogram();
  if (options.keep_per_link) load.Export(&r);
  return r;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Locality

std::string_view DistanceClassName(DistanceClass c) {
  switch (c) {
    case DistanceClass::kSameNode: return "node";
    case DistanceClass::kSameLeaf: return "leaf";
    case DistanceClass::kSamePod: return "pod";
    case DistanceClass::kFabric: return "fabric";
  }
  return "?";
}

DistanceClass Locality::Classify(NodeId a, NodeId b) const {
  if (a == b) return DistanceClass::kSameNode;
  NodeId la = leaf_of[a.value()], lb = leaf_of[b.value()];
  if (la.valid() && la == lb) return DistanceClass::kSameLeaf;
  int32_t pa = pod_of[a.value()];
  if (num_levels >= 3 && pa >= 0 && pa == pod_of[b.value()]) return DistanceClass::kSamePod;
  return DistanceClass::kFabric;
}

Locality ComputeLocality(const Fabric& f) {
  Locality loc;
  const size_t n = f.num_nodes();
  loc.leaf_of.assign(n, NodeId());
  loc.pod_of.assign(n, -1);
  loc.level.assign(n, -1);
  auto is_switch = [&](NodeId x) { return f.node(x).type == NodeType::kSwitch; };

  SwitchLevels levels = ComputeSwitchLevels(f);
  loc.level = std::move(levels.level);
  loc.inferred = levels.inferred;
  loc.notes = std::move(levels.notes);
  int16_t top = -1;
  for (NodeId s : f.switches()) {
    top = std::max(top, loc.level[s.value()]);
    if (loc.level[s.value()] == 0) {
      loc.leaves.push_back(s);
      loc.leaf_of[s.value()] = s;
    }
  }
  loc.num_levels = top + 1;

  // CAs: the switch behind their first connected port.
  for (NodeId c : f.cas()) {
    for (const Adjacent* a = f.adj_begin(c); a != f.adj_end(c); ++a) {
      if (is_switch(a->peer)) loc.leaf_of[c.value()] = a->peer;
      break;
    }
  }

  // Pods: components of the switches below the top tier (3+ tiers) or of all placed switches.
  const bool below_top = loc.num_levels >= 3;
  auto in_pod_graph = [&](NodeId s) {
    int16_t lv = loc.level[s.value()];
    return lv >= 0 && (!below_top || lv < top);
  };
  std::vector<NodeId> stack;
  auto flood = [&](NodeId start) {
    if (!in_pod_graph(start) || loc.pod_of[start.value()] >= 0) return;
    int32_t pod = loc.num_pods++;
    loc.pod_of[start.value()] = pod;
    stack.assign(1, start);
    while (!stack.empty()) {
      NodeId s = stack.back();
      stack.pop_back();
      for (const Adjacent* a = f.adj_begin(s); a != f.adj_end(s); ++a) {
        if (!is_switch(a->peer) || !in_pod_graph(a->peer) || loc.pod_of[a->peer.value()] >= 0)
          continue;
        loc.pod_of[a->peer.value()] = pod;
        stack.push_back(a->peer);
      }
    }
  };
  for (NodeId s : loc.leaves) flood(s);  // pods numbered in leaf order
  for (NodeId s : f.switches()) flood(s);
  for (NodeId c : f.cas()) {
    NodeId l = loc.leaf_of[c.value()];
    if (l.valid()) loc.pod_of[c.value()] = loc.pod_of[l.value()];
  }
  return loc;
}

// ---------------------------------------------------------------------------------------------
// Endpoints and distances

std::vector<Endpoint> Endpoints(const Fabric& f) {
  std::vector<Endpoint> eps;
  eps.reserve(f.num_cas());
  for (NodeId c : f.cas()) {
    const Node& n = f.node(c);
    for (uint32_t p = n.first_port; p < n.first_port + n.num_ports; ++p) {
      const Port& port = f.port(PortId(p));
      if (port.link.valid() && port.lid != 0) eps.push_back({c, PortId(p), port.lid});
    }
  }
  return eps;
}

StatusOr<PairDistance> Distance(const Fabric& f, const RoutingTables& t, const Locality& loc,
                                const Endpoint& src, const Endpoint& dst) {
  PairDistance d;
  d.cls = loc.Classify(src.ca, dst.ca);
  if (src.port == dst.port) return d;
  // Shortest path over usable links; only switches forward.
  std::vector<int32_t> dist(f.num_nodes(), -1);
  std::vector<NodeId> queue{src.ca};
  dist[src.ca.value()] = 0;
  for (size_t h = 0; h < queue.size() && dist[dst.ca.value()] < 0; ++h) {
    NodeId x = queue[h];
    if (x != src.ca && f.node(x).type != NodeType::kSwitch) continue;
    for (const Adjacent* a = f.adj_begin(x); a != f.adj_end(x); ++a) {
      if (dist[a->peer.value()] >= 0 || !f.link_usable(a->link)) continue;
      if (x == src.ca && a->port != f.port(src.port).num) continue;
      dist[a->peer.value()] = dist[x.value()] + 1;
      queue.push_back(a->peer);
    }
  }
  if (dist[dst.ca.value()] < 0)
    return Status::NotFound(fmt::format("no usable path from {} to {}", f.node(src.ca).name,
                                        f.node(dst.ca).name));
  d.min_links = dist[dst.ca.value()];
  GPOOL_ASSIGN_OR_RETURN(auto path, TracePath(f, t, src.port, dst.lid));
  d.links = static_cast<int>(path.size());
  d.switches = std::max(0, d.links - 1);
  return d;
}

// ---------------------------------------------------------------------------------------------
// RouteTree

namespace {
enum Why : uint8_t { kOk, kNoEntry, kBadPort, kUnconnected, kLinkDown, kSwitchDown, kWrongCa,
                     kLoop, kDownstream };
constexpr int32_t kUnknown = -1, kInProgress = -2, kDead = -3;
}  // namespace

RouteTree::RouteTree(const Fabric& fabric) : fabric_(fabric) {
  sw_index_.assign(fabric.num_nodes(), kNoSwitch);
  for (uint32_t i = 0; i < fabric.switches().size(); ++i)
    sw_index_[fabric.switches()[i].value()] = i;
  size_t s = fabric.num_switches();
  out_link_.resize(s);
  next_.resize(s);
  depth_.resize(s);
  why_.resize(s);
}

void RouteTree::Build(const RoutingTables& t, Lid lid) {
  const Fabric& f = fabric_;
  lid_ = lid;
  const uint32_t s = static_cast<uint32_t>(f.num_switches());
  for (uint32_t si = 0; si < s; ++si) {
    NodeId sw = f.switches()[si];
    out_link_[si] = LinkId();
    next_[si] = kNoSwitch;
    depth_[si] = kDead;
    why_[si] = kOk;
    const Node& node = f.node(sw);
    if (!node.up) { why_[si] = kSwitchDown; continue; }
    uint8_t out = t.out_port(sw, lid);
    if (out == kNoRoute) { why_[si] = kNoEntry; continue; }
    if (out == 0) {
      if (node.lid == lid) depth_[si] = 0; else why_[si] = kBadPort;
      continue;
    }
    PortId p = f.port_of(sw, out);
    if (!p.valid()) { why_[si] = kBadPort; continue; }
    LinkId l = f.port(p).link;
    if (!l.valid()) { why_[si] = kUnconnected; continue; }
    if (!f.link_usable(l)) { why_[si] = kLinkDown; continue; }
    out_link_[si] = l;
    const Link& k = f.link(l);
    const Port& other = f.port(k.a == p ? k.b : k.a);
    if (f.node(other.node).type == NodeType::kSwitch) {
      next_[si] = sw_index_[other.node.value()];
      depth_[si] = kUnknown;
    } else if (other.lid == lid) {
      depth_[si] = 1;
    } else {
      why_[si] = kWrongCa;
    }
  }
  // Resolve chains of next hops; each switch is visited a constant number of times.
  for (uint32_t si = 0; si < s; ++si) {
    if (depth_[si] != kUnknown) continue;
    stack_.clear();
    uint32_t cur = si;
    while (depth_[cur] == kUnknown) {
      depth_[cur] = kInProgress;
      stack_.push_back(cur);
      cur = next_[cur];
    }
    int32_t base = depth_[cur];
    uint8_t why = base == kInProgress ? kLoop : kDownstream;
    for (size_t i = stack_.size(); i-- > 0;) {
      uint32_t x = stack_[i];
      if (base >= 0) {
        depth_[x] = ++base;
      } else {
        depth_[x] = kDead;
        why_[x] = why;
      }
    }
  }
  // Counting sort by depth, farthest first.
  int32_t max_depth = 0;
  for (uint32_t si = 0; si < s; ++si) max_depth = std::max(max_depth, depth_[si]);
  std::vector<uint32_t>& count = stack_;
  count.assign(static_cast<size_t>(max_depth) + 2, 0);
  for (uint32_t si = 0; si < s; ++si)
    if (depth_[si] >= 0) ++count[static_cast<size_t>(max_depth - depth_[si]) + 1];
  for (size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
  order_.resize(count.back());
  for (uint32_t si = 0; si < s; ++si)
    if (depth_[si] >= 0) order_[count[static_cast<size_t>(max_depth - depth_[si])]++] = si;
}

std::string_view RouteTree::failure(uint32_t si) const {
  switch (why_[si]) {
    case kOk: return depth_[si] >= 0 ? "" : "unresolved";
    case kNoEntry: return "no LFT entry";
    case kBadPort: return "LFT names a port the switch does not have";
    case kUnconnected: return "LFT port is not cabled";
    case kLinkDown: return "LFT port's link is down";
    case kSwitchDown: return "switch is down";
    case kWrongCa: return "LFT port leads to a different CA";
    case kLoop: return "routing loop";
    case kDownstream: return "a later switch on the route has no way on";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------
// Patterns and load

StatusOr<TrafficPattern> ParsePattern(const Fabric& f, std::string_view text) {
  TrafficPattern p;
  if (text == "all-to-all") return p;
  if (text == "shift") {
    p.kind = PatternKind::kShift;
    return p;
  }
  if (!text.starts_with("ring:"))
    return Status::InvalidArgument(fmt::format(
        "--pattern '{}': expected all-to-all, shift or ring:MEMBERS", text));
  p.kind = PatternKind::kRing;
  std::string_view members = text.substr(5);
  std::vector<Endpoint> eps = Endpoints(f);
  if (members == "all") {
    p.ring = eps;
  } else if (size_t count = 0; !members.empty() &&
             std::from_chars(members.data(), members.data() + members.size(), count).ptr ==
                 members.data() + members.size()) {
    if (count < 2 || count > eps.size())
      return Status::InvalidArgument(fmt::format(
          "--pattern ring:{}: need 2..{} members (the fabric's endpoints)", count, eps.size()));
    p.ring.assign(eps.begin(), eps.begin() + static_cast<ptrdiff_t>(count));
  } else {
    for (std::string_view name : Split(members, ',')) {
      name = Trim(name);
      auto id = f.FindByName(name);
      if (!id || f.node(*id).type != NodeType::kCa)
        return Status::InvalidArgument(
            fmt::format("--pattern ring: '{}' is not a CA of this fabric", name));
      auto it = std::find_if(eps.begin(), eps.end(), [&](const Endpoint& e) { return e.ca == *id; });
      if (it == eps.end())
        return Status::InvalidArgument(
            fmt::format("--pattern ring: CA '{}' has no connected port with a LID", name));
      p.ring.push_back(*it);
    }
    if (p.ring.size() < 2)
      return Status::InvalidArgument("--pattern ring: needs at least two members");
  }
  return p;
}

std::string PatternName(const TrafficPattern& p) {
  switch (p.kind) {
    case PatternKind::kAllToAll: return "all-to-all";
    case PatternKind::kShift: return "shift";
    case PatternKind::kRing: return fmt::format("ring:{}", p.ring.size());
  }
  return "?";
}

StatusOr<LoadReport> AnalyzeLoad(const Fabric& f, const RoutingTables& t,
                                 const TrafficPattern& pattern, const TrafficOptions& options) {
  std::vector<Endpoint> eps = pattern.kind == PatternKind::kRing ? pattern.ring : Endpoints(f);
  if (eps.size() < 2)
    return Status::FailedPrecondition(
        fmt::format("pattern {} needs at least two endpoints; the fabric has {}",
                    PatternName(pattern), eps.size()));
  if (t.max_lid() < f.max_lid())
    return Status::FailedPrecondition(fmt::format(
        "routing tables cover LIDs up to {} but the fabric uses up to {}", t.max_lid(),
        f.max_lid()));
  const size_t n = eps.size();
  LoadReport r;
  std::vector<uint32_t> path;
  if (pattern.kind == PatternKind::kAllToAll) {
    GPOOL_ASSIGN_OR_RETURN(r, AllToAll(f, t, eps, options));
  } else if (pattern.kind == PatternKind::kRing) {
    LinkLoad load(f);
    AddPairs(f, t, eps, n, [&](size_t i) { return std::pair{i, (i + 1) % n}; }, &load, &r, &path);
    load.Summarise(&r);
    r.histogram = load.Histogram();
    if (options.keep_per_link) load.Export(&r);
  } else {
    // Every shift k = 1..n-1 (or an even sample of them); keep the worst by flows, then ratio.
    size_t total = n - 1;
    size_t evaluate = options.max_shifts == 0 ? total : std::min(total, options.max_shifts);
    LinkLoad load(f);
    LoadReport best;
    bool have_best = false;
    double sum_max = 0;
    size_t flows = 0, unroutable = 0;
    std::vector<std::string> problems;
    for (size_t j = 0; j < evaluate; ++j) {
      size_t k = 1 + j * total / evaluate;
      LoadReport one;
      AddPairs(f, t, eps, n, [&](size_t i) { return std::pair{i, (i + k) % n}; }, &load, &one,
               &path);
      load.Summarise(&one);
      sum_max += static_cast<double>(one.max_flows);
      flows += one.flows;
      unroutable += one.unroutable;
      for (auto& p : one.problems)
        if (problems.size() < kMaxAnalysisProblems) problems.push_back(std::move(p));
      bool worse = !have_best || one.max_flows > best.max_flows ||
                   (one.max_flows == best.max_flows && one.max_load_ratio > best.max_load_ratio);
      if (worse) {
        one.histogram = load.Histogram();
        if (options.keep_per_link) load.Export(&one);
        one.worst_shift = static_cast<uint32_t>(k);
        best = std::move(one);
        have_best = true;
      }
      load.Clear();
    }
    r = std::move(best);
    r.flows = flows;
    r.unroutable = unroutable;
    r.problems = std::move(problems);
    r.shifts_evaluated = evaluate;
    r.mean_max_flows = sum_max / static_cast<double>(evaluate);
  }
  r.pattern = PatternName(pattern);
  r.endpoints = n;
  r.directed_links = UsableDirectedLinks(f);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Bisection (Dinic's max-flow on integer Mb/s capacities)

namespace {

class MaxFlow {
 public:
  explicit MaxFlow(size_t n) : head_(n, -1), level_(n), it_(n) {}
  void AddEdge(uint32_t u, uint32_t v, int64_t cap_uv, int64_t cap_vu) {
    arcs_.push_back({v, head_[u], cap_uv});
    head_[u] = static_cast<int32_t>(arcs_.size() - 1);
    arcs_.push_back({u, head_[v], cap_vu});
    head_[v] = static_cast<int32_t>(arcs_.size() - 1);
  }
  int64_t Run(uint32_t s, uint32_t t) {
    int64_t flow = 0;
    while (Levels(s, t)) {
      it_ = head_;
      while (int64_t pushed = Push(s, t, std::numeric_limits<int64_t>::max())) flow += pushed;
    }
    return flow;
  }

 private:
  struct Arc {
    uint32_t to;
    int32_t next;
    int64_t cap;
  };
  bool Levels(uint32_t s, uint32_t t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::vector<uint32_t> q{s};
    level_[s] = 0;
    for (size_t h = 0; h < q.size(); ++h)
      for (int32_t e = head_[q[h]]; e >= 0; e = arcs_[e].next)
        if (arcs_[e].cap > 0 && level_[arcs_[e].to] < 0) {
          level_[arcs_[e].to] = level_[q[h]] + 1;
          q.push_back(arcs_[e].to);
        }
    return level_[t] >= 0;
  }
  int64_t Push(uint32_t u, uint32_t t, int64_t limit) {
    if (u == t) return limit;
    for (int32_t& e = it_[u]; e >= 0; e = arcs_[e].next) {
      Arc& a = arcs_[e];
      if (a.cap <= 0 || level_[a.to] != level_[u] + 1) continue;
      int64_t got = Push(a.to, t, std::min(limit, a.cap));
      if (got > 0) {
        a.cap -= got;
        arcs_[e ^ 1].cap += got;
        return got;
      }
    }
    return 0;
  }
  std::vector<int32_t> head_;
  std::vector<int32_t> level_;
  std::vector<int32_t> it_;
  std::vector<Arc> arcs_;
};

}  // namespace

StatusOr<BisectionReport> Bisection(const Fabric& f, const Locality& loc) {
  std::vector<NodeId> cas;
  for (NodeId c : f.cas())
    if (f.degree(c) > 0) cas.push_back(c);
  if (cas.size() < 2)
    return Status::FailedPrecondition(
        fmt::format("bisection needs at least two connected CAs; the fabric has {}", cas.size()));
  std::vector<uint32_t> leaf_rank(f.num_nodes(), kNoSwitch);
  for (uint32_t i = 0; i < loc.leaves.size(); ++i) leaf_rank[loc.leaves[i].value()] = i;
  auto key = [&](NodeId c) {
    int32_t pod = loc.pod_of[c.value()];
    NodeId leaf = loc.leaf_of[c.value()];
    return std::tuple(pod < 0 ? std::numeric_limits<int32_t>::max() : pod,
                      leaf.valid() ? leaf_rank[leaf.value()] : kNoSwitch, c.value());
  };
  std::stable_sort(cas.begin(), cas.end(), [&](NodeId a, NodeId b) { return key(a) < key(b); });

  const uint32_t src = static_cast<uint32_t>(f.num_nodes()), sink = src + 1;
  MaxFlow mf(f.num_nodes() + 2);
  auto mbps = [](double gbps) { return static_cast<int64_t>(gbps * 1000 + 0.5); };
  for (uint32_t l = 0; l < f.num_links(); ++l) {
    LinkId id(l);
    if (!f.link_usable(id)) continue;
    const Link& k = f.link(id);
    int64_t c = mbps(f.link_gbps(id));
    mf.AddEdge(f.port(k.a).node.value(), f.port(k.b).node.value(), c, c);
  }
  BisectionReport r;
  const size_t half = cas.size() / 2;
  double inj_a = 0, inj_b = 0;
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;
  for (size_t i = 0; i < cas.size(); ++i) {
    NodeId c = cas[i];
    double inj = 0;
    for (const Adjacent* a = f.adj_begin(c); a != f.adj_end(c); ++a)
      if (f.link_usable(a->link)) inj += f.link_gbps(a->link);
    if (i < half) {
      mf.AddEdge(src, c.value(), kInf, 0);
      inj_a += inj;
      ++r.side_a;
    } else {
      mf.AddEdge(c.value(), sink, kInf, 0);
      inj_b += inj;
      ++r.side_b;
    }
  }
  r.cut_gbps = static_cast<double>(mf.Run(src, sink)) / 1000.0;
  r.injection_gbps = std::min(inj_a, inj_b);
  r.ratio = r.injection_gbps > 0 ? r.cut_gbps / r.injection_gbps : 0;
  return r;
}

}  // namespace gpool::fabric
