// The controller's client commands: `gpool submit`, `gpool jobs [ls|describe ID|cancel ID|watch|
// leases ID]`, `gpool nodes`, `gpool tenants`, `gpool top` (docs/cli.md, docs/control-plane.md).
// Built into both binaries (src/cli/CMakeLists.txt): the lean front, where they start in about a
// millisecond, and the full one. So this file links only the API's client side
// (gpool_control_client) and the generated stubs, never the controller, agent or remoting.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <ctime>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "cli/cluster_common.h"
#include "cli/command.h"
#include "common/file.h"
#include "common/log.h"
#include "common/units.h"
#include "control/allocation_text.h"
#include "control/auth.h"
#include "control/controller_endpoints.h"
#include "control/job_spec.h"
#include "control/rpc_common.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::cli {
namespace {

struct ClientFlags : AuthFlags {
  std::string controller = "127.0.0.1:7070";
  std::string output;
  // submit: the sched::JobSpec shape
  std::string task_cpus, task_mem;  // submit --cpus / --mem (per task)
  std::string spec_file, gpu_fraction, gpu_mem, job_gpu_model, locality = "any", min_runtime, kind;
  bool locality_required = false, non_preemptible = false;
  std::string gpu_source, gpu_within, max_slowdown;  // remote attachment ("" = not given)
  int gpus = 0, priority = 0;
  std::string tenant, duration = "60s", request_id;  // tenant "": the token's, or "default"
  std::string wait;  // submit --wait[=TIMEOUT]: until bound ("" = don't wait)
  // top / watch
  int refresh_ms = 1000, iterations = 0;
  double ttl_s = 3600;  // jobs leases --ttl
  std::string tenant_filter, state_filter;
  bool history = false;  // jobs ls --history: the archive (ended jobs that left the live state)
  int history_limit = 0;
  std::vector<std::string> command;
  std::string id;
};

std::string ClusterJson(const google::protobuf::Message& m) {
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

// A channel to the controller with the flags' TLS settings; the token goes on each call.
struct Client {
  std::shared_ptr<grpc::Channel> channel;
  std::string token;
  // Several --controller addresses (HA): the list, following the leader.
  std::shared_ptr<control::ControllerEndpoints> endpoints;
};

constexpr int kRpcSeconds = 10;  // every call's deadline (docs/cli.md: "no hang")

std::string Unreachable(const ClientFlags& f, const std::string& why) {
  return fmt::format(
      "cannot reach the controller at {} ({}); is `gpool controller` running there? Point "
      "--controller at it{}", f.controller, why,
      f.tls_ca.empty() ? "" : ", and check that --tls-ca matches its certificate");
}

// Connects before the first call, so that a controller that is not there fails the command at
// once: no call was sent, so nothing needs retrying (a submit retries only calls whose outcome
// is unknown). Without this, the first call of a retrying command fails in milliseconds with
// UNAVAILABLE and the retries wait out their backoff. The first failed attempt ends it
// (TRANSIENT_FAILURE: refused, unresolvable, TLS handshake failed); a silent address ends it
// at the deadline.
Status WaitConnected(const ClientFlags& f, grpc::Channel* ch, std::chrono::seconds patience) {
  auto deadline = std::chrono::system_clock::now() + patience;
  for (;;) {
    grpc_connectivity_state st = ch->GetState(/*try_to_connect=*/true);
    if (st == GRPC_CHANNEL_READY) return Status::Ok();
    if (st == GRPC_CHANNEL_TRANSIENT_FAILURE || st == GRPC_CHANNEL_SHUTDOWN) {
      return Status::Unavailable(
          Unreachable(f, "no connection: refused, unreachable, or the TLS handshake failed"));
    }
    // Waiting polls the channel, which drives its connection attempt.
    if (!ch->WaitForStateChange(st, deadline)) {
      return Status::Unavailable(
          Unreachable(f, fmt::format("no connection within {} s", patience.count())));
    }
  }
}

StatusOr<Client> Connect(const ClientFlags& f) {
  control::ClientOptions o;
  o.address = f.controller;
  o.tls_ca_file = f.tls_ca;
  o.tls_server_name = f.tls_server_name;
  GPOOL_ASSIGN_OR_RETURN(std::string token, control::ResolveToken(f.token, f.token_file));
  if (f.controller.find(',') != std::string::npos) {
    o.token = token;
    GPOOL_ASSIGN_OR_RETURN(auto eps, control::ControllerEndpoints::Parse("--controller", o));
    auto e = std::make_shared<control::ControllerEndpoints>(std::move(eps));
    // Longer than a failover (lease TTL + election), so a client started mid-failover waits.
    auto leader = e->FindLeader(std::chrono::seconds(20));
    if (!leader.ok()) return Status::Unavailable(Unreachable(f, leader.status().message()));
    return Client{*leader, token, e};
  }
  GPOOL_ASSIGN_OR_RETURN(auto ch, control::MakeChannel(o));
  GPOOL_RETURN_IF_ERROR(WaitConnected(f, ch.get(), std::chrono::seconds(kRpcSeconds)));
  return Client{ch, token, nullptr};
}

// Deadline and token on one call.
void Prepare(grpc::ClientContext* ctx, const Client& c, int seconds = kRpcSeconds) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(seconds));
  control::AttachToken(ctx, c.token);
}

