// Cluster commands: `gpool controller`, `gpool agent`, and the clients `gpool submit`,
// `gpool jobs [ls|describe ID|cancel ID]`, `gpool nodes`, `gpool tenants` (docs/control-plane.md).
#include <csignal>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "agent/hollow.h"
#include "cli/command.h"
#include "common/log.h"
#include "common/units.h"
#include "control/api.h"
#include "control/controller.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::cli {
namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }
void InstallSignals() {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
}

struct ClusterFlags {
  std::string controller = "127.0.0.1:7070";
  std::string output;
  // controller
  std::string store, listen = "127.0.0.1:7070", http, fabric, policy_config;
  std::vector<std::string> quotas;
  int interval_ms = 200;
  int node_timeout_ms = 10000;
  // agent
  int hollow = 0, gpus_per_node = 8, heartbeat_ms = 500;
  std::string prefix = "hollow", gpu_model = "H100";
  // submit
  int gpus = 0, priority = 0;
  std::string tenant = "default", duration = "60s", request_id;
  std::vector<std::string> command;
  std::string id;
};

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

Status CheckOutput(const std::string& o) {
  if (!o.empty() && o != "json") return Status::InvalidArgument("-o: only 'json' is supported");
  return Status::Ok();
}

std::shared_ptr<grpc::Channel> Channel(const ClusterFlags& f) {
  return grpc::CreateChannel(f.controller, grpc::InsecureChannelCredentials());
}

void Deadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

Status Rpc(const grpc::Status& s, const ClusterFlags& f) {
  if (s.ok()) return Status::Ok();
  return control::FromGrpc(s).WithContext(fmt::format("controller {}", f.controller));
}

Status RunController(const ClusterFlags& f) {
  if (!f.fabric.empty()) {
    return Status::Unimplemented("--fabric: fabric-aware node placement is not implemented yet");
  }
  if (f.store.empty()) return Status::InvalidArgument("--store: required, e.g. sqlite:PATH");
  control::ControllerOptions o;
  o.store_url = f.store;
  o.schedule_interval = std::chrono::milliseconds(f.interval_ms);
  o.node_timeout = std::chrono::milliseconds(f.node_timeout_ms);
  o.policy_config = f.policy_config;
  for (const std::string& q : f.quotas) {
    size_t eq = q.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status::InvalidArgument(fmt::format("--quota: want TENANT=GPUS, got '{}'", q));
    }
    try {
      o.tenant_quotas[q.substr(0, eq)] = std::stoll(q.substr(eq + 1));
    } catch (const std::exception&) {
      return Status::InvalidArgument(fmt::format("--quota: bad GPU count in '{}'", q));
    }
  }
  GPOOL_ASSIGN_OR_RETURN(auto controller, control::Controller::Open(o));
  control::ApiServer api(controller.get());
  control::ApiOptions ao;
  ao.grpc_listen = f.listen;
  ao.http_listen = f.http;
  InstallSignals();
  GPOOL_RETURN_IF_ERROR(api.Start(ao));
  controller->Start();
  std::string host;
  int port = 0;
  GPOOL_RETURN_IF_ERROR(control::ParseHostPort("--listen", f.listen, &host, &port));
  std::printf("gpool controller: grpc %s:%d", host.c_str(), api.grpc_port());
  if (api.http_port() > 0) {
    std::string hh;
    int hp = 0;
    GPOOL_RETURN_IF_ERROR(control::ParseHostPort("--http", f.http, &hh, &hp));
    std::printf(" http http://%s:%d/", hh.c_str(), api.http_port());
  }
  std::printf("\n");
  std::fflush(stdout);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  controller->Stop();
  api.Shutdown();
  return Status::Ok();
}

Status RunAgent(const ClusterFlags& f) {
  if (!f.fabric.empty()) {
    return Status::Unimplemented("--fabric: hollow nodes with fabric positions are not implemented yet");
  }
  if (f.hollow < 1) {
    return Status::Unimplemented(
        "only hollow agents exist: pass --hollow N (real GPU discovery is not implemented yet)");
  }
  agent::HollowOptions o;
  o.controller = f.controller;
  o.nodes = f.hollow;
  o.gpus_per_node = f.gpus_per_node;
  o.name_prefix = f.prefix;
  o.gpu_model = f.gpu_model;
  o.heartbeat_interval = std::chrono::milliseconds(f.heartbeat_ms);
  InstallSignals();
  return agent::RunHollowAgent(o, &g_stop);
}

std::string RandomRequestId() {
  std::random_device rd;
  return fmt::format("cli-{:016x}", (static_cast<uint64_t>(rd()) << 32) | rd());
}

