// EtcdClient: a small client for etcd v3 over its JSON gateway (grpc-gateway, /v3/...).
//
// Why the JSON gateway and not etcd's gRPC API: gRPC would mean vendoring etcd's .proto files
// (rpc.proto, kv.proto and their gogoproto/annotations imports) and compiling them into every
// build. The gateway ships in every etcd v3 server (Debian's 3.4 included) on the client port,
// speaks the same request/response messages as JSON, and cpp-httplib (already a dependency)
// is enough to talk to it. The cost is JSON encoding (keys and values are base64, int64s are
// strings) and one HTTP/1.1 connection per concurrent request; bench/ha_bench measures it.
//
// Endpoints: a cluster is given as "host:port,host:port,...". A call goes to the endpoint that
// last answered; when it cannot connect, the next one is tried (every member serves reads and
// forwards writes to the raft leader). A request whose connection broke after it was sent may
// or may not have been applied: it is retried on another endpoint only when `idempotent`, and
// otherwise fails with Unavailable saying the outcome is unknown.
//
// Errors: etcd's gRPC codes map to Status codes (3 -> InvalidArgument, 5 -> NotFound,
// 9 -> FailedPrecondition, 11 -> OutOfRange as FailedPrecondition, 14 -> Unavailable, ...),
// with etcd's message and the endpoint in the text.
//
// Thread safety: thread-safe. Each call borrows an idle HTTP connection (or opens one), so
// concurrent calls use separate connections.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace httplib {
class Client;
}

namespace gpool::control {

struct EtcdEndpoint {
  std::string host;
  int port = 0;
  std::string ToString() const;
};

struct EtcdClientOptions {
  std::chrono::milliseconds connect_timeout{1000};
  // A unary call's read timeout; etcd's own request timeout is 5 s plus election time.
  std::chrono::milliseconds request_timeout{8000};
};

// Parses "host:port[,host:port...]" (the part of an etcd:// URL after the slashes). Errors name
// the offending element.
StatusOr<std::vector<EtcdEndpoint>> ParseEtcdEndpoints(std::string_view list);

std::string Base64Encode(std::string_view bytes);
StatusOr<std::string> Base64Decode(std::string_view text);
// An int64 field of a gateway JSON message: a string ("5") or a number; absent = 0.
int64_t JsonInt(const nlohmann::json& j, const char* field);
// A bytes field (base64); absent = "".
StatusOr<std::string> JsonBytes(const nlohmann::json& j, const char* field);

class EtcdClient {
 public:
  EtcdClient(std::vector<EtcdEndpoint> endpoints, const EtcdClientOptions& options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POSTs `body` to `path` (e.g. "/v3/kv/range") and returns the decoded JSON answer.
  StatusOr<nlohmann::json> Call(std::string_view path, const nlohmann::json& body, bool idempotent);
  // The same, to one member only (no failover): for per-member checks.
  StatusOr<nlohmann::json> CallMember(size_t index, std::string_view path,
                                      const nlohmann::json& body);

  // A fresh connection to endpoint `index` for a long-lived stream (watch); the caller owns it.
  std::unique_ptr<httplib::Client> NewConnection(size_t index) const;

  const std::vector<EtcdEndpoint>& endpoints() const { return endpoints_; }
  // The endpoint calls go to first (the last one that answered).
  size_t preferred() const { return preferred_.load(); }
  std::string EndpointList() const;

 private:
  std::unique_ptr<httplib::Client> Borrow(size_t index);
  void Return(size_t index, std::unique_ptr<httplib::Client> c);
  // One attempt on one member. *retry_elsewhere tells whether another member may be tried.
  StatusOr<nlohmann::json> Attempt(size_t index, std::string_view path, const std::string& text,
                                   bool idempotent, bool* retry_elsewhere);

  const std::vector<EtcdEndpoint> endpoints_;
  const EtcdClientOptions options_;
  std::atomic<size_t> preferred_{0};
  std::mutex mu_;
  std::vector<std::vector<std::unique_ptr<httplib::Client>>> idle_;  // per endpoint; mu_
};

// Maps an etcd error answer (gRPC code + message) to a Status naming `where`.
Status EtcdError(int grpc_code, const std::string& message, const std::string& where);

}  // namespace gpool::control
