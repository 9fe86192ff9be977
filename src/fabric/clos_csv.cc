#include "fabric/clos_csv.h"

#include <algorithm>
#include <cctype>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/file.h"

namespace gpool::fabric {
namespace {

constexpr size_t kMaxHostName = 40;
constexpr size_t kShortHostName = 16;
constexpr uint32_t kMaxPorts = 254;

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

struct Host {
  std::string_view id;
  uint32_t tor;
  int line;
};

struct Tor {
  std::string name;
  uint32_t agg;
  std::vector<uint32_t> hosts;
};

}  // namespace

StatusOr<Fabric> ParseClosCsv(std::string_view text, const ClosCsvOptions& o) {
  const std::string& src = o.source_name;
  if (o.wiring == HcaWiring::kRailOptimized)
    return Status::Unimplemented("rail-optimized HCA wiring for the Clos CSV is future work; "
                                 "use kSameTor (every HCA of a host on its ToR)");
  if (o.hcas_per_host < 1 || o.hcas_per_host > 64)
    return Status::InvalidArgument(fmt::format("hcas_per_host {} is outside 1..64", o.hcas_per_host));
  if (o.tor_uplinks < 1 || o.agg_uplinks < 1)
    return Status::InvalidArgument("tor_uplinks and agg_uplinks must be at least 1");

  LineReader lines(text);
  std::string_view line;
  int col[4] = {-1, -1, -1, -1};  // ip, DSW, PSW, ASW
  size_t ncols = 0;
  static constexpr std::string_view kCols[4] = {"ip", "DSW", "PSW", "ASW"};
  // Header: the first line that is not blank.
  while (lines.Next(&line)) {
    std::string_view t = Trim(line);
    if (t.empty()) continue;
    std::vector<std::string_view> fields = Split(t, ',');
    ncols = fields.size();
    for (size_t i = 0; i < fields.size(); ++i)
      for (int c = 0; c < 4; ++c)
        if (EqualsIgnoreCase(Trim(fields[i]), kCols[c])) col[c] = static_cast<int>(i);
    for (int c = 0; c < 4; ++c)
      if (col[c] < 0)
        return Status::InvalidArgument(fmt::format(
            "{}:{}: expected a header naming the columns ip,DSW,PSW,ASW; '{}' is missing", src,
            lines.line_number(), kCols[c]));
    break;
  }
  if (ncols == 0) return Status::InvalidArgument(fmt::format("{}: empty file; expected a header ip,DSW,PSW,ASW", src));

  std::vector<std::string> cores, aggs;
  std::unordered_map<std::string_view, uint32_t> core_ix, agg_ix, host_ix;
  std::unordered_map<std::string, uint32_t> tor_ix;
  std::vector<Tor> tors;
  std::vector<std::pair<uint32_t, uint32_t>> agg_core;  // distinct (agg, core) in file order
  std::vector<Host> hosts;
  std::vector<std::string_view> fields;
  while (lines.Next(&line)) {
    std::string_view t = Trim(line);
    if (t.empty()) continue;
    fields = Split(t, ',');
    if (fields.size() != ncols)
      return Status::InvalidArgument(fmt::format("{}:{}: expected {} comma-separated fields, got {}",
                                                 src, lines.line_number(), ncols, fields.size()));
    std::string_view v[4];
    for (int c = 0; c < 4; ++c) {
      v[c] = Trim(fields[static_cast<size_t>(col[c])]);
      if (v[c].empty())
        return Status::InvalidArgument(
            fmt::format("{}:{}: the {} field is empty", src, lines.line_number(), kCols[c]));
      if (v[c].find('"') != std::string_view::npos)
        return Status::InvalidArgument(
            fmt::format("{}:{}: quotes are not supported in the {} field", src, lines.line_number(), kCols[c]));
    }
    auto [hit, new_host] = host_ix.emplace(v[0], static_cast<uint32_t>(hosts.size()));
    if (!new_host)
      return Status::InvalidArgument(fmt::format("{}:{}: host '{}' is listed twice (first at line {})",
                                                 src, lines.line_number(), v[0], hosts[hit->second].line));
    auto [cit, new_core] = core_ix.emplace(v[1], static_cast<uint32_t>(cores.size()));
    if (new_core) cores.emplace_back(v[1]);
    auto [ait, new_agg] = agg_ix.emplace(v[2], static_cast<uint32_t>(aggs.size()));
    if (new_agg) aggs.emplace_back(v[2]);
    std::pair<uint32_t, uint32_t> ac{ait->second, cit->second};
    if (std::find(agg_core.begin(), agg_core.end(), ac) == agg_core.end()) agg_core.push_back(ac);
    std::string tor_name = fmt::format("{}-{}", v[2], v[3]);
    auto [tit, new_tor] = tor_ix.emplace(tor_name, static_cast<uint32_t>(tors.size()));
    if (new_tor) tors.push_back(Tor{tor_name, ait->second, {}});
    tors[tit->second].hosts.push_back(static_cast<uint32_t>(hosts.size()));
    hosts.push_back(Host{v[0], tit->second, lines.line_number()});
  }
  if (hosts.empty()) return Status::InvalidArgument(fmt::format("{}: no host rows after the header", src));

  // Port counts: exactly what is used.
  const uint32_t hcas = static_cast<uint32_t>(o.hcas_per_host);
  const uint32_t tu = static_cast<uint32_t>(o.tor_uplinks), au = static_cast<uint32_t>(o.agg_uplinks);
  std::vector<uint32_t> agg_down(aggs.size(), 0), agg_up(aggs.size(), 0), core_down(cores.size(), 0);
  for (const Tor& t : tors) agg_down[t.agg] += tu;
  for (auto [a, c] : agg_core) {
    agg_up[a] += au;
    core_down[c] += au;
  }
  auto too_many = [&](const std::string& name, uint32_t n) {
    return Status::InvalidArgument(fmt::format(
        "{}: switch '{}' would need {} ports, more than {}; lower hcas_per_host, tor_uplinks or "
        "agg_uplinks", src, name, n, kMaxPorts));
  };

  FabricBuilder b;
  auto add = [&](NodeSpec spec) -> StatusOr<NodeId> {
    StatusOr<NodeId> id = b.AddNode(std::move(spec));
    if (!id.ok()) return id.status().WithContext(src);
    return id;
  };
  std::vector<NodeId> core_id, agg_id, tor_id;
  for (size_t c = 0; c < cores.size(); ++c) {
    if (core_down[c] > kMaxPorts) return too_many(cores[c], core_down[c]);
    GPOOL_ASSIGN_OR_RETURN(NodeId id, add(NodeSpec{.type = NodeType::kSwitch, .name = cores[c],
                                                   .num_ports = static_cast<uint16_t>(core_down[c]),
                                                   .description = "core " + cores[c], .level = 2}));
    core_id.push_back(id);
  }
  for (size_t a = 0; a < aggs.size(); ++a) {
    uint32_t n = agg_down[a] + agg_up[a];
    if (n > kMaxPorts) return too_many(aggs[a], n);
    GPOOL_ASSIGN_OR_RETURN(NodeId id, add(NodeSpec{.type = NodeType::kSwitch, .name = aggs[a],
                                                   .num_ports = static_cast<uint16_t>(n),
                                                   .description = "aggregation " + aggs[a], .level = 1}));
    agg_id.push_back(id);
  }
  for (const Tor& t : tors) {
    uint32_t n = static_cast<uint32_t>(t.hosts.size()) * hcas + tu;
    if (n > kMaxPorts) return too_many(t.name, n);
    GPOOL_ASSIGN_OR_RETURN(NodeId id, add(NodeSpec{.type = NodeType::kSwitch, .name = t.name,
                                                   .num_ports = static_cast<uint16_t>(n),
                                                   .description = "ToR " + t.name, .level = 0}));
    tor_id.push_back(id);
  }
  // Host names, cut when long; a cut that collides is an error rather than a silent merge.
  std::unordered_map<std::string, uint32_t> short_names;
  const LinkSpec spec = o.link;
  std::vector<uint16_t> agg_next(aggs.size(), 1), core_next(cores.size(), 1);
  for (uint32_t ti = 0; ti < tors.size(); ++ti) {
    const Tor& t = tors[ti];
    uint16_t port = 1;
    for (uint32_t hi : t.hosts) {
      const Host& h = hosts[hi];
      std::string host(h.id.size() > kMaxHostName ? h.id.substr(0, kShortHostName) : h.id);
      auto [it, fresh] = short_names.emplace(host, hi);
      if (!fresh)
        return Status::InvalidArgument(fmt::format(
            "{}:{}: host '{}' and the host at line {} share the short name '{}'", src, h.line, h.id,
            hosts[it->second].line, host));
      for (uint32_t k = 1; k <= hcas; ++k) {
        std::string name = fmt::format("{} HCA-{}", host, k);
        GPOOL_ASSIGN_OR_RETURN(NodeId ca, add(NodeSpec{.type = NodeType::kCa, .name = name,
                                                       .num_ports = 1, .description = name}));
        GPOOL_RETURN_IF_ERROR(b.AddLink(tor_id[ti], port++, ca, 1, spec));
      }
    }
    for (uint32_t u = 0; u < tu; ++u) {
      uint16_t ap = agg_next[t.agg]++;
      GPOOL_RETURN_IF_ERROR(b.AddLink(tor_id[ti], port++, agg_id[t.agg], ap, spec));
    }
  }
  for (auto [a, c] : agg_core) {
    for (uint32_t u = 0; u < au; ++u) {
      uint16_t ap = agg_next[a]++;
      GPOOL_RETURN_IF_ERROR(b.AddLink(agg_id[a], ap, core_id[c], core_next[c]++, spec));
    }
  }
  FabricBuilder::BuildOptions bo;
  bo.assign_lids = o.assign_lids;
  StatusOr<Fabric> f = b.Build(bo);
  if (!f.ok()) return f.status().WithContext(src);
  return f;
}

StatusOr<Fabric> LoadClosCsv(const std::string& path, ClosCsvOptions options) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  options.source_name = path;
  return ParseClosCsv(text, options);
}

}  // namespace gpool::fabric
