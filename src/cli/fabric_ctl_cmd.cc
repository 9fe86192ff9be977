#include "cli/fabric_ctl.h"

#include <cstdio>
#include <map>

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include "common/names.h"
#include "control/api.h"
#include "control/auth.h"
#include "control/fabric_source.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::cli {

void AddControllerFabricFlags(CLI::App* ctl, ControllerFabricFlags* f) {
  ctl->add_option("--fabric", f->fabric,
                  "fabric file (ibnetdiscover/ibsim/Clos CSV) or gen:brief, gen:fat-tree:k=v,...");
  ctl->add_option("--fabric-engine", f->engine, "routing engine for paths and loads (default minhop)")
      ->check(CLI::IsMember({"minhop", "updn", "ftree", "dor"}));
  ctl->add_option("--fabric-lfts", f->lfts,
                  "OpenSM's opensm-lfts.dump: take routes from it (re-read when OpenSM rewrites it)");
  ctl->add_option("--fabric-sweep", f->sweep,
                  "discovery command printing ibnetdiscover output, run every --fabric-sweep-ms");
  ctl->add_option("--fabric-sweep-ms", f->sweep_ms, "fabric loop interval (default 1000)");
  ctl->add_option("--fabric-sweep-confirm", f->sweep_confirm,
                  "sweeps in a row that must miss a link/switch before it is down (default 2)");
  ctl->add_option("--fabric-hold-down-ms", f->hold_down_ms,
                  "a link/switch must stay up this long before it counts as up (default 5000)");
  ctl->add_option("--partitions", f->partitions,
                  "write OpenSM partitions.conf here (+ .qos-policy, .opensm.conf) from the tenants' jobs");
  ctl->add_option("--opensm-pid", f->opensm_pid, "OpenSM pid or pid file: SIGHUP after rewriting partitions");
  ctl->add_option("--tenant-sl", f->tenant_sl, "TENANT=SL service level for a tenant (repeatable)");
  ctl->add_option("--default-sl", f->default_sl, "SL of tenants without --tenant-sl (default 0)");
}

StatusOr<std::shared_ptr<control::FabricView>> OpenControllerFabric(const ControllerFabricFlags& f) {
  if (f.fabric.empty()) {
    if (!f.sweep.empty() || !f.partitions.empty() || !f.lfts.empty()) {
      return Status::InvalidArgument("--fabric-sweep, --fabric-lfts, --partitions: need --fabric");
    }
    return std::shared_ptr<control::FabricView>();
  }
  control::FabricViewOptions o;
  o.source = f.fabric;
  o.engine = f.engine;
  o.lfts_path = f.lfts;
  if (f.hold_down_ms < 0) return Status::InvalidArgument("--fabric-hold-down-ms: must be >= 0");
  o.hold_down = std::chrono::milliseconds(f.hold_down_ms);
  if (f.sweep_confirm < 1) return Status::InvalidArgument("--fabric-sweep-confirm: must be >= 1");
  o.down_confirmations = f.sweep_confirm;
  GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<control::FabricView> v, control::FabricView::Open(o));
  return std::shared_ptr<control::FabricView>(std::move(v));
}

StatusOr<std::unique_ptr<control::FabricMonitor>> StartFabricMonitor(control::Controller* c,
                                                                    const ControllerFabricFlags& f) {
  if (!c->fabric()) return std::unique_ptr<control::FabricMonitor>();
  if (f.sweep_ms < 10) return Status::InvalidArgument("--fabric-sweep-ms: must be >= 10");
  control::FabricMonitorOptions o;
  o.interval = std::chrono::milliseconds(f.sweep_ms);
  o.sweep_command = f.sweep;
  o.partitions_path = f.partitions;
  o.opensm_pid = f.opensm_pid;
  o.partitions.default_sl = f.default_sl;
  for (const std::string& t : f.tenant_sl) {
    size_t eq = t.find('=');
    int sl = -1;
    try {
      if (eq != std::string::npos && eq > 0) sl = std::stoi(t.substr(eq + 1));
    } catch (const std::exception&) {
      sl = -1;
    }
    if (sl < 0 || sl > 15) return Status::InvalidArgument(fmt::format("--tenant-sl: want TENANT=SL (0..15), got '{}'", t));
    GPOOL_RETURN_IF_ERROR(ValidateName("--tenant-sl: TENANT", t.substr(0, eq)));
    o.partitions.tenant_sl[t.substr(0, eq)] = sl;
  }
  auto m = std::make_unique<control::FabricMonitor>(c, o);
  // A first pass now, so that bad partition options fail the start instead of a log line (an
  // OpenSM that is not running yet is not an error: the files are there for it to start with).
  Status first = m->SyncPartitionsOnce();
  if (first.code() == StatusCode::kInvalidArgument) return first;
  if (!first.ok()) std::fprintf(stderr, "gpool controller: partitions: %s (retrying)\n", first.ToString().c_str());
  m->Start();
  return m;
}

