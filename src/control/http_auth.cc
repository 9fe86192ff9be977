#include "control/http_auth.h"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

namespace gpool::control {
namespace {

void Deny(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  if (code == 401) res.set_header("WWW-Authenticate", "Bearer realm=\"gpool\"");
  res.set_header("Cache-Control", "no-store");
  res.set_content(nlohmann::json({{"error", message}}).dump(), "application/json");
}

}  // namespace

std::optional<Principal> HttpAuth::Check(const httplib::Request& req, httplib::Response& res,
                                         std::initializer_list<Role> allowed) const {
  if (options_.auth == nullptr) return Principal{Role::kAdmin, "", 0};
  if (!req.has_header("Authorization")) {
    Deny(res, 401, fmt::format("{}: missing 'Authorization: Bearer TOKEN' header (dashboard: open "
                               "the page as http://HOST:PORT/#token=TOKEN)", req.path));
    return std::nullopt;
  }
  std::string token = BearerToken(req.get_header_value("Authorization"));
  if (token.empty()) {
    Deny(res, 401, fmt::format("{}: the Authorization header is not 'Bearer TOKEN'", req.path));
    return std::nullopt;
  }
  StatusOr<Principal> who = options_.auth->Authenticate(token, NowUnixSeconds());
  if (!who.ok()) {
    Deny(res, 401, fmt::format("{}: {}", req.path, who.status().message()));
    return std::nullopt;
  }
  for (Role r : allowed) {
    if (who->role == r) return *who;
  }
  Deny(res, 403, fmt::format("{}: not allowed for a{} {} token", req.path,
                             who->role == Role::kAdmin || who->role == Role::kAgent ? "n" : "",
                             RoleName(who->role)));
  return std::nullopt;
}

bool HttpAuth::CheckMetrics(const httplib::Request& req, httplib::Response& res) const {
  if (options_.metrics_public) return true;
  return Check(req, res, {Role::kAdmin, Role::kMetrics}).has_value();
}

}  // namespace gpool::control
