// `gpool fabric discover` and `gpool fabric port`: the live fabric through libibnetdisc and
// libibmad (src/ib). Registered by fabric_cmd.cc under its `fabric` command, since CLI11
// subcommands of one command must be added where that command is created.
#pragma once

#include <CLI/CLI.hpp>

namespace gpool::cli {

void RegisterFabricIbCommands(CLI::App* fabric, int* exit_code);

}  // namespace gpool::cli
