// Minimal Prometheus text-format metrics for the controller's /metrics endpoint.
//
// Only what the controller exports: histograms with fixed buckets (seconds). Gauges are written
// directly by the caller when the page is rendered, from the controller's state.
//
// Thread safety: a Histogram is thread-safe (one mutex; observations are rare: one per
// scheduling cycle or store commit).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace gpool::control {

class Histogram {
 public:
  // `bounds`: upper bounds of the buckets in seconds, ascending; +Inf is implicit.
  Histogram(std::string name, std::string help, std::vector<double> bounds);
  void Observe(double seconds);
  // Appends "# HELP", "# TYPE", the _bucket lines (cumulative), _sum and _count.
  void Render(std::string* out) const;
  uint64_t count() const;

 private:
  const std::string name_, help_;
  const std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// `key="value"` with the value escaped as the text format defines (`\\`, `\"`, `\n`), so no
// value can end the label set or the line; other control bytes become '?'. Label values from
// names (tenants) are validated at every entry (common/names.h): this is the second line.
std::string PromLabel(std::string_view key, std::string_view value);

// Appends one gauge sample; `labels` is "" or e.g. `state="free"` (build them with PromLabel).
void RenderGauge(std::string* out, const std::string& name, const std::string& help,
                 const std::vector<std::pair<std::string, double>>& labelled_values);

}  // namespace gpool::control
