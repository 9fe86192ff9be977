// YamlScalar: one typed scalar of a YAML document, or an error that names where it is.
//
// Shared by the readers of gpool's YAML files (job specs, the simulator's queues). Header-only,
// so src/common does not link yaml-cpp: include it only from targets that do.
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "common/status.h"

namespace gpool {

// "SOURCE:LINE: KEY: WHAT" for node n, LINE counted from 1.
inline Status YamlError(std::string_view source, const YAML::Node& n, std::string_view key,
                        const std::string& what) {
  return Status::InvalidArgument(fmt::format("{}:{}: {}: {}", source, n.Mark().line + 1, key, what));
}

// n as a T; a non-scalar or a value that isn't a T is an error naming `key` and what was wanted.
template <typename T>
StatusOr<T> YamlScalar(std::string_view source, const YAML::Node& n, std::string_view key,
                       const char* want) {
  if (!n.IsScalar()) return YamlError(source, n, key, fmt::format("want {}", want));
  try {
    return n.as<T>();
  } catch (const YAML::Exception&) {
    return YamlError(source, n, key, fmt::format("want {}, got '{}'", want, n.Scalar()));
  }
}

}  // namespace gpool
