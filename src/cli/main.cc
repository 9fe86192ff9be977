// The gpool command: one binary, one subcommand per component (see docs/cli.md).
#include <cstdio>

#include "cli/command.h"
#include "common/log.h"

namespace gpool::cli {
std::vector<Registration>& Registry() {
  static std::vector<Registration> registry;
  return registry;
}
}  // namespace gpool::cli

int main(int argc, char** argv) {
  CLI::App app{"gpool: one pool of the GPUs of an InfiniBand cluster"};
  app.require_subcommand(1);
  gpool::cli::GlobalFlags flags;
  int exit_code = 0;
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error, off");
  app.add_subcommand("version", "print the version")->callback([] { std::puts("gpool 0.1.0"); });
  for (auto& r : gpool::cli::Registry()) r(app, flags, &exit_code);
  app.parse_complete_callback([&] {
    gpool::Status s = gpool::InitLogging({.level = flags.log_level});
    if (!s.ok()) {
      std::fprintf(stderr, "gpool: %s\n", s.ToString().c_str());
      std::exit(2);
    }
  });
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
