// Routing benchmarks (src/fabric generators and engines).
//
// Fabrics: "ft2268" is the brief's three-level fat-tree (radix 36, 7 pods of 18 leaf + 18
// aggregation switches, 162 cores, 2,268 HCAs); "ft11664" the full radix-36 three-level tree
// (11,664 HCAs, 1,620 switches); "torus512" an 8x8x8 torus with one HCA per switch.
// OpenSM's ftree takes 0.6-1 s on the 2,268-HCA fabric (figure from the brief). The raw limit,
// measured in the same run, is BM_RawLftFill: writing every LFT byte once (switches x LIDs),
// which any engine must do.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/file.h"
#include "fabric/failure.h"
#include "fabric/generators.h"
#include "fabric/load.h"
#include "fabric/routing.h"
#include "fabric/writers.h"

namespace gpool::fabric {
namespace {

const Fabric& Get(const std::string& name) {
  static std::map<std::string, Fabric> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  StatusOr<Fabric> f = Status::NotFound(name);
  if (name == "ft2268") f = GenerateFatTree({.levels = 3, .radix = 36, .pods = 7});
  if (name == "ft11664") f = GenerateFatTree({.levels = 3, .radix = 36});
  if (name == "torus512") f = GenerateTorus({.dims = {8, 8, 8}});
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.status().ToString().c_str());
    std::abort();
  }
  return cache.emplace(name, std::move(*f)).first->second;
}

void Counters(benchmark::State& state, const Fabric& f) {
  state.counters["hcas"] = static_cast<double>(f.num_cas());
  state.counters["switches"] = static_cast<double>(f.num_switches());
}

void BM_Route(benchmark::State& state, const std::string& fabric, Engine engine) {
  const Fabric& f = Get(fabric);
  for (auto _ : state) {
    auto t = Route(f, {.engine = engine});
    if (!t.ok()) state.SkipWithError(t.status().ToString().c_str());
    benchmark::DoNotOptimize(t);
  }
  Counters(state, f);
}
BENCHMARK_CAPTURE(BM_Route, ftree_ft2268, "ft2268", Engine::kFtree)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Route, minhop_ft2268, "ft2268", Engine::kMinhop)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Route, updn_ft2268, "ft2268", Engine::kUpdn)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Route, ftree_ft11664, "ft11664", Engine::kFtree)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Route, minhop_ft11664, "ft11664", Engine::kMinhop)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Route, dor_torus512, "torus512", Engine::kDor)->Unit(benchmark::kMillisecond);

// The raw limit: filling switches x (max LID + 1) bytes once.
void BM_RawLftFill(benchmark::State& state, const std::string& fabric) {
  const Fabric& f = Get(fabric);
  size_t bytes = f.num_switches() * (static_cast<size_t>(f.max_lid()) + 1);
  for (auto _ : state) {
    std::vector<uint8_t> lft(bytes);
    std::memset(lft.data(), 7, lft.size());
    benchmark::DoNotOptimize(lft.data());
  }
  state.counters["lft_bytes"] = static_cast<double>(bytes);
}
BENCHMARK_CAPTURE(BM_RawLftFill, ft2268, "ft2268")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RawLftFill, ft11664, "ft11664")->Unit(benchmark::kMillisecond);

// Load an ibnetdiscover dump of the 11,664-HCA tree from disk, then route it.
void BM_LoadAndRoute(benchmark::State& state, Engine engine) {
  const Fabric& f = Get("ft11664");
  static std::string path;
  if (path.empty()) {
    path = "/tmp/gpool_routing_bench_ft11664.topo";
    auto text = WriteIbnetdiscover(f);
    if (!text.ok() || !WriteFileAtomic(path, *text).ok()) {
      state.SkipWithError("cannot write the dump");
      return;
    }
  }
  for (auto _ : state) {
    auto g = LoadFabric(path);
    if (!g.ok()) {
      state.SkipWithError(g.status().ToString().c_str());
      break;
    }
    auto t = Route(*g, {.engine = engine});
    if (!t.ok()) state.SkipWithError(t.status().ToString().c_str());
    benchmark::DoNotOptimize(t);
  }
  Counters(state, f);
}
BENCHMARK_CAPTURE(BM_LoadAndRoute, ftree_ft11664, Engine::kFtree)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoadAndRoute, minhop_ft11664, Engine::kMinhop)->Unit(benchmark::kMillisecond);

// One leaf-to-aggregation link fails: find the affected destinations from the LFTs and
// re-route only those. Timed: AffectedDestinations + Reroute. Restoring is not timed.
void BM_RerouteLinkFailure(benchmark::State& state, Engine engine) {
  Fabric f = Get("ft2268");
  auto base = Route(f, {.engine = engine});
  if (!base.ok()) {
    state.SkipWithError(base.status().ToString().c_str());
    return;
  }
  NodeId leaf = *f.FindByName("leaf-p3-5");
  FailureTarget target{.kind = FailureTarget::Kind::kLink,
                       .link = f.port(f.port_of(leaf, 19 + 7)).link,
                       .label = "leaf-p3-5[26]"};
  size_t affected = 0;
  for (auto _ : state) {
    state.PauseTiming();
    RoutingTables t = *base;
    (void)f.SetLinkUp(target.link, false);
    state.ResumeTiming();
    std::vector<Lid> lids = AffectedDestinations(f, t, target);
    Status st = Reroute(f, lids, {.engine = engine}, &t);
    state.PauseTiming();
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    affected = lids.size();
    (void)f.SetLinkUp(target.link, true);
    state.ResumeTiming();
  }
  state.counters["affected_lids"] = static_cast<double>(affected);
  Counters(state, f);
}
BENCHMARK_CAPTURE(BM_RerouteLinkFailure, ftree_ft2268, Engine::kFtree)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_RerouteLinkFailure, minhop_ft2268, Engine::kMinhop)->Unit(benchmark::kMillisecond);

void BM_Verify(benchmark::State& state, const std::string& fabric, Engine engine) {
  const Fabric& f = Get(fabric);
  auto t = Route(f, {.engine = engine});
  VerifyReport r;
  for (auto _ : state) {
    r = Verify(f, *t, {.max_destinations = 0});
    benchmark::DoNotOptimize(r);
  }
  state.counters["pairs"] = static_cast<double>(r.pairs_checked);
  state.counters["ok"] = r.ok();
}
BENCHMARK_CAPTURE(BM_Verify, ftree_ft2268, "ft2268", Engine::kFtree)->Unit(benchmark::kMillisecond);

// Model memory for ~100,000 HCAs (beyond one subnet's LIDs: built without LIDs, not routed):
// radix 80, 63 pods x (40 leaves + 40 aggregation) + 1,600 cores, 12,600 hosts x 8 rails.
void BM_Generate100k(benchmark::State& state) {
  size_t bytes = 0, hcas = 0;
  for (auto _ : state) {
    auto f = GenerateFatTree({.levels = 3, .radix = 80, .pods = 63, .hcas_per_node = 8,
                              .assign_lids = false});
    if (!f.ok()) {
      state.SkipWithError(f.status().ToString().c_str());
      break;
    }
    bytes = f->MemoryBytes();
    hcas = f->num_cas();
  }
  state.counters["hcas"] = static_cast<double>(hcas);
  state.counters["bytes_per_hca"] = hcas ? static_cast<double>(bytes) / hcas : 0;
}
BENCHMARK(BM_Generate100k)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace
}  // namespace gpool::fabric

BENCHMARK_MAIN();
