#include "control/fabric_view.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>

#include <sys/stat.h>

#include <fmt/format.h>

#include "common/file.h"
#include "common/log.h"
#include "fabric/failure.h"
#include "fabric/lft_dump.h"

namespace gpool::control {
namespace {

using fabric::LinkId;
using fabric::NodeId;
using fabric::NodeType;
using fabric::PortId;

int64_t UnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string LevelText(sched::Level l) {
  switch (l) {
    case sched::Level::kLeaf: return "leaf";
    case sched::Level::kPod: return "pod";
    case sched::Level::kFabric: return "fabric";
    default: return "node";
  }
}

}  // namespace

// The domain layout for one generation of the effective state.
struct FabricView::Domains {
  std::vector<sched::DomainSpec> domains;
  std::vector<int32_t> host_leaf;    // hosts_ index -> leaf domain index
  std::vector<uint8_t> host_reachable;
};

FabricView::FabricView(const FabricViewOptions& options)
    : options_(options),
      clock_(options.clock != nullptr ? options.clock : SystemClock::Default()) {}

FabricView::~FabricView() = default;

StatusOr<std::unique_ptr<FabricView>> FabricView::Open(const FabricViewOptions& options) {
  GPOOL_ASSIGN_OR_RETURN(fabric::Fabric f, LoadFabricSource(options.source));
  return FromFabric(std::move(f), options);
}

StatusOr<std::unique_ptr<FabricView>> FabricView::FromFabric(fabric::Fabric f,
                                                             const FabricViewOptions& options) {
  std::unique_ptr<FabricView> v(new FabricView(options));
  GPOOL_RETURN_IF_ERROR(v->Init(std::move(f)));
  return v;
}

Status FabricView::Init(fabric::Fabric f) {
  fabric_ = std::move(f);
  auto engine = fabric::ParseEngine(options_.engine);
  if (!engine.ok()) return engine.status().WithContext("--fabric-engine");
  route_options_.engine = *engine;
  engine_name_ = std::string(fabric::EngineName(*engine));
  auto tables = fabric::Route(fabric_, route_options_);
  if (!tables.ok()) return tables.status().WithContext(fmt::format("routing the fabric ({})", engine_name_));
  tables_ = std::move(*tables);
  if (!options_.lfts_path.empty()) {
    GPOOL_RETURN_IF_ERROR(ReloadLftsLocked().WithContext("--fabric-lfts"));
    if (!lfts_loaded_) GPOOL_LOG_WARN("fabric view: {}", routes_error_);
  }
  hosts_ = FabricHosts(fabric_);
  if (hosts_.empty()) return Status::InvalidArgument("--fabric: the fabric has no hosts (CAs)");
  for (size_t i = 0; i < hosts_.size(); ++i) {
    host_index_[hosts_[i].name] = i;
    for (NodeId ca : hosts_[i].cas) host_index_[fabric_.node(ca).name] = i;
  }
  auto nominal = sim::ClusterFromFabric(fabric_, {});
  if (!nominal.ok()) return nominal.status().WithContext("--fabric");
  nominal_ = std::move(*nominal);
  ca_sim_host_.assign(fabric_.num_nodes(), -1);
  std::unordered_map<std::string, int32_t> by_name;
  for (size_t i = 0; i < nominal_.hosts.size(); ++i) by_name[nominal_.hosts[i].name] = static_cast<int32_t>(i);
  for (NodeId ca : fabric_.cas()) {
    auto it = by_name.find(fabric_.node(ca).name);
    if (it != by_name.end()) ca_sim_host_[ca.value()] = it->second;
  }
  link_damp_.assign(fabric_.num_links(), Damp{});
  node_damp_.assign(fabric_.num_nodes(), Damp{});
  GPOOL_LOG_INFO("fabric view: {} hosts, {} switches, {} links, routes from {}", hosts_.size(),
                 fabric_.num_switches(), fabric_.num_links(), routes_source());
  return Status::Ok();
}

std::vector<std::string> FabricView::HostNames() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (const auto& h : hosts_) out.push_back(h.name);
  return out;
}

std::vector<uint64_t> FabricView::HostPortGuids(const std::string& host) const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<uint64_t> out;
  auto it = host_index_.find(host);
  if (it == host_index_.end()) return out;
  for (NodeId ca : hosts_[it->second].cas) {
    PortId p = CaPort(ca);
    if (p.valid() && fabric_.port(p).guid != 0) out.push_back(fabric_.port(p).guid);
  }
  return out;
}

std::string FabricView::routes_source() const {
  std::lock_guard<std::mutex> l(mu_);
  return lfts_loaded_ ? "opensm:" + options_.lfts_path : engine_name_;
}

// ---- OpenSM's routes ----

