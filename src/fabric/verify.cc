// Verify(): reachability, loops and deadlock freedom of a set of LFTs.
//
// Routing is destination-based, so all CA ports on one switch share their path to a destination
// beyond the first link. Verify therefore walks, per destination LID, from each CA-facing switch
// and memoises the outcome per switch: O(destinations x switches), not O(pairs x hops).
// Deadlock freedom is checked on the channel dependency graph: one node per (directed
// switch-to-switch link, VL), an edge where a route holds one channel while asking for the next;
// the routing is deadlock-free when that graph is acyclic (Dally and Seitz). Injection and
// ejection channels cannot close a cycle and are left out.
#include <algorithm>
#include <cstdlib>

#include <fmt/format.h>

#include "fabric/route_internal.h"
#include "fabric/routing.h"

namespace gpool::fabric {

using internal::kNoSwitch;
using internal::SwitchGraph;

namespace {

constexpr size_t kMaxProblems = 8;

// Per-hop VL state for the dateline rule: the VL of the last hop and its dimension (3 = none).
struct VlState {
  uint8_t vl = 0;
  uint8_t dim = 3;
};

// The VL of hop a->b given the state after the previous hop.
VlState NextVl(const TorusLayout* torus, NodeId a, NodeId b, VlState prev) {
  if (!torus) return prev;
  const auto& ca = torus->coord[a.value()];
  const auto& cb = torus->coord[b.value()];
  uint8_t dim = 3;
  for (uint8_t k = 0; k < 3; ++k)
    if (ca[k] != cb[k]) dim = k;
  if (dim == 3) return prev;
  int diff = std::abs(static_cast<int>(ca[dim]) - static_cast<int>(cb[dim]));
  bool wrap = torus->dims[dim] > 2 && diff == torus->dims[dim] - 1;
  VlState next;
  next.dim = dim;
  next.vl = (dim == prev.dim && prev.vl == 1) || wrap ? 1 : 0;
  return next;
}

uint8_t StartVl(const RoutingTables& t, Lid dst) {
  return dst < t.dst_vl.size() ? t.dst_vl[dst] : 0;
}

// Directed channel id of link `l` when left from node `from`.
uint32_t Channel(const Fabric& f, LinkId l, NodeId from) {
  return l.value() * 2 + (f.port(f.link(l).a).node == from ? 0 : 1);
}

// Detects a cycle in the graph given by sorted, unique (from << 32 | to) edges (Kahn).
bool HasCycle(std::vector<uint64_t>& edges, uint32_t num_nodes) {
  std::vector<uint32_t> indeg(num_nodes, 0), offset(num_nodes + 1, 0);
  for (uint64_t e : edges) {
    ++offset[(e >> 32) + 1];
    ++indeg[e & 0xffffffffu];
  }
  for (uint32_t i = 0; i < num_nodes; ++i) offset[i + 1] += offset[i];
  // Edges are sorted by source, so edges[offset[u] .. offset[u+1]) are u's successors.
  std::vector<uint32_t> stack;
  for (uint32_t i = 0; i < num_nodes; ++i)
    if (indeg[i] == 0) stack.push_back(i);
  size_t removed = 0;
  while (!stack.empty()) {
    uint32_t u = stack.back();
    stack.pop_back();
    ++removed;
    for (uint32_t k = offset[u]; k < offset[u + 1]; ++k)
      if (--indeg[edges[k] & 0xffffffffu] == 0) stack.push_back(edges[k] & 0xffffffffu);
  }
  return removed != num_nodes;
}

}  // namespace

std::vector<uint8_t> HopVls(const Fabric& fabric, const RoutingTables& tables,
                            std::span<const LinkId> path, Lid dst) {
  std::vector<uint8_t> vls(path.size(), StartVl(tables, dst));
  const TorusLayout* torus = tables.torus.get();
  if (!torus || path.empty()) return vls;
  VlState st{StartVl(tables, dst), 3};
  for (size_t i = 1; i + 1 <= path.size(); ++i) {
    const Link& l = fabric.link(path[i]);
    NodeId a = fabric.port(l.a).node, b = fabric.port(l.b).node;
    if (fabric.node(a).type != NodeType::kSwitch || fabric.node(b).type != NodeType::kSwitch) {
      vls[i] = st.vl;
      continue;
    }
    // Orient the hop: it leaves the node the previous link entered.
    const Link& prev = fabric.link(path[i - 1]);
    NodeId p1 = fabric.port(prev.a).node, p2 = fabric.port(prev.b).node;
    NodeId from = (a == p1 || a == p2) ? a : b;
    NodeId to = from == a ? b : a;
    st = NextVl(torus, from, to, st);
    vls[i] = st.vl;
  }
  return vls;
}

VerifyReport Verify(const Fabric& fabric, const RoutingTables& tables,
                    const VerifyOptions& options) {
  VerifyReport r;
  SwitchGraph g(fabric);
  const uint32_t n = static_cast<uint32_t>(g.size());
  auto problem = [&](std::string s) {
    if (r.problems.size() < kMaxProblems) r.problems.push_back(std::move(s));
  };
  if (tables.max_lid() != fabric.max_lid()) {
    r.unreachable = 1;
    problem(fmt::format("tables cover LIDs up to {}, the fabric up to {}", tables.max_lid(),
                        fabric.max_lid()));
    return r;
  }
  // Sources: switches with CA ports, and how many.
  std::vector<uint32_t> sources;
  for (uint32_t s = 0; s < n; ++s)
    if (!g.ca_dests(s).empty()) sources.push_back(s);
  std::vector<const internal::CaDest*> dests;
  for (const internal::CaDest& c : g.cas) dests.push_back(&c);
  size_t stride = 1;
  if (options.max_destinations && dests.size() > options.max_destinations)
    stride = (dests.size() + options.max_destinations - 1) / options.max_destinations;
  r.sampled = stride > 1;

  const TorusLayout* torus = tables.torus.get();
  const uint32_t vls = std::max<uint32_t>(tables.num_vls, torus ? 2 : 1);
  std::vector<uint64_t> deps;
  // Outcome per switch for the current destination: stamp, then 1 reach, 2 dead end, 3 loop.
  std::vector<uint32_t> stamp(n, 0), onwalk(n, 0);
  std::vector<uint8_t> outcome(n, 0);
  // Dependency walk memo per (switch, vl state).
  constexpr uint32_t kStates = 64;  // vl (< 16) x 4 + dim
  std::vector<uint32_t> seen(static_cast<size_t>(n) * kStates, 0);
  std::vector<uint32_t> walk;
  uint32_t gen = 0;

  // The next switch from s toward d, or kNoSwitch with *end: 1 delivered, 2 dead end.
  auto step = [&](uint32_t s, Lid d, int* end, LinkId* via) -> uint32_t {
    NodeId sw = g.nodes[s];
    uint8_t op = tables.out_port(sw, d);
    *end = 2;
    if (op == kNoRoute || op == 0) {
      if (op == 0 && fabric.node(sw).lid == d) *end = 1;
      return kNoSwitch;
    }
    PortId p = fabric.port_of(sw, op);
    if (!p.valid() || !fabric.port(p).link.valid()) return kNoSwitch;
    LinkId l = fabric.port(p).link;
    if (!fabric.link_usable(l)) return kNoSwitch;
    *via = l;
    NodeId peer = fabric.link_peer(l, sw);
    if (fabric.node(peer).type != NodeType::kSwitch) {
      const Link& lk = fabric.link(l);
      PortId pp = fabric.port(lk.a).node == peer ? lk.a : lk.b;
      if (fabric.port(pp).lid == d) *end = 1;
      return kNoSwitch;
    }
    *end = 0;
    return g.index[peer.value()];
  };

  for (size_t di = 0; di < dests.size(); di += stride) {
    const Lid d = dests[di]->lid;
    ++r.destinations_checked;
    ++gen;
    for (uint32_t src : sources) {
      size_t pairs = g.ca_dests(src).size();
      if (g.lid_switch[d] == src) --pairs;  // not the destination port to itself
      r.pairs_checked += pairs;
      // Reachability and loops, memoised along the walk.
      walk.clear();
      uint32_t s = src;
      uint8_t result = 0;
      while (true) {
        if (stamp[s] == gen) {
          result = outcome[s];
          break;
        }
        if (onwalk[s] == gen) {
          result = 3;
          break;
        }
        onwalk[s] = gen;
        walk.push_back(s);
        int end;
        LinkId via;
        uint32_t next = step(s, d, &end, &via);
        if (next == kNoSwitch) {
          result = end == 1 ? 1 : 2;
          break;
        }
        s = next;
      }
      for (uint32_t w : walk) {
        stamp[w] = gen;
        outcome[w] = result;
      }
      if (result == 2 || result == 3) {
        (result == 2 ? r.unreachable : r.loops) += pairs;
        if (pairs)
          problem(fmt::format("{} from switch '{}' to LID {}",
                              result == 2 ? "no route" : "routing loop",
                              fabric.node(g.nodes[src]).name, d));
        continue;
      }
      if (!options.check_deadlock) continue;
      // Channel dependencies along this route, stopping where an earlier walk went on.
      VlState st{StartVl(tables, d), 3};
      s = src;
      uint32_t prev_channel = UINT32_MAX;
      uint8_t prev_vl = 0;
      for (size_t hops = 0; hops <= n; ++hops) {
        int end;
        LinkId via;
        uint32_t next = step(s, d, &end, &via);
        if (next == kNoSwitch) break;
        st = NextVl(torus, g.nodes[s], g.nodes[next], st);
        uint32_t ch = Channel(fabric, via, g.nodes[s]);
        if (prev_channel != UINT32_MAX)
          deps.push_back((static_cast<uint64_t>(prev_channel * vls + prev_vl) << 32) |
                         (ch * vls + st.vl));
        size_t key = static_cast<size_t>(s) * kStates + (st.vl % 16) * 4 + st.dim;
        if (seen[key] == gen) break;
        seen[key] = gen;
        prev_channel = ch;
        prev_vl = st.vl;
        s = next;
      }
    }
  }
  if (options.check_deadlock) {
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
    uint32_t nodes = static_cast<uint32_t>(fabric.num_links() * 2 * vls);
    if (HasCycle(deps, nodes)) {
      r.deadlock_free = false;
      problem(fmt::format("the channel dependency graph ({} dependencies over {} VL{}) has a cycle",
                          deps.size(), vls, vls == 1 ? "" : "s"));
    }
  }
  if (r.sampled)
    problem(fmt::format("sampled: checked {} of {} destination LIDs (every {}th)",
                        r.destinations_checked, dests.size(), stride));
  return r;
}

}  // namespace gpool::fabric
