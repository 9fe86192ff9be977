// The controller's scheduling cycle (controller.h, "Scheduling" and "Liveness"): lost nodes,
// running jobs whose GPU servers can no longer serve them, the scheduler's ClusterState rebuilt
// from the registered nodes and running jobs (lent GPUs taken on their own nodes), the policy
// run, and its preemptions, binds and wait reasons applied to the job records.
#include <algorithm>

#include <fmt/format.h>

#include "common/log.h"
#include "control/allocations.h"
#include "control/controller.h"
#include "control/controller_internal.h"
#include "control/fabric_view.h"

namespace gpool::control {
namespace {

// A pending pooled/remote job's reason, with why no GPU can be lent when none can.
std::string WithRemoteHint(const v1::Job& j, std::string why, const std::string& hint) {
  if (hint.empty() || j.gpu_source().empty() || j.gpu_source() == "local") return why;
  return why + "; " + hint;
}

}  // namespace

// ---- Scheduling ----

std::vector<v1::Job> Controller::HandleLostNodesLocked(int64_t now_ms,
                                                       std::vector<std::string>* log) {
  std::vector<v1::Job> changed;
  std::set<std::string> victims;
  // A node lending GPUs to an unfinished task (remote attachment) is lost to that task as much
  // as its host: the gang is requeued or failed alike, and all its GPUs, wherever, are freed.
  auto down = [&](const std::string& node) {
    auto it = nodes_.find(node);
    return it != nodes_.end() && it->second.state() == "down";
  };
  for (const auto& [name, n] : nodes_) {
    if (n.state() != "down") continue;
    for (const std::string& id : node_jobs_[name]) {
      for (const auto& a : jobs_.at(id).allocations()) {
        if (!a.finished() && AllocationNodes(a).count(name) > 0) victims.insert(id);
      }
    }
  }
  for (const std::string& id : victims) {
    v1::Job j = jobs_.at(id);
    std::string lost, role;
    for (const auto& a : j.allocations()) {
      if (a.finished()) continue;
      if (down(a.node())) {
        lost = a.node();
      } else {
        for (const auto& r : a.remote()) {
          if (down(r.node())) {
            lost = r.node();
            role = fmt::format(" (lending GPUs to task {})", a.task());
            break;
          }
        }
      }
      if (!lost.empty()) break;
    }
    if (options_.lost_node_policy == LostNodePolicy::kFail) {
      j.set_state("failed");
      j.set_end_ms(now_ms);
      j.set_message(fmt::format("node {}{} was lost (no heartbeat for {} ms)", lost, role,
                                options_.node_timeout.count()));
    } else {
      j.set_state("pending");
      j.clear_allocations();
      j.set_start_ms(0);
      j.set_requeues(j.requeues() + 1);
      j.set_message(fmt::format("requeued: node {}{} was lost", lost, role));
    }
    log->push_back(fmt::format("job {}: node {} lost, job {}", id, lost, j.state()));
    SetJobLocked(j);
    changed.push_back(std::move(j));
  }
  return changed;
}

Status Controller::CycleLocked(Cycle* out) {
  std::map<std::string, v1::Job>& changed = out->changed;
  std::vector<std::pair<int64_t, bool>>& first_binds = out->first_binds;
  std::vector<const v1::Node*>& power_changed = out->power_changed;
  {
    int64_t now_ms = NowMs();
    int64_t now_ns = now_ms * 1000000;
    RefreshNodeStates(now_ms);
    for (v1::Job& j : HandleLostNodesLocked(now_ms, &out->log)) changed[j.id()] = std::move(j);
    // Running jobs whose GPU servers can no longer serve them (a node re-registered without
    // one, or a restart without the lease key) fail: the scheduler could not rebuild their
    // placements, and their hosts could not be told their devices.
    std::set<std::string> running;
    for (const auto& [id, j] : jobs_) {
      if (j.state() == "running") running.insert(id);
    }
    for (v1::Job& j : FailUnservedLocked(std::move(running), now_ms, &out->log)) {
      changed[j.id()] = std::move(j);
    }

    sched::ClusterSpec spec;
    std::map<std::string, int> node_index;
    for (const auto& [name, n] : nodes_) {
      int model = n.gpus() == 0 ? -1 : sched::FindGpuModel(spec, n.gpu_model());
      if (model < 0 && n.gpus() > 0) {
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
      ns.power = NodePower::SchedState(n);
      ns.serves_gpus = ServesGpus(n);
      node_index[name] = static_cast<int>(spec.nodes.size());
      spec.nodes.push_back(std::move(ns));
    }
    const bool any_pending = pending_jobs_ > 0;
    if (!spec.nodes.empty() && (any_pending || power_.enabled())) {
      if (options_.fabric) {
        GPOOL_RETURN_IF_ERROR(options_.fabric->BuildDomains(&spec));  // domains from the fabric
      } else {
        GPOOL_RETURN_IF_ERROR(sched::BuildUniformTopology({}, &spec));
      }
      GPOOL_ASSIGN_OR_RETURN(sched::ClusterState state,
                             sched::ClusterState::Create(std::move(spec)));

      // Queues: one per tenant, each at its index in tenant_queue_ (new tenants are appended).
      auto make_queue = [&](const std::string& tenant) {
        sched::QueueSpec q;
        q.name = tenant;
        q.tenant = tenant;
        auto qt = options_.tenant_quotas.find(tenant);
        q.guaranteed_gpus = qt == options_.tenant_quotas.end() ? 0 : qt->second;
        auto cap = options_.tenant_max_gpus.find(tenant);
        if (cap != options_.tenant_max_gpus.end()) q.max_gpus = cap->second;
        return q;
      };
      std::vector<sched::QueueSpec> queues(tenant_queue_.size());
      for (const auto& [tenant, i] : tenant_queue_) queues[static_cast<size_t>(i)] = make_queue(tenant);
      auto queue = [&](const std::string& tenant) {
        auto [it, added] = tenant_queue_.emplace(tenant, static_cast<int>(queues.size()));
        if (added) queues.push_back(make_queue(tenant));
        return it->second;
      };
      for (const auto& [name, q] : options_.tenant_quotas) queue(name);

      auto to_spec = [&](const v1::Job& j) -> StatusOr<sched::JobSpec> {
        sched::JobSpec s;
        s.id = sched::JobId(JobNumber(j.id()));
        s.name = j.id();
        s.tenant = j.tenant();
        s.queue = sched::QueueId(queue(j.tenant()));
        s.priority = j.priority();
        s.num_tasks = j.num_tasks();
        s.task.gpus = j.gpus_per_task();
        s.task.gpu_milli = j.gpu_milli();
        s.task.gpu_memory_bytes = j.gpu_memory_bytes();
        s.task.cpu_milli = j.cpu_milli();
        s.task.memory_bytes = j.memory_bytes();
        GPOOL_ASSIGN_OR_RETURN(s.gpu_models, sched::ParseGpuModels(state.spec(), j.gpu_model()));
        GPOOL_ASSIGN_OR_RETURN(s.locality.level,
                               sched::ParseLevel(j.locality().empty() ? "any" : j.locality()));
        s.locality.required = j.locality_required();
        s.est_runtime_s = j.duration_s();
        s.preemptible = j.preemptible();
        s.min_runtime_s = j.min_runtime_s();
        GPOOL_ASSIGN_OR_RETURN(s.kind, sched::ParseJobKind(j.kind().empty() ? "training" : j.kind()));
        GPOOL_ASSIGN_OR_RETURN(s.remote, RemoteRequestOf(j));
        s.submit_ns = j.submit_ms() * 1000000;
        return s;
      };
      std::vector<sched::JobSpec> pending;
      const std::string remote_hint = RemoteHintLocked();
      // Jobs that ended (finished, failed, cancelled) since the ledger's last advance: the
      // advance below sees only the jobs running now, so their stretch from then (or from their
      // start) to their end is charged here, or it would never count.
      std::vector<std::pair<sched::QueueId, sched::QueueUsage>> ended_usage;
      for (const auto& [id, j0] : jobs_) {
        const v1::Job& j = changed.count(id) ? changed.at(id) : j0;
        if (j.state() == "pending") {
          auto s = to_spec(j);
          Status ok = s.ok() ? sched::ValidateJob(*s, state.spec(), queues.size()) : s.status();
          if (!ok.ok()) {
            // E.g. its GPU model's nodes are all gone: it waits, saying why.
            if (submit_ns_.count(id) > 0) waited_.insert(id);
            const std::string why = WithRemoteHint(j, std::string(ok.message()), remote_hint);
            if (j.message() != why) {
              v1::Job w = j;
              w.set_message(why);
              SetJobLocked(w);
              changed[id] = std::move(w);
            }
            continue;
          }
          pending.push_back(std::move(*s));
        } else if (j.state() == "running") {
          GPOOL_ASSIGN_OR_RETURN(sched::JobSpec s, to_spec(j));
          sched::Placement p;
          for (const auto& a : j.allocations()) {  // lent GPUs are taken on their own nodes
            auto b = BindingOf(a, node_index);
            if (!b.ok()) return b.status().WithContext(fmt::format("job {}", id));
            p.tasks.push_back(std::move(*b));
          }
          Status s2 = state.Bind(s, p, j.start_ms() * 1000000);
          if (!s2.ok()) return s2.WithContext(fmt::format("re-binding running job {}", id));
        } else if (!Active(j) && j.start_ms() > 0 && ledger_.last_ns() >= 0 &&
                   j.end_ms() * 1000000 > ledger_.last_ns()) {
          const int64_t from_ns = std::max(j.start_ms() * 1000000, ledger_.last_ns());
          const double dt = static_cast<double>(j.end_ms() * 1000000 - from_ns) * 1e-9;
          sched::TaskRequest task;
          task.gpus = j.gpus_per_task();
          task.gpu_milli = j.gpu_milli();
          ended_usage.push_back(
              {sched::QueueId(queue(j.tenant())),
               {.gpu_milli_s = static_cast<double>(task.milli_gpus()) * j.num_tasks() * dt,
                .cpu_milli_s = static_cast<double>(j.cpu_milli()) * j.num_tasks() * dt,
                .memory_byte_s = static_cast<double>(j.memory_bytes()) * j.num_tasks() * dt}});
        }
      }
      for (const auto& [name, n] : nodes_) {
        // Nodes switched off on purpose stay healthy: PlanPower may resume them; not those
        // that failed to resume (node_power.h).
        if ((n.state() != "ready" && NodePower::SchedState(n) == sched::PowerState::kOn) ||
            n.power() == NodePower::kResumeFailed) {
          state.SetHealth(sched::NodeId(node_index[name]), sched::Health::kUnhealthy);
        }
      }
      ledger_.Advance(state, now_ns);
      for (const auto& [q, u] : ended_usage) ledger_.Add(q, u);
      sched::SchedulingInput in{.state = &state, .pending = &pending, .queues = &queues,
                                .usage = &ledger_, .now_ns = now_ns, .seed = 0,
                                .explain = true};
      GPOOL_ASSIGN_OR_RETURN(sched::Decisions d, policy_->Schedule(in));

      auto job_id = [](sched::JobId id) { return JobIdOf(id.value()); };
      for (const auto& p : d.preemptions) {
        std::string id = job_id(p.victim);
        v1::Job j = changed.count(id) ? changed[id] : jobs_.at(id);
        j.set_state("pending");
        j.clear_allocations();
        j.set_start_ms(0);
        j.set_preemptions(j.preemptions() + 1);
        j.set_message(fmt::format("preempted ({}) for {}", p.reason, job_id(p.for_job)));
        SetJobLocked(j);
        changed[id] = std::move(j);
      }
      for (const auto& b : d.binds) {
        std::string id = job_id(b.job);
        v1::Job j = changed.count(id) ? changed[id] : jobs_.at(id);
        j.set_state("running");
        j.set_start_ms(now_ms);
        j.set_attempt(j.attempt() + 1);
        j.clear_message();
        j.clear_pending_reason();
        if (j.first_bind_ms() == 0) {
          j.set_first_bind_ms(now_ms);
          // In memory since the submit; a job submitted before a restart has its record's ms.
          auto t = submit_ns_.find(id);
          first_binds.push_back({t != submit_ns_.end() ? t->second : j.submit_ms() * 1000000,
                                 waited_.count(id) > 0 || t == submit_ns_.end()});
        }
        j.clear_allocations();
        for (size_t t = 0; t < b.placement.tasks.size(); ++t) {
          FillAllocation(b.placement.tasks[t], state, static_cast<int32_t>(t),
                         j.add_allocations());
        }
        SetJobLocked(j);
        changed[id] = std::move(j);
      }
      // A job this cycle saw and did not bind waits for room: its bind, when it comes, is
      // queueing time, not the control plane's latency. (Bound ones left the set above.)
      for (const sched::JobSpec& pj : pending) {
        std::string id = job_id(pj.id);
        if (submit_ns_.count(id) > 0) waited_.insert(id);
      }
      // Why each job that stays pending waits (the scheduler's words). Written only when it
      // changes: a reason's numbers come from the configuration and the job, not from the load
      // (sched::WaitReason), so a steady queue costs no commits; it changes when the cause does
      // (e.g. the tenant crosses its guarantee, or the job takes the reservation).
      for (const auto& w : d.waits) {
        std::string id = job_id(w.job);
        const v1::Job& cur = changed.count(id) ? changed.at(id) : jobs_.at(id);
        const std::string why = WithRemoteHint(cur, w.text, remote_hint);
        if (cur.state() != "pending" || cur.pending_reason() == why) continue;
        v1::Job j = cur;
        j.set_pending_reason(why);
        SetJobLocked(j);
        changed[id] = std::move(j);
      }
      if (power_.enabled()) {
        // Power (src/sched/power.h) acts on the cluster as this cycle leaves it.
        for (const auto& p : d.preemptions) (void)state.Release(p.victim, now_ns);
        for (const auto& b : d.binds) {
          GPOOL_ASSIGN_OR_RETURN(sched::JobSpec s, to_spec(changed.at(job_id(b.job))));
          GPOOL_RETURN_IF_ERROR(state.Bind(s, b.placement, now_ns));
        }
        GPOOL_RETURN_IF_ERROR(power_.Plan(state, pending, d, now_ms, &nodes_, &power_changed));
      }
    }
  }
  return Status::Ok();
}

void Controller::CycleCommitted(const Cycle& c) {
  for (const std::string& line : c.log) GPOOL_LOG_WARN("{}", line);
  if (c.first_binds.empty()) return;
  const int64_t now_ns = clock_->NowNanos();  // the binds are committed now
  for (const auto& [submit_ns, waited] : c.first_binds) {
    const double seconds = static_cast<double>(std::max<int64_t>(now_ns - submit_ns, 0)) * 1e-9;
    queue_time_.Observe(seconds);
    if (!waited) bind_latency_.Observe(seconds);
  }
}

Status Controller::ScheduleOnce() {
  auto start = std::chrono::steady_clock::now();
  uint64_t seq = 0;
  Cycle cycle;
  Status cycle_status;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!leading_) return Status::Ok();  // standbys do not schedule
    Status cs = CycleLocked(&cycle);
    // What the cycle changed before an error is in memory already: commit it all the same, so
    // memory never stays ahead of the store.
    std::vector<const v1::Job*> ptrs;
    for (const auto& [id, j] : cycle.changed) ptrs.push_back(&j);
    GPOOL_ASSIGN_OR_RETURN(seq, EnqueueLocked(ptrs, cycle.power_changed));
    cycle_status = std::move(cs);
  }
  Status s = WaitDurable(seq);
  if (s.ok()) CycleCommitted(cycle);
  sched_latency_.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return cycle_status.ok() ? s : cycle_status;
}

}  // namespace gpool::control
