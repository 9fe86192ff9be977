// The node's GPU server, started and supervised by the agent (`gpool agent --serve-gpus`).
//
// The agent runs `gpool gpu-server` as its child for this node's GPUs: the emulated backend with
// the agent's N emulated devices (`--emulated-gpus N`), the cuda backend otherwise, checking
// leases with the key file the controller signs them with (`--lease-key`). The supervisor
//   - starts it and waits for the address it prints ("listening on HOST:PORT"); with port 0 the
//     port it picked is then pinned, so a restart listens where leases already point;
//   - restarts it when it dies, after a backoff that doubles with every quick failure (from
//     backoff_initial up to backoff_max) and starts over once a run lasted stable_after;
//   - stops it with the agent: SIGTERM, then SIGKILL after stop_grace, and reaps it (and SIGKILLs
//     whatever is left of its process group), so it leaves neither a zombie nor an orphan;
//   - and if the agent itself dies without stopping it (kill -9, crash), the kernel kills the
//     server (PR_SET_PDEATHSIG=SIGKILL, set before exec; the server's workers die with the
//     server the same way). PDEATHSIG follows the thread that forked: the supervisor must be
//     used from a thread that lives as long as the agent (the agent's loop thread).
// The server runs in its own process group, so a terminal's Ctrl-C reaches the agent, which
// then stops it, instead of both at once (the supervisor would restart a server it saw die).
//
// Limits: the address is registered once per Register; a server that is down between restarts
// is still advertised (clients of a lease then fail to connect until it is back). Its stdout and
// stderr are appended to <log_dir>/gpu-server.out and .err.
//
// Thread safety: not thread-safe; the agent's loop owns it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace gpool::agent {

// What the agent's flags ask of its GPU server.
struct GpuServerConfig {
  std::string listen;             // HOST:PORT; "" = 127.0.0.1:0
  std::string advertise;          // HOST:PORT leases name ("" = the address it listens on)
  std::string lease_key_file;     // required: the controller's --lease-key file
  int emulated_gpus = 0;          // > 0: --backend emulated with this many devices; else cuda
  uint64_t emulated_memory_bytes = 0;
  std::string emulated_kernels;   // the emulated backend's kernel plugin (.so), optional
  std::string emulated_launch_log;  // the emulated backend's launch log, optional (tests)
  std::string log_level;          // its --log-level ("" = gpool's default)
};

// The `gpool gpu-server` arguments for a config, without the program and without --listen (the
// supervisor adds it). Errors name the flag: no lease key, emulated-only flags without
// --emulated-gpus.
StatusOr<std::vector<std::string>> GpuServerArgs(const GpuServerConfig& c);

struct SupervisorOptions {
  std::string exe;                 // the program (the gpool binary)
  std::vector<std::string> args;   // its arguments; "--listen ADDR" is appended
  std::string listen = "127.0.0.1:0";
  std::string log_dir;             // created if missing
  std::chrono::milliseconds backoff_initial{1000};
  std::chrono::milliseconds backoff_max{30000};
  std::chrono::milliseconds stable_after{60000};
  std::chrono::milliseconds stop_grace{5000};
};

// The wait before restarting after the `quick_failures`-th exit in a row that came before
// stable_after: backoff_initial, doubled for each further one, at most backoff_max.
std::chrono::milliseconds RestartBackoff(const SupervisorOptions& o, int quick_failures);

class GpuServerSupervisor {
 public:
  explicit GpuServerSupervisor(SupervisorOptions options);
  ~GpuServerSupervisor();  // Stop()
  GpuServerSupervisor(const GpuServerSupervisor&) = delete;
  GpuServerSupervisor& operator=(const GpuServerSupervisor&) = delete;

  // Starts the server and waits up to `timeout` for its address. Errors: it cannot be spawned,
  // it exits first (the error quotes the end of its stderr), or no address in time (it is then
  // killed).
  Status Start(std::chrono::milliseconds timeout);
  // Reaps an exit and restarts after the backoff; reads the address of a restarted server.
  // Call it often (every heartbeat round).
  void Poll();
  // SIGTERM, SIGKILL after stop_grace, reap. Idempotent; no restart after it.
  void Stop();

  const std::string& address() const { return address_; }  // "" until the first start printed it
  pid_t pid() const { return pid_; }                        // -1 while down
  int restarts() const { return restarts_; }
  std::string LogPath(const char* stream) const;

 private:
  Status Spawn();
  bool ReadAddress();      // true once this run's address is known
  void Reaped(const std::string& how);  // the child ended (or never started): schedule the restart

  SupervisorOptions o_;
  std::string listen_;     // where the next start listens (the first address pins port 0)
  std::string address_;
  pid_t pid_ = -1;
  bool have_address_ = false;  // this run printed its address
  uint64_t out_offset_ = 0;    // the .out file's size when this run started
  bool stopped_ = false;
  int restarts_ = 0;
  int quick_failures_ = 0;
  std::chrono::steady_clock::time_point started_at_, restart_at_;
};

}  // namespace gpool::agent
