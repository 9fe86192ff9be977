// Helpers shared by the store tests (unit and multi-process). Test-only.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace gpool::control {

// A fresh directory under the system temporary directory; the caller removes it.
inline std::string MakeTempDir(const std::string& tag) {
  std::string tmpl = (std::filesystem::temp_directory_path() / ("gpool-" + tag + "-XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

}  // namespace gpool::control