Status Submit(const ClusterFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  GPOOL_ASSIGN_OR_RETURN(double duration, ParseDurationSeconds(f.duration));
  v1::SubmitJobRequest req;
  // One id for all retries of this invocation, so a retried submit is not a second job.
  req.set_client_request_id(f.request_id.empty() ? RandomRequestId() : f.request_id);
  req.set_tenant(f.tenant);
  req.set_gpus(f.gpus);
  req.set_priority(f.priority);
  req.set_duration_s(duration);
  for (const auto& c : f.command) req.add_command(c);
  auto stub = v1::JobService::NewStub(Channel(f));
  v1::Job job;
  grpc::Status s;
  for (int attempt = 0; attempt < 5; ++attempt) {
    grpc::ClientContext ctx;
    Deadline(&ctx);
    s = stub->Submit(&ctx, req, &job);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
  }
  GPOOL_RETURN_IF_ERROR(Rpc(s, f));
  if (f.output == "json") {
    std::printf("%s\n", Json(job).c_str());
  } else {
    std::printf("%s\n", job.id().c_str());
  }
  return Status::Ok();
}

std::string Placement(const v1::Job& j) {
  std::string out;
  int shown = 0;
  for (const auto& a : j.allocations()) {
    if (shown == 2) {  // gangs span many nodes; -o json has them all
      out += fmt::format(",+{} more", j.allocations_size() - shown);
      break;
    }
    if (!out.empty()) out += ",";
    out += fmt::format("{}:{:#x}", a.node(), a.gpu_mask());
    ++shown;
  }
  return out.empty() ? "-" : out;
}

Status JobsList(const ClusterFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  auto stub = v1::JobService::NewStub(Channel(f));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::ListJobsRequest req;
  v1::ListJobsResponse resp;
  GPOOL_RETURN_IF_ERROR(Rpc(stub->List(&ctx, req, &resp), f));
  if (f.output == "json") {
    std::printf("%s\n", Json(resp).c_str());
    return Status::Ok();
  }
  std::map<std::string, int> by_state;
  std::printf("%-10s %-10s %5s %4s %-9s %8s  %s\n", "ID", "TENANT", "GPUS", "PRIO", "STATE",
              "DURATION", "PLACEMENT");
  for (const v1::Job& j : resp.jobs()) {
    ++by_state[j.state()];
    std::printf("%-10s %-10s %5d %4d %-9s %7.0fs  %s\n", j.id().c_str(), j.tenant().c_str(),
                j.gpus(), j.priority(), j.state().c_str(), j.duration_s(), Placement(j).c_str());
  }
  std::string summary;
  for (const auto& [st, n] : by_state) summary += fmt::format(" {} {}", n, st);
  std::printf("%d jobs:%s\n", resp.jobs_size(), summary.c_str());
  return Status::Ok();
}

Status JobOne(const ClusterFlags& f, bool cancel) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  auto stub = v1::JobService::NewStub(Channel(f));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::Job job;
  if (cancel) {
    v1::CancelJobRequest req;
    req.set_id(f.id);
    GPOOL_RETURN_IF_ERROR(Rpc(stub->Cancel(&ctx, req, &job), f));
  } else {
    v1::GetJobRequest req;
    req.set_id(f.id);
    GPOOL_RETURN_IF_ERROR(Rpc(stub->Get(&ctx, req, &job), f));
  }
  if (f.output == "json" || !cancel) {
    std::printf("%s\n", Json(job).c_str());
  } else {
    std::printf("%s %s\n", job.id().c_str(), job.state().c_str());
  }
  return Status::Ok();
}

Status Nodes(const ClusterFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  auto stub = v1::NodeService::NewStub(Channel(f));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::ListNodesResponse resp;
  GPOOL_RETURN_IF_ERROR(Rpc(stub->List(&ctx, v1::ListNodesRequest(), &resp), f));
  if (f.output == "json") {
    std::printf("%s\n", Json(resp).c_str());
    return Status::Ok();
  }
  int64_t gpus = 0, used = 0, ready = 0;
  std::printf("%-16s %-6s %-8s %4s %5s\n", "NAME", "STATE", "MODEL", "GPUS", "ALLOC");
  for (const v1::Node& n : resp.nodes()) {
    gpus += n.gpus();
    used += n.gpus_allocated();
    ready += n.state() == "ready";
    std::printf("%-16s %-6s %-8s %4d %5d\n", n.name().c_str(), n.state().c_str(),
                n.gpu_model().c_str(), n.gpus(), n.gpus_allocated());
  }
  std::printf("%d nodes (%ld ready), %ld GPUs, %ld allocated\n", resp.nodes_size(), ready, gpus,
              used);
  return Status::Ok();
}