namespace {

// The identity of a file version: a rewrite in place changes size or mtime, a rename-over the
// inode. False when the file cannot be stat'ed (errno kept for the message).
bool Stamp(const std::string& path, uint64_t* dev, uint64_t* ino, int64_t* size, int64_t* mtime_ns) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  *dev = st.st_dev;
  *ino = st.st_ino;
  *size = st.st_size;
  *mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return true;
}

}  // namespace

Status FabricView::ReloadLftsLocked() {
  const std::string& path = options_.lfts_path;
  FileStamp before;
  if (!Stamp(path, &before.dev, &before.ino, &before.size, &before.mtime_ns)) {
    int err = errno;
    std::string why = lfts_loaded_
        ? fmt::format("{}: cannot stat ({}); keeping the routes loaded before", path, std::strerror(err))
        : fmt::format("{}: not there yet ({}); using {}'s routes until OpenSM writes it", path,
                      std::strerror(err), engine_name_);
    if (why != routes_error_ && lfts_loaded_) GPOOL_LOG_ERROR("fabric view: {}", why);
    routes_error_ = why;
    return Status::Ok();
  }
  if ((lfts_loaded_ && before == lfts_stamp_) || before == lfts_bad_stamp_) return Status::Ok();
  auto text = ReadFile(path);
  FileStamp after;
  if (!text.ok() || !Stamp(path, &after.dev, &after.ino, &after.size, &after.mtime_ns) ||
      !(after == before)) {
    return Status::Ok();  // being rewritten (or gone meanwhile): the next tick reads it again
  }
  auto tables = fabric::ReadLftDump(*text, fabric_, {.source_name = path});
  if (!tables.ok()) {
    lfts_bad_stamp_ = before;
    routes_error_ = tables.status().message() +
                    (lfts_loaded_ ? "; keeping the routes loaded before" : "");
    GPOOL_LOG_ERROR("fabric view: OpenSM's routes: {}", routes_error_);
    return tables.status();
  }
  tables_ = std::move(*tables);
  for (const std::string& n : tables_.notes) GPOOL_LOG_WARN("fabric view: {}: {}", path, n);
  lfts_loaded_ = true;
  lfts_stamp_ = before;
  routes_error_.clear();
  needs_route_ = false;
  routes_loaded_unix_ms_ = UnixMs();
  ++route_loads_;
  ++generation_;
  last_change_unix_ms_ = routes_loaded_unix_ms_;
  // Warning level like the other effective changes (a link down): paths and loads changed.
  GPOOL_LOG_WARN("fabric view: loaded OpenSM's routes from {} ({} bytes, load {})", path,
                 before.size, route_loads_);
  return Status::Ok();
}

const fabric::VerifyReport& FabricView::VerifyLocked() {
  if (verify_generation_ == generation_) return verify_;
  verify_ = fabric::Verify(fabric_, tables_, {.check_deadlock = false});
  verify_generation_ = generation_;
  size_t broken = verify_.unreachable + verify_.loops;
  if (broken != logged_broken_) {
    logged_broken_ = broken;
    if (broken == 0) {
      GPOOL_LOG_INFO("fabric view: the routes ({}) connect every CA pair again", tables_.engine);
    } else {
      GPOOL_LOG_WARN("fabric view: the routes ({}) leave {} CA pairs unreachable and {} looping{}",
                     tables_.engine, verify_.unreachable, verify_.loops,
                     verify_.problems.empty() ? "" : ", e.g. " + verify_.problems.front());
    }
  }
  return verify_;
}

double FabricView::RoutedUplinkGbpsLocked(NodeId leaf) const {
  std::set<uint8_t> ports;
  for (NodeId ca : fabric_.cas()) {
    PortId p = CaPort(ca);
    if (!p.valid()) continue;
    if (fabric_.link_peer(fabric_.port(p).link, ca) == leaf) continue;  // local: no uplink
    uint8_t out = tables_.out_port(leaf, fabric_.lid_of_port(p));
    if (out != fabric::kNoRoute && out != 0) ports.insert(out);
  }
  double gbps = 0;
  for (uint8_t port : ports) {
    PortId lp = fabric_.port_of(leaf, port);
    if (!lp.valid() || !fabric_.port(lp).link.valid()) continue;
    fabric::LinkId lk = fabric_.port(lp).link;
    if (!fabric_.link_usable(lk)) continue;
    if (fabric_.node(fabric_.link_peer(lk, leaf)).type == NodeType::kCa) continue;
    gbps += fabric_.link_gbps(lk);
  }
  return gbps;
}

uint64_t FabricView::generation() const {
  std::lock_guard<std::mutex> l(mu_);
  return generation_;
}

PortId FabricView::CaPort(NodeId ca) const {
  for (auto* a = fabric_.adj_begin(ca); a != fabric_.adj_end(ca); ++a) {
    return fabric_.port_of(ca, a->port);
  }
  return PortId();
}

// ---- Domains ----

