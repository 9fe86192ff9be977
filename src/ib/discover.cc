#include "ib/discover.h"

#include <infiniband/ibnetdisc.h>
#include <infiniband/mad.h>

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

namespace gpool::ib {
namespace {

using fabric::FabricBuilder;
using fabric::LinkSpeed;
using fabric::NodeId;
using fabric::NodeType;

constexpr uint32_t kCapHasExtSpeeds = 1u << 14;  // PortInfo:CapabilityMask.IsExtendedSpeedsSupported

struct FabricDeleter {
  void operator()(ibnd_fabric_t* f) const { ibnd_destroy_fabric(f); }
};
using IbndFabric = std::unique_ptr<ibnd_fabric_t, FabricDeleter>;

std::string GuidName(const ibnd_node_t* n) {
  char prefix = n->type == IB_NODE_SWITCH ? 'S' : n->type == IB_NODE_ROUTER ? 'R' : 'H';
  return fmt::format("{}-{:016x}", prefix, n->guid);
}

StatusOr<NodeType> TypeOf(const ibnd_node_t* n) {
  switch (n->type) {
    case IB_NODE_CA: return NodeType::kCa;
    case IB_NODE_SWITCH: return NodeType::kSwitch;
    case IB_NODE_ROUTER: return NodeType::kRouter;
  }
  return Status::InvalidArgument(
      fmt::format("node 0x{:016x} ('{}'): unknown node type {}", n->guid, n->nodedesc, n->type));
}

// Width mask (PortInfo:LinkWidthActive) to lanes: 1=1x 2=4x 4=8x 8=12x 16=2x.
fabric::LinkWidth Lanes(uint32_t mask) {
  switch (mask) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
  }
  return 4;
}

// Active speed of a port: extended speed (FDR/EDR/HDR/NDR) when the port advertises extended
// speeds and one is active, else LinkSpeedActive (SDR/DDR/QDR). A switch advertises its
// capabilities on port 0.
LinkSpeed Speed(const ibnd_port_t* p) {
  const ibnd_node_t* n = p->node;
  const ibnd_port_t* cap_port = p;
  if (n->type == IB_NODE_SWITCH && n->ports && n->ports[0]) cap_port = n->ports[0];
  uint8_t* info = const_cast<uint8_t*>(p->info);
  uint32_t cap = mad_get_field(const_cast<uint8_t*>(cap_port->info), 0, IB_PORT_CAPMASK_F);
  if (cap & kCapHasExtSpeeds) {
    switch (mad_get_field(info, 0, IB_PORT_LINK_SPEED_EXT_ACTIVE_F)) {
      case 1: return LinkSpeed::kFdr;
      case 2: return LinkSpeed::kEdr;
      case 4: return LinkSpeed::kHdr;
      case 8: return LinkSpeed::kNdr;
      default: break;
    }
  }
  switch (mad_get_field(info, 0, IB_PORT_LINK_SPEED_ACTIVE_F)) {
    case 2: return LinkSpeed::kDdr;
    case 4: return LinkSpeed::kQdr;
    default: return LinkSpeed::kSdr;
  }
}

StatusOr<fabric::Fabric> Convert(ibnd_fabric_t* f, const DiscoverOptions& options) {
  // Nodes in libibnetdisc's list order, switches first (the order ibnetdiscover prints).
  std::vector<ibnd_node_t*> nodes;
  for (int pass = 0; pass < 2; ++pass)
    for (ibnd_node_t* n = f->nodes; n; n = n->next)
      if ((n->type == IB_NODE_SWITCH) == (pass == 0)) nodes.push_back(n);
  if (nodes.empty()) return Status::NotFound("discovery found no nodes");

  bool by_description = options.naming == NodeNaming::kDescription;
  if (options.naming == NodeNaming::kAuto) {
    std::unordered_set<std::string> seen;
    by_description = true;
    for (const ibnd_node_t* n : nodes)
      if (n->nodedesc[0] == '\0' || !seen.insert(n->nodedesc).second) by_description = false;
  }

  FabricBuilder b;
  std::vector<NodeId> ids(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ibnd_node_t* n = nodes[i];
    GPOOL_ASSIGN_OR_RETURN(NodeType type, TypeOf(n));
    fabric::NodeSpec spec;
    spec.type = type;
    spec.description = n->nodedesc;
    spec.name = by_description ? spec.description : GuidName(n);
    if (spec.name.empty())
      return Status::InvalidArgument(
          fmt::format("node 0x{:016x} has no node description to name it by", n->guid));
    spec.num_ports = static_cast<uint16_t>(n->numports);
    spec.guid = n->guid;
    spec.sysimg_guid =
        mad_get_field64(const_cast<uint8_t*>(n->info), 0, IB_NODE_SYSTEM_GUID_F);
    if (type == NodeType::kSwitch) {
      spec.lid = n->smalid;
      spec.lmc = n->smalmc;
    } else if (n->ports) {
      // The model keeps one LMC per CA: its first connected port's (as the parsers do).
      for (int pn = 1; pn <= n->numports; ++pn)
        if (n->ports[pn] && n->ports[pn]->remoteport) {
          spec.lmc = n->ports[pn]->lmc;
          break;
        }
    }
    auto id = b.AddNode(std::move(spec));
    if (!id.ok())
      return id.status().WithContext(fmt::format("node 0x{:016x} ('{}')", n->guid, n->nodedesc));
    ids[i] = *id;
  }
  std::unordered_map<const ibnd_node_t*, NodeId> id_of;
  for (size_t i = 0; i < nodes.size(); ++i) id_of[nodes[i]] = ids[i];

  for (size_t i = 0; i < nodes.size(); ++i) {
    const ibnd_node_t* n = nodes[i];
    if (!n->ports) continue;
    for (int pn = 1; pn <= n->numports; ++pn) {
      const ibnd_port_t* p = n->ports[pn];
      if (!p) continue;
      if (n->type != IB_NODE_SWITCH && (p->guid != 0 || p->base_lid != 0)) {
        GPOOL_RETURN_IF_ERROR(
            b.SetPortAddress(ids[i], static_cast<uint16_t>(pn), p->guid, p->base_lid));
      }
      const ibnd_port_t* r = p->remoteport;
      if (!r || !r->node) continue;
      auto rid = id_of.find(r->node);
      if (rid == id_of.end())
        return Status::Internal(fmt::format("port {} of '{}' links to a node not in the fabric",
                                            pn, n->nodedesc));
      fabric::LinkSpec spec;
      spec.width = Lanes(mad_get_field(const_cast<uint8_t*>(p->info), 0,
                                       IB_PORT_LINK_WIDTH_ACTIVE_F));
      spec.speed = Speed(p);
      Status s = b.AddLink(ids[i], static_cast<uint16_t>(pn), rid->second,
                           static_cast<uint16_t>(r->portnum), spec);
      if (!s.ok())
        return s.WithContext(fmt::format("link '{}'[{}] - '{}'[{}]", n->nodedesc, pn,
                                         r->node->nodedesc, r->portnum));
    }
  }
  return b.Build({.assign_lids = false});
}

}  // namespace

