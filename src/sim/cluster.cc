#include "sim/cluster.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <set>

#include <fmt/format.h>

#include "common/file.h"
#include "fabric/model.h"
#include "sim/parse_util.h"

namespace gpool::sim {

int64_t SimCluster::total_gpus() const {
  int64_t n = 0;
  for (const auto& h : hosts) n += h.gpus;
  return n;
}

Status SimCluster::Validate() const {
  if (hosts.empty()) return Status::InvalidArgument("cluster has no hosts");
  if (leaf_uplink_gbps.size() != leaf_names.size() || pod_uplink_gbps.size() != pod_names.size()) {
    return Status::Internal("cluster: capacity arrays do not match domain arrays");
  }
  for (const auto& h : hosts) {
    if (h.leaf < 0 || static_cast<size_t>(h.leaf) >= leaf_names.size() || h.pod < 0 ||
        static_cast<size_t>(h.pod) >= pod_names.size()) {
      return Status::Internal(fmt::format("cluster: host {} has a bad domain index", h.name));
    }
    if (h.gpus < 0 || h.cpu_milli < 0 || h.mem_mib < 0) {
      return Status::InvalidArgument(fmt::format("cluster: host {} has negative capacity", h.name));
    }
    if (h.nic_gbps <= 0) {
      return Status::InvalidArgument(fmt::format("cluster: host {} has no network bandwidth", h.name));
    }
  }
  return Status::Ok();
}

namespace {

// Fills the uplink capacities from host NICs and oversubscription ratios.
void SizeUplinks(SimCluster* c, const ClusterNetOptions& net) {
  c->leaf_uplink_gbps.assign(c->leaf_names.size(), 0);
  c->pod_uplink_gbps.assign(c->pod_names.size(), 0);
  for (const auto& h : c->hosts) c->leaf_uplink_gbps[h.leaf] += h.nic_gbps;
  for (auto& g : c->leaf_uplink_gbps) g /= std::max(net.leaf_oversubscription, 1e-9);
  std::vector<int32_t> leaf_pod(c->leaf_names.size(), 0);
  for (const auto& h : c->hosts) leaf_pod[h.leaf] = h.pod;
  for (size_t l = 0; l < leaf_pod.size(); ++l) c->pod_uplink_gbps[leaf_pod[l]] += c->leaf_uplink_gbps[l];
  for (auto& g : c->pod_uplink_gbps) g /= std::max(net.pod_oversubscription, 1e-9);
}

}  // namespace

StatusOr<SimCluster> ParseOpenbNodes(std::string_view text, std::string_view filename,
                                     const ClusterNetOptions& net) {
  SimCluster c;
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) {
    return Status::InvalidArgument(fmt::format("{}: empty file, expected a node list header", filename));
  }
  std::string hwhere = fmt::format("{}:1", filename);
  GPOOL_ASSIGN_OR_RETURN(CsvHeader h, CsvHeader::Parse(line, hwhere));
  GPOOL_RETURN_IF_ERROR(h.Require({"sn", "cpu_milli", "memory_mib", "gpu", "model"}, hwhere));
  const int c_sn = h.Find("sn"), c_cpu = h.Find("cpu_milli"), c_mem = h.Find("memory_mib"),
            c_gpu = h.Find("gpu"), c_model = h.Find("model");
  c.pod_names.push_back("all");
  while (lines.Next(&line)) {
    std::string where = fmt::format("{}:{}", filename, lines.line_number());
    if (Trim(line).empty()) continue;
    auto cells = Split(line, ',');
    if (cells.size() != h.size()) {
      return Status::InvalidArgument(
          fmt::format("{}: expected {} fields, got {}", where, h.size(), cells.size()));
    }
    SimHost host;
    host.name = std::string(Trim(cells[c_sn]));
    if (host.name.empty()) return Status::InvalidArgument(fmt::format("{}: field 'sn': empty", where));
    GPOOL_ASSIGN_OR_RETURN(host.cpu_milli, ParseIntField(cells[c_cpu], "cpu_milli", where));
    GPOOL_ASSIGN_OR_RETURN(host.mem_mib, ParseIntField(cells[c_mem], "memory_mib", where));
    GPOOL_ASSIGN_OR_RETURN(int64_t gpus, ParseIntField(cells[c_gpu], "gpu", where));
    if (gpus < 0 || gpus > 64) {
      return Status::InvalidArgument(fmt::format("{}: field 'gpu': out of range 0..64 ({})", where, gpus));
    }
    if (host.cpu_milli < 0 || host.mem_mib < 0) {
      return Status::InvalidArgument(fmt::format("{}: negative cpu_milli or memory_mib", where));
    }
    host.gpus = static_cast<int32_t>(gpus);
    host.model = std::string(Trim(cells[c_model]));
    const size_t index = c.hosts.size();
    if (index % kOpenbHostsPerLeaf == 0) c.leaf_names.push_back(fmt::format("leaf-{}", c.leaf_names.size()));
    host.leaf = static_cast<int32_t>(c.leaf_names.size() - 1);
    host.pod = 0;
    host.nic_gbps = net.host_gbps;
    c.hosts.push_back(std::move(host));
  }
  if (c.hosts.empty()) return Status::InvalidArgument(fmt::format("{}: no nodes", filename));
  SizeUplinks(&c, net);
  c.description = fmt::format("openb node list {} ({} hosts, {} GPUs)", filename, c.hosts.size(),
                              c.total_gpus());
  return c;
}

