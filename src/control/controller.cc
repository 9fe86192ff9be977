#include "control/controller.h"

#include <algorithm>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/names.h"
#include "control/agent_timing.h"
#include "control/allocations.h"
#include "control/controller_internal.h"
#include "control/etcd_store.h"
#include "control/records.h"
#include "remote/lease/lease.h"
#include "control/fabric_view.h"
#include "control/tenant_limits.h"

namespace gpool::control {
namespace {

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

Status FromJson(const std::string& json, google::protobuf::Message* m, const std::string& key) {
  auto s = google::protobuf::util::JsonStringToMessage(json, m);
  if (!s.ok()) return Status::Internal(fmt::format("store key {}: {}", key, s.ToString()));
  return Status::Ok();
}

const std::vector<double> kLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                             0.05,   0.1,   0.25,   0.5,   1,    2.5, 10, 60};
const std::vector<double> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
// The control plane's own latency: sub-millisecond buckets (a bind on an idle cluster commits in
// about a millisecond on SQLite).
const std::vector<double> kBindBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01,
                                          0.025,  0.05,    0.1,    0.25,  1,     5};
// Waiting for room: from milliseconds to a day.
const std::vector<double> kQueueBuckets = {0.001, 0.01, 0.1, 1,     10,    60,
                                           300,   900,  3600, 14400, 86400};

constexpr size_t kMaxCommandBytes = 64 * 1024;
constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxEvents = 65536;

// Tenant and node names reach store keys and generated files: one syntax (common/names.h).
Status CheckName(std::string_view what, std::string_view v) { return ValidateName(what, v); }

bool Matches(const v1::WatchJobsRequest& f, const v1::Job& j) {
  return (f.tenant().empty() || f.tenant() == j.tenant()) && (f.id().empty() || f.id() == j.id());
}

}  // namespace

StatusOr<LostNodePolicy> ParseLostNodePolicy(std::string_view s) {
  if (s == "requeue") return LostNodePolicy::kRequeue;
  if (s == "fail") return LostNodePolicy::kFail;
  return Status::InvalidArgument(
      fmt::format("--lost-node-policy: want requeue or fail, got '{}'", s));
}

Status SplitGpus(int32_t gpus, int32_t* num_tasks, int32_t* gpus_per_task) {
  if (gpus < 1) return Status::InvalidArgument(fmt::format("gpus: must be >= 1, got {}", gpus));
  if (gpus <= 8) {
    *num_tasks = 1;
    *gpus_per_task = gpus;
    return Status::Ok();
  }
  if (gpus % 8 != 0) {
    return Status::InvalidArgument(
        fmt::format("gpus: more than 8 GPUs must be a multiple of 8 (8-GPU tasks), got {}", gpus));
  }
  *num_tasks = gpus / 8;
  *gpus_per_task = 8;
  return Status::Ok();
}

Status CheckNodeTimeout(const ControllerOptions& options, bool ha) {
  // After a silent controller (paused, partitioned, restarted) an agent's next heartbeat can be
  // as far away as its call deadline (a call hanging on it) plus, with several controllers, the
  // time to find the new leader (agent_timing.h), plus one heartbeat interval. A node timeout
  // under that declares live nodes lost and requeues their jobs at every change of leader.
  const auto need = kAgentCallTimeout + (ha ? kAgentAvoidSilent : std::chrono::milliseconds(0)) +
                    options.heartbeat_interval;
  if (options.node_timeout >= need) return Status::Ok();
  return Status::InvalidArgument(fmt::format(
      "--node-timeout-ms {}: too short; an agent may wait {} ms on a controller that stopped "
      "answering (its call deadline){} and {} ms between heartbeats, so live nodes would be "
      "declared lost{}; use at least {}",
      options.node_timeout.count(), kAgentCallTimeout.count(),
      ha ? fmt::format(", {} ms more to find the new leader", kAgentAvoidSilent.count()) : "",
      options.heartbeat_interval.count(),
      ha ? " and their jobs requeued at every change of leader" : "", need.count()));
}

Controller::Controller(const ControllerOptions& options)
    : options_(options),
      clock_(options.clock ? options.clock : remote::UnixClock::Default()),
      sched_latency_("gpool_scheduling_cycle_seconds", "Time of one scheduling cycle.",
                     kLatencyBuckets),
      commit_latency_("gpool_store_commit_seconds", "Time of one controller store commit.",
                      kLatencyBuckets),
      bind_latency_("gpool_job_bind_latency_seconds",
                    "From an accepted submit to the committed first bind, for jobs bound by the "
                    "first scheduling cycle that saw them (the control plane's own latency).",
                    kBindBuckets),
      queue_time_("gpool_job_queue_seconds",
                  "From an accepted submit to the committed first bind, every job (waiting for "
                  "room included).",
                  kQueueBuckets),
      commit_batch_("gpool_store_commit_batch_changes",
                    "Controller changes merged into one store commit (a count, not seconds).",
                    kBatchBuckets) {}

Controller::~Controller() { Stop(); }

int64_t Controller::NowMs() const { return clock_->NowNanos() / 1000000; }

