// Route()/Reroute()/TracePath() and the switch-graph plumbing shared by the engines.
#include "fabric/routing.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "fabric/route_internal.h"

namespace gpool::fabric {

using internal::kNoSwitch;
using internal::LidSet;
using internal::SwitchGraph;
using internal::Usage;

RoutingTables::RoutingTables(const Fabric& f)
    : max_lid_(f.max_lid()),
      stride_(static_cast<size_t>(f.max_lid()) + 1),
      switch_index_(f.num_nodes(), UINT32_MAX) {
  uint32_t row = 0;
  for (NodeId s : f.switches()) switch_index_[s.value()] = row++;
  lft_.assign(static_cast<size_t>(row) * stride_, kNoRoute);
}

std::string_view EngineName(Engine e) {
  switch (e) {
    case Engine::kMinhop: return "minhop";
    case Engine::kUpdn: return "updn";
    case Engine::kFtree: return "ftree";
    case Engine::kDor: return "dor";
  }
  return "?";
}

StatusOr<Engine> ParseEngine(std::string_view name) {
  std::string low(name);
  for (char& c : low) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (Engine e : {Engine::kMinhop, Engine::kUpdn, Engine::kFtree, Engine::kDor})
    if (EngineName(e) == low) return e;
  return Status::InvalidArgument(
      fmt::format("unknown routing engine '{}' (expected minhop, updn, ftree or dor)", name));
}

namespace internal {

SwitchGraph::SwitchGraph(const Fabric& f) : fabric(f), index(f.num_nodes(), kNoSwitch) {
  nodes = f.switches();
  for (uint32_t i = 0; i < nodes.size(); ++i) index[nodes[i].value()] = i;
  lid_switch.assign(static_cast<size_t>(f.max_lid()) + 1, kNoSwitch);
  edge_offset.assign(nodes.size() + 1, 0);
  ca_offset.assign(nodes.size() + 1, 0);
  edges.reserve(f.num_links() * 2);
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    NodeId n = nodes[i];
    const Node& node = f.node(n);
    if (node.up && node.lid) lid_switch[node.lid] = i;
    for (const Adjacent* a = f.adj_begin(n); a != f.adj_end(n); ++a) {
      // A cable from a switch back to itself (real dumps have them) carries no route.
      if (!f.link_usable(a->link) || a->peer == n) continue;
      const Node& peer = f.node(a->peer);
      uint32_t gport = f.node(n).first_port + a->port - 1;
      if (peer.type == NodeType::kSwitch) {
        edges.push_back(SwitchEdge{index[a->peer.value()], a->port, a->peer_port, gport,
                                   peer.first_port + a->peer_port - 1u});
      } else {
        Lid lid = f.port(f.port_of(a->peer, a->peer_port)).lid;
        if (lid == 0) continue;
        cas.push_back(CaDest{lid, a->port});
        lid_switch[lid] = i;
      }
    }
    edge_offset[i + 1] = static_cast<uint32_t>(edges.size());
    ca_offset[i + 1] = static_cast<uint32_t>(cas.size());
  }
}

bool SwitchGraph::is_switch_lid(Lid lid) const {
  uint32_t s = lid < lid_switch.size() ? lid_switch[lid] : kNoSwitch;
  return s != kNoSwitch && fabric.node(nodes[s]).lid == lid;
}

LidSet::LidSet(Lid max_lid, const std::vector<Lid>* lids) {
  if (!lids) return;
  all_ = false;
  mask_.assign(static_cast<size_t>(max_lid) + 1, 0);
  for (Lid l : *lids)
    if (l <= max_lid) mask_[l] = 1;
}

Usage CountUsage(const SwitchGraph& g, const RoutingTables& t, std::span<const Lid> skip) {
  Usage usage(g.fabric.num_ports(), 0);
  std::vector<uint8_t> skipped(static_cast<size_t>(t.max_lid()) + 1, 0);
  for (Lid l : skip)
    if (l <= t.max_lid()) skipped[l] = 1;
  std::vector<uint8_t> is_ca_lid(static_cast<size_t>(t.max_lid()) + 1, 0);
  for (const CaDest& c : g.cas) is_ca_lid[c.lid] = 1;
  for (uint32_t s = 0; s < g.size(); ++s) {
    const Node& node = g.fabric.node(g.nodes[s]);
    for (Lid l = 1; l <= t.max_lid(); ++l) {
      if (!is_ca_lid[l] || skipped[l]) continue;
      uint8_t p = t.out_port(g.nodes[s], l);
      if (p == kNoRoute || p == 0 || p > node.num_ports) continue;
      ++usage[node.first_port + p - 1];
    }
  }
  return usage;
}

void AssignBalanced(const SwitchGraph& g, uint32_t dst, const std::vector<uint32_t>& cand_offset,
                    const std::vector<const SwitchEdge*>& cand, const LidSet& lids, Usage* usage,
                    RoutingTables* t) {
  const NodeId dst_node = g.nodes[dst];
  const Lid dst_lid = g.fabric.node(dst_node).lid;
  const auto dests = g.ca_dests(dst);
  // At the destination switch itself: straight out of the CA's port, or to port 0.
  for (const CaDest& d : dests)
    if (lids.contains(d.lid)) t->set_out_port(dst_node, d.lid, static_cast<uint8_t>(d.port));
  if (dst_lid && lids.contains(dst_lid)) t->set_out_port(dst_node, dst_lid, 0);
  uint32_t counts[256];
  for (uint32_t s = 0; s < g.size(); ++s) {
    const uint32_t b = cand_offset[s], e = cand_offset[s + 1];
    if (b == e || s == dst) continue;
    const uint32_t n = e - b;
    for (uint32_t k = 0; k < n; ++k) counts[k] = (*usage)[cand[b + k]->gport];
    const NodeId sw = g.nodes[s];
    // Ties go to the lowest port on a full route. On an incremental re-route the scan starts at
    // a port that rotates with the switch and the destination switch: the few LIDs displaced
    // by a failure would otherwise leave every source switch through its lowest tied port and
    // meet on one link (all sources' counts are equal there).
    const uint32_t rot = lids.all() ? 0 : (s + dst) % n;
    auto pick = [&]() {
      uint32_t best = rot;
      for (uint32_t j = 1; j < n; ++j) {
        uint32_t k = (rot + j) % n;
        if (counts[k] < counts[best]) best = k;
      }
      return best;
    };
    // Repeated least-used choice (ties: lowest port), done in rounds: at the current minimum
    // count every candidate holding it takes the next destination in port order. Same result
    // as picking the argmin per destination, O(1) per destination on balanced counts.
    size_t di = 0;
    while (true) {
      while (di < dests.size() && !lids.contains(dests[di].lid)) ++di;
      if (di == dests.size()) break;
      uint32_t m = counts[pick()];
      for (uint32_t j = 0; j < n && di < dests.size(); ++j) {
        const uint32_t k = (rot + j) % n;
        if (counts[k] != m) continue;
        ++counts[k];
        t->set_out_port(sw, dests[di].lid, static_cast<uint8_t>(cand[b + k]->port));
        ++di;
        while (di < dests.size() && !lids.contains(dests[di].lid)) ++di;
      }
    }
    if (dst_lid && lids.contains(dst_lid))
      t->set_out_port(sw, dst_lid, static_cast<uint8_t>(cand[b + pick()]->port));
    for (uint32_t k = 0; k < n; ++k) (*usage)[cand[b + k]->gport] = counts[k];
  }
}

std::vector<uint32_t> Components(const SwitchGraph& g) {
  std::vector<uint32_t> comp(g.size(), kInf), queue;
  uint32_t c = 0;
  for (uint32_t s = 0; s < g.size(); ++s) {
    if (comp[s] != kInf) continue;
    comp[s] = c;
    queue.assign(1, s);
    for (size_t h = 0; h < queue.size(); ++h)
      for (const SwitchEdge& e : g.adj(queue[h]))
        if (comp[e.peer] == kInf) {
          comp[e.peer] = c;
          queue.push_back(e.peer);
        }
    ++c;
  }
  return comp;
}

}  // namespace internal

