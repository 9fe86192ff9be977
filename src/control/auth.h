// Authentication for the controller's gRPC API: bearer tokens in gRPC metadata, optional TLS.
//
// Roles: an admin token may do everything; a tenant token sees and acts on its own tenant's
// jobs only (it cannot name another tenant, and other tenants' jobs are NOT_FOUND to it); an
// agent (cluster) token may only register nodes and heartbeat. The token file has one token per
// line:
//     <token> admin
//     <token> tenant <name>
//     <token> agent
// '#' starts a comment. Tokens are at least 16 characters of [A-Za-z0-9._~+/=-]. Tokens are
// kept only as SHA-256 digests and looked up by digest, so a lookup's timing says nothing
// useful about a stored token.
//
// Limits: tokens travel as `authorization: Bearer TOKEN`; without TLS (--tls-cert/--tls-key)
// they cross the network in clear text, so use TLS off loopback. No expiry or revocation:
// rotate by editing the file and restarting the controller.
//
// Thread safety: TokenAuth is immutable after Load/Parse and safe to share.
#pragma once

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

enum class Role { kAdmin, kTenant, kAgent };
std::string_view RoleName(Role r);

struct Principal {
  Role role = Role::kAdmin;
  std::string tenant;  // for kTenant
};

class TokenAuth {
 public:
  static StatusOr<TokenAuth> Load(const std::string& path);
  // `source` names the text in errors ("FILE:LINE: ...").
  static StatusOr<TokenAuth> Parse(std::string_view text, std::string_view source);
  std::optional<Principal> Lookup(std::string_view token) const;
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

}  // namespace gpool::control