StatusOr<SimCluster> ParseClosCsv(std::string_view text, std::string_view filename,
                                  const ClosCsvOptions& options) {
  if (options.gpus_per_host < 1) return Status::InvalidArgument("gpus per host must be >= 1");
  SimCluster c;
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) {
    return Status::InvalidArgument(fmt::format("{}: empty file, expected ip,DSW,PSW,ASW", filename));
  }
  std::string hwhere = fmt::format("{}:1", filename);
  GPOOL_ASSIGN_OR_RETURN(CsvHeader h, CsvHeader::Parse(line, hwhere));
  GPOOL_RETURN_IF_ERROR(h.Require({"ip", "DSW", "PSW", "ASW"}, hwhere));
  const int c_ip = h.Find("ip"), c_psw = h.Find("PSW"), c_asw = h.Find("ASW"), c_dsw = h.Find("DSW");
  std::map<std::string, int32_t> leaves, pods;
  std::map<std::string, int> seen;
  while (lines.Next(&line)) {
    std::string where = fmt::format("{}:{}", filename, lines.line_number());
    if (Trim(line).empty()) continue;
    auto cells = Split(line, ',');
    if (cells.size() != h.size()) {
      return Status::InvalidArgument(
          fmt::format("{}: expected {} fields, got {}", where, h.size(), cells.size()));
    }
    std::string ip(Trim(cells[c_ip])), psw(Trim(cells[c_psw])), asw(Trim(cells[c_asw])),
        dsw(Trim(cells[c_dsw]));
    if (ip.empty()) return Status::InvalidArgument(fmt::format("{}: field 'ip': empty", where));
    if (psw.empty()) return Status::InvalidArgument(fmt::format("{}: field 'PSW': empty", where));
    if (asw.empty()) return Status::InvalidArgument(fmt::format("{}: field 'ASW': empty", where));
    if (dsw.empty()) return Status::InvalidArgument(fmt::format("{}: field 'DSW': empty", where));
    if (!seen.emplace(ip, lines.line_number()).second) {
      return Status::InvalidArgument(fmt::format("{}: host '{}' already listed at line {}", where,
                                                 ip.substr(0, 16), seen[ip]));
    }
    std::string leaf = psw + "/" + asw;
    auto [pit, pnew] = pods.emplace(psw, static_cast<int32_t>(c.pod_names.size()));
    if (pnew) c.pod_names.push_back(psw);
    auto [lit, lnew] = leaves.emplace(leaf, static_cast<int32_t>(c.leaf_names.size()));
    if (lnew) c.leaf_names.push_back(leaf);
    SimHost host;
    host.name = ip.size() > 12 ? ip.substr(0, 12) : ip;  // blinded ids are long hashes
    host.gpus = options.gpus_per_host;
    host.cpu_milli = options.cpu_milli_per_host;
    host.mem_mib = options.mem_mib_per_host;
    host.model = options.model;
    host.leaf = lit->second;
    host.pod = pit->second;
    host.nic_gbps = options.net.host_gbps;
    c.hosts.push_back(std::move(host));
  }
  if (c.hosts.empty()) return Status::InvalidArgument(fmt::format("{}: no hosts", filename));
  // Keep hosts of a leaf together so that ids follow the fabric (placement scans in id order).
  std::stable_sort(c.hosts.begin(), c.hosts.end(), [](const SimHost& a, const SimHost& b) {
    return std::tie(a.pod, a.leaf) < std::tie(b.pod, b.leaf);
  });
  SizeUplinks(&c, options.net);
  c.description = fmt::format("Clos CSV {} ({} hosts, {} GPUs, {} leaves, {} pods)", filename,
                              c.hosts.size(), c.total_gpus(), c.leaf_names.size(), c.pod_names.size());
  return c;
}