Status Rpc(const grpc::Status& s, const ClientFlags& f) {
  if (s.ok()) return Status::Ok();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return Status::Unavailable(Unreachable(f, s.error_message()));
  }
  return control::FromGrpc(s).WithContext(fmt::format("controller {}", f.controller));
}

// One unary call on the client's channel: a fresh stub, deadline and token (Prepare), and a
// failure turned into the CLI's message (Rpc). `method` is the generated stub's sync method,
// e.g. &v1::JobService::Stub::List. Calls that retry or stream keep their own code.
template <typename Stub, typename Req, typename Resp>
StatusOr<Resp> ClusterCall(const ClientFlags& f, const Client& c,
                    grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
                    const Req& req) {
  Stub stub(c.channel);
  grpc::ClientContext ctx;
  Prepare(&ctx, c);
  Resp resp;
  GPOOL_RETURN_IF_ERROR(Rpc((stub.*method)(&ctx, req, &resp), f));
  return resp;
}

std::string RandomRequestId() {
  std::random_device rd;
  return fmt::format("cli-{:016x}", (static_cast<uint64_t>(rd()) << 32) | rd());
}

// `submit --wait`: follows the job (Watch, on the channel the submit used) until it leaves
// "pending": bound (running, or already finished) is success; failed or cancelled before
// running, or still pending after timeout_s, is an error naming the job and its state.
StatusOr<v1::Job> WaitBound(const ClientFlags& f, const Client& c, v1::Job job,
                            double timeout_s) {
  if (job.state() != "pending") return job;
  auto stub = v1::JobService::NewStub(c.channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  control::AttachToken(&ctx, c.token);
  v1::WatchJobsRequest req;
  req.set_id(job.id());
  req.set_initial(true);  // the job as it is now: no change between submit and watch is missed
  auto reader = stub->Watch(&ctx, req);
  v1::JobEvent ev;
  while (reader->Read(&ev)) {
    job = ev.job();
    if (job.state() != "pending") break;
  }
  if (job.state() != "pending") ctx.TryCancel();  // done with the stream; else it ended itself
  grpc::Status st = reader->Finish();
  if (job.state() == "pending") {
    if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      return Status(StatusCode::kDeadlineExceeded,
                    fmt::format("job {} still pending after --wait={}: {}", job.id(), f.wait,
                                job.pending_reason().empty() ? "no reason given yet"
                                                             : job.pending_reason()));
    }
    GPOOL_RETURN_IF_ERROR(Rpc(st, f));
  }
  if (job.state() == "failed" || job.state() == "cancelled") {
    return Status::Aborted(fmt::format("job {} was {} before it ran", job.id(), job.state()));
  }
  return job;
}

