#include "fabric/writers.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <deque>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "fabric/levels.h"

namespace gpool::fabric {
namespace {

constexpr size_t kIbsimMaxName = 64;  // ibsim's NODEIDLEN is 65 with the terminator

Status CheckText(const Node& n, std::string_view what, std::string_view s) {
  for (char c : s) {
    if (c == '"' || c == '\n' || c == '\r')
      return Status::InvalidArgument(fmt::format(
          "node '{}': its {} contains a quote or line break, which ibnetdiscover text cannot hold",
          n.name, what));
  }
  return Status::Ok();
}

std::string SpeedToken(const Port& p) {
  return fmt::format("{}x{}", p.width, LinkSpeedName(p.speed));
}
// The rate a link runs at: the lower width and speed of its two ends (they differ only when a
// dump said so; see RateMismatches).
std::string LinkRateToken(const Port& a, const Port& b) {
  return fmt::format("{}x{}", std::min(a.width, b.width), LinkSpeedName(std::min(a.speed, b.speed)));
}

// LID as the far end's port line reports it: a switch's LID, or the CA port's own.
Lid RemoteLid(const Fabric& f, PortId remote) {
  const Node& n = f.node(f.port(remote).node);
  return n.type == NodeType::kSwitch ? n.lid : f.port(remote).lid;
}

enum class Dialect { kIbnetdiscover, kIbsim };

void WriteRecord(const Fabric& f, NodeId id, Dialect dialect, fmt::memory_buffer& out) {
  const Node& n = f.node(id);
  auto o = std::back_inserter(out);
  fmt::format_to(o, "\n");
  if (n.sysimg_guid) fmt::format_to(o, "sysimgguid=0x{:x}\n", n.sysimg_guid);
  if (n.type == NodeType::kSwitch) {
    fmt::format_to(o, "switchguid=0x{:x}({:x})\n", n.guid, n.guid);
    fmt::format_to(o, "Switch\t{} \"{}\"\t\t# \"{}\" enhanced port 0 lid {} lmc {}\n", n.num_ports,
                   n.name, n.description, n.lid, n.lmc);
    // The tier, as a comment line every other reader skips (ParseNet reads it back).
    if (n.level >= 0) fmt::format_to(o, "# gpool: level {}\n", n.level);
  } else {
    bool ca = n.type == NodeType::kCa;
    fmt::format_to(o, "{}guid=0x{:x}\n", ca ? "ca" : "rt", n.guid);
    fmt::format_to(o, "{}\t{} \"{}\"\t\t# \"{}\"\n", ca ? "Ca" : "Rt", n.num_ports, n.name,
                   n.description);
  }
  for (uint16_t pn = 1; pn <= n.num_ports; ++pn) {
    PortId pid = f.port_of(id, pn);
    const Port& p = f.port(pid);
    if (!p.link.valid()) continue;
    const Link& l = f.link(p.link);
    PortId rid = l.a == pid ? l.b : l.a;
    const Port& rp = f.port(rid);
    const Node& rn = f.node(rp.node);
    std::string rdesc = rn.description;
    // ibsim scans a whole port line for '=' options, comment included.
    if (dialect == Dialect::kIbsim) std::replace(rdesc.begin(), rdesc.end(), '=', '_');
    if (n.type == NodeType::kSwitch) {
      fmt::format_to(o, "[{}]\t\"{}\"[{}]", pn, rn.name, rp.num);
      if (rn.type != NodeType::kSwitch) fmt::format_to(o, "({:x}) ", rp.guid);
      fmt::format_to(o, "\t\t# \"{}\" lid {} {}\n", rdesc, RemoteLid(f, rid), SpeedToken(p));
    } else {
      fmt::format_to(o, "[{}]({:x}) \t\"{}\"[{}]", pn, p.guid, rn.name, rp.num);
      if (rn.type != NodeType::kSwitch) fmt::format_to(o, " ({:x}) ", rp.guid);
      fmt::format_to(o, "\t\t# lid {} lmc {} \"{}\" lid {} {}\n", p.lid, n.lmc, rdesc,
                     RemoteLid(f, rid), SpeedToken(p));
    }
  }
}

Status CheckWritable(const Fabric& f, Dialect dialect) {
  for (const Node& n : f.nodes()) {
    GPOOL_RETURN_IF_ERROR(CheckText(n, "name", n.name));
    GPOOL_RETURN_IF_ERROR(CheckText(n, "description", n.description));
    if (dialect == Dialect::kIbsim) {
      if (n.name.size() > kIbsimMaxName)
        return Status::InvalidArgument(fmt::format(
            "node '{}': ibsim takes names of at most {} characters", n.name, kIbsimMaxName));
      if (n.name.find_first_of("#@") != std::string::npos)
        return Status::InvalidArgument(
            fmt::format("node '{}': ibsim reserves '#' and '@' in names", n.name));
    }
  }
  return Status::Ok();
}

bool HasCaNeighbour(const Fabric& f, NodeId s) {
  for (const Adjacent* a = f.adj_begin(s); a != f.adj_end(s); ++a)
    if (f.node(a->peer).type != NodeType::kSwitch) return true;
  return false;
}

std::string SlurmSafe(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) c = '_';
  }
  return out;
}

