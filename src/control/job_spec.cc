#include "control/job_spec.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "common/file.h"
#include "common/names.h"
#include "common/units.h"
#include "common/yaml_scalar.h"

namespace gpool::control {
namespace {

struct Ctx {
  std::string_view source;
  Status Err(const YAML::Node& n, std::string_view key, const std::string& what) const {
    return YamlError(source, n, key, what);
  }
};

template <typename T>
StatusOr<T> Scalar(const Ctx& c, const YAML::Node& n, std::string_view key, const char* want) {
  return YamlScalar<T>(c.source, n, key, want);
}

// A string value. YAML's "\0" escape makes a NUL byte, which no argv, name or path can hold:
// refused rather than cut short somewhere later.
StatusOr<std::string> SpecText(const Ctx& c, const YAML::Node& n, std::string_view key, const char* want) {
  GPOOL_ASSIGN_OR_RETURN(std::string s, Scalar<std::string>(c, n, key, want));
  if (size_t nul = s.find('\0'); nul != std::string::npos) {
    return c.Err(n, key, fmt::format("a NUL byte at position {}", nul));
  }
  return s;
}

// A name (common/names.h): the syntax error, at the value's line.
StatusOr<std::string> SpecName(const Ctx& c, const YAML::Node& n, std::string_view key) {
  GPOOL_ASSIGN_OR_RETURN(std::string s, SpecText(c, n, key, "a name"));
  if (Status bad = ValidateName(key, s); !bad.ok()) {
    return Status::InvalidArgument(fmt::format("{}:{}: {}", c.source, n.Mark().line + 1, bad.message()));
  }
  return s;
}

// Keys that set the same field: a second one would silently override the first.
std::string_view SpecField(std::string_view key) {
  if (key == "mem") return "memory";
  if (key == "gpu_milli") return "gpu_fraction";
  return key;
}

// A duration; the key already names it, so the message does not repeat "duration".
StatusOr<double> SpecDuration(const Ctx& c, const YAML::Node& n, std::string_view key) {
  GPOOL_ASSIGN_OR_RETURN(std::string s, SpecText(c, n, key, "a duration, e.g. 10m"));
  std::string_view t = Trim(s);
  if (!t.empty() && t[0] == '-') {
    return c.Err(n, key, fmt::format("must not be negative, got '{}'", EscapeForMessage(s)));
  }
  auto d = ParseDurationSeconds(t);
  if (!d.ok()) {
    return c.Err(n, key, fmt::format("want a duration such as 90, 90s, 10m, 2h or 1d, got '{}'",
                                     EscapeForMessage(s)));
  }
  return *d;
}

}  // namespace

StatusOr<int32_t> GpuFractionToMilli(std::string_view field, double fraction) {
  const std::string at = field.empty() ? "" : fmt::format("{}: ", field);
  if (!std::isfinite(fraction) || !(fraction > 0 && fraction < 1)) {
    return Status::InvalidArgument(
        fmt::format("{}want a share of one GPU from 0.001 to 0.999, got {}", at, fraction));
  }
  const double milli = fraction * 1000;
  constexpr double kEps = 1e-6;  // decimal input such as 0.3 is 300.00000000000006 milli
  if (milli < 1 - kEps) {
    return Status::InvalidArgument(fmt::format(
        "{}{} is below the unit of 0.001 GPU (one milli-GPU); ask for at least 0.001", at,
        fraction));
  }
  if (milli > 999 + kEps) {
    return Status::InvalidArgument(fmt::format(
        "{}{} is above 0.999, the largest fraction at the unit of 0.001 GPU; ask for a whole "
        "GPU instead", at, fraction));
  }
  const double whole = std::round(milli);
  if (std::abs(milli - whole) > kEps) {
    return Status::InvalidArgument(fmt::format(
        "{}{} is finer than the unit of 0.001 GPU (one milli-GPU); use {:.3f} or {:.3f}", at,
        fraction, std::floor(milli) / 1000, std::ceil(milli) / 1000));
  }
  return static_cast<int32_t>(whole);
}

StatusOr<v1::SubmitJobRequest> ParseJobSpecYaml(std::string_view text, std::string_view source) {
  Ctx c{source};
  // A raw NUL byte: yaml-cpp would read the text only up to it (or keep it in a value).
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(nul), '\n'));
    return Status::InvalidArgument(fmt::format("{}:{}: a NUL byte in the file", source, line));
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::ParserException& e) {
    return Status::InvalidArgument(
        fmt::format("{}:{}: {}", source, e.mark.line + 1, e.msg));
  }
  if (!root.IsMap()) {
    return Status::InvalidArgument(fmt::format("{}: want a mapping of job fields", source));
  }
  v1::SubmitJobRequest r;  // no tenant: the token's tenant, or "default"
  bool whole = false, fraction = false;
  std::map<std::string, int, std::less<>> seen;  // field -> line of the key that set it
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) return c.Err(kv.first, "key", "want a plain key such as gpus");
    std::string key = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    // yaml-cpp keeps every duplicate of a key (the last would win): refused, naming both lines.
    int line = kv.first.Mark().line + 1;
    if (auto [it, added] = seen.emplace(SpecField(key), line); !added) {
      return c.Err(kv.first, EscapeForMessage(key),
                   fmt::format("duplicate key: {} is already set at line {}",
                               EscapeForMessage(it->first), it->second));
    }
    if (key == "tenant") {
      GPOOL_ASSIGN_OR_RETURN(*r.mutable_tenant(), SpecName(c, v, key));
    } else if (key == "gpus") {
      GPOOL_ASSIGN_OR_RETURN(int g, Scalar<int>(c, v, key, "a whole number"));
      r.set_gpus(g);
      whole = true;
    } else if (key == "gpu_fraction") {
      GPOOL_ASSIGN_OR_RETURN(double f, Scalar<double>(c, v, key, "a number from 0.001 to 0.999"));
      StatusOr<int32_t> m = GpuFractionToMilli("", f);  // YamlError names the key
      if (!m.ok()) return c.Err(v, key, std::string(m.status().message()));
      r.set_gpu_milli(*m);
      fraction = true;
    } else if (key == "gpu_milli") {
      GPOOL_ASSIGN_OR_RETURN(int m, Scalar<int>(c, v, key, "milli-GPU, 1..999"));
      // 0 would read as whole GPUs at the API, 1000 as one whole GPU: neither is a fraction.
      if (m < 1 || m > 999) return c.Err(v, key, fmt::format("want milli-GPU 1..999, got {}", m));
      r.set_gpu_milli(m);
      fraction = true;
    } else if (key == "gpu_memory") {
      GPOOL_ASSIGN_OR_RETURN(std::string s, SpecText(c, v, key, "bytes, e.g. 20GiB"));
      auto b = ParseBytes(s);
      if (!b.ok()) return c.Err(v, key, b.status().message());
      r.set_gpu_memory_bytes(*b);
    } else if (key == "cpus") {
      GPOOL_ASSIGN_OR_RETURN(double cpus, Scalar<double>(c, v, key, "CPUs per task, e.g. 4 or 0.5"));
      if (!(cpus > 0 && cpus <= 1e9)) return c.Err(v, key, fmt::format("want CPUs > 0, got {}", cpus));
      r.set_cpu_milli(static_cast<int64_t>(cpus * 1000 + 0.5));
    } else if (key == "memory" || key == "mem") {
      GPOOL_ASSIGN_OR_RETURN(std::string s, SpecText(c, v, key, "bytes per task, e.g. 64GiB"));
      auto b = ParseBytes(s);
      if (!b.ok()) return c.Err(v, key, std::string(b.status().message()));
      r.set_memory_bytes(*b);
    } else if (key == "gpu_model") {
      GPOOL_ASSIGN_OR_RETURN(*r.mutable_gpu_model(), SpecText(c, v, key, "a model"));
    } else if (key == "locality") {
      GPOOL_ASSIGN_OR_RETURN(*r.mutable_locality(), SpecText(c, v, key, "node, leaf, pod or any"));
    } else if (key == "locality_required") {
      GPOOL_ASSIGN_OR_RETURN(bool b, Scalar<bool>(c, v, key, "true or false"));
      r.set_locality_required(b);
    } else if (key == "preemptible") {
      GPOOL_ASSIGN_OR_RETURN(bool b, Scalar<bool>(c, v, key, "true or false"));
      r.set_preemptible(b);
    } else if (key == "min_runtime" || key == "duration") {
      GPOOL_ASSIGN_OR_RETURN(double d, SpecDuration(c, v, key));
      if (key == "duration") {
        r.set_duration_s(d);
      } else {
        r.set_min_runtime_s(d);
      }
    } else if (key == "gpu_source") {
      GPOOL_ASSIGN_OR_RETURN(*r.mutable_gpu_source(), SpecText(c, v, key, "local, pooled or remote"));
    } else if (key == "gpu_within") {
      GPOOL_ASSIGN_OR_RETURN(*r.mutable_gpu_within(), SpecText(c, v, key, "node, leaf, pod or any"));
    } else if (key == "max_slowdown") {
      GPOOL_ASSIGN_OR_RETURN(double x, Scalar<double>(c, v, key, "a factor >= 1, e.g. 1.1, or 0"));
      if (!std::isfinite(x) || (x != 0 && !(x >= 1))) {
        return c.Err(v, key, fmt::format("want 0 (any) or a factor >= 1, got {}", x));
      }
      r.set_max_slowdown(x);
    } else if (key == "kind") {
      GPOOL_ASSIGN_OR_RETURN(*r.mutable_kind(), SpecText(c, v, key, "training, inference or interactive"));
    } else if (key == "priority") {
      GPOOL_ASSIGN_OR_RETURN(int p, Scalar<int>(c, v, key, "a whole number"));
      r.set_priority(p);
    } else if (key == "request_id") {
      GPOOL_ASSIGN_OR_RETURN(*r.mutable_client_request_id(), SpecName(c, v, key));
    } else if (key == "command") {
      if (v.IsSequence()) {
        for (const auto& part : v) {
          GPOOL_ASSIGN_OR_RETURN(
              std::string s, SpecText(c, part, fmt::format("command[{}]", r.command_size()), "strings"));
          r.add_command(s);
        }
      } else {
        GPOOL_ASSIGN_OR_RETURN(std::string s, SpecText(c, v, key, "a list or string"));
        size_t i = 0;
        while (i < s.size()) {
          while (i < s.size() && s[i] == ' ') ++i;
          size_t j = s.find(' ', i);
          if (j == std::string::npos) j = s.size();
          if (j > i) r.add_command(s.substr(i, j - i));
          i = j;
        }
      }
    } else {
      return c.Err(kv.first, EscapeForMessage(key),
                   "unknown key (want tenant, gpus, gpu_fraction, gpu_milli, gpu_memory, "
                   "cpus, memory, gpu_model, locality, locality_required, gpu_source, gpu_within, "
                   "max_slowdown, preemptible, min_runtime, kind, priority, duration, request_id, "
                   "command)");
    }
  }
  if (fraction) {
    if (whole && r.gpus() != 1) {
      return Status::InvalidArgument(
          fmt::format("{}: gpus: a fractional request takes a share of one GPU (gpus: 1)", source));
    }
    r.set_gpus(1);
  } else if (!whole) {
    return Status::InvalidArgument(
        fmt::format("{}: gpus: required (or gpu_fraction / gpu_milli)", source));
  }
  return r;
}

}  // namespace gpool::control