StatusOr<std::unique_ptr<Controller>> Controller::Open(const ControllerOptions& options) {
  std::unique_ptr<Controller> c(new Controller(options));
  for (const auto& [tenant, gpus] : options.tenant_quotas) {  // they reach /metrics, partitions
    GPOOL_RETURN_IF_ERROR(ValidateName("quota tenant", tenant));
  }
  if (!options.lease_key.empty() && options.lease_key.size() < remote::kMinLeaseKeyBytes) {
    return Status::InvalidArgument(fmt::format("lease key: at least {} bytes, got {}",
                                               remote::kMinLeaseKeyBytes, options.lease_key.size()));
  }
  GPOOL_RETURN_IF_ERROR(ValidateTenantLimits(options.tenant_quotas, options.tenant_max_gpus));
  if (options.keep_finished_jobs < -1) {
    return Status::InvalidArgument(fmt::format(
        "--keep-finished-jobs: want a count >= 0, or -1 for no count bound; got {}",
        options.keep_finished_jobs));
  }
  if (options.keep_finished_for.count() < 0) {
    return Status::InvalidArgument(fmt::format(
        "--keep-finished-for: want a duration >= 0 (0 = no age bound); got {} ms",
        options.keep_finished_for.count()));
  }
  if (options.archive_max_jobs < 0) {
    return Status::InvalidArgument(fmt::format(
        "--archive-max-jobs: want a count >= 0; got {}", options.archive_max_jobs));
  }
  GPOOL_ASSIGN_OR_RETURN(c->store_, OpenStore(options.store_url));
  // On etcd several controllers may share the store: start as a standby until elected.
  const bool ha = dynamic_cast<EtcdStore*>(c->store_.get()) != nullptr;
  if (ha) c->leading_ = false;
  GPOOL_RETURN_IF_ERROR(CheckNodeTimeout(options, ha));
  GPOOL_ASSIGN_OR_RETURN(sched::PolicyConfig pc, sched::ParsePolicyConfig(options.policy_config));
  c->power_ = NodePower(pc.power, options.node_timeout.count());
  pc.power.enabled = false;  // the controller plans power itself (node_power.h): it knows idle times
  GPOOL_ASSIGN_OR_RETURN(c->policy_, sched::MakeDefaultPolicy(pc));
  c->ledger_ = sched::UsageLedger(pc.fairshare_half_life_s);
  GPOOL_RETURN_IF_ERROR(c->Recover());
  return c;
}

Status Controller::Recover() {
  std::lock_guard<std::mutex> l(mu_);
  return RecoverLocked();
}

Status Controller::RecoverLocked() {
  nodes_.clear();
  node_life_.clear();
  jobs_.clear();
  pending_jobs_ = 0;
  node_jobs_.clear();
  request_ids_.clear();
  next_job_ = 1;
  int64_t now = NowMs();
  GPOOL_ASSIGN_OR_RETURN(RangeResult nodes, store_->Range(keys::kNodes, {}));
  follow_from_ = nodes.revision + 1;  // HA: later changes reach a standby through its watch
  ++follow_gen_;
  for (const KeyValue& kv : nodes.kvs) {
    v1::Node n;
    GPOOL_RETURN_IF_ERROR(FromJson(kv.value, &n, kv.key));
    GPOOL_RETURN_IF_ERROR(ValidateNodeRecord(kv.key, n));  // records.h: refuse, never use
    n.set_last_heartbeat_ms(now);  // a fresh grace period after a restart
    n.set_state("ready");
    nodes_[n.name()] = n;
    power_.OnNodeUp(n.name(), now);
  }
  GPOOL_ASSIGN_OR_RETURN(RangeResult jobs, store_->Range(keys::kJobs, {}));
  for (const KeyValue& kv : jobs.kvs) {
    v1::Job j;
    GPOOL_RETURN_IF_ERROR(FromJson(kv.value, &j, kv.key));
    GPOOL_RETURN_IF_ERROR(ValidateJobRecord(kv.key, j));
    next_job_ = std::max(next_job_, JobNumber(j.id()) + 1);
    if (!j.client_request_id().empty()) request_ids_[j.client_request_id()] = j.id();
    SetJobLocked(std::move(j));
  }
  GPOOL_RETURN_IF_ERROR(RecoverArchiveLocked());
  GPOOL_LOG_INFO("controller recovered {} nodes, {} jobs ({} archived)", nodes_.size(),
                 jobs_.size(), archive_count_);
  return Status::Ok();
}

void Controller::SetJobLocked(v1::Job j) {
  if (j.state() != "pending") {  // bound, or ended before it was: nothing left to time
    submit_ns_.erase(j.id());
    waited_.erase(j.id());
  }
  // node_jobs_ indexes a running job under every node it holds something on: the hosts of its
  // tasks and the nodes lending them GPUs.
  auto it = jobs_.find(j.id());
  if (it != jobs_.end()) {
    for (const std::string& n : JobNodeNames(it->second)) node_jobs_[n].erase(j.id());
    if (it->second.state() == "pending") --pending_jobs_;
  }
  if (j.state() == "pending") ++pending_jobs_;
  if (j.state() == "running") {
    for (const std::string& n : JobNodeNames(j)) node_jobs_[n].insert(j.id());
  }
  std::string id = j.id();
  jobs_[id] = std::move(j);
}

// ---- Commit pipeline ----

StatusOr<uint64_t> Controller::EnqueueLocked(const std::vector<const v1::Job*>& jobs,
                                             const std::vector<const v1::Node*>& nodes) {
  std::lock_guard<std::mutex> cl(commit_mu_);
  if (!broken_.ok()) return broken_;
  if (jobs.empty() && nodes.empty()) return enqueued_seq_;
  QueuedCommit c;
  c.seq = ++enqueued_seq_;
  for (const v1::Job* j : jobs) {
    c.puts.emplace_back(keys::Job(j->id()), ToJson(*j));
    c.jobs.push_back(*j);
  }
  for (const v1::Node* n : nodes) {
    v1::Node copy = *n;
    copy.clear_telemetry();  // telemetry is live data, not state
    c.puts.emplace_back(keys::Node(n->name()), ToJson(copy));
  }
  commit_queue_.push_back(std::move(c));
  return enqueued_seq_;
}

