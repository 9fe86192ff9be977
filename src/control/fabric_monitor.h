// FabricMonitor: the controller's fabric loop (`gpool controller --fabric ... --fabric-sweep`).
//
// Every interval it
//   1. tracks the running jobs' routes (FabricView::TrackJobs), so a failure is attributed to
//      the jobs whose traffic was on it before the re-route;
//   2. with a sweep command: runs it (sh -c; its stdout must be ibnetdiscover's format, e.g.
//      `timeout 10 ibnetdiscover`, under umad2sim on ibsim) and feeds the discovered fabric to
//      FabricView::ObserveDiscovered (missing links/switches are down, present ones up; damping
//      in the view). A sweep that fails (exit status, parse error) changes nothing and is logged:
//      an unreachable SM port must not look like a dead fabric;
//   3. with partitions on: generates partitions.conf, the QoS policy and opensm.conf's QoS keys
//      from the tenants of the running jobs and their nodes' port GUIDs (partitions.h; a job's
//      nodes include those lending it GPUs, whose GPU servers its tasks talk to), and when
//      they changed writes them atomically (WriteFileAtomic) and sends SIGHUP to OpenSM (its pid
//      given directly or read from a pid file), so membership follows job start and end within
//      one interval.
//
// Thread safety: Start/Stop from one thread; SweepOnce/SyncPartitionsOnce are also called by
// tests directly (not concurrently with a started loop).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "control/controller.h"
#include "control/fabric_view.h"
#include "control/partitions.h"

namespace gpool::control {

// Tenant -> the nodes its running jobs hold: their tasks' nodes and the nodes lending them GPUs
// (remote attachment). What the partitions are made of.
std::map<std::string, std::set<std::string>> TenantNodes(const std::vector<JobNodes>& jobs);

struct FabricMonitorOptions {
  std::chrono::milliseconds interval{1000};
  std::string sweep_command;        // empty: no discovery sweep
  // Partitions and QoS: off when partitions_path is empty.
  std::string partitions_path;
  std::string qos_policy_path;      // default: partitions_path + ".qos-policy"
  std::string opensm_conf_path;     // default: partitions_path + ".opensm.conf"
  std::string opensm_pid;           // a pid, or a file holding one; empty: no signal
  PartitionOptions partitions;      // the paths in it are filled from the above
};

class FabricMonitor {
 public:
  FabricMonitor(Controller* controller, FabricMonitorOptions options);
  ~FabricMonitor();

  // One discovery sweep. Errors name the command (exit status, parse error at line N).
  Status SweepOnce();
  // Regenerates the partition files; writes and signals only when their content changed (or the
  // last signal failed). A pid file that does not exist yet is NotFound.
  // *changed (optional) says whether it did.
  Status SyncPartitionsOnce(bool* changed = nullptr);

  void Start();
  void Stop();

 private:
  Status Signal();

  Controller* controller_;
  FabricMonitorOptions options_;
  std::string last_partitions_, last_qos_, last_conf_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
  std::thread loop_;
};

}  // namespace gpool::control
