// The cluster's daemons: `gpool controller` and `gpool agent` (docs/control-plane.md,
// docs/cli.md). Their clients (submit, jobs, nodes, tenants, top) are in jobs_cmd.cc.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "agent/hollow.h"
#include "agent/node_agent.h"
#include "cli/cluster_common.h"
#include "cli/command.h"
#include "cli/fabric_ctl.h"
#include "common/log.h"
#include "common/units.h"
#include "control/api.h"
#include "control/auth.h"
#include "control/controller.h"
#include "control/tenant_limits.h"
#include "remote/lease/lease.h"

namespace gpool::cli {
namespace {

struct ClusterFlags : AuthFlags {
  std::string controller = "127.0.0.1:7070";
  // controller auth / TLS / policy
  std::string auth_tokens, tls_cert, tls_key, lease_key_file, lost_node_policy = "requeue";
  int node_settle_ms = 0;
  // controller
  std::string store, listen = "127.0.0.1:7070", http, fabric, policy_config, advertise;
  int lease_ttl_s = 2;
  ControllerFabricFlags fabric_flags;  // --fabric and friends (fabric_ctl.h)
  std::vector<std::string> quotas;
  std::vector<std::string> max_gpus;  // --max-gpus TENANT=GPUS (tenant_limits.h)
  int interval_ms = 200;
  // Retention (controller.h): -1 / "0" turn a bound off.
  int64_t keep_finished_jobs = 10000, archive_max_jobs = 100000;
  std::string keep_finished_for = "24h";
  int node_timeout_ms = 10000;
  int http_request_timeout_ms = 10000, http_max_connections = 512, http_max_per_peer = 64;
  bool metrics_public = false;  // controller: HTTP /metrics without a token
  // agent
  int hollow = 0, gpus_per_node = 8, heartbeat_ms = 500, boot_ms = 2000;
  std::string prefix = "hollow", gpu_model = "H100";
  agent::NodeAgentOptions real;  // the real agent (without --hollow)
  std::string emulated_gpu_memory;  // --emulated-gpu-memory SIZE ("" = the default)
  int kill_grace_ms = 10000;
  bool discover = false;
};

Status RunController(const ClusterFlags& f) {
  if (f.store.empty()) return Status::InvalidArgument("--store: required, e.g. sqlite:PATH");
  control::ControllerOptions o;
  o.store_url = f.store;
  o.schedule_interval = std::chrono::milliseconds(f.interval_ms);
  o.node_timeout = std::chrono::milliseconds(f.node_timeout_ms);
  o.policy_config = f.policy_config;
  o.node_settle = std::chrono::milliseconds(f.node_settle_ms);
  GPOOL_ASSIGN_OR_RETURN(o.lost_node_policy, control::ParseLostNodePolicy(f.lost_node_policy));
  if (!f.lease_key_file.empty()) {
    GPOOL_ASSIGN_OR_RETURN(o.lease_key, remote::LoadLeaseKey(f.lease_key_file));
  }
  std::optional<control::TokenAuth> auth;
  if (!f.auth_tokens.empty()) {
    GPOOL_ASSIGN_OR_RETURN(auth, control::TokenAuth::Load(f.auth_tokens));
  }
  for (const std::string& q : f.quotas) {
    size_t eq = q.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument(fmt::format("--quota: want TENANT=GPUS, got '{}'", q));
    }
    GPOOL_RETURN_IF_ERROR(ValidateName("--quota: TENANT", q.substr(0, eq)));
    try {
      o.tenant_quotas[q.substr(0, eq)] = std::stoll(q.substr(eq + 1));
    } catch (const std::exception&) {
      return Status::InvalidArgument(fmt::format("--quota: bad GPU count in '{}'", q));
    }
  }
  GPOOL_RETURN_IF_ERROR(control::ParseTenantGpus("--max-gpus", f.max_gpus, &o.tenant_max_gpus));
  if (f.lease_ttl_s < 1) return Status::InvalidArgument("--lease-ttl-s: must be >= 1");
  o.lease_ttl_s = f.lease_ttl_s;
  o.keep_finished_jobs = f.keep_finished_jobs;
  o.archive_max_jobs = f.archive_max_jobs;
  {
    auto keep_for = ParseDurationSeconds(f.keep_finished_for);
    if (!keep_for.ok()) return keep_for.status().WithContext("--keep-finished-for");
    o.keep_finished_for = std::chrono::milliseconds(static_cast<int64_t>(*keep_for * 1000));
  }
  GPOOL_ASSIGN_OR_RETURN(o.fabric, OpenControllerFabric(f.fabric_flags));
  GPOOL_ASSIGN_OR_RETURN(auto controller, control::Controller::Open(o));
  control::ApiServer api(controller.get());
  control::ApiOptions ao;
  ao.grpc_listen = f.listen;
  ao.http_listen = f.http;
  ao.auth = auth ? &*auth : nullptr;
  ao.metrics_public = f.metrics_public;
  if (f.http_request_timeout_ms < 1 || f.http_max_connections < 1 || f.http_max_per_peer < 1) {
    return Status::InvalidArgument(
        "--http-request-timeout-ms, --http-max-connections, --http-max-connections-per-peer: "
        "must be >= 1");
  }
  ao.http_limits.request_timeout = std::chrono::milliseconds(f.http_request_timeout_ms);
  ao.http_limits.max_connections = static_cast<size_t>(f.http_max_connections);
  ao.http_limits.max_connections_per_peer = static_cast<size_t>(f.http_max_per_peer);
  ao.tls_cert_file = f.tls_cert;
  ao.tls_key_file = f.tls_key;
  if (!auth) GPOOL_LOG_WARN("no --auth-tokens: the gRPC and HTTP APIs are open to anyone who can reach them");
  InstallStopSignals();
  GPOOL_RETURN_IF_ERROR(api.Start(ao));
  std::string host;
  int port = 0;
  GPOOL_RETURN_IF_ERROR(control::ParseHostPort("--listen", f.listen, &host, &port));
  // HA: standbys send clients to this address while this controller leads.
  controller->SetAdvertiseAddress(f.advertise.empty() ? fmt::format("{}:{}", host, api.grpc_port())
                                                      : f.advertise);
  controller->Start();
  GPOOL_ASSIGN_OR_RETURN(auto fabric_monitor, StartFabricMonitor(controller.get(), f.fabric_flags));
  std::printf("gpool controller: grpc %s:%d", host.c_str(), api.grpc_port());
  if (api.http_port() > 0) {
    std::string hh;
    int hp = 0;
    GPOOL_RETURN_IF_ERROR(control::ParseHostPort("--http", f.http, &hh, &hp));
    std::printf(" http http://%s:%d/", hh.c_str(), api.http_port());
  }
  std::printf("\n");
  std::fflush(stdout);
  while (!g_cluster_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (fabric_monitor) fabric_monitor->Stop();
  controller->Stop();
  api.Shutdown();
  return Status::Ok();
}

Status RunAgent(const ClusterFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("--name", f.real.name));
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("--prefix", f.prefix));  // nodes are PREFIX-0000...
  if (f.hollow < 1 && f.fabric.empty()) {
    agent::NodeAgentOptions r = f.real;
    r.controller = f.controller;
    r.heartbeat_interval = std::chrono::milliseconds(f.heartbeat_ms);
    r.kill_grace = std::chrono::milliseconds(f.kill_grace_ms);
    GPOOL_ASSIGN_OR_RETURN(r.token, control::ResolveToken(f.token, f.token_file));
    r.tls_ca_file = f.tls_ca;
    if (!f.emulated_gpu_memory.empty()) {
      auto bytes = ParseBytes(f.emulated_gpu_memory);
      if (!bytes.ok()) {
        return Status::InvalidArgument(
            fmt::format("--emulated-gpu-memory: {}", bytes.status().message()));
      }
      r.emulated_gpu_memory_bytes = *bytes;
    }
    if (f.discover) {
      GPOOL_ASSIGN_OR_RETURN(std::string json, agent::DiscoverJson(r));
      std::printf("%s\n", json.c_str());
      return Status::Ok();
    }
    InstallStopSignals();
    return agent::RunNodeAgent(r, &g_cluster_stop);
  }
  agent::HollowOptions o;
  o.controller = f.controller;
  o.nodes = f.hollow;
  o.gpus_per_node = f.gpus_per_node;
  o.name_prefix = f.prefix;
  o.gpu_model = f.gpu_model;
  o.heartbeat_interval = std::chrono::milliseconds(f.heartbeat_ms);
  GPOOL_ASSIGN_OR_RETURN(o.token, control::ResolveToken(f.token, f.token_file));
  o.tls_ca_file = f.tls_ca;
  o.boot_latency = std::chrono::milliseconds(f.boot_ms);
  o.gpu_server = f.real.gpu_server;  // hollow: advertised by every node, nothing behind it
  if (!f.fabric.empty()) {  // node names = the fabric's hosts (the first --hollow N; 0 = all)
    GPOOL_ASSIGN_OR_RETURN(o.names, FabricHostNames(f.fabric));
  }
  InstallStopSignals();
  return agent::RunHollowAgent(o, &g_cluster_stop);
}