StatusOr<uint64_t> Controller::EnqueueRawLocked(
    std::vector<std::pair<std::string, std::string>> puts, std::vector<std::string> deletes) {
  std::lock_guard<std::mutex> cl(commit_mu_);
  if (!broken_.ok()) return broken_;
  if (puts.empty() && deletes.empty()) return enqueued_seq_;
  QueuedCommit c;
  c.seq = ++enqueued_seq_;
  c.puts = std::move(puts);
  c.deletes = std::move(deletes);
  commit_queue_.push_back(std::move(c));
  return enqueued_seq_;
}

Status Controller::WaitDurable(uint64_t seq) {
  std::unique_lock<std::mutex> cl(commit_mu_);
  auto discarded = [&] {  // HA: queued in a term that ended (DiscardQueuedCommitsLocked)
    for (const auto& [first, last] : discarded_) {
      if (seq > first && seq <= last) return true;
    }
    return false;
  };
  while (durable_seq_ < seq) {
    if (discarded()) break;
    if (!broken_.ok()) return broken_;
    if (committing_) {
      commit_cv_.wait(cl);
      continue;
    }
    if (commit_queue_.empty()) {  // cannot happen: seq > durable_seq_ is queued or committing
      return Status::Internal(fmt::format("commit {} is neither queued nor durable", seq));
    }
    // Become the committer for everything queued so far.
    committing_ = true;
    std::deque<QueuedCommit> batch;
    batch.swap(commit_queue_);
    cl.unlock();
    uint64_t last = batch.back().seq;
    // A later write of a key wins; nullopt: deleted (a QueuedCommit's deletes follow its puts).
    std::map<std::string, std::optional<std::string>> merged;
    for (QueuedCommit& c : batch) {
      for (auto& [k, v] : c.puts) merged[k] = std::move(v);
      for (std::string& k : c.deletes) merged[k] = std::nullopt;
    }
    TxnRequest t;
    for (auto& [k, v] : merged) {
      if (v.has_value()) {
        t.Put(k, std::move(*v));
      } else {
        t.Delete(k);
      }
    }
    if (election_ != nullptr) {
      // Fencing: only while the leader key is still the one this term created.
      std::lock_guard<std::mutex> relock(commit_mu_);
      t.If(Compare::ModRevisionIs(election_->key(), fence_));
    }
    auto start = std::chrono::steady_clock::now();
    StatusOr<TxnResult> r = store_->Txn(t);
    commit_latency_.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    commit_batch_.Observe(static_cast<double>(batch.size()));
    Status s = r.ok() ? (r->succeeded ? Status::Ok()
                                      : Status::Internal("store commit: unconditional txn failed"))
                      : r.status();
    if (!s.ok() && election_ != nullptr) s = FencedCommitFailed(s, r.ok());
    if (s.ok()) {
      std::lock_guard<std::mutex> wl(watch_mu_);
      for (QueuedCommit& c : batch) {
        for (v1::Job& j : c.jobs) events_.emplace_back(next_event_++, std::move(j));
      }
      while (events_.size() > kMaxEvents) events_.pop_front();
    }
    watch_cv_.notify_all();
    cl.lock();
    committing_ = false;
    if (s.ok()) {
      durable_seq_ = last;
    } else {
      if (election_ != nullptr) {
        // HA: FencedCommitFailed stepped down; OnLeadership re-reads the store and clears this.
        broken_ = s.WithContext("controller store commit failed; stepping down");
        GPOOL_LOG_WARN("{}", broken_.ToString());
      } else {
        broken_ = s.WithContext("controller store commit failed; restart the controller");
        GPOOL_LOG_ERROR("{}", broken_.ToString());
      }
    }
    commit_cv_.notify_all();
  }
  if (discarded()) {
    return Status::Unavailable("not the leader: leadership changed before this was committed");
  }
  return Status::Ok();
}

// ---- Nodes ----

StatusOr<v1::RegisterNodeResponse> Controller::RegisterNode(const v1::RegisterNodeRequest& req) {
  const v1::Node& in = req.node();
  GPOOL_RETURN_IF_ERROR(CheckName("node.name", in.name()));
  // 0 GPUs: a CPU-only node (a real agent without GPUs); it registers but gets no GPU jobs.
  if (in.gpus() < 0 || in.gpus() > sched::kMaxGpusPerNode) {
    return Status::InvalidArgument(
        fmt::format("node.gpus: must be 0..{}, got {}", sched::kMaxGpusPerNode, in.gpus()));
  }
  if (in.gpus() > 0 && in.gpu_model().empty()) {
    return Status::InvalidArgument("node.gpu_model: must not be empty");
  }
  if (in.gpu_model().size() > kMaxNameBytes || in.gpu_model().find('|') != std::string::npos) {
    return Status::InvalidArgument("node.gpu_model: at most 128 bytes and no '|'");
  }
  if (in.cpu_milli() < 0) return Status::InvalidArgument("node.cpu_milli: must be >= 0");
  if (!in.gpu_server().empty()) {
    GPOOL_RETURN_IF_ERROR(remote::ValidateGpuAddress(in.gpu_server() + "/0")
                              .WithContext("node.gpu_server"));
  }
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!leading_) return NotLeader();
    auto old = nodes_.find(in.name());
    if (old != nodes_.end() && in.gpus() < old->second.gpus()) {
      for (const std::string& id : node_jobs_[in.name()]) {
        for (const auto& a : jobs_.at(id).allocations()) {
          uint32_t mask = a.node() == in.name() ? a.gpu_mask() : 0;
          for (const auto& r : a.remote()) mask |= r.node() == in.name() ? r.gpu_mask() : 0;
          if (!a.finished() && (mask >> in.gpus()) != 0) {
            return Status::FailedPrecondition(fmt::format(
                "node.gpus: {} re-registers with {} GPUs but job {} holds GPUs above that",
                in.name(), in.gpus(), id));
          }
        }
      }
    }
    v1::Node n = in;
    n.set_state("ready");
    n.set_last_heartbeat_ms(NowMs());
    n.set_gpus_allocated(0);
    NodePower::SetPower(&n, "on", NowMs());  // an agent that registers is running, whatever was recorded
    GPOOL_ASSIGN_OR_RETURN(seq, EnqueueLocked({}, {&n}));
    nodes_[n.name()] = n;
    power_.OnNodeUp(n.name(), NowMs());
  }
  GPOOL_RETURN_IF_ERROR(WaitDurable(seq));
  v1::RegisterNodeResponse resp;
  resp.set_heartbeat_interval_ms(options_.heartbeat_interval.count());
  return resp;
}

