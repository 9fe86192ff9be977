// bin/gpool, the front: runs the controller's client commands (jobs_cmd.cc: submit, jobs, nodes,
// tenants, top) and `version` itself, and execs the full binary, <prefix>/libexec/gpool-full,
// with the same arguments (argv[0] too) for every other command, for no command, and for
// top-level help.
//
// Why two binaries: a client command is what an operator types, and what scripts call in loops;
// its start-up was ~17 ms of CPU, most of it loading and relocating ~80 shared libraries (UCX,
// ibverbs, hwloc, OpenSM's, SQLite, httplib, gRPC's abseil pieces) that only the daemons use. The
// front links gRPC, protobuf and abseil statically and nothing of the daemons
// (src/cli/CMakeLists.txt): ~3 ms (docs/benchmarks.md). The exec adds those ~3 ms to the other
// commands. The full binary names its process gpool (main.cc), and sits one level below the
// root like bin/, so `ps`, `pgrep -x gpool` and the agent's <dir of the binary>/../lib lookup see
// what they saw before.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include <grpc/grpc.h>

#include "cli/app.h"

// Sanitizer builds exit the ordinary way (see Exit).
#if defined(__SANITIZE_ADDRESS__)
#define GPOOL_FRONT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GPOOL_FRONT_SANITIZED 1
#endif
#endif

namespace {

// The command argv names: its first word that is not a global flag. Empty when there is none or
// when another flag comes first (--help, a typo): the full binary answers those.
std::string_view CommandWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--log-level") {  // the one global option (app.cc), with its value
      ++i;
      continue;
    }
    if (a.starts_with("--log-level=")) continue;
    if (a.empty() || a[0] == '-') return {};
    return a;
  }
  return {};
}

// <dir of this binary>/../libexec/gpool-full.
std::string FullBinary() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path().parent_path() / "libexec" / "gpool-full").string();
}

// Ends a command run here. gRPC tears itself down when its last user goes (the command's
// channel): it joins its timer and executor threads, which took 3-8 ms of a 13 ms `submit --wait`
// on a busy machine, after the output was written. main holds one gRPC reference (grpc_init) so
// that this never happens, and the process ends with _exit once stdio is flushed: nothing else
// needs tearing down (no files written but stdout/stderr; the kernel closes the connection, which
// the controller sees as the client going away). Sanitizer builds release gRPC and return from
// main instead, so that LeakSanitizer still checks the client commands at exit.
int Exit(int code) {
  std::fflush(nullptr);
#ifdef GPOOL_FRONT_SANITIZED
  grpc_shutdown();
  return code;
#else
  _exit(code);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{gpool::cli::kAppDescription};
  gpool::cli::GlobalFlags flags;
  int exit_code = 0;
  gpool::cli::SetUpApp(app, flags, &exit_code);
  std::string word(CommandWord(argc, argv));
  bool here = !word.empty() &&
              !app.get_subcommands([&](CLI::App* c) { return c->check_name(word); }).empty();
  if (!here) {
    std::string full = FullBinary();
    if (!full.empty()) execv(full.c_str(), argv);  // returns only on failure
    std::fprintf(stderr,
                 "gpool: cannot run the full gpool binary %s, which has `%s`: %s (install "
                 "libexec/gpool-full beside bin/gpool: docs/cli.md)\n",
                 full.empty() ? "<dir of gpool>/../libexec/gpool-full" : full.c_str(),
                 word.empty() ? "help" : word.c_str(),
                 full.empty() ? "/proc/self/exe is unreadable" : std::strerror(errno));
    return 127;
  }
  grpc_init();  // released only in sanitizer builds (Exit)
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return Exit(app.exit(e));
  }
  return Exit(exit_code);
}
