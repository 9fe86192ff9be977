// ftree: fat-tree routing in the manner of OpenSM's ftree (Zahavi et al.).
//
// Per destination CA d on leaf L, in leaf and port order:
//  1. Main path: from L go up, at each switch through the uplink whose upper end carries the
//     fewest main paths down (per-port counters), until the top. Each switch on it routes d
//     down the way the path came. (Counting every down route instead would see every ancestor's
//     port to L used once per CA and send all of L's CAs through the first uplink.)
//  2. Every other ancestor of L (a switch with a down-only path to L) routes d down, along its
//     shortest down path, least-used port first.
//  3. Every remaining switch, top level first, routes d up: preferably to an upper neighbour that
//     is on the main path or already routes d up towards it (so all sources reach d through the
//     same top switch, the property that makes shift patterns contention-free), least-used port
//     first; this is found by walking down from the main path's top, touching only the edges
//     below the main line. Switches left over (off every CA's path to d on an intact tree) go
//     up to any upper neighbour that has a route.
// Routes are therefore up*, then down*: deadlock-free on one VL. Because consecutive CAs of a
// leaf take consecutive least-used uplinks, every leaf's uplinks carry the same number of
// destinations (+-1) on a full fat-tree.
//
// Levels come from ComputeSwitchLevels (levels.h): Node::level (generators and gpool's files
// set it), else inferred from the switch graph. The engine refuses (FailedPrecondition, and Route falls back to updn) when a link
// joins switches that are not one level apart, a CA hangs off a non-leaf, or a CA-facing switch
// is left without a route to a destination it is connected to (a heavily degraded tree).
// Switch LIDs (management traffic) are routed with up*/down* from the top level.
#include <algorithm>

#include <fmt/format.h>

#include "fabric/levels.h"
#include "fabric/route_internal.h"

