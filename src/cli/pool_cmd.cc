// `gpool gpu-server` (serve local GPUs, or emulated ones, to remote CUDA programs) and
// `gpool run` (run an unmodified CUDA program on pooled GPUs through the client runtime).
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "common/units.h"
#include "remote/server/server.h"

#include <nlohmann/json.hpp>

#include "remote/lease/lease.h"

namespace gpool::cli {
namespace {

using remote::server::GpuServer;
using remote::server::ServerOptions;

struct ServerFlags {
  std::string backend = "emulated";
  std::string kernels;
  std::string launch_log;
  int emulated_devices = 1;
  std::string emulated_memory = "16GiB";
  std::string listen;
  std::string transport = "tcp";
  std::string key_file;
  bool insecure = false;
  std::string session_mem;
  std::string advertise;
  bool emulated_no_param_info = false;  // testing old drivers: see EmulatedOptions
  bool backend_given = false;  // --backend on the command line (else the default, emulated)
};

// Lease check for a Hello: GPOOL_LEASE may hold several comma-separated tokens (one per GPU of
// an aggregated program). Every token naming a GPU of this server (its advertised HOST:PORT) must
// be signed with our key and unexpired; each grants its own GPU with its own memory limit (the
// server refuses other devices: LeaseGuardBackend). Tokens naming other servers are skipped. A
// lease's memory and compute share hold across all sessions presenting its token.
using remote::server::DeviceGrant;
using remote::server::SessionGrant;
std::function<Status(const std::string&, SessionGrant*)> MakeAuthorizer(
    remote::LeaseAuthority authority, std::shared_ptr<const std::string> advertised) {
  return [authority = std::move(authority), advertised](const std::string& tokens,
                                                        SessionGrant* grant) -> Status {
    const std::string& advertise = *advertised;
    if (tokens.empty()) return Status::PermissionDenied("no lease token (set GPOOL_LEASE or --lease)");
    std::string last = "no token names this server";
    size_t at = 0;
    double share = 1.0;
    while (at <= tokens.size()) {
      size_t comma = tokens.find(',', at);
      std::string token = tokens.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      at = comma == std::string::npos ? tokens.size() + 1 : comma + 1;
      // The GPU named inside the payload; the signature check below is what makes it trusted.
      std::string gpu;
      size_t d1 = token.find('.'), d2 = token.rfind('.');
      if (d1 != std::string::npos && d2 > d1) {
        auto payload = remote::Base64UrlDecode(token.substr(d1 + 1, d2 - d1 - 1));
        if (payload.ok()) {
          auto j = nlohmann::json::parse(*payload, nullptr, false);
          if (j.is_object() && j.contains("gpu") && j["gpu"].is_string()) gpu = j["gpu"];
        }
      }
      const bool ours = gpu.rfind(advertise + "/", 0) == 0;
      auto lease = authority.Verify(token, ours ? gpu : advertise + "/0",
                                    *remote::UnixClock::Default());
      if (!lease.ok()) {
        // A bad token for one of our GPUs refuses the session; one for another server is its own.
        if (ours) {
          return Status::PermissionDenied(
              fmt::format("{} (the lease for {})", lease.status().message(), gpu));
        }
        last = lease.status().message();
        continue;
      }
      DeviceGrant g;
      g.gpu = lease->gpu;
      g.device = static_cast<uint32_t>(std::strtoul(g.gpu.substr(g.gpu.rfind('/') + 1).c_str(), nullptr, 10));
      g.memory_bytes = lease->memory_bytes;
      g.compute_share = lease->compute_milli / 1000.0;
      // The lease is its token: every session presenting it shares its limits (LeaseLedger,
      // ShareArbiter). The signature, unforgeable and unique per token, names it.
      g.lease_id = token.substr(token.rfind('.') + 1);
      g.lease_name = fmt::format("the lease of tenant '{}' (job '{}')", lease->tenant, lease->job);
      share = std::min(share, g.compute_share);
      if (grant->expires_at == 0 || lease->expires_at < grant->expires_at) {
        grant->expires_at = lease->expires_at;  // the session ends with its first lease
        grant->expiring_gpu = g.gpu;
      }
      grant->devices.push_back(std::move(g));
    }
    if (grant->devices.empty()) return Status::PermissionDenied(last);
    grant->limits.compute_share = share;
    return Status::Ok();
  };
}

GpuServer* g_server = nullptr;
void OnPoolSignal(int) {
  if (g_server) g_server->Stop();
}

int RunServer(const ServerFlags& f) {
  ServerOptions o;
  o.listen = f.listen;
  o.transport = f.transport;
  o.backend = f.backend;
  o.advertise = f.advertise;
  o.emulated.devices = f.emulated_devices;
  o.emulated.kernels_plugin = f.kernels;
  o.emulated.launch_log = f.launch_log;
  o.emulated.answer_param_info = !f.emulated_no_param_info;
  auto mem = ParseBytes(f.emulated_memory);
  if (!mem.ok()) {
    fmt::print(stderr, "gpool gpu-server: --emulated-memory: {}\n", mem.status().ToString());
    return 2;
  }
  o.emulated.memory_bytes = *mem;
  if (!f.session_mem.empty()) {
    auto lim = ParseBytes(f.session_mem);
    if (!lim.ok()) {
      fmt::print(stderr, "gpool gpu-server: --session-mem-limit: {}\n", lim.status().ToString());
      return 2;
    }
    o.default_limits.memory_bytes = *lim;
  }
  // The default stays `emulated` (a server never probes CUDA before it forks its workers), so say
  // so loudly on a host that has an NVIDIA driver: serving emulated GPUs there is a mistake.
  if (!f.backend_given && std::filesystem::exists("/dev/nvidiactl")) {
    fmt::print(stderr, "gpool gpu-server: WARNING: serving EMULATED GPUs on a host with an NVIDIA "
                       "driver (/dev/nvidiactl); pass --backend cuda for the real ones\n");
  }
  if (f.emulated_no_param_info && f.backend != "emulated") {
    fmt::print(stderr, "gpool gpu-server: --emulated-no-param-info needs --backend emulated\n");
    return 2;
  }
  if (f.insecure == !f.key_file.empty()) {
    fmt::print(stderr, "gpool gpu-server: give exactly one of --key FILE or --insecure\n");
    return 2;
  }
  if (f.backend == "emulated" && !f.kernels.empty() && !std::filesystem::exists(f.kernels)) {
    fmt::print(stderr, "gpool gpu-server: --emulated-kernels {}: no such file\n", f.kernels);
    return 2;
  }
  // What leases must name; the bound address unless --advertise says otherwise (set after Start).
  auto advertise = std::make_shared<std::string>(f.advertise);
  if (f.insecure) {
    fmt::print(stderr,
               "gpool gpu-server: WARNING: --insecure: any client that reaches {} gets the GPUs "
               "without a lease. Use this only on a laptop or in a test.\n", f.listen);
  } else {
    auto key = remote::LoadLeaseKey(f.key_file);
    if (!key.ok()) {
      fmt::print(stderr, "gpool gpu-server: --key {}: {}\n", f.key_file, key.status().ToString());
      return 2;
    }
    auto authority = remote::LeaseAuthority::Create(std::move(*key));
    if (!authority.ok()) {
      fmt::print(stderr, "gpool gpu-server: --key {}: {}\n", f.key_file,
                 authority.status().ToString());
      return 2;
    }
    o.authorize = MakeAuthorizer(std::move(*authority), advertise);
  }
  GpuServer server(o);
  Status s = server.Start();
  if (!s.ok()) {
    fmt::print(stderr, "gpool gpu-server: {}\n", s.ToString());
    return 1;
  }
  if (advertise->empty()) *advertise = server.address();
  fmt::print("gpool gpu-server: listening on {} (backend {}, transport {})\n", server.address(),
             f.backend, f.transport);
  std::fflush(stdout);
  g_server = &server;
  std::signal(SIGINT, OnPoolSignal);
  std::signal(SIGTERM, OnPoolSignal);
  s = server.Serve();
  g_server = nullptr;
  if (!s.ok()) {
    fmt::print(stderr, "gpool gpu-server: {}\n", s.ToString());
    return 1;
  }
  return 0;
}

// The client lib dir: gpool's libcuda.so.1 (and libnvidia-ml.so.1) stand-ins beside NVIDIA's
// libcudart.so.13, which the build copies from the toolkit. $GPOOL_CLIENT_LIB_DIR, else <dir of
// gpool>/../lib as the build and install trees lay it out.
std::string ClientLibDir() {
  if (const char* d = std::getenv("GPOOL_CLIENT_LIB_DIR")) return d;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path().parent_path() / "lib").string();
}

int RunProgram(std::string devices, std::string lease, std::string transport, std::string nccl,
               std::vector<std::string> argv) {
  if (argv.empty()) {
    fmt::print(stderr, "gpool run: no program given (gpool run [flags] -- PROGRAM [ARGS...])\n");
    return 2;
  }
  if (devices.empty()) {
    if (const char* d = std::getenv("GPOOL_DEVICES")) devices = d;
  }
  if (devices.empty()) {
    fmt::print(stderr, "gpool run: no GPUs: give --devices HOST:PORT/INDEX,... or set "
                       "GPOOL_DEVICES\n");
    return 2;
  }
  if (lease.empty()) {
    if (const char* l = std::getenv("GPOOL_LEASE")) lease = l;
  }
  std::string dir = ClientLibDir();
  if (dir.empty() || !std::filesystem::exists(dir + "/libcuda.so.1")) {
    fmt::print(stderr, "gpool run: gpool's driver stand-in {}/libcuda.so.1 is missing: build the "
                       "gpool_driver target (it needs the CUDA toolkit's headers), or set "
                       "GPOOL_CLIENT_LIB_DIR to the folder that holds it\n", dir);
    return 2;
  }
  // The program's CUDA runtime: NVIDIA's libcudart.so.13, which the build copies from the toolkit
  // into the client lib dir, over gpool's libcuda.so.1 (docs/remoting.md). Programs with NVIDIA's
  // static runtime inside do not load it, but a lib dir without it is a broken build or install.
  std::string ld = dir;
  if (!std::filesystem::exists(dir + "/libcudart.so.13")) {
    fmt::print(stderr, "gpool run: NVIDIA's CUDA runtime {}/libcudart.so.13 is missing: the build "
                       "copies it from the CUDA toolkit (lib64/libcudart.so.13) and found none "
                       "there; install the toolkit's runtime (cuda-cudart) and rebuild, or copy the "
                       "toolkit's libcudart.so.13 into {}\n", dir, dir);
    return 2;
  }
  if (nccl.empty()) {
    const char* n = std::getenv("GPOOL_NCCL");
    nccl = n && *n ? n : "gpool";
  }
  if (nccl != "gpool" && nccl != "native") {
    fmt::print(stderr, "gpool run: --nccl (or GPOOL_NCCL) is '{}': give gpool or native\n", nccl);
    return 2;
  }
  // gpool's libnccl.so.2 (docs/remoting/nccl.md) sits in its own folder so that
  // `--nccl native` can leave it out and let NVIDIA's NCCL (further down the path) load.
  if (nccl == "gpool" && std::filesystem::exists(dir + "/nccl/libnccl.so.2")) ld += ":" + dir + "/nccl";
  if (const char* old = std::getenv("LD_LIBRARY_PATH"); old && *old) ld += std::string(":") + old;
  setenv("LD_LIBRARY_PATH", ld.c_str(), 1);
  setenv("GPOOL_DEVICES", devices.c_str(), 1);
  setenv("GPOOL_TRANSPORT", transport.c_str(), 1);
  if (!lease.empty()) setenv("GPOOL_LEASE", lease.c_str(), 1);
  // NCCL (docs/remoting/nccl.md): pooled GPUs share no memory with each other or with this
  // host's processes, so NCCL's peer-to-peer transport (peer access, CUDA IPC) and its shared
  // host memory transport (host memory registered and mapped into the GPU) cannot connect them;
  // left on, NCCL picks them for GPUs of one host and fails at communicator creation. Off, its
  // network transport is left. For the same reason NCCL's cuMem allocations stay off: the driver
  // stand-in implements virtual memory management (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_
  // SUPPORTED is 1), so NCCL 2.28 would make its buffers with cuMemCreate/cuMemMap (four round
  // trips each where cuMemAlloc takes one) to export them as POSIX file descriptors to other
  // processes, which pooled memory cannot be; and it probes host-memory VMM, which the stand-in
  // refuses (NCCL WARNs). Off, NCCL allocates with cuMemAlloc as it does without VMM. Not
  // overridden when the user set them.
  setenv("NCCL_P2P_DISABLE", "1", 0);
  setenv("NCCL_SHM_DISABLE", "1", 0);
  setenv("NCCL_CUMEM_ENABLE", "0", 0);
  setenv("NCCL_CUMEM_HOST_ENABLE", "0", 0);
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  execvp(args[0], args.data());
  fmt::print(stderr, "gpool run: cannot run {}: {}\n", argv[0], std::strerror(errno));
  return 127;
}

void RegisterPool(CLI::App& app, const GlobalFlags&, int* exit_code) {
  auto f = std::make_shared<ServerFlags>();
  auto* srv = app.add_subcommand("gpu-server", "serve GPUs (real or emulated) to remote CUDA programs");
  auto* backend = srv->add_option("--backend", f->backend, "cuda or emulated (default emulated)")
                      ->check(CLI::IsMember({"cuda", "emulated"}));
  srv->add_option("--emulated-kernels", f->kernels, "plugin .so with CPU kernels for --backend emulated");
  srv->add_option("--emulated-launch-log", f->launch_log,
                  "append every launch (module, kernel, grid, block, parameter bytes) to this file, "
                  "for tests");
  srv->add_option("--emulated-devices", f->emulated_devices, "number of emulated GPUs");
  srv->add_option("--emulated-memory", f->emulated_memory, "memory per emulated GPU");
  srv->add_flag("--emulated-no-param-info", f->emulated_no_param_info,
                "for testing old drivers: answer kernel parameter layout queries 'not supported', "
                "as a driver without cuFuncGetParamInfo would, so clients parse fatbins themselves");
  srv->add_option("--listen", f->listen, "HOST:PORT for clients (port 0 picks one)")->required();
  srv->add_option("--transport", f->transport, "data transport: tcp or ucx")->check(CLI::IsMember({"tcp", "ucx"}));
  srv->add_option("--key", f->key_file, "lease key file; clients need a lease signed with it");
  srv->add_flag("--insecure", f->insecure, "accept clients without a lease (tests, laptops)");
  srv->add_option("--advertise", f->advertise,
                  "HOST:PORT that leases name for this server (default: the --listen address)");
  srv->add_option("--session-mem-limit", f->session_mem, "GPU memory per session unless its lease says");
  srv->callback([f, exit_code, backend] {
    f->backend_given = backend->count() > 0;
    *exit_code = RunServer(*f);
  });

  struct RunFlags {
    std::string devices, lease, transport = "tcp", nccl;
    std::vector<std::string> argv;
  };
  auto r = std::make_shared<RunFlags>();
  auto* run = app.add_subcommand("run", "run a CUDA program on pooled GPUs");
  run->add_option("--devices", r->devices, "HOST:PORT/INDEX,... (default $GPOOL_DEVICES)");
  run->add_option("--lease", r->lease, "lease token(s), comma-separated (default $GPOOL_LEASE)");
  run->add_option("--transport", r->transport, "tcp or ucx")->check(CLI::IsMember({"tcp", "ucx"}));
  run->add_option("--nccl", r->nccl,
                  "gpool (default; $GPOOL_NCCL): programs linked with -lnccl get gpool's libnccl.so.2, "
                  "which relays collectives through this process; native: NVIDIA's NCCL")
      ->check(CLI::IsMember({"gpool", "native"}));
  run->add_option("program", r->argv, "PROGRAM [ARGS...] after --");
  run->callback([r, exit_code] {
    *exit_code = RunProgram(r->devices, r->lease, r->transport, r->nccl, r->argv);
  });
}

GPOOL_REGISTER_COMMAND(RegisterPool);

}  // namespace
}  // namespace gpool::cli
