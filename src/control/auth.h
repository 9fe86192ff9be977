// Authentication for the controller's gRPC API: bearer tokens in gRPC metadata, optional TLS.
//
// Roles: an admin token may do everything; a tenant token sees and acts on its own tenant's
// jobs only (it cannot name another tenant, and other tenants' jobs are NOT_FOUND to it); an
// agent (cluster) token may only register nodes and heartbeat; a metrics token may only read
// the HTTP /metrics page (for a Prometheus scraper: it has no gRPC rights at all). The token
// file has one token per line:
//     <token> admin [expires=WHEN]
//     <token> tenant <name> [expires=WHEN]
//     <token> agent [expires=WHEN]
//     <token> metrics [expires=WHEN]
// WHEN is UTC, `YYYY-MM-DDTHH:MM:SSZ` or `YYYY-MM-DD` (00:00:00Z of that day); from that
// instant on the token is refused with "token expired at WHEN" (gRPC UNAUTHENTICATED, HTTP
// 401). '#' starts a comment. Tokens are at least 16 characters of [A-Za-z0-9._~+/=-]. Tokens
// are kept only as SHA-256 digests and looked up by digest, so a lookup's timing says nothing
// useful about a stored token.
//
// Limits: tokens travel as `authorization: Bearer TOKEN` (gRPC metadata or HTTP header);
// without TLS (--tls-cert/--tls-key; the HTTP endpoint has no TLS) they cross the network in
// clear text, so use TLS off loopback. Expiry is checked at every call against the controller's
// wall clock; there is no revocation list: revoke by editing the file and restarting.
//
// Thread safety: TokenAuth is immutable after Load/Parse and safe to share.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace gpool::control {

enum class Role { kAdmin, kTenant, kAgent, kMetrics };
std::string_view RoleName(Role r);

struct Principal {
  Role role = Role::kAdmin;
  std::string tenant;  // for kTenant
  int64_t expires_unix_s = 0;  // 0 = never
};

// Parses an expiry time (see above); errors name `what`.
StatusOr<int64_t> ParseExpiry(std::string_view text, std::string_view what);
std::string FormatExpiry(int64_t unix_s);  // "YYYY-MM-DDTHH:MM:SSZ"
int64_t NowUnixSeconds();

class TokenAuth {
 public:
  static StatusOr<TokenAuth> Load(const std::string& path);
  // `source` names the text in errors ("FILE:LINE: ...").
  static StatusOr<TokenAuth> Parse(std::string_view text, std::string_view source);
  // The principal of a stored token, expired or not (nullopt when unknown).
  std::optional<Principal> Lookup(std::string_view token) const;
  // The principal of a valid token at `now_unix_s`. The error (for an empty, unknown or
  // expired token) is the message of an UNAUTHENTICATED / HTTP 401 answer: "missing token",
  // "unknown token", "token expired at 2026-01-01T00:00:00Z".
  StatusOr<Principal> Authenticate(std::string_view token, int64_t now_unix_s) const;
  size_t size() const { return by_digest_.size(); }

 private:
  std::map<std::string, Principal> by_digest_;
};

// The metadata key and value a client attaches.
inline constexpr const char* kAuthMetadataKey = "authorization";
void AttachToken(grpc::ClientContext* ctx, const std::string& token);
// The token carried by a metadata value "Bearer TOKEN"; empty when it is not of that form.
std::string BearerToken(std::string_view metadata_value);

// How a client reaches the controller.
struct ClientOptions {
  std::string address = "127.0.0.1:7070";
  std::string token;        // empty: no authorization metadata
  std::string tls_ca_file;  // PEM roots to verify the controller's certificate; empty: plaintext
  std::string tls_server_name;  // override the name checked in the certificate (default: host)
};
// Resolves the token: `token` if set, else the first line of `token_file`, else $GPOOL_TOKEN.
StatusOr<std::string> ResolveToken(const std::string& token, const std::string& token_file);
StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options);
// The gRPC target for a controller address: "ipv4:A.B.C.D:PORT" / "ipv6:[...]:PORT" for an IP
// literal, so that gRPC's sockaddr resolver takes it as is (no DNS resolution on an executor
// thread: one thread hand-off and ~0.5 ms of a CLI command's CPU less); other addresses as given.
std::string ChannelTarget(const std::string& address);

}  // namespace gpool::control
