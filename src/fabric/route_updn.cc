// updn: up*/down* routing (Schroeder et al., Autonet), as OpenSM's updn.
//
// Switches are ranked by BFS distance from the roots; a hop is "up" when it goes to a lower
// (rank, index) and "down" otherwise. A legal route is zero or more up hops then zero or more
// down hops, which makes the channel dependency graph acyclic on one VL. Per destination switch
// D: switches with a down-only path to D take their shortest down-only path; the others go up
// to the neighbour whose legal distance to D is least. Both rules keep every switch's choice
// consistent with the choices downstream (a down-phase switch never hands a packet to one that
// would go up), which a plain constrained BFS does not guarantee. Ties are balanced by route
// counts per port, as in minhop.
//
// Roots: RouteOptions::roots; else the top-level switches when every switch has a level; else
// the switches farthest from the CA-facing ones. When those roots leave CA pairs without a legal
// route (several roots not joined above the leaves, as on a torus), a single root is used.
#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "fabric/route_internal.h"

namespace gpool::fabric::internal {
namespace {

std::vector<uint32_t> Bfs(const SwitchGraph& g, const std::vector<uint32_t>& sources) {
  std::vector<uint32_t> dist(g.size(), kInf), queue;
  queue.reserve(g.size());
  for (uint32_t s : sources)
    if (dist[s] == kInf) {
      dist[s] = 0;
      queue.push_back(s);
    }
  for (size_t h = 0; h < queue.size(); ++h) {
    uint32_t x = queue[h];
    for (const SwitchEdge& e : g.adj(x))
      if (dist[e.peer] == kInf) {
        dist[e.peer] = dist[x] + 1;
        queue.push_back(e.peer);
      }
  }
  return dist;
}

// Roots chosen without help: top level, else farthest from the CA-facing switches.
std::vector<uint32_t> AutoRoots(const SwitchGraph& g) {
  std::vector<uint32_t> roots;
  int top = -1;
  bool all_levels = g.size() > 0;
  for (NodeId n : g.nodes) {
    int lv = g.fabric.node(n).level;
    if (lv < 0) all_levels = false;
    top = std::max(top, lv);
  }
  if (all_levels) {
    for (uint32_t s = 0; s < g.size(); ++s)
      if (g.fabric.node(g.nodes[s]).level == top) roots.push_back(s);
    return roots;
  }
  std::vector<uint32_t> leaves;
  for (uint32_t s = 0; s < g.size(); ++s)
    if (!g.ca_dests(s).empty()) leaves.push_back(s);
  std::vector<uint32_t> height = Bfs(g, leaves);
  uint32_t best = 0;
  for (uint32_t h : height)
    if (h != kInf) best = std::max(best, h);
  for (uint32_t s = 0; s < g.size(); ++s)
    if (height[s] == best) roots.push_back(s);
  return roots;
}

struct Ranking {
  std::vector<uint32_t> pos;  // position in (rank, index) order: lower is "up"
  std::vector<uint32_t> order;
};

Ranking Rank(const SwitchGraph& g, const std::vector<uint32_t>& roots) {
  std::vector<uint32_t> rank = Bfs(g, roots);
  Ranking r;
  r.order.resize(g.size());
  std::iota(r.order.begin(), r.order.end(), 0u);
  std::stable_sort(r.order.begin(), r.order.end(),
                   [&](uint32_t a, uint32_t b) { return rank[a] < rank[b]; });
  r.pos.resize(g.size());
  for (uint32_t i = 0; i < r.order.size(); ++i) r.pos[r.order[i]] = i;
  return r;
}

void RouteAll(const SwitchGraph& g, const Ranking& rk, const LidSet& lids, Usage* usage,
              RoutingTables* t) {
  const uint32_t n = static_cast<uint32_t>(g.size());
  std::vector<uint32_t> down(n), total(n), queue(n), cand_offset(n + 1);
  std::vector<const SwitchEdge*> cand;
  cand.reserve(g.edges.size());
  for (uint32_t d = 0; d < n; ++d) {
    if (!lids.all()) {
      bool any = false;
      Lid own = g.fabric.node(g.nodes[d]).lid;
      if (own && lids.contains(own)) any = true;
      for (const CaDest& c : g.ca_dests(d)) any = any || lids.contains(c.lid);
      if (!any) continue;
    }
    // Down-only distances: walk up from D (a neighbour above X reaches X by a down hop).
    std::fill(down.begin(), down.end(), kInf);
    down[d] = 0;
    uint32_t head = 0, tail = 0;
    queue[tail++] = d;
    while (head < tail) {
      uint32_t x = queue[head++];
      for (const SwitchEdge& e : g.adj(x))
        if (rk.pos[e.peer] < rk.pos[x] && down[e.peer] == kInf) {
          down[e.peer] = down[x] + 1;
          queue[tail++] = e.peer;
        }
    }
    // Legal distances: up-neighbours come earlier in (rank, index) order.
    for (uint32_t s : rk.order) {
      if (down[s] != kInf) {
        total[s] = down[s];
        continue;
      }
      uint32_t best = kInf;
      for (const SwitchEdge& e : g.adj(s))
        if (rk.pos[e.peer] < rk.pos[s] && total[e.peer] != kInf)
          best = std::min(best, total[e.peer] + 1);
      total[s] = best;
    }
    cand.clear();
    for (uint32_t s = 0; s < n; ++s) {
      cand_offset[s] = static_cast<uint32_t>(cand.size());
      if (s == d || total[s] == kInf) continue;
      if (down[s] != kInf) {
        for (const SwitchEdge& e : g.adj(s))
          if (rk.pos[e.peer] > rk.pos[s] && down[e.peer] + 1 == down[s]) cand.push_back(&e);
      } else {
        for (const SwitchEdge& e : g.adj(s))
          if (rk.pos[e.peer] < rk.pos[s] && total[e.peer] + 1 == total[s]) cand.push_back(&e);
      }
    }
    cand_offset[n] = static_cast<uint32_t>(cand.size());
    AssignBalanced(g, d, cand_offset, cand, lids, usage, t);
  }
}

// Counts (CA-facing switch, CA LID) entries left unrouted though both ends are connected.
size_t Unrouted(const SwitchGraph& g, const LidSet& lids, const RoutingTables& t) {
  const std::vector<uint32_t> comp = Components(g);
  size_t missing = 0;
  for (uint32_t s = 0; s < g.size(); ++s) {
    if (g.ca_dests(s).empty()) continue;
    for (const CaDest& d : g.cas) {
      if (!lids.contains(d.lid)) continue;
      uint32_t ds = g.lid_switch[d.lid];
      if (comp[ds] == comp[s] && t.out_port(g.nodes[s], d.lid) == kNoRoute) ++missing;
    }
  }
  return missing;
}

}  // namespace

Status RouteUpdn(const SwitchGraph& g, const LidSet& lids, const std::vector<uint32_t>& roots,
                 Usage* usage, RoutingTables* t) {
  if (g.size() == 0) return Status::Ok();
  std::vector<uint32_t> r = roots.empty() ? AutoRoots(g) : roots;
  Usage before = *usage;
  RouteAll(g, Rank(g, r), lids, usage, t);
  if (!roots.empty() || r.size() <= 1) return Status::Ok();
  size_t missing = Unrouted(g, lids, *t);
  if (missing == 0) return Status::Ok();
  // Several roots that meet only below: take one and route again.
  *usage = std::move(before);
  for (NodeId s : g.nodes)
    for (const CaDest& d : g.cas)
      if (lids.contains(d.lid)) t->set_out_port(s, d.lid, kNoRoute);
  for (NodeId s : g.nodes) {
    Lid own = g.fabric.node(s).lid;
    if (own && lids.contains(own))
      for (NodeId x : g.nodes) t->set_out_port(x, own, kNoRoute);
  }
  t->notes.push_back(fmt::format(
      "updn: {} automatic roots left {} switch/destination entries without a legal route; "
      "used the single root '{}'",
      r.size(), missing, g.fabric.node(g.nodes[r.front()]).name));
  RouteAll(g, Rank(g, {r.front()}), lids, usage, t);
  return Status::Ok();
}

}  // namespace gpool::fabric::internal