const FabricView::Domains& FabricView::DomainsLocked() {
  if (domains_ && domains_generation_ == generation_) return *domains_;
  auto d = std::make_unique<Domains>();
  sim::FabricClusterOptions co;
  co.usable_links_only = true;
  sim::SimCluster cur = std::move(*sim::ClusterFromFabric(fabric_, co));  // same shape as nominal_

  // Components over usable links.
  std::vector<uint32_t> comp(fabric_.num_nodes());
  std::iota(comp.begin(), comp.end(), 0);
  auto find = [&](uint32_t x) {
    while (comp[x] != x) x = comp[x] = comp[comp[x]];
    return x;
  };
  for (size_t i = 0; i < fabric_.num_links(); ++i) {
    LinkId l(static_cast<uint32_t>(i));
    if (!fabric_.link_usable(l)) continue;
    const auto& k = fabric_.link(l);
    comp[find(fabric_.port(k.a).node.value())] = find(fabric_.port(k.b).node.value());
  }

  struct HostInfo {
    std::vector<int32_t> leaves;  // sim leaf indices, sorted
    int32_t pod = 0;
    uint32_t root = 0;            // component
    bool reachable = false;
  };
  std::vector<HostInfo> info(hosts_.size());
  std::map<uint32_t, size_t> comp_hosts;
  for (size_t h = 0; h < hosts_.size(); ++h) {
    HostInfo& hi = info[h];
    NodeId first_leaf, first_usable_leaf;
    for (NodeId ca : hosts_[h].cas) {
      int32_t sh = ca_sim_host_[ca.value()];
      if (sh < 0) continue;
      if (hi.leaves.empty()) hi.pod = nominal_.hosts[sh].pod;
      hi.leaves.push_back(nominal_.hosts[sh].leaf);
      for (auto* a = fabric_.adj_begin(ca); a != fabric_.adj_end(ca); ++a) {
        if (fabric_.node(a->peer).type == NodeType::kCa) continue;
        if (!first_leaf.valid()) first_leaf = a->peer;
        if (fabric_.link_usable(a->link)) {
          hi.reachable = true;
          if (!first_usable_leaf.valid()) first_usable_leaf = a->peer;
        }
      }
    }
    std::sort(hi.leaves.begin(), hi.leaves.end());
    hi.leaves.erase(std::unique(hi.leaves.begin(), hi.leaves.end()), hi.leaves.end());
    NodeId anchor = first_usable_leaf.valid() ? first_usable_leaf : first_leaf;
    hi.root = anchor.valid() ? find(anchor.value()) : UINT32_MAX;
    if (hi.reachable) ++comp_hosts[hi.root];
  }
  // The main fabric is the component with the most reachable hosts.
  uint32_t main_root = UINT32_MAX;
  size_t best = 0;
  for (const auto& [root, n] : comp_hosts) {
    if (n > best) {
      best = n;
      main_root = root;
    }
  }

  auto& doms = d->domains;
  std::map<uint32_t, int32_t> fabric_dom;
  std::map<std::pair<uint32_t, int32_t>, int32_t> pod_dom;
  std::map<std::pair<uint32_t, std::vector<int32_t>>, int32_t> leaf_dom;
  auto root_of = [&](const HostInfo& hi) { return hi.root == UINT32_MAX || !hi.reachable ? main_root : hi.root; };
  std::map<uint32_t, std::string> cut_name;
  for (size_t h = 0; h < hosts_.size(); ++h) {
    uint32_t r = root_of(info[h]);
    if (fabric_dom.count(r)) continue;
    std::string name = "fabric";
    if (r != main_root) {
      name = fmt::format("fabric-cut-{}", info[h].leaves.empty() ? hosts_[h].name
                                                                  : nominal_.leaf_names[info[h].leaves[0]]);
      cut_name[r] = name;
    }
    fabric_dom[r] = static_cast<int32_t>(doms.size());
    doms.push_back({.name = name, .level = sched::Level::kFabric, .parent = {}});
  }
  for (size_t h = 0; h < hosts_.size(); ++h) {
    uint32_t r = root_of(info[h]);
    auto key = std::make_pair(r, info[h].pod);
    if (pod_dom.count(key)) continue;
    pod_dom[key] = static_cast<int32_t>(doms.size());
    std::string name = info[h].leaves.empty() ? "pod-none" : nominal_.pod_names[info[h].pod];
    if (r != main_root) name += "/cut";
    double now = info[h].leaves.empty() ? 0 : cur.pod_uplink_gbps[info[h].pod];
    double nom = info[h].leaves.empty() ? 0 : nominal_.pod_uplink_gbps[info[h].pod];
    doms.push_back({.name = name, .level = sched::Level::kPod,
                    .parent = sched::DomainId(static_cast<uint32_t>(fabric_dom[r])),
                    .bandwidth_gbps = now, .nominal_bandwidth_gbps = nom});
    sched::DomainSpec& f = doms[fabric_dom[r]];
    f.bandwidth_gbps += now;
    f.nominal_bandwidth_gbps += nom;
  }
  d->host_leaf.resize(hosts_.size());
  d->host_reachable.resize(hosts_.size());
  for (size_t h = 0; h < hosts_.size(); ++h) {
    uint32_t r = root_of(info[h]);
    auto key = std::make_pair(r, info[h].leaves);
    auto it = leaf_dom.find(key);
    if (it == leaf_dom.end()) {
      it = leaf_dom.emplace(key, static_cast<int32_t>(doms.size())).first;
      double now = 0, nom = 0;
      for (int32_t l : info[h].leaves) {
        double leaf_now = cur.leaf_uplink_gbps[l];
        if (OpenSmRoutesLocked()) {
          // Only the uplinks OpenSM's routes use carry this leaf's traffic.
          auto sw = fabric_.FindByName(nominal_.leaf_names[l]);
          if (sw && nominal_.leaf_uplink_gbps[l] < 1e9) leaf_now = std::min(leaf_now, RoutedUplinkGbpsLocked(*sw));
        }
        now += leaf_now;
        nom += nominal_.leaf_uplink_gbps[l];
      }
      std::string name = info[h].leaves.empty() ? "leaf-none" : nominal_.leaf_names[info[h].leaves[0]];
      if (info[h].leaves.size() > 1) name += fmt::format("+{}", info[h].leaves.size() - 1);
      if (r != main_root) name += "/cut";
      doms.push_back({.name = name, .level = sched::Level::kLeaf,
                      .parent = sched::DomainId(static_cast<uint32_t>(pod_dom[{r, info[h].pod}])),
                      .bandwidth_gbps = now, .nominal_bandwidth_gbps = nom});
    }
    d->host_leaf[h] = it->second;
    d->host_reachable[h] = info[h].reachable;
  }
  domains_ = std::move(d);
  domains_generation_ = generation_;
  return *domains_;
}

