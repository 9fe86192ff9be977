// One CUDA program run through `gpool run` as a contender of remote_bench --interleaved
// (--clients=DIR): bench/driver_client.cc (the driver API straight onto gpool's libcuda.so.1
// stand-in) and bench/layer_client.cu (the runtime API, through NVIDIA's shared runtime, or its
// static runtime and cuBLAS, over the driver stand-in). The program starts once
// and stays connected to its gpu-server; each step of the bench writes one command line to its
// stdin and waits for its "gpool-bench ok" line, so that start-up, context creation and module
// loading stay outside the timed steps. A step does hundreds of calls or megabytes of copies, so
// the pipe's own round trip (two wake-ups, ~10-50 us on a loaded VM) is well under 1% of it.
//
// Thread safety: one thread per instance. The program is the bench's child (it dies with the
// bench: PR_SET_PDEATHSIG) and exits when its stdin closes (the destructor).
#pragma once

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace gpool::remote::bench {

class LayerClient {
 public:
  // Starts `gpool run --transport TRANSPORT --devices ADDRESS/0 -- argv...`; null, with the
  // reason in *why, when it cannot start or does not answer its first command `probe_cmd`.
  static std::unique_ptr<LayerClient> Start(const std::string& gpool, const std::string& transport,
                                            const std::string& address,
                                            const std::vector<std::string>& argv,
                                            const std::string& probe_cmd, std::string* why) {
    for (const std::string& f : {gpool, argv.at(0)}) {
      if (access(f.c_str(), X_OK) != 0) {
        *why = f + ": " + std::strerror(errno);
        return nullptr;
      }
    }
    std::vector<std::string> args = {gpool, "run", "--transport", transport, "--devices",
                                     address + "/0", "--"};
    args.insert(args.end(), argv.begin(), argv.end());
    std::vector<char*> cargs;
    for (std::string& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    int to[2], from[2];
    if (pipe2(to, O_CLOEXEC) != 0 || pipe2(from, O_CLOEXEC) != 0) {
      *why = std::string("pipe: ") + std::strerror(errno);
      return nullptr;
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {  // only async-signal-safe calls until exec (the bench has threads)
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      dup2(to[0], 0);
      dup2(from[1], 1);
      execv(cargs[0], cargs.data());
      _exit(127);
    }
    close(to[0]);
    close(from[1]);
    if (pid < 0) {
      close(to[1]);
      close(from[0]);
      *why = std::string("fork: ") + std::strerror(errno);
      return nullptr;
    }
    std::unique_ptr<LayerClient> c(new LayerClient(pid, to[1], fdopen(from[0], "r")));
    c->name_ = argv.at(0);
    if (!c->Do(probe_cmd)) {
      *why = argv.at(0) + " through gpool run exited before answering '" + probe_cmd +
             "' (its error is above)";
      return nullptr;
    }
    return c;
  }

  ~LayerClient() {
    close(in_);  // the program's loop ends at end of input
    if (out_) std::fclose(out_);
    int status;
    waitpid(pid_, &status, 0);
  }
  LayerClient(const LayerClient&) = delete;
  LayerClient& operator=(const LayerClient&) = delete;

  // Runs one command; false when the program failed (it said why on stderr) or exited.
  bool Do(const std::string& cmd) {
    const std::string line = cmd + "\n";
    if (write(in_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return false;
    char buf[256];
    while (out_ && std::fgets(buf, sizeof buf, out_)) {
      if (std::strcmp(buf, "gpool-bench ok\n") == 0) return true;
      std::fputs(buf, stdout);  // anything else the program printed, passed on
    }
    return false;
  }
  pid_t pid() const { return pid_; }
  const std::string& name() const { return name_; }

 private:
  LayerClient(pid_t pid, int in, FILE* out) : pid_(pid), in_(in), out_(out) {}
  pid_t pid_;
  int in_;
  FILE* out_;
  std::string name_;
};

}  // namespace gpool::remote::bench
