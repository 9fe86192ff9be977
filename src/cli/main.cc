// The full gpool binary (libexec/gpool-full): every command. bin/gpool (front_main.cc) runs the
// controller's client commands itself and execs this for the others (docs/cli.md).
#include <sys/prctl.h>

#include "cli/app.h"

int main(int argc, char** argv) {
  // The process is gpool to ps -o comm, pgrep -x gpool and top, as before the split (its argv[0]
  // is the front's already). Threads started later inherit the name.
  prctl(PR_SET_NAME, "gpool", 0, 0, 0);
  CLI::App app{gpool::cli::kAppDescription};
  gpool::cli::GlobalFlags flags;
  int exit_code = 0;
  gpool::cli::SetUpApp(app, flags, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
