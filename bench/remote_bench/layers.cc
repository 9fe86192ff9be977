// remote_bench --interleaved's --clients (bench/remote_bench/internal.h lists the files): the
// interception layers' programs (bench/layer_client.h: driver_client, layer_runtime,
// layer_static, built in build/bench/clients) run through `gpool run` against the bench's
// gpu-servers, one set per transport, and the contenders whose steps are their commands.
// bench/driver_layer.sh drives it.
// Apart because it exists only with --clients (programs that need nvcc to build).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "remote_bench/internal.h"

namespace gpool::remote::remote_bench {
namespace {

// By transport (0 tcp, 1 ucx).
std::map<int, Layers> g_layers;

// Forgets the pids of programs that have exited (each destructor waited for its own).
void StopClients() {
  std::vector<pid_t> live;
  for (const auto& [t, l] : g_layers) {
    for (const auto* c : {l.driver.get(), l.runtime.get(), l.blas.get()}) {
      if (c) live.push_back(c->pid());
    }
  }
  g.client_pids = live;
}

std::shared_ptr<bench::LayerClient> StartClient(const DriverFlags& f, int t,
                                                const std::vector<std::string>& argv,
                                                const std::string& first) {
  std::string why;
  auto c = bench::LayerClient::Start(f.gpool, Name(t), GpuAddr(t), argv, first, &why);
  if (!c) Die("--clients: " + why);
  g.client_pids.push_back(c->pid());
  return std::shared_ptr<bench::LayerClient>(std::move(c));
}

}  // namespace

// The programs of transport `t`; with `driver_only`, only driver_client (the copy groups').
Layers& LayersFor(const DriverFlags& f, int t, bool driver_only) {
  auto it = g_layers.find(t);
  if (it != g_layers.end() && (driver_only || it->second.runtime)) return it->second;
  Layers l;
  l.driver = StartClient(f, t, {f.clients + "/driver_client", f.clients + "/layer_kernels.fatbin"},
                         "sync 1");
  if (driver_only) return g_layers[t] = l;
  l.runtime = StartClient(f, t, {f.clients + "/layer_runtime"}, "sync 1");
  const std::string blas = f.clients + "/layer_static";
  if (access(blas.c_str(), X_OK) == 0) {
    l.blas = StartClient(f, t, {blas, std::to_string(f.sgemm)}, "sgemm 1");
  } else {
    std::printf("note: no %s (the toolkit has no cuBLAS?): no SGEMM loop, no static-runtime "
                "launches\n",
                blas.c_str());
  }
  return g_layers[t] = l;
}


void EndLayers(int t) {
  if (t < 0) {
    g_layers.clear();
  } else {
    g_layers.erase(t);
  }
  StopClients();
}

// A contender whose step is one command of `c` doing `n` calls, with `n` such that a step takes
// ~30 ms here (the fastest of three untimed probes: a probe slowed by the machine's load would
// shorten every step), and at least 1,000 calls, so that the pipe's round trip per step (~10-50 us)
// stays well under 1%.
Contender ClientCalls(const std::string& name, std::shared_ptr<bench::LayerClient> c,
                      const std::string& cmd) {
  const int probe = 200;
  double per = 1;
  for (int i = 0; i < 3; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (!c->Do(fmt::format("{} {}", cmd, probe))) Die(c->name() + ": " + cmd + " failed");
    per = std::min(
        per, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / probe);
  }
  const long n = std::clamp(static_cast<long>(0.03 / std::max(per, 1e-9)), 1000L, 1000000L);
  const std::string line = fmt::format("{} {}", cmd, n);
  return {fmt::format("{} ({}/step)", name, n), [c, line, n] {
            if (!c->Do(line)) Die(c->name() + ": '" + line + "' failed");
            return static_cast<double>(n);
          }};
}

}  // namespace gpool::remote::remote_bench
