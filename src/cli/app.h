// The gpool command line as both binaries set it up (src/cli/CMakeLists.txt): main.cc (the full
// binary, every command) and front_main.cc (the lean front, the controller's client commands).
#pragma once

#include <CLI/CLI.hpp>

#include "cli/command.h"

namespace gpool::cli {

inline constexpr const char* kAppDescription = "gpool: one pool of the GPUs of an InfiniBand cluster";

// Adds the global flags, `version` and every command registered in this binary (command.h).
// The commands' callbacks set *exit_code.
void SetUpApp(CLI::App& app, GlobalFlags& flags, int* exit_code);

}  // namespace gpool::cli
