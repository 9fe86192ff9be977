#include "subprocess.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace gpool::testing {

Subprocess::Subprocess(std::vector<std::string> argv, std::vector<std::string> env) {
  int out[2], in[2];
  if (pipe(out) != 0 || pipe(in) != 0) std::abort();
  pid_ = fork();
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(out[1], 2);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    for (auto& e : env) putenv(e.data());
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  out_fd_ = out[0];
  in_fd_ = in[1];
}

Subprocess::~Subprocess() {
  if (!exited_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
  if (in_fd_ >= 0) close(in_fd_);
}

bool Subprocess::ReadSome(int timeout_ms) {
  struct pollfd p {out_fd_, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return false;
  char buf[65536];
  ssize_t n = read(out_fd_, buf, sizeof buf);
  if (n <= 0) return false;
  out_.append(buf, static_cast<size_t>(n));
  return true;
}

bool Subprocess::WaitFor(const std::string& needle, int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (out_.find(needle) == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return false;
    if (!ReadSome(static_cast<int>(left))) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      struct pollfd p {out_fd_, POLLIN, 0};
      if (poll(&p, 1, 0) > 0 && (p.revents & POLLHUP)) return out_.find(needle) != std::string::npos;
    }
  }
  return true;
}

int Subprocess::Wait(int timeout_ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!exited_) {
    while (ReadSome(50)) {
    }
    int st;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      exited_ = true;
      status_ = st;
      while (ReadSome(0)) {
      }
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid_, SIGKILL);
      out_ += "\n[test: killed after timeout]\n";
    }
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

void Subprocess::Kill(int sig) { kill(pid_, sig); }

void Subprocess::WriteStdin(const std::string& s) {
  if (write(in_fd_, s.data(), s.size()) < 0) std::perror("write to child stdin");
}

std::pair<int, std::string> Run(std::vector<std::string> argv, std::vector<std::string> env,
                                int timeout_ms) {
  Subprocess p(std::move(argv), std::move(env));
  int rc = p.Wait(timeout_ms);
  return {rc, p.output()};
}

}  // namespace gpool::testing