bool IsGeneratedCaName(std::string_view name) {
  if (name.size() != 18 || name.substr(0, 2) != "H-") return false;
  return std::all_of(name.begin() + 2, name.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

std::string_view FirstWord(std::string_view s, std::string_view* rest = nullptr) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_first_of(" \t", b);
  std::string_view w = s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b);
  if (rest) *rest = e == std::string_view::npos ? std::string_view() : s.substr(e);
  return w;
}

}  // namespace

StatusOr<std::string> WriteIbnetdiscover(const Fabric& f) {
  GPOOL_RETURN_IF_ERROR(CheckWritable(f, Dialect::kIbnetdiscover));
  fmt::memory_buffer out;
  auto o = std::back_inserter(out);
  fmt::format_to(o, "#\n# Topology file: generated by gpool ({} switches, {} CAs, {} links)\n#\n",
                 f.num_switches(), f.num_cas(), f.num_links());
  if (!f.cas().empty()) {
    const Node& c = f.node(f.cas().front());
    fmt::format_to(o, "# Initiated from node {:016x} port {:016x}\n", c.guid,
                   f.port(PortId(c.first_port)).guid);
  }
  for (NodeId s : f.switches()) WriteRecord(f, s, Dialect::kIbnetdiscover, out);
  for (NodeId c : f.cas()) WriteRecord(f, c, Dialect::kIbnetdiscover, out);
  for (uint32_t i = 0; i < f.num_nodes(); ++i)
    if (f.node(NodeId(i)).type == NodeType::kRouter) WriteRecord(f, NodeId(i), Dialect::kIbnetdiscover, out);
  return fmt::to_string(out);
}

StatusOr<std::string> WriteIbsimNet(const Fabric& f, const IbsimWriteOptions& options) {
  GPOOL_RETURN_IF_ERROR(CheckWritable(f, Dialect::kIbsim));
  std::optional<NodeId> first;
  if (!options.sm_node.empty()) {
    first = f.FindByName(options.sm_node);
    if (!first) return Status::NotFound(fmt::format("SM node '{}' is not in the fabric", options.sm_node));
  } else {
    for (int pass = 0; pass < 2 && !first; ++pass)
      for (NodeId s : f.switches())
        if ((pass == 1 || f.node(s).level == 0) && HasCaNeighbour(f, s)) {
          first = s;
          break;
        }
    if (!first && !f.switches().empty()) first = f.switches().front();
    if (!first && f.num_nodes() > 0) first = NodeId(0);
  }
  fmt::memory_buffer out;
  auto o = std::back_inserter(out);
  fmt::format_to(o,
                 "# ibsim net file generated by gpool: {} switches, {} CAs, {} links.\n"
                 "# Run: ibsim -s THIS_FILE (raise -N/-S/-P for large fabrics). The first record is\n"
                 "# where ibsim attaches the SM{}.\n",
                 f.num_switches(), f.num_cas(), f.num_links(),
                 first ? fmt::format(" ('{}')", f.node(*first).name) : std::string());
  if (first) WriteRecord(f, *first, Dialect::kIbsim, out);
  for (NodeId s : f.switches())
    if (s != first) WriteRecord(f, s, Dialect::kIbsim, out);
  for (uint32_t i = 0; i < f.num_nodes(); ++i) {
    NodeId id(i);
    if (f.node(id).type != NodeType::kSwitch && id != first) WriteRecord(f, id, Dialect::kIbsim, out);
  }
  return fmt::to_string(out);
}

