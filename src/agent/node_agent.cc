#include "agent/node_agent.h"

#include <unistd.h>

#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>

#include "agent/gpu_server.h"
#include "agent/nvml.h"
#include "agent/proc.h"
#include "agent/protocol.h"
#include "agent/task_runner.h"
#include "agent/topology.h"
#include "agent/verbs.h"
#include "common/log.h"

namespace gpool::agent {
namespace {

using Clock = std::chrono::steady_clock;

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  std::string s = buf;
  size_t dot = s.find('.');
  return dot == std::string::npos ? s : s.substr(0, dot);
}

std::string DefaultClientLibDir() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path().parent_path() / "lib").string();
}

std::string Replace(std::string s, const std::string& what, const std::string& with) {
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + with.size())) {
    s.replace(p, what.size(), with);
  }
  return s;
}

class RealNode : public NodeDriver {
 public:
  RealNode(const NodeAgentOptions& o, Inventory inv, std::unique_ptr<GpuSource> gpus,
           GpuServerSupervisor* server)
      : o_(o), inv_(std::move(inv)), gpus_(std::move(gpus)), server_(server),
        tasks_({.log_dir = o.log_dir, .kill_grace = o.kill_grace}),
        power_({.log_dir = o.log_dir + "/power", .kill_grace = o.kill_grace}),
        cpu_(o.proc_dir) {
    (void)cpu_.Sample();  // baseline for the first heartbeat's utilization
    env_.node = o.name;
    env_.client_lib_dir = o.client_lib_dir;
    for (const GpuInfo& g : inv_.gpus) env_.gpu_uuids.push_back(g.uuid);
    base_env_ = CurrentEnvironment();
  }

  const std::string& name() const override { return o_.name; }

  void FillRegister(v1::Node* node) override {
    FillNodeSpec(inv_, o_, node);
    off_ = false;
  }

  void Tick() override {
    if (server_) server_->Poll();
    for (const TaskExit& e : tasks_.Poll()) {
      v1::TaskRef r;
      r.set_job_id(e.key.first);
      r.set_task(e.key.second);
      r.set_attempt(started_[e.key]);
      r.set_exit_code(e.exit_code);
      r.set_signal(e.signal);
      finished_.push_back(r);
    }
    for (const TaskExit& e : power_.Poll()) {
      if (e.exit_code != 0 || e.signal != 0) {
        GPOOL_LOG_WARN("power command {} failed: exit {} signal {} (see {})", e.key.first, e.exit_code,
                       e.signal, power_.LogPath(e.key, "err"));
      }
    }
  }

  void FillHeartbeat(v1::HeartbeatRequest* req) override {
    if (gpus_) {
      for (const GpuSample& s : gpus_->Sample()) {
        v1::GpuTelemetry* t = req->add_telemetry();
        t->set_index(s.index);
        t->set_utilization(s.utilization);
        t->set_memory_used_bytes(s.memory_used_bytes);
        t->set_memory_total_bytes(s.memory_total_bytes);
        t->set_temperature_c(s.temperature_c);
        t->set_power_w(s.power_w);
      }
    }
    if (auto u = cpu_.Sample(); u.ok()) req->set_cpu_utilization(*u);
    if (auto m = ReadMemInfo(o_.proc_dir); m.ok()) req->set_memory_available_bytes(m->available_bytes);
    for (const auto& f : finished_) *req->add_finished() = f;
    req->set_powered_off(off_);
  }

