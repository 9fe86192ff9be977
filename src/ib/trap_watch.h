// TrapWatcher: turns OpenSM's events (forwarded by the event plugin in src/ib/osm_plugin/, one
// datagram each on a UNIX socket) into link and switch state changes of a fabric model, by
// TARGETED port queries instead of a full discovery:
//
//   trap 128 (link state change) from switch LID L
//     -> name L (NodeDescription, else NodeGUID, matched against the model; cached)
//     -> PortInfo of every port of that switch that the model connects (one directed-route SMP
//        each, along a path over links believed up, so it works while the SM is re-routing)
//     -> Down: the link is down; physically up (Init/Armed/Active): up, as ibnetdiscover sees it
//        (the SM activates it seconds later; the controller's hold-down covers that); no answer:
//        undecided, probed again after OpenSM's next subnet_up/heavy_sweep_done event.
//     -> a newly dead link to switch S: the ports facing S on S's other neighbours are probed at
//        once too (S may be dead, and traps of neighbours whose route to the SM crossed S are
//        lost).
//   subnet_up / heavy_sweep_done
//     -> probe again what was undecided, and the ports facing every switch that has a dead link
//        (a switch that died takes its neighbours' routes to the SM with it, so some of their
//        traps never arrive; after OpenSM re-routes, LID routes to them work again).
//   A switch all of whose model links are down is reported down (and up again when one is up);
//   its links are then not reported one by one (each report costs the controller a re-route).
//
// Trap 128 names no port, hence the per-switch probe. The model's link state here starts all up
// (as the controller's view does) and only changes are returned, so a repeated trap costs probes
// but reports nothing new. Events that arrive together (a switch failure makes dozens of
// neighbours trap at once) are drained and each switch is probed once per batch.
//
// Limits: traps lost on the way to the SM are only caught by the re-probe after OpenSM's sweep
// (seconds) or by the controller's periodic discovery sweep; a switch is inferred down from its
// links only (a leaf's host links do not trap, so a dead leaf shows as its dead uplinks, which
// cut its hosts off in the controller's view).
//
// Thread safety: not thread-safe; one thread calls Poll.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "fabric/model.h"
#include "ib/discover.h"
#include "ib/smp_probe.h"

namespace gpool::ib {

// One datagram of the OpenSM plugin (format in src/ib/osm_plugin/gpool_osm_events.c).
struct OsmEvent {
  int64_t t_ns = 0;      // when OpenSM handed it to the plugin (CLOCK_REALTIME)
  std::string ev;        // trap, subnet_up, heavy_sweep_start, heavy_sweep_done, ucast_routing_done
  int trap = 0;          // trap number (ev == "trap")
  uint16_t issuer_lid = 0;
  uint16_t lid = 0;      // trap 128: the switch whose port changed; 129-131: the port's LID
  int port = 0;          // traps 129-131
};
// Errors name the field and quote the datagram.
StatusOr<OsmEvent> ParseOsmEvent(std::string_view datagram);

struct FabricChange {
  bool is_switch = false;
  std::string name;      // "SWITCH[PORT]" (fabric::ResolveLink's form) or a switch name
  bool up = false;
  int64_t trap_ns = 0;   // OpenSM's time of the event that led here (0: a re-probe)
  int64_t recv_ns = 0;   // when the watcher read it
  int64_t probed_ns = 0; // when the probe that decided it returned
};

struct TrapWatchOptions {
  std::string socket_path;  // bound here (a stale socket file is replaced)
  SmpProbeOptions probe;
  // Learn every switch's LID at Open with one discovery (libibnetdisc, as ibnetdiscover), so
  // that a switch whose own trap was lost can still be probed; without it LIDs are learned from
  // traps only. Costs one full discovery at start (1-1.5 s on 2,268 HCAs under ibsim).
  bool learn_lids = true;
};

class TrapWatcher {
 public:
  // `model` must outlive the watcher.
  static StatusOr<std::unique_ptr<TrapWatcher>> Open(const fabric::Fabric* model,
                                                     const TrapWatchOptions& options);
  ~TrapWatcher();
  TrapWatcher(const TrapWatcher&) = delete;
  TrapWatcher& operator=(const TrapWatcher&) = delete;

  // Switches whose LID is known (learned at Open or from traps).
  size_t known_lids() const { return node_lid_.size(); }

  // Waits up to `timeout` for events, handles all that are queued, returns the changes (often
  // none). Malformed datagrams and traps from unknown nodes are skipped and counted in
  // warnings() (with the reason), not errors: one bad sender must not stop the watcher.
  StatusOr<std::vector<FabricChange>> Poll(std::chrono::milliseconds timeout);

  const std::vector<std::string>& warnings() const { return warnings_; }
  int64_t events() const { return events_; }
  // OpenSM's subnet_up events seen (its sweep after a change has finished).
  int64_t subnet_ups() const { return subnet_ups_; }
  int64_t mads() const { return probe_->mads_sent(); }

 private:
  TrapWatcher(const fabric::Fabric* model, std::unique_ptr<SmpProbe> probe, int fd, std::string path);
  void Warn(std::string w);
  // Node of a LID (cached); nullopt (and a warning) when it is not a switch of the model.
  std::optional<fabric::NodeId> SwitchOfLid(uint16_t lid);
  void Learn(uint16_t lid, fabric::NodeId n);
  // Directed route (out-ports) from the local node to `target` over links believed up; {255}
  // when there is none.
  std::vector<uint8_t> PathTo(fabric::NodeId target);
  // Probes the given (switch, port) pairs (and, for each newly dead switch-to-switch link, the
  // ports facing the switch behind it); appends changes.
  void Probe(std::set<std::pair<uint32_t, uint16_t>> ports, int64_t trap_ns, int64_t recv_ns,
             std::vector<FabricChange>* out);

  const fabric::Fabric* model_;
  std::unique_ptr<SmpProbe> probe_;
  int fd_;
  std::string path_;
  std::vector<int8_t> link_up_;     // by LinkId: 1 up, 0 down
  std::vector<int8_t> switch_up_;   // by NodeId
  std::unordered_map<uint16_t, uint32_t> lid_node_;
  std::unordered_map<uint32_t, uint16_t> node_lid_;
  std::set<std::pair<uint32_t, uint16_t>> pending_;  // undecided (switch, port) probes
  std::set<uint32_t> covered_;                   // down links reported as their dead switch
  fabric::NodeId local_;                         // where directed routes start
  std::vector<fabric::NodeId> parent_;           // BFS tree from local_ (empty: recompute)
  std::vector<uint8_t> parent_port_;
  std::vector<std::string> warnings_;
  int64_t events_ = 0;
  int64_t subnet_ups_ = 0;
};

}  // namespace gpool::ib
