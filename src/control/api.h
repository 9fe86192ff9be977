// The controller's network surfaces: the gpool.v1 gRPC services and the HTTP endpoint
// (/metrics in Prometheus text format, /api/state as JSON, and the web dashboard: dashboard.h).
//
// Auth (auth.h): with ApiOptions::auth set, every gRPC call must carry a known bearer token and
// stays inside its role (tenant tokens: own jobs only; agent tokens: Register and Heartbeat
// only). Without it the API is open: listen on loopback or a trusted network only. TLS: set
// tls_cert_file and tls_key_file (gRPC only). The HTTP endpoint (/metrics, /api/*) obeys the
// same tokens (http_auth.h) but has no TLS: bind it to loopback or put it behind a TLS proxy.
//
// Thread safety: ApiServer's Start/Shutdown from one thread; the services themselves run on
// gRPC's and httplib's threads and only call the (thread-safe) Controller.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "control/auth.h"
#include "control/controller.h"
#include "control/http_limits.h"
#include "control/rpc_common.h"  // ToGrpc, FromGrpc, ParseHostPort

namespace grpc {
class Server;
class Status;
}  // namespace grpc
namespace gpool::control {

class Dashboard;
class HttpAuth;
class HttpServer;

struct ApiOptions {
  std::string grpc_listen = "127.0.0.1:7070";  // HOST:PORT; port 0 picks a free port
  std::string http_listen;                      // HOST:PORT; empty = no HTTP endpoint
  const TokenAuth* auth = nullptr;              // nullptr = no authentication (open API)
  bool metrics_public = false;                  // HTTP /metrics without a token (http_auth.h)
  std::string tls_cert_file, tls_key_file;      // PEM; both or neither
  HttpLimits http_limits;                       // slow and numerous clients (http_server.h)
};

class ApiServer {
 public:
  explicit ApiServer(Controller* controller);
  ~ApiServer();
  Status Start(const ApiOptions& options);
  void Shutdown();
  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  // The HTTP endpoint (nullptr without one): for the fuzz target's HandleBytes.
  HttpServer* http() { return http_.get(); }

 private:
  struct Services;
  Controller* controller_;
  std::unique_ptr<Services> services_;
  const TokenAuth* auth_ = nullptr;
  std::unique_ptr<grpc::Server> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<HttpAuth> http_auth_;    // authorizes the HTTP endpoint (http_auth.h)
  std::unique_ptr<Dashboard> dashboard_;  // the web UI on the HTTP endpoint (dashboard.h)
  std::thread http_thread_;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

}  // namespace gpool::control