namespace {

std::vector<uint32_t> RootIndices(const SwitchGraph& g, const RouteOptions& o) {
  std::vector<uint32_t> roots;
  for (NodeId n : o.roots)
    if (n.valid() && n.value() < g.index.size() && g.index[n.value()] != kNoSwitch)
      roots.push_back(g.index[n.value()]);
  return roots;
}

// Forgets the entries of `lids` so that a fallback engine does not mix with a partial first try.
void ClearEntries(const SwitchGraph& g, const LidSet& lids, RoutingTables* t) {
  for (NodeId s : g.nodes)
    for (Lid l = 1; l <= t->max_lid(); ++l)
      if (lids.contains(l)) t->set_out_port(s, l, kNoRoute);
}

// Runs `engine` for `lids` on `g` into `t`, with the fallbacks each engine documents.
Status RunEngine(Engine engine, const SwitchGraph& g, const LidSet& lids,
                 const RouteOptions& options, Usage* usage, RoutingTables* t) {
  const Usage before = engine == Engine::kFtree || engine == Engine::kDor ? *usage : Usage();
  switch (engine) {
    case Engine::kMinhop:
      return internal::RouteMinhop(g, lids, usage, t);
    case Engine::kUpdn:
      return internal::RouteUpdn(g, lids, RootIndices(g, options), usage, t);
    case Engine::kFtree: {
      Status st = internal::RouteFtree(g, lids, usage, t);
      if (st.ok()) return st;
      if (st.code() != StatusCode::kFailedPrecondition) return st;
      // A partial re-route keeps the table's engine: most entries are still ftree's.
      t->notes.push_back(fmt::format("ftree: {}; fell back to updn{}", st.message(),
                                     lids.all() ? "" : " for the re-routed destinations"));
      if (lids.all()) t->engine = "updn";
      ClearEntries(g, lids, t);
      *usage = before;
      return internal::RouteUpdn(g, lids, RootIndices(g, options), usage, t);
    }
    case Engine::kDor: {
      Status st = internal::RouteDor(g, lids, t);
      if (st.ok()) return st;
      if (st.code() != StatusCode::kFailedPrecondition) return st;
      t->notes.push_back(fmt::format(
          "dor: {}; fell back to updn{} (deadlock-free on one VL, not dimension-ordered)",
          st.message(), lids.all() ? "" : " for the re-routed destinations"));
      ClearEntries(g, lids, t);
      *usage = before;
      if (lids.all()) {
        t->engine = "updn";
        t->torus.reset();
        t->num_vls = 1;
      }
      return internal::RouteUpdn(g, lids, RootIndices(g, options), usage, t);
    }
  }
  return Status::InvalidArgument("unknown routing engine");
}

}  // namespace

