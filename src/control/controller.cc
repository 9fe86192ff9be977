#include "control/controller.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace gpool::control {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

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

uint64_t JobNumber(const std::string& id) { return std::stoull(id.substr(1)); }

bool Active(const v1::Job& j) { return j.state() == "pending" || j.state() == "running"; }

const std::vector<double> kLatencyBuckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                             0.05,   0.1,   0.25,   0.5,   1,    2.5};

}  // namespace

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

Controller::Controller(const ControllerOptions& options)
    : options_(options),
      sched_latency_("gpool_scheduling_cycle_seconds", "Time of one scheduling cycle.",
                     kLatencyBuckets),
      commit_latency_("gpool_store_commit_seconds", "Time of one controller store commit.",
                      kLatencyBuckets) {}

Controller::~Controller() { Stop(); }

StatusOr<std::unique_ptr<Controller>> Controller::Open(const ControllerOptions& options) {
  std::unique_ptr<Controller> c(new Controller(options));
  GPOOL_ASSIGN_OR_RETURN(c->store_, OpenStore(options.store_url));
  GPOOL_ASSIGN_OR_RETURN(sched::PolicyConfig pc, sched::ParsePolicyConfig(options.policy_config));
  GPOOL_ASSIGN_OR_RETURN(c->policy_, sched::MakeDefaultPolicy(pc));
  c->ledger_ = sched::UsageLedger(pc.fairshare_half_life_s);
  GPOOL_RETURN_IF_ERROR(c->Recover());
  return c;
}

Status Controller::Recover() {
  std::lock_guard<std::mutex> l(mu_);
  int64_t now = NowMs();
  GPOOL_ASSIGN_OR_RETURN(RangeResult nodes, store_->Range(keys::kNodes, {}));
  for (const KeyValue& kv : nodes.kvs) {
    v1::Node n;
    GPOOL_RETURN_IF_ERROR(FromJson(kv.value, &n, kv.key));
    n.set_last_heartbeat_ms(now);  // a fresh grace period after a restart
    n.set_state("ready");
    nodes_[n.name()] = n;
  }
  GPOOL_ASSIGN_OR_RETURN(RangeResult jobs, store_->Range(keys::kJobs, {}));
  for (const KeyValue& kv : jobs.kvs) {
    v1::Job j;
    GPOOL_RETURN_IF_ERROR(FromJson(kv.value, &j, kv.key));
    next_job_ = std::max(next_job_, JobNumber(j.id()) + 1);
    if (!j.client_request_id().empty()) request_ids_[j.client_request_id()] = j.id();
    jobs_[j.id()] = j;
  }
  GPOOL_LOG_INFO("controller recovered {} nodes, {} jobs", nodes_.size(), jobs_.size());
  return Status::Ok();
}

Status Controller::Persist(const std::vector<const v1::Job*>& jobs,
                           const std::vector<const v1::Node*>& nodes) {
  if (jobs.empty() && nodes.empty()) return Status::Ok();
  TxnRequest t;
  for (const v1::Job* j : jobs) t.Put(keys::Job(j->id()), ToJson(*j));
  for (const v1::Node* n : nodes) {
    v1::Node copy = *n;
    copy.clear_telemetry();  // telemetry is live data, not state
    t.Put(keys::Node(n->name()), ToJson(copy));
  }
  auto start = std::chrono::steady_clock::now();
  GPOOL_ASSIGN_OR_RETURN(TxnResult r, store_->Txn(t));
  commit_latency_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  if (!r.succeeded) return Status::Internal("store commit: unconditional txn failed");
  return Status::Ok();
}

// ---- Nodes ----

StatusOr<v1::RegisterNodeResponse> Controller::RegisterNode(const v1::RegisterNodeRequest& req) {
  const v1::Node& in = req.node();
  GPOOL_RETURN_IF_ERROR(keys::CheckKeyPart("node.name", in.name()));
  if (in.gpus() < 1 || in.gpus() > sched::kMaxGpusPerNode) {
    return Status::InvalidArgument(
        fmt::format("node.gpus: must be 1..{}, got {}", sched::kMaxGpusPerNode, in.gpus()));
  }
  if (in.gpu_model().empty()) return Status::InvalidArgument("node.gpu_model: must not be empty");
  if (in.cpu_milli() < 0) return Status::InvalidArgument("node.cpu_milli: must be >= 0");
  std::lock_guard<std::mutex> l(mu_);
  v1::Node n = in;
  n.set_state("ready");
  n.set_last_heartbeat_ms(NowMs());
  n.set_gpus_allocated(0);
  GPOOL_RETURN_IF_ERROR(Persist({}, {&n}));
  nodes_[n.name()] = n;
  v1::RegisterNodeResponse resp;
  resp.set_heartbeat_interval_ms(options_.heartbeat_interval.count());
  return resp;
}

