#include "control/auth.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <openssl/evp.h>

#include "common/file.h"
#include "common/names.h"

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
    case Role::kMetrics: return "metrics";
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
    if (w.size() < 2) {
      return err("want 'TOKEN admin', 'TOKEN tenant NAME', 'TOKEN agent' or 'TOKEN metrics'");
    }
    Principal p;
    constexpr std::string_view kExpires = "expires=";
    if (w.size() >= 3 && std::string_view(w.back()).substr(0, kExpires.size()) == kExpires) {
      auto when = ParseExpiry(std::string_view(w.back()).substr(kExpires.size()), "expires");
      if (!when.ok()) return err(std::string(when.status().message()));
      p.expires_unix_s = *when;
      w.pop_back();
    }
    if (w[1] == "admin" && w.size() == 2) {
      p.role = Role::kAdmin;
    } else if (w[1] == "agent" && w.size() == 2) {
      p.role = Role::kAgent;
    } else if (w[1] == "metrics" && w.size() == 2) {
      p.role = Role::kMetrics;
    } else if (w[1] == "tenant" && w.size() == 3) {
      p.role = Role::kTenant;
      p.tenant = w[2];
      if (Status bad = ValidateName("tenant", p.tenant); !bad.ok()) return err(bad.message());
    } else {
      return err(fmt::format("role '{}': want 'admin', 'tenant NAME', 'agent' or 'metrics' "
                             "(then optionally expires=YYYY-MM-DD[THH:MM:SSZ])", w[1]));
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

StatusOr<Principal> TokenAuth::Authenticate(std::string_view token, int64_t now_unix_s) const {
  if (token.empty()) return Status::PermissionDenied("missing token");
  std::optional<Principal> p = Lookup(token);
  if (!p) return Status::PermissionDenied("unknown token");
  if (p->expires_unix_s != 0 && now_unix_s >= p->expires_unix_s) {
    return Status::PermissionDenied(
        fmt::format("token expired at {}", FormatExpiry(p->expires_unix_s)));
  }
  return *p;
}

StatusOr<int64_t> ParseExpiry(std::string_view text, std::string_view what) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  char tail = 0;
  const std::string t(text);
  bool ok = false;
  if (t.size() == 10) {
    ok = std::sscanf(t.c_str(), "%4d-%2d-%2d%c", &y, &mo, &d, &tail) == 3;
  } else if (t.size() == 20) {
    ok = std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%c", &y, &mo, &d, &h, &mi, &s, &tail) == 7 &&
         tail == 'Z';
  }
  if (!ok || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) {
    return Status::InvalidArgument(fmt::format(
        "{}: want UTC YYYY-MM-DD or YYYY-MM-DDTHH:MM:SSZ, got '{}'", what, text));
  }
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<int64_t>(timegm(&tm));
}

std::string FormatExpiry(int64_t unix_s) {
  std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t NowUnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
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

std::string ChannelTarget(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) return address;
  const std::string port = address.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return address;
  std::string host = address.substr(0, colon);
  unsigned char buf[sizeof(struct in6_addr)];
  if (inet_pton(AF_INET, host.c_str(), buf) == 1) return "ipv4:" + address;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']' &&
      inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), buf) == 1) {
    return "ipv6:" + address;
  }
  return address;
}

StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& o) {
  grpc::ChannelArguments args;
  // gRPC's reconnect backoff grows to 120 s while the controller is down; an agent would then
  // come back long after a restarted controller's node timeout (5-30 s) and see its nodes
  // declared lost and their jobs re-queued. One try a second is cheap for one controller.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  if (o.tls_ca_file.empty()) {
    return grpc::CreateCustomChannel(ChannelTarget(o.address), grpc::InsecureChannelCredentials(),
                                     args);
  }
  GPOOL_ASSIGN_OR_RETURN(std::string roots, ReadFile(o.tls_ca_file));
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = roots;
  if (!o.tls_server_name.empty()) args.SetSslTargetNameOverride(o.tls_server_name);
  return grpc::CreateCustomChannel(ChannelTarget(o.address), grpc::SslCredentials(ssl), args);
}

}  // namespace gpool::control