std::string Controller::NodeStateLocked(const v1::Node& n, int64_t now_ms) const {
  if (now_ms - n.last_heartbeat_ms() > options_.node_timeout.count()) return "down";
  auto it = node_life_.find(n.name());
  if (it != node_life_.end() && it->second.was_down) {
    int64_t settle = options_.node_settle.count() > 0 ? options_.node_settle.count()
                                                      : options_.node_timeout.count();
    // Settled only once it has heartbeated `settle` after coming back: time alone is not
    // enough (a node that came back and went silent again must not look ready meanwhile).
    if (n.last_heartbeat_ms() - it->second.back_ms < settle) return "settling";
  }
  return "ready";
}

StatusOr<v1::HeartbeatResponse> Controller::Heartbeat(const v1::HeartbeatRequest& req) {
  if (req.node().empty()) return Status::InvalidArgument("node: must not be empty");
  v1::HeartbeatResponse resp;
  uint64_t seq = 0;
  std::vector<std::string> fail_log;  // logged once committed
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!leading_) return NotLeader();
    auto it = nodes_.find(req.node());
    if (it == nodes_.end()) {
      return Status::NotFound(fmt::format("node {} is not registered", req.node()));
    }
    v1::Node& node = it->second;
    int64_t now = NowMs();
    NodeLife& life = node_life_[node.name()];
    // A node switched off on purpose (node_power.h) was not lost: no settling when it is back.
    if ((NodeStateLocked(node, now) == "down" || node.state() == "down") &&
        NodePower::SchedState(node) == sched::PowerState::kOn) {
      life.was_down = true;  // back after a silence: settle before taking work again
      life.back_ms = now;
    }
    node.set_last_heartbeat_ms(now);
    node.set_state(NodeStateLocked(node, now));
    if (node.state() == "ready") life.was_down = false;
    *node.mutable_telemetry() = req.telemetry();
    node.set_cpu_utilization(req.cpu_utilization());
    node.set_memory_available_bytes(req.memory_available_bytes());
    std::vector<const v1::Node*> node_changed;
    if (power_.OnHeartbeat(&node, req.powered_off(), now)) node_changed.push_back(&node);

    // Finished tasks: mark them; a gang finishes when all its tasks have.
    std::vector<v1::Job> changed;
    for (const v1::TaskRef& ref : req.finished()) {
      auto jt = jobs_.find(ref.job_id());
      if (jt == jobs_.end() || jt->second.state() != "running") continue;  // cancelled, stale
      if (ref.attempt() != jt->second.attempt()) continue;  // about an earlier placement
      v1::Job j = jt->second;
      bool hit = false;
      for (v1::Allocation& a : *j.mutable_allocations()) {
        if (a.task() == ref.task() && a.node() == req.node() && !a.finished()) {
          a.set_finished(true);
          a.set_exit_code(ref.signal() != 0 ? 128 + ref.signal() : ref.exit_code());
          hit = true;
        }
      }
      if (!hit) continue;
      bool all = std::all_of(j.allocations().begin(), j.allocations().end(),
                             [](const v1::Allocation& a) { return a.finished(); });
      if (ref.exit_code() != 0 || ref.signal() != 0) {
        // A failed task fails its whole gang at once: the other tasks vanish from their nodes'
        // heartbeat answers and their agents stop them.
        j.set_state("failed");
        j.set_end_ms(now);
        j.set_message(ref.signal() != 0
                          ? fmt::format("task {} on {} killed by signal {}", ref.task(), req.node(), ref.signal())
                          : fmt::format("task {} on {} exited with {}", ref.task(), req.node(), ref.exit_code()));
      } else if (all) {
        j.set_state("finished");
        j.set_end_ms(now);
      }
      SetJobLocked(j);
      changed.push_back(std::move(j));
    }
    // Tasks this node hosts whose GPU servers cannot serve them (a lending node that now
    // advertises none): failed here, never started on GPUs they were not placed on.
    for (v1::Job& j : FailUnservedLocked(node_jobs_[req.node()], now, &fail_log)) {
      changed.push_back(std::move(j));
    }
    std::vector<const v1::Job*> ptrs;
    for (const auto& j : changed) ptrs.push_back(&j);
    GPOOL_ASSIGN_OR_RETURN(seq, EnqueueLocked(ptrs, node_changed));
    AddAssignmentsLocked(node, &resp);
    power_.FillHeartbeatResponse(node, nodes_, &resp);
  }
  // The task list may include binds still being committed: answer once they are durable.
  GPOOL_RETURN_IF_ERROR(WaitDurable(seq));
  for (const std::string& line : fail_log) GPOOL_LOG_WARN("{}", line);
  return resp;
}

