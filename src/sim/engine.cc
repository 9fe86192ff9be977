#include "sim/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>

#include <fmt/format.h>

#include "sched/cluster.h"
#include "sched/fairshare.h"
#include "sched/placement.h"
#include "sched/remote_placement.h"
#include "sim/adapter.h"
#include "sim/baselines.h"
#include "sim/load_view.h"
#include "sim/perf_model.h"

namespace gpool::sim {

namespace {

// kIdleCheck and kJobReady only with EngineOptions::idle_power_off_s: a node's idle timeout, and
// a job's start once the nodes the engine resumed for it are up.
enum class Ev : uint8_t { kArrival, kFinish, kBooted, kShutdown, kTick, kIdleCheck, kJobReady };

// The engine's own view of a node's power under idle power-off (the policy's stays kOn).
enum class HostPower : uint8_t { kOn, kSuspending, kOff, kBooting };

struct Event {
  double t;
  uint64_t seq;
  Ev type;
  uint32_t id;     // job or node
  uint32_t epoch;  // job run / node power epoch; stale events are ignored
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

enum class JobState : uint8_t { kNotArrived, kPending, kRunning, kDone, kRejected };

struct JobRun {
  JobState st = JobState::kNotArrived;
  double remaining_s = 0;  // base (ideal-placement) seconds of work left
  double start_s = 0;      // start of the current run
  double slowdown = 1;
  uint32_t epoch = 0;
  bool boot_wait = false;  // bound, waiting for nodes the engine resumes (idle power-off)
  std::vector<uint32_t> hosts;
};

int64_t ToNs(double s) { return static_cast<int64_t>(std::llround(s * 1e9)); }

class Engine {
 public:
  Engine(const SimCluster& c, const Workload& w, const sched::Policy& p, const EngineOptions& o)
      : cluster_(c), work_(w), policy_(p), opt_(o), net_(c) {}

  StatusOr<RunResult> Run();

 private:
  void Push(double t, Ev type, uint32_t id, uint32_t epoch = 0) {
    events_.push({t, seq_++, type, id, epoch});
  }
  double PowerNow(const sched::ClusterState& s) const {
    const PowerModel& pm = opt_.power;
    // GPUs held by jobs waiting for a boot draw idle power until the job starts.
    return on_idle_w_ +
           static_cast<double>(s.used_milli() - boot_wait_milli_) / 1000.0 * (pm.gpu_busy_w - pm.gpu_idle_w) +
           static_cast<double>(cluster_.hosts.size() - on_count_) * pm.host_off_w;
  }
  double HostIdleW(size_t h) const {
    return opt_.power.host_idle_w + cluster_.hosts[h].gpus * opt_.power.gpu_idle_w;
  }
  void AddPending(uint32_t id) {
    pos_[id] = static_cast<int32_t>(pending_.size());
    pending_.push_back(specs_[id]);
    runs_[id].st = JobState::kPending;
  }
  void RemovePending(uint32_t id) {
    int32_t p = pos_[id];
    uint32_t last = static_cast<uint32_t>(pending_.back().id.value());
    if (static_cast<size_t>(p) != pending_.size() - 1) {
      pending_[p] = std::move(pending_.back());
      pos_[last] = p;
    }
    pending_.pop_back();
    pos_[id] = -1;
  }
  Status Cycle(sched::ClusterState& state, double t);
  Status StopRun(sched::ClusterState& state, uint32_t id, double t);
  // Idle power-off (EngineOptions::idle_power_off_s): arms node n's idle timeout when it is idle.
  void ArmIdleCheck(const sched::ClusterState& state, uint32_t n, double t) {
    if (!managed_power_ || !state.idle(sched::NodeId(n))) return;
    Push(t + opt_.idle_power_off_s, Ev::kIdleCheck, n, ++idle_epoch_[n]);
  }
  // ...and the time a job bound now on `hosts` can start: resumes those that are off or going
  // down, returns when the last is up (t when all are on).
  double ResumeForJob(const std::vector<uint32_t>& hosts, double t);

