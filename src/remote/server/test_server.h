// Tests only: a GpuServer in a process of its own. The server forks a worker per client the moment
// it connects, which is safe only in a one-thread process (server.h), so tests fork the server
// before they start any thread of their own, and never run Serve() on a thread of the test.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "remote/server/server.h"

namespace gpool::remote::server::testing {

// Forks a process that serves `options` until killed; returns the address it listens on ("" if it
// did not start) and sets *pid (-1 if the fork failed).
inline std::string ForkServer(const ServerOptions& options, pid_t* pid) {
  int fds[2];
  *pid = -1;
  if (pipe(fds) != 0) return "";
  *pid = fork();
  if (*pid == 0) {
    close(fds[0]);
    GpuServer s(options);
    if (!s.Start().ok()) _exit(1);
    const std::string a = s.address();
    if (write(fds[1], a.data(), a.size()) < 0) _exit(1);
    close(fds[1]);
    (void)s.Serve();
    _exit(0);
  }
  close(fds[1]);
  char buf[256] = {0};
  const ssize_t n = *pid > 0 ? read(fds[0], buf, sizeof buf - 1) : -1;
  close(fds[0]);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

// Kills a ForkServer process (its session workers die with it) and reaps it.
inline void KillServer(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace gpool::remote::server::testing