Status Submit(const ClientFlags& f, bool gpus_given, bool tenant_given) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("--tenant", f.tenant, !tenant_given));
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("--request-id", f.request_id));
  v1::SubmitJobRequest req;
  if (!f.spec_file.empty()) {
    GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(f.spec_file));
    GPOOL_ASSIGN_OR_RETURN(req, control::ParseJobSpecYaml(text, f.spec_file));
    // Flags given explicitly override the file.
    if (gpus_given) req.set_gpus(f.gpus);
    if (tenant_given) req.set_tenant(f.tenant);
    if (!f.command.empty()) req.clear_command();
  } else {
    if (!gpus_given && f.gpu_fraction.empty()) {
      return Status::InvalidArgument("--gpus: required (or --gpu-fraction, or -f SPEC.yaml)");
    }
    GPOOL_ASSIGN_OR_RETURN(double duration, ParseDurationSeconds(f.duration));
    req.set_tenant(f.tenant);
    req.set_gpus(f.gpus);
    req.set_priority(f.priority);
    req.set_duration_s(duration);
    req.set_gpu_model(f.job_gpu_model);
    req.set_locality(f.locality);
    req.set_locality_required(f.locality_required);
    if (f.non_preemptible) req.set_preemptible(false);
    req.set_kind(f.kind);
    if (!f.min_runtime.empty()) {
      GPOOL_ASSIGN_OR_RETURN(double m, ParseDurationSeconds(f.min_runtime));
      req.set_min_runtime_s(m);
    }
    if (!f.gpu_fraction.empty()) {
      double fr = 0;
      size_t used = 0;
      try {
        fr = std::stod(f.gpu_fraction, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != f.gpu_fraction.size()) {
        return Status::InvalidArgument(fmt::format(
            "--gpu-fraction: want a number from 0.001 to 0.999, got '{}'", f.gpu_fraction));
      }
      GPOOL_ASSIGN_OR_RETURN(int32_t milli, control::GpuFractionToMilli("--gpu-fraction", fr));
      req.set_gpu_milli(milli);
      if (!gpus_given) req.set_gpus(1);
    }
    if (!f.gpu_mem.empty()) {
      GPOOL_ASSIGN_OR_RETURN(uint64_t b, ParseBytes(f.gpu_mem));
      req.set_gpu_memory_bytes(b);
    }
  }
  // Per-task CPU and memory (flags override the file).
  if (!f.task_cpus.empty()) {
    double cpus = 0;
    try {
      cpus = std::stod(f.task_cpus);
    } catch (const std::exception&) {
      cpus = -1;
    }
    if (!(cpus > 0 && cpus <= 1e9)) {
      return Status::InvalidArgument(
          fmt::format("--cpus: want CPUs per task > 0, e.g. 4 or 0.5, got '{}'", f.task_cpus));
    }
    req.set_cpu_milli(std::llround(cpus * 1000));
  }
  if (!f.task_mem.empty()) {
    auto b = ParseBytes(f.task_mem);
    if (!b.ok()) return b.status().WithContext("--mem");
    req.set_memory_bytes(*b);
  }
  // Remote attachment (flags override the file); the controller checks the values.
  if (!f.gpu_source.empty()) req.set_gpu_source(f.gpu_source);
  if (!f.gpu_within.empty()) req.set_gpu_within(f.gpu_within);
  if (!f.max_slowdown.empty()) {
    double x = -1;
    size_t used = 0;
    try {
      x = std::stod(f.max_slowdown, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != f.max_slowdown.size() || !std::isfinite(x) ||
        (x != 0 && !(x >= 1))) {
      return Status::InvalidArgument(fmt::format(
          "--max-slowdown: want 0 (any) or a factor >= 1 such as 1.1, got '{}'", f.max_slowdown));
    }
    req.set_max_slowdown(x);
  }
  for (const auto& c : f.command) req.add_command(c);
  // One id for all retries of this invocation, so a retried submit is not a second job.
  if (!f.request_id.empty()) req.set_client_request_id(f.request_id);
  if (req.client_request_id().empty()) req.set_client_request_id(RandomRequestId());
  GPOOL_ASSIGN_OR_RETURN(Client c, Connect(f));
  auto stub = v1::JobService::NewStub(c.channel);
  v1::Job job;
  grpc::Status s;
  std::shared_ptr<grpc::Channel> channel = c.channel;
  for (int attempt = 0; attempt < 6; ++attempt) {
    grpc::ClientContext ctx;
    Prepare(&ctx, c);
    s = stub->Submit(&ctx, req, &job);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE) break;
    if (c.endpoints != nullptr && c.endpoints->Failed(s)) {  // follow the leader (HA)
      auto ch = c.endpoints->Channel();
      if (ch.ok()) {
        channel = *ch;
        stub = v1::JobService::NewStub(channel);
      }
    }
    // Wait out the pause polling the channel: gRPC 1.51 completes a reconnect attempt only
    // while a thread polls it (agent/protocol.cc), else on its 5 s backup poller.
    auto until = std::chrono::system_clock::now() + std::chrono::milliseconds(200 << attempt);
    channel->WaitForConnected(until);
    std::this_thread::sleep_until(until);
  }
  GPOOL_RETURN_IF_ERROR(Rpc(s, f));
  if (!f.wait.empty()) {
    GPOOL_ASSIGN_OR_RETURN(double timeout_s, ParseDurationSeconds(f.wait));
    GPOOL_ASSIGN_OR_RETURN(job, WaitBound(f, Client{channel, c.token, c.endpoints}, job,
                                          timeout_s));
  }
  if (f.output == "json") {
    std::printf("%s\n", ClusterJson(job).c_str());
  } else {
    std::printf("%s\n", job.id().c_str());
  }
  return Status::Ok();
}

