#include "fabric/failure.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "fabric/analysis.h"

namespace gpool::fabric {
namespace {

constexpr uint32_t kNoIndex = UINT32_MAX;

// True when the route toward the tree's destination from switch `si` crosses the target. Filled
// closest-to-destination first so each switch looks at its next hop only.
void MarkCrossing(const Fabric& f, const RouteTree& tree, const FailureTarget& target,
                  std::vector<uint8_t>* crosses) {
  const auto& order = tree.order();
  for (size_t i = order.size(); i-- > 0;) {
    uint32_t si = order[i];
    bool c = false;
    if (target.kind == FailureTarget::Kind::kSwitch) {
      c = tree.switch_node(si) == target.node;
    } else {
      c = tree.out_link(si) == target.link;
    }
    uint32_t nx = tree.next(si);
    if (!c && nx != kNoIndex) c = (*crosses)[nx] != 0;
    (*crosses)[si] = c;
  }
  (void)f;
}

// The switch index behind an endpoint's port, or kNoIndex (cabled to a CA, or link unusable).
uint32_t AttachedSwitch(const Fabric& f, const RouteTree& tree, const Endpoint& e) {
  LinkId l = f.port(e.port).link;
  if (!f.link_usable(l)) return kNoIndex;
  NodeId peer = f.link_peer(l, e.ca);
  return f.node(peer).type == NodeType::kSwitch ? tree.switch_index(peer) : kNoIndex;
}

// Whether endpoint `e`'s own cable is the target or goes to the target switch.
bool UplinkHitsTarget(const Fabric& f, const Endpoint& e, const FailureTarget& target) {
  LinkId l = f.port(e.port).link;
  if (target.kind == FailureTarget::Kind::kLink) return l == target.link;
  return f.link_peer(l, e.ca) == target.node;
}

// FailureOptions::max_excess_load: compares the incremental re-route in `tables` with a full
// route of the degraded fabric under all-to-all traffic and takes the full one when the
// incremental maximum load is more than the allowed fraction above it. `saved` holds the tables
// from before the failure, for entries_changed. A check that cannot run (the full route fails)
// keeps the incremental result with a note.
void CheckBalance(const Fabric& f, const FailureOptions& options, const RoutingTables& saved,
                    RoutingTables* tables, FailureReport* r) {
  RouteOptions ro = options.route;
  ro.engine = Engine::kFtree;
  auto full = Route(f, ro);
  const TrafficPattern all;  // all-to-all
  StatusOr<LoadReport> inc = Status::Internal("not analysed");
  StatusOr<LoadReport> whole = Status::Internal("not analysed");
  if (full.ok()) {
    inc = AnalyzeLoad(f, *tables, all, {});
    whole = AnalyzeLoad(f, *full, all, {});
  }
  for (const Status& st : {full.status(), inc.status(), whole.status()}) {
    if (st.ok()) continue;
    r->notes.push_back("balance check skipped: " + std::string(st.message()));
    return;
  }
  r->balance_checked = true;
  r->incremental_max_load = inc->max_load_ratio;
  r->full_max_load = whole->max_load_ratio;
  // A small absolute slack keeps rounding from deciding between two equal loads.
  if (inc->max_load_ratio <= whole->max_load_ratio * (1 + options.max_excess_load) + 1e-9) return;
  r->full_reroute = true;
  r->notes.push_back(fmt::format(
      "ftree: the incremental re-route's all-to-all maximum load {:.2f}x exceeds a full "
      "re-route's {:.2f}x by more than {:.0f}%; took the full re-route ({})",
      inc->max_load_ratio, whole->max_load_ratio, options.max_excess_load * 100, full->engine));
  *tables = std::move(*full);
  r->entries_changed = 0;
  const Lid max_lid = std::min(saved.max_lid(), tables->max_lid());
  for (NodeId s : f.switches())
    for (uint32_t lid = 1; lid <= max_lid; ++lid)
      r->entries_changed +=
          saved.out_port(s, static_cast<Lid>(lid)) != tables->out_port(s, static_cast<Lid>(lid));
}

}  // namespace

StatusOr<FailureTarget> ResolveLink(const Fabric& f, std::string_view ref) {
  size_t open = ref.rfind('[');
  if (open == std::string_view::npos || open == 0 || !ref.ends_with(']'))
    return Status::InvalidArgument(
        fmt::format("--link '{}': expected SWITCH[PORT], e.g. 'spine-1[3]'", ref));
  std::string_view name = ref.substr(0, open);
  std::string_view num = ref.substr(open + 1, ref.size() - open - 2);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), port);
  if (ec != std::errc() || end != num.data() + num.size() || num.empty())
    return Status::InvalidArgument(
        fmt::format("--link '{}': port '{}' is not a number", ref, num));
  auto node = f.FindByName(name);
  if (!node) return Status::NotFound(fmt::format("--link '{}': no node named '{}'", ref, name));
  const Node& n = f.node(*node);
  if (port == 0 || port > n.num_ports)
    return Status::InvalidArgument(
        fmt::format("--link '{}': '{}' has ports 1..{}", ref, name, n.num_ports));
  LinkId link = f.port(f.port_of(*node, static_cast<uint16_t>(port))).link;
  if (!link.valid())
    return Status::FailedPrecondition(
        fmt::format("--link '{}': port {} of '{}' is not cabled", ref, port, name));
  FailureTarget t;
  t.kind = FailureTarget::Kind::kLink;
  t.link = link;
  t.label = std::string(ref);
  return t;
}