Status FabricView::BuildDomains(sched::ClusterSpec* spec) {
  std::lock_guard<std::mutex> l(mu_);
  TickLocked(clock_->NowNanos());
  const Domains& d = DomainsLocked();
  spec->domains = d.domains;
  int32_t unplaced = -1;
  for (sched::NodeSpec& n : spec->nodes) {
    auto it = host_index_.find(n.name);
    if (it != host_index_.end()) {
      n.leaf = sched::DomainId(static_cast<uint32_t>(d.host_leaf[it->second]));
      if (!d.host_reachable[it->second]) n.health = sched::Health::kUnhealthy;
      continue;
    }
    if (unplaced < 0) {
      auto f = sched::DomainId(static_cast<uint32_t>(spec->domains.size()));
      spec->domains.push_back({.name = "unplaced", .level = sched::Level::kFabric, .parent = {}});
      spec->domains.push_back({.name = "unplaced-pod", .level = sched::Level::kPod, .parent = f});
      unplaced = static_cast<int32_t>(spec->domains.size());
      spec->domains.push_back({.name = "unplaced-leaf", .level = sched::Level::kLeaf,
                               .parent = sched::DomainId(f.value() + 1)});
    }
    n.leaf = sched::DomainId(static_cast<uint32_t>(unplaced));
  }
  return Status::Ok();
}

// ---- State and damping ----

void FabricView::DecayLocked(Damp* d, int64_t now) {
  if (d->penalty > 0 && now > d->penalty_ns) {
    double hl = static_cast<double>(std::chrono::nanoseconds(options_.half_life).count());
    d->penalty *= std::exp2(-static_cast<double>(now - d->penalty_ns) / std::max(hl, 1.0));
    if (d->penalty < 1e-6) d->penalty = 0;
  }
  d->penalty_ns = now;
  if (d->suppressed && d->penalty < options_.reuse_penalty) d->suppressed = false;
}

Status FabricView::ObserveLocked(bool is_link, uint32_t id, bool up) {
  Damp& d = is_link ? link_damp_[id] : node_damp_[id];
  const int64_t now = clock_->NowNanos();
  DecayLocked(&d, now);
  Status s = Status::Ok();
  if (!up) {
    if (d.observed_up) {
      d.observed_up = false;
      d.penalty += 1;
      if (d.penalty >= options_.suppress_penalty) d.suppressed = true;
    }
    if (d.effective_up) {
      d.effective_up = false;
      s = ApplyLocked(is_link, id, false);
    }
  } else if (!d.observed_up) {
    d.observed_up = true;
    d.up_since_ns = now;
  }
  return s;  // the caller ticks once (a sweep observes every link)
}

