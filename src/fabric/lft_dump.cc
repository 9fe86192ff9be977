#include "fabric/lft_dump.h"

#include <charconv>
#include <vector>

#include <fmt/format.h>

#include "common/file.h"

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

// A node name inside a comment of the line-based dump: a line break (or any control byte) would
// start a route line of the name's choosing, which ReadLftDump (and OpenSM's readers) would take;
// they become '?'. Names from fabric files rarely hold them; this keeps the layout whatever.
std::string OneLine(std::string_view name) {
  std::string out(name);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
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
    dest[lid] = fmt::format("{} portguid 0x{:016x}: '{}'", TypeString(n.type), guid, OneLine(n.name));
  }
  auto it = std::back_inserter(out);
  for (NodeId sw : f.switches()) {
    const Node& n = f.node(sw);
    fmt::format_to(it, "Unicast lids [0-{}] of switch Lid {} guid 0x{:016x} ('{}'):\n",
                   t.max_lid(), n.lid, n.guid, OneLine(n.name));
    for (uint32_t lid = 1; lid <= t.max_lid(); ++lid) {
      uint8_t port = t.out_port(sw, static_cast<Lid>(lid));
      if (port == kNoRoute || port > n.num_ports) continue;
      fmt::format_to(it, "0x{:04x} {:03d} # {}\n", lid, port, dest[lid]);
    }
    fmt::format_to(it, "{} lids dumped\n", t.max_lid());
  }
  return out;
}

namespace {

bool StartsWith(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// Parses an unsigned number in `base` filling all of `s`.
template <typename T>
bool ParseUnsigned(std::string_view s, int base, T* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, base);
  return ec == std::errc() && end == s.data() + s.size();
}

// "0x0002c90300000100" -> value; false if not hex with the 0x prefix.
bool ParseHexGuid(std::string_view s, uint64_t* out) {
  if (!StartsWith(s, "0x") && !StartsWith(s, "0X")) return false;
  return ParseUnsigned(s.substr(2), 16, out);
}

// The word after `key` in `s` ("guid 0x..." -> "0x..."), or empty.
std::string_view WordAfter(std::string_view s, std::string_view key) {
  size_t p = s.find(key);
  if (p == std::string_view::npos) return {};
  std::string_view rest = s.substr(p + key.size());
  size_t b = rest.find_first_not_of(' ');
  if (b == std::string_view::npos) return {};
  rest = rest.substr(b);
  size_t e = rest.find_first_of(" :()'\t");
  return rest.substr(0, e);
}

}  // namespace

