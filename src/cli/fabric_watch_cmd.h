// `gpool fabric watch` (fabric_watch_cmd.cc): OpenSM's events -> targeted probes -> controller.
// Registered by fabric_cmd.cc under its `fabric` command.
#pragma once

#include <CLI/CLI.hpp>

namespace gpool::cli {

void RegisterFabricWatch(CLI::App* fabric, int* exit_code);

}  // namespace gpool::cli