StatusOr<FailureTarget> ResolveSwitch(const Fabric& f, std::string_view name) {
  auto node = f.FindByName(name);
  if (!node) return Status::NotFound(fmt::format("--switch: no node named '{}'", name));
  if (f.node(*node).type != NodeType::kSwitch)
    return Status::InvalidArgument(fmt::format("--switch: '{}' is a {}, not a switch", name,
                                               NodeTypeName(f.node(*node).type)));
  FailureTarget t;
  t.kind = FailureTarget::Kind::kSwitch;
  t.node = *node;
  t.label = std::string(name);
  return t;
}

std::vector<Lid> AffectedDestinations(const Fabric& f, const RoutingTables& t,
                                      const FailureTarget& target) {
  std::vector<uint8_t> hit(static_cast<size_t>(t.max_lid()) + 1, 0);
  // LIDs that switch `sw` forwards out of `port`.
  auto exits = [&](NodeId sw, uint16_t port) {
    for (uint32_t lid = 1; lid <= t.max_lid(); ++lid)
      if (t.out_port(sw, static_cast<Lid>(lid)) == port) hit[lid] = 1;
  };
  auto mark = [&](Lid lid) {
    if (lid != 0 && lid <= t.max_lid()) hit[lid] = 1;
  };
  // One end of a failed cable: a switch forwards over it, a CA is reached over it.
  auto end = [&](PortId p) {
    const Port& port = f.port(p);
    if (f.node(port.node).type == NodeType::kSwitch)
      exits(port.node, port.num);
    else
      mark(port.lid);
  };
  if (target.kind == FailureTarget::Kind::kLink) {
    const Link& l = f.link(target.link);
    end(l.a);
    end(l.b);
  } else {
    mark(f.node(target.node).lid);
    for (const Adjacent* a = f.adj_begin(target.node); a != f.adj_end(target.node); ++a)
      end(f.port_of(a->peer, a->peer_port));
  }
  std::vector<Lid> out;
  for (uint32_t lid = 1; lid < hit.size(); ++lid)
    if (hit[lid]) out.push_back(static_cast<Lid>(lid));
  return out;
}