Status Tenants(const ClusterFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  auto stub = v1::TenantService::NewStub(Channel(f));
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::ListTenantsResponse resp;
  GPOOL_RETURN_IF_ERROR(Rpc(stub->List(&ctx, v1::ListTenantsRequest(), &resp), f));
  if (f.output == "json") {
    std::printf("%s\n", Json(resp).c_str());
    return Status::Ok();
  }
  std::printf("%-12s %6s %7s %8s %8s\n", "TENANT", "QUOTA", "IN_USE", "RUNNING", "PENDING");
  for (const v1::Tenant& t : resp.tenants()) {
    std::printf("%-12s %6ld %7ld %8d %8d\n", t.name().c_str(), t.quota_gpus(), t.gpus_in_use(),
                t.running_jobs(), t.pending_jobs());
  }
  return Status::Ok();
}

void Register(CLI::App& app, const GlobalFlags&, int* exit_code) {
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
  auto client = [f](CLI::App* c) {
    c->add_option("--controller", f->controller, "controller HOST:PORT (default 127.0.0.1:7070)");
    c->add_option("-o,--output", f->output, "json: machine-readable output");
  };

  CLI::App* ctl = app.add_subcommand("controller", "run the control plane (gRPC + HTTP)");
  ctl->add_option("--store", f->store, "state store URL, sqlite:PATH")->required();
  ctl->add_option("--listen", f->listen, "gRPC HOST:PORT (default 127.0.0.1:7070; port 0 = any)");
  ctl->add_option("--http", f->http, "HTTP HOST:PORT for /metrics and /api/state");
  ctl->add_option("--fabric", f->fabric, "fabric file (not implemented yet)");
  ctl->add_option("--quota", f->quotas, "TENANT=GPUS guaranteed quota (repeatable)");
  ctl->add_option("--interval-ms", f->interval_ms, "scheduling interval (default 200)");
  ctl->add_option("--node-timeout-ms", f->node_timeout_ms, "heartbeat timeout (default 10000)");
  ctl->add_option("--policy-config", f->policy_config, "key=value,... for the gpool policy");
  ctl->callback(run("controller", RunController));

  CLI::App* ag = app.add_subcommand("agent", "run a node agent (hollow: simulated nodes)");
  ag->add_option("--controller", f->controller, "controller HOST:PORT");
  ag->add_option("--hollow", f->hollow, "simulate N nodes")->required();
  ag->add_option("--gpus-per-node", f->gpus_per_node, "GPUs per simulated node (default 8)");
  ag->add_option("--gpu-model", f->gpu_model, "GPU model name (default H100)");
  ag->add_option("--prefix", f->prefix, "node name prefix (default hollow)");
  ag->add_option("--heartbeat-ms", f->heartbeat_ms, "heartbeat interval (default 500)");
  ag->add_option("--fabric", f->fabric, "fabric file (not implemented yet)");
  ag->callback(run("agent", RunAgent));

  CLI::App* sub = app.add_subcommand("submit", "submit a job: gpool submit --gpus N -- COMMAND");
  client(sub);
  sub->add_option("--gpus", f->gpus, "whole GPUs (<= 8, or a multiple of 8)")->required();
  sub->add_option("--tenant", f->tenant, "tenant (default 'default')");
  sub->add_option("--priority", f->priority, "priority class (higher first)");
  sub->add_option("--duration", f->duration, "run time, e.g. 60s, 5m (default 60s)");
  sub->add_option("--request-id", f->request_id, "idempotency key (default: random per call)");
  sub->add_option("command", f->command, "the command (after --)");
  sub->callback(run("submit", Submit));

  CLI::App* jobs = app.add_subcommand("jobs", "list, describe and cancel jobs");
  client(jobs);
  CLI::App* ls = jobs->add_subcommand("ls", "list jobs (the default)");
  client(ls);
  CLI::App* desc = jobs->add_subcommand("describe", "one job as JSON");
  client(desc);
  desc->add_option("id", f->id, "job id")->required();
  desc->callback(run("jobs describe", [](const ClusterFlags& x) { return JobOne(x, false); }));
  CLI::App* cancel = jobs->add_subcommand("cancel", "cancel a job");
  client(cancel);
  cancel->add_option("id", f->id, "job id")->required();
  cancel->callback(run("jobs cancel", [](const ClusterFlags& x) { return JobOne(x, true); }));
  ls->callback(run("jobs ls", JobsList));
  jobs->callback([jobs, run] {
    if (jobs->get_subcommands().empty()) run("jobs", JobsList)();
  });

  CLI::App* nodes = app.add_subcommand("nodes", "list nodes");
  client(nodes);
  nodes->callback(run("nodes", Nodes));
  CLI::App* tenants = app.add_subcommand("tenants", "list tenants with usage vs quota");
  client(tenants);
  tenants->callback(run("tenants", Tenants));
}

GPOOL_REGISTER_COMMAND(Register);

}  // namespace
}  // namespace gpool::cli
