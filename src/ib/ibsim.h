// A real ibsim fabric for tests, benchmarks and scripts: start the simulator, drive its console,
// run OpenSM and the infiniband-diags against it, tear it all down.
//
// What it does, and why (see docs/infiniband.md and ../shared/notes/ib-simulation.md):
// - Each Ibsim runs in its own scratch directory (mkdtemp under $TMPDIR, default /tmp) holding
//   the net file, ibsim's log, OpenSM's cache/log/dump files and every tool's stdout/stderr.
//   The directory is removed by the destructor unless GPOOL_KEEP_IBSIM=1 or keep_dir is set.
// - Instances do not collide: ibsim and libumad2sim.so meet on abstract unix sockets named
//   "<IBSIM_SOCKNAME>:ctl", "...:out<n>", "...:in<n>" (default name "sim"), so each instance gets
//   its own IBSIM_SOCKNAME ("gpool-<pid>-<n>"), and every client started through Run() or
//   ClientEnv() carries it. Checked: a client with another name does not reach the instance.
// - The console is a FIFO (<dir>/console) that this object holds open read-write, so ibsim never
//   sees EOF (it spins on a closed console). Console() writes one command and waits for the next
//   "sim> " prompt, so when it returns the command has taken effect; it returns what ibsim
//   printed. Shell scripts may also write to the FIFO (scripts/ib/ibsim-lib.sh does the same).
// - Every child (ibsim, tools, OpenSM) gets PR_SET_PDEATHSIG=SIGKILL, so a crashed test does not
//   leave a spinning ibsim behind, and every tool runs under coreutils `timeout` (SIGTERM, then
//   SIGKILL 5 s later). ibsim has 10 client slots and a killed client keeps its slot: after a
//   tool times out, Run() frees the slots of clients whose process is gone (console `X <n>`);
//   FreeDeadClients() does the same on demand.
// - ibsim attaches the SM (and every client) to the first record of the net file unless
//   ToolOptions::sim_host (SIM_HOST) names another node. fabric::WriteIbsimNet puts a leaf switch
//   first, which is what OpenSM and ibnetdiscover expect.
//
// Typical test:
//   auto sim = Ibsim::Start({.net_text = *fabric::WriteIbsimNet(f)});   // waits for "ready"
//   auto osm = (*sim)->RunOpenSmOnce({.engine = "ftree"});                // opensm -o -D 0x43
//   ReadFile(osm->lfts_path) ...
//   (*sim)->Console("Unlink \"leaf-0\"[19]");
//   auto r = (*sim)->Run({"ibnetdiscover"});                            // through umad2sim
//
// Limits: ibsim does not do RMPP (multi-MAD SA answers are cut to one MAD) nor SMPs mixing LID
// and directed routes; nothing carries data traffic. Ports beyond ibsim's defaults (2,048 nodes,
// 256 switches, 13,312 ports) need IbsimOptions::max_*.
//
// Thread safety: one Ibsim may be used from one thread at a time (Console and Run serialise on
// nothing); distinct instances are independent. PR_SET_PDEATHSIG is tied to the thread that
// started the child: start and destroy an instance on a thread that outlives its use.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace gpool::ib {

// Path of the umad2sim preload library (Debian's ibsim-utils); GPOOL_UMAD2SIM overrides it.
std::string Umad2simPath();

struct IbsimOptions {
  std::string net_text;          // ibsim net file content (e.g. fabric::WriteIbsimNet)
  std::string scratch_parent;    // where the scratch dir goes; empty: $TMPDIR or /tmp
  int max_nodes = 0;             // ibsim -N/-S/-P; 0 keeps ibsim's default
  int max_switches = 0;
  int max_ports = 0;
  int ready_timeout_s = 60;      // how long to wait for "simulator ready"
  bool keep_dir = false;         // keep the scratch dir (also GPOOL_KEEP_IBSIM=1)
};

struct ToolOptions {
  int timeout_s = 30;
  std::string sim_host;  // SIM_HOST: node the client attaches at; empty = the first record
  std::vector<std::pair<std::string, std::string>> env;  // extra environment
};

struct ToolResult {
  int exit_code = -1;       // the tool's exit status; 124/137 when `timeout` killed it
  bool timed_out = false;
  std::string out, err;     // stdout and stderr
  double cpu_s = 0;         // user + system CPU time of the tool and its reaped children
  double wall_s = 0;
  // "`ibnetdiscover` exited 1: <stderr tail>" for error messages.
  std::string Describe(const std::string& what) const;
};

struct OpenSmOptions {
  std::string engine = "minhop";        // -R (e.g. "ftree", "updn", "ftree,updn")
  std::vector<std::string> extra_args;  // appended to OpenSM's command line
  int timeout_s = 120;
  std::string sim_host;                 // SIM_HOST for OpenSM's port
};