std::string SlurmHostName(const Node& ca) {
  std::string_view rest;
  std::string_view first = FirstWord(ca.description, &rest);
  std::string_view second = FirstWord(rest);
  if (!first.empty() && (second.substr(0, 3) == "HCA" || second.substr(0, 3) == "mlx"))
    return SlurmSafe(first);
  if (!IsGeneratedCaName(ca.name)) {
    std::string_view w = FirstWord(ca.name);
    if (!w.empty()) return SlurmSafe(w);
  }
  return SlurmSafe(ca.name);
}

std::string CompressHostlist(std::vector<std::string> names) {
  struct Host {
    std::string prefix;
    uint64_t num = 0;
    int width = 0;  // digits; 0: no numeric suffix
    bool padded = false;
    std::string name;
  };
  std::vector<Host> hosts;
  hosts.reserve(names.size());
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  for (std::string& n : names) {
    Host h;
    size_t d = n.size();
    while (d > 0 && n[d - 1] >= '0' && n[d - 1] <= '9') --d;
    size_t digits = n.size() - d;
    if (digits > 0 && digits <= 18) {
      h.prefix = n.substr(0, d);
      h.width = static_cast<int>(digits);
      h.padded = digits > 1 && n[d] == '0';
      h.num = std::stoull(n.substr(d));
    } else {
      h.prefix = n;
    }
    h.name = std::move(n);
    hosts.push_back(std::move(h));
  }
  std::sort(hosts.begin(), hosts.end(), [](const Host& a, const Host& b) {
    if (a.prefix != b.prefix) return a.prefix < b.prefix;
    if (a.width == 0 || b.width == 0) return a.width < b.width;
    if (a.num != b.num) return a.num < b.num;
    return a.width < b.width;
  });
  auto num_text = [](const Host& h) {
    return h.padded ? fmt::format("{:0{}}", h.num, h.width) : fmt::format("{}", h.num);
  };
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < hosts.size()) {
    const Host& h = hosts[i];
    if (h.width == 0) {
      parts.push_back(h.name);
      ++i;
      continue;
    }
    // All numbered hosts with this prefix, as runs of consecutive numbers.
    std::vector<std::string> ranges;
    size_t j = i;
    size_t count = 0;
    while (j < hosts.size() && hosts[j].prefix == h.prefix && hosts[j].width != 0) {
      size_t k = j;
      while (k + 1 < hosts.size() && hosts[k + 1].prefix == h.prefix && hosts[k + 1].width != 0 &&
             hosts[k + 1].num == hosts[k].num + 1 &&
             (hosts[k + 1].width == hosts[k].width || (!hosts[k + 1].padded && !hosts[k].padded)))
        ++k;
      if (k == j)
        ranges.push_back(num_text(hosts[j]));
      else
        ranges.push_back(num_text(hosts[j]) + "-" + num_text(hosts[k]));
      count += k - j + 1;
      j = k + 1;
    }
    if (count == 1) {
      parts.push_back(h.name);
    } else {
      std::string joined;
      for (size_t r = 0; r < ranges.size(); ++r) joined += (r ? "," : "") + ranges[r];
      parts.push_back(fmt::format("{}[{}]", h.prefix, joined));
    }
    i = j;
  }
  std::string out;
  for (size_t p = 0; p < parts.size(); ++p) out += (p ? "," : "") + parts[p];
  return out;
}