  const SimCluster& cluster_;
  const Workload& work_;
  const sched::Policy& policy_;
  const EngineOptions& opt_;
  NetModel net_;
  TenantQueues queues_;
  std::vector<sched::JobSpec> specs_;
  std::vector<JobRun> runs_;
  std::vector<sched::JobSpec> pending_;
  std::vector<int32_t> pos_;  // job id -> index in pending_, -1 when not pending
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  std::unique_ptr<sched::UsageLedger> ledger_;
  std::vector<uint32_t> node_epoch_;
  std::vector<uint8_t> node_on_;
  size_t on_count_ = 0;
  int64_t resuming_ = 0;
  double on_idle_w_ = 0;
  std::vector<int64_t> tenant_used_milli_;
  RunResult r_;
  int64_t finished_ = 0;
  bool bound_this_cycle_ = false;
  bool load_dirty_ = true;  // the fabric load view is stale
  bool blocked_ = false;    // the last cycle left jobs waiting and no capacity came back since
  int64_t running_jobs_ = 0;
  // Idle power-off by the engine (EngineOptions::idle_power_off_s > 0).
  bool managed_power_ = false;
  std::vector<HostPower> host_power_;
  std::vector<double> ready_at_;       // kBooting: when the node is up
  std::vector<uint32_t> idle_epoch_;   // stale idle checks are ignored
  int64_t boot_wait_milli_ = 0;        // GPU milli held by jobs waiting for a boot
};

double Engine::ResumeForJob(const std::vector<uint32_t>& hosts, double t) {
  double ready = t;
  for (uint32_t h : hosts) {
    ++idle_epoch_[h];  // busy now: its idle timeout no longer applies
    switch (host_power_[h]) {
      case HostPower::kOn:
        break;
      case HostPower::kBooting:
        ready = std::max(ready, ready_at_[h]);
        break;
      case HostPower::kSuspending:  // cancelled: counted as a full reboot, to be safe
      case HostPower::kOff:
        if (!node_on_[h]) {
          node_on_[h] = 1;
          ++on_count_;
          on_idle_w_ += HostIdleW(h);
        }
        host_power_[h] = HostPower::kBooting;
        ready_at_[h] = t + opt_.idle_power_boot_s;
        Push(ready_at_[h], Ev::kBooted, h, ++node_epoch_[h]);
        ready = std::max(ready, ready_at_[h]);
        break;
    }
  }
  return ready;
}

Status Engine::StopRun(sched::ClusterState& state, uint32_t id, double t) {
  JobRun& run = runs_[id];
  GPOOL_RETURN_IF_ERROR(state.Release(sched::JobId(id), ToNs(t)));
  net_.AddRing(run.hosts, -1);
  load_dirty_ |= run.hosts.size() > 1;
  tenant_used_milli_[r_.jobs[id].tenant] -= specs_[id].total_milli_gpus();
  if (run.boot_wait) {
    boot_wait_milli_ -= specs_[id].total_milli_gpus();
    run.boot_wait = false;
  }
  --running_jobs_;
  // A job bound to a node still booting starts when the boot ends: its span is empty then.
  r_.spans.push_back({id, std::min(run.start_s, t), t});
  ++run.epoch;
  for (uint32_t h : run.hosts) ArmIdleCheck(state, h, t);
  return Status::Ok();
}

Status Engine::Cycle(sched::ClusterState& state, double t) {
  ++r_.cycles;
  const int64_t now = ToNs(t);
  // The usage ledger is already charged up to t (Run advances it as time moves forward).
  // The policy sees the uplink load of the rings running now (rebuilt only when they changed).
  if (load_dirty_) {
    state.SetFabricLoad(FabricLoadOf(cluster_, net_));
    load_dirty_ = false;
  }
  sched::SchedulingInput in{.state = &state, .pending = &pending_, .queues = &queues_.queues,
                            .usage = ledger_.get(), .now_ns = now, .seed = opt_.seed};
  auto decided = policy_.Schedule(in);
  if (!decided.ok()) return decided.status().WithContext(fmt::format("policy '{}'", policy_.name()));
  sched::Decisions& d = *decided;
  const std::string pname(policy_.name());
  std::vector<uint32_t> preempted_now;
  for (const auto& p : d.preemptions) {
    uint32_t id = static_cast<uint32_t>(p.victim.value());
    // A victim named twice in one cycle (for two pending jobs) is preempted once.
    if (std::find(preempted_now.begin(), preempted_now.end(), id) != preempted_now.end()) {
      ++r_.duplicate_preemptions;
      continue;
    }
    preempted_now.push_back(id);
    // A policy that binds a job and then preempts it within the same cycle means "leave it
    // pending": drop the bind.
    if (id < runs_.size() && runs_[id].st == JobState::kPending) {
      auto it = std::find_if(d.binds.begin(), d.binds.end(),
                             [&](const sched::BindDecision& b) { return b.job.value() == id; });
      if (it != d.binds.end()) {
        d.binds.erase(it);
        ++r_.duplicate_preemptions;
        continue;
      }
    }
    if (id >= runs_.size() || runs_[id].st != JobState::kRunning) {
      return Status::Internal(fmt::format("policy '{}' preempted job {}, which is not running", pname, id));
    }
    JobRun& run = runs_[id];
    double ran = std::max(0.0, t - run.start_s);  // 0 while it waits for a boot
    run.remaining_s = std::max(0.0, run.remaining_s - ran / run.slowdown) + opt_.preempt_overhead_s;
    if (opt_.feedback) opt_.feedback->attained_milli_s[id] += ran * specs_[id].total_milli_gpus();
    GPOOL_RETURN_IF_ERROR(StopRun(state, id, t).WithContext(fmt::format("policy '{}': preempt", pname)));
    ++r_.jobs[id].preemptions;
    ++r_.preemptions;
    AddPending(id);
  }
  for (auto& b : d.binds) {
    uint32_t id = static_cast<uint32_t>(b.job.value());
    if (id >= runs_.size() || runs_[id].st != JobState::kPending) {
      return Status::Internal(fmt::format("policy '{}' bound job {}, which is not pending", pname, id));
    }
    const sched::Locality& loc = specs_[id].locality;
    if (loc.required && sched::PlacementSpan(state, b.placement) > loc.level) {
      return Status::Internal(fmt::format(
          "policy '{}' placed job {} ({}) across more than one {}, its required locality", pname,
          id, specs_[id].name, sched::LevelName(loc.level)));
    }
    Status s = state.Bind(specs_[id], b.placement, now);
    if (!s.ok()) {
      return s.WithContext(fmt::format("policy '{}': bind of job {} ({})", pname, id, specs_[id].name));
    }
    RemovePending(id);
    JobRun& run = runs_[id];
    run.st = JobState::kRunning;
    ++running_jobs_;
    run.hosts.clear();
    // Task nodes only (the ring's hosts; remote GPUs are gpool+remote's, which manages power).
    for (const auto& task : b.placement.tasks) run.hosts.push_back(task.node.value());
    std::sort(run.hosts.begin(), run.hosts.end());
    run.hosts.erase(std::unique(run.hosts.begin(), run.hosts.end()), run.hosts.end());
    // Under idle power-off the job starts once the nodes the engine resumes for it are up.
    run.start_s = managed_power_ ? ResumeForJob(run.hosts, t) : t;
    if (run.start_s > t) {
      run.boot_wait = true;
      boot_wait_milli_ += specs_[id].total_milli_gpus();
      ++r_.boot_waits;
      Push(run.start_s, Ev::kJobReady, id, run.epoch);
    }
    net_.AddRing(run.hosts, +1);
    load_dirty_ |= run.hosts.size() > 1;
    // Remote attachment stretches the whole run by its estimate (remote_cost.h), on top of the
    // network model's stretch of the communication share.
    double remote_slowdown = 1;
    for (const auto& task : b.placement.tasks) remote_slowdown = std::max(remote_slowdown, task.slowdown);
    run.slowdown = net_.Slowdown(work_.jobs[id].comm_fraction, run.hosts) * remote_slowdown;
    JobOutcome& o = r_.jobs[id];
    if (o.start_s < 0) o.start_s = run.start_s;
    o.slowdown = run.slowdown;
    o.remote_slowdown = remote_slowdown;
    o.remote_gpus = sched::CountRemoteGpus(b.placement);
    std::vector<int32_t> leaves;
    for (uint32_t h : run.hosts) leaves.push_back(cluster_.hosts[h].leaf);
    std::sort(leaves.begin(), leaves.end());
    o.leaves = static_cast<int32_t>(std::unique(leaves.begin(), leaves.end()) - leaves.begin());
    tenant_used_milli_[o.tenant] += specs_[id].total_milli_gpus();
    Push(run.start_s + run.remaining_s * run.slowdown, Ev::kFinish, id, run.epoch);
    bound_this_cycle_ = true;
  }
  if (managed_power_ && !d.power.empty()) {
    return Status::InvalidArgument(fmt::format(
        "policy '{}' manages node power itself; the engine's idle power-off is for policies that don't",
        pname));
  }
  for (const auto& p : d.power) {
    uint32_t n = p.node.value();
    if (n >= cluster_.hosts.size()) {
      return Status::Internal(fmt::format("policy '{}': power decision for unknown node {}", pname, n));
    }
    const auto cur = state.node(p.node).power;
    if (p.target == sched::PowerState::kOff) {
      if (cur != sched::PowerState::kOn) continue;  // already on its way down
      if (!state.idle(p.node)) {
        return Status::Internal(fmt::format("policy '{}' suspended node {} ({}), which runs work",
                                            pname, n, cluster_.hosts[n].name));
      }
      state.SetPower(p.node, sched::PowerState::kSuspending);
      Push(t + opt_.shutdown_s, Ev::kShutdown, n, ++node_epoch_[n]);
    } else {
      if (cur == sched::PowerState::kOn || cur == sched::PowerState::kResuming) continue;
      state.SetPower(p.node, sched::PowerState::kResuming);
      if (!node_on_[n]) {
        node_on_[n] = 1;
        ++on_count_;
        on_idle_w_ += HostIdleW(n);
      }
      ++resuming_;
      double ready = std::max(t, static_cast<double>(p.ready_ns) / 1e9);
      Push(ready, Ev::kBooted, n, ++node_epoch_[n]);
    }
  }
  blocked_ = !pending_.empty();
  // Under the engine's idle power-off the policy sees every node as available, so a job it
  // leaves waiting failed to place.
  if (!pending_.empty() && r_.first_fail_s < 0 &&
      (managed_power_ || (on_count_ == cluster_.hosts.size() && resuming_ == 0))) {
    r_.first_fail_s = t;
    r_.unallocated_gpus_at_first_fail =
        static_cast<double>(state.total_gpus() * 1000 - state.used_milli()) / 1000.0;
  }
  r_.timeline.push_back({t, state.used_milli(), static_cast<int32_t>(state.running().size()),
                         static_cast<int32_t>(pending_.size()), static_cast<int32_t>(on_count_),
                         PowerNow(state)});
  return Status::Ok();
}

StatusOr<RunResult> Engine::Run() {
  auto wall0 = std::chrono::steady_clock::now();
  GPOOL_RETURN_IF_ERROR(cluster_.Validate());
  const RemoteAttach* attach = RemoteAttachOf(policy_);
  const RemoteAttach remote = attach ? *attach : RemoteAttach{};
  GPOOL_RETURN_IF_ERROR(ValidateRemoteAttach(remote));
  r_.remote_attach = remote.enabled;
  sched::ClusterSpec spec = ToClusterSpec(cluster_, remote);
  int32_t max_gpus = 0;
  for (const auto& h : cluster_.hosts) max_gpus = std::max(max_gpus, h.gpus);
  GPOOL_ASSIGN_OR_RETURN(sched::ClusterState state, sched::ClusterState::Create(spec));
  r_.policy = std::string(policy_.name());
  r_.total_gpu_milli = cluster_.total_gpus() * 1000;
  queues_ = opt_.queues ? *opt_.queues : MakeTenantQueues(work_, cluster_.total_gpus());
  r_.tenants = queues_.tenants;
  r_.tenant_entitlement = queues_.entitlement;
  r_.tenant_gpu_s.assign(queues_.tenants.size(), 0);
  tenant_used_milli_.assign(queues_.tenants.size(), 0);
  // The policy's own half-life (gpool: --policy-config fairshare_half_life_s; 7 days otherwise).
  ledger_ = std::make_unique<sched::UsageLedger>(policy_.usage_half_life_s());
  const size_t n = work_.jobs.size();
  specs_.reserve(n);
  runs_.assign(n, {});
  pos_.assign(n, -1);
  r_.jobs.assign(n, {});
  if (opt_.feedback) opt_.feedback->attained_milli_s.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const SimJob& j = work_.jobs[i];
    if (j.id != i) return Status::Internal("workload not finalized (job ids out of order)");
    GPOOL_ASSIGN_OR_RETURN(sched::JobSpec s, ToJobSpec(j, spec, queues_, max_gpus));
    ApplyRemoteAttach(remote, &s);
    JobOutcome& o = r_.jobs[i];
    o.submit_s = j.submit_s;
    o.gpus = j.num_gpus;
    o.gpu_milli = j.gpu_milli;
    o.base_run_s = j.run_s;
    o.tenant = queues_.Find(j.tenant);
    runs_[i].remaining_s = j.run_s;
    Status fits = FitsEmptyCluster(s, spec);
    if (!fits.ok()) {
      o.rejected = true;
      runs_[i].st = JobState::kRejected;
      ++r_.rejected;
      if (r_.rejected_examples.size() < 5) {
        r_.rejected_examples.push_back(fmt::format("{}: {}", j.source, fits.message()));
      }
    } else {
      Push(j.submit_s, Ev::kArrival, static_cast<uint32_t>(i));
    }
    specs_.push_back(std::move(s));
  }
  node_epoch_.assign(cluster_.hosts.size(), 0);
  node_on_.assign(cluster_.hosts.size(), 1);
  on_count_ = cluster_.hosts.size();
  for (size_t h = 0; h < cluster_.hosts.size(); ++h) on_idle_w_ += HostIdleW(h);

