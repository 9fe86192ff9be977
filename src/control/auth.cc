#include "control/auth.h"

#include <cstdlib>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <openssl/evp.h>

#include "common/file.h"

namespace gpool::control {
namespace {

std::string Digest(std::string_view token) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(token.data(), token.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), len);
}

bool TokenChar(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::string_view("._~+/=-").find(c) != std::string_view::npos;
}

std::vector<std::string> Words(std::string_view line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t' && line[j] != '\r') ++j;
    if (j > i) out.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

}  // namespace

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kAdmin: return "admin";
    case Role::kTenant: return "tenant";
    case Role::kAgent: return "agent";
  }
  return "?";
}

StatusOr<TokenAuth> TokenAuth::Load(const std::string& path) {
  GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return Parse(text, path);
}

StatusOr<TokenAuth> TokenAuth::Parse(std::string_view text, std::string_view source) {
  TokenAuth a;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? text.npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    size_t hash = line.find('#');
    if (hash != line.npos) line = line.substr(0, hash);
    std::vector<std::string> w = Words(line);
    if (w.empty()) continue;
    auto err = [&](const std::string& what) {
      return Status::InvalidArgument(fmt::format("{}:{}: {}", source, line_no, what));
    };
    const std::string& token = w[0];
    if (token.size() < 16) return err("token: at least 16 characters");
    for (char c : token) {
      if (!TokenChar(c)) return err("token: only [A-Za-z0-9._~+/=-]");
    }
    if (w.size() < 2) return err("want 'TOKEN admin', 'TOKEN tenant NAME' or 'TOKEN agent'");
    Principal p;
    if (w[1] == "admin" && w.size() == 2) {
      p.role = Role::kAdmin;
    } else if (w[1] == "agent" && w.size() == 2) {
      p.role = Role::kAgent;
    } else if (w[1] == "tenant" && w.size() == 3) {
      p.role = Role::kTenant;
      p.tenant = w[2];
    } else {
      return err(fmt::format("role '{}': want 'admin', 'tenant NAME' or 'agent'", w[1]));
    }
    if (!a.by_digest_.emplace(Digest(token), p).second) return err("token listed twice");
  }
  if (a.by_digest_.empty()) {
    return Status::InvalidArgument(fmt::format("{}: no tokens (an empty token file locks everyone out)", source));
  }
  return a;
}

std::optional<Principal> TokenAuth::Lookup(std::string_view token) const {
  if (token.empty()) return std::nullopt;
  auto it = by_digest_.find(Digest(token));
  if (it == by_digest_.end()) return std::nullopt;
  return it->second;
}

void AttachToken(grpc::ClientContext* ctx, const std::string& token) {
  if (!token.empty()) ctx->AddMetadata(kAuthMetadataKey, "Bearer " + token);
}

std::string BearerToken(std::string_view v) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (v.substr(0, kPrefix.size()) != kPrefix) return "";
  return std::string(v.substr(kPrefix.size()));
}

StatusOr<std::string> ResolveToken(const std::string& token, const std::string& token_file) {
  if (!token.empty()) return token;
  if (!token_file.empty()) {
    GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(token_file));
    std::vector<std::string> w = Words(text.substr(0, text.find('\n')));
    if (w.empty()) return Status::InvalidArgument(fmt::format("{}:1: no token", token_file));
    return w[0];
  }
  const char* env = std::getenv("GPOOL_TOKEN");
  return std::string(env ? env : "");
}

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& o) {
  if (o.tls_ca_file.empty()) {
    return grpc::CreateChannel(o.address, grpc::InsecureChannelCredentials());
  }
  GPOOL_ASSIGN_OR_RETURN(std::string roots, ReadFile(o.tls_ca_file));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = roots;
  grpc::ChannelArguments args;
  if (!o.tls_server_name.empty()) args.SetSslTargetNameOverride(o.tls_server_name);
  return grpc::CreateCustomChannel(o.address, grpc::SslCredentials(ssl), args);
}

}  // namespace gpool::control