// Local tasks as NODE:MASK; tasks on GPU servers as "HOST <- NODE/GPU,... (remote, ...)".
std::string Placement(const v1::Job& j) {
  std::string out;
  int shown = 0;
  for (const auto& a : j.allocations()) {
    if (shown == 2) {  // gangs span many nodes; -o json has them all
      out += fmt::format(",+{} more", j.allocations_size() - shown);
      break;
    }
    if (!out.empty()) out += a.via_server() ? "; " : ",";
    out += a.via_server() ? control::AllocationText(a) : fmt::format("{}:{:#x}", a.node(), a.gpu_mask());
    ++shown;
  }
  return out.empty() ? "-" : out;
}

std::string SourceText(const v1::Job& j) { return j.gpu_source().empty() ? "local" : j.gpu_source(); }

std::string GpuText(const v1::Job& j) {
  if (j.gpu_milli() > 0) return fmt::format("{:.3g}", j.gpu_milli() / 1000.0);
  return std::to_string(j.gpus());
}

Status JobsList(const ClientFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("--tenant", f.tenant_filter));
  GPOOL_ASSIGN_OR_RETURN(Client c, Connect(f));
  v1::ListJobsRequest req;
  req.set_tenant(f.tenant_filter);
  req.set_state(f.state_filter);
  req.set_history(f.history);
  req.set_limit(f.history_limit);
  GPOOL_ASSIGN_OR_RETURN(v1::ListJobsResponse resp, ClusterCall(f, c, &v1::JobService::Stub::List, req));
  if (f.output == "json") {
    std::printf("%s\n", ClusterJson(resp).c_str());
    return Status::Ok();
  }
  std::map<std::string, int> by_state;
  // PLACEMENT: where a running job runs; for a pending job, why it waits (the scheduler's
  // reason, or a validation message).
  std::printf("%-10s %-10s %5s %-6s %4s %-9s %8s  %s\n", "ID", "TENANT", "GPUS", "SOURCE", "PRIO",
              "STATE", "DURATION", "PLACEMENT / WHY PENDING");
  for (const v1::Job& j : resp.jobs()) {
    ++by_state[j.state()];
    std::string where = Placement(j);
    if (j.state() == "pending") {
      const std::string& why = j.pending_reason().empty() ? j.message() : j.pending_reason();
      where = why.empty() ? "(not yet scheduled)" : "(" + why + ")";
    }
    std::printf("%-10s %-10s %5s %-6s %4d %-9s %7.0fs  %s\n", j.id().c_str(), j.tenant().c_str(),
                GpuText(j).c_str(), SourceText(j).c_str(), j.priority(), j.state().c_str(),
                j.duration_s(), where.c_str());
  }
  std::string summary;
  for (const auto& [st, n] : by_state) summary += fmt::format(" {} {}", n, st);
  std::printf("%d jobs:%s\n", resp.jobs_size(), summary.c_str());
  return Status::Ok();
}

std::string Ms(int64_t ms) {
  if (ms == 0) return "-";
  time_t t = ms / 1000;
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", std::gmtime(&t));
  return std::string(buf) + "Z";
}

