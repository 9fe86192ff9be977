// Authorization of the controller's HTTP endpoint (/api/*, /metrics) with the gRPC API's tokens
// (auth.h), so that turning auth on does not leave the same data open on the HTTP port.
//
// A request carries `Authorization: Bearer TOKEN` (the dashboard page sends the token it was
// given in its URL fragment, web/app.js; Prometheus sends `authorization: credentials` of its
// scrape config). Who sees what:
//   - admin: everything;
//   - tenant: /api/state with its own jobs and its own tenant row only (nodes are shared, as in
//     `gpool nodes`), /api/history with only its own per-tenant series, /api/fabric with only
//     its own jobs' loads and affected jobs; not /metrics (per-tenant series of everyone);
//   - metrics: /metrics only; agent: nothing.
// No, an unknown or an expired token is HTTP 401 (with `WWW-Authenticate: Bearer`) and a JSON
// body {"error": "..."} naming the path and the reason; a role not allowed is 403. /metrics
// may be made public (HttpAuthOptions::metrics_public, `--metrics-public`) for scrapers that
// cannot send a token. The static dashboard files (/, /app.js, /style.css) are always served:
// they contain no data, and the page must load to read its token.
//
// Without a TokenAuth everything is open, as the gRPC API.
//
// Limits: the HTTP endpoint has no TLS of its own, so tokens cross the network in clear text;
// keep it on loopback or behind a TLS proxy.
//
// Thread safety: HttpAuth is immutable after construction; Check may run on any thread.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>

#include "control/auth.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace gpool::control {

struct HttpAuthOptions {
  const TokenAuth* auth = nullptr;  // nullptr: open
  bool metrics_public = false;      // serve /metrics without a token
};

class HttpAuth {
 public:
  explicit HttpAuth(const HttpAuthOptions& options) : options_(options) {}

  // The caller of `req` if one of `allowed` may read it; otherwise the 401/403 answer is
  // written to `res` and nullopt returned. Open endpoint: an admin.
  std::optional<Principal> Check(const httplib::Request& req, httplib::Response& res,
                                 std::initializer_list<Role> allowed) const;
  // The same for /metrics (also open with metrics_public).
  bool CheckMetrics(const httplib::Request& req, httplib::Response& res) const;

  // "" for a caller that sees every tenant, else its tenant.
  static std::string TenantScope(const Principal& who) {
    return who.role == Role::kTenant ? who.tenant : "";
  }

 private:
  HttpAuthOptions options_;
};

}  // namespace gpool::control
