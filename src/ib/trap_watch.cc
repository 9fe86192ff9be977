#include "ib/trap_watch.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace gpool::ib {
namespace {

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

template <typename T>
bool ParseNum(std::string_view s, T* out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

constexpr size_t kMaxWarnings = 100;

}  // namespace

StatusOr<OsmEvent> ParseOsmEvent(std::string_view d) {
  while (!d.empty() && (d.back() == '\n' || d.back() == '\0')) d.remove_suffix(1);
  auto bad = [&](std::string_view why) {
    return Status::InvalidArgument(fmt::format("OpenSM event '{}': {}", d.substr(0, 200), why));
  };
  std::vector<std::string_view> f;
  for (size_t i = 0; i < d.size();) {
    size_t j = d.find(' ', i);
    if (j == std::string_view::npos) j = d.size();
    if (j > i) f.push_back(d.substr(i, j - i));
    i = j + 1;
  }
  if (f.size() < 4 || f[0] != "gpool-osm") return bad("not a gpool-osm event");
  if (f[1] != "v1") return bad(fmt::format("version '{}' (want v1)", f[1]));
  OsmEvent e;
  bool have_t = false;
  for (size_t i = 2; i < f.size(); ++i) {
    size_t eq = f[i].find('=');
    if (eq == std::string_view::npos) return bad(fmt::format("field '{}': want key=value", f[i]));
    std::string_view k = f[i].substr(0, eq), v = f[i].substr(eq + 1);
    bool ok = true;
    if (k == "t") {
      ok = ParseNum(v, &e.t_ns);
      have_t = ok;
    } else if (k == "ev") {
      e.ev = std::string(v);
    } else if (k == "num") {
      ok = ParseNum(v, &e.trap);
    } else if (k == "issuer_lid") {
      ok = ParseNum(v, &e.issuer_lid);
    } else if (k == "lid") {
      ok = ParseNum(v, &e.lid);
    } else if (k == "port") {
      ok = ParseNum(v, &e.port);
    }  // unknown keys: newer plugins may add fields
    if (!ok) return bad(fmt::format("field {}: '{}' is not a number in range", k, v));
  }
  if (!have_t) return bad("field t: missing");
  if (e.ev.empty()) return bad("field ev: missing");
  if (e.ev == "trap" && e.trap == 0) return bad("field num: missing for a trap");
  return e;
}

StatusOr<std::unique_ptr<TrapWatcher>> TrapWatcher::Open(const fabric::Fabric* model,
                                                         const TrapWatchOptions& options) {
  if (options.socket_path.empty()) return Status::InvalidArgument("trap watch: socket path is empty");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options.socket_path.size() >= sizeof addr.sun_path) {
    return Status::InvalidArgument(fmt::format("trap watch: socket path '{}' is longer than {} bytes",
                                               options.socket_path, sizeof addr.sun_path - 1));
  }
  std::memcpy(addr.sun_path, options.socket_path.c_str(), options.socket_path.size() + 1);
  // Discovery first, on its own umad port, closed before the probe's port opens (umad2sim
  // crashed when a libibnetdisc port was closed while another port of the process was open).
  std::vector<std::pair<uint16_t, fabric::NodeId>> lids;
  if (options.learn_lids) {
    DiscoverOptions d;
    d.ca_name = options.probe.ca_name;
    d.ca_port = options.probe.ca_port;
    StatusOr<fabric::Fabric> found = DiscoverFabric(d);
    if (!found.ok()) return found.status().WithContext("trap watch: learning the switches' LIDs");
    const fabric::Fabric& live = *found;
    for (fabric::NodeId s : live.switches()) {
      const fabric::Node& n = live.node(s);
      std::optional<fabric::NodeId> m = model->FindByName(n.name);
      if (!m && !n.description.empty()) m = model->FindByName(n.description);
      if (!m && n.guid != 0) m = model->FindByGuid(n.guid);
      if (m && n.lid != 0 && model->node(*m).type == fabric::NodeType::kSwitch) lids.push_back({n.lid, *m});
    }
  }
  GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<SmpProbe> probe, SmpProbe::Open(options.probe));
  int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::Internal(fmt::format("trap watch: socket: {}", std::strerror(errno)));
  ::unlink(options.socket_path.c_str());  // a stale socket of an earlier run
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    int e = errno;
    ::close(fd);
    return Status::Unavailable(fmt::format("trap watch: bind {}: {}", options.socket_path, std::strerror(e)));
  }
  // Room for the burst of a switch failure (dozens of traps at once).
  int rcvbuf = 1 << 20;
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  // The local node (where directed routes start): by GUID, else by description.
  std::optional<fabric::NodeId> local;
  StatusOr<uint64_t> guid = probe->NodeGuidDr({});
  if (!guid.ok()) {
    ::close(fd);
    return guid.status().WithContext("trap watch: the local node");
  }
  local = model->FindByGuid(*guid);
  if (!local) {
    if (auto d = probe->NodeDescriptionDr({}); d.ok()) local = model->FindByName(*d);
  }
  if (!local) {
    ::close(fd);
    return Status::NotFound(fmt::format(
        "trap watch: the local node (GUID {:#018x}) is not in the fabric model: is --fabric the fabric "
        "this port is attached to?", *guid));
  }
  std::unique_ptr<TrapWatcher> w(new TrapWatcher(model, std::move(probe), fd, options.socket_path));
  w->local_ = *local;
  for (const auto& [lid, n] : lids) w->Learn(lid, n);
  return w;
}

