// `gpool fabric watch`: the event path from the real fabric to the controller. It receives
// OpenSM's events from the gpool event plugin (src/ib/osm_plugin), confirms each trap with
// targeted PortInfo queries of the trapping switch (ib::TrapWatcher) and reports every link or
// switch that changed to the controller's FabricService.Event (what `gpool fabric report` sends).
// It runs where OpenSM runs (it needs a umad port; under ibsim: LD_PRELOAD=libumad2sim.so), so
// the controller itself needs no InfiniBand access. One line per change on stdout, with the
// timestamps of each step, for latency measurements:
//   change link leaf-0[5] down trap_ns=... recv_ns=... probed_ns=... reported_ns=... generation=N
//   osm subnet_up n=K      (OpenSM finished its K-th sweep since the watcher started)
// Registered by fabric_cmd.cc (RegisterFabricWatch).
#include "cli/fabric_watch_cmd.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <ctime>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

#include "control/api.h"
#include "control/auth.h"
#include "control/fabric_source.h"
#include "gpool/v1/gpool.grpc.pb.h"
#include "ib/trap_watch.h"

namespace gpool::cli {
namespace {

struct WatchFlags {
  std::string events;
  std::string fabric;
  std::string controller = "127.0.0.1:7070";
  std::string token, token_file, tls_ca, tls_server_name;
  std::string ca;
  int ca_port = 0;
  int probe_timeout_ms = 100;
  int probe_retries = 1;
  bool no_learn = false;
  std::string ready_file;
};

std::atomic<bool> g_watch_stop{false};
void OnWatchSignal(int) { g_watch_stop = true; }

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

Status RunWatch(const WatchFlags& f) {
  if (f.events.empty()) return Status::InvalidArgument("--events: the socket path is required");
  if (f.fabric.empty()) return Status::InvalidArgument("--fabric: the fabric model is required");
  GPOOL_ASSIGN_OR_RETURN(fabric::Fabric model, control::LoadFabricSource(f.fabric));
  control::ClientOptions co;
  co.address = f.controller;
  co.tls_ca_file = f.tls_ca;
  co.tls_server_name = f.tls_server_name;
  GPOOL_ASSIGN_OR_RETURN(std::string token, control::ResolveToken(f.token, f.token_file));
  GPOOL_ASSIGN_OR_RETURN(auto channel, control::MakeChannel(co));
  auto stub = v1::FabricService::NewStub(channel);

  ib::TrapWatchOptions o;
  o.socket_path = f.events;
  o.probe.ca_name = f.ca;
  o.probe.ca_port = f.ca_port;
  o.probe.timeout_ms = f.probe_timeout_ms;
  o.probe.retries = f.probe_retries;
  o.learn_lids = !f.no_learn;
  GPOOL_ASSIGN_OR_RETURN(std::unique_ptr<ib::TrapWatcher> w, ib::TrapWatcher::Open(&model, o));
  std::printf("watching %s: %zu switches, %zu LIDs known\n", f.events.c_str(), model.num_switches(),
              w->known_lids());
  std::fflush(stdout);
  if (!f.ready_file.empty()) {
    if (FILE* r = std::fopen(f.ready_file.c_str(), "w")) std::fclose(r);
  }
  std::signal(SIGINT, OnWatchSignal);
  std::signal(SIGTERM, OnWatchSignal);
  size_t warned = 0;
  int64_t subnet_ups = 0;
  while (!g_watch_stop) {
    GPOOL_ASSIGN_OR_RETURN(std::vector<ib::FabricChange> changes, w->Poll(std::chrono::milliseconds(200)));
    if (w->subnet_ups() != subnet_ups) {  // OpenSM finished a sweep: scripts wait for it
      subnet_ups = w->subnet_ups();
      std::printf("osm subnet_up n=%ld\n", static_cast<long>(subnet_ups));
      std::fflush(stdout);
    }
    for (; warned < w->warnings().size(); ++warned) {
      std::fprintf(stderr, "gpool fabric watch: %s\n", w->warnings()[warned].c_str());
    }
    if (w->warnings().size() < warned) warned = w->warnings().size();  // the list is capped
    for (const ib::FabricChange& c : changes) {
      v1::FabricEventRequest req;
      if (c.is_switch) {
        req.set_switch_name(c.name);
      } else {
        req.set_link(c.name);
      }
      req.set_up(c.up);
      v1::FabricEventResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      control::AttachToken(&ctx, token);
      grpc::Status s = stub->Event(&ctx, req, &resp);
      int64_t reported = NowNs();
      if (!s.ok()) {
        // The controller may be restarting: say so and go on (the discovery sweep, if any, is
        // the backstop); the change is not retried.
        std::fprintf(stderr, "gpool fabric watch: report %s %s %s to %s failed: %s\n",
                     c.is_switch ? "switch" : "link", c.name.c_str(), c.up ? "up" : "down",
                     f.controller.c_str(), s.error_message().c_str());
        continue;
      }
      std::printf("change %s %s %s trap_ns=%ld recv_ns=%ld probed_ns=%ld reported_ns=%ld generation=%ld\n",
                  c.is_switch ? "switch" : "link", c.name.c_str(), c.up ? "up" : "down",
                  static_cast<long>(c.trap_ns), static_cast<long>(c.recv_ns),
                  static_cast<long>(c.probed_ns), static_cast<long>(reported),
                  static_cast<long>(resp.generation()));
    }
    if (!changes.empty()) std::fflush(stdout);
  }
  std::printf("stopped: %ld events, %ld MADs\n", static_cast<long>(w->events()), static_cast<long>(w->mads()));
  return Status::Ok();
}

}  // namespace

void RegisterFabricWatch(CLI::App* fab, int* exit_code) {
  auto f = std::make_shared<WatchFlags>();
  auto* c = fab->add_subcommand(
      "watch", "OpenSM events (gpool event plugin) -> targeted port probes -> controller fabric reports");
  c->add_option("--events", f->events, "UNIX datagram socket to bind (OpenSM's GPOOL_OSM_EVENTS)")->required();
  c->add_option("--fabric", f->fabric, "the fabric model (as the controller's --fabric)")->required();
  c->add_option("--controller", f->controller, "controller HOST:PORT (default 127.0.0.1:7070)");
  c->add_option("--token", f->token, "bearer token (default: --token-file, else $GPOOL_TOKEN)");
  c->add_option("--token-file", f->token_file, "file whose first word is the token");
  c->add_option("--tls-ca", f->tls_ca, "PEM CA certificate(s): use TLS, verify the controller");
  c->add_option("--tls-server-name", f->tls_server_name, "name expected in the controller's certificate");
  c->add_option("--ca", f->ca, "local CA for the probes (default: the first)");
  c->add_option("--ca-port", f->ca_port, "its port (default: the first active)");
  c->add_option("--probe-timeout-ms", f->probe_timeout_ms, "per-MAD timeout of a probe (default 100)");
  c->add_option("--probe-retries", f->probe_retries, "retries after a probe timeout (default 1)");
  c->add_flag("--no-learn-lids", f->no_learn, "learn switch LIDs from traps only (no discovery at start)");
  c->add_option("--ready-file", f->ready_file, "create this file once the socket is bound");
  c->callback([f, exit_code] {
    Status s = RunWatch(*f);
    if (!s.ok()) {
      std::fprintf(stderr, "gpool fabric watch: %s\n", s.ToString().c_str());
      *exit_code = 1;
    }
  });
}

}  // namespace gpool::cli