void Controller::RefreshNodeStates(int64_t now_ms) {
  for (auto& [name, n] : nodes_) {
    std::string st = NodeStateLocked(n, now_ms);
    if (NodePower::SchedState(n) != sched::PowerState::kOn) {
      // Switched off on purpose (node_power.h): silence is expected, not a loss.
    } else if (st == "down") {
      NodeLife& life = node_life_[name];
      life.was_down = true;
    } else if (st == "ready") {
      node_life_[name].was_down = false;
    }
    n.set_state(st);
    // Lent GPUs count on the node that lends them (remote attachment).
    int32_t used = 0;
    const std::set<std::string>& on_node = node_jobs_[name];
    for (const std::string& id : on_node) {
      for (const auto& a : jobs_.at(id).allocations()) used += GpusOn(a, name);
    }
    n.set_gpus_allocated(used);
    // Busy: it hosts a task (a CPU-only host of a remote-attached task too) or lends GPUs.
    power_.Refresh(&n, !on_node.empty(), now_ms);  // powered-off nodes show their power state
  }
}

v1::ListNodesResponse Controller::ListNodes() {
  std::lock_guard<std::mutex> l(mu_);
  RefreshNodeStates(NowMs());
  v1::ListNodesResponse r;
  for (const auto& [name, n] : nodes_) *r.add_nodes() = n;
  return r;
}

// ---- Jobs ----

StatusOr<v1::Job> Controller::NewJobFromRequest(const v1::SubmitJobRequest& req) const {
  GPOOL_RETURN_IF_ERROR(CheckName("tenant", req.tenant()));
  if (req.client_request_id().size() > kMaxNameBytes) {
    return Status::InvalidArgument(fmt::format("client_request_id: at most {} bytes, got {}",
                                               kMaxNameBytes, req.client_request_id().size()));
  }
  v1::Job j;
  int32_t num_tasks = 0, per_task = 0;
  if (req.gpu_milli() < 0 || req.gpu_milli() > 1000) {
    return Status::InvalidArgument(
        fmt::format("gpu_milli: must be 0 (whole GPUs) or 1..1000, got {}", req.gpu_milli()));
  }
  if (req.gpu_milli() > 0 && req.gpu_milli() < 1000) {
    if (req.gpus() > 1 || req.gpus() < 0) {
      return Status::InvalidArgument(fmt::format(
          "gpus: a fractional request (gpu_milli {}) takes a share of one GPU; gpus must be 1, "
          "got {}", req.gpu_milli(), req.gpus()));
    }
    num_tasks = 1;
    per_task = 1;
    j.set_gpu_milli(req.gpu_milli());
    j.set_gpu_memory_bytes(req.gpu_memory_bytes());
  } else {
    GPOOL_RETURN_IF_ERROR(SplitGpus(req.gpus(), &num_tasks, &per_task));
    if (req.gpu_memory_bytes() != 0) {
      return Status::InvalidArgument(
          "gpu_memory_bytes: only for a fractional request (gpu_milli 1..999); whole GPUs come "
          "with all their memory");
    }
  }
  if (!(req.duration_s() >= 0) || req.duration_s() > 1e9) {
    return Status::InvalidArgument(
        fmt::format("duration_s: must be 0..1e9 seconds, got {}", req.duration_s()));
  }
  if (!(req.min_runtime_s() >= 0) || req.min_runtime_s() > 1e9) {
    return Status::InvalidArgument(
        fmt::format("min_runtime_s: must be 0..1e9 seconds, got {}", req.min_runtime_s()));
  }
  if (req.priority() < -1000 || req.priority() > 1000) {
    return Status::InvalidArgument(
        fmt::format("priority: must be -1000..1000, got {}", req.priority()));
  }
  size_t command_bytes = 0;
  for (int i = 0; i < req.command_size(); ++i) {
    command_bytes += req.command(i).size();
    if (size_t nul = req.command(i).find('\0'); nul != std::string::npos) {  // argv cannot hold it
      return Status::InvalidArgument(
          fmt::format("command[{}]: a NUL byte at position {}", i, nul));
    }
  }
  if (command_bytes > kMaxCommandBytes) {
    return Status::InvalidArgument(
        fmt::format("command: at most {} bytes, got {}", kMaxCommandBytes, command_bytes));
  }
  std::string locality = req.locality().empty() ? "any" : req.locality();
  auto level = sched::ParseLevel(locality);
  if (!level.ok()) return level.status().WithContext("locality");
  if (req.locality_required() && *level == sched::Level::kNode && num_tasks > 1) {
    return Status::InvalidArgument(fmt::format(
        "locality: a gang of {} tasks cannot all be on one node (required node locality)",
        num_tasks));
  }
  std::string kind = req.kind().empty() ? "training" : req.kind();
  auto k = sched::ParseJobKind(kind);
  if (!k.ok()) return k.status().WithContext("kind");
  if (req.gpu_model().size() > 1024) return Status::InvalidArgument("gpu_model: too long");
  // Per-task CPU and host memory, placed against the nodes' (sched::TaskRequest).
  if (req.cpu_milli() < 0 || req.cpu_milli() > (int64_t{1} << 40)) {
    return Status::InvalidArgument(
        fmt::format("cpu_milli: must be 0 (not requested) or a positive milli-CPU count, got {}",
                    req.cpu_milli()));
  }
  if (req.memory_bytes() > (uint64_t{1} << 60)) {
    return Status::InvalidArgument(
        fmt::format("memory_bytes: at most 2^60 bytes, got {}", req.memory_bytes()));
  }
  j.set_cpu_milli(req.cpu_milli());
  j.set_memory_bytes(req.memory_bytes());

  j.set_client_request_id(req.client_request_id());
  j.set_tenant(req.tenant());
  j.set_priority(req.priority());
  j.set_gpus(j.gpu_milli() > 0 ? 1 : req.gpus());
  j.set_num_tasks(num_tasks);
  j.set_gpus_per_task(per_task);
  j.set_duration_s(req.duration_s());
  *j.mutable_command() = req.command();
  j.set_gpu_model(req.gpu_model());
  j.set_locality(std::string(sched::LevelName(*level)) == "fabric" ? "any"
                                                                    : std::string(locality));
  j.set_locality_required(req.locality_required());
  j.set_preemptible(req.has_preemptible() ? req.preemptible() : true);
  j.set_min_runtime_s(req.min_runtime_s());
  j.set_kind(std::string(sched::JobKindName(*k)));
  GPOOL_RETURN_IF_ERROR(SetGpuSource(req, &j));
  j.set_state("pending");
  // More than the tenant may ever hold could never start: refused now, not left pending.
  GPOOL_RETURN_IF_ERROR(CheckTenantCap(j, options_.tenant_max_gpus));
  return j;
}

