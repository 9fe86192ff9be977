#include "fabric/model.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace gpool::fabric {
namespace {

constexpr uint64_t kGeneratedGuidBase = 0x0002c90300000000ULL;  // Mellanox OUI, like real HCAs

}  // namespace

std::string_view NodeTypeName(NodeType t) {
  switch (t) {
    case NodeType::kCa: return "Ca";
    case NodeType::kSwitch: return "Switch";
    case NodeType::kRouter: return "Rt";
  }
  return "?";
}

double LaneGbps(LinkSpeed s) {
  switch (s) {
    case LinkSpeed::kSdr: return 2.5;
    case LinkSpeed::kDdr: return 5;
    case LinkSpeed::kQdr: return 10;
    case LinkSpeed::kFdr10: return 10;
    case LinkSpeed::kFdr: return 14;
    case LinkSpeed::kEdr: return 25;
    case LinkSpeed::kHdr: return 50;
    case LinkSpeed::kNdr: return 100;
    case LinkSpeed::kXdr: return 200;
  }
  return 0;
}

std::string_view LinkSpeedName(LinkSpeed s) {
  switch (s) {
    case LinkSpeed::kSdr: return "SDR";
    case LinkSpeed::kDdr: return "DDR";
    case LinkSpeed::kQdr: return "QDR";
    case LinkSpeed::kFdr10: return "FDR10";
    case LinkSpeed::kFdr: return "FDR";
    case LinkSpeed::kEdr: return "EDR";
    case LinkSpeed::kHdr: return "HDR";
    case LinkSpeed::kNdr: return "NDR";
    case LinkSpeed::kXdr: return "XDR";
  }
  return "?";
}

std::optional<LinkSpeed> ParseLinkSpeed(std::string_view name) {
  std::string up(name);
  for (char& c : up) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  static constexpr LinkSpeed kAll[] = {LinkSpeed::kSdr, LinkSpeed::kDdr, LinkSpeed::kQdr,
                                       LinkSpeed::kFdr10, LinkSpeed::kFdr, LinkSpeed::kEdr,
                                       LinkSpeed::kHdr, LinkSpeed::kNdr, LinkSpeed::kXdr};
  for (LinkSpeed s : kAll)
    if (LinkSpeedName(s) == up) return s;
  return std::nullopt;
}

bool ParseWidthSpeed(std::string_view token, LinkWidth* width, LinkSpeed* speed) {
  size_t x = token.find_first_of("xX");
  if (x == 0 || x == std::string_view::npos) return false;
  int w = 0;
  for (size_t i = 0; i < x; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(token[i]))) return false;
    w = w * 10 + (token[i] - '0');
  }
  if (w != 1 && w != 2 && w != 4 && w != 8 && w != 12) return false;
  auto s = ParseLinkSpeed(token.substr(x + 1));
  if (!s) return false;
  *width = static_cast<LinkWidth>(w);
  *speed = *s;
  return true;
}

std::string FormatGuid(uint64_t guid) { return fmt::format("0x{:016x}", guid); }

// ---------------------------------------------------------------------------------------------
// Fabric

PortId Fabric::port_of(NodeId node, uint16_t num) const {
  const Node& n = nodes_[node.value()];
  if (num == 0 || num > n.num_ports) return PortId();
  return PortId(n.first_port + num - 1);
}

bool Fabric::link_usable(LinkId l) const {
  const Link& k = links_[l.value()];
  return k.up && nodes_[ports_[k.a.value()].node.value()].up &&
         nodes_[ports_[k.b.value()].node.value()].up;
}

double Fabric::link_gbps(LinkId l) const {
  const Link& k = links_[l.value()];
  const Port& a = ports_[k.a.value()];
  const Port& b = ports_[k.b.value()];
  return std::min(a.width, b.width) * std::min(LaneGbps(a.speed), LaneGbps(b.speed));
}

NodeId Fabric::link_peer(LinkId l, NodeId n) const {
  const Link& k = links_[l.value()];
  NodeId a = ports_[k.a.value()].node;
  return a == n ? ports_[k.b.value()].node : a;
}

