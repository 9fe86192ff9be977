#include "control/fabric_monitor.h"

#include <csignal>
#include <cstdio>
#include <map>
#include <set>

#include <fmt/format.h>
#include <sys/wait.h>

#include "common/file.h"
#include "common/log.h"
#include "control/fabric_api.h"
#include "fabric/ibnetdiscover.h"

namespace gpool::control {

std::map<std::string, std::set<std::string>> TenantNodes(const std::vector<JobNodes>& jobs) {
  std::map<std::string, std::set<std::string>> out;
  for (const JobNodes& j : jobs) {
    std::set<std::string>& s = out[j.tenant];
    s.insert(j.nodes.begin(), j.nodes.end());
    for (const RemoteFlow& f : j.remote) s.insert(f.lender);
  }
  return out;
}

FabricMonitor::FabricMonitor(Controller* controller, FabricMonitorOptions options)
    : controller_(controller), options_(std::move(options)) {
  if (!options_.partitions_path.empty()) {
    if (options_.qos_policy_path.empty()) options_.qos_policy_path = options_.partitions_path + ".qos-policy";
    if (options_.opensm_conf_path.empty()) options_.opensm_conf_path = options_.partitions_path + ".opensm.conf";
    options_.partitions.partitions_path = options_.partitions_path;
    options_.partitions.qos_policy_path = options_.qos_policy_path;
  }
}

FabricMonitor::~FabricMonitor() { Stop(); }

Status FabricMonitor::SweepOnce() {
  FabricView* view = controller_->fabric().get();
  if (view == nullptr) return Status::FailedPrecondition("fabric sweep: the controller has no --fabric");
  view->TrackJobs(RunningJobNodes(controller_));
  if (options_.sweep_command.empty()) {
    view->Tick();
    return Status::Ok();
  }
  FILE* p = ::popen(options_.sweep_command.c_str(), "r");
  if (p == nullptr) {
    return Status::Unavailable(fmt::format("fabric sweep '{}': cannot start", options_.sweep_command));
  }
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  int rc = ::pclose(p);
  if (rc != 0) {
    return Status::Unavailable(fmt::format("fabric sweep '{}': exit status {}; state unchanged",
                                           options_.sweep_command,
                                           WIFEXITED(rc) ? WEXITSTATUS(rc) : rc));
  }
  fabric::NetParseOptions po;
  po.source_name = "sweep";
  po.assign_lids = false;
  auto live = fabric::ParseNet(text, po);
  if (!live.ok()) {
    return live.status().WithContext(fmt::format("fabric sweep '{}' (state unchanged)", options_.sweep_command));
  }
  return view->ObserveDiscovered(*live);
}

Status FabricMonitor::Signal() {
  if (options_.opensm_pid.empty()) return Status::Ok();
  std::string text = options_.opensm_pid;
  if (text.find_first_not_of("0123456789") != std::string::npos) {
    GPOOL_ASSIGN_OR_RETURN(text, ReadFile(options_.opensm_pid));
  }
  long pid = 0;
  try {
    pid = std::stol(std::string(Trim(text)));
  } catch (const std::exception&) {
    pid = 0;
  }
  if (pid <= 1) {
    return Status::InvalidArgument(fmt::format("--opensm-pid {}: no valid pid in '{}'", options_.opensm_pid, Trim(text)));
  }
  if (::kill(static_cast<pid_t>(pid), SIGHUP) != 0) {
    return Status::Unavailable(fmt::format("--opensm-pid: SIGHUP to {} failed: {}", pid, std::strerror(errno)));
  }
  return Status::Ok();
}

Status FabricMonitor::SyncPartitionsOnce(bool* changed) {
  if (changed != nullptr) *changed = false;
  if (options_.partitions_path.empty()) return Status::Ok();
  FabricView* view = controller_->fabric().get();
  if (view == nullptr) return Status::FailedPrecondition("partitions: the controller has no --fabric");
  std::map<std::string, std::set<std::string>> nodes_of = TenantNodes(RunningJobNodes(controller_));
  // Tenants with quotas get their (possibly empty) partition too, so their P_Key exists.
  const v1::ListTenantsResponse known = controller_->ListTenants();
  for (const v1::Tenant& t : known.tenants()) nodes_of[t.name()];
  std::vector<TenantPorts> tenants;
  for (const auto& [tenant, nodes] : nodes_of) {
    TenantPorts tp{.tenant = tenant, .port_guids = {}};
    for (const std::string& n : nodes) {
      for (uint64_t g : view->HostPortGuids(n)) tp.port_guids.push_back(g);
    }
    tenants.push_back(std::move(tp));
  }
  GPOOL_ASSIGN_OR_RETURN(PartitionPlan plan, PlanPartitions(tenants, options_.partitions));
  if (plan.partitions_conf == last_partitions_ && plan.qos_policy == last_qos_ && plan.opensm_conf == last_conf_) {
    return Status::Ok();
  }
  // The policy and opensm.conf first: OpenSM rereads all of them on the signal.
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(options_.qos_policy_path, plan.qos_policy));
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(options_.opensm_conf_path, plan.opensm_conf));
  GPOOL_RETURN_IF_ERROR(WriteFileAtomic(options_.partitions_path, plan.partitions_conf));
  if (changed != nullptr) *changed = true;
  // Remembered only once OpenSM was told, so a failed signal (OpenSM not started yet) is
  // retried on the next pass.
  GPOOL_RETURN_IF_ERROR(Signal());
  last_partitions_ = plan.partitions_conf;
  last_qos_ = plan.qos_policy;
  last_conf_ = plan.opensm_conf;
  return Status::Ok();
}

void FabricMonitor::Start() {
  stop_ = false;
  loop_ = std::thread([this] {
    while (!stop_) {
      Status s = SweepOnce();
      if (!s.ok()) GPOOL_LOG_WARN("{}", s.ToString());
      s = SyncPartitionsOnce();
      if (!s.ok()) GPOOL_LOG_WARN("partitions: {}", s.ToString());
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, options_.interval, [this] { return stop_.load(); });
    }
  });
}

void FabricMonitor::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (loop_.joinable()) loop_.join();
}

}  // namespace gpool::control
