// A gpu-server child process for the driver layer's end-to-end tests (driver_e2e_test,
// graph_e2e_test, vmm_e2e_test): one (transport, backend) pair on a free port of 127.0.0.1. The
// emulated backend loads the CPU kernel plugin (GPOOL_KERNELS_PLUGIN) and may log every launch
// for the test to read; the cuda backend runs over the emulated CUDA driver
// (GPOOL_EMULATED_DRIVER, when the build has it). Needs GPOOL_BIN, GPOOL_KERNELS_PLUGIN and
// GPOOL_SAMPLES_DIR defined by the test's target. Thread safety: one thread per ServerChild.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "subprocess.h"

namespace gpool::testing {

// A sample program built into GPOOL_SAMPLES_DIR (examples/cuda, by tests/remote/CMakeLists.txt).
inline std::string SampleBin(const std::string& name) {
  return std::string(GPOOL_SAMPLES_DIR) + "/" + name;
}
inline bool Has(const std::string& out, const std::string& what) {
  return out.find(what) != std::string::npos;
}

struct ServerPair {
  std::string transport, backend;
};

inline std::string ServerPairName(const ::testing::TestParamInfo<ServerPair>& info) {
  return info.param.transport + "_" + info.param.backend;
}

// tcp and ucx on the emulated backend, and on the cuda backend where the emulated driver is built.
inline std::vector<ServerPair> ServerPairs() {
  std::vector<ServerPair> v;
  std::vector<std::string> backends = {"emulated"};
#ifdef GPOOL_EMULATED_DRIVER
  backends.push_back("cuda");
#endif
  for (const auto& b : backends) {
    for (const char* t : {"tcp", "ucx"}) v.push_back({t, b});
  }
  return v;
}

struct ServerChildOptions {
  int devices = 1;          // emulated backend only (the emulated CUDA driver has one)
  bool info_log = false;    // --log-level info (the session's end-of-session counts), else warn
  uint64_t mem_limit = 0;   // --session-mem-limit; 0: none
  bool launch_log = false;  // emulated backend: log every launch (launch_log() names the file)
};

class ServerChild {
 public:
  explicit ServerChild(const ServerPair& p, ServerChildOptions o = {}) {
    std::vector<std::string> argv = {GPOOL_BIN, "--log-level", o.info_log ? "info" : "warn",
                                     "gpu-server", "--backend", p.backend,
                                     "--transport", p.transport, "--insecure", "--listen",
                                     "127.0.0.1:0"};
    if (o.mem_limit != 0) argv.insert(argv.end(), {"--session-mem-limit", std::to_string(o.mem_limit)});
    std::vector<std::string> env;
    if (p.backend == "emulated") {
      argv.insert(argv.end(), {"--emulated-kernels", GPOOL_KERNELS_PLUGIN, "--emulated-devices",
                               std::to_string(o.devices)});
      if (o.launch_log) {
        static std::atomic<int> serial{0};
        launch_log_ = (std::filesystem::temp_directory_path() /
                       fmt::format("gpool_e2e_{}_{}_{}.launches", getpid(), p.transport, serial++))
                          .string();
        std::filesystem::remove(launch_log_);
        argv.insert(argv.end(), {"--emulated-launch-log", launch_log_});
      }
    } else {
#ifdef GPOOL_EMULATED_DRIVER
      env = {"GPOOL_LIBCUDA=" GPOOL_EMULATED_DRIVER,
             "GPOOL_EMULATED_DRIVER_KERNELS=" GPOOL_KERNELS_PLUGIN};
#endif
    }
    proc_ = std::make_unique<Subprocess>(argv, env);
    if (!proc_->WaitFor(" (backend", 20000)) {
      ADD_FAILURE() << "gpu-server did not start:\n" << proc_->output();
      return;
    }
    const std::string& out = proc_->output();
    const std::string mark = "listening on ";
    size_t at = out.find(mark) + mark.size();
    address_ = out.substr(at, out.find(' ', at) - at);
  }
  ~ServerChild() {
    proc_.reset();
    if (!launch_log_.empty()) std::filesystem::remove(launch_log_);
  }
  ServerChild(const ServerChild&) = delete;
  ServerChild& operator=(const ServerChild&) = delete;
  const std::string& address() const { return address_; }
  // Empty unless the emulated backend was asked to log launches.
  const std::string& launch_log() const { return launch_log_; }
  Subprocess& proc() { return *proc_; }

 private:
  std::unique_ptr<Subprocess> proc_;
  std::string address_;
  std::string launch_log_;
};

}  // namespace gpool::testing