namespace gpool::fabric::internal {

std::vector<int> FatTreeLevels(const SwitchGraph& g, std::string* why) {
  const uint32_t n = static_cast<uint32_t>(g.size());
  // The fabric's tiers (given or inferred over every cable, up or down), as the locality code
  // sees them: a failure does not move a switch to another tier.
  const SwitchLevels tiers = ComputeSwitchLevels(g.fabric);
  std::vector<int> level(n, -1);
  for (uint32_t s = 0; s < n; ++s) level[s] = tiers.level[g.nodes[s].value()];
  for (uint32_t s = 0; s < n; ++s) {
    const std::string& name = g.fabric.node(g.nodes[s]).name;
    if (!g.ca_dests(s).empty() && level[s] != 0) {
      *why = fmt::format("CAs hang off switch '{}' at level {}, not a leaf", name, level[s]);
      return {};
    }
    for (const SwitchEdge& e : g.adj(s))
      if (level[s] >= 0 && level[e.peer] >= 0 && std::abs(level[s] - level[e.peer]) != 1) {
        *why = fmt::format("the link {}[{}] - {}[{}] joins levels {} and {}, not a fat-tree", name,
                           e.port, g.fabric.node(g.nodes[e.peer]).name, e.peer_port, level[s],
                           level[e.peer]);
        return {};
      }
  }
  return level;
}

namespace {

// Least-used entry among edges accepted by `ok`, by the usage of the port `port_of` names.
template <typename Ok, typename PortOf>
const SwitchEdge* LeastUsed(std::span<const SwitchEdge* const> edges, const Usage& usage, Ok ok,
                            PortOf port_of) {
  const SwitchEdge* best = nullptr;
  uint32_t best_use = UINT32_MAX;
  for (const SwitchEdge* e : edges) {
    if (!ok(*e)) continue;
    uint32_t u = usage[port_of(*e)];
    if (u < best_use) {
      best = e;
      best_use = u;
    }
  }
  return best;
}

// Main-path counts of the destinations that are not being recomputed, read back from the
// tables: the main path of d is the down part of a route from a leaf in another pod, so trace
// d from the first and the last CA-facing switch and keep the trace that climbs higher.
// Approximate on irregular trees; exact on the generated ones.
void MainPathUsage(const SwitchGraph& g, const std::vector<int>& level, const LidSet& lids,
                   const RoutingTables& t, Usage* main_use) {
  std::vector<uint32_t> leaves;
  for (uint32_t s = 0; s < g.size(); ++s)
    if (!g.ca_dests(s).empty()) leaves.push_back(s);
  if (leaves.size() < 2) return;
  std::vector<uint32_t> path;  // global ports of the down hops
  std::vector<uint32_t> best;
  for (const CaDest& d : g.cas) {
    if (lids.contains(d.lid)) continue;
    uint32_t home = g.lid_switch[d.lid];
    int best_peak = -1;
    best.clear();
    for (uint32_t src : {leaves.front(), leaves.back()}) {
      if (src == home) continue;
      path.clear();
      int peak = level[src];
      uint32_t s = src;
      for (size_t hops = 0; hops <= g.size() && s != home; ++hops) {
        uint8_t op = t.out_port(g.nodes[s], d.lid);
        const SwitchEdge* next = nullptr;
        for (const SwitchEdge& e : g.adj(s))
          if (e.port == op) next = &e;
        if (!next) break;
        if (level[next->peer] < level[s]) path.push_back(next->gport);
        peak = std::max(peak, level[next->peer]);
        s = next->peer;
      }
      if (s == home && peak > best_peak) {
        best_peak = peak;
        best = path;
      }
    }
    for (uint32_t p : best) ++(*main_use)[p];
  }
}

}  // namespace

Status RouteFtree(const SwitchGraph& g, const LidSet& lids, Usage* usage, RoutingTables* t) {
  std::string why;
  std::vector<int> level = FatTreeLevels(g, &why);
  if (level.empty()) return Status::FailedPrecondition(why.empty() ? "no switches" : why);
  const uint32_t n = static_cast<uint32_t>(g.size());
  // Up and down neighbour lists (pointers into the switch graph), CSR.
  std::vector<uint32_t> up_off(n + 1, 0), down_off(n + 1, 0);
  std::vector<const SwitchEdge*> ups, downs;
  for (uint32_t s = 0; s < n; ++s) {
    for (const SwitchEdge& e : g.adj(s)) {
      if (level[s] < 0 || level[e.peer] < 0) continue;
      (level[e.peer] > level[s] ? ups : downs).push_back(&e);
    }
    up_off[s + 1] = static_cast<uint32_t>(ups.size());
    down_off[s + 1] = static_cast<uint32_t>(downs.size());
  }
  auto up = [&](uint32_t s) {
    return std::span<const SwitchEdge* const>(ups.data() + up_off[s], ups.data() + up_off[s + 1]);
  };
  auto down = [&](uint32_t s) {
    return std::span<const SwitchEdge* const>(downs.data() + down_off[s],
                                              downs.data() + down_off[s + 1]);
  };
  std::vector<uint32_t> top_down;
  for (uint32_t s = 0; s < n; ++s)
    if (level[s] >= 0) top_down.push_back(s);
  std::stable_sort(top_down.begin(), top_down.end(),
                   [&](uint32_t a, uint32_t b) { return level[a] > level[b]; });
  const std::vector<uint32_t> comp = Components(g);

  std::vector<uint32_t> dist(n, kInf), anc, cand_off;
  std::vector<const SwitchEdge*> cand;
  std::vector<uint32_t> routed(n, 0), best_gen(n, 0), rr(n, 0), hops(n, 0);
  std::vector<const SwitchEdge*> best(n, nullptr);
  std::vector<uint32_t> main_path, frontier, below;
  uint32_t gen = 0;
  size_t failures = 0;
  std::string first_failure;
  Usage& use = *usage;
  Usage main_use(g.fabric.num_ports(), 0);
  if (!lids.all()) MainPathUsage(g, level, lids, *t, &main_use);

  for (uint32_t leaf = 0; leaf < n; ++leaf) {
    const auto dests = g.ca_dests(leaf);
    if (dests.empty()) continue;
    bool any = lids.all();
    for (size_t i = 0; !any && i < dests.size(); ++i) any = lids.contains(dests[i].lid);
    if (!any) continue;
    // Ancestors of the leaf: BFS upwards; dist = down-only hops to the leaf.
    for (uint32_t a : anc) dist[a] = kInf;
    anc.assign(1, leaf);
    dist[leaf] = 0;
    for (size_t h = 0; h < anc.size(); ++h)
      for (const SwitchEdge* e : up(anc[h]))
        if (dist[e->peer] == kInf) {
          dist[e->peer] = dist[anc[h]] + 1;
          anc.push_back(e->peer);
        }
    // Down candidates of each ancestor (position in anc), shared by the leaf's CAs.
    cand.clear();
    cand_off.assign(anc.size() + 1, 0);
    for (size_t i = 1; i < anc.size(); ++i) {
      for (const SwitchEdge* e : down(anc[i]))
        if (dist[e->peer] + 1 == dist[anc[i]]) cand.push_back(e);
      cand_off[i + 1] = static_cast<uint32_t>(cand.size());
    }
    cand_off[1] = 0;
    for (const CaDest& d : dests) {
      if (!lids.contains(d.lid)) continue;
      ++gen;
      t->set_out_port(g.nodes[leaf], d.lid, static_cast<uint8_t>(d.port));
      routed[leaf] = gen;
      hops[leaf] = 0;
      // 1. Main path.
      main_path.assign(1, leaf);
      for (uint32_t x = leaf;;) {
        const SwitchEdge* e = LeastUsed(
            up(x), main_use, [](const SwitchEdge&) { return true; },
            [](const SwitchEdge& s) { return s.peer_gport; });
        if (!e) break;
        uint32_t y = e->peer;
        t->set_out_port(g.nodes[y], d.lid, static_cast<uint8_t>(e->peer_port));
        ++use[e->peer_gport];
        ++main_use[e->peer_gport];
        routed[y] = gen;
        hops[y] = static_cast<uint32_t>(main_path.size());
        main_path.push_back(y);
        x = y;
      }
      // 2. The other ancestors go down.
      for (size_t i = 1; i < anc.size(); ++i) {
        uint32_t x = anc[i];
        if (routed[x] == gen) continue;
        std::span<const SwitchEdge* const> c(cand.data() + cand_off[i],
                                             cand.data() + cand_off[i + 1]);
        const SwitchEdge* e = LeastUsed(
            c, use, [](const SwitchEdge&) { return true; },
            [](const SwitchEdge& s) { return s.gport; });
        if (!e) continue;
        t->set_out_port(g.nodes[x], d.lid, static_cast<uint8_t>(e->port));
        ++use[e->gport];
        routed[x] = gen;
        hops[x] = dist[x];
      }
      // An incremental re-route skips 3a: a destination displaced by a failure has lost the
      // link its main line came down (or up) by, and sending every source through one new top
      // switch would double that switch's down link into the leaf. 3b instead spreads the
      // sources over the least-used equal-cost uplinks, as OpenSM's per-port counters do.
      if (lids.all()) {
        // 3a. Level by level below the main path's top: a switch under a switch of the main line
        // (main path or already routed up towards it) goes up to one of them, least-used port.
        frontier.assign(1, main_path.back());
        for (int lv = level[main_path.back()]; lv >= 1; --lv) {
          below.clear();
          for (uint32_t x : frontier)
            for (const SwitchEdge* e : down(x)) {
              uint32_t y = e->peer;
              if (routed[y] == gen) continue;
              if (best_gen[y] != gen) {
                best_gen[y] = gen;
                best[y] = e;
                below.push_back(y);
              } else if (use[e->peer_gport] < use[best[y]->peer_gport] ||
                         (use[e->peer_gport] == use[best[y]->peer_gport] &&
                          e->peer_port < best[y]->peer_port)) {
                best[y] = e;
              }
            }
          frontier.clear();
          for (uint32_t y : below) {
            const SwitchEdge* e = best[y];
            t->set_out_port(g.nodes[y], d.lid, static_cast<uint8_t>(e->peer_port));
            ++use[e->peer_gport];
            routed[y] = gen;
            frontier.push_back(y);
          }
          size_t mp = static_cast<size_t>(lv - 1 - level[leaf]);
          if (lv - 1 >= level[leaf] && mp < main_path.size()) frontier.push_back(main_path[mp]);
        }
      }
      // 3b. The rest (off every CA's path to d unless the tree is degraded) go up to any upper
      // neighbour that has a route: least-used for CA-facing switches, round-robin otherwise.
      for (uint32_t s : top_down) {
        if (routed[s] == gen) continue;
        auto u = up(s);
        const SwitchEdge* e = nullptr;
        if (!lids.all()) {
          // Fewest hops to d first, then the least-used port; ties rotate with the switch and
          // the LID so that the sources of one destination do not all take the same port.
          uint32_t fewest = kInf;
          for (const SwitchEdge* x : u)
            if (routed[x->peer] == gen) fewest = std::min(fewest, hops[x->peer]);
          const size_t start = s + d.lid;
          for (size_t j = 0; fewest != kInf && j < u.size(); ++j) {
            const SwitchEdge* x = u[(start + j) % u.size()];
            if (routed[x->peer] != gen || hops[x->peer] != fewest) continue;
            if (!e || use[x->gport] < use[e->gport]) e = x;
          }
        } else if (!g.ca_dests(s).empty()) {
          e = LeastUsed(u, use, [&](const SwitchEdge& x) { return routed[x.peer] == gen; },
                        [](const SwitchEdge& x) { return x.gport; });
        } else {
          for (size_t j = 0; j < u.size(); ++j) {
            size_t k = (rr[s] + j) % u.size();
            if (routed[u[k]->peer] == gen) {
              e = u[k];
              rr[s] = static_cast<uint32_t>((k + 1) % u.size());
              break;
            }
          }
        }
        if (!e) {
          if (!g.ca_dests(s).empty() && comp[s] == comp[leaf]) {
            if (failures++ == 0)
              first_failure = fmt::format("'{}' to LID {}", g.fabric.node(g.nodes[s]).name, d.lid);
          }
          continue;
        }
        t->set_out_port(g.nodes[s], d.lid, static_cast<uint8_t>(e->port));
        ++use[e->gport];
        routed[s] = gen;
        hops[s] = hops[e->peer] + 1;
      }
    }
  }
  if (failures)
    return Status::FailedPrecondition(fmt::format(
        "{} CA-facing switch entries have no up*/down* route in the tree (first: {})", failures,
        first_failure));
  // Switch LIDs: up*/down* from the top level.
  std::vector<Lid> switch_lids;
  for (NodeId s : g.nodes) {
    Lid l = g.fabric.node(s).lid;
    if (l && lids.contains(l)) switch_lids.push_back(l);
  }
  if (!switch_lids.empty()) {
    int top = *std::max_element(level.begin(), level.end());
    std::vector<uint32_t> roots;
    for (uint32_t s = 0; s < n; ++s)
      if (level[s] == top) roots.push_back(s);
    GPOOL_RETURN_IF_ERROR(
        RouteUpdn(g, LidSet(t->max_lid(), &switch_lids), roots, usage, t));
  }
  size_t down_links = 0;
  for (const Link& l : g.fabric.links()) {
    const Fabric& f = g.fabric;
    if (f.node(f.port(l.a).node).type != NodeType::kSwitch ||
        f.node(f.port(l.b).node).type != NodeType::kSwitch)
      continue;
    if (!l.up || !f.node(f.port(l.a).node).up || !f.node(f.port(l.b).node).up) ++down_links;
  }
  if (down_links && lids.all())
    t->notes.push_back(fmt::format("ftree: routed around {} switch-to-switch link{} that are down",
                                   down_links, down_links == 1 ? "" : "s"));
  return Status::Ok();
}

}  // namespace gpool::fabric::internal