StatusOr<FailureReport> FailAndReroute(Fabric* fabric, RoutingTables* tables,
                                       const FailureTarget& target,
                                       const FailureOptions& options) {
  Fabric& f = *fabric;
  const bool is_link = target.kind == FailureTarget::Kind::kLink;
  if (is_link && !f.link(target.link).up)
    return Status::FailedPrecondition(fmt::format("link {} is already down", target.label));
  if (!is_link && !f.node(target.node).up)
    return Status::FailedPrecondition(fmt::format("switch {} is already down", target.label));

  FailureReport r;
  r.target = target.label;
  r.affected_lids = AffectedDestinations(f, *tables, target);
  const auto& switches = f.switches();
  const size_t a = r.affected_lids.size();
  std::vector<uint8_t> before(switches.size() * a);
  for (size_t si = 0; si < switches.size(); ++si)
    for (size_t j = 0; j < a; ++j) before[si * a + j] = tables->out_port(switches[si], r.affected_lids[j]);

  // Pairs whose current route crosses the target: per affected CA destination, the sources whose
  // route crosses it (checked again after the re-route); sources cabled to the target count for
  // every destination.
  std::vector<Endpoint> eps;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> crossing;  // dest index, sources
  if (options.count_pairs) {
    eps = Endpoints(f);
    std::vector<uint32_t> per_node(f.num_nodes(), 0);
    for (const Endpoint& e : eps) ++per_node[e.ca.value()];
    for (const Endpoint& e : eps) r.pairs_total += eps.size() - per_node[e.ca.value()];
    // Sources cabled to the target itself lose every destination, not only the affected LIDs.
    std::vector<uint32_t> stranded;
    for (uint32_t si = 0; si < eps.size(); ++si)
      if (UplinkHitsTarget(f, eps[si], target)) stranded.push_back(si);
    std::vector<uint8_t> hit(static_cast<size_t>(f.max_lid()) + 1, 0);
    for (Lid lid : r.affected_lids)
      if (lid < hit.size()) hit[lid] = 1;
    RouteTree tree(f);
    std::vector<uint8_t> crosses(switches.size(), 0);
    for (uint32_t di = 0; di < eps.size(); ++di) {
      const bool affected = hit[eps[di].lid] != 0;
      if (!affected && stranded.empty()) continue;
      tree.Build(*tables, eps[di].lid);
      auto reached = [&](uint32_t si) {
        uint32_t sw = AttachedSwitch(f, tree, eps[si]);
        return sw != kNoIndex && tree.reaches(sw);
      };
      if (!affected) {
        // Routes toward this destination stay; only the stranded sources lose it for good.
        for (uint32_t si : stranded)
          if (eps[si].ca != eps[di].ca && reached(si)) ++r.pairs_affected, ++r.pairs_unreachable_after;
        continue;
      }
      MarkCrossing(f, tree, target, &crosses);
      std::vector<uint32_t> srcs;
      for (uint32_t si = 0; si < eps.size(); ++si) {
        if (eps[si].ca == eps[di].ca || !reached(si)) continue;  // no route before: not affected
        uint32_t sw = AttachedSwitch(f, tree, eps[si]);
        if (crosses[sw] || UplinkHitsTarget(f, eps[si], target)) srcs.push_back(si);
      }
      r.pairs_affected += srcs.size();
      if (!srcs.empty()) crossing.emplace_back(di, std::move(srcs));
    }
  }

  // The balance check may replace every entry: keep the tables it would be compared against.
  RoutingTables saved;
  if (options.max_excess_load >= 0 && tables->engine == "ftree") saved = *tables;

  Status down = is_link ? f.SetLinkUp(target.link, false) : f.SetNodeUp(target.node, false);
  GPOOL_RETURN_IF_ERROR(down);
  Status st = Reroute(f, r.affected_lids, options.route, tables);
  if (!st.ok()) {
    // Leave the fabric as we found it; the tables may be partly updated, so say so.
    (void)(is_link ? f.SetLinkUp(target.link, true) : f.SetNodeUp(target.node, true));
    return Status(st.code(), fmt::format("re-routing {} destinations after failing {}: {} (the "
                                         "routing tables are now inconsistent; route again)",
                                         a, target.label, st.message()));
  }
  for (size_t si = 0; si < switches.size(); ++si)
    for (size_t j = 0; j < a; ++j)
      r.entries_changed += before[si * a + j] != tables->out_port(switches[si], r.affected_lids[j]);
  if (options.max_excess_load >= 0 && tables->engine == "ftree")
    CheckBalance(f, options, saved, tables, &r);

  if (options.count_pairs) {
    RouteTree tree(f);
    for (const auto& [di, srcs] : crossing) {
      tree.Build(*tables, eps[di].lid);
      for (uint32_t si : srcs) {
        uint32_t sw = AttachedSwitch(f, tree, eps[si]);
        if (sw == kNoIndex || !tree.reaches(sw)) ++r.pairs_unreachable_after;
      }
    }
  }
  return r;
}

}  // namespace gpool::fabric