struct OpenSmRun {
  ToolResult result;
  std::string dump_dir;    // --dump_files_dir: opensm-lfts.dump, opensm-subnet.lst, ...
  std::string lfts_path;   // dump_dir + "/opensm-lfts.dump"
  std::string log_path;    // OpenSM's log (-f)
};

// OpenSM running as a daemon (no -o) against an Ibsim; killed (SIGTERM, then SIGKILL) and
// reaped by the destructor. Thread safety: as Ibsim.
class OpenSmDaemon {
 public:
  ~OpenSmDaemon();
  OpenSmDaemon(const OpenSmDaemon&) = delete;
  OpenSmDaemon& operator=(const OpenSmDaemon&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& dump_dir() const { return dump_dir_; }
  const std::string& log_path() const { return log_path_; }
  std::string lfts_path() const { return dump_dir_ + "/opensm-lfts.dump"; }
  int console_port() const { return console_port_; }  // 0 unless asked for

  // Waits until OpenSM's log contains `needle` at least `count` times (counting the whole log,
  // e.g. "SUBNET UP" once per completed heavy sweep). Error with the log tail on timeout or when
  // OpenSM exited.
  Status WaitForLog(const std::string& needle, int count, int timeout_s);
  // Occurrences of `needle` in the log now.
  int CountInLog(const std::string& needle) const;
  // Sends a signal (SIGHUP makes OpenSM resweep and reread its config files).
  Status Signal(int sig);
  // Stops it now (also done by the destructor); returns its exit status.
  int Stop();

 private:
  friend class Ibsim;
  OpenSmDaemon() = default;
  pid_t pid_ = -1;
  std::string dump_dir_, log_path_;
  int console_port_ = 0;
};

struct OpenSmDaemonOptions {
  OpenSmOptions base;       // engine, extra args, sim_host (timeout_s unused)
  bool console = false;     // --console loopback on a free port (console_port())
  int ready_timeout_s = 60; // waits for the first "SUBNET UP" in the log
};

class Ibsim {
 public:
  // Writes the net file, starts ibsim -s and waits for "simulator ready".
  static StatusOr<std::unique_ptr<Ibsim>> Start(const IbsimOptions& options);
  ~Ibsim();
  Ibsim(const Ibsim&) = delete;
  Ibsim& operator=(const Ibsim&) = delete;

  const std::string& dir() const { return dir_; }
  const std::string& net_path() const { return net_path_; }
  const std::string& log_path() const { return log_path_; }
  const std::string& socket_name() const { return sock_; }
  pid_t pid() const { return pid_; }
  // NAME=VALUE strings a umad2sim client needs: LD_PRELOAD and IBSIM_SOCKNAME.
  std::vector<std::string> ClientEnv() const;

  // Runs one console command ("Unlink \"leaf-0\"[19]", "ReLink \"leaf-0\"", "Attached") and
  // returns its output, once ibsim has printed its next prompt.
  StatusOr<std::string> Console(const std::string& command, int timeout_s = 10);
  // Convenience wrappers; `port` 0 means the whole node.
  Status Unlink(const std::string& node, int port = 0);
  Status ReLink(const std::string& node, int port = 0);

  // Runs a tool through umad2sim in the scratch dir: argv[0] is looked up in PATH. Returns the
  // result whatever the exit status; an error only when the tool could not be started.
  StatusOr<ToolResult> Run(const std::vector<std::string>& argv, const ToolOptions& options = {});
  // Like Run, but an error (with the tool's stderr) unless it exited 0.
  StatusOr<ToolResult> RunOk(const std::vector<std::string>& argv,
                             const ToolOptions& options = {});

  // Clients attached now, as (slot, pid) from console `Attached`.
  StatusOr<std::vector<std::pair<int, pid_t>>> AttachedClients();
  // Frees (console `X <n>`) the slots of attached clients whose process no longer exists.
  // Returns how many were freed.
  StatusOr<int> FreeDeadClients();

  // OpenSM once (-o): `opensm -o -e -D 0x43 -R engine --dump_files_dir <new dir>`; each call
  // gets a fresh dump dir and cache dir. Error unless OpenSM exited 0 and wrote the lfts dump.
  StatusOr<OpenSmRun> RunOpenSmOnce(const OpenSmOptions& options = {});
  // OpenSM as a daemon; returns once its log says SUBNET UP.
  StatusOr<std::unique_ptr<OpenSmDaemon>> StartOpenSm(const OpenSmDaemonOptions& options = {});

 private:
  Ibsim() = default;
  std::string NextPath(const std::string& stem);

  std::string dir_, net_path_, log_path_, console_path_, sock_;
  pid_t pid_ = -1;
  int console_fd_ = -1;
  bool keep_ = false;
  int counter_ = 0;
};

}  // namespace gpool::ib
