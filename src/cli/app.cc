#include "cli/app.h"

#include <cstdio>

#include "common/log.h"

namespace gpool::cli {

std::vector<Registration>& Registry() {
  static std::vector<Registration> registry;
  return registry;
}

void SetUpApp(CLI::App& app, GlobalFlags& flags, int* exit_code) {
  app.require_subcommand(1);
  app.add_option("--log-level", flags.log_level, "trace, debug, info, warn, error, off");
  app.add_subcommand("version", "print the version")->callback([] { std::puts("gpool 0.1.0"); });
  for (auto& r : Registry()) r(app, flags, exit_code);
  // A bad --log-level ends the command with exit code 2 through the parser (CLI11's RuntimeError
  // prints nothing more), not std::exit: the front has gRPC's threads running by then, which
  // exit's static destructors would race (front_main.cc).
  app.parse_complete_callback([&flags] {
    Status s = InitLogging({.level = flags.log_level});
    if (!s.ok()) {
      std::fprintf(stderr, "gpool: %s\n", s.ToString().c_str());
      throw CLI::RuntimeError(2);
    }
  });
}

}  // namespace gpool::cli
