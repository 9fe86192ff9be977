// Fabric file I/O speed: parsing and writing ibnetdiscover text and the Clos CSV at 100,000
// endpoints, against the raw limit of the same run: one memchr pass that only finds the lines of
// the same text (no parser can be faster than reading its input once).
//
// Fabrics: a full three-level fat-tree of radix-74 switches (101,306 HCAs, 6,845 switches), and a
// Clos CSV of 100,000 hosts (8 per ToR, 250 ToRs per aggregation switch, one core). Both exceed
// the 49,151 unicast LIDs of one subnet, so LID assignment is off, as for the 100,000-HCA model
// benchmarks.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>

#include <fmt/format.h>

#include "fabric/clos_csv.h"
#include "fabric/generators.h"
#include "fabric/ibnetdiscover.h"
#include "fabric/writers.h"

namespace gpool::fabric {
namespace {

const Fabric& BigTree() {
  static const Fabric f = [] {
    FatTreeOptions o;
    o.levels = 3;
    o.radix = 74;
    o.assign_lids = false;
    return *GenerateFatTree(o);
  }();
  return f;
}

const std::string& BigText() {
  static const std::string text = *WriteIbnetdiscover(BigTree());
  return text;
}

const std::string& BigCsv() {
  static const std::string csv = [] {
    std::string s = "ip,DSW,PSW,ASW\n";
    for (int i = 0; i < 100000; ++i) {
      int tor = i / 8;
      s += fmt::format("host{:06},G1,P{},S{}\n", i, tor / 250, tor % 250);
    }
    return s;
  }();
  return csv;
}

void Report(benchmark::State& state, size_t bytes, size_t endpoints) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["endpoints"] = static_cast<double>(endpoints);
  state.counters["MiB"] = static_cast<double>(bytes) / (1 << 20);
}

// Raw limit: find every line of the ibnetdiscover text once.
void BM_RawLineScan(benchmark::State& state) {
  const std::string& text = BigText();
  for (auto _ : state) {
    size_t lines = 0;
    const char* p = text.data();
    const char* end = p + text.size();
    while (const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)))) {
      ++lines;
      p = nl + 1;
    }
    benchmark::DoNotOptimize(lines);
  }
  Report(state, text.size(), BigTree().num_cas());
}
BENCHMARK(BM_RawLineScan)->Unit(benchmark::kMillisecond);

void BM_ParseIbnetdiscover100k(benchmark::State& state) {
  const std::string& text = BigText();
  NetParseOptions o;
  o.assign_lids = false;
  for (auto _ : state) {
    auto f = ParseNet(text, o);
    if (!f.ok()) state.SkipWithError(f.status().ToString().c_str());
    benchmark::DoNotOptimize(f);
  }
  Report(state, text.size(), BigTree().num_cas());
}
BENCHMARK(BM_ParseIbnetdiscover100k)->Unit(benchmark::kMillisecond);

void BM_WriteIbnetdiscover100k(benchmark::State& state) {
  for (auto _ : state) {
    auto text = WriteIbnetdiscover(BigTree());
    benchmark::DoNotOptimize(text);
  }
  Report(state, BigText().size(), BigTree().num_cas());
}
BENCHMARK(BM_WriteIbnetdiscover100k)->Unit(benchmark::kMillisecond);

void BM_ParseClosCsv100k(benchmark::State& state) {
  const std::string& csv = BigCsv();
  ClosCsvOptions o;
  o.assign_lids = false;
  for (auto _ : state) {
    auto f = ParseClosCsv(csv, o);
    if (!f.ok()) state.SkipWithError(f.status().ToString().c_str());
    benchmark::DoNotOptimize(f);
  }
  Report(state, csv.size(), 100000);
}
BENCHMARK(BM_ParseClosCsv100k)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace gpool::fabric

BENCHMARK_MAIN();