  double now = n > 0 ? work_.jobs.front().submit_s : 0;
  r_.start_s = now;
  if (!(opt_.idle_power_off_s >= 0) || !std::isfinite(opt_.idle_power_off_s) ||
      !(opt_.idle_power_boot_s >= 0) || !std::isfinite(opt_.idle_power_boot_s)) {
    return Status::InvalidArgument(fmt::format(
        "engine: idle power-off {} s, boot {} s: must be finite and >= 0", opt_.idle_power_off_s,
        opt_.idle_power_boot_s));
  }
  managed_power_ = opt_.idle_power_off_s > 0;
  r_.idle_power_off_s = opt_.idle_power_off_s;
  if (managed_power_) {
    host_power_.assign(cluster_.hosts.size(), HostPower::kOn);
    ready_at_.assign(cluster_.hosts.size(), 0);
    idle_epoch_.assign(cluster_.hosts.size(), 0);
    // Every node is idle when the trace starts.
    for (size_t h = 0; h < cluster_.hosts.size(); ++h) ArmIdleCheck(state, static_cast<uint32_t>(h), now);
  }
  const size_t jobs_to_run = n - static_cast<size_t>(r_.rejected);
  double last_cycle = -1e300;
  bool tick_pending = false;
  int stalled = 0;
  uint64_t processed = 0;
  auto last_progress = wall0;
  while (true) {
    // Under idle power-off, what is left after the last job are the engine's own power events:
    // the run ends with the last job, as a baseline's without power-off does.
    if (managed_power_ && static_cast<size_t>(finished_) == jobs_to_run) break;
    if (events_.empty()) {
      if (pending_.empty() || stalled >= opt_.max_stalled_retries) break;
      ++stalled;
      Push(now + opt_.stall_retry_s, Ev::kTick, 0);
      tick_pending = true;
    }
    const double t = events_.top().t;
    // Integrate energy, blocking and tenant usage over [now, t). The fair-share ledger is charged
    // here too, with the jobs that ran over [now, t), before t's finishes release them: charged
    // only at cycles, after the releases, a job's last stretch would never count (and a job with
    // no other event during its run nothing at all). The first call only sets the ledger's time.
    ledger_->Advance(state, ToNs(t));
    const double dt = t - now;
    if (dt > 0) {
      const double e = PowerNow(state) * dt;
      r_.energy_j += e;
      if (!pending_.empty() || running_jobs_ > 0) {
        r_.work_s += dt;
        r_.energy_with_work_j += e;
      }
      for (size_t q = 0; q < tenant_used_milli_.size(); ++q) {
        r_.tenant_gpu_s[q] += static_cast<double>(tenant_used_milli_[q]) / 1000.0 * dt;
      }
      if (blocked_) {
        r_.blocked_s += dt;
        r_.blocked_unallocated_gpu_s +=
            static_cast<double>(state.total_gpus() * 1000 - state.used_milli()) / 1000.0 * dt;
      }
    }
    now = t;
    bool changed = false;
    bool capacity_back = false;  // a finish or boot: jobs left waiting may fit now
    while (!events_.empty() && events_.top().t == t) {
      Event e = events_.top();
      events_.pop();
      ++processed;
      switch (e.type) {
        case Ev::kArrival:
          AddPending(e.id);
          changed = true;
          break;
        case Ev::kFinish: {
          JobRun& run = runs_[e.id];
          if (run.st != JobState::kRunning || run.epoch != e.epoch) break;  // preempted since
          GPOOL_RETURN_IF_ERROR(StopRun(state, e.id, t));
          run.st = JobState::kDone;
          run.remaining_s = 0;
          r_.jobs[e.id].finish_s = t;
          r_.end_s = std::max(r_.end_s, t);
          // Energy is integrated up to t: finishes come in time order, so the last one leaves
          // the energy of the busy span.
          r_.energy_busy_span_j = r_.energy_j;
          ++finished_;
          changed = true;
          capacity_back = true;
          break;
        }
        case Ev::kBooted:
          if (node_epoch_[e.id] != e.epoch) break;
          if (managed_power_) {  // the policy saw the node as available all along
            host_power_[e.id] = HostPower::kOn;
            ArmIdleCheck(state, e.id, t);
            break;
          }
          --resuming_;
          state.SetPower(sched::NodeId(e.id), sched::PowerState::kOn);
          changed = true;
          capacity_back = true;
          break;
        case Ev::kShutdown:
          if (node_epoch_[e.id] != e.epoch) break;
          if (managed_power_) {
            host_power_[e.id] = HostPower::kOff;
            node_on_[e.id] = 0;
            --on_count_;
            on_idle_w_ -= HostIdleW(e.id);
            break;
          }
          state.SetPower(sched::NodeId(e.id), sched::PowerState::kOff);
          if (node_on_[e.id]) {
            node_on_[e.id] = 0;
            --on_count_;
            on_idle_w_ -= HostIdleW(e.id);
          }
          changed = true;
          break;
        case Ev::kTick:
          tick_pending = false;
          changed = true;
          break;
        case Ev::kIdleCheck:
          if (idle_epoch_[e.id] != e.epoch || host_power_[e.id] != HostPower::kOn ||
              !state.idle(sched::NodeId(e.id))) {
            break;
          }
          host_power_[e.id] = HostPower::kSuspending;
          ++r_.idle_power_offs;
          Push(t + opt_.shutdown_s, Ev::kShutdown, e.id, ++node_epoch_[e.id]);
          break;
        case Ev::kJobReady: {
          JobRun& run = runs_[e.id];
          if (run.st != JobState::kRunning || run.epoch != e.epoch || !run.boot_wait) break;
          run.boot_wait = false;
          boot_wait_milli_ -= specs_[e.id].total_milli_gpus();
          break;
        }
      }
    }
    if (!changed) continue;
    if (opt_.min_cycle_interval_s > 0 && t < last_cycle + opt_.min_cycle_interval_s) {
      // Waiting jobs that might fit the capacity that came back wait for the merged cycle: a
      // batching wait, not blocking.
      if (capacity_back) blocked_ = false;
      if (!tick_pending) {
        Push(last_cycle + opt_.min_cycle_interval_s, Ev::kTick, 0);
        tick_pending = true;
      }
      continue;
    }
    bound_this_cycle_ = false;
    GPOOL_RETURN_IF_ERROR(Cycle(state, t));
    last_cycle = t;
    if (bound_this_cycle_) stalled = 0;
    if (opt_.progress && (r_.cycles & 255) == 0) {
      auto w = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(w - last_progress).count() >= opt_.progress_every_s) {
        last_progress = w;
        opt_.progress(t, finished_, static_cast<int64_t>(n));
      }
    }
  }
  r_.unfinished = static_cast<int64_t>(n) - finished_ - r_.rejected;
  if (!net_.idle() && r_.unfinished == 0) {
    return Status::Internal("engine: network flows left after every job finished");
  }
  r_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return std::move(r_);
}

}  // namespace

StatusOr<RunResult> RunSimulation(const SimCluster& cluster, const Workload& workload,
                                  const sched::Policy& policy, const EngineOptions& options) {
  Engine e(cluster, workload, policy, options);
  return e.Run();
}

}  // namespace gpool::sim
