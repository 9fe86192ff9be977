// FabricView: the controller's live model of the InfiniBand fabric (`gpool controller --fabric`).
//
// It holds the fabric (fabric::Fabric), the routes over it (gpool's engine, default minhop) and
// the effective up/down state of every link and switch, and turns them into:
//   - the scheduler's domains (BuildDomains): leaf/pod structure from sim::ClusterFromFabric (the
//     same adapter the simulator uses), grouped per host: a host's leaf domain is the set of leaf
//     switches its HCAs hang off (a rail-optimised host has 8), bandwidth = their usable uplinks
//     now vs. nominal (a dead uplink makes the domain "degraded", which placement avoids). A part
//     of the fabric that a failure cuts off becomes its own fabric domain (gangs never span it),
//     and a host with no usable HCA link is unhealthy (not schedulable).
//   - the API's view, paths, and health (dead links/switches, degraded domains, jobs whose
//     routes crossed a dead element, unreachable hosts).
//
// State changes come as observations (Observe*: from the discovery sweep, or the API's Event).
// Damping, so that a flapping link does not make the controller thrash: "down" takes effect at
// once (the safe side: stop placing over it), "up" only after the element has stayed up for
// hold_down, and an element that flapped often (penalty: +1 per down, halving every half_life;
// suppressed at >= suppress_penalty until it decays below reuse_penalty) stays down even then.
// Each effective change bumps generation() and re-routes: a failure incrementally
// (fabric::FailAndReroute), elements coming back with one full Route per tick however many
// came back at once.
//
// Job routes: a running job's flows are a ring over its nodes in task order on every rail (node
// i's HCA r -> node i+1's HCA r), traced over the LFTs. A task with remote GPUs (remote
// attachment: its process on one host, GPUs of another host's GPU server) adds flows between
// its host and each lending host, both directions on every rail, like a two-node gang: the
// remoting runtime's copies and calls cross the fabric between them. (A limit of the model: the
// runtime's transport may use fewer rails than the host has; every rail is counted.) The links a
// job's flows crossed are
// remembered from when the view first saw it running, so that after a failure and re-route the
// job is still reported as affected by the element its traffic was on; the load (flows per
// link) uses the current routes.
//
// Routes from OpenSM (options.lfts_path, `gpool controller --fabric-lfts FILE`): instead of
// computing routes with `engine`, the view reads the LFTs OpenSM programmed from its
// opensm-lfts.dump (fabric::ReadLftDump; the fabric's LIDs must be the subnet's, so --fabric
// should be a discovery taken after OpenSM assigned LIDs). Link load, job routes, paths,
// affected jobs and the leaf domains' routed bandwidth (below) then follow OpenSM's routes.
//   - Re-read: every Tick stats the file; when (inode, size, mtime) changed it is read and
//     parsed, and the read is only taken when the stat is the same before and after it (OpenSM
//     rewrites the file in place after a heavy sweep, so a read racing the writer is retried on
//     a later tick). A file that fails to parse keeps the previous routes; the error (with the
//     dump's file:line) is logged once per file version and reported in Health (routes_error).
//   - A failure does not re-route: the switches keep OpenSM's LFTs until OpenSM sweeps and
//     rewrites the dump, so until then the routes over the dead element are broken, which Health
//     reports (unreachable_pairs, route_problems) instead of pretending a re-route happened.
//   - No dump yet at start (the controller usually starts before OpenSM): the engine's routes
//     are used and Health says so (routes_error) until the file appears. A dump that exists but
//     does not parse at start is an error of Open.
//   - Domains: a leaf's usable bandwidth counts only the uplinks that OpenSM's routes from that
//     leaf to CAs elsewhere use (an uplink no route takes carries no traffic), so a leaf whose
//     routes concentrate on few uplinks is degraded for the scheduler.
// Routes are checked (fabric::Verify, no deadlock check) once per generation: CA pairs without
// a route or with a loop are reported by Health and logged when the count changes.
//
// Thread safety: thread-safe (one mutex). Time comes from options.clock (tests pass a
// ManualClock).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "control/fabric_source.h"
#include "fabric/model.h"
#include "fabric/routing.h"
#include "gpool/v1/gpool.pb.h"
#include "sched/types.h"
#include "sim/cluster.h"