StatusOr<RoutingTables> Route(const Fabric& fabric, const RouteOptions& options) {
  SwitchGraph g(fabric);
  RoutingTables t(fabric);
  t.engine = std::string(EngineName(options.engine));
  Usage usage(fabric.num_ports(), 0);
  LidSet all;
  GPOOL_RETURN_IF_ERROR(RunEngine(options.engine, g, all, options, &usage, &t));
  return t;
}

Status Reroute(const Fabric& fabric, std::span<const Lid> dest_lids, const RouteOptions& options,
               RoutingTables* tables) {
  if (tables->max_lid() != fabric.max_lid())
    return Status::InvalidArgument(fmt::format(
        "tables cover LIDs up to {} but the fabric's highest LID is {}; route it afresh",
        tables->max_lid(), fabric.max_lid()));
  std::string engine_name = tables->engine;
  if (auto colon = engine_name.find(':'); colon != std::string::npos)
    return Status::FailedPrecondition(fmt::format(
        "tables from '{}' were not computed by gpool; re-route with a gpool engine", engine_name));
  GPOOL_ASSIGN_OR_RETURN(Engine engine, ParseEngine(engine_name));
  std::vector<Lid> lids;
  for (Lid l : dest_lids)
    if (l >= 1 && l <= fabric.max_lid()) lids.push_back(l);
  std::sort(lids.begin(), lids.end());
  lids.erase(std::unique(lids.begin(), lids.end()), lids.end());
  if (lids.empty()) return Status::Ok();
  SwitchGraph g(fabric);
  // ftree spreads a displaced destination's sources by per-port route counts. Leaving the
  // displaced destinations' old entries out of those counts would make the ports they used look
  // idle, and every displaced destination would go back the way they all came: on a three-level
  // tree, to the cores whose only way left into the failed leaf is one aggregation switch (15.6x
  // its rate on the 2,268-HCA tree). Counted in, the ports stay level and ties rotate.
  Usage usage = internal::CountUsage(g, *tables, engine == Engine::kFtree
                                                     ? std::span<const Lid>()
                                                     : std::span<const Lid>(lids));
  for (NodeId s : fabric.switches())
    for (Lid l : lids) tables->set_out_port(s, l, kNoRoute);
  LidSet set(fabric.max_lid(), &lids);
  RouteOptions opts = options;
  opts.engine = engine;
  return RunEngine(engine, g, set, opts, &usage, tables);
}