std::optional<NodeId> Fabric::FindByName(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeId> Fabric::FindByGuid(uint64_t guid) const {
  auto it = by_guid_.find(guid);
  if (it == by_guid_.end()) return std::nullopt;
  return it->second;
}

std::optional<NodeId> Fabric::FindByLid(Lid lid) const {
  if (lid >= lid_owner_.size() || !lid_owner_[lid].valid()) return std::nullopt;
  return lid_owner_[lid];
}

Lid Fabric::lid_of_port(PortId p) const {
  const Port& port = ports_[p.value()];
  const Node& n = nodes_[port.node.value()];
  return n.type == NodeType::kSwitch ? n.lid : port.lid;
}

Status Fabric::SetLinkUp(LinkId l, bool up) {
  if (!l.valid() || l.value() >= links_.size())
    return Status::NotFound(fmt::format("no link {}", l.value()));
  links_[l.value()].up = up;
  return Status::Ok();
}

Status Fabric::SetNodeUp(NodeId n, bool up) {
  if (!n.valid() || n.value() >= nodes_.size())
    return Status::NotFound(fmt::format("no node {}", n.value()));
  nodes_[n.value()].up = up;
  return Status::Ok();
}

size_t Fabric::MemoryBytes() const {
  size_t b = nodes_.capacity() * sizeof(Node) + ports_.capacity() * sizeof(Port) +
             links_.capacity() * sizeof(Link) + adj_offset_.capacity() * sizeof(uint32_t) +
             adj_.capacity() * sizeof(Adjacent) +
             (cas_.capacity() + switches_.capacity() + lid_owner_.capacity()) * sizeof(NodeId);
  for (const Node& n : nodes_) {
    if (n.name.capacity() > 15) b += n.name.capacity() + 1;
    if (n.description.capacity() > 15) b += n.description.capacity() + 1;
  }
  // Hash maps: one node per entry plus the bucket array (libstdc++ layout, approximately).
  b += by_name_.size() * (sizeof(std::string) + sizeof(NodeId) + 2 * sizeof(void*)) +
       by_name_.bucket_count() * sizeof(void*);
  b += by_guid_.size() * (sizeof(uint64_t) + sizeof(NodeId) + sizeof(void*)) +
       by_guid_.bucket_count() * sizeof(void*);
  return b;
}

void Fabric::Index() {
  num_switches_ = num_cas_ = 0;
  cas_.clear();
  switches_.clear();
  for (uint32_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].type == NodeType::kSwitch) {
      ++num_switches_;
      switches_.push_back(NodeId(i));
    } else if (nodes_[i].type == NodeType::kCa) {
      ++num_cas_;
      cas_.push_back(NodeId(i));
    }
  }
  // CSR adjacency in port order.
  adj_offset_.assign(nodes_.size() + 1, 0);
  for (const Port& p : ports_)
    if (p.link.valid()) ++adj_offset_[p.node.value() + 1];
  for (size_t i = 0; i < nodes_.size(); ++i) adj_offset_[i + 1] += adj_offset_[i];
  adj_.assign(adj_offset_.back(), Adjacent{});
  std::vector<uint32_t> fill(adj_offset_.begin(), adj_offset_.end() - 1);
  for (uint32_t pi = 0; pi < ports_.size(); ++pi) {
    const Port& p = ports_[pi];
    if (!p.link.valid()) continue;
    const Link& l = links_[p.link.value()];
    PortId other = l.a.value() == pi ? l.b : l.a;
    const Port& o = ports_[other.value()];
    adj_[fill[p.node.value()]++] = Adjacent{o.node, p.num, o.num, p.link};
  }
}

// ---------------------------------------------------------------------------------------------
// FabricBuilder

StatusOr<NodeId> FabricBuilder::AddNode(NodeSpec spec) {
  if (spec.name.empty()) return Status::InvalidArgument("node has an empty name");
  if (spec.num_ports == 0 || spec.num_ports > 254)
    return Status::InvalidArgument(
        fmt::format("node '{}': port count {} is outside 1..254", spec.name, spec.num_ports));
  NodeId id(static_cast<uint32_t>(f_.nodes_.size()));
  if (!f_.by_name_.emplace(spec.name, id).second)
    return Status::AlreadyExists(fmt::format("node '{}' is defined twice", spec.name));
  Node n;
  n.type = spec.type;
  n.guid = spec.guid ? spec.guid : kGeneratedGuidBase + (static_cast<uint64_t>(id.value()) + 1) * 0x100;
  n.sysimg_guid = spec.sysimg_guid;
  n.name = std::move(spec.name);
  n.description = std::move(spec.description);
  n.num_ports = spec.num_ports;
  n.lid = spec.lid;
  n.lmc = spec.lmc;
  n.level = spec.level;
  n.first_port = static_cast<uint32_t>(f_.ports_.size());
  if (!f_.by_guid_.emplace(n.guid, id).second) {
    f_.by_name_.erase(n.name);
    return Status::AlreadyExists(
        fmt::format("node '{}': GUID {} is used by another node", n.name, FormatGuid(n.guid)));
  }
  for (uint16_t p = 1; p <= n.num_ports; ++p) {
    Port port;
    port.node = id;
    port.num = p;
    if (n.type != NodeType::kSwitch) port.guid = n.guid + p;
    f_.ports_.push_back(port);
  }
  f_.nodes_.push_back(std::move(n));
  return id;
}

