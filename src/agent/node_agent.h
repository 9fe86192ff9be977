// The real node agent: discovers this machine (inventory.h), registers it with the controller,
// heartbeats telemetry, runs the tasks bound to it (task_runner.h) and applies power actions.
//
// Discovery: GPUs from NVML (absent driver = no GPUs) or `--emulated-gpus N` (declared devices,
// no hardware: tasks get CUDA_VISIBLE_DEVICES like real ones; for tests and CI); HCAs from
// libibverbs; GPU-to-HCA affinity from hwloc; CPUs and memory from /proc. A machine with no GPU
// registers with 0 GPUs: it shows in `gpool nodes` but gets no GPU jobs.
//
// GPU server (--serve-gpus): the agent starts `gpool gpu-server` for this node's GPUs before it
// registers, advertises its address, restarts it when it dies and stops it when the agent stops
// (gpu_server.h).
//
// Tasks: a listed task that is not running is started; a running task no longer listed
// (cancelled, preempted, its gang failed) is stopped: SIGTERM to its process group, SIGKILL
// after kill_grace. Exits are reported with their exit status; the controller fails the job
// on a non-zero one. When the agent stops, its tasks are killed.
//
// Power: "suspend" runs --suspend-cmd (sh -c) and the agent then reports powered_off (without a
// command it only reports it: the node is idle and out of scheduling, not switched off).
// "resume" while still running clears it. With --resume-cmd the agent is a power proxy: it runs
// the command for other nodes the controller resumes ({node} in the command is replaced by the
// node name; GPOOL_POWER_NODE is set too), e.g. `ipmitool -H {node}-bmc chassis power on`,
// at most once per node every 60 s.
//
// Thread safety: RunNodeAgent blocks its thread; everything runs on it.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "agent/inventory.h"
#include "common/status.h"
#include "gpool/v1/gpool.pb.h"

namespace gpool::agent {

struct NodeAgentOptions {
  std::string controller = "127.0.0.1:7070";
  std::string name;                  // default: the host name
  std::chrono::milliseconds heartbeat_interval{500};
  int emulated_gpus = 0;             // > 0: declare this many emulated GPUs instead of NVML
  std::string emulated_gpu_model = "emulated";
  uint64_t emulated_gpu_memory_bytes = 80ull << 30;
  std::string log_dir;               // task logs; default /tmp/gpool-agent-<name>/logs
  std::string hwloc_xml;             // affinity from this hwloc XML instead of the live machine
  std::string proc_dir = "/proc";
  std::chrono::milliseconds kill_grace{10000};
  std::string suspend_cmd, resume_cmd;
  std::string client_lib_dir;        // for remote/fractional tasks; default <exe>/../lib
  std::string gpu_server;            // HOST:PORT of this node's `gpool gpu-server`, advertised
                                     // so the controller can issue leases for its GPUs
  // --serve-gpus: the agent runs that GPU server itself (gpu_server.h) for this node's GPUs and
  // advertises its address (gpu_server, when given, is then the server's --advertise).
  bool serve_gpus = false;
  std::string gpu_server_listen;     // where it listens; default gpu_server, else 127.0.0.1:0
  std::string lease_key_file;        // the controller's --lease-key file (required to serve)
  std::string emulated_kernels;      // emulated GPUs: the server's kernel plugin (.so)
  std::string emulated_launch_log;   // emulated GPUs: the server's launch log (tests)
  std::string gpool_exe;             // the program run as `gpool gpu-server`; default this one
  std::string token;                 // cluster (agent) token; empty = none
  std::string tls_ca_file;           // PEM roots for a TLS controller; empty = plaintext
};

struct Inventory {
  std::string gpu_source;            // "nvml", "emulated", "none"
  std::vector<GpuInfo> gpus;
  std::vector<HcaPortInfo> hcas;
  std::vector<AffinityInfo> affinity;
  int logical_cpus = 0;
  std::string cpu_model;
  uint64_t memory_bytes = 0;
};

// Discovers with the given sources (gpus may be null: none). Affinity errors are logged and
// leave it empty; a machine without /proc data is an error.
StatusOr<Inventory> Discover(const NodeAgentOptions& options, GpuSource* gpus, HcaSource* hcas);
// The Register message for an inventory.
void FillNodeSpec(const Inventory& inv, const NodeAgentOptions& options, v1::Node* node);
// The GPU source the options ask for: emulated, NVML, or null (none; *why says why).
std::unique_ptr<GpuSource> MakeGpuSource(const NodeAgentOptions& options, std::string* why);

// `gpool agent --discover`: prints the inventory as JSON (the Node message) and returns.
StatusOr<std::string> DiscoverJson(const NodeAgentOptions& options);

Status RunNodeAgent(const NodeAgentOptions& options, const std::atomic<bool>* stop);

}  // namespace gpool::agent