void Describe(const v1::Job& j) {
  std::string cmd;
  for (const auto& c : j.command()) cmd += (cmd.empty() ? "" : " ") + c;
  std::printf("ID:          %s\nTenant:      %s\nState:       %s%s\n", j.id().c_str(),
              j.tenant().c_str(), j.state().c_str(),
              j.message().empty() ? "" : fmt::format(" ({})", j.message()).c_str());
  if (j.state() == "pending" && !j.pending_reason().empty()) {
    std::printf("Waiting:     %s\n", j.pending_reason().c_str());
  }
  if (j.gpu_milli() > 0) {
    std::printf("GPUs:        %.3g of one GPU, %s GPU memory\n", j.gpu_milli() / 1000.0,
                j.gpu_memory_bytes() ? FormatBytes(j.gpu_memory_bytes()).c_str() : "any");
  } else {
    std::printf("GPUs:        %d (%d task%s x %d)\n", j.gpus(), j.num_tasks(),
                j.num_tasks() == 1 ? "" : "s", j.gpus_per_task());
  }
  std::printf("CPU, memory: %s, %s per task\n",
              j.cpu_milli() ? fmt::format("{:g} CPUs", j.cpu_milli() / 1000.0).c_str() : "any",
              j.memory_bytes() ? FormatBytes(j.memory_bytes()).c_str() : "any");
  std::string source = SourceText(j);
  if (source != "local") {
    const std::string within = j.gpu_within().empty() ? "any" : j.gpu_within();
    source += fmt::format(" (GPUs from {}, max slowdown {})",
                          within == "any"    ? "any node"
                          : within == "node" ? "the task's own node"
                                             : "the task's " + within,
                          j.max_slowdown() > 0 ? fmt::format("{:g}", j.max_slowdown()) : "any");
  }
  std::printf("GPU source:  %s\n", source.c_str());
  std::printf("GPU model:   %s\nLocality:    %s (%s)\nKind:        %s\nPriority:    %d\n",
              j.gpu_model().empty() ? "any" : j.gpu_model().c_str(), j.locality().c_str(),
              j.locality_required() ? "required" : "preferred", j.kind().c_str(), j.priority());
  std::printf("Preemptible: %s (min run time %.0fs), preempted %d times, requeued %d times\n",
              j.preemptible() ? "yes" : "no", j.min_runtime_s(), j.preemptions(), j.requeues());
  std::printf("Duration:    %.0fs\nCommand:     %s\n", j.duration_s(), cmd.c_str());
  std::printf("Submitted:   %s\nStarted:     %s\nEnded:       %s\n", Ms(j.submit_ms()).c_str(),
              Ms(j.start_ms()).c_str(), Ms(j.end_ms()).c_str());
  if (j.allocations_size() > 0) {
    // Each task's host and its GPUs as NODE/GPU (lent ones on their own nodes).
    std::printf("Tasks (attempt %d):\n  %-5s %-8s %s\n", j.attempt(), "TASK", "STATE",
                "HOST <- GPUS");
    for (const auto& a : j.allocations()) {
      std::printf("  %-5d %-8s %s\n", a.task(), a.finished() ? "finished" : "running",
                  control::AllocationText(a).c_str());
    }
  }
}

Status JobOne(const ClientFlags& f, bool cancel) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("ID", f.id, false));
  GPOOL_ASSIGN_OR_RETURN(Client c, Connect(f));
  v1::Job job;
  if (cancel) {
    v1::CancelJobRequest req;
    req.set_id(f.id);
    GPOOL_ASSIGN_OR_RETURN(job, ClusterCall(f, c, &v1::JobService::Stub::Cancel, req));
  } else {
    v1::GetJobRequest req;
    req.set_id(f.id);
    GPOOL_ASSIGN_OR_RETURN(job, ClusterCall(f, c, &v1::JobService::Stub::Get, req));
  }
  if (f.output == "json") {
    std::printf("%s\n", ClusterJson(job).c_str());
  } else if (cancel) {
    std::printf("%s %s\n", job.id().c_str(), job.state().c_str());
  } else {
    Describe(job);
  }
  return Status::Ok();
}

// Streams job changes until Ctrl-C (or --iterations events, for scripts).
Status JobsWatch(const ClientFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("ID", f.id));
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("--tenant", f.tenant_filter));
  GPOOL_ASSIGN_OR_RETURN(Client c, Connect(f));
  auto stub = v1::JobService::NewStub(c.channel);
  grpc::ClientContext ctx;
  control::AttachToken(&ctx, c.token);
  v1::WatchJobsRequest req;
  req.set_tenant(f.tenant_filter);
  req.set_id(f.id);
  req.set_initial(true);
  InstallStopSignals();
  // Ctrl-C cancels the stream; nothing else does. (The canceller used to cancel on every exit,
  // after the stream had ended too, and a refused watch then finished as CANCELLED, which reads
  // as "stopped by the user": the refusal was lost and the exit status was 0.)
  std::atomic<bool> done{false};
  std::thread canceller([&ctx, &done] {
    while (!g_cluster_stop && !done) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (g_cluster_stop) ctx.TryCancel();
  });
  auto reader = stub->Watch(&ctx, req);
  v1::JobEvent ev;
  int n = 0;
  while (reader->Read(&ev)) {
    const v1::Job& j = ev.job();
    if (f.output == "json") {
      std::string line;
      google::protobuf::util::JsonPrintOptions o;
      o.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(ev, &line, o);
      std::printf("%s\n", line.c_str());
    } else {
      std::printf("%s %-10s %-10s %5s %-9s %s\n", ev.initial() ? "=" : "~", j.id().c_str(),
                  j.tenant().c_str(), GpuText(j).c_str(), j.state().c_str(), Placement(j).c_str());
    }
    std::fflush(stdout);
    if (f.iterations > 0 && ++n >= f.iterations) break;
  }
  bool counted = f.iterations > 0 && n >= f.iterations;
  if (counted) ctx.TryCancel();
  grpc::Status s = reader->Finish();
  done = true;
  canceller.join();
  if (counted) return Status::Ok();
  if (s.error_code() == grpc::StatusCode::CANCELLED && g_cluster_stop) return Status::Ok();  // Ctrl-C
  return Rpc(s, f);
}

