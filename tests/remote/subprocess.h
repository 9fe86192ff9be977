// A child process for end-to-end tests: argv, extra environment, stdout+stderr captured through
// a pipe, optional stdin pipe. Thread safety: one thread per Subprocess.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace gpool::testing {

class Subprocess {
 public:
  Subprocess(std::vector<std::string> argv, std::vector<std::string> env = {});
  ~Subprocess();  // kills the child if still running
  pid_t pid() const { return pid_; }
  // Reads output until `needle` appears or `timeout_ms` passes; returns whether it appeared.
  bool WaitFor(const std::string& needle, int timeout_ms);
  // Waits for exit (reading all output); returns the exit code, or 128+signal.
  int Wait(int timeout_ms = 120000);
  void Kill(int sig);
  void WriteStdin(const std::string& s);
  const std::string& output() const { return out_; }

 private:
  bool ReadSome(int timeout_ms);
  pid_t pid_ = -1;
  int out_fd_ = -1, in_fd_ = -1;
  std::string out_;
  bool exited_ = false;
  int status_ = 0;
};

// Runs to completion and returns {exit code, output}.
std::pair<int, std::string> Run(std::vector<std::string> argv, std::vector<std::string> env = {},
                                int timeout_ms = 120000);

}  // namespace gpool::testing