StatusOr<std::vector<std::string>> FabricHostNames(const std::string& source) {
  GPOOL_ASSIGN_OR_RETURN(fabric::Fabric f, control::LoadFabricSource(source));
  std::vector<std::string> out;
  for (const auto& h : control::FabricHosts(f)) out.push_back(h.name);
  if (out.empty()) return Status::InvalidArgument(fmt::format("--fabric {}: no hosts", source));
  return out;
}

namespace {

struct ClientFlags {
  std::string controller = "127.0.0.1:7070";
  std::string output = "table";
  bool all = false;
  std::string from, to;
  int rail = 0;
  std::string link, sw, state;
  std::string token, token_file, tls_ca, tls_server_name;
};

std::string CtlJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  o.add_whitespace = true;
  o.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

Status CtlCall(const ClientFlags& f, const std::function<grpc::Status(v1::FabricService::Stub*, grpc::ClientContext*)>& fn) {
  control::ClientOptions o;
  o.address = f.controller;
  o.tls_ca_file = f.tls_ca;
  o.tls_server_name = f.tls_server_name;
  GPOOL_ASSIGN_OR_RETURN(std::string token, control::ResolveToken(f.token, f.token_file));
  GPOOL_ASSIGN_OR_RETURN(auto channel, control::MakeChannel(o));
  auto stub = v1::FabricService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  control::AttachToken(&ctx, token);
  grpc::Status s = fn(stub.get(), &ctx);
  if (s.ok()) return Status::Ok();
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE || s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return Status::Unavailable(fmt::format("cannot reach the controller at {} ({}); is `gpool controller` running there?",
                                           f.controller, s.error_message()));
  }
  return control::FromGrpc(s).WithContext(fmt::format("controller {}", f.controller));
}

std::string End(const std::string& n, int port) { return fmt::format("{}[{}]", n, port); }

void PrintLinks(const google::protobuf::RepeatedPtrField<v1::FabricLink>& links, bool numbered) {
  std::printf("%s%-28s %-28s %-7s %-5s %5s  %s\n", numbered ? "HOP " : "", "FROM", "TO", "RATE",
              "STATE", "FLOWS", "JOBS");
  int i = 0;
  for (const v1::FabricLink& l : links) {
    std::string jobs;
    for (int j = 0; j < l.jobs_size() && j < 4; ++j) jobs += (j ? "," : "") + l.jobs(j);
    if (l.jobs_size() > 4) jobs += fmt::format(",+{}", l.jobs_size() - 4);
    if (numbered) std::printf("%-3d ", ++i);
    std::printf("%-28s %-28s %-7s %-5s %5d  %s\n", End(l.a(), l.a_port()).c_str(),
                End(l.b(), l.b_port()).c_str(), l.rate().c_str(), l.state().c_str(), l.flows(),
                jobs.empty() ? "-" : jobs.c_str());
  }
}

Status Show(const ClientFlags& f) {
  v1::GetFabricRequest req;
  req.set_all_links(f.all);
  v1::GetFabricResponse r;
  GPOOL_RETURN_IF_ERROR(CtlCall(f, [&](auto* s, auto* c) { return s->Get(c, req, &r); }));
  if (f.output == "json") {
    std::printf("%s\n", CtlJson(r).c_str());
    return Status::Ok();
  }
  int down_sw = 0, unreachable = 0;
  for (const auto& s : r.switches()) down_sw += !s.up();
  std::map<std::string, int> per_leaf;
  for (const auto& h : r.hosts()) {
    unreachable += !h.reachable();
    ++per_leaf[h.fabric() + "/" + h.pod() + "/" + h.leaf()];
  }
  std::printf("engine %s, generation %ld: %d switches (%d down), %d hosts (%d unreachable), %d links\n",
              r.engine().c_str(), r.generation(), r.switches_size(), down_sw, r.hosts_size(),
              unreachable, r.num_links());
  std::printf("%-40s %5s\n", "DOMAIN (fabric/pod/leaf)", "HOSTS");
  for (const auto& [d, n] : per_leaf) std::printf("%-40s %5d\n", d.c_str(), n);
  std::printf("\n%s links%s:\n", f.all ? "All" : "Loaded or failed", "");
  PrintLinks(r.links(), false);
  return Status::Ok();
}

Status PathCmd(const ClientFlags& f) {
  v1::FabricPathRequest req;
  req.set_from(f.from);
  req.set_to(f.to);
  req.set_rail(f.rail);
  v1::FabricPathResponse r;
  GPOOL_RETURN_IF_ERROR(CtlCall(f, [&](auto* s, auto* c) { return s->Path(c, req, &r); }));
  if (f.output == "json") {
    std::printf("%s\n", CtlJson(r).c_str());
    return Status::Ok();
  }
  std::printf("%s -> %s: %d links, %d switches\n", r.from_ca().c_str(), r.to_ca().c_str(),
              r.links_size(), r.switches());
  PrintLinks(r.links(), true);
  return Status::Ok();
}

