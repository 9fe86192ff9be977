// The full gpool binary (libexec/gpool): every command. bin/gpool (front_main.cc) runs the
// controller's client commands itself and execs this for the others (docs/cli.md).
#include "cli/app.h"

int main(int argc, char** argv) {
  CLI::App app{gpool::cli::kAppDescription};
  gpool::cli::GlobalFlags flags;
  int exit_code = 0;
  gpool::cli::SetUpApp(app, flags, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
