// Fuzzes the controller's HTTP request handling as a client reaches it: the gate's framing of
// one connection's bytes (request heads, Content-Length, the limits; http_server.h), then
// cpp-httplib's parsing and routing into the real handlers (/metrics, /api/state, /api/history,
// /api/fabric, the dashboard's files) and the token checks (http_auth.h), with a real Controller
// (SQLite in a temp dir, one node, one running job) behind them. The first input byte picks the
// server: even = open, odd = with tokens (the seeds carry valid ones). Any input must give
// responses, never a crash, hang or leak.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "control/api.h"
#include "control/auth.h"
#include "control/controller.h"
#include "control/http_server.h"

namespace {

using namespace gpool::control;  // NOLINT

constexpr const char* kTokens = R"(
admin-token-0123456789 admin
tenant-a-token-0123456 tenant a
metrics-token-01234567 metrics
agent-token-0123456789 agent
)";

struct Servers {
  std::string dir;
  std::unique_ptr<TokenAuth> auth;
  std::unique_ptr<Controller> controller;
  std::unique_ptr<ApiServer> open, with_tokens;
};

// Built once, kept until exit (the fuzzer never returns from its loop; the replay exits).
Servers* Start() {
  auto* s = new Servers;
  char dir[] = "/tmp/http_api_fuzz.XXXXXX";
  if (::mkdtemp(dir) == nullptr) std::abort();
  s->dir = dir;
  static std::string cleanup_dir = s->dir;
  std::atexit([] { std::filesystem::remove_all(cleanup_dir); });
  auto auth = TokenAuth::Parse(kTokens, "tokens");
  if (!auth.ok()) std::abort();
  s->auth = std::make_unique<TokenAuth>(std::move(*auth));
  ControllerOptions o;
  o.store_url = "sqlite:" + s->dir + "/state.db";
  o.tenant_quotas = {{"a", 8}};
  auto c = Controller::Open(o);
  if (!c.ok()) std::abort();
  s->controller = std::move(*c);
  gpool::v1::RegisterNodeRequest r;
  r.mutable_node()->set_name("n1");
  r.mutable_node()->set_gpus(8);
  r.mutable_node()->set_gpu_model("H100");
  gpool::v1::SubmitJobRequest j;
  j.set_tenant("a");
  j.set_gpus(2);
  if (!s->controller->RegisterNode(r).ok() || !s->controller->Submit(j).ok() ||
      !s->controller->ScheduleOnce().ok()) {
    std::abort();
  }
  for (bool tokens : {false, true}) {
    auto api = std::make_unique<ApiServer>(s->controller.get());
    ApiOptions ao;
    ao.grpc_listen = "127.0.0.1:0";
    ao.http_listen = "127.0.0.1:0";
    ao.auth = tokens ? s->auth.get() : nullptr;
    if (!api->Start(ao).ok()) std::abort();
    (tokens ? s->with_tokens : s->open) = std::move(api);
  }
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Servers* servers = Start();
  if (size == 0) return 0;
  ApiServer* api = (data[0] & 1) != 0 ? servers->with_tokens.get() : servers->open.get();
  std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::string out = api->http()->HandleBytes(input, "192.0.2.1");
  // Every answer the gate or httplib gives starts as an HTTP/1.1 status line.
  if (!out.empty() && out.rfind("HTTP/1.1 ", 0) != 0) std::abort();
  return 0;
}
