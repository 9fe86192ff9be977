#include "cli/app.h"

#include <cstdio>
#include <cstdlib>

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
  app.parse_complete_callback([&flags] {
    Status s = InitLogging({.level = flags.log_level});
    if (!s.ok()) {
      std::fprintf(stderr, "gpool: %s\n", s.ToString().c_str());
      std::exit(2);
    }
  });
}

}  // namespace gpool::cli