  void OnHeartbeatResponse(const v1::HeartbeatResponse& resp) override {
    finished_.clear();
    std::set<TaskKey> listed;
    for (const v1::TaskAssignment& t : resp.tasks()) {
      TaskKey key{t.job_id(), t.task()};
      listed.insert(key);
      auto have = started_.find(key);
      if (have != started_.end()) {
        if (have->second == t.attempt()) continue;  // running, or ended and being reported
        // Re-bound here (a new attempt): the old process goes first, the new one starts once
        // it is gone (a later heartbeat).
        if (tasks_.running(key)) {
          tasks_.Stop(key);
          continue;
        }
      }
      started_[key] = t.attempt();
      std::vector<std::string> argv(t.command().begin(), t.command().end());
      Status s = tasks_.Start(key, argv, BuildTaskEnv(t, env_, base_env_));
      if (!s.ok()) {
        GPOOL_LOG_ERROR("task {}.{}: {}", key.first, key.second, s.ToString());
        v1::TaskRef r;
        r.set_job_id(key.first);
        r.set_task(key.second);
        r.set_attempt(t.attempt());
        r.set_exit_code(126);
        finished_.push_back(r);
      }
    }
    for (const TaskKey& k : tasks_.keys()) {
      if (!listed.count(k)) tasks_.Stop(k);
    }
    // Forget tasks the controller no longer lists and that are gone.
    std::erase_if(started_, [&](const auto& kv) { return !listed.count(kv.first) && !tasks_.running(kv.first); });

    if (resp.power_action() == "suspend" && !off_) {
      off_ = true;
      if (o_.suspend_cmd.empty()) {
        GPOOL_LOG_WARN("suspend: no --suspend-cmd, so the node only reports itself off");
      } else {
        GPOOL_LOG_INFO("suspend: running {}", o_.suspend_cmd);
        RunPower("suspend", o_.suspend_cmd, o_.name);
      }
    } else if (resp.power_action() == "resume" && off_) {
      GPOOL_LOG_INFO("resume: this node is running; reporting it on");
      off_ = false;
    }
    for (const std::string& node : resp.resume_nodes()) {
      if (o_.resume_cmd.empty()) break;
      auto it = resumed_.find(node);
      if (it != resumed_.end() && Clock::now() - it->second < std::chrono::seconds(60)) continue;
      resumed_[node] = Clock::now();
      GPOOL_LOG_INFO("resume {}: running {}", node, o_.resume_cmd);
      RunPower("resume-" + node, Replace(o_.resume_cmd, "{node}", node), node);
    }
  }

 private:
  void RunPower(const std::string& what, const std::string& cmd, const std::string& node) {
    std::vector<std::string> env = base_env_;
    env.push_back("GPOOL_POWER_NODE=" + node);
    TaskKey key{what, ++power_seq_};
    Status s = power_.Start(key, {"/bin/sh", "-c", cmd}, env);
    if (!s.ok()) GPOOL_LOG_ERROR("power command {}: {}", what, s.ToString());
  }

  const NodeAgentOptions& o_;
  Inventory inv_;
  std::unique_ptr<GpuSource> gpus_;
  GpuServerSupervisor* server_;  // null without --serve-gpus
  TaskRunner tasks_;
  TaskRunner power_;
  int power_seq_ = 0;
  CpuSampler cpu_;
  TaskEnvOptions env_;
  std::vector<std::string> base_env_;
  std::map<TaskKey, int> started_;   // attempt started (or failed to start), while listed or running
  std::vector<v1::TaskRef> finished_;
  std::map<std::string, Clock::time_point> resumed_;
  bool off_ = false;
};

// The agent's log level, for its GPU server (spdlog's names; --log-level takes them).
std::string LevelName() {
  auto name = spdlog::level::to_string_view(spdlog::get_level());
  return std::string(name.data(), name.size());
}

NodeAgentOptions WithDefaults(NodeAgentOptions o) {
  if (o.name.empty()) o.name = HostName();
  if (o.log_dir.empty()) o.log_dir = fmt::format("/tmp/gpool-agent-{}/logs", o.name);
  if (o.client_lib_dir.empty()) o.client_lib_dir = DefaultClientLibDir();
  if (o.gpool_exe.empty()) {
    std::error_code ec;
    o.gpool_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  }
  return o;
}

}  // namespace

std::unique_ptr<GpuSource> MakeGpuSource(const NodeAgentOptions& o, std::string* why) {
  if (o.emulated_gpus > 0) {
    return std::make_unique<EmulatedGpus>(o.emulated_gpus, o.emulated_gpu_model, o.emulated_gpu_memory_bytes);
  }
  return OpenNvml(why);
}

