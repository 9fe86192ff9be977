// The web dashboard served by the controller's HTTP endpoint: the embedded static page
// (web/, see web_assets.h) at "/", and /api/history (utilization over time) fed by a sampler
// thread. The page itself polls /api/state, /api/history and, when the controller has one,
// /api/fabric (docs/control-plane.md).
//
// Lifetime: construct after the Controller and destroy before it; Register() the routes on the
// httplib::Server before it listens, and Stop() (or destroy) only after that server stopped, so
// no handler runs on a destroyed Dashboard.
//
// Thread safety: Register/Start/Stop from one thread; the handlers run on httplib's threads
// and only touch the (thread-safe) History and Controller.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "control/history.h"

namespace httplib {
class Server;
}

namespace gpool::control {

class Controller;
class HttpAuth;

struct DashboardOptions {
  std::chrono::milliseconds sample_interval{1000};
  size_t history_capacity = 3600;  // one hour at the default interval
};

class Dashboard {
 public:
  Dashboard(Controller* controller, const DashboardOptions& options);
  ~Dashboard();

  // Adds GET / (and every embedded file by name) and GET /api/history?since=MS, the latter
  // authorized by `auth` (http_auth.h; nullptr = open). `auth` must outlive the server.
  void Register(httplib::Server* http, const HttpAuth* auth = nullptr);
  // Takes one sample now, then one per sample_interval until Stop().
  void Start();
  void Stop();

  History& history() { return history_; }

 private:
  Controller* const controller_;
  const DashboardOptions options_;
  History history_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread sampler_;
};

}  // namespace gpool::control