void FabricView::TickLocked(int64_t now) {
  if (!options_.lfts_path.empty()) (void)ReloadLftsLocked();  // logged there
  const int64_t hold = std::chrono::nanoseconds(options_.hold_down).count();
  auto tick = [&](bool is_link, std::vector<Damp>& v) {
    for (size_t i = 0; i < v.size(); ++i) {
      Damp& d = v[i];
      if (d.effective_up || !d.observed_up) continue;
      DecayLocked(&d, now);
      if (d.suppressed || now - d.up_since_ns < hold) continue;
      d.effective_up = true;
      Status s = ApplyLocked(is_link, static_cast<uint32_t>(i), true);
      if (!s.ok()) GPOOL_LOG_ERROR("fabric view: {}", s.ToString());
    }
  };
  tick(false, node_damp_);
  tick(true, link_damp_);
  RouteIfNeededLocked();
}

void FabricView::Tick() {
  std::lock_guard<std::mutex> l(mu_);
  TickLocked(clock_->NowNanos());
}

Status FabricView::ApplyLocked(bool is_link, uint32_t id, bool up) {
  ++generation_;
  last_change_unix_ms_ = UnixMs();
  std::string label = is_link ? LinkLabel(LinkId(id)) : fabric_.node(NodeId(id)).name;
  GPOOL_LOG_WARN("fabric: {} {} is {}", is_link ? "link" : "switch", label, up ? "up" : "down");
  auto set = [&](bool v) {
    return is_link ? fabric_.SetLinkUp(LinkId(id), v) : fabric_.SetNodeUp(NodeId(id), v);
  };
  if (OpenSmRoutesLocked()) {
    // The switches keep OpenSM's LFTs until OpenSM re-sweeps and rewrites the dump (re-read on
    // a later tick): no re-route of our own, whatever is broken meanwhile Health reports.
    return set(up);
  }
  if (up) {
    GPOOL_RETURN_IF_ERROR(set(true));
    needs_route_ = true;  // one full Route at the end of the tick, however many came back
    return Status::Ok();
  }
  // Nothing routes over a link whose end switch is already down: record it, no re-route.
  bool carried = is_link ? fabric_.link_usable(LinkId(id)) : fabric_.node(NodeId(id)).up;
  if (!carried) return set(false);
  fabric::FailureTarget t;
  t.kind = is_link ? fabric::FailureTarget::Kind::kLink : fabric::FailureTarget::Kind::kSwitch;
  if (is_link) t.link = LinkId(id); else t.node = NodeId(id);
  t.label = label;
  auto r = fabric::FailAndReroute(&fabric_, &tables_, t,
                                  {.route = route_options_, .count_pairs = false});
  if (r.ok()) return Status::Ok();
  // A re-route the engine refused: record the state anyway and route from scratch.
  GPOOL_LOG_WARN("fabric: incremental re-route after {} failed ({}); full re-route", label,
                 r.status().ToString());
  (void)set(false);
  needs_route_ = true;
  return Status::Ok();
}

void FabricView::RouteIfNeededLocked() {
  if (!needs_route_ || OpenSmRoutesLocked()) return;
  needs_route_ = false;
  auto tables = fabric::Route(fabric_, route_options_);
  if (!tables.ok()) {
    GPOOL_LOG_ERROR("fabric: re-route failed, keeping the previous routes: {}", tables.status().ToString());
    return;
  }
  tables_ = std::move(*tables);
}

Status FabricView::ObserveLink(const std::string& ref, bool up) {
  std::lock_guard<std::mutex> l(mu_);
  GPOOL_ASSIGN_OR_RETURN(fabric::FailureTarget t, fabric::ResolveLink(fabric_, ref));
  Status s = ObserveLocked(true, t.link.value(), up);
  TickLocked(clock_->NowNanos());
  return s;
}

Status FabricView::ObserveSwitch(const std::string& name, bool up) {
  std::lock_guard<std::mutex> l(mu_);
  GPOOL_ASSIGN_OR_RETURN(fabric::FailureTarget t, fabric::ResolveSwitch(fabric_, name));
  Status s = ObserveLocked(false, t.node.value(), up);
  TickLocked(clock_->NowNanos());
  return s;
}

