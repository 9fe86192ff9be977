// Controller: the control plane's state machine — nodes, jobs, allocations — backed by a Store.
//
// Every acknowledged change (a registered node, a submitted or cancelled job, a bind, a finished
// task) is durable in the Store before the call returns, as JSON of the gpool.v1 messages under
// keys::Node / keys::Job. A job's allocations live inside its record, so a restarted controller
// (Open) recovers jobs and their allocations exactly: nothing is allocated twice, and pending
// jobs stay pending.
//
// Retention (controller_retention.cc): ended jobs beyond ControllerOptions::keep_finished_jobs
// or keep_finished_for move from /jobs/ and memory to the store's archive (/archive/jobs/,
// bounded by archive_max_jobs), where GetJob, Cancel, ListArchivedJobs and an idempotent
// resubmit still find them.
//
// Commits (why they are not under the state lock): a change is applied to the in-memory state
// under `mu_` and its records are queued with a sequence number in the same critical section,
// so queue order is state order. The caller then leaves `mu_` and waits until its sequence
// number is durable. Whoever waits while no commit is running becomes the committer: it takes
// every queued change, merges them into one Store Txn (a later write of a key wins), commits,
// and wakes the waiters (group commit at the controller level: one fsync for many submits,
// and the state lock is free while the disk works). Reads (Get, List, Heartbeat's task list)
// wait until what they saw is durable, so no one ever sees or acts on a change that a crash
// could still undo. If a commit fails the controller stops accepting changes (every later
// change returns the error) because memory is then ahead of the store; restart it to recover.
//
// Scheduling: ScheduleOnce rebuilds a sched::ClusterState from the registered nodes and the
// running jobs (cheap at thousands of nodes), runs the default `gpool` policy, and applies its
// preemptions (the victim goes back to pending) and binds. Jobs carry the sched::JobSpec shape:
// whole GPUs (up to 8 is one task, more is a gang of 8-GPU tasks) or a fraction of one GPU
// (milli-GPU + GPU memory), a GPU model constraint, locality, preemptibility, min run time and
// kind, and where its GPUs may come from (gpu_source: local, or pooled/remote: GPUs of other
// nodes' GPU servers, allocations.h). With options.fabric the domains come from the fabric
// (fabric_view.h); without it nodes are laid out in a uniform tree of 16-node leaves in name
// order (docs/control-plane.md). The cycle is controller_schedule.cc; what a task's host is told
// (assignments, devices, leases) is controller_leases.cc. A submit that finds nothing else
// pending and the store idle runs that cycle itself and commits the job with its bind in one
// Txn (bind at submit: the rule is at Controller::Submit).
//
// Liveness: a node that has not heartbeated for node_timeout is "down" (unschedulable). The
// scheduling cycle that first sees it down applies the lost-node policy to the jobs that had an
// unfinished task on it, or GPUs lent to one: requeue (back to pending, `requeues` + 1) or fail. A down node that
// heartbeats again is "settling" for node_settle before it is schedulable again, so a flapping
// node does not attract, lose and requeue jobs at every flap. Every bind bumps the job's
// `attempt`; finished reports carry it, so a late report about an earlier placement is ignored.
// After a restart every recovered node gets a fresh grace period, and so after a change of
// leader: node_timeout from the takeover, which CheckNodeTimeout keeps long enough for agents to
// find the new leader.
//
// High availability (controller_ha.cc, leader.h): on an etcd store several controllers run; the
// one holding the leader key leads. Only the leader changes state and schedules; every commit
// Txn carries Compare::ModRevisionIs(leader key, fence), so a deposed leader never commits.
// When a fenced commit is refused (or its outcome is unknown) the controller steps down: the
// changes queued in its term fail with Unavailable, and it re-reads the store. Standbys keep
// their state current from a watch of the store and serve reads; changes get Unavailable naming
// the leader ("not the leader; the leader is at HOST:PORT"). A new leader re-reads the store
// before it acts. On SQLite there is one controller and it always leads.
//
// Thread safety: thread-safe. Lock order: retain_mu_ -> mu_ -> commit_mu_ -> watch_mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "control/leader.h"
#include "control/metrics.h"
#include "control/node_power.h"
#include "control/store.h"
#include "gpool/v1/gpool.pb.h"
#include "sched/fairshare.h"
#include "sched/scheduler.h"