StatusOr<RoutingTables> ReadLftDump(std::string_view text, const Fabric& f,
                                    const LftReadOptions& o) {
  RoutingTables t(f);
  t.engine = o.engine;
  auto err = [&](int line, const std::string& what) {
    return Status::InvalidArgument(fmt::format("{}:{}: {}", o.source_name, line, what));
  };
  LineReader lines(text);
  std::string_view raw;
  NodeId current;  // invalid until the first block header
  std::vector<uint8_t> seen;  // LIDs listed in the current block
  std::vector<bool> has_block(f.num_nodes(), false);
  size_t blocks = 0;
  while (lines.Next(&raw)) {
    int ln = lines.line_number();
    std::string_view line = Trim(raw);
    if (line.empty() || line[0] == '#') continue;
    if (StartsWith(line, "Unicast lids")) {
      std::string_view g = WordAfter(line, " guid ");
      uint64_t guid = 0;
      if (!ParseHexGuid(g, &guid))
        return err(ln, "block header without 'guid 0x...': expected \"Unicast lids [0-N] of switch "
                       "Lid L guid 0x... ('name'):\"");
      auto n = f.FindByGuid(guid);
      if (!n) return err(ln, fmt::format("switch guid 0x{:016x} is not in the fabric", guid));
      if (f.node(*n).type != NodeType::kSwitch)
        return err(ln, fmt::format("guid 0x{:016x} is '{}', not a switch", guid, f.node(*n).name));
      if (has_block[n->value()])
        return err(ln, fmt::format("second block for switch '{}'", f.node(*n).name));
      has_block[n->value()] = true;
      current = *n;
      seen.assign(static_cast<size_t>(f.max_lid()) + 1, 0);
      ++blocks;
      continue;
    }
    if (!StartsWith(line, "0x") && !StartsWith(line, "0X")) {
      // "24 lids dumped" trailers; anything else is not this format.
      if (line.find("lids dumped") != std::string_view::npos) continue;
      return err(ln, fmt::format("expected 'Unicast lids ...', '0xLID PORT # ...' or 'N lids "
                                 "dumped'; got '{}'",
                                 line.substr(0, std::min<size_t>(line.size(), 60))));
    }
    if (!current.valid()) return err(ln, "route line before the first 'Unicast lids' header");
    std::string_view body = line.substr(0, line.find('#'));
    std::string_view comment =
        line.find('#') == std::string_view::npos ? std::string_view() : line.substr(line.find('#'));
    body = Trim(body);
    size_t sp = body.find_first_of(" \t");
    if (sp == std::string_view::npos) return err(ln, "expected '0xLID PORT'");
    std::string_view lid_s = body.substr(2, sp - 2);
    std::string_view port_s = Trim(body.substr(sp));
    uint32_t lid = 0, port = 0;
    if (!ParseUnsigned(lid_s, 16, &lid) || lid == 0 || lid > kMaxUnicastLid)
      return err(ln, fmt::format("LID '{}' is not a unicast LID (0x0001..0xbfff)", body.substr(0, sp)));
    if (!ParseUnsigned(port_s, 10, &port))
      return err(ln, fmt::format("port '{}' is not a decimal number", port_s));
    const Node& sw = f.node(current);
    if (port > sw.num_ports)
      return err(ln, fmt::format("port {} on switch '{}', which has {} ports", port, sw.name,
                                 sw.num_ports));
    if (lid > f.max_lid())
      return err(ln, fmt::format("LID {} is beyond the fabric's highest LID {}: the model's LIDs "
                                 "are not the subnet's",
                                 lid, f.max_lid()));
    if (seen[lid]) return err(ln, fmt::format("LID {} listed twice for switch '{}'", lid, sw.name));
    seen[lid] = 1;
    if (o.check_lid_owners) {
      uint64_t dump_guid = 0;
      std::string_view pg = WordAfter(comment, "portguid");
      if (!pg.empty() && ParseHexGuid(pg, &dump_guid)) {
        auto owner = f.FindByLid(static_cast<Lid>(lid));
        uint64_t model_guid = 0;
        if (owner) {
          const Node& n = f.node(*owner);
          model_guid = n.guid;
          if (n.type != NodeType::kSwitch)
            for (uint32_t p = n.first_port; p < n.first_port + n.num_ports; ++p)
              if (f.port(PortId(p)).lid == lid) model_guid = f.port(PortId(p)).guid;
        }
        if (model_guid != dump_guid)
          return err(ln, fmt::format(
                             "LID {} belongs to portguid 0x{:016x} in the dump but to {} in the "
                             "fabric: the model's LIDs are not the subnet's (discover the fabric "
                             "after the SM has assigned LIDs)",
                             lid, dump_guid,
                             owner ? fmt::format("'{}' (0x{:016x})", f.node(*owner).name, model_guid)
                                   : std::string("nothing")));
      }
    }
    t.set_out_port(current, static_cast<Lid>(lid), static_cast<uint8_t>(port));
  }
  if (blocks == 0) return Status::InvalidArgument(o.source_name + ": no 'Unicast lids' block");
  size_t missing = 0;
  for (NodeId s : f.switches()) missing += !has_block[s.value()];
  if (missing)
    t.notes.push_back(fmt::format("{} of {} switches have no table in {}", missing,
                                  f.switches().size(), o.source_name));
  return t;
}

}  // namespace gpool::fabric