Status FabricView::ObserveDiscovered(const fabric::Fabric& live) {
  // Match nodes by name, or by node description: ibnetdiscover under ibsim names nodes
  // "S-<guid>"/"H-<guid>" and gives the net file's name as the description. GUIDs are not used:
  // a model loaded from a net file without GUID lines has made-up ones.
  std::unordered_map<std::string, NodeId> by_desc;
  for (size_t i = 0; i < live.num_nodes(); ++i) {
    const auto& n = live.node(NodeId(static_cast<uint32_t>(i)));
    if (!n.description.empty()) by_desc.emplace(n.description, NodeId(static_cast<uint32_t>(i)));
  }
  auto find = [&](const std::string& name) -> std::optional<NodeId> {
    if (auto n = live.FindByName(name)) return n;
    auto it = by_desc.find(name);
    if (it != by_desc.end()) return it->second;
    return std::nullopt;
  };
  auto live_name = [&](NodeId n) {
    const auto& node = live.node(n);
    return std::make_pair(node.name, node.description);
  };
  std::lock_guard<std::mutex> l(mu_);
  Status first = Status::Ok();
  auto keep = [&](Status s) {
    if (!s.ok() && first.ok()) first = s;
  };
  auto observe = [&](bool is_link, uint32_t id, bool present) {
    Damp& d = is_link ? link_damp_[id] : node_damp_[id];
    d.missing_sweeps = present ? 0 : d.missing_sweeps + 1;
    if (present || d.missing_sweeps >= std::max(1, options_.down_confirmations)) {
      keep(ObserveLocked(is_link, id, present));
    }
  };
  for (NodeId s : fabric_.switches()) {
    auto n = find(fabric_.node(s).name);
    observe(false, s.value(), n.has_value() && live.node(*n).up);
  }
  for (size_t i = 0; i < fabric_.num_links(); ++i) {
    const fabric::Link& k = fabric_.link(LinkId(static_cast<uint32_t>(i)));
    const fabric::Port& pa = fabric_.port(k.a);
    const fabric::Port& pb = fabric_.port(k.b);
    bool present = false;
    auto na = find(fabric_.node(pa.node).name);
    if (na) {
      PortId lp = live.port_of(*na, pa.num);
      if (lp.valid() && live.port(lp).link.valid()) {
        const fabric::Link& lk = live.link(live.port(lp).link);
        const fabric::Port& other = live.port(lk.a == lp ? lk.b : lk.a);
        auto [oname, odesc] = live_name(other.node);
        const std::string& want = fabric_.node(pb.node).name;
        present = other.num == pb.num && (oname == want || odesc == want) &&
                  live.link_usable(live.port(lp).link);
      }
    }
    observe(true, static_cast<uint32_t>(i), present);
  }
  TickLocked(clock_->NowNanos());
  return first;
}

// ---- Reads ----

std::string FabricView::LinkLabel(LinkId l) const {
  const fabric::Link& k = fabric_.link(l);
  const fabric::Port& a = fabric_.port(k.a);
  const fabric::Port& b = fabric_.port(k.b);
  return fmt::format("{}[{}] - {}[{}]", fabric_.node(a.node).name, a.num, fabric_.node(b.node).name, b.num);
}

void FabricView::FillLink(LinkId l, v1::FabricLink* out) const {
  const fabric::Link& k = fabric_.link(l);
  const fabric::Port& a = fabric_.port(k.a);
  const fabric::Port& b = fabric_.port(k.b);
  out->set_a(fabric_.node(a.node).name);
  out->set_a_port(a.num);
  out->set_b(fabric_.node(b.node).name);
  out->set_b_port(b.num);
  out->set_gbps(fabric_.link_gbps(l));
  fabric::LinkSpeed s = fabric::LaneGbps(a.speed) <= fabric::LaneGbps(b.speed) ? a.speed : b.speed;
  out->set_rate(fmt::format("{}x{}", std::min(a.width, b.width), fabric::LinkSpeedName(s)));
  const Damp& d = link_damp_[l.value()];
  std::string state = "up";
  if (!d.effective_up) state = d.observed_up ? "held" : "down";
  else if (!fabric_.link_usable(l)) state = "down";  // an end switch is down
  out->set_state(state);
}

void FabricView::RailFlowsLocked(const FabricHost& src, const FabricHost& dst, std::vector<LinkId>* out) {
  size_t rails = std::min(src.cas.size(), dst.cas.size());
  for (size_t r = 0; r < rails; ++r) {
    PortId sp = CaPort(src.cas[r]), dp = CaPort(dst.cas[r]);
    if (!sp.valid() || !dp.valid()) continue;
    auto path = fabric::TracePath(fabric_, tables_, sp, fabric_.lid_of_port(dp));
    if (!path.ok()) continue;  // no route now: the health report shows why
    out->insert(out->end(), path->begin(), path->end());
  }
}

