#include "control/node_power.h"

#include <set>

#include "common/log.h"
#include "sched/power.h"

namespace gpool::control {

sched::PowerState NodePower::SchedState(const v1::Node& n) {
  const std::string& p = n.power();
  if (p == "off") return sched::PowerState::kOff;
  if (p == "suspending") return sched::PowerState::kSuspending;
  if (p == "resuming") return sched::PowerState::kResuming;
  if (p == kResumeFailed) return sched::PowerState::kOff;
  return sched::PowerState::kOn;
}

void NodePower::SetPower(v1::Node* n, const std::string& power, int64_t now_ms) {
  n->set_power(power);
  n->set_power_since_ms(now_ms);
  if (power == "on" || power == "resuming") n->set_resume_retries(0);
}

void NodePower::OnNodeUp(const std::string& node, int64_t now_ms) { idle_since_ms_[node] = now_ms; }

bool NodePower::OnHeartbeat(v1::Node* node, bool powered_off, int64_t now_ms) {
  const std::string before = node->power().empty() ? "on" : node->power();
  std::string after = before;
  if (powered_off) {
    // The agent ran its suspend action. Also when the controller thought it on: trust the node.
    // A node still off while resuming (or after resuming failed) stays as it is.
    if (before != "resuming" && before != kResumeFailed) after = "off";
  } else if (before != "on" && before != "suspending") {
    after = "on";  // off or resuming, and the node runs: it is back
  }
  if (after == before) return false;
  SetPower(node, after, now_ms);
  if (after == "on") idle_since_ms_[node->name()] = now_ms;
  GPOOL_LOG_INFO("node {}: power {} -> {}", node->name(), before, after);
  return true;
}

void NodePower::Refresh(v1::Node* node, bool busy, int64_t now_ms) {
  int64_t& since = idle_since_ms_.try_emplace(node->name(), now_ms).first->second;
  if (busy) {
    since = -1;
  } else if (since < 0) {
    since = now_ms;
  }
  if (!node->power().empty() && node->power() != "on") node->set_state(node->power());
}

void NodePower::FillHeartbeatResponse(const v1::Node& node,
                                      const std::map<std::string, v1::Node>& nodes,
                                      v1::HeartbeatResponse* resp) const {
  if (node.power() == "suspending") resp->set_power_action("suspend");
  if (node.power() == "resuming") resp->set_power_action("resume");
  if (!node.power_proxy()) return;
  for (const auto& [name, n] : nodes) {
    if (name != node.name() && n.power() == "resuming") resp->add_resume_nodes(name);
  }
}

Status NodePower::Plan(const sched::ClusterState& state, const std::vector<sched::JobSpec>& pending,
                       const sched::Decisions& decisions, int64_t now_ms,
                       std::map<std::string, v1::Node>* nodes,
                       std::vector<const v1::Node*>* changed) {
  if (!config_.enabled) return Status::Ok();
  // A suspending node whose heartbeats stopped has gone down as asked.
  for (auto& [name, n] : *nodes) {
    if (n.power() == "suspending" && now_ms - n.last_heartbeat_ms() > node_timeout_ms_) {
      SetPower(&n, "off", now_ms);
      n.set_state("off");
      changed->push_back(&n);
      GPOOL_LOG_INFO("node {}: power suspending -> off (heartbeats stopped)", name);
    }
  }
  // A resume that did not bring the node back in time: again, or give up.
  const int64_t resume_timeout_ms = static_cast<int64_t>(config_.resume_timeout_s * 1000);
  for (auto& [name, n] : *nodes) {
    if (n.power() != "resuming") continue;
    if (n.power_since_ms() == 0) {  // a record from before power_since_ms existed: start now
      n.set_power_since_ms(now_ms);
      changed->push_back(&n);
      continue;
    }
    if (now_ms - n.power_since_ms() < resume_timeout_ms) continue;
    if (n.resume_retries() < config_.resume_retries) {
      n.set_resume_retries(n.resume_retries() + 1);
      n.set_power_since_ms(now_ms);
      GPOOL_LOG_WARN("node {}: not back {} s after resume; resuming again (retry {} of {})", name,
                     config_.resume_timeout_s, n.resume_retries(), config_.resume_retries);
    } else {
      SetPower(&n, kResumeFailed, now_ms);
      n.set_state(kResumeFailed);
      GPOOL_LOG_ERROR("node {}: power resuming -> {} (not back after {} retries of {} s); it "
                      "is not resumed again until its agent heartbeats or registers",
                      name, kResumeFailed, config_.resume_retries, config_.resume_timeout_s);
    }
    changed->push_back(&n);
  }
  std::set<uint64_t> bound;
  for (const auto& b : decisions.binds) bound.insert(b.job.value());
  int64_t demand = 0;
  for (const sched::JobSpec& j : pending) {
    if (!bound.count(j.id.value())) demand += int64_t{j.task.gpus} * j.num_tasks;
  }
  // Keep on: nodes idle for less than the timeout, and nodes held for a reservation.
  std::vector<uint8_t> keep(state.num_nodes(), 0);
  const int64_t timeout_ms = static_cast<int64_t>(config_.idle_timeout_s * 1000);
  for (size_t i = 0; i < state.num_nodes(); ++i) {
    auto it = idle_since_ms_.find(state.spec().nodes[i].name);
    if (it == idle_since_ms_.end() || it->second < 0 || now_ms - it->second < timeout_ms) keep[i] = 1;
  }
  // Power proxies wake the others: never switch one off.
  for (size_t i = 0; i < state.num_nodes(); ++i) {
    auto it = nodes->find(state.spec().nodes[i].name);
    if (it != nodes->end() && it->second.power_proxy()) keep[i] = 1;
  }
  for (const auto& r : decisions.reservations) {
    for (sched::NodeId n : r.nodes) keep[n.value()] = 1;
  }
  // The warm buffer follows recent arrivals, as in the policy's own plan (sched/power.h): the
  // GPUs of jobs submitted within power.arrival_window_s, pending or running. A job bound in this
  // cycle is in `pending` and running in `state`; RecentArrivalGpus counts it once (as running).
  const int64_t now_ns = now_ms * 1000000;
  const int64_t recent =
      sched::RecentArrivalGpus(state, pending, now_ns, config_.arrival_window_s);
  const std::vector<sched::PowerDecision> plan = sched::PlanPower(
      state, config_,
      {.now_ns = now_ns, .demand_gpus = demand, .keep_on = &keep, .recent_arrival_gpus = recent});
  for (const sched::PowerDecision& p : plan) {
    const std::string& name = state.node(p.node).name;
    auto it = nodes->find(name);
    if (it == nodes->end()) return Status::Internal("power decision for unknown node " + name);
    v1::Node& n = it->second;
    const std::string target = p.target == sched::PowerState::kOff ? "suspending" : "resuming";
    GPOOL_LOG_INFO("node {}: power {} -> {} (demand {} GPUs, {} GPUs arrived in the last {} s)", name,
                   n.power().empty() ? "on" : n.power(), target, demand, recent,
                   config_.arrival_window_s);
    SetPower(&n, target, now_ms);
    n.set_state(target);
    changed->push_back(&n);
  }
  return Status::Ok();
}

}  // namespace gpool::control
