#include "fabric/compare.h"

#include <algorithm>

#include <fmt/format.h>

namespace gpool::fabric {
namespace {

Status Differ(std::string msg) { return Status::FailedPrecondition("fabrics differ: " + std::move(msg)); }

std::string PeerText(const Fabric& f, const Port& p) {
  if (!p.link.valid()) return "unconnected";
  const Link& l = f.link(p.link);
  const Port& r = f.port(l.a == f.port_of(p.node, p.num) ? l.b : l.a);
  return fmt::format("'{}'[{}]", f.node(r.node).name, r.num);
}

}  // namespace

Status SameFabric(const Fabric& a, const Fabric& b, const CompareOptions& o) {
  if (a.num_nodes() != b.num_nodes())
    return Differ(fmt::format("{} nodes vs {}", a.num_nodes(), b.num_nodes()));
  if (a.num_links() != b.num_links())
    return Differ(fmt::format("{} links vs {}", a.num_links(), b.num_links()));
  for (uint32_t i = 0; i < a.num_nodes(); ++i) {
    const Node& na = a.node(NodeId(i));
    std::optional<NodeId> jb = b.FindByName(na.name);
    if (!jb) return Differ(fmt::format("node '{}' is missing from the second fabric", na.name));
    const Node& nb = b.node(*jb);
    auto node_diff = [&](std::string_view what, auto x, auto y) {
      return Differ(fmt::format("node '{}': {} {} vs {}", na.name, what, x, y));
    };
    if (na.type != nb.type) return node_diff("type", NodeTypeName(na.type), NodeTypeName(nb.type));
    if (na.num_ports != nb.num_ports) return node_diff("port count", na.num_ports, nb.num_ports);
    if (o.guids && na.guid != nb.guid) return node_diff("GUID", FormatGuid(na.guid), FormatGuid(nb.guid));
    bool sysimg_unknown = o.unknown_sysimg_matches && (na.sysimg_guid == 0 || nb.sysimg_guid == 0);
    if (o.guids && !sysimg_unknown && na.sysimg_guid != nb.sysimg_guid)
      return node_diff("system image GUID", FormatGuid(na.sysimg_guid), FormatGuid(nb.sysimg_guid));
    if (o.lids && na.type == NodeType::kSwitch && na.lid != nb.lid) return node_diff("LID", na.lid, nb.lid);
    if (o.lids && na.lmc != nb.lmc) return node_diff("LMC", na.lmc, nb.lmc);
    if (o.descriptions && na.description != nb.description)
      return node_diff("description", "'" + na.description + "'", "'" + nb.description + "'");
    if (o.levels && na.level != nb.level) return node_diff("level", na.level, nb.level);
    for (uint16_t p = 1; p <= na.num_ports; ++p) {
      const Port& pa = a.port(a.port_of(NodeId(i), p));
      const Port& pb = b.port(b.port_of(*jb, p));
      auto port_diff = [&](std::string_view what, auto x, auto y) {
        return Differ(fmt::format("node '{}' port {}: {} {} vs {}", na.name, p, what, x, y));
      };
      std::string peer_a = PeerText(a, pa), peer_b = PeerText(b, pb);
      if (peer_a != peer_b) return port_diff("linked to", peer_a, peer_b);
      if (o.rates && pa.link.valid()) {
        // Each end's own rate, or (negotiated_rates) the lower of the link's two ends.
        auto rate = [&](const Fabric& f, const Port& pt) {
          if (!o.negotiated_rates) return std::pair(pt.width, pt.speed);
          const Link& l = f.link(pt.link);
          const Port& x = f.port(l.a);
          const Port& y = f.port(l.b);
          return std::pair(std::min(x.width, y.width), std::min(x.speed, y.speed));
        };
        auto [wa, sa] = rate(a, pa);
        auto [wb, sb] = rate(b, pb);
        if (wa != wb || sa != sb)
          return port_diff("rate", fmt::format("{}x{}", wa, LinkSpeedName(sa)),
                           fmt::format("{}x{}", wb, LinkSpeedName(sb)));
      }
      if (na.type == NodeType::kSwitch) continue;
      if (o.guids && pa.guid != pb.guid) return port_diff("GUID", FormatGuid(pa.guid), FormatGuid(pb.guid));
      if (o.lids && pa.lid != pb.lid) return port_diff("LID", pa.lid, pb.lid);
    }
  }
  return Status::Ok();
}

std::vector<std::string> RateMismatches(const Fabric& f) {
  std::vector<std::string> out;
  for (uint32_t i = 0; i < f.num_links(); ++i) {
    const Link& l = f.link(LinkId(i));
    const Port& a = f.port(l.a);
    const Port& b = f.port(l.b);
    if (a.width == b.width && a.speed == b.speed) continue;
    out.push_back(fmt::format(
        "'{}'[{}] {}x{} <-> '{}'[{}] {}x{}: the ends disagree on rate; the link runs at {}x{}",
        f.node(a.node).name, a.num, a.width, LinkSpeedName(a.speed), f.node(b.node).name, b.num,
        b.width, LinkSpeedName(b.speed), std::min(a.width, b.width),
        LinkSpeedName(std::min(a.speed, b.speed))));
  }
  return out;
}

}  // namespace gpool::fabric