StatusOr<std::vector<LinkId>> TracePath(const Fabric& fabric, const RoutingTables& tables,
                                        PortId src, Lid dst) {
  if (!src.valid() || src.value() >= fabric.num_ports())
    return Status::InvalidArgument(fmt::format("no port {}", src.value()));
  const Port& sp = fabric.port(src);
  const Node& sn = fabric.node(sp.node);
  if (sn.type == NodeType::kSwitch)
    return Status::InvalidArgument(fmt::format("trace source {}[{}] is a switch port, not a CA",
                                               sn.name, sp.num));
  if (!sp.link.valid())
    return Status::FailedPrecondition(fmt::format("{}[{}] is not cabled", sn.name, sp.num));
  if (fabric.lid_of_port(src) == dst) return std::vector<LinkId>{};
  std::vector<LinkId> path;
  LinkId link = sp.link;
  NodeId at = sp.node;
  const size_t max_hops = fabric.num_switches() + 2;
  while (true) {
    if (!fabric.link_usable(link)) {
      const Node& an = fabric.node(at);
      return Status::Unavailable(
          fmt::format("route to LID {} leaves {} over a link that is down", dst, an.name));
    }
    path.push_back(link);
    const Link& l = fabric.link(link);
    PortId in = fabric.port(l.a).node == at ? l.b : l.a;
    at = fabric.port(in).node;
    const Node& n = fabric.node(at);
    if (n.type != NodeType::kSwitch) {
      if (fabric.port(in).lid == dst) return path;
      return Status::NotFound(
          fmt::format("route to LID {} ends at CA '{}' port {}", dst, n.name, fabric.port(in).num));
    }
    if (n.lid == dst) return path;
    if (path.size() > max_hops)
      return Status::Aborted(fmt::format("route to LID {} loops (at switch '{}')", dst, n.name));
    uint8_t out = tables.out_port(at, dst);
    if (out == kNoRoute)
      return Status::NotFound(fmt::format("switch '{}' has no route to LID {}", n.name, dst));
    if (out == 0)
      return Status::NotFound(
          fmt::format("switch '{}' delivers LID {} to itself but owns LID {}", n.name, dst, n.lid));
    PortId op = fabric.port_of(at, out);
    if (!op.valid() || !fabric.port(op).link.valid())
      return Status::NotFound(fmt::format("switch '{}' routes LID {} to port {}, which is not cabled",
                                          n.name, dst, out));
    link = fabric.port(op).link;
  }
}

}  // namespace gpool::fabric