void TrapWatcher::Learn(uint16_t lid, fabric::NodeId n) {
  lid_node_[lid] = n.value();
  node_lid_[n.value()] = lid;
}

TrapWatcher::TrapWatcher(const fabric::Fabric* model, std::unique_ptr<SmpProbe> probe, int fd, std::string path)
    : model_(model),
      probe_(std::move(probe)),
      fd_(fd),
      path_(std::move(path)),
      link_up_(model->num_links(), 1),
      switch_up_(model->num_nodes(), 1) {}

TrapWatcher::~TrapWatcher() {
  ::close(fd_);
  ::unlink(path_.c_str());
}

void TrapWatcher::Warn(std::string w) {
  if (warnings_.size() >= kMaxWarnings) warnings_.erase(warnings_.begin());
  warnings_.push_back(std::move(w));
}

std::optional<fabric::NodeId> TrapWatcher::SwitchOfLid(uint16_t lid) {
  if (auto it = lid_node_.find(lid); it != lid_node_.end()) return fabric::NodeId(it->second);
  std::optional<fabric::NodeId> n;
  std::string desc;
  if (auto d = probe_->NodeDescription(lid); d.ok()) {
    desc = *d;
    n = model_->FindByName(desc);
  }
  if (!n) {
    auto g = probe_->NodeGuid(lid);
    if (!g.ok()) {
      Warn(fmt::format("trap from LID {}: cannot name it: {}", lid, g.status().message()));
      return std::nullopt;
    }
    n = model_->FindByGuid(*g);
    if (!n) {
      Warn(fmt::format("trap from LID {} ('{}', GUID {:#018x}): not a node of the fabric model", lid, desc, *g));
      return std::nullopt;
    }
  }
  if (model_->node(*n).type != fabric::NodeType::kSwitch) {
    Warn(fmt::format("trap 128 from LID {} ('{}'): not a switch in the model", lid, model_->node(*n).name));
    return std::nullopt;
  }
  Learn(lid, *n);
  return n;
}

std::vector<uint8_t> TrapWatcher::PathTo(fabric::NodeId target) {
  if (target == local_) return {};
  if (parent_port_.empty()) {
    // BFS from the local node over the links believed up (switches only forward SMPs; a CA is
    // never a transit hop). Recomputed after every change.
    parent_.assign(model_->num_nodes(), fabric::NodeId());
    parent_port_.assign(model_->num_nodes(), 0);
    std::vector<fabric::NodeId> q{local_};
    std::vector<char> seen(model_->num_nodes(), 0);
    seen[local_.value()] = 1;
    for (size_t i = 0; i < q.size(); ++i) {
      fabric::NodeId n = q[i];
      if (n != local_ && model_->node(n).type != fabric::NodeType::kSwitch) continue;
      for (const fabric::Adjacent* a = model_->adj_begin(n); a != model_->adj_end(n); ++a) {
        if (link_up_[a->link.value()] == 0 || seen[a->peer.value()]) continue;
        seen[a->peer.value()] = 1;
        parent_[a->peer.value()] = n;
        parent_port_[a->peer.value()] = static_cast<uint8_t>(a->port);
        q.push_back(a->peer);
      }
    }
  }
  std::vector<uint8_t> path;
  for (fabric::NodeId n = target; n != local_; n = parent_[n.value()]) {
    if (parent_port_[n.value()] == 0) return {255};  // unreachable over links believed up
    path.push_back(parent_port_[n.value()]);
  }
  return std::vector<uint8_t>(path.rbegin(), path.rend());
}

