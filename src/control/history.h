// Utilization over time for the dashboard: a fixed-size ring buffer of cluster samples
// (GPUs allocated / idle / down, jobs running / pending, GPUs in use per tenant), taken by the
// dashboard's sampler from the controller and served as /api/history.
//
// Memory is bounded: `capacity` samples (the default 3,600 at one per second is an hour), the
// oldest overwritten first. Samples live in memory only: a restarted controller starts an empty
// history (the durable state is jobs and nodes, in the Store).
//
// Thread safety: History is thread-safe (one mutex; one writer at about 1 Hz, few readers).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpool::control {

class Controller;

struct UtilSample {
  int64_t t_ms = 0;  // Unix milliseconds
  int64_t gpus_total = 0;
  int64_t gpus_allocated = 0;  // includes GPUs allocated on down nodes
  int64_t gpus_down = 0;       // GPUs of nodes that missed heartbeats or are powered off
  int64_t nodes_ready = 0;
  int64_t nodes_down = 0;
  int64_t jobs_running = 0;
  int64_t jobs_pending = 0;
  std::map<std::string, int64_t> tenant_gpus;  // GPUs in use per tenant (tenants with any)
};

class History {
 public:
  // Keeps the last `capacity` samples (0 is taken as 1).
  explicit History(size_t capacity);

  void Add(UtilSample s);
  // Samples with t_ms > since_ms, oldest first.
  std::vector<UtilSample> Since(int64_t since_ms) const;
  size_t size() const;
  size_t capacity() const { return capacity_; }

  // {"capacity":N,"interval_ms":I,"samples":[{"t":..,"total":..,"allocated":..,"down":..,
  //  "nodes_ready":..,"nodes_down":..,"running":..,"pending":..,"tenants":{"a":n}}]}
  // `only_tenant` (non-empty): the per-tenant series keep that tenant only (a tenant's view).
  std::string Json(int64_t since_ms, int64_t interval_ms, const std::string& only_tenant = "") const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<UtilSample> ring_;  // grows to capacity_, then overwritten at next_
  size_t next_ = 0;
};

// One sample of the controller's current state (through its public, thread-safe API).
UtilSample SampleController(Controller* c, int64_t now_ms);

// Parses the `since` query parameter (Unix ms, >= 0; empty means 0). Errors name the parameter.
StatusOr<int64_t> ParseSinceMs(const std::string& text);

}  // namespace gpool::control
