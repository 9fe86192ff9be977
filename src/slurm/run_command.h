// Runs a program with arguments (never through a shell) and captures what it prints, bounded in
// time. The SPANK plugin uses it to call the gpool CLI from inside slurmstepd, whose signal mask
// and handlers the child must not inherit.
//
// Thread safety: reentrant; each call owns its child and pipes.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace gpool::slurm {

struct CommandResult {
  int exit_code = 0;  // the program's exit status, or 128 + signal if a signal ended it
  std::string out;    // its standard output
  std::string err;    // its standard error
};

// Runs argv[0] (looked up in PATH when it has no '/'). NotFound if it cannot be started,
// DeadlineExceeded (and the child killed) if it runs longer than timeout_s.
StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv, double timeout_s);

// "gpool submit --gpus 1 ..." for messages; at most the first few words.
std::string CommandName(const std::vector<std::string>& argv);

}  // namespace gpool::slurm
