#include "fabric/lft_dump.h"

#include <fmt/format.h>

namespace gpool::fabric {
namespace {

std::string_view TypeString(NodeType t) {
  switch (t) {
    case NodeType::kCa: return "Channel Adapter";
    case NodeType::kSwitch: return "Switch";
    case NodeType::kRouter: return "Router";
  }
  return "Unknown";
}

}  // namespace

std::string WriteLftDump(const Fabric& f, const RoutingTables& t) {
  std::string out;
  // Destination comments are the same for every switch: build them once.
  std::vector<std::string> dest(static_cast<size_t>(t.max_lid()) + 1);
  for (uint32_t lid = 1; lid <= t.max_lid(); ++lid) {
    auto owner = f.FindByLid(static_cast<Lid>(lid));
    if (!owner) {
      dest[lid] = "unknown node and type";
      continue;
    }
    const Node& n = f.node(*owner);
    uint64_t guid = n.guid;
    if (n.type != NodeType::kSwitch) {
      for (uint32_t p = n.first_port; p < n.first_port + n.num_ports; ++p)
        if (f.port(PortId(p)).lid == lid) guid = f.port(PortId(p)).guid;
    }
    dest[lid] = fmt::format("{} portguid 0x{:016x}: '{}'", TypeString(n.type), guid, n.name);
  }
  auto it = std::back_inserter(out);
  for (NodeId sw : f.switches()) {
    const Node& n = f.node(sw);
    fmt::format_to(it, "Unicast lids [0-{}] of switch Lid {} guid 0x{:016x} ('{}'):\n",
                   t.max_lid(), n.lid, n.guid, n.name);
    for (uint32_t lid = 1; lid <= t.max_lid(); ++lid) {
      uint8_t port = t.out_port(sw, static_cast<Lid>(lid));
      if (port == kNoRoute || port > n.num_ports) continue;
      fmt::format_to(it, "0x{:04x} {:03d} # {}\n", lid, port, dest[lid]);
    }
    fmt::format_to(it, "{} lids dumped\n", t.max_lid());
  }
  return out;
}

}  // namespace gpool::fabric