StatusOr<v1::HeartbeatResponse> Controller::Heartbeat(const v1::HeartbeatRequest& req) {
  if (req.node().empty()) return Status::InvalidArgument("node: must not be empty");
  std::lock_guard<std::mutex> l(mu_);
  auto it = nodes_.find(req.node());
  if (it == nodes_.end()) {
    return Status::NotFound(fmt::format("node {} is not registered", req.node()));
  }
  v1::Node& node = it->second;
  node.set_last_heartbeat_ms(NowMs());
  node.set_state("ready");
  *node.mutable_telemetry() = req.telemetry();

  // Finished tasks: mark them; a gang finishes when all its tasks have.
  std::vector<v1::Job> changed;
  for (const v1::TaskRef& ref : req.finished()) {
    auto jt = jobs_.find(ref.job_id());
    if (jt == jobs_.end() || jt->second.state() != "running") continue;  // cancelled, stale
    v1::Job j = jt->second;
    bool hit = false;
    for (v1::Allocation& a : *j.mutable_allocations()) {
      if (a.task() == ref.task() && a.node() == req.node() && !a.finished()) {
        a.set_finished(true);
        hit = true;
      }
    }
    if (!hit) continue;
    bool all = std::all_of(j.allocations().begin(), j.allocations().end(),
                           [](const v1::Allocation& a) { return a.finished(); });
    if (all) {
      j.set_state("finished");
      j.set_end_ms(NowMs());
    }
    changed.push_back(std::move(j));
  }
  if (!changed.empty()) {
    std::vector<const v1::Job*> ptrs;
    for (const auto& j : changed) ptrs.push_back(&j);
    GPOOL_RETURN_IF_ERROR(Persist(ptrs, {}));
    for (auto& j : changed) jobs_[j.id()] = std::move(j);
  }

  v1::HeartbeatResponse resp;
  for (const auto& [id, j] : jobs_) {
    if (j.state() != "running") continue;
    for (const v1::Allocation& a : j.allocations()) {
      if (a.node() != req.node() || a.finished()) continue;
      v1::TaskAssignment* t = resp.add_tasks();
      t->set_job_id(id);
      t->set_task(a.task());
      t->set_gpu_mask(a.gpu_mask());
      t->set_duration_s(j.duration_s());
      *t->mutable_command() = j.command();
    }
  }
  return resp;
}

