// dor: dimension-order routing on a 3D torus (x, then y, then z; the shorter way round each
// ring, ties towards +).
//
// Dimension order alone removes cycles between dimensions; the rings themselves are broken by
// the dateline on a second VL (see HopVls in routing.h), so the tables carry the torus layout
// and num_vls = 2. Coordinates come from switch names containing "x<X>-y<Y>-z<Z>" (as
// GenerateTorus names them, "sw-x1-y0-z3"); a switch without them is an error. dor does not route
// around failures: a missing or failed ring link makes it refuse (FailedPrecondition), and Route
// falls back to updn and says so.
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "fabric/route_internal.h"

namespace gpool::fabric::internal {
namespace {

// Parses the number after `key` (e.g. "x") that is preceded by '-' or starts the name.
bool ParseCoord(std::string_view name, char key, uint16_t* out) {
  for (size_t i = 0; i + 1 < name.size(); ++i) {
    if (name[i] != key || (i > 0 && name[i - 1] != '-')) continue;
    const char* b = name.data() + i + 1;
    const char* e = name.data() + name.size();
    unsigned v = 0;
    auto [p, ec] = std::from_chars(b, e, v);
    if (ec != std::errc() || p == b || v > 1024) continue;
    if (p != e && *p != '-') continue;
    *out = static_cast<uint16_t>(v);
    return true;
  }
  return false;
}

}  // namespace

Status RouteDor(const SwitchGraph& g, const LidSet& lids, RoutingTables* t) {
  const uint32_t n = static_cast<uint32_t>(g.size());
  auto layout = std::make_shared<TorusLayout>();
  layout->coord.assign(g.fabric.num_nodes(), {0, 0, 0});
  std::vector<std::array<uint16_t, 3>> c(n);
  std::array<uint16_t, 3> dims = {1, 1, 1};
  for (uint32_t s = 0; s < n; ++s) {
    const std::string& name = g.fabric.node(g.nodes[s]).name;
    if (!ParseCoord(name, 'x', &c[s][0]) || !ParseCoord(name, 'y', &c[s][1]) ||
        !ParseCoord(name, 'z', &c[s][2]))
      return Status::InvalidArgument(fmt::format(
          "dor needs torus coordinates: switch '{}' has no 'x<X>-y<Y>-z<Z>' in its name", name));
    for (int k = 0; k < 3; ++k) dims[k] = std::max<uint16_t>(dims[k], c[s][k] + 1);
    layout->coord[g.nodes[s].value()] = c[s];
  }
  if (static_cast<size_t>(dims[0]) * dims[1] * dims[2] != n)
    return Status::InvalidArgument(fmt::format(
        "dor: {} switches do not fill a {}x{}x{} torus", n, dims[0], dims[1], dims[2]));
  layout->dims = dims;
  // Ring ports per switch: [dim][0 = +, 1 = -], 0 when missing or down.
  std::vector<std::array<std::array<uint16_t, 2>, 3>> ring(n);
  for (uint32_t s = 0; s < n; ++s) {
    ring[s] = {};
    for (const SwitchEdge& e : g.adj(s)) {
      int dim = -1;
      for (int k = 0; k < 3; ++k)
        if (c[s][k] != c[e.peer][k]) dim = dim == -1 ? k : 3;
      if (dim < 0 || dim > 2) continue;
      uint16_t size = dims[dim];
      if ((c[s][dim] + 1) % size == c[e.peer][dim] && !ring[s][dim][0]) ring[s][dim][0] = e.port;
      if ((c[s][dim] + size - 1) % size == c[e.peer][dim] && !ring[s][dim][1])
        ring[s][dim][1] = e.port;
    }
  }
  for (uint32_t d = 0; d < n; ++d) {
    const NodeId dn = g.nodes[d];
    const Lid own = g.fabric.node(dn).lid;
    const auto dests = g.ca_dests(d);
    bool any = lids.all() || (own && lids.contains(own));
    for (size_t i = 0; !any && i < dests.size(); ++i) any = lids.contains(dests[i].lid);
    if (!any) continue;
    for (const CaDest& x : dests)
      if (lids.contains(x.lid)) t->set_out_port(dn, x.lid, static_cast<uint8_t>(x.port));
    if (own && lids.contains(own)) t->set_out_port(dn, own, 0);
    for (uint32_t s = 0; s < n; ++s) {
      if (s == d) continue;
      int k = 0;
      while (k < 3 && c[s][k] == c[d][k]) ++k;
      uint16_t size = dims[k];
      int delta = (c[d][k] - c[s][k] + size) % size;
      int dir = delta * 2 <= size ? 0 : 1;
      uint16_t port = ring[s][k][dir];
      if (!port)
        return Status::FailedPrecondition(fmt::format(
            "the {}{} link of '{}' is down or missing", "xyz"[k], dir == 0 ? '+' : '-',
            g.fabric.node(g.nodes[s]).name));
      const NodeId sn = g.nodes[s];
      for (const CaDest& x : dests)
        if (lids.contains(x.lid)) t->set_out_port(sn, x.lid, static_cast<uint8_t>(port));
      if (own && lids.contains(own)) t->set_out_port(sn, own, static_cast<uint8_t>(port));
    }
  }
  t->torus = std::move(layout);
  t->num_vls = 2;
  return Status::Ok();
}

}  // namespace gpool::fabric::internal