namespace gpool::control {

// What happens to the jobs of a node that stops heartbeating.
enum class LostNodePolicy { kRequeue, kFail };
StatusOr<LostNodePolicy> ParseLostNodePolicy(std::string_view s);  // "requeue" | "fail"

class FabricView;

struct ControllerOptions {
  std::string store_url;  // e.g. "sqlite:/var/lib/gpool/state.db"
  std::chrono::milliseconds schedule_interval{200};
  std::chrono::milliseconds node_timeout{10000};
  // How long a node that was down must heartbeat before it is schedulable again; 0 = as long as
  // node_timeout.
  std::chrono::milliseconds node_settle{0};
  std::chrono::milliseconds heartbeat_interval{1000};  // told to agents at Register
  LostNodePolicy lost_node_policy = LostNodePolicy::kRequeue;
  std::map<std::string, int64_t> tenant_quotas;         // guaranteed GPUs per tenant
  // The most GPUs a tenant's running jobs may hold at once (the admin's cap, tenant_limits.h);
  // absent = no cap. A job asking more is refused at submit.
  std::map<std::string, int64_t> tenant_max_gpus;
  std::string policy_config;                            // sched::ParsePolicyConfig text
  // Raw key (>= 32 bytes) for signing GPU-server leases (src/remote/lease); empty = the lease
  // RPC answers FAILED_PRECONDITION.
  std::string lease_key;
  // Wall clock with the Unix epoch (timestamps in records, heartbeat ages, lease expiry).
  // nullptr = the real one. Tests pass a ManualClock.
  const Clock* clock = nullptr;
  // false: don't wake the scheduling loop on every submit, and never bind at submit
  // (benchmarks of pure submit rate).
  bool schedule_on_submit = true;
  // Bind at submit (Controller::Submit, "Inline bind"): a job submitted while no other job is
  // pending and no commit is in flight is placed by a scheduling cycle run inside the submit,
  // and the job and its bind commit in one store transaction. false: every job waits for the
  // loop's next cycle (tests of the cycle's ordering among several queued jobs use this).
  bool bind_at_submit = true;
  int64_t lease_ttl_s = 2;  // HA (etcd store): the leader lease TTL
  // The fabric (`--fabric`): when set, the scheduler's leaf/pod/fabric domains come from it
  // (FabricView::BuildDomains) instead of the uniform 16-node leaves. Not owned by value: the
  // API and the fabric monitor share it.
  std::shared_ptr<FabricView> fabric;
  // Retention (controller_retention.cc): a finished, cancelled or failed job leaves the live
  // state (memory and /jobs/) once it is not among the newest keep_finished_jobs ended jobs, or
  // keep_finished_for after it ended, whichever comes first, and moves to the store's archive
  // (/archive/jobs/), where Get, `jobs ls --history` and idempotent submit still find it.
  // keep_finished_jobs < 0: no count bound; keep_finished_for 0: no age bound; both: off.
  int64_t keep_finished_jobs = 10000;
  std::chrono::milliseconds keep_finished_for{24LL * 3600 * 1000};
  // The archive's own bound: beyond it the earliest-submitted archived jobs are deleted.
  // 0 = keep no archive (jobs that leave the live state are gone).
  int64_t archive_max_jobs = 100000;
  // How often the scheduling loop runs a retention pass.
  std::chrono::milliseconds retention_interval{1000};
};

// InvalidArgument when node_timeout leaves agents too little time to reach a controller after
// the one they talk to went silent (agent_timing.h); `ha`: several controllers (etcd store).
Status CheckNodeTimeout(const ControllerOptions& options, bool ha);

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
  // The live jobs (req.history ignored).
  v1::ListJobsResponse ListJobs(const v1::ListJobsRequest& req);
  // The archived jobs (retention) matching req.tenant and req.state: the newest req.limit
  // (default 1000, at most 10000) in id order. Reads the whole archive: not for hot paths.
  StatusOr<v1::ListJobsResponse> ListArchivedJobs(const v1::ListJobsRequest& req);
  StatusOr<v1::Job> Cancel(const std::string& id);
  v1::ListTenantsResponse ListTenants();
  // One lease per GPU of each task of a running job (FailedPrecondition when the controller has
  // no lease key, the job is not running, or a node advertises no gpu_server).
  StatusOr<v1::IssueLeasesResponse> IssueLeases(const v1::IssueLeasesRequest& req);

