// Controller: the control plane's state machine — nodes, jobs, allocations — backed by a Store.
//
// Every acknowledged change (a registered node, a submitted or cancelled job, a bind, a finished
// task) is committed to the Store before the call returns, as JSON of the gpool.v1 messages under
// keys::Node / keys::Job. A job's allocations live inside its record, so a bind is one Txn per
// cycle and a restarted controller (Open) recovers jobs and their allocations exactly: nothing
// is allocated twice, and pending jobs stay pending.
//
// Scheduling: ScheduleOnce rebuilds a sched::ClusterState from the registered nodes and the
// running jobs (cheap at thousands of nodes), runs the default `gpool` policy, and applies its
// preemptions (the victim goes back to pending) and binds. Nodes have no fabric position yet:
// they are laid out in a uniform tree of 16-node leaves in name order (docs/control-plane.md).
// Jobs ask for whole GPUs: up to 8 GPUs is one task; more must be a multiple of 8 (8-GPU tasks).
//
// Liveness: a node that has not heartbeated for node_timeout is "down" (unschedulable; its
// running jobs are kept). After a restart every recovered node gets a fresh grace period.
//
// Thread safety: thread-safe. One mutex guards the state; Store commits happen under it, so
// commits are serialized (the store's group commit does not help here; fine at this scale).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "control/metrics.h"
#include "control/store.h"
#include "gpool/v1/gpool.pb.h"
#include "sched/fairshare.h"
#include "sched/scheduler.h"

namespace gpool::control {

struct ControllerOptions {
  std::string store_url;  // e.g. "sqlite:/var/lib/gpool/state.db"
  std::chrono::milliseconds schedule_interval{200};
  std::chrono::milliseconds node_timeout{10000};
  std::chrono::milliseconds heartbeat_interval{1000};  // told to agents at Register
  std::map<std::string, int64_t> tenant_quotas;         // guaranteed GPUs per tenant
  std::string policy_config;                            // sched::ParsePolicyConfig text
};

class Controller {
 public:
  // Opens the store and recovers nodes and jobs from it.
  static StatusOr<std::unique_ptr<Controller>> Open(const ControllerOptions& options);
  ~Controller();

  // Registers or re-registers a node (its spec may change; it must still hold its allocations).
  StatusOr<v1::RegisterNodeResponse> RegisterNode(const v1::RegisterNodeRequest& req);
  // NotFound when the node is not registered (the agent should Register again).
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& req);
  v1::ListNodesResponse ListNodes();

  StatusOr<v1::Job> Submit(const v1::SubmitJobRequest& req);
  StatusOr<v1::Job> GetJob(const std::string& id);
  v1::ListJobsResponse ListJobs(const v1::ListJobsRequest& req);
  StatusOr<v1::Job> Cancel(const std::string& id);
  v1::ListTenantsResponse ListTenants();

  // One scheduling cycle (the loop calls it; tests may call it directly).
  Status ScheduleOnce();
  // Starts / stops the scheduling loop thread.
  void Start();
  void Stop();

  std::string MetricsText();
  std::string StateJson();  // {"nodes":[...],"jobs":[...],"tenants":[...]}

 private:
  explicit Controller(const ControllerOptions& options);
  Status Recover();
  // Commits the given jobs (and nodes) in one Txn, timing it.
  Status Persist(const std::vector<const v1::Job*>& jobs, const std::vector<const v1::Node*>& nodes);
  void RefreshNodeStates(int64_t now_ms);
  v1::ListTenantsResponse ListTenantsLocked();

  const ControllerOptions options_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<sched::Policy> policy_;
  sched::UsageLedger ledger_;

  std::mutex mu_;
  std::map<std::string, v1::Node> nodes_;            // by name
  std::map<std::string, v1::Job> jobs_;              // by id (ids sort by submit order)
  std::map<std::string, std::string> request_ids_;   // client_request_id -> job id
  uint64_t next_job_ = 1;

  Histogram sched_latency_;
  Histogram commit_latency_;
  std::atomic<bool> stop_{false};
  std::condition_variable cv_;
  std::thread loop_;
};

// Whole-GPU split of a request: gpus <= 8 is one task; more must be a multiple of 8.
Status SplitGpus(int32_t gpus, int32_t* num_tasks, int32_t* gpus_per_task);

}  // namespace gpool::control