// Inline bind. A submit that finds no other job pending, the store healthy and no commit queued
// or in flight (InlineBindAllowedLocked) runs one scheduling cycle itself, under mu_, right
// after adding the job: CycleLocked, the very cycle the loop runs, with the same pure policy
// (src/sched), quotas, caps, priority, fair share, gang and topology rules. Its queue holds only
// the new job, so nothing pending ranks ahead of it, it overtakes no one, and no reservation
// exists (reservations are made each cycle for blocked pending jobs, and there are none). The
// job's record and everything that cycle decided (the bind, a preemption it made room by, a
// lost node it found, a wait reason when the job does not fit) commit in ONE store transaction
// (the submit's, through the same group-commit pipeline and, on etcd, the same leader fence);
// the reply is the job as committed, so a bound job comes back bound. Otherwise the job is
// queued as before and the loop is woken; its cycle decides. So an inline bind is exactly the
// decision the loop's next cycle would have made had it run at this instant. The idle-commit
// condition keeps bursts cheap: while submits arrive faster than the store commits, they queue
// and one loop cycle places them all (a cycle per submit would cost O(running jobs) each under
// mu_). Bind latency: an inline bind counts in gpool_job_bind_latency_seconds from the
// accepted submit to its (one) commit; a job the inline cycle could not place waited a cycle,
// so its later bind counts as queueing time only.
StatusOr<v1::Job> Controller::Submit(const v1::SubmitJobRequest& req) {
  GPOOL_ASSIGN_OR_RETURN(v1::Job j, NewJobFromRequest(req));
  uint64_t seq = 0;
  bool inline_cycle = false;
  bool wake = options_.schedule_on_submit;  // the loop's cycle is to place the job
  Cycle cycle;
  if (!req.client_request_id().empty()) {
    // Idempotent submit across retention: a request id whose job left the live state answers
    // that job from the archive, never a second job. Looked up outside mu_ (a store read); the
    // check under mu_ below catches a concurrent first submit. A job leaves memory only after
    // its archive record is durable (RetainOnce), so it is always in one of the two places.
    bool archived = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      archived = archive_used_ && request_ids_.count(req.client_request_id()) == 0;
    }
    if (archived) {
      GPOOL_ASSIGN_OR_RETURN(std::optional<v1::Job> old, ArchivedRequest(req.client_request_id()));
      if (old.has_value()) return *old;
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!leading_) return NotLeader();
    if (!req.gpu_model().empty()) {
      // Every model named must exist among the registered nodes, so a typo fails now.
      sched::ClusterSpec models;
      for (const auto& [name, n] : nodes_) {
        if (sched::FindGpuModel(models, n.gpu_model()) < 0) models.gpu_models.push_back(n.gpu_model());
      }
      auto mask = sched::ParseGpuModels(models, req.gpu_model());
      if (!mask.ok()) {
        std::string known;
        for (const auto& m : models.gpu_models) known += (known.empty() ? "" : ", ") + m;
        return Status::InvalidArgument(fmt::format("gpu_model: {} (registered models: {})",
                                                   mask.status().message(),
                                                   known.empty() ? "none" : known));
      }
    }
    auto dup = req.client_request_id().empty() ? request_ids_.end()
                                                : request_ids_.find(req.client_request_id());
    if (dup != request_ids_.end()) {
      j = jobs_.at(dup->second);
      seq = LastEnqueuedLocked();  // the first submit may still be committing
    } else {
      j.set_id(JobIdOf(next_job_));
      const int64_t now_ns = clock_->NowNanos();
      j.set_submit_ms(now_ns / 1000000);
      inline_cycle = InlineBindAllowedLocked();  // asked before this job counts as pending
      if (!inline_cycle) {
        GPOOL_ASSIGN_OR_RETURN(seq, EnqueueLocked({&j}, {}));
      }
      submit_ns_[j.id()] = now_ns;
      ++next_job_;
      if (!j.client_request_id().empty()) request_ids_[j.client_request_id()] = j.id();
      SetJobLocked(j);
      if (inline_cycle) {
        // The cycle sees the store healthy and idle (InlineBindAllowedLocked), and nothing can
        // start a commit while mu_ is held, so the enqueue below cannot fail.
        if (Status cs = CycleLocked(&cycle); !cs.ok()) {
          // What it changed before failing is committed below; the job stays queued.
          GPOOL_LOG_ERROR("scheduling cycle at submit of {}: {}", j.id(), cs.ToString());
        } else {
          wake = false;  // this was the cycle: bound, or it waits for room like any other
        }
        cycle.changed.try_emplace(j.id(), j);  // the submit itself, if the cycle left it as is
        j = cycle.changed.at(j.id());          // as committed: bound, or pending with a reason
        std::vector<const v1::Job*> ptrs;
        for (const auto& [id, cj] : cycle.changed) ptrs.push_back(&cj);
        GPOOL_ASSIGN_OR_RETURN(seq, EnqueueLocked(ptrs, cycle.power_changed));
      }
    }
  }
  if (wake) {
    {
      std::lock_guard<std::mutex> l(mu_);
      wake_ = true;
    }
    cv_.notify_all();
  }
  GPOOL_RETURN_IF_ERROR(WaitDurable(seq));
  if (inline_cycle) CycleCommitted(cycle);
  return j;
}

