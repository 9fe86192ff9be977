#include "control/dashboard.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "control/controller.h"
#include "control/http_auth.h"
#include "control/web_assets.h"

namespace gpool::control {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void JsonError(httplib::Response& res, int code, const std::string& message) {
  res.status = code;
  // Messages may quote request bytes that are not UTF-8: replaced, not thrown (a 500).
  res.set_content(nlohmann::json({{"error", message}})
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                  "application/json");
}

}  // namespace

Dashboard::Dashboard(Controller* controller, const DashboardOptions& options)
    : controller_(controller), options_(options), history_(options.history_capacity) {}

Dashboard::~Dashboard() { Stop(); }

void Dashboard::Register(httplib::Server* http, const HttpAuth* auth) {
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    const WebAsset* a = &kWebAssets[i];
    auto serve = [a](const httplib::Request&, httplib::Response& res) {
      res.set_content(reinterpret_cast<const char*>(a->data), a->size, a->content_type);
      // The assets change only with the binary; the page's data comes from /api/*, never cached.
      res.set_header("Cache-Control", "no-cache");
    };
    http->Get(a->path, serve);
    if (std::string_view(a->path) == "/index.html") http->Get("/", serve);
  }
  http->Get("/api/history", [this, auth](const httplib::Request& req, httplib::Response& res) {
    std::string tenant;
    if (auth != nullptr) {
      auto who = auth->Check(req, res, {Role::kAdmin, Role::kTenant});
      if (!who) return;
      tenant = HttpAuth::TenantScope(*who);
    }
    StatusOr<int64_t> since = ParseSinceMs(req.get_param_value("since"));
    if (!since.ok()) return JsonError(res, 400, since.status().message());
    res.set_content(history_.Json(*since, options_.sample_interval.count(), tenant),
                    "application/json");
    res.set_header("Cache-Control", "no-store");
  });
}

void Dashboard::Start() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = false;
  }
  // The first sample is taken here, not by the thread, so that /api/history has a point as soon
  // as Start() returns (the page and its tests read it at once).
  history_.Add(SampleController(controller_, NowMs()));
  sampler_ = std::thread([this] {
    std::unique_lock<std::mutex> l(mu_);
    while (!cv_.wait_for(l, options_.sample_interval, [this] { return stop_; })) {
      l.unlock();
      history_.Add(SampleController(controller_, NowMs()));
      l.lock();
    }
  });
}

void Dashboard::Stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

}  // namespace gpool::control