  // Watching job changes. Snapshot returns the matching jobs now and the cursor to watch from;
  // WaitJobEvents returns the durable changes after *cursor (advancing it), waiting up to
  // `timeout` for one. FailedPrecondition when the cursor fell out of the kept history (take a
  // new snapshot). Delivery is at least once: a change may appear in a snapshot and again as an
  // event.
  std::vector<v1::Job> SnapshotJobs(const v1::WatchJobsRequest& filter, uint64_t* cursor);
  StatusOr<std::vector<v1::Job>> WaitJobEvents(const v1::WatchJobsRequest& filter,
                                               uint64_t* cursor, std::chrono::milliseconds timeout);

  // One scheduling cycle (the loop calls it; tests may call it directly).
  Status ScheduleOnce();
  // One retention pass (the loop calls it every retention_interval; tests call it directly):
  // moves finished jobs beyond the bounds to the archive, trims the archive to its bound, and
  // reclaims store space after many removals. A no-op on a standby.
  Status RetainOnce();
  // Starts / stops the scheduling loop thread (and, on etcd, the election and the standby's
  // watch of the store).
  void Start();
  void Stop();

  // HA: the address clients are sent to while this controller leads (set before Start).
  void SetAdvertiseAddress(const std::string& address);
  bool leading() const { return leading_.load(); }
  // The fabric view (options.fabric); null without --fabric.
  const std::shared_ptr<FabricView>& fabric() const { return options_.fabric; }

  std::string MetricsText();
  // {"nodes":[...],"jobs":[...],"tenants":[...]}; a non-empty `tenant` keeps only its jobs and
  // its tenant row (the HTTP view of a tenant token, http_auth.h).
  std::string StateJson(const std::string& tenant = "");

 private:
  struct NodeLife {
    bool was_down = false;      // seen down since its last settle
    int64_t back_ms = 0;        // first heartbeat after being down
  };
  struct QueuedCommit {
    uint64_t seq = 0;
    std::vector<std::pair<std::string, std::string>> puts;  // key, value
    std::vector<v1::Job> jobs;  // for watchers, once durable
    std::vector<std::string> deletes;  // keys (retention); a later put or delete of a key wins
  };

  // What one scheduling cycle changed (CycleLocked), to commit and then report.
  struct Cycle {
    std::map<std::string, v1::Job> changed;        // by id, as they are in jobs_ now
    std::vector<const v1::Node*> power_changed;    // into nodes_ (power plans)
    // First binds: accepted-submit time (clock ns) and whether the job waited a cycle.
    std::vector<std::pair<int64_t, bool>> first_binds;
    std::vector<std::string> log;  // logged once committed: a refused commit never happened
  };

  explicit Controller(const ControllerOptions& options);
  Status Recover();
  Status RecoverLocked();  // replaces the in-memory state with the store's; mu_ held