bool Controller::InlineBindAllowedLocked() {
  if (!options_.bind_at_submit || !options_.schedule_on_submit || pending_jobs_ > 0 ||
      nodes_.empty()) {
    return false;
  }
  std::lock_guard<std::mutex> cl(commit_mu_);
  return broken_.ok() && commit_queue_.empty() && !committing_;
}

StatusOr<v1::Job> Controller::GetJob(const std::string& id) {
  if (id.empty()) return Status::InvalidArgument("id: must not be empty");
  v1::Job j;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      // Retention moved it to the archive (durably, before it left memory), or it never was.
      if (!archive_used_) return Status::NotFound(fmt::format("job {} not found", id));
    } else {
      j = it->second;
    }
    seq = LastEnqueuedLocked();
  }
  if (j.id().empty()) {
    GPOOL_RETURN_IF_ERROR(keys::CheckKeyPart("id", id));
    GPOOL_ASSIGN_OR_RETURN(std::optional<v1::Job> old, ArchivedJob(id));
    if (!old.has_value()) return Status::NotFound(fmt::format("job {} not found", id));
    return *old;
  }
  GPOOL_RETURN_IF_ERROR(WaitDurable(seq));
  return j;
}

v1::ListJobsResponse Controller::ListJobs(const v1::ListJobsRequest& req) {
  v1::ListJobsResponse r;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, j] : jobs_) {
      if (!req.tenant().empty() && j.tenant() != req.tenant()) continue;
      if (!req.state().empty() && j.state() != req.state()) continue;
      *r.add_jobs() = j;
    }
    seq = LastEnqueuedLocked();
  }
  (void)WaitDurable(seq);  // on a broken store, what memory holds is the best answer
  return r;
}

StatusOr<v1::Job> Controller::Cancel(const std::string& id) {
  if (id.empty()) return Status::InvalidArgument("id: must not be empty");
  v1::Job j;
  uint64_t seq = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!leading_) return NotLeader();
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      if (!archive_used_) return Status::NotFound(fmt::format("job {} not found", id));
      j.clear_id();  // maybe archived: over, so cancel is a no-op (below, outside mu_)
    } else if (j = it->second; !Active(j)) {
      seq = LastEnqueuedLocked();  // already over: cancel is a no-op
    } else {
      j.set_state("cancelled");
      j.set_end_ms(NowMs());
      j.clear_pending_reason();
      GPOOL_ASSIGN_OR_RETURN(seq, EnqueueLocked({&j}, {}));
      SetJobLocked(j);
    }
  }
  if (j.id().empty()) return GetJob(id);  // the archived job, or NotFound
  GPOOL_RETURN_IF_ERROR(WaitDurable(seq));
  return j;
}

v1::ListTenantsResponse Controller::ListTenantsLocked() {
  std::map<std::string, v1::Tenant> t;
  auto row = [&](const std::string& name) -> v1::Tenant& {
    auto [it, added] = t.try_emplace(name);
    if (added) {
      it->second.set_name(name);
      auto cap = options_.tenant_max_gpus.find(name);
      it->second.set_max_gpus(cap == options_.tenant_max_gpus.end() ? -1 : cap->second);
    }
    return it->second;
  };
  for (const auto& [name, q] : options_.tenant_quotas) row(name).set_quota_gpus(q);
  for (const auto& [name, cap] : options_.tenant_max_gpus) row(name);
  for (const auto& [id, j] : jobs_) {
    if (!Active(j)) continue;
    v1::Tenant& x = row(j.tenant());
    if (j.state() == "running") {
      x.set_running_jobs(x.running_jobs() + 1);
      x.set_gpus_in_use(x.gpus_in_use() + j.gpus());
    } else {
      x.set_pending_jobs(x.pending_jobs() + 1);
    }
  }
  v1::ListTenantsResponse r;
  for (auto& [name, x] : t) *r.add_tenants() = x;
  return r;
}

v1::ListTenantsResponse Controller::ListTenants() {
  std::lock_guard<std::mutex> l(mu_);
  return ListTenantsLocked();
}

// ---- Watch ----

std::vector<v1::Job> Controller::SnapshotJobs(const v1::WatchJobsRequest& filter,
                                              uint64_t* cursor) {
  std::vector<v1::Job> out;
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [id, j] : jobs_) {
    if (Matches(filter, j)) out.push_back(j);
  }
  std::lock_guard<std::mutex> wl(watch_mu_);
  *cursor = next_event_;  // everything published before is in memory, hence in the snapshot
  return out;
}

StatusOr<std::vector<v1::Job>> Controller::WaitJobEvents(const v1::WatchJobsRequest& filter,
                                                         uint64_t* cursor,
                                                         std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> wl(watch_mu_);
  watch_cv_.wait_for(wl, timeout, [&] { return next_event_ > *cursor || stop_.load(); });
  std::vector<v1::Job> out;
  if (next_event_ <= *cursor) return out;
  if (events_.empty() || events_.front().first > *cursor) {
    return Status::FailedPrecondition("watch: fell behind the kept job history");
  }
  size_t start = *cursor - events_.front().first;
  for (size_t i = start; i < events_.size(); ++i) {
    if (Matches(filter, events_[i].second)) out.push_back(events_[i].second);
  }
  *cursor = next_event_;
  return out;
}

