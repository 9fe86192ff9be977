// The controller's word to a task's host: task assignments (heartbeat answers), the GPUs a task
// reaches through GPU servers (GPOOL_DEVICES) and the signed leases for them (GPOOL_LEASE), and
// the lease API (LeaseService). controller.h describes the class; allocations.h the order of a
// task's GPUs.
#include <fmt/format.h>

#include "common/log.h"
#include "control/allocations.h"
#include "control/controller.h"
#include "remote/lease/lease.h"

namespace gpool::control {
namespace {

// One lease for GPU `gpu` of allocation `a`: the task's share of it (compute milli, and memory
// for a fraction; whole GPUs come with all their memory: 0 = the device's own limit).
StatusOr<std::string> IssueTaskLease(const remote::LeaseAuthority& auth, const v1::Job& j,
                                 const v1::Allocation& a, const std::string& gpu,
                                 double ttl_s, const Clock& clock) {
  remote::LeaseRequest lr;
  lr.gpu = gpu;
  lr.memory_bytes = a.gpu_memory_bytes();
  lr.compute_milli = a.gpu_milli() > 0 ? a.gpu_milli() : 1000;
  lr.tenant = j.tenant();
  lr.job = j.id();
  lr.ttl_seconds = ttl_s;
  return auth.Issue(lr, clock);
}

std::string JoinCommas(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

}  // namespace

bool Controller::ServesGpus(const v1::Node& n) const {
  return !n.gpu_server().empty() && !options_.lease_key.empty();
}

std::string Controller::RemoteHintLocked() const {
  if (options_.lease_key.empty()) {
    return "no GPU can be lent: the controller has no lease key (gpool controller --lease-key)";
  }
  for (const auto& [name, n] : nodes_) {
    if (ServesGpus(n) && n.gpus() > 0) return "";
  }
  return "no GPU can be lent: no node advertises a GPU server (gpool agent --gpu-server)";
}

StatusOr<std::vector<std::string>> Controller::GpuAddressesLocked(const v1::Job& j,
                                                                  const v1::Allocation& a) const {
  std::vector<std::string> out;
  auto add = [&](const std::string& node, uint32_t mask, bool host) -> Status {
    if (mask == 0) return Status::Ok();
    auto n = nodes_.find(node);
    if (n == nodes_.end() || n->second.gpu_server().empty()) {
      return Status::FailedPrecondition(fmt::format(
          "node {} ({} task {} of job {}) advertises no gpu_server (gpool agent --gpu-server)",
          node, host ? "host of" : "lending GPUs to", a.task(), j.id()));
    }
    for (int g = 0; g < sched::kMaxGpusPerNode; ++g) {
      if (mask >> g & 1) out.push_back(fmt::format("{}/{}", n->second.gpu_server(), g));
    }
    return Status::Ok();
  };
  GPOOL_RETURN_IF_ERROR(add(a.node(), a.gpu_mask(), true));
  for (const auto& r : a.remote()) GPOOL_RETURN_IF_ERROR(add(r.node(), r.gpu_mask(), false));
  return out;
}

std::string Controller::UnservedLocked(const v1::Job& j) const {
  if (j.state() != "running") return "";
  for (const auto& a : j.allocations()) {
    if (a.finished() || !a.via_server()) continue;
    if (options_.lease_key.empty()) {
      return fmt::format("task {} reaches its GPUs through GPU servers, but the controller has "
                         "no lease key (--lease-key) to sign their leases", a.task());
    }
    auto addresses = GpuAddressesLocked(j, a);
    if (!addresses.ok()) return std::string(addresses.status().message());
  }
  return "";
}

std::vector<v1::Job> Controller::FailUnservedLocked(std::set<std::string> ids,
                                                    int64_t now_ms,
                                                    std::vector<std::string>* log) {
  std::vector<v1::Job> changed;
  for (const std::string& id : ids) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    std::string why = UnservedLocked(it->second);
    if (why.empty()) continue;
    v1::Job j = it->second;
    j.set_state("failed");
    j.set_end_ms(now_ms);
    j.set_message(why);
    log->push_back(fmt::format("job {} failed: {}", id, why));
    SetJobLocked(j);
    changed.push_back(std::move(j));
  }
  return changed;
}

void Controller::AddAssignmentsLocked(const v1::Node& node, v1::HeartbeatResponse* resp) {
  for (const std::string& id : node_jobs_[node.name()]) {
    const v1::Job& j = jobs_.at(id);
    for (const v1::Allocation& a : j.allocations()) {
      if (a.node() != node.name() || a.finished()) continue;  // lent GPUs: not run here
      v1::TaskAssignment t;
      t.set_job_id(id);
      t.set_task(a.task());
      t.set_gpu_mask(a.gpu_mask());
      t.set_duration_s(j.duration_s());
      *t.mutable_command() = j.command();
      t.set_attempt(j.attempt());
      t.set_gpu_milli(a.gpu_milli());
      t.set_gpu_memory_bytes(a.gpu_memory_bytes());
      t.set_tenant(j.tenant());
      t.set_num_tasks(j.num_tasks());
      if (FillTaskLeaseLocked(node, j, a, &t)) *resp->add_tasks() = std::move(t);
    }
  }
}

bool Controller::FillTaskLeaseLocked(const v1::Node& node, const v1::Job& j,
                                     const v1::Allocation& a, v1::TaskAssignment* t) {
  // Remote attachment (via_server): every GPU through its node's GPU server, with a lease each;
  // without them the task cannot run (the agent would give it local GPUs it was not placed on).
  // A fraction of a GPU on a node that serves its GPUs (`gpool agent --gpu-server`): the task
  // runs through the remoting runtime with a lease for its share, which the GPU server
  // enforces. Without a server or a lease key the agent runs it on the whole device, told its
  // share only. A fresh token per heartbeat (an HMAC, cheap); the agent uses the first it sees.
  const bool fraction = a.gpu_milli() > 0 && a.gpu_milli() < 1000;
  if (!a.via_server() &&
      (!fraction || node.gpu_server().empty() || options_.lease_key.empty())) {
    return true;
  }
  auto fail = [&](const Status& s) {
    GPOOL_LOG_WARN("job {} task {}: no GPU devices for its host {}: {}", j.id(), a.task(),
                   node.name(), s.ToString());
    return !a.via_server();  // a local fraction still runs, on the whole device
  };
  auto auth = remote::LeaseAuthority::Create(options_.lease_key);
  if (!auth.ok()) return fail(auth.status());
  auto gpus = GpuAddressesLocked(j, a);
  if (!gpus.ok()) return fail(gpus.status());
  std::vector<std::string> leases;
  for (const std::string& gpu : *gpus) {
    // Checked when the task connects, which is at its start.
    auto token = IssueTaskLease(*auth, j, a, gpu, 3600, *clock_);
    if (!token.ok()) return fail(token.status());
    leases.push_back(std::move(*token));
  }
  t->set_devices(JoinCommas(*gpus));
  t->set_lease(JoinCommas(leases));
  return true;
}

StatusOr<v1::IssueLeasesResponse> Controller::IssueLeases(const v1::IssueLeasesRequest& req) {
  if (req.job_id().empty()) return Status::InvalidArgument("job_id: must not be empty");
  if (!(req.ttl_s() >= 0) || req.ttl_s() > 7 * 24 * 3600) {
    return Status::InvalidArgument(fmt::format("ttl_s: must be 0..604800, got {}", req.ttl_s()));
  }
  if (options_.lease_key.empty()) {
    return Status::FailedPrecondition(
        "leases: the controller was started without a lease key (--lease-key FILE)");
  }
  GPOOL_ASSIGN_OR_RETURN(remote::LeaseAuthority auth,
                         remote::LeaseAuthority::Create(options_.lease_key));
  v1::Job j;
  std::vector<std::pair<const v1::Allocation*, std::vector<std::string>>> tasks;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = jobs_.find(req.job_id());
    if (it == jobs_.end()) return Status::NotFound(fmt::format("job {} not found", req.job_id()));
    j = it->second;
    if (j.state() != "running") {
      return Status::FailedPrecondition(
          fmt::format("job {} is {}, leases are for running jobs", j.id(), j.state()));
    }
    for (const auto& a : j.allocations()) {
      if (a.finished()) continue;
      GPOOL_ASSIGN_OR_RETURN(std::vector<std::string> gpus, GpuAddressesLocked(j, a));
      tasks.emplace_back(&a, std::move(gpus));
    }
  }
  v1::IssueLeasesResponse resp;
  double ttl = req.ttl_s() > 0 ? req.ttl_s() : 3600;
  for (const auto& [a, gpus] : tasks) {
    for (const std::string& gpu : gpus) {
      GPOOL_ASSIGN_OR_RETURN(std::string token, IssueTaskLease(auth, j, *a, gpu, ttl, *clock_));
      v1::GpuLease* out = resp.add_leases();
      out->set_task(a->task());
      out->set_gpu(gpu);
      out->set_token(token);
      out->set_expires_ms(NowMs() + static_cast<int64_t>(ttl * 1000));
    }
  }
  return resp;
}

}  // namespace gpool::control