Status HealthCmd(const ClientFlags& f) {
  v1::FabricHealthResponse r;
  GPOOL_RETURN_IF_ERROR(CtlCall(f, [&](auto* s, auto* c) { return s->Health(c, v1::FabricHealthRequest(), &r); }));
  if (f.output == "json") {
    std::printf("%s\n", CtlJson(r).c_str());
    return Status::Ok();
  }
  std::printf("%s (generation %ld), routes from %s\n", r.healthy() ? "healthy" : "DEGRADED",
              r.generation(), r.routes().c_str());
  if (!r.routes_error().empty()) std::printf("Routes: %s\n", r.routes_error().c_str());
  if (r.unreachable_pairs() > 0 || r.route_loops() > 0) {
    std::printf("\nThe routes leave %ld CA pairs unreachable, %ld looping:\n", r.unreachable_pairs(),
                r.route_loops());
    for (const auto& p : r.route_problems()) std::printf("  %s\n", p.c_str());
  }
  if (r.dead_switches_size() > 0) {
    std::printf("\nDead switches:");
    for (const auto& s : r.dead_switches()) std::printf(" %s", s.c_str());
    std::printf("\n");
  }
  if (r.dead_links_size() > 0) {
    std::printf("\nDead links:\n");
    PrintLinks(r.dead_links(), false);
  }
  if (r.degraded_size() > 0) {
    std::printf("\n%-32s %-6s %10s %10s\n", "DEGRADED DOMAIN", "LEVEL", "GBPS", "NOMINAL");
    for (const auto& d : r.degraded()) {
      std::printf("%-32s %-6s %10.0f %10.0f\n", d.name().c_str(), d.level().c_str(),
                  d.bandwidth_gbps(), d.nominal_gbps());
    }
  }
  if (r.unreachable_hosts_size() > 0) {
    std::printf("\nUnreachable hosts:");
    for (const auto& h : r.unreachable_hosts()) std::printf(" %s", h.c_str());
    std::printf("\n");
  }
  if (r.affected_jobs_size() > 0) {
    std::printf("\n%-10s %-10s %s\n", "AFFECTED", "TENANT", "DEAD LINKS ON ITS ROUTES");
    for (const auto& j : r.affected_jobs()) {
      std::string links;
      for (int i = 0; i < j.links_size(); ++i) links += (i ? "; " : "") + j.links(i);
      std::printf("%-10s %-10s %s\n", j.id().c_str(), j.tenant().c_str(), links.c_str());
    }
  }
  return Status::Ok();
}

Status Report(const ClientFlags& f) {
  if (f.link.empty() == f.sw.empty()) return Status::InvalidArgument("give one of --link SWITCH[PORT] or --switch NAME");
  v1::FabricEventRequest req;
  req.set_link(f.link);
  req.set_switch_name(f.sw);
  req.set_up(f.state == "up");
  v1::FabricEventResponse r;
  GPOOL_RETURN_IF_ERROR(CtlCall(f, [&](auto* s, auto* c) { return s->Event(c, req, &r); }));
  if (f.output == "json") {
    std::printf("%s\n", CtlJson(r).c_str());
  } else {
    std::printf("generation %ld\n", r.generation());
  }
  return Status::Ok();
}

}  // namespace

void RegisterFabricClient(CLI::App* fab, int* exit_code) {
  auto f = std::make_shared<ClientFlags>();
  auto run = [f, exit_code](const char* name, Status (*fn)(const ClientFlags&)) {
    return [f, exit_code, name, fn] {
      Status s = fn(*f);
      if (!s.ok()) {
        std::fprintf(stderr, "gpool fabric %s: %s\n", name, s.ToString().c_str());
        *exit_code = 1;
      }
    };
  };
  auto client = [f](CLI::App* c) {
    c->add_option("--controller", f->controller, "controller HOST:PORT (default 127.0.0.1:7070)");
    c->add_option("-o,--output", f->output, "table or json")->check(CLI::IsMember({"table", "json"}));
    c->add_option("--token", f->token, "bearer token (default: --token-file, else $GPOOL_TOKEN)");
    c->add_option("--token-file", f->token_file, "file whose first word is the token");
    c->add_option("--tls-ca", f->tls_ca, "PEM CA certificate(s): use TLS, verify the controller");
    c->add_option("--tls-server-name", f->tls_server_name, "name expected in the controller's certificate");
  };
  auto* show = fab->add_subcommand("show", "the controller's fabric: domains, loaded or failed links");
  client(show);
  show->add_flag("--all", f->all, "list every link");
  show->callback(run("show", Show));
  auto* path = fab->add_subcommand("path", "the route between two nodes over the controller's fabric");
  client(path);
  path->add_option("FROM", f->from, "host or HCA name")->required();
  path->add_option("TO", f->to, "host or HCA name")->required();
  path->add_option("--rail", f->rail, "HCA index on each host (default 0)");
  path->callback(run("path", PathCmd));
  auto* health = fab->add_subcommand("health", "dead links and switches, degraded domains, affected jobs");
  client(health);
  health->callback(run("health", HealthCmd));
  auto* report = fab->add_subcommand("report", "tell the controller a link or switch went down or up");
  client(report);
  report->add_option("--link", f->link, "SWITCH[PORT]");
  report->add_option("--switch", f->sw, "switch NAME");
  report->add_option("--state", f->state, "up or down")->required()->check(CLI::IsMember({"up", "down"}));
  report->callback(run("report", Report));
}

}  // namespace gpool::cli