void Controller::Start() {
  stop_ = false;
  if (auto* etcd = dynamic_cast<EtcdStore*>(store_.get()); etcd != nullptr && election_ == nullptr) {
    LeaderOptions lo;
    lo.id = advertise_;
    lo.ttl_s = options_.lease_ttl_s;
    election_ = std::make_unique<LeaderElection>(
        etcd, lo, [this](bool leading, Revision fence) { OnLeadership(leading, fence); });
    follow_ = std::thread([this] { FollowLoop(); });
    election_->Start();
  }
  loop_ = std::thread([this] {
    while (!stop_) {
      Status s = ScheduleOnce();
      if (!s.ok()) GPOOL_LOG_ERROR("scheduling cycle: {}", s.ToString());
      if (auto now = std::chrono::steady_clock::now();
          now - last_retain_ >= options_.retention_interval) {
        last_retain_ = now;
        if (Status r = RetainOnce(); !r.ok()) GPOOL_LOG_ERROR("retention: {}", r.ToString());
      }
      std::unique_lock<std::mutex> l(mu_);
      // A submit wakes the loop at once (wake_), so a job need not wait for the interval.
      cv_.wait_for(l, options_.schedule_interval, [this] { return stop_.load() || wake_; });
      wake_ = false;
    }
  });
}

void Controller::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  watch_cv_.notify_all();
  if (loop_.joinable()) loop_.join();
  if (election_ != nullptr) election_->Stop();  // resigns: a standby takes over at once
  if (follow_.joinable()) follow_.join();
}

// ---- Observability ----

std::string Controller::MetricsText() {
  std::string out;
  sched_latency_.Render(&out);
  bind_latency_.Render(&out);
  queue_time_.Render(&out);
  commit_latency_.Render(&out);
  commit_batch_.Render(&out);
  RenderGauge(&out, "gpool_leader", "1 when this controller leads (always, on SQLite).",
              {{"", leading_ ? 1.0 : 0.0}});
  std::lock_guard<std::mutex> l(mu_);
  RefreshNodeStates(NowMs());
  std::map<std::string, double> by_state;
  std::map<std::string, double> queued, gpus_tenant;
  for (const char* s : {"pending", "running", "finished", "cancelled", "failed"}) by_state[s] = 0;
  for (const auto& [name, q] : options_.tenant_quotas) queued[name] = gpus_tenant[name] = 0;
  for (const auto& [id, j] : jobs_) {
    ++by_state[j.state()];
    if (j.state() == "pending") ++queued[j.tenant()];
    if (j.state() == "running") {
      double g = j.gpu_milli() > 0 ? j.gpu_milli() / 1000.0 : j.gpus();
      gpus_tenant[j.tenant()] += g;
      queued.try_emplace(j.tenant(), 0);
    }
  }
  double ready = 0, down = 0, settling = 0, off = 0, alloc = 0, free = 0, down_gpus = 0;
  double resume_failed = 0;
  for (const auto& [name, n] : nodes_) {
    if (n.power() == NodePower::kResumeFailed) {
      ++resume_failed;
    } else if (NodePower::SchedState(n) != sched::PowerState::kOn) {
      ++off;  // suspending, off or resuming (node_power.h)
    } else if (n.state() == "down") {
      ++down;
      down_gpus += n.gpus();
    } else if (n.state() == "settling") {
      ++settling;
      down_gpus += n.gpus() - n.gpus_allocated();
    } else {
      ++ready;
      free += n.gpus() - n.gpus_allocated();
    }
    alloc += n.gpus_allocated();
  }
  auto labelled = [](const char* label, const std::map<std::string, double>& m) {
    std::vector<std::pair<std::string, double>> v;
    for (const auto& [k, x] : m) v.emplace_back(PromLabel(label, k), x);  // escaped
    return v;
  };
  RenderGauge(&out, "gpool_queue_length", "Pending jobs.", {{"", by_state["pending"]}});
  RenderGauge(&out, "gpool_tenant_queue_length", "Pending jobs by tenant.",
              labelled("tenant", queued));
  RenderGauge(&out, "gpool_running_jobs", "Running jobs.", {{"", by_state["running"]}});
  RenderGauge(&out, "gpool_jobs", "Jobs by state.", labelled("state", by_state));
  RenderGauge(&out, "gpool_nodes", "Registered nodes by state.",
              {{"state=\"ready\"", ready}, {"state=\"settling\"", settling},
               {"state=\"down\"", down}, {"state=\"off\"", off},
               {"state=\"resume-failed\"", resume_failed}});
  RenderGauge(&out, "gpool_gpus",
              "GPUs by state (allocated counts GPUs on down nodes too; down counts unallocated "
              "GPUs of settling nodes).",
              {{"state=\"allocated\"", alloc}, {"state=\"free\"", free},
               {"state=\"down\"", down_gpus}});
  RenderGauge(&out, "gpool_tenant_gpus", "GPUs in use by tenant (fractions count as fractions).",
              labelled("tenant", gpus_tenant));
  return out;
}

std::string Controller::StateJson(const std::string& tenant) {
  std::lock_guard<std::mutex> l(mu_);
  RefreshNodeStates(NowMs());
  nlohmann::json out = {{"nodes", nlohmann::json::array()},
                        {"jobs", nlohmann::json::array()},
                        {"tenants", nlohmann::json::array()}};
  for (const auto& [name, n] : nodes_) out["nodes"].push_back(nlohmann::json::parse(ToJson(n)));
  for (const auto& [id, j] : jobs_) {
    if (tenant.empty() || j.tenant() == tenant) out["jobs"].push_back(nlohmann::json::parse(ToJson(j)));
  }
  v1::ListTenantsResponse tenants = ListTenantsLocked();
  for (const auto& t : tenants.tenants()) {
    if (!tenant.empty() && t.name() != tenant) continue;
    out["tenants"].push_back(nlohmann::json::parse(ToJson(t)));
  }
  return out.dump();
}

}  // namespace gpool::control