StatusOr<fabric::Fabric> DiscoverFabric(const DiscoverOptions& options) {
  ibnd_config_t config{};
  if (options.timeout_ms > 0) config.timeout_ms = static_cast<unsigned>(options.timeout_ms);
  if (options.retries > 0) config.retries = static_cast<unsigned>(options.retries);
  std::string ca = options.ca_name;
  IbndFabric f(ibnd_discover_fabric(ca.empty() ? nullptr : ca.data(), options.ca_port, nullptr,
                                    &config));
  if (!f)
    return Status::Unavailable(fmt::format(
        "fabric discovery from {} port {} failed (no InfiniBand device, or no umad access; "
        "under ibsim run with LD_PRELOAD=libumad2sim.so)",
        ca.empty() ? "the first CA" : ca, options.ca_port));
  return Convert(f.get(), options);
}

StatusOr<fabric::Fabric> LoadIbndCache(const std::string& path, const DiscoverOptions& options) {
  IbndFabric f(ibnd_load_fabric(path.c_str(), 0));
  if (!f) return Status::InvalidArgument(fmt::format("{}: not a readable ibnetdiscover cache", path));
  auto r = Convert(f.get(), options);
  if (!r.ok()) return r.status().WithContext(path);
  return r;
}

}  // namespace gpool::ib