void TrapWatcher::Probe(std::set<std::pair<uint32_t, uint16_t>> ports, int64_t trap_ns, int64_t recv_ns,
                        std::vector<FabricChange>* out) {
  std::set<uint32_t> touched;   // switches whose link set changed
  std::set<uint32_t> suspects;  // switches already expanded (their neighbours probed)
  std::vector<std::pair<fabric::LinkId, FabricChange>> links;
  while (!ports.empty()) {
    auto [node, port] = *ports.begin();
    ports.erase(ports.begin());
    fabric::NodeId sw(node);
    fabric::PortId pid = model_->port_of(sw, port);
    if (!pid.valid()) continue;
    fabric::LinkId l = model_->port(pid).link;
    if (!l.valid()) continue;
    std::vector<uint8_t> path = PathTo(sw);
    if (path.size() == 1 && path[0] == 255) {
      pending_.insert({node, port});  // cut off from us: after the SM's sweep
      continue;
    }
    auto phase = probe_->PortPhaseDr(path, port);
    int64_t done = NowNs();
    if (!phase.ok()) {
      pending_.insert({node, port});
      continue;
    }
    pending_.erase({node, port});
    // Physically up counts as up, as ibnetdiscover (the sweep) sees it: the SM makes the port
    // Active seconds later, which the controller's hold-down covers.
    int8_t up = *phase == LinkPhase::kDown ? 0 : 1;
    if (link_up_[l.value()] == up) continue;
    link_up_[l.value()] = up;
    parent_port_.clear();  // the DR paths change with the links
    links.push_back({l, {.is_switch = false,
                         .name = fmt::format("{}[{}]", model_->node(sw).name, port),
                         .up = up != 0,
                         .trap_ns = trap_ns,
                         .recv_ns = recv_ns,
                         .probed_ns = done}});
    fabric::NodeId peer = model_->link_peer(l, sw);
    touched.insert(node);
    touched.insert(peer.value());
    // A dead link may be a dead switch behind it: probe the ports facing that switch on its
    // other neighbours now (by directed route, around what is known dead), instead of waiting
    // for their traps, some of which die on routes through it.
    // Likewise a link back to a switch that was down: its other links come back together (a
    // switch restarting), so they are probed now rather than one trap at a time.
    bool expand = model_->node(peer).type == fabric::NodeType::kSwitch &&
                  (up == 0 || switch_up_[peer.value()] == 0) && suspects.insert(peer.value()).second;
    if (expand) {
      for (const fabric::Adjacent* a = model_->adj_begin(peer); a != model_->adj_end(peer); ++a) {
        if (model_->node(a->peer).type == fabric::NodeType::kSwitch && link_up_[a->link.value()] != up) {
          ports.insert({a->peer.value(), a->peer_port});
        }
      }
    }
  }
  // Switches whose links are all down are down. The controller is told the switch, not its
  // links one by one (each report re-routes; a dead core switch has dozens of links), and the
  // links stay "covered" by it until it comes back.
  std::set<uint32_t> implied;  // links whose change the switch's change already says
  std::vector<FabricChange> after;
  for (uint32_t n : touched) {
    fabric::NodeId id(n);
    if (model_->node(id).type != fabric::NodeType::kSwitch) continue;
    bool any_up = false;
    for (const fabric::Adjacent* a = model_->adj_begin(id); a != model_->adj_end(id); ++a) {
      any_up = any_up || link_up_[a->link.value()] != 0;
    }
    if (any_up == (switch_up_[n] != 0)) continue;
    switch_up_[n] = any_up ? 1 : 0;
    int64_t now = NowNs();
    out->push_back({.is_switch = true,
                    .name = model_->node(id).name,
                    .up = any_up,
                    .trap_ns = trap_ns,
                    .recv_ns = recv_ns,
                    .probed_ns = now});
    for (const fabric::Adjacent* a = model_->adj_begin(id); a != model_->adj_end(id); ++a) {
      uint32_t l = a->link.value();
      if (!any_up) {
        covered_.insert(l);
        implied.insert(l);
      } else if (covered_.erase(l) > 0) {
        if (link_up_[l] != 0) {
          implied.insert(l);
        } else {  // still down though the switch is back: now say so
          after.push_back({.is_switch = false,
                           .name = fmt::format("{}[{}]", model_->node(id).name, a->port),
                           .up = false,
                           .trap_ns = trap_ns,
                           .recv_ns = recv_ns,
                           .probed_ns = now});
        }
      }
    }
  }
  for (auto& [l, c] : links) {
    if (!implied.count(l.value()) && !covered_.count(l.value())) out->push_back(std::move(c));
  }
  for (FabricChange& c : after) out->push_back(std::move(c));
}

