// minhop: shortest paths, ties balanced by counting routes per port (as OpenSM's minhop).
//
// One BFS per destination switch gives every switch its hop distance; the candidates at a
// switch are the ports towards a neighbour one hop closer. Every CA LID behind the destination
// switch then takes the least-used candidate. minhop promises no deadlock freedom.
#include <algorithm>

#include "fabric/route_internal.h"

namespace gpool::fabric::internal {

namespace {

bool WantsAny(const SwitchGraph& g, uint32_t d, const LidSet& lids) {
  if (lids.all()) return true;
  Lid own = g.fabric.node(g.nodes[d]).lid;
  if (own && lids.contains(own)) return true;
  for (const CaDest& c : g.ca_dests(d))
    if (lids.contains(c.lid)) return true;
  return false;
}

}  // namespace

Status RouteMinhop(const SwitchGraph& g, const LidSet& lids, Usage* usage, RoutingTables* t) {
  const uint32_t n = static_cast<uint32_t>(g.size());
  std::vector<uint32_t> dist(n), queue(n), cand_offset(n + 1);
  std::vector<const SwitchEdge*> cand;
  cand.reserve(g.edges.size());
  for (uint32_t d = 0; d < n; ++d) {
    if (!WantsAny(g, d, lids)) continue;
    std::fill(dist.begin(), dist.end(), kInf);
    dist[d] = 0;
    uint32_t head = 0, tail = 0;
    queue[tail++] = d;
    while (head < tail) {
      uint32_t x = queue[head++];
      for (const SwitchEdge& e : g.adj(x))
        if (dist[e.peer] == kInf) {
          dist[e.peer] = dist[x] + 1;
          queue[tail++] = e.peer;
        }
    }
    cand.clear();
    for (uint32_t s = 0; s < n; ++s) {
      cand_offset[s] = static_cast<uint32_t>(cand.size());
      if (s == d || dist[s] == kInf) continue;
      for (const SwitchEdge& e : g.adj(s))
        if (dist[e.peer] + 1 == dist[s]) cand.push_back(&e);
    }
    cand_offset[n] = static_cast<uint32_t>(cand.size());
    AssignBalanced(g, d, cand_offset, cand, lids, usage, t);
  }
  return Status::Ok();
}

}  // namespace gpool::fabric::internal