namespace gpool::control {

struct FabricViewOptions {
  std::string source;                 // see fabric_source.h
  std::string engine = "minhop";      // minhop, updn, ftree, dor
  // OpenSM's opensm-lfts.dump: take routes from it (see above) instead of `engine`. Empty: off.
  std::string lfts_path;
  std::chrono::milliseconds hold_down{5000};
  double suppress_penalty = 3;
  double reuse_penalty = 1;
  std::chrono::milliseconds half_life{60000};
  // ObserveDiscovered: an element must be missing from this many sweeps in a row before it is
  // observed down (a discovery that timed out on some SMPs returns a partial fabric).
  int down_confirmations = 2;
  const Clock* clock = nullptr;       // nullptr: SystemClock::Default()
};

// A task of a running job that uses GPUs of another host: its process runs on `host`, the GPUs
// are `lender`'s, reached through that host's GPU server.
struct RemoteFlow {
  std::string host;
  std::string lender;
  bool operator==(const RemoteFlow&) const = default;
};

// A running job as the view needs it: its nodes in task order, and its tasks' remote GPUs (one
// entry per distinct host/lender pair; a pair with host == lender adds nothing).
struct JobNodes {
  std::string id;
  std::string tenant;
  std::vector<std::string> nodes;
  std::vector<RemoteFlow> remote;
};

class FabricView {
 public:
  static StatusOr<std::unique_ptr<FabricView>> Open(const FabricViewOptions& options);
  // From an already built fabric (tests, benchmarks).
  static StatusOr<std::unique_ptr<FabricView>> FromFabric(fabric::Fabric f,
                                                          const FabricViewOptions& options);
  ~FabricView();

  // Host names in fabric order (what hollow agents register as).
  std::vector<std::string> HostNames() const;
  // Port GUIDs of a host's HCAs (connected CA ports), for partition membership. Empty when the
  // host is unknown.
  std::vector<uint64_t> HostPortGuids(const std::string& host) const;

  // Fills spec->domains and every node's leaf (and marks hosts cut off the fabric unhealthy).
  // Nodes that are not hosts of the fabric go to one "unplaced" leaf in its own fabric domain,
  // so that no gang mixes them with fabric hosts.
  Status BuildDomains(sched::ClusterSpec* spec);

  // Observations. `ref` is "SWITCH[PORT]" as fabric::ResolveLink takes it. Unknown names are
  // NotFound errors naming them.
  Status ObserveLink(const std::string& ref, bool up);
  Status ObserveSwitch(const std::string& name, bool up);
  // A whole discovered fabric: each link of the model present in `live` (same node names and
  // ports at both ends) is observed up, each missing one down; switches likewise. CAs missing
  // from `live` take their links down with them.
  Status ObserveDiscovered(const fabric::Fabric& live);
  // Re-evaluates hold-down and damping (the sweep calls it; reads call it too).
  void Tick();

  // Remembers the links each running job's flows cross now (first sight wins); forgets jobs not
  // listed. Call it with ALL running jobs (the fabric monitor does every sweep, the API before
  // each call) so that a job is tracked before a failure re-routes its flows.
  void TrackJobs(const std::vector<JobNodes>& jobs);

  // `jobs`: the running jobs to show (a tenant sees its own): loads over the current routes;
  // Health reports those of them that TrackJobs saw on a now-dead element.
  v1::GetFabricResponse Get(const v1::GetFabricRequest& req, const std::vector<JobNodes>& jobs);
  StatusOr<v1::FabricPathResponse> Path(const v1::FabricPathRequest& req);
  v1::FabricHealthResponse Health(const std::vector<JobNodes>& jobs);