Status JobLeases(const ClientFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  GPOOL_RETURN_IF_ERROR(CheckNameFlag("ID", f.id, false));
  GPOOL_ASSIGN_OR_RETURN(Client c, Connect(f));
  v1::IssueLeasesRequest req;
  req.set_job_id(f.id);
  req.set_ttl_s(f.ttl_s);
  GPOOL_ASSIGN_OR_RETURN(v1::IssueLeasesResponse resp,
                         ClusterCall(f, c, &v1::LeaseService::Stub::Issue, req));
  if (f.output == "json") {
    std::printf("%s\n", ClusterJson(resp).c_str());
    return Status::Ok();
  }
  for (const auto& l : resp.leases()) {
    std::printf("%d %s %s\n", l.task(), l.gpu().c_str(), l.token().c_str());
  }
  return Status::Ok();
}

StatusOr<v1::ListNodesResponse> FetchNodes(const ClientFlags& f, const Client& c) {
  return ClusterCall(f, c, &v1::NodeService::Stub::List, v1::ListNodesRequest());
}

Status Nodes(const ClientFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  GPOOL_ASSIGN_OR_RETURN(Client c, Connect(f));
  GPOOL_ASSIGN_OR_RETURN(v1::ListNodesResponse resp, FetchNodes(f, c));
  if (f.output == "json") {
    std::printf("%s\n", ClusterJson(resp).c_str());
    return Status::Ok();
  }
  int64_t gpus = 0, used = 0, ready = 0;
  std::printf("%-16s %-8s %-8s %4s %5s\n", "NAME", "STATE", "MODEL", "GPUS", "ALLOC");
  for (const v1::Node& n : resp.nodes()) {
    gpus += n.gpus();
    used += n.gpus_allocated();
    ready += n.state() == "ready";
    std::printf("%-16s %-8s %-8s %4d %5d\n", n.name().c_str(), n.state().c_str(),
                n.gpu_model().c_str(), n.gpus(), n.gpus_allocated());
  }
  std::printf("%d nodes (%ld ready), %ld GPUs, %ld allocated\n", resp.nodes_size(), ready, gpus,
              used);
  return Status::Ok();
}

StatusOr<v1::ListTenantsResponse> FetchTenants(const ClientFlags& f, const Client& c) {
  return ClusterCall(f, c, &v1::TenantService::Stub::List, v1::ListTenantsRequest());
}

void PrintTenants(const v1::ListTenantsResponse& resp) {
  std::printf("%-12s %6s %6s %7s %8s %8s\n", "TENANT", "QUOTA", "MAX", "IN_USE", "RUNNING",
              "PENDING");
  for (const v1::Tenant& t : resp.tenants()) {
    const std::string cap = t.max_gpus() < 0 ? "-" : std::to_string(t.max_gpus());
    std::printf("%-12s %6ld %6s %7ld %8d %8d\n", t.name().c_str(), t.quota_gpus(), cap.c_str(),
                t.gpus_in_use(), t.running_jobs(), t.pending_jobs());
  }
}

Status Tenants(const ClientFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  GPOOL_ASSIGN_OR_RETURN(Client c, Connect(f));
  GPOOL_ASSIGN_OR_RETURN(v1::ListTenantsResponse resp, FetchTenants(f, c));
  if (f.output == "json") {
    std::printf("%s\n", ClusterJson(resp).c_str());
    return Status::Ok();
  }
  PrintTenants(resp);
  return Status::Ok();
}