  // ---- HA (controller_ha.cc) ----
  Status NotLeader() const;
  // Fails the changes queued but not durable (they belong to a term that ended) and clears a
  // broken commit state; mu_ held, waits for a running commit to finish.
  void DiscardQueuedCommitsLocked();
  // The committer saw its Txn fail (`compares_failed`: the fence) under HA: step down.
  Status FencedCommitFailed(const Status& error, bool compares_failed);
  void OnLeadership(bool leading, Revision fence);
  void FollowLoop();  // standby: applies watched store changes to the in-memory state
  void ApplyEvent(const WatchEvent& ev);  // mu_ held
  int64_t NowMs() const;
  // Replaces a job in jobs_ and keeps node_jobs_ (the per-node index) in step.
  void SetJobLocked(v1::Job j);
  // Queues the records of these jobs and nodes for commit; returns the sequence to wait for.
  // Caller holds mu_. Returns the error of an earlier failed commit, if any.
  StatusOr<uint64_t> EnqueueLocked(const std::vector<const v1::Job*>& jobs,
                                   const std::vector<const v1::Node*>& nodes);
  // Queues raw record changes (retention's archive writes); same contract as EnqueueLocked.
  StatusOr<uint64_t> EnqueueRawLocked(std::vector<std::pair<std::string, std::string>> puts,
                                      std::vector<std::string> deletes);
  // ---- Retention (controller_retention.cc) ----
  // The archived job with this id, nullopt when the archive has none.
  StatusOr<std::optional<v1::Job>> ArchivedJob(const std::string& id);
  // The archived job submitted with this client_request_id, nullopt when none.
  StatusOr<std::optional<v1::Job>> ArchivedRequest(const std::string& client_request_id);
  Status RecoverArchiveLocked();  // archive_count_, archive_high_ from /archive/meta; mu_ held
  // Applies an /archive/meta record (recovery, and a standby following the leader); mu_ held.
  Status ApplyArchiveMetaLocked(const KeyValue& kv);
  // Waits until `seq` is durable (committing queued changes if no one else is).
  Status WaitDurable(uint64_t seq);
  uint64_t LastEnqueuedLocked() const { return enqueued_seq_; }
  std::string NodeStateLocked(const v1::Node& n, int64_t now_ms) const;
  void RefreshNodeStates(int64_t now_ms);
  // One scheduling cycle on the in-memory state (controller_schedule.cc): lost nodes, unserved
  // jobs, the policy's preemptions, binds and wait reasons, power plans; every change is
  // applied to memory and listed in *out for the caller to commit (also when it fails midway).
  // mu_ held; the caller checked leading_.
  Status CycleLocked(Cycle* out);
  // After the cycle's commit is durable: its log lines and the bind latency metrics.
  void CycleCommitted(const Cycle& c);
  // Whether a job being submitted now may be bound by a cycle inside Submit (the rule is at
  // Controller::Submit). mu_ held.
  bool InlineBindAllowedLocked();
  // Applies the lost-node policy to jobs on down nodes; returns the changed jobs. `log` gets a
  // line per job, to be logged once the change is committed.
  std::vector<v1::Job> HandleLostNodesLocked(int64_t now_ms, std::vector<std::string>* log);
  v1::ListTenantsResponse ListTenantsLocked();
  StatusOr<v1::Job> NewJobFromRequest(const v1::SubmitJobRequest& req) const;

  const ControllerOptions options_;
  const Clock* clock_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<sched::Policy> policy_;
  sched::UsageLedger ledger_;
  // Tenant -> queue index for the controller's life (under mu_, like ledger_): the ledger keeps
  // usage by queue index, so a tenant keeps its index across cycles (numbered afresh each
  // cycle in the order jobs appear, a tenant could inherit another's past usage).
  std::map<std::string, int> tenant_queue_;
  NodePower power_;  // guarded by mu_

  // ---- Task assignments and leases (controller_leases.cc) ----
  // Heartbeat: the unfinished tasks hosted on `node`, as its agent is told to run them.
  void AddAssignmentsLocked(const v1::Node& node, v1::HeartbeatResponse* resp);
  // GPOOL_DEVICES and GPOOL_LEASE of one task: for a task reaching its GPUs through GPU servers
  // (via_server: remote attachment), and for a fraction on a node that serves its GPUs. False
  // when a via_server task cannot get them (logged): the agent must not run it on local GPUs.
  bool FillTaskLeaseLocked(const v1::Node& node, const v1::Job& j, const v1::Allocation& a,
                           v1::TaskAssignment* t);
  // "HOST:PORT/i" of each GPU of the allocation in the task's order (its host's own through
  // the host's GPU server, then each lending node's); FailedPrecondition naming the node that
  // advertises no gpu_server.
  StatusOr<std::vector<std::string>> GpuAddressesLocked(const v1::Job& j,
                                                        const v1::Allocation& a) const;
  // Why a running job's GPU servers cannot serve it now ("" = they can): a via_server task
  // whose host or lending node advertises no gpu_server, or no lease key.
  std::string UnservedLocked(const v1::Job& j) const;
  // Fails the running jobs among `ids` that UnservedLocked finds (logging a line each in
  // `log`); returns them changed.
  std::vector<v1::Job> FailUnservedLocked(std::set<std::string> ids, int64_t now_ms,
                                          std::vector<std::string>* log);
  // Whether the scheduler may lend node n's GPUs (sched::NodeSpec::serves_gpus): it advertises
  // a GPU server and the controller can sign leases for it.
  bool ServesGpus(const v1::Node& n) const;
  // For pending pooled/remote jobs: why no GPU can be lent now ("" = some node can lend).
  std::string RemoteHintLocked() const;

