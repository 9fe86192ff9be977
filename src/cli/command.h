// Subcommand registration for the gpool binary.
//
// Each component adds its subcommands from its own file in src/cli (fabric_cmd.cc, sim_cmd.cc,
// ...) through a static GPOOL_REGISTER_COMMAND, so components don't edit a shared main.cc.
// Handlers return the process exit code; errors go to stderr, data to stdout.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace gpool::cli {

// Shared flags every command may read.
struct GlobalFlags {
  std::string log_level = "warn";
};

// A registration adds subcommands to `app`. Set *exit_code from the callbacks.
using Registration = std::function<void(CLI::App& app, const GlobalFlags& flags, int* exit_code)>;

std::vector<Registration>& Registry();

struct Registrar {
  explicit Registrar(Registration r) { Registry().push_back(std::move(r)); }
};

}  // namespace gpool::cli

#define GPOOL_CLI_CONCAT2(a, b) a##b
#define GPOOL_CLI_CONCAT(a, b) GPOOL_CLI_CONCAT2(a, b)
#define GPOOL_REGISTER_COMMAND(fn) \
  static ::gpool::cli::Registrar GPOOL_CLI_CONCAT(gpool_cli_registrar_, __COUNTER__)(fn)