// A live view: cluster totals, tenants, and the newest active jobs, redrawn every --refresh-ms
// (on a terminal; otherwise one frame per refresh, separated, for logs). --iterations N stops
// after N frames.
Status Top(const ClientFlags& f) {
  GPOOL_RETURN_IF_ERROR(CheckOutput(f.output));
  if (f.refresh_ms < 100) return Status::InvalidArgument("--refresh-ms: at least 100");
  GPOOL_ASSIGN_OR_RETURN(Client c, Connect(f));
  InstallStopSignals();
  bool tty = isatty(fileno(stdout));
  for (int frame = 0; !g_cluster_stop && (f.iterations == 0 || frame < f.iterations); ++frame) {
    if (frame > 0) {
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(f.refresh_ms);
      while (!g_cluster_stop && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
      if (g_cluster_stop) break;
    }
    GPOOL_ASSIGN_OR_RETURN(v1::ListNodesResponse nodes, FetchNodes(f, c));
    GPOOL_ASSIGN_OR_RETURN(v1::ListTenantsResponse tenants, FetchTenants(f, c));
    GPOOL_ASSIGN_OR_RETURN(v1::ListJobsResponse jobs,
                           ClusterCall(f, c, &v1::JobService::Stub::List, v1::ListJobsRequest()));
    std::map<std::string, int> node_states, job_states;
    double gpus = 0, alloc = 0, util = 0;
    int util_n = 0;
    for (const auto& n : nodes.nodes()) {
      ++node_states[n.state()];
      gpus += n.gpus();
      alloc += n.gpus_allocated();
      for (const auto& t : n.telemetry()) {
        util += t.utilization();
        ++util_n;
      }
    }
    for (const auto& j : jobs.jobs()) ++job_states[j.state()];
    if (tty) std::printf("\033[H\033[2J");
    time_t now = time(nullptr);
    char ts[32];
    std::strftime(ts, sizeof ts, "%H:%M:%S", std::localtime(&now));
    std::printf("gpool top  %s  controller %s\n", ts, f.controller.c_str());
    std::string ns, js;
    for (const auto& [s, n] : node_states) ns += fmt::format(" {} {}", n, s);
    for (const auto& [s, n] : job_states) js += fmt::format(" {} {}", n, s);
    std::printf("nodes:%s | GPUs %.0f, allocated %.0f (%.0f%%), mean util %.0f%%\njobs:%s\n\n",
                ns.c_str(), gpus, alloc, gpus > 0 ? 100 * alloc / gpus : 0.0,
                util_n ? 100 * util / util_n : 0.0, js.c_str());
    PrintTenants(tenants);
    std::printf("\n%-10s %-10s %5s %-9s %s\n", "ID", "TENANT", "GPUS", "STATE", "PLACEMENT");
    int shown = 0;
    for (int i = jobs.jobs_size() - 1; i >= 0 && shown < 15; --i) {
      const v1::Job& j = jobs.jobs(i);
      if (j.state() != "running" && j.state() != "pending") continue;
      std::printf("%-10s %-10s %5s %-9s %s\n", j.id().c_str(), j.tenant().c_str(),
                  GpuText(j).c_str(), j.state().c_str(), Placement(j).c_str());
      ++shown;
    }
    if (!tty) std::printf("----\n");
    std::fflush(stdout);
  }
  return Status::Ok();
}

void RegisterClients(CLI::App& app, const GlobalFlags&, int* exit_code) {
  auto f = std::make_shared<ClientFlags>();
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
    c->add_option("--controller", f->controller,
                  "controller HOST:PORT[,HOST:PORT...] (default 127.0.0.1:7070; the leader is followed)");
    c->add_option("-o,--output", f->output, "json: machine-readable output");
    AddAuthFlags(c, f.get());
  };

  CLI::App* sub = app.add_subcommand(
      "submit", "submit a job: gpool submit --gpus N [flags] -- COMMAND, or -f SPEC.yaml");
  client(sub);
  auto* gpus_opt = sub->add_option("--gpus", f->gpus, "whole GPUs (<= 8, or a multiple of 8)");
  auto* tenant_opt = sub->add_option("--tenant", f->tenant, "tenant (default: the token's tenant, else 'default')");
  sub->add_option("-f,--file", f->spec_file, "YAML job spec (docs/cli.md); flags override it");
  sub->add_option("--gpu-fraction", f->gpu_fraction, "a share of one GPU, e.g. 0.25");
  sub->add_option("--gpu-mem", f->gpu_mem, "GPU memory for a fraction, e.g. 20GiB");
  sub->add_option("--cpus", f->task_cpus, "CPUs per task, e.g. 16 or 0.5 (default: not requested)");
  sub->add_option("--mem", f->task_mem, "host memory per task, e.g. 256GiB (default: not requested)");
  sub->add_option("--gpu-model", f->job_gpu_model, "GPU model, e.g. H100 or 'A100|H100' (default any)");
  sub->add_option("--locality", f->locality, "node, leaf, pod or any (default any)");
  sub->add_flag("--locality-required", f->locality_required,
                "never place outside one --locality domain (default: preferred)");
  sub->add_flag("--non-preemptible", f->non_preemptible, "never preempt this job");
  sub->add_option("--gpu-source", f->gpu_source,
                  "local (default), pooled (local if the gang fits so, else GPUs of other nodes' "
                  "GPU servers) or remote (always through GPU servers)");
  sub->add_option("--gpu-within", f->gpu_within,
                  "pooled/remote: how far a task's GPUs may be: node, leaf, pod or any (default)");
  sub->add_option("--max-slowdown", f->max_slowdown,
                  "pooled/remote: largest estimated slowdown accepted, e.g. 1.1 (default any)");
  sub->add_option("--min-runtime", f->min_runtime, "not preempted before running this long");
  sub->add_option("--kind", f->kind, "training (default), inference or interactive");
  sub->add_option("--priority", f->priority, "priority class (higher first)");
  sub->add_option("--duration", f->duration, "run time, e.g. 60s, 5m (default 60s)");
  sub->add_option("--request-id", f->request_id, "idempotency key (default: random per call)");
  auto* wait_opt = sub->add_option("--wait", f->wait,
                                    "return once the job is bound (placed and running), waiting "
                                    "at most this long (default 60s); exit 1 if it is not")
                       ->expected(0, 1);
  sub->add_option("command", f->command, "the command (after --)");
  sub->callback([f, exit_code, gpus_opt, tenant_opt, wait_opt] {
    if (wait_opt->count() > 0 && f->wait.empty()) f->wait = "60s";
    Status s = Submit(*f, gpus_opt->count() > 0, tenant_opt->count() > 0);
    if (!s.ok()) {
      std::fprintf(stderr, "gpool submit: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });

  CLI::App* jobs = app.add_subcommand("jobs", "list, describe, cancel and watch jobs");
  client(jobs);
  auto filters = [f](CLI::App* c) {
    c->add_option("--tenant", f->tenant_filter, "only this tenant's jobs");
    c->add_option("--state", f->state_filter, "only jobs in this state (pending, running, ...)");
    c->add_flag("--history", f->history,
                "the archive: ended jobs that left the live state (controller retention)");
    c->add_option("--limit", f->history_limit,
                  "with --history: the newest N matching jobs (default 1000, at most 10000)");
  };
  filters(jobs);
  CLI::App* ls = jobs->add_subcommand("ls", "list jobs (the default)");
  client(ls);
  filters(ls);
  CLI::App* desc = jobs->add_subcommand("describe", "one job in detail");
  client(desc);
  desc->add_option("id", f->id, "job id")->required();
  desc->callback(run("jobs describe", [](const ClientFlags& x) { return JobOne(x, false); }));
  CLI::App* cancel = jobs->add_subcommand("cancel", "cancel a job");
  client(cancel);
  cancel->add_option("id", f->id, "job id")->required();
  cancel->callback(run("jobs cancel", [](const ClientFlags& x) { return JobOne(x, true); }));
  CLI::App* watch = jobs->add_subcommand("watch", "stream job changes (until Ctrl-C)");
  client(watch);
  watch->add_option("id", f->id, "only this job");
  watch->add_option("--tenant", f->tenant_filter, "only this tenant's jobs");
  watch->add_option("--count", f->iterations, "stop after this many events");
  watch->callback(run("jobs watch", JobsWatch));
  CLI::App* leases = jobs->add_subcommand("leases", "GPU-server lease tokens for a running job");
  client(leases);
  leases->add_option("id", f->id, "job id")->required();
  leases->add_option("--ttl", f->ttl_s, "lifetime in seconds (default 3600)");
  leases->callback(run("jobs leases", JobLeases));
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
  CLI::App* top = app.add_subcommand("top", "live view of nodes, tenants and jobs");
  client(top);
  top->add_option("--refresh-ms", f->refresh_ms, "redraw interval (default 1000)");
  top->add_option("--iterations", f->iterations, "stop after N frames (default: until Ctrl-C)");
  top->callback(run("top", Top));
}

GPOOL_REGISTER_COMMAND(RegisterClients);

}  // namespace
}  // namespace gpool::cli