StatusOr<std::string> WriteSlurmTopology(const Fabric& f, const SlurmWriteOptions& options) {
  const size_t n = f.num_nodes();
  std::vector<int> level(n, -1);
  const SwitchLevels tiers = ComputeSwitchLevels(f);
  for (NodeId s : f.switches()) level[s.value()] = tiers.level[s.value()];
  // Switch names, checked for collisions after making them Slurm-safe.
  std::vector<std::string> sw_name(n);
  std::unordered_map<std::string, NodeId> taken;
  auto mapped = [&](NodeId id) -> const std::string* {
    if (options.node_names == nullptr) return nullptr;
    auto it = options.node_names->find(f.node(id).guid);
    return it == options.node_names->end() ? nullptr : &it->second;
  };
  for (NodeId s : f.switches()) {
    const std::string* site = mapped(s);
    sw_name[s.value()] = SlurmSafe(options.switch_prefix + (site ? *site : f.node(s).name));
    auto [it, ok] = taken.emplace(sw_name[s.value()], s);
    if (!ok)
      return Status::InvalidArgument(fmt::format("switches '{}' and '{}' both become Slurm name '{}'",
                                                 f.node(it->second).name, f.node(s).name,
                                                 sw_name[s.value()]));
  }
  // Hosts under the switch of their first CA.
  std::vector<std::vector<std::string>> hosts(n);
  std::unordered_set<std::string> placed;
  std::vector<std::string> unplaced;
  for (NodeId c : f.cas()) {
    const std::string* site = mapped(c);
    std::string host = site ? SlurmSafe(FirstWord(*site)) : SlurmHostName(f.node(c));
    if (host.empty()) {
      return Status::InvalidArgument(fmt::format("CA '{}': its node-name map entry gives no host name",
                                                 f.node(c).name));
    }
    if (placed.count(host)) continue;
    std::optional<NodeId> sw;
    for (const Adjacent* a = f.adj_begin(c); a != f.adj_end(c) && !sw; ++a)
      if (f.node(a->peer).type == NodeType::kSwitch) sw = a->peer;
    if (!sw) {
      unplaced.push_back(host);
      continue;
    }
    placed.insert(host);
    hosts[sw->value()].push_back(host);
  }
  fmt::memory_buffer out;
  auto o = std::back_inserter(out);
  fmt::format_to(o,
                 "# Slurm topology.conf (TopologyPlugin=topology/tree), generated by gpool from a "
                 "fabric of {} switches and {} CAs.\n# Host names come from CA node descriptions "
                 "(\"node001 HCA-1\" -> node001), see gpool's SlurmHostName.\n",
                 f.num_switches(), f.num_cas());
  for (const std::string& h : unplaced)
    fmt::format_to(o, "# host {} has no CA attached to a switch; left out\n", h);
  std::vector<NodeId> order(f.switches());
  std::stable_sort(order.begin(), order.end(), [&](NodeId a, NodeId b) {
    return level[a.value()] < level[b.value()];
  });
  for (NodeId s : order) {
    int lv = level[s.value()];
    std::vector<std::string> children;
    if (lv > 0) {
      for (const Adjacent* a = f.adj_begin(s); a != f.adj_end(s); ++a)
        if (f.node(a->peer).type == NodeType::kSwitch && level[a->peer.value()] == lv - 1)
          children.push_back(sw_name[a->peer.value()]);
    }
    if (hosts[s.value()].empty() && children.empty()) {
      fmt::format_to(o, "# switch {} has no host or lower switch below it; left out\n",
                     sw_name[s.value()]);
      continue;
    }
    fmt::format_to(o, "SwitchName={}", sw_name[s.value()]);
    if (!children.empty()) fmt::format_to(o, " Switches={}", CompressHostlist(std::move(children)));
    if (!hosts[s.value()].empty()) fmt::format_to(o, " Nodes={}", CompressHostlist(hosts[s.value()]));
    fmt::format_to(o, "\n");
  }
  return fmt::to_string(out);
}