Status FabricBuilder::AddLink(NodeId a, uint16_t a_port, NodeId b, uint16_t b_port,
                              LinkSpec spec) {
  if (!a.valid() || !b.valid() || a.value() >= f_.nodes_.size() || b.value() >= f_.nodes_.size())
    return Status::InvalidArgument("link names an unknown node");
  PortId pa = f_.port_of(a, a_port), pb = f_.port_of(b, b_port);
  const Node& na = f_.nodes_[a.value()];
  const Node& nb = f_.nodes_[b.value()];
  if (!pa.valid())
    return Status::InvalidArgument(fmt::format("node '{}' has ports 1..{}, not port {}", na.name,
                                               na.num_ports, a_port));
  if (!pb.valid())
    return Status::InvalidArgument(fmt::format("node '{}' has ports 1..{}, not port {}", nb.name,
                                               nb.num_ports, b_port));
  if (pa == pb) return Status::InvalidArgument(fmt::format("port {}[{}] linked to itself", na.name, a_port));
  Port& A = f_.ports_[pa.value()];
  Port& B = f_.ports_[pb.value()];
  if (A.link.valid() || B.link.valid()) {
    // The same link seen from its other end is fine; anything else is a conflict.
    if (A.link.valid() && A.link == B.link) return Status::Ok();
    const Port& busy = A.link.valid() ? A : B;
    const Node& bn = f_.nodes_[busy.node.value()];
    const Link& l = f_.links_[busy.link.value()];
    const Port& other = f_.ports_[(l.a == (A.link.valid() ? pa : pb) ? l.b : l.a).value()];
    return Status::InvalidArgument(fmt::format(
        "port {}[{}] is already linked to {}[{}]; cannot also link {}[{}] to {}[{}]", bn.name,
        busy.num, f_.nodes_[other.node.value()].name, other.num, na.name, a_port, nb.name, b_port));
  }
  LinkId id(static_cast<uint32_t>(f_.links_.size()));
  f_.links_.push_back(Link{pa, pb, true});
  A.link = B.link = id;
  A.width = B.width = spec.width;
  A.speed = B.speed = spec.speed;
  return Status::Ok();
}

Status FabricBuilder::SetPortAddress(NodeId n, uint16_t port, uint64_t guid, Lid lid) {
  PortId p = f_.port_of(n, port);
  if (!p.valid()) return Status::InvalidArgument(fmt::format("no port {} on node {}", port, n.value()));
  if (guid) f_.ports_[p.value()].guid = guid;
  f_.ports_[p.value()].lid = lid;
  return Status::Ok();
}

Status FabricBuilder::SetPortRate(NodeId n, uint16_t port, LinkSpec rate) {
  PortId p = f_.port_of(n, port);
  if (!p.valid()) return Status::NotFound(fmt::format("no port {} on node {}", port, n.value()));
  Port& pp = f_.ports_[p.value()];
  if (!pp.link.valid())
    return Status::FailedPrecondition(fmt::format("port {}[{}] is not cabled",
                                                  f_.nodes_[n.value()].name, port));
  pp.width = rate.width;
  pp.speed = rate.speed;
  return Status::Ok();
}

std::optional<NodeId> FabricBuilder::FindByName(std::string_view name) const {
  return f_.FindByName(name);
}

StatusOr<Fabric> FabricBuilder::Build(const BuildOptions& options) {
  Fabric f = std::move(f_);
  f_ = Fabric();
  f.Index();
  // LIDs: keep those read from a dump, assign the rest after the highest one in use.
  Lid next = 0;
  for (const Node& n : f.nodes_) next = std::max(next, n.lid);
  for (const Port& p : f.ports_) next = std::max(next, p.lid);
  auto take = [&]() -> StatusOr<Lid> {
    if (next >= kMaxUnicastLid)
      return Status::ResourceExhausted("fabric needs more than 49151 unicast LIDs");
    return ++next;
  };
  if (options.assign_lids) {
    for (Node& n : f.nodes_) {
      if (n.type == NodeType::kSwitch) {
        if (n.lid == 0) { GPOOL_ASSIGN_OR_RETURN(n.lid, take()); }
        continue;
      }
      for (uint32_t pi = n.first_port; pi < n.first_port + n.num_ports; ++pi) {
        Port& p = f.ports_[pi];
        if (!p.link.valid() && p.lid == 0) continue;
        if (p.lid == 0) { GPOOL_ASSIGN_OR_RETURN(p.lid, take()); }
      }
    }
  }
  f.lid_owner_.assign(static_cast<size_t>(next) + 1, NodeId());
  auto own = [&](Lid lid, NodeId id) -> Status {
    if (lid == 0) return Status::Ok();
    if (f.lid_owner_[lid].valid() && f.lid_owner_[lid] != id)
      return Status::InvalidArgument(fmt::format("LID {} is used by both '{}' and '{}'", lid,
                                                 f.nodes_[f.lid_owner_[lid].value()].name,
                                                 f.nodes_[id.value()].name));
    f.lid_owner_[lid] = id;
    f.max_lid_ = std::max(f.max_lid_, lid);
    return Status::Ok();
  };
  for (uint32_t i = 0; i < f.nodes_.size(); ++i) {
    Node& n = f.nodes_[i];
    if (n.type == NodeType::kSwitch) {
      GPOOL_RETURN_IF_ERROR(own(n.lid, NodeId(i)));
    } else {
      for (uint32_t pi = n.first_port; pi < n.first_port + n.num_ports; ++pi) {
        GPOOL_RETURN_IF_ERROR(own(f.ports_[pi].lid, NodeId(i)));
        if (n.lid == 0) n.lid = f.ports_[pi].lid;
      }
    }
  }
  return f;
}

}  // namespace gpool::fabric