void RegisterCluster(CLI::App& app, const GlobalFlags&, int* exit_code) {
  auto f = std::make_shared<ClusterFlags>();
  auto run = [f, exit_code](const char* name, auto fn) {
    return [f, exit_code, name, fn] {
      Status s = fn(*f);
      if (!s.ok()) {
        std::fprintf(stderr, "gpool %s: %s\n", name, s.ToString().c_str());
        *exit_code = 1;
      }
    };
  };

  CLI::App* ctl = app.add_subcommand("controller", "run the control plane (gRPC + HTTP)");
  ctl->add_option("--store", f->store,
                  "state store URL, sqlite:PATH or etcd://HOST:PORT[,HOST:PORT...] (HA)")->required();
  ctl->add_option("--advertise", f->advertise,
                  "HA: HOST:PORT standbys send clients to while this one leads (default: --listen)");
  ctl->add_option("--lease-ttl-s", f->lease_ttl_s, "HA: leader lease TTL in seconds (default 2)");
  ctl->add_option("--listen", f->listen, "gRPC HOST:PORT (default 127.0.0.1:7070; port 0 = any)");
  ctl->add_option("--http", f->http, "HTTP HOST:PORT for /metrics and /api/state");
  ctl->add_option("--http-request-timeout-ms", f->http_request_timeout_ms,
                  "HTTP: a request must arrive whole, and its response be read, within this "
                  "(also the keep-alive idle limit; default 10000)");
  ctl->add_option("--http-max-connections", f->http_max_connections,
                  "HTTP: open connections in total (default 512)");
  ctl->add_option("--http-max-connections-per-peer", f->http_max_per_peer,
                  "HTTP: open connections per client address; the oldest idle one makes room "
                  "(default 64)");
  AddControllerFabricFlags(ctl, &f->fabric_flags);
  ctl->add_option("--quota", f->quotas, "TENANT=GPUS guaranteed quota (repeatable)");
  ctl->add_option("--max-gpus", f->max_gpus,
                  "TENANT=GPUS: the most GPUs the tenant's jobs may hold at once (repeatable; "
                  "default no cap); a job asking more is refused");
  ctl->add_option("--interval-ms", f->interval_ms, "scheduling interval (default 200)");
  ctl->add_option("--node-timeout-ms", f->node_timeout_ms, "heartbeat timeout (default 10000)");
  ctl->add_option("--node-settle-ms", f->node_settle_ms,
                  "a node back from down is schedulable after this long (default: the timeout)");
  ctl->add_option("--lost-node-policy", f->lost_node_policy,
                  "jobs of a lost node: requeue (default) or fail");
  ctl->add_option("--keep-finished-jobs", f->keep_finished_jobs,
                  "ended jobs kept live; older ones move to the archive (default 10000; -1 = no "
                  "count bound)");
  ctl->add_option("--keep-finished-for", f->keep_finished_for,
                  "ended jobs move to the archive this long after they ended (default 24h; 0 = "
                  "no age bound)");
  ctl->add_option("--archive-max-jobs", f->archive_max_jobs,
                  "archived jobs kept in the store; the earliest submitted go first (default "
                  "100000; 0 = none)");
  ctl->add_option("--policy-config", f->policy_config, "key=value,... for the gpool policy");
  ctl->add_option("--auth-tokens", f->auth_tokens,
                  "token file: lines 'TOKEN admin|agent|metrics' or 'TOKEN tenant NAME', each "
                  "optionally ending in expires=YYYY-MM-DD[THH:MM:SSZ] (default: open)");
  ctl->add_flag("--metrics-public", f->metrics_public,
                "with --auth-tokens: serve HTTP /metrics without a token (for scrapers)");
  ctl->add_option("--tls-cert", f->tls_cert, "PEM certificate chain: serve gRPC over TLS");
  ctl->add_option("--tls-key", f->tls_key, "PEM private key of --tls-cert");
  ctl->add_option("--lease-key", f->lease_key_file,
                  "key file shared with the GPU servers, to issue leases (LeaseService)");
  ctl->callback(run("controller", RunController));

  CLI::App* ag = app.add_subcommand(
      "agent", "run the node agent of this machine, or --hollow N simulated nodes");
  ag->add_option("--controller", f->controller, "controller HOST:PORT[,HOST:PORT...]");
  ag->add_option("--heartbeat-ms", f->heartbeat_ms, "heartbeat interval (default 500)");
  // The real agent (docs/control-plane.md, "Node agent").
  ag->add_option("--name", f->real.name, "node name (default: the host name)");
  ag->add_option("--emulated-gpus", f->real.emulated_gpus,
                 "declare N emulated GPUs (no hardware; tests) instead of NVML discovery");
  ag->add_option("--emulated-gpu-model", f->real.emulated_gpu_model, "their model (default emulated)");
  ag->add_option("--log-dir", f->real.log_dir, "task stdout/stderr files (default /tmp/gpool-agent-NAME/logs)");
  ag->add_option("--hwloc-xml", f->real.hwloc_xml, "GPU-HCA affinity from this hwloc XML, not the live machine");
  ag->add_option("--kill-grace-ms", f->kill_grace_ms, "SIGTERM-to-SIGKILL grace for stopped tasks (default 10000)");
  ag->add_option("--suspend-cmd", f->real.suspend_cmd, "run (sh -c) when the controller suspends this node");
  ag->add_option("--resume-cmd", f->real.resume_cmd,
                 "run for other nodes the controller resumes; {node} = their name (power proxy)");
  ag->add_option("--client-lib-dir", f->real.client_lib_dir,
                 "gpool's client lib dir (libcuda.so.1 stand-in, NVIDIA's libcudart.so.13) for "
                 "remote/fractional tasks (default <gpool>/../lib)");
  ag->add_option("--gpu-server", f->real.gpu_server,
                 "HOST:PORT of this node's gpool gpu-server, advertised for leases");
  ag->add_flag("--serve-gpus", f->real.serve_gpus,
               "run this node's gpool gpu-server as a child (restarted if it dies, stopped with "
               "the agent) and advertise it; needs --lease-key");
  ag->add_option("--gpu-server-listen", f->real.gpu_server_listen,
                 "--serve-gpus: where it listens (default: --gpu-server, else 127.0.0.1:0)");
  ag->add_option("--lease-key", f->real.lease_key_file,
                 "--serve-gpus: the key file the controller signs leases with (its --lease-key)");
  ag->add_option("--emulated-gpu-memory", f->emulated_gpu_memory,
                 "memory per emulated GPU (default 80GiB)");
  ag->add_option("--emulated-kernels", f->real.emulated_kernels,
                 "--serve-gpus with --emulated-gpus: the server's CPU kernel plugin (.so)");
  ag->add_option("--emulated-launch-log", f->real.emulated_launch_log,
                 "--serve-gpus with --emulated-gpus: the server appends every launch here (tests)");
  ag->add_flag("--discover", f->discover, "print this machine's inventory as JSON and exit");
  // The hollow agent.
  ag->add_option("--hollow", f->hollow, "simulate N nodes instead (kubemark-style; with --fabric: its first N hosts, 0 = all)");
  ag->add_option("--gpus-per-node", f->gpus_per_node, "GPUs per simulated node (default 8)");
  ag->add_option("--gpu-model", f->gpu_model, "GPU model name (default H100)");
  ag->add_option("--prefix", f->prefix, "node name prefix (default hollow)");
  ag->add_option("--boot-ms", f->boot_ms, "simulated resume-to-ready time (default 2000)");
  ag->add_option("--fabric", f->fabric, "hollow: name the nodes after this fabric's hosts (file or gen:...)");
  AddAuthFlags(ag, f.get());
  ag->callback(run("agent", RunAgent));
}

GPOOL_REGISTER_COMMAND(RegisterCluster);

}  // namespace
}  // namespace gpool::cli