std::vector<LinkId> FabricView::JobLinksLocked(const JobNodes& job) {
  auto host_of = [&](const std::string& n) -> std::optional<size_t> {
    auto it = host_index_.find(n);
    if (it == host_index_.end()) return std::nullopt;  // not a fabric host: no flows to trace
    return it->second;
  };
  std::vector<size_t> hs;
  for (const std::string& n : job.nodes) {
    auto h = host_of(n);
    if (h && std::find(hs.begin(), hs.end(), *h) == hs.end()) hs.push_back(*h);
  }
  // Remote attachment: host <-> lender pairs, each once, in the job's order.
  std::vector<std::pair<size_t, size_t>> lent;
  for (const RemoteFlow& rf : job.remote) {
    auto h = host_of(rf.host), l = host_of(rf.lender);
    if (!h || !l || *h == *l) continue;
    std::pair<size_t, size_t> p(std::min(*h, *l), std::max(*h, *l));
    if (std::find(lent.begin(), lent.end(), p) == lent.end()) lent.push_back(p);
  }
  std::vector<LinkId> out;
  for (const auto& [a, b] : lent) {
    RailFlowsLocked(hosts_[a], hosts_[b], &out);
    RailFlowsLocked(hosts_[b], hosts_[a], &out);
  }
  if (hs.size() == 1) {
    // One host and no remote GPUs: no flow leaves it, but its HCA links are what it depends on
    // (a dead one is reported against it). With remote GPUs those flows already cross them.
    if (lent.empty()) {
      for (NodeId ca : hosts_[hs[0]].cas) {
        for (auto* a = fabric_.adj_begin(ca); a != fabric_.adj_end(ca); ++a) out.push_back(a->link);
      }
    }
    return out;
  }
  for (size_t i = 0; i + 1 < hs.size() || (hs.size() > 2 && i + 1 == hs.size()); ++i) {
    const FabricHost& src = hosts_[hs[i]];
    const FabricHost& dst = hosts_[hs[(i + 1) % hs.size()]];
    RailFlowsLocked(src, dst, &out);
    if (hs.size() == 2) RailFlowsLocked(dst, src, &out);  // a pair: both directions
  }
  return out;
}

void FabricView::TrackJobs(const std::vector<JobNodes>& jobs) {
  std::lock_guard<std::mutex> l(mu_);
  TrackJobsLocked(jobs);
}

void FabricView::TrackJobsLocked(const std::vector<JobNodes>& jobs) {
  std::set<std::string> live;
  for (const JobNodes& j : jobs) {
    live.insert(j.id);
    if (job_links_.count(j.id)) continue;
    std::vector<LinkId> links = JobLinksLocked(j);
    std::sort(links.begin(), links.end());
    links.erase(std::unique(links.begin(), links.end()), links.end());
    job_links_[j.id] = std::move(links);
  }
  for (auto it = job_links_.begin(); it != job_links_.end();) {
    it = live.count(it->first) ? std::next(it) : job_links_.erase(it);
  }
}

v1::GetFabricResponse FabricView::Get(const v1::GetFabricRequest& req,
                                      const std::vector<JobNodes>& jobs) {
  std::lock_guard<std::mutex> l(mu_);
  TickLocked(clock_->NowNanos());
  const Domains& d = DomainsLocked();
  v1::GetFabricResponse r;
  r.set_engine(OpenSmRoutesLocked() ? tables_.engine : engine_name_);
  r.set_generation(static_cast<int64_t>(generation_));
  r.set_num_links(static_cast<int32_t>(fabric_.num_links()));
  for (NodeId s : fabric_.switches()) {
    const fabric::Node& n = fabric_.node(s);
    v1::FabricSwitch* o = r.add_switches();
    o->set_name(n.name);
    o->set_guid(fabric::FormatGuid(n.guid));
    o->set_level(n.level);
    o->set_up(n.up);
    o->set_ports(n.num_ports);
  }
  for (size_t h = 0; h < hosts_.size(); ++h) {
    v1::FabricHost* o = r.add_hosts();
    o->set_name(hosts_[h].name);
    for (NodeId ca : hosts_[h].cas) o->add_hcas(fabric_.node(ca).name);
    const sched::DomainSpec& leaf = d.domains[d.host_leaf[h]];
    const sched::DomainSpec& pod = d.domains[leaf.parent.value()];
    o->set_leaf(leaf.name);
    o->set_pod(pod.name);
    o->set_fabric(d.domains[pod.parent.value()].name);
    o->set_reachable(d.host_reachable[h] != 0);
  }
  std::vector<int32_t> flows(fabric_.num_links(), 0);
  std::vector<std::vector<std::string>> on(fabric_.num_links());
  for (const JobNodes& j : jobs) {
    for (LinkId lk : JobLinksLocked(j)) {
      ++flows[lk.value()];
      auto& v = on[lk.value()];
      if (v.empty() || v.back() != j.id) v.push_back(j.id);
    }
  }
  for (size_t i = 0; i < fabric_.num_links(); ++i) {
    LinkId lk(static_cast<uint32_t>(i));
    v1::FabricLink tmp;
    FillLink(lk, &tmp);
    if (!req.all_links() && flows[i] == 0 && tmp.state() == "up") continue;
    tmp.set_flows(flows[i]);
    std::vector<std::string>& v = on[i];
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    for (auto& id : v) tmp.add_jobs(id);
    *r.add_links() = std::move(tmp);
  }
  return r;
}

