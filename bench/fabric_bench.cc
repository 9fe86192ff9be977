// Fabric analysis benchmarks: traffic load, bisection, locality and failure handling as the
// `gpool fabric analyze/fail` commands run them.
//
// Routing itself (full routes, load + route of 11,664 HCAs, AffectedDestinations + Reroute,
// bytes per HCA at 100,000 HCAs) is measured in routing_bench.cc; this file does not repeat it.
//
// Fabrics: "ft2268" is the brief's three-level fat-tree (radix 36, 7 pods, 2,268 HCAs);
// "ft11664" the full radix-36 three-level tree (11,664 HCAs).
//
// Peer measured in the same run: BM_AllToAllTracePairs computes the same all-to-all link load
// by tracing every one of the N(N-1) pairs with TracePath, the obvious way; BM_AllToAll does it
// with one route tree per destination. Both produce identical per-link loads (analysis_test).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "fabric/analysis.h"
#include "fabric/failure.h"
#include "fabric/generators.h"
#include "fabric/routing.h"

namespace gpool::fabric {
namespace {

struct Routed {
  Fabric fabric;
  RoutingTables tables;
};

const Routed& Get(const std::string& name) {
  static std::map<std::string, Routed> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  StatusOr<Fabric> f = Status::NotFound(name);
  if (name == "ft2268") f = GenerateFatTree({.levels = 3, .radix = 36, .pods = 7});
  if (name == "ft11664") f = GenerateFatTree({.levels = 3, .radix = 36});
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.status().ToString().c_str());
    std::abort();
  }
  auto t = Route(*f, {.engine = Engine::kFtree});
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    std::abort();
  }
  return cache.emplace(name, Routed{std::move(*f), std::move(*t)}).first->second;
}

void Counters(benchmark::State& state, const Fabric& f) {
  state.counters["hcas"] = static_cast<double>(f.num_cas());
  state.counters["switches"] = static_cast<double>(f.num_switches());
}

void BM_AllToAll(benchmark::State& state, const std::string& name) {
  const Routed& r = Get(name);
  LoadReport rep;
  for (auto _ : state) {
    auto l = AnalyzeLoad(r.fabric, r.tables, {}, {});
    if (!l.ok()) {
      state.SkipWithError(l.status().ToString().c_str());
      break;
    }
    rep = std::move(*l);
  }
  Counters(state, r.fabric);
  state.counters["flows"] = static_cast<double>(rep.flows);
  state.counters["max_flows"] = static_cast<double>(rep.max_flows);
  state.counters["max_ratio"] = rep.max_load_ratio;
}
BENCHMARK_CAPTURE(BM_AllToAll, ft2268, "ft2268")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_AllToAll, ft11664, "ft11664")->Unit(benchmark::kMillisecond);

// The peer: every pair through TracePath, loads summed per directed link.
void BM_AllToAllTracePairs(benchmark::State& state, const std::string& name) {
  const Routed& r = Get(name);
  const Fabric& f = r.fabric;
  auto eps = Endpoints(f);
  uint64_t max_flows = 0;
  for (auto _ : state) {
    std::vector<uint64_t> flows(f.num_links() * 2, 0);
    for (const Endpoint& s : eps) {
      for (const Endpoint& d : eps) {
        if (s.ca == d.ca) continue;
        auto path = TracePath(f, r.tables, s.port, d.lid);
        if (!path.ok()) continue;
        NodeId cur = s.ca;
        for (LinkId l : *path) {
          ++flows[DirectedIndex(l, f.port(f.link(l).a).node == cur)];
          cur = f.link_peer(l, cur);
        }
      }
    }
    max_flows = *std::max_element(flows.begin(), flows.end());
  }
  Counters(state, f);
  state.counters["max_flows"] = static_cast<double>(max_flows);
}
BENCHMARK_CAPTURE(BM_AllToAllTracePairs, ft2268, "ft2268")->Unit(benchmark::kMillisecond)->Iterations(1);

// Shift permutations: `shifts` of the N-1 evaluated (every shift is N traced flows).
void BM_Shift(benchmark::State& state, const std::string& name) {
  const Routed& r = Get(name);
  size_t shifts = static_cast<size_t>(state.range(0));
  LoadReport rep;
  for (auto _ : state) {
    auto l = AnalyzeLoad(r.fabric, r.tables, {.kind = PatternKind::kShift}, {.max_shifts = shifts});
    if (!l.ok()) {
      state.SkipWithError(l.status().ToString().c_str());
      break;
    }
    rep = std::move(*l);
  }
  Counters(state, r.fabric);
  state.counters["shifts"] = static_cast<double>(rep.shifts_evaluated);
  state.counters["worst_max_flows"] = static_cast<double>(rep.max_flows);
}
BENCHMARK_CAPTURE(BM_Shift, ft2268, "ft2268")->Arg(64)->Arg(0)->Unit(benchmark::kMillisecond);

void BM_Bisection(benchmark::State& state, const std::string& name) {
  const Routed& r = Get(name);
  Locality loc = ComputeLocality(r.fabric);
  BisectionReport rep;
  for (auto _ : state) {
    auto b = Bisection(r.fabric, loc);
    if (!b.ok()) {
      state.SkipWithError(b.status().ToString().c_str());
      break;
    }
    rep = *b;
  }
  Counters(state, r.fabric);
  state.counters["ratio"] = rep.ratio;
}
BENCHMARK_CAPTURE(BM_Bisection, ft2268, "ft2268")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Bisection, ft11664, "ft11664")->Unit(benchmark::kMillisecond);

void BM_Locality(benchmark::State& state, const std::string& name) {
  const Routed& r = Get(name);
  for (auto _ : state) benchmark::DoNotOptimize(ComputeLocality(r.fabric));
  Counters(state, r.fabric);
}
BENCHMARK_CAPTURE(BM_Locality, ft11664, "ft11664")->Unit(benchmark::kMillisecond);

// FailAndReroute on one leaf uplink, as `gpool fabric fail` runs it: with pair counting (the
// report) and without (the re-route alone), and the re-route with ftree's balance check against
// a full re-route (FailureOptions::max_excess_load; off in the other two). The copy of fabric
// and tables is not timed.
void BM_FailLink(benchmark::State& state, const std::string& name, bool count_pairs,
                 bool balance_check) {
  const Routed& r = Get(name);
  auto target = ResolveLink(r.fabric, "leaf-p3-5[26]");
  if (!target.ok()) {
    state.SkipWithError(target.status().ToString().c_str());
    return;
  }
  FailureReport rep;
  for (auto _ : state) {
    state.PauseTiming();
    Fabric f = r.fabric;
    RoutingTables t = r.tables;
    state.ResumeTiming();
    auto out = FailAndReroute(&f, &t, *target,
                              {.route = {.engine = Engine::kFtree},
                               .count_pairs = count_pairs,
                               .max_excess_load = balance_check ? 0.10 : -1});
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
    rep = std::move(*out);
  }
  Counters(state, r.fabric);
  state.counters["affected_lids"] = static_cast<double>(rep.affected_lids.size());
  state.counters["pairs_affected"] = static_cast<double>(rep.pairs_affected);
}
BENCHMARK_CAPTURE(BM_FailLink, ft2268_reroute_only, "ft2268", false, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FailLink, ft2268_with_pairs, "ft2268", true, false)
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_FailLink, ft2268_balance_checked, "ft2268", false, true)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpool::fabric

BENCHMARK_MAIN();