  std::mutex mu_;
  std::map<std::string, v1::Node> nodes_;            // by name
  std::map<std::string, NodeLife> node_life_;        // by name
  std::map<std::string, v1::Job> jobs_;              // by id (ids sort by submit order)
  std::map<std::string, std::set<std::string>> node_jobs_;  // node -> running jobs on it
  std::map<std::string, std::string> request_ids_;   // client_request_id -> job id
  // Pending jobs' accepted-submit times (clock ns, finer than the record's submit_ms), and those
  // of them a scheduling cycle saw without binding; both dropped once a job leaves "pending"
  // (SetJobLocked). In memory only: after a restart the record's submit_ms serves.
  std::unordered_map<std::string, int64_t> submit_ns_;
  std::unordered_set<std::string> waited_;
  int64_t pending_jobs_ = 0;  // jobs_ in state "pending" (SetJobLocked keeps it)
  uint64_t next_job_ = 1;
  // Retention, under mu_: archived jobs in the store, the highest archived job number (so ids
  // are never reused after the live records of the newest jobs left), and ever archived.
  int64_t archive_count_ = 0;
  uint64_t archive_high_ = 0;
  bool archive_used_ = false;
  // Loop thread only: records removed since the last Store::Reclaim, time of the last pass.
  std::mutex retain_mu_;  // one retention pass at a time; taken before mu_
  int64_t removed_since_reclaim_ = 0;
  std::chrono::steady_clock::time_point last_retain_{};
  bool wake_ = false;          // a submit asks for a scheduling cycle now
  uint64_t enqueued_seq_ = 0;  // under mu_ and commit_mu_ (written with both held)

  std::mutex commit_mu_;
  std::condition_variable commit_cv_;
  std::deque<QueuedCommit> commit_queue_;
  uint64_t durable_seq_ = 0;
  bool committing_ = false;
  Status broken_;  // a commit failed: no more changes
  // Sequence ranges (first, last] of commits discarded at a change of leadership: their waiters
  // get Unavailable.
  std::vector<std::pair<uint64_t, uint64_t>> discarded_;

  std::mutex watch_mu_;
  std::condition_variable watch_cv_;
  std::deque<std::pair<uint64_t, v1::Job>> events_;  // durable job changes, in commit order
  uint64_t next_event_ = 1;

  Histogram sched_latency_;
  Histogram commit_latency_;
  Histogram bind_latency_;   // accepted submit -> committed first bind, bound by its first cycle
  Histogram queue_time_;     // accepted submit -> committed first bind, every job
  Histogram commit_batch_;   // changes per store commit (not seconds: a count)
  std::atomic<bool> stop_{false};
  std::condition_variable cv_;
  std::thread loop_;

  // HA. leading_ is true without an election (SQLite). fence_ is written under mu_ and
  // commit_mu_ together, so a committer reading it under commit_mu_ sees its batch's term.
  std::unique_ptr<LeaderElection> election_;
  std::string advertise_;
  std::atomic<bool> leading_{true};
  Revision fence_ = 0;
  Revision follow_from_ = 0;  // mu_: the revision the standby's watch resumes at
  uint64_t follow_gen_ = 0;   // mu_: bumped when the watch must restart from follow_from_
  std::thread follow_;
};

// Whole-GPU split of a request: gpus <= 8 is one task; more must be a multiple of 8.
Status SplitGpus(int32_t gpus, int32_t* num_tasks, int32_t* gpus_per_task);

}  // namespace gpool::control