std::string WriteDot(const Fabric& f) {
  // A DOT quoted string: '"' and '\\' escaped, so a name cannot end the string and start
  // statements of its own; a line break as DOT's "\n"; other control bytes as the text \xNN
  // (DOT has no escape for them; a real backslash is doubled, so this cannot collide with one).
  auto q = [](std::string_view s) {
    std::string r = "\"";
    for (char c : s) {
      unsigned char u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        r += '\\';
        r += c;
      } else if (c == '\n') {
        r += "\\n";
      } else if (u < 0x20 || u == 0x7f) {
        r += fmt::format("\\x{:02x}", u);
      } else {
        r += c;
      }
    }
    return r + "\"";
  };
  fmt::memory_buffer out;
  auto o = std::back_inserter(out);
  fmt::format_to(o, "graph fabric {{\n  graph [rankdir=BT, splines=false];\n  node [fontsize=10];\n");
  std::map<int, std::vector<NodeId>> by_level;
  for (uint32_t i = 0; i < f.num_nodes(); ++i) {
    const Node& n = f.node(NodeId(i));
    bool sw = n.type == NodeType::kSwitch;
    fmt::format_to(o, "  {} [shape={}, label={}];\n", q(n.name), sw ? "box" : "ellipse",
                   q(fmt::format("{}\nlid {}", n.name, n.lid)));
    if (sw && n.level >= 0) by_level[n.level].push_back(NodeId(i));
  }
  for (const auto& [lv, ids] : by_level) {
    fmt::format_to(o, "  {{ rank=same;");
    for (NodeId id : ids) fmt::format_to(o, " {};", q(f.node(id).name));
    fmt::format_to(o, " }}  // level {}\n", lv);
  }
  for (const Link& l : f.links()) {
    const Port& a = f.port(l.a);
    const Port& b = f.port(l.b);
    fmt::format_to(o, "  {} -- {} [taillabel=\"{}\", headlabel=\"{}\", label=\"{}\"{}];\n",
                   q(f.node(a.node).name), q(f.node(b.node).name), a.num, b.num,
                   LinkRateToken(a, b),
                   l.up ? "" : ", style=dashed");
  }
  fmt::format_to(o, "}}\n");
  return fmt::to_string(out);
}

std::string WriteJson(const Fabric& f, int indent) {
  using nlohmann::json;
  json nodes = json::array();
  size_t routers = 0;
  for (uint32_t i = 0; i < f.num_nodes(); ++i) {
    const Node& n = f.node(NodeId(i));
    if (n.type == NodeType::kRouter) ++routers;
    json j = {{"id", i},
              {"name", n.name},
              {"type", std::string(NodeTypeName(n.type))},
              {"guid", FormatGuid(n.guid)},
              {"ports", n.num_ports},
              {"lid", n.lid},
              {"lmc", n.lmc},
              {"level", n.level},
              {"up", n.up}};
    if (!n.description.empty()) j["description"] = n.description;
    if (n.sysimg_guid) j["sysimgguid"] = FormatGuid(n.sysimg_guid);
    nodes.push_back(std::move(j));
  }
  json edges = json::array();
  for (uint32_t i = 0; i < f.num_links(); ++i) {
    const Link& l = f.link(LinkId(i));
    const Port& a = f.port(l.a);
    const Port& b = f.port(l.b);
    edges.push_back({{"a", {{"node", f.node(a.node).name}, {"port", a.num}}},
                     {"b", {{"node", f.node(b.node).name}, {"port", b.num}}},
                     {"width", std::min(a.width, b.width)},
                     {"speed", std::string(LinkSpeedName(std::min(a.speed, b.speed)))},
                     {"gbps", f.link_gbps(LinkId(i))},
                     {"up", l.up}});
  }
  json doc = {{"switches", f.num_switches()}, {"cas", f.num_cas()}, {"routers", routers},
              {"links", f.num_links()},       {"nodes", std::move(nodes)},
              {"edges", std::move(edges)}};
  // Names come from files and may hold bytes that are not UTF-8: replace them rather than throw.
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace gpool::fabric