StatusOr<Inventory> Discover(const NodeAgentOptions& o, GpuSource* gpus, HcaSource* hcas) {
  Inventory inv;
  inv.gpu_source = gpus ? gpus->kind() : "none";
  if (gpus) {
    GPOOL_ASSIGN_OR_RETURN(inv.gpus, gpus->List());
    if (inv.gpus.size() > 16) {
      return Status::Unimplemented(fmt::format("{} GPUs: a node has at most 16", inv.gpus.size()));
    }
  }
  if (hcas) {
    GPOOL_ASSIGN_OR_RETURN(inv.hcas, hcas->List());
  }
  if (!inv.gpus.empty()) {
    auto a = ComputeAffinity({.xml_path = o.hwloc_xml}, inv.gpus);
    if (a.ok()) {
      inv.affinity = std::move(*a);
    } else if (!o.hwloc_xml.empty()) {
      return a.status();  // a fixture the user named must load
    } else {
      GPOOL_LOG_WARN("GPU-HCA affinity unknown: {}", a.status().ToString());
    }
  }
  GPOOL_ASSIGN_OR_RETURN(CpuInfo cpu, ReadCpuInfo(o.proc_dir));
  GPOOL_ASSIGN_OR_RETURN(MemInfo mem, ReadMemInfo(o.proc_dir));
  inv.logical_cpus = cpu.logical_cpus;
  inv.cpu_model = cpu.model;
  inv.memory_bytes = mem.total_bytes;
  return inv;
}

void FillNodeSpec(const Inventory& inv, const NodeAgentOptions& o, v1::Node* n) {
  n->set_name(o.name);
  n->set_gpus(static_cast<int32_t>(inv.gpus.size()));
  n->set_gpu_model(inv.gpus.empty() ? "" : inv.gpus[0].name);
  n->set_gpu_memory_bytes(inv.gpus.empty() ? 0 : inv.gpus[0].memory_bytes);
  n->set_cpu_milli(int64_t{inv.logical_cpus} * 1000);
  n->set_memory_bytes(inv.memory_bytes);
  n->set_emulated_gpus(inv.gpu_source == "emulated");
  n->set_power_proxy(!o.resume_cmd.empty());
  n->set_gpu_server(o.gpu_server);
  n->clear_gpu_uuids();
  for (const GpuInfo& g : inv.gpus) n->add_gpu_uuids(g.uuid);
  n->clear_hcas();
  for (const HcaPortInfo& h : inv.hcas) {
    v1::Hca* x = n->add_hcas();
    x->set_device(h.device);
    x->set_port(h.port);
    x->set_guid(h.guid);
    x->set_lid(h.lid);
    x->set_rate(h.rate);
    x->set_rate_gbps(h.rate_gbps);
    x->set_state(h.state);
  }
  n->clear_affinity();
  for (const AffinityInfo& a : inv.affinity) {
    v1::GpuAffinity* x = n->add_affinity();
    x->set_gpu(a.gpu);
    x->set_hca(a.hca);
    x->set_distance(a.distance);
    x->set_numa_node(a.numa_node);
    x->set_pci_bus_id(a.pci_bus_id);
  }
}

StatusOr<std::string> DiscoverJson(const NodeAgentOptions& options) {
  NodeAgentOptions o = WithDefaults(options);
  std::string why;
  std::unique_ptr<GpuSource> gpus = MakeGpuSource(o, &why);
  if (!gpus) GPOOL_LOG_INFO("no GPUs: {}", why);
  VerbsHcas hcas;
  GPOOL_ASSIGN_OR_RETURN(Inventory inv, Discover(o, gpus.get(), &hcas));
  v1::Node n;
  FillNodeSpec(inv, o, &n);
  if (gpus) {
    for (const GpuSample& s : gpus->Sample()) {
      v1::GpuTelemetry* t = n.add_telemetry();
      t->set_index(s.index);
      t->set_utilization(s.utilization);
      t->set_memory_used_bytes(s.memory_used_bytes);
      t->set_memory_total_bytes(s.memory_total_bytes);
      t->set_temperature_c(s.temperature_c);
      t->set_power_w(s.power_w);
    }
  }
  std::string out;
  google::protobuf::util::JsonPrintOptions jo;
  jo.preserve_proto_field_names = true;
  jo.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(n, &out, jo);
  return out;
}