StatusOr<std::vector<FabricChange>> TrapWatcher::Poll(std::chrono::milliseconds timeout) {
  std::vector<FabricChange> out;
  pollfd p{.fd = fd_, .events = POLLIN, .revents = 0};
  int r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  if (r < 0) {
    if (errno == EINTR) return out;
    return Status::Internal(fmt::format("trap watch: poll: {}", std::strerror(errno)));
  }
  if (r == 0) return out;
  // Drain the burst, then probe each switch once.
  std::set<std::pair<uint32_t, uint16_t>> ports;
  bool resweep = false;
  int64_t first_trap_ns = 0, recv_ns = NowNs();
  char buf[512];
  for (;;) {
    ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return Status::Internal(fmt::format("trap watch: recv on {}: {}", path_, std::strerror(errno)));
    }
    ++events_;
    auto e = ParseOsmEvent(std::string_view(buf, static_cast<size_t>(n)));
    if (!e.ok()) {
      Warn(e.status().message());
      continue;
    }
    if (e->ev == "subnet_up" || e->ev == "heavy_sweep_done") {
      resweep = true;
      if (e->ev == "subnet_up") ++subnet_ups_;
    } else if (e->ev == "trap" && e->trap == 128) {
      uint16_t lid = e->lid != 0 ? e->lid : e->issuer_lid;
      std::optional<fabric::NodeId> sw = SwitchOfLid(lid);
      if (!sw) continue;
      if (first_trap_ns == 0) first_trap_ns = e->t_ns;
      for (const fabric::Adjacent* a = model_->adj_begin(*sw); a != model_->adj_end(*sw); ++a) {
        ports.insert({sw->value(), a->port});
      }
    }
  }
  if (!ports.empty()) Probe(std::move(ports), first_trap_ns, recv_ns, &out);
  if (resweep) {
    // OpenSM has re-routed: LID routes work again. Probe what was undecided and the ports facing
    // each switch with a dead link (their traps may have been lost on a dead route).
    std::set<std::pair<uint32_t, uint16_t>> again = pending_;
    pending_.clear();
    for (size_t l = 0; l < link_up_.size(); ++l) {
      if (link_up_[l] != 0) continue;
      const fabric::Link& link = model_->link(fabric::LinkId(static_cast<uint32_t>(l)));
      for (fabric::PortId end : {link.a, link.b}) {
        fabric::NodeId dead_side = model_->port(end).node;
        if (model_->node(dead_side).type != fabric::NodeType::kSwitch) continue;
        for (const fabric::Adjacent* a = model_->adj_begin(dead_side); a != model_->adj_end(dead_side); ++a) {
          if (model_->node(a->peer).type == fabric::NodeType::kSwitch) again.insert({a->peer.value(), a->peer_port});
        }
      }
    }
    if (!again.empty()) Probe(std::move(again), 0, recv_ns, &out);
  }
  return out;
}

}  // namespace gpool::ib