void Controller::RefreshNodeStates(int64_t now_ms) {
  std::map<std::string, int32_t> used;
  for (const auto& [id, j] : jobs_) {
    if (j.state() != "running") continue;
    for (const auto& a : j.allocations()) used[a.node()] += __builtin_popcount(a.gpu_mask());
  }
  for (auto& [name, n] : nodes_) {
    n.set_state(now_ms - n.last_heartbeat_ms() > options_.node_timeout.count() ? "down" : "ready");
    n.set_gpus_allocated(used[name]);
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

StatusOr<v1::Job> Controller::Submit(const v1::SubmitJobRequest& req) {
  GPOOL_RETURN_IF_ERROR(keys::CheckKeyPart("tenant", req.tenant()));
  int32_t num_tasks = 0, per_task = 0;
  GPOOL_RETURN_IF_ERROR(SplitGpus(req.gpus(), &num_tasks, &per_task));
  if (req.duration_s() < 0) {
    return Status::InvalidArgument(fmt::format("duration_s: must be >= 0, got {}", req.duration_s()));
  }
  std::lock_guard<std::mutex> l(mu_);
  if (!req.client_request_id().empty()) {
    auto it = request_ids_.find(req.client_request_id());
    if (it != request_ids_.end()) return jobs_.at(it->second);
  }
  v1::Job j;
  j.set_id(fmt::format("j{:08d}", next_job_));
  j.set_client_request_id(req.client_request_id());
  j.set_tenant(req.tenant());
  j.set_priority(req.priority());
  j.set_gpus(req.gpus());
  j.set_num_tasks(num_tasks);
  j.set_gpus_per_task(per_task);
  j.set_duration_s(req.duration_s());
  *j.mutable_command() = req.command();
  j.set_state("pending");
  j.set_submit_ms(NowMs());
  GPOOL_RETURN_IF_ERROR(Persist({&j}, {}));
  ++next_job_;
  if (!j.client_request_id().empty()) request_ids_[j.client_request_id()] = j.id();
  jobs_[j.id()] = j;
  cv_.notify_all();
  return j;
}

StatusOr<v1::Job> Controller::GetJob(const std::string& id) {
  if (id.empty()) return Status::InvalidArgument("id: must not be empty");
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound(fmt::format("job {} not found", id));
  return it->second;
}

v1::ListJobsResponse Controller::ListJobs(const v1::ListJobsRequest& req) {
  std::lock_guard<std::mutex> l(mu_);
  v1::ListJobsResponse r;
  for (const auto& [id, j] : jobs_) {
    if (!req.tenant().empty() && j.tenant() != req.tenant()) continue;
    if (!req.state().empty() && j.state() != req.state()) continue;
    *r.add_jobs() = j;
  }
  return r;
}

StatusOr<v1::Job> Controller::Cancel(const std::string& id) {
  if (id.empty()) return Status::InvalidArgument("id: must not be empty");
  std::lock_guard<std::mutex> l(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return Status::NotFound(fmt::format("job {} not found", id));
  if (!Active(it->second)) return it->second;  // already over: cancel is a no-op
  v1::Job j = it->second;
  j.set_state("cancelled");
  j.set_end_ms(NowMs());
  GPOOL_RETURN_IF_ERROR(Persist({&j}, {}));
  it->second = j;
  return j;
}

v1::ListTenantsResponse Controller::ListTenantsLocked() {
  std::map<std::string, v1::Tenant> t;
  for (const auto& [name, q] : options_.tenant_quotas) {
    t[name].set_name(name);
    t[name].set_quota_gpus(q);
  }
  for (const auto& [id, j] : jobs_) {
    v1::Tenant& x = t[j.tenant()];
    x.set_name(j.tenant());
    if (j.state() == "running") {
      x.set_running_jobs(x.running_jobs() + 1);
      x.set_gpus_in_use(x.gpus_in_use() + j.gpus());
    } else if (j.state() == "pending") {
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

// ---- Scheduling ----

Status Controller::ScheduleOnce() {
  auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> l(mu_);
  int64_t now_ms = NowMs();
  int64_t now_ns = now_ms * 1000000;
  RefreshNodeStates(now_ms);

  sched::ClusterSpec spec;
  std::map<std::string, int> node_index;
  for (const auto& [name, n] : nodes_) {
    int model = sched::FindGpuModel(spec, n.gpu_model());
    if (model < 0) {
      spec.gpu_models.push_back(n.gpu_model());
      model = static_cast<int>(spec.gpu_models.size()) - 1;
    }
    sched::NodeSpec ns;
    ns.name = name;
    ns.gpus = n.gpus();
    ns.gpu_model = model;
    ns.gpu_memory_bytes = n.gpu_memory_bytes();
    ns.cpu_milli = n.cpu_milli();
    ns.memory_bytes = n.memory_bytes();
    node_index[name] = static_cast<int>(spec.nodes.size());
    spec.nodes.push_back(std::move(ns));
  }
  bool any_pending = std::any_of(jobs_.begin(), jobs_.end(),
                                 [](const auto& kv) { return kv.second.state() == "pending"; });
  if (spec.nodes.empty() || !any_pending) {
    sched_latency_.Observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return Status::Ok();
  }
  GPOOL_RETURN_IF_ERROR(sched::BuildUniformTopology({}, &spec));
  GPOOL_ASSIGN_OR_RETURN(sched::ClusterState state, sched::ClusterState::Create(std::move(spec)));

  // Queues: one per tenant, in name order.
  std::vector<sched::QueueSpec> queues;
  std::map<std::string, int> queue_of;
  auto queue = [&](const std::string& tenant) {
    auto it = queue_of.find(tenant);
    if (it != queue_of.end()) return it->second;
    sched::QueueSpec q;
    q.name = tenant;
    q.tenant = tenant;
    auto qt = options_.tenant_quotas.find(tenant);
    q.guaranteed_gpus = qt == options_.tenant_quotas.end() ? 0 : qt->second;
    queues.push_back(q);
    return queue_of[tenant] = static_cast<int>(queues.size()) - 1;
  };
  for (const auto& [name, q] : options_.tenant_quotas) queue(name);

  auto to_spec = [&](const v1::Job& j) {
    sched::JobSpec s;
    s.id = sched::JobId(JobNumber(j.id()));
    s.name = j.id();
    s.tenant = j.tenant();
    s.queue = sched::QueueId(queue(j.tenant()));
    s.priority = j.priority();
    s.num_tasks = j.num_tasks();
    s.task.gpus = j.gpus_per_task();
    s.est_runtime_s = j.duration_s();
    s.submit_ns = j.submit_ms() * 1000000;
    return s;
  };
  std::vector<sched::JobSpec> pending;
  for (const auto& [id, j] : jobs_) {
    if (j.state() == "pending") {
      pending.push_back(to_spec(j));
    } else if (j.state() == "running") {
      sched::Placement p;
      for (const auto& a : j.allocations()) {
        auto ni = node_index.find(a.node());
        if (ni == node_index.end()) {
          return Status::Internal(fmt::format("job {}: allocated on unknown node {}", id, a.node()));
        }
        p.tasks.push_back({.node = sched::NodeId(ni->second), .gpu_mask = a.gpu_mask(),
                           .gpu_milli = 1000, .gpu_memory_bytes = 0});
      }
      Status s = state.Bind(to_spec(j), p, j.start_ms() * 1000000);
      if (!s.ok()) return s.WithContext(fmt::format("re-binding running job {}", id));
    }
  }
  for (const auto& [name, n] : nodes_) {
    if (n.state() == "down") state.SetHealth(sched::NodeId(node_index[name]), sched::Health::kUnhealthy);
  }
  ledger_.Advance(state, now_ns);
  sched::SchedulingInput in{.state = &state, .pending = &pending, .queues = &queues,
                            .usage = &ledger_, .now_ns = now_ns, .seed = 0};
  GPOOL_ASSIGN_OR_RETURN(sched::Decisions d, policy_->Schedule(in));

  auto job_id = [](sched::JobId id) { return fmt::format("j{:08d}", id.value()); };
  std::map<std::string, v1::Job> changed;
  for (const auto& p : d.preemptions) {
    v1::Job j = jobs_.at(job_id(p.victim));
    j.set_state("pending");
    j.clear_allocations();
    j.set_start_ms(0);
    j.set_preemptions(j.preemptions() + 1);
    changed[j.id()] = std::move(j);
  }
  for (const auto& b : d.binds) {
    std::string id = job_id(b.job);
    v1::Job j = changed.count(id) ? changed[id] : jobs_.at(id);
    j.set_state("running");
    j.set_start_ms(now_ms);
    j.clear_allocations();
    for (size_t t = 0; t < b.placement.tasks.size(); ++t) {
      v1::Allocation* a = j.add_allocations();
      a->set_task(static_cast<int32_t>(t));
      a->set_node(state.node(b.placement.tasks[t].node).name);
      a->set_gpu_mask(b.placement.tasks[t].gpu_mask);
    }
    changed[id] = std::move(j);
  }
  std::vector<const v1::Job*> ptrs;
  for (const auto& [id, j] : changed) ptrs.push_back(&j);
  GPOOL_RETURN_IF_ERROR(Persist(ptrs, {}));
  for (auto& [id, j] : changed) jobs_[id] = std::move(j);
  sched_latency_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status::Ok();
}

void Controller::Start() {
  stop_ = false;
  loop_ = std::thread([this] {
    while (!stop_) {
      Status s = ScheduleOnce();
      if (!s.ok()) GPOOL_LOG_ERROR("scheduling cycle: {}", s.ToString());
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, options_.schedule_interval, [this] { return stop_.load(); });
    }
  });
}

void Controller::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

// ---- Observability ----

std::string Controller::MetricsText() {
  std::string out;
  sched_latency_.Render(&out);
  commit_latency_.Render(&out);
  std::lock_guard<std::mutex> l(mu_);
  RefreshNodeStates(NowMs());
  double pending = 0, running = 0;
  for (const auto& [id, j] : jobs_) {
    if (j.state() == "pending") ++pending;
    if (j.state() == "running") ++running;
  }
  double ready = 0, down = 0, alloc = 0, free = 0, down_gpus = 0;
  for (const auto& [name, n] : nodes_) {
    if (n.state() == "down") {
      ++down;
      down_gpus += n.gpus();
    } else {
      ++ready;
      free += n.gpus() - n.gpus_allocated();
    }
    alloc += n.gpus_allocated();
  }
  RenderGauge(&out, "gpool_queue_length", "Pending jobs.", {{"", pending}});
  RenderGauge(&out, "gpool_running_jobs", "Running jobs.", {{"", running}});
  RenderGauge(&out, "gpool_nodes", "Registered nodes by state.",
              {{"state=\"ready\"", ready}, {"state=\"down\"", down}});
  RenderGauge(&out, "gpool_gpus", "GPUs by state (allocated counts GPUs on down nodes too).",
              {{"state=\"allocated\"", alloc}, {"state=\"free\"", free},
               {"state=\"down\"", down_gpus}});
  return out;
}

std::string Controller::StateJson() {
  std::lock_guard<std::mutex> l(mu_);
  RefreshNodeStates(NowMs());
  nlohmann::json out = {{"nodes", nlohmann::json::array()},
                        {"jobs", nlohmann::json::array()},
                        {"tenants", nlohmann::json::array()}};
  for (const auto& [name, n] : nodes_) out["nodes"].push_back(nlohmann::json::parse(ToJson(n)));
  for (const auto& [id, j] : jobs_) out["jobs"].push_back(nlohmann::json::parse(ToJson(j)));
  v1::ListTenantsResponse tenants = ListTenantsLocked();
  for (const auto& t : tenants.tenants()) {
    out["tenants"].push_back(nlohmann::json::parse(ToJson(t)));
  }
  return out.dump();
}

}  // namespace gpool::control