std::vector<int> SwitchTiers(const fabric::Fabric& f) {
  using fabric::NodeId;
  using fabric::NodeType;
  const size_t n = f.num_nodes();
  std::vector<int> tier(n, -1);
  std::deque<NodeId> q;
  for (NodeId ca : f.cas()) {
    for (auto* a = f.adj_begin(ca); a != f.adj_end(ca); ++a) {
      if (f.node(a->peer).type != NodeType::kCa && tier[a->peer.value()] < 0) {
        tier[a->peer.value()] = 0;
        q.push_back(a->peer);
      }
    }
  }
  while (!q.empty()) {
    const NodeId s = q.front();
    q.pop_front();
    for (auto* a = f.adj_begin(s); a != f.adj_end(s); ++a) {
      if (f.node(a->peer).type == NodeType::kCa || tier[a->peer.value()] >= 0) continue;
      tier[a->peer.value()] = tier[s.value()] + 1;
      q.push_back(a->peer);
    }
  }
  return tier;
}

StatusOr<SimCluster> ClusterFromFabric(const fabric::Fabric& f, const FabricClusterOptions& options) {
  using fabric::NodeId;
  using fabric::NodeType;
  if (f.num_cas() == 0) return Status::InvalidArgument("fabric has no channel adapters (hosts)");
  const size_t n = f.num_nodes();
  const std::vector<int> tier = SwitchTiers(f);
  int top = 0;
  for (int t : tier) top = std::max(top, t);
  // Pods: components of switches below the top tier (for 2 tiers, each leaf alone).
  std::vector<uint32_t> comp(n);
  std::iota(comp.begin(), comp.end(), 0);
  auto find = [&](uint32_t x) {
    while (comp[x] != x) x = comp[x] = comp[comp[x]];
    return x;
  };
  if (top >= 2) {
    for (NodeId s : f.switches()) {
      if (tier[s.value()] < 0 || tier[s.value()] >= top) continue;
      for (auto* a = f.adj_begin(s); a != f.adj_end(s); ++a) {
        int pt = tier[a->peer.value()];
        if (pt >= 0 && pt < top) comp[find(s.value())] = find(a->peer.value());
      }
    }
  }
  SimCluster c;
  std::map<uint32_t, int32_t> leaf_index, pod_index;
  std::vector<double> leaf_up, pod_up;
  std::set<int32_t> has_uplinks;  // leaves cabled to a higher tier
  auto usable = [&](fabric::LinkId l) { return !options.usable_links_only || f.link_usable(l); };
  for (NodeId ca : f.cas()) {
    const auto& node = f.node(ca);
    NodeId leaf;
    double nic = 0;
    for (auto* a = f.adj_begin(ca); a != f.adj_end(ca); ++a) {
      nic += f.link_gbps(a->link);
      if (!leaf.valid() && f.node(a->peer).type != NodeType::kCa) leaf = a->peer;
    }
    if (!leaf.valid()) continue;  // an unconnected CA cannot host work
    SimHost h;
    h.name = node.name;
    h.gpus = options.gpus_per_host;
    h.cpu_milli = options.cpu_milli_per_host;
    h.mem_mib = options.mem_mib_per_host;
    h.model = options.model;
    h.nic_gbps = nic;
    h.ca = ca.value();
    auto [lit, lnew] = leaf_index.emplace(leaf.value(), static_cast<int32_t>(c.leaf_names.size()));
    if (lnew) {
      c.leaf_names.push_back(f.node(leaf).name);
      double up = 0;
      for (auto* a = f.adj_begin(leaf); a != f.adj_end(leaf); ++a) {
        if (tier[a->peer.value()] > 0 && usable(a->link)) up += f.link_gbps(a->link);
        if (tier[a->peer.value()] > 0) has_uplinks.insert(static_cast<int32_t>(leaf_up.size()));
      }
      leaf_up.push_back(up);
    }
    uint32_t pod_root = top >= 2 ? find(leaf.value()) : leaf.value();
    auto [pit, pnew] = pod_index.emplace(pod_root, static_cast<int32_t>(c.pod_names.size()));
    if (pnew) {
      c.pod_names.push_back(fmt::format("pod-{}", c.pod_names.size()));
      pod_up.push_back(0);
    }
    h.leaf = lit->second;
    h.pod = pit->second;
    c.hosts.push_back(std::move(h));
  }
  if (c.hosts.empty()) return Status::InvalidArgument("fabric: no CA is linked to a switch");
  // Pod uplinks: links from the pod's switches to the top tier.
  if (top >= 2) {
    for (NodeId s : f.switches()) {
      int t = tier[s.value()];
      if (t < 0 || t >= top) continue;
      auto it = pod_index.find(find(s.value()));
      if (it == pod_index.end()) continue;
      for (auto* a = f.adj_begin(s); a != f.adj_end(s); ++a) {
        if (tier[a->peer.value()] == top && usable(a->link)) pod_up[it->second] += f.link_gbps(a->link);
      }
    }
  } else {
    pod_up = leaf_up;
  }
  // A single-switch fabric has no uplinks; nothing leaves the leaf, so any capacity will do. A
  // leaf (or pod) whose uplinks exist but are all down keeps 0 with usable_links_only.
  for (size_t l = 0; l < leaf_up.size(); ++l) {
    if (leaf_up[l] <= 0 && !(options.usable_links_only && has_uplinks.count(static_cast<int32_t>(l)))) {
      leaf_up[l] = 1e9;
    }
  }
  for (auto& g : pod_up) if (g <= 0 && !(options.usable_links_only && top >= 2)) g = 1e9;
  c.leaf_uplink_gbps = std::move(leaf_up);
  c.pod_uplink_gbps = std::move(pod_up);
  c.description = fmt::format("fabric ({} hosts, {} GPUs, {} leaves, {} pods)", c.hosts.size(),
                              c.total_gpus(), c.leaf_names.size(), c.pod_names.size());
  return c;
}

StatusOr<std::string> DetectNodeFormat(std::string_view text, std::string_view filename) {
  LineReader lines(text);
  std::string_view line;
  if (!lines.Next(&line)) return Status::InvalidArgument(fmt::format("{}: empty file", filename));
  auto cells = Split(line, ',');
  if (!cells.empty() && Trim(cells[0]) == "sn") return std::string("openb");
  if (!cells.empty() && Trim(cells[0]) == "ip") return std::string("clos-csv");
  return Status::InvalidArgument(fmt::format(
      "{}:1: unknown node file header (expected 'sn,cpu_milli,memory_mib,gpu,model' for an openb "
      "node list or 'ip,DSW,PSW,ASW' for a Clos CSV; use --fabric for a fabric file)",
      filename));
}

StatusOr<SimCluster> ReadNodesFile(const std::string& path, const ClosCsvOptions& options) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  GPOOL_ASSIGN_OR_RETURN(std::string fmt_name, DetectNodeFormat(text, path));
  if (fmt_name == "openb") return ParseOpenbNodes(text, path, options.net);
  return ParseClosCsv(text, path, options);
}

}  // namespace gpool::sim
