#include "control/metrics.h"

#include <fmt/format.h>

namespace gpool::control {

Histogram::Histogram(std::string name, std::string help, std::vector<double> bounds)
    : name_(std::move(name)), help_(std::move(help)), bounds_(std::move(bounds)),
      counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double seconds) {
  size_t i = 0;
  while (i < bounds_.size() && seconds > bounds_[i]) ++i;
  std::lock_guard<std::mutex> l(mu_);
  ++counts_[i];
  sum_ += seconds;
  ++count_;
}

uint64_t Histogram::count() const {
  std::lock_guard<std::mutex> l(mu_);
  return count_;
}

void Histogram::Render(std::string* out) const {
  std::lock_guard<std::mutex> l(mu_);
  *out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name_, help_, name_);
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name_, bounds_[i], cum);
  }
  cum += counts_.back();
  *out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name_, cum, name_,
                      sum_, name_, count_);
}

std::string PromLabel(std::string_view key, std::string_view value) {
  std::string out(key);
  out += "=\"";
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      out += '?';
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

void RenderGauge(std::string* out, const std::string& name, const std::string& help,
                 const std::vector<std::pair<std::string, double>>& labelled_values) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
  for (const auto& [labels, v] : labelled_values) {
    if (labels.empty()) {
      *out += fmt::format("{} {}\n", name, v);
    } else {
      *out += fmt::format("{}{{{}}} {}\n", name, labels, v);
    }
  }
}

}  // namespace gpool::control