Status RunNodeAgent(const NodeAgentOptions& options, const std::atomic<bool>* stop) {
  if (options.emulated_gpus < 0 || options.emulated_gpus > 16) {
    return Status::InvalidArgument(fmt::format("--emulated-gpus: must be 0..16, got {}", options.emulated_gpus));
  }
  if (!options.serve_gpus) {
    for (const auto& [flag, value] : {std::pair{"--gpu-server-listen", &options.gpu_server_listen},
                                      {"--lease-key", &options.lease_key_file},
                                      {"--emulated-kernels", &options.emulated_kernels},
                                      {"--emulated-launch-log", &options.emulated_launch_log}}) {
      if (!value->empty()) return Status::InvalidArgument(fmt::format("{}: needs --serve-gpus", flag));
    }
  }
  NodeAgentOptions o = WithDefaults(options);
  std::string why;
  std::unique_ptr<GpuSource> gpus = MakeGpuSource(o, &why);
  if (!gpus) GPOOL_LOG_INFO("no GPUs: {}", why);
  VerbsHcas hcas;
  GPOOL_ASSIGN_OR_RETURN(Inventory inv, Discover(o, gpus.get(), &hcas));
  GPOOL_LOG_INFO("agent {}: {} GPUs ({}), {} HCA ports, {} CPUs, {} MiB; task logs in {}", o.name,
                 inv.gpus.size(), inv.gpu_source, inv.hcas.size(), inv.logical_cpus,
                 inv.memory_bytes >> 20, o.log_dir);
  // Declared before the node so it outlives it: stopped after the node's tasks are.
  std::unique_ptr<GpuServerSupervisor> server;
  if (o.serve_gpus) {
    if (inv.gpus.empty()) {
      return Status::FailedPrecondition(fmt::format(
          "--serve-gpus: node {} has no GPUs to serve ({})", o.name, why.empty() ? "none found" : why));
    }
    GPOOL_ASSIGN_OR_RETURN(std::vector<std::string> args,
                           GpuServerArgs({.listen = o.gpu_server_listen,
                                          .advertise = o.gpu_server,
                                          .lease_key_file = o.lease_key_file,
                                          .emulated_gpus = o.emulated_gpus,
                                          .emulated_memory_bytes = o.emulated_gpu_memory_bytes,
                                          .emulated_kernels = o.emulated_kernels,
                                          .emulated_launch_log = o.emulated_launch_log,
                                          .log_level = LevelName()}));
    server = std::make_unique<GpuServerSupervisor>(SupervisorOptions{
        .exe = o.gpool_exe,
        .args = std::move(args),
        .listen = !o.gpu_server_listen.empty() ? o.gpu_server_listen
                  : !o.gpu_server.empty()       ? o.gpu_server
                                                : "127.0.0.1:0",
        .log_dir = o.log_dir});
    GPOOL_RETURN_IF_ERROR(server->Start(std::chrono::seconds(30)));
    if (o.gpu_server.empty()) o.gpu_server = server->address();
    GPOOL_LOG_INFO("agent {}: serving its GPUs at {}", o.name, o.gpu_server);
  }
  RealNode node(o, std::move(inv), std::move(gpus), server.get());
  return RunNodeLoop({.controller = o.controller,
                      .heartbeat_interval = o.heartbeat_interval,
                      .token = o.token,
                      .tls_ca_file = o.tls_ca_file},
                     {&node}, stop);
}

}  // namespace gpool::agent