StatusOr<v1::FabricPathResponse> FabricView::Path(const v1::FabricPathRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  TickLocked(clock_->NowNanos());
  auto pick = [&](const std::string& what, const std::string& name) -> StatusOr<NodeId> {
    auto it = host_index_.find(name);
    if (it == host_index_.end()) {
      return Status::NotFound(fmt::format("{}: '{}' is not a host or HCA of the fabric", what, name));
    }
    auto ca = fabric_.FindByName(name);
    if (ca && fabric_.node(*ca).type == NodeType::kCa) return *ca;
    const FabricHost& h = hosts_[it->second];
    if (req.rail() < 0 || static_cast<size_t>(req.rail()) >= h.cas.size()) {
      return Status::InvalidArgument(
          fmt::format("rail: host {} has {} HCAs, no rail {}", name, h.cas.size(), req.rail()));
    }
    return h.cas[req.rail()];
  };
  GPOOL_ASSIGN_OR_RETURN(NodeId src, pick("from", req.from()));
  GPOOL_ASSIGN_OR_RETURN(NodeId dst, pick("to", req.to()));
  PortId sp = CaPort(src), dp = CaPort(dst);
  if (!sp.valid() || !dp.valid()) return Status::FailedPrecondition("an HCA of the pair is not cabled");
  v1::FabricPathResponse r;
  r.set_from_ca(fabric_.node(src).name);
  r.set_to_ca(fabric_.node(dst).name);
  if (src == dst) return r;
  auto path = fabric::TracePath(fabric_, tables_, sp, fabric_.lid_of_port(dp));
  if (!path.ok()) {
    return Status::FailedPrecondition(fmt::format("no route from {} to {}: {}", r.from_ca(),
                                                  r.to_ca(), path.status().message()));
  }
  NodeId at = src;
  for (LinkId lk : *path) {
    v1::FabricLink* o = r.add_links();
    FillLink(lk, o);
    if (o->a() != fabric_.node(at).name) {  // orient a -> b along the path
      std::string a = o->a();
      int32_t ap = o->a_port();
      o->set_a(o->b());
      o->set_a_port(o->b_port());
      o->set_b(a);
      o->set_b_port(ap);
    }
    at = fabric_.link_peer(lk, at);
  }
  r.set_switches(std::max(0, r.links_size() - 1));
  return r;
}

v1::FabricHealthResponse FabricView::Health(const std::vector<JobNodes>& jobs) {
  std::lock_guard<std::mutex> l(mu_);
  TickLocked(clock_->NowNanos());
  const Domains& d = DomainsLocked();
  v1::FabricHealthResponse r;
  r.set_generation(static_cast<int64_t>(generation_));
  r.set_last_change_ms(last_change_unix_ms_);
  for (size_t i = 0; i < fabric_.num_links(); ++i) {
    if (!link_damp_[i].effective_up) FillLink(LinkId(static_cast<uint32_t>(i)), r.add_dead_links());
  }
  for (NodeId s : fabric_.switches()) {
    if (!node_damp_[s.value()].effective_up) r.add_dead_switches(fabric_.node(s).name);
  }
  for (const sched::DomainSpec& dom : d.domains) {
    bool cut = dom.level == sched::Level::kFabric && dom.name != "fabric";
    if (!cut && !(dom.nominal_bandwidth_gbps > 0 && dom.bandwidth_gbps < dom.nominal_bandwidth_gbps)) continue;
    v1::DegradedDomain* o = r.add_degraded();
    o->set_name(dom.name);
    o->set_level(LevelText(dom.level));
    o->set_bandwidth_gbps(dom.bandwidth_gbps);
    o->set_nominal_gbps(dom.nominal_bandwidth_gbps);
  }
  for (size_t h = 0; h < hosts_.size(); ++h) {
    if (!d.host_reachable[h]) r.add_unreachable_hosts(hosts_[h].name);
  }
  for (const JobNodes& j : jobs) {
    auto it = job_links_.find(j.id);
    if (it == job_links_.end()) continue;  // never tracked (TrackJobs)
    v1::AffectedJob aj;
    for (LinkId lk : it->second) {
      if (!fabric_.link_usable(lk)) aj.add_links(LinkLabel(lk));
    }
    if (aj.links_size() == 0) continue;
    aj.set_id(j.id);
    aj.set_tenant(j.tenant);
    *r.add_affected_jobs() = std::move(aj);
  }
  r.set_routes(OpenSmRoutesLocked() ? "opensm:" + options_.lfts_path : engine_name_);
  r.set_routes_error(routes_error_);
  r.set_routes_loaded_ms(routes_loaded_unix_ms_);
  const fabric::VerifyReport& v = VerifyLocked();
  r.set_unreachable_pairs(static_cast<int64_t>(v.unreachable));
  r.set_route_loops(static_cast<int64_t>(v.loops));
  for (const std::string& p : v.problems) r.add_route_problems(p);
  r.set_healthy(r.dead_links_size() == 0 && r.dead_switches_size() == 0 && r.degraded_size() == 0 &&
                r.unreachable_hosts_size() == 0 && v.unreachable == 0 && v.loops == 0);
  return r;
}

}  // namespace gpool::control