  uint64_t generation() const;
  const std::string& engine() const { return engine_name_; }
  // Where the routes in use come from: "minhop" etc., or "opensm:FILE" once the dump is loaded.
  std::string routes_source() const;

 private:
  struct Damp {
    bool observed_up = true;
    bool effective_up = true;
    bool suppressed = false;
    double penalty = 0;
    int64_t penalty_ns = 0;  // when penalty was last decayed
    int64_t up_since_ns = 0;
    int missing_sweeps = 0;  // ObserveDiscovered: consecutive sweeps without it
  };
  struct Domains;  // the per-generation domain layout
  struct FileStamp {
    uint64_t dev = 0, ino = 0;
    int64_t size = -1, mtime_ns = 0;
    bool operator==(const FileStamp&) const = default;
  };

  explicit FabricView(const FabricViewOptions& options);
  Status Init(fabric::Fabric f);
  void TrackJobsLocked(const std::vector<JobNodes>& jobs);
  Status ObserveLocked(bool is_link, uint32_t id, bool up);
  void TickLocked(int64_t now);
  void DecayLocked(Damp* d, int64_t now);
  Status ApplyLocked(bool is_link, uint32_t id, bool up);
  void RouteIfNeededLocked();
  // options_.lfts_path: (re)loads the dump when it changed. Returns the load error when the
  // file exists and does not parse (Init treats that as fatal; ticks log it).
  Status ReloadLftsLocked();
  bool OpenSmRoutesLocked() const { return lfts_loaded_; }
  const fabric::VerifyReport& VerifyLocked();
  // Leaf switch -> Gb/s of its uplinks that the routes to CAs off that leaf use.
  double RoutedUplinkGbpsLocked(fabric::NodeId leaf) const;
  const Domains& DomainsLocked();
  // Traces the job's ring flows and remote flows over the current tables (links, each once per
  // flow).
  std::vector<fabric::LinkId> JobLinksLocked(const JobNodes& job);
  // One flow per rail from `src` to `dst` (rail r to rail r), appended to `out`. A rail without
  // a route now adds nothing (Health reports why).
  void RailFlowsLocked(const FabricHost& src, const FabricHost& dst, std::vector<fabric::LinkId>* out);
  void FillLink(fabric::LinkId l, v1::FabricLink* out) const;
  std::string LinkLabel(fabric::LinkId l) const;
  fabric::PortId CaPort(fabric::NodeId ca) const;  // first connected port

  const FabricViewOptions options_;
  const Clock* clock_;
  std::string engine_name_;

  mutable std::mutex mu_;
  fabric::Fabric fabric_;
  fabric::RouteOptions route_options_;
  fabric::RoutingTables tables_;
  std::vector<FabricHost> hosts_;
  std::unordered_map<std::string, size_t> host_index_;  // host name and CA name -> hosts_ index
  sim::SimCluster nominal_;                              // ClusterFromFabric, all links up
  std::vector<int32_t> ca_sim_host_;                     // CA NodeId -> nominal_ host, -1
  std::vector<Damp> link_damp_, node_damp_;
  uint64_t generation_ = 0;
  bool needs_route_ = false;
  int64_t last_change_unix_ms_ = 0;
  std::unique_ptr<Domains> domains_;
  uint64_t domains_generation_ = UINT64_MAX;
  std::map<std::string, std::vector<fabric::LinkId>> job_links_;  // first-seen routes per job
  // OpenSM routes (options_.lfts_path).
  bool lfts_loaded_ = false;          // tables_ are the dump's
  FileStamp lfts_stamp_;              // of the loaded dump
  FileStamp lfts_bad_stamp_;          // of the last version that failed (logged once)
  std::string routes_error_;          // why the loaded routes are not the file's current content
  int64_t routes_loaded_unix_ms_ = 0;
  int64_t route_loads_ = 0;
  fabric::VerifyReport verify_;
  uint64_t verify_generation_ = UINT64_MAX;
  size_t logged_broken_ = 0;
};

}  // namespace gpool::control
