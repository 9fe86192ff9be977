// gpool's routing engines against OpenSM's on the same fabrics (docs/benchmarks.md, "Fabric vs
// OpenSM"). A small driver, not Google Benchmark: each OpenSM run is seconds.
//
// For each fabric: gpool routes it in-process (minhop, updn, ftree); then the fabric runs in ibsim
// and the real OpenSM routes it once per engine (ftree, updn, minhop, dfsssp), its
// opensm-lfts.dump read back with fabric::ReadLftDump (which checks that OpenSM's LIDs are the
// model's). Every table set is verified and measured the same way:
//   - max link load: flows on the busiest directed link, all-to-all and shift (worst shift k, and
//     the mean over shifts of each shift's busiest link; a perfect fat-tree shift is 1);
//   - routes per uplink: CA destinations each leaf sends out of each of its up-ports, as
//     max / ideal and min / ideal (ideal = remote CAs / up-ports; 1.00 is perfectly even);
//   - routing time: gpool = this thread's CPU time in Route(); OpenSM = the interval its log
//     stamps between "building routing with 'X'" and "X tables configured" (-D 0x47), and the
//     whole `opensm -o` run (discovery + LID assignment + programming LFTs through ibsim), as
//     wall time and as OpenSM's CPU time (user + system, from wait4: what a loaded machine
//     inflates least). The log interval is wall time.
// OpenSM falls back to minhop when an engine refuses a fabric; the "engine" column shows what it
// used.
//
// Usage: opensm_compare_bench [--fabrics small,medium,large] [--shifts N]
//   small  = 2-level fat-tree of 8-port switches, 4 leaves x 4 hosts (16 HCAs)
//   medium = full 2-level radix-36 fat-tree (648 HCAs, 54 switches)
//   large  = the brief's 3-level radix-36 tree: 7 pods x (18 leaf + 18 aggregation), 162 cores,
//            2,268 HCAs (ibsim -N 4096 -S 1024 -P 32768)
// --shifts: shifts evaluated for the shift pattern (spread over 1..N-1; default 64, 0 = all).
// Links run at HDR (ibsim 0.10 knows no NDR); rates are equal everywhere so loads are comparable.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/file.h"
#include "fabric/analysis.h"
#include "fabric/generators.h"
#include "fabric/lft_dump.h"
#include "fabric/routing.h"
#include "fabric/writers.h"
#include "ib/ibsim.h"

namespace gpool {
namespace {

using namespace gpool::fabric;  // NOLINT: a driver over the fabric library

double CpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

struct Case {
  std::string name;
  FatTreeOptions options;
  ib::IbsimOptions sim;
};

struct Row {
  std::string fabric, source, engine;
  double route_ms = 0, run_s = 0, run_cpu_s = 0;  // run_*: OpenSM only
  bool verified = false;
  uint64_t a2a_max = 0;
  double a2a_ratio = 0;
  uint64_t shift_max = 0;
  double shift_mean = 0;
  double uplink_max = 0, uplink_min = 0;
  std::string note;
};

// Per leaf up-port: CA destinations routed out of it, relative to an even split.
void UplinkBalance(const Fabric& f, const RoutingTables& t, Row* r) {
  r->uplink_max = 0;
  r->uplink_min = 1e9;
  for (NodeId s : f.switches()) {
    if (f.node(s).level != 0) continue;
    std::map<uint16_t, size_t> per_port;
    for (const Adjacent* a = f.adj_begin(s); a != f.adj_end(s); ++a)
      if (f.node(a->peer).type == NodeType::kSwitch) per_port[a->port] = 0;
    if (per_port.empty()) continue;
    size_t remote = 0;
    for (NodeId c : f.cas()) {
      const Node& ca = f.node(c);
      for (uint32_t p = ca.first_port; p < ca.first_port + ca.num_ports; ++p) {
        Lid lid = f.port(PortId(p)).lid;
        if (!lid) continue;
        uint8_t out = t.out_port(s, lid);
        auto it = per_port.find(out);
        if (it == per_port.end()) continue;  // a local CA (or no route)
        ++it->second;
        ++remote;
      }
    }
    double ideal = static_cast<double>(remote) / static_cast<double>(per_port.size());
    if (ideal <= 0) continue;
    for (auto [port, n] : per_port) {
      r->uplink_max = std::max(r->uplink_max, static_cast<double>(n) / ideal);
      r->uplink_min = std::min(r->uplink_min, static_cast<double>(n) / ideal);
    }
  }
}

void Measure(const Fabric& f, const RoutingTables& t, size_t shifts, Row* r) {
  VerifyReport v = Verify(f, t, {});
  r->verified = v.ok();
  if (!v.ok() && !v.problems.empty()) r->note += v.problems.front() + "; ";
  auto a2a = AnalyzeLoad(f, t, {.kind = PatternKind::kAllToAll}, {});
  if (a2a.ok()) {
    r->a2a_max = a2a->max_flows;
    r->a2a_ratio = a2a->max_load_ratio;
  }
  auto sh = AnalyzeLoad(f, t, {.kind = PatternKind::kShift}, {.max_shifts = shifts});
  if (sh.ok()) {
    r->shift_max = sh->max_flows;
    r->shift_mean = sh->mean_max_flows;
  }
  UplinkBalance(f, t, r);
}

// "Nov 30 04:29:05 340141 [..." -> seconds since midnight.
bool LogTime(std::string_view line, double* s) {
  int hh, mm, ss;
  long us;
  if (line.size() < 22 ||
      std::sscanf(std::string(line.substr(7, 16)).c_str(), "%d:%d:%d %ld", &hh, &mm, &ss, &us) != 4)
    return false;
  *s = hh * 3600.0 + mm * 60.0 + ss + static_cast<double>(us) * 1e-6;
  return true;
}

// OpenSM's routing interval and the engine that produced the tables, from its log.
void OpenSmRouting(const std::string& log, double* ms, std::string* engine) {
  LineReader lines(log);
  std::string_view line;
  double start = -1;
  while (lines.Next(&line)) {
    size_t b = line.find("building routing with '");
    if (b != std::string_view::npos) {
      LogTime(line, &start);
      size_t e = line.find('\'', b + 23);
      *engine = std::string(line.substr(b + 23, e - b - 23));
    }
    if (line.find("tables configured on all switches") != std::string_view::npos && start >= 0) {
      double end = 0;
      if (LogTime(line, &end)) *ms = (end - start) * 1e3;
      size_t p = line.find("osm_ucast_mgr_process: ");
      if (p != std::string_view::npos) {
        std::string_view rest = line.substr(p + 23);
        *engine = std::string(rest.substr(0, rest.find(' ')));
      }
    }
  }
}

int Main(int argc, char** argv) {
  std::string which = "small,medium,large";
  size_t shifts = 64;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--fabrics" && i + 1 < argc) which = argv[++i];
    else if (a == "--shifts" && i + 1 < argc) shifts = std::strtoul(argv[++i], nullptr, 10);
    else {
      std::fprintf(stderr, "usage: opensm_compare_bench [--fabrics small,medium,large] [--shifts N]\n");
      return 2;
    }
  }
  std::vector<Case> cases;
  if (which.find("small") != std::string::npos)
    cases.push_back({"ft16 (2-level, radix 8)",
                     {.levels = 2, .radix = 8, .leaves = 4, .speed = LinkSpeed::kHdr}, {}});
  if (which.find("medium") != std::string::npos)
    cases.push_back({"ft648 (2-level, radix 36)", {.levels = 2, .radix = 36, .speed = LinkSpeed::kHdr}, {}});
  if (which.find("large") != std::string::npos)
    cases.push_back({"ft2268 (3-level, radix 36, 7 pods)",
                     {.levels = 3, .radix = 36, .pods = 7, .speed = LinkSpeed::kHdr},
                     {.max_nodes = 4096, .max_switches = 1024, .max_ports = 32768,
                      .ready_timeout_s = 300}});

  std::vector<Row> rows;
  for (const Case& c : cases) {
    auto f = GenerateFatTree(c.options);
    if (!f.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), f.status().ToString().c_str());
      return 1;
    }
    for (Engine e : {Engine::kFtree, Engine::kUpdn, Engine::kMinhop}) {
      Row r{.fabric = c.name, .source = "gpool", .engine = std::string(EngineName(e))};
      double t0 = CpuMs();
      auto t = Route(*f, {.engine = e});
      r.route_ms = CpuMs() - t0;
      if (!t.ok()) {
        r.note = t.status().ToString();
      } else {
        Measure(*f, *t, shifts, &r);
      }
      rows.push_back(r);
      std::fprintf(stderr, "done %s gpool %s\n", c.name.c_str(), r.engine.c_str());
    }
    auto net = WriteIbsimNet(*f);
    if (!net.ok()) return 1;
    ib::IbsimOptions so = c.sim;
    so.net_text = *net;
    auto sim = ib::Ibsim::Start(so);
    if (!sim.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(), sim.status().ToString().c_str());
      return 1;
    }
    for (const char* engine : {"ftree", "updn", "minhop", "dfsssp"}) {
      Row r{.fabric = c.name, .source = "opensm", .engine = engine};
      auto run = (*sim)->RunOpenSmOnce({.engine = engine, .extra_args = {"-D", "0x47"},
                                        .timeout_s = 600});
      if (!run.ok()) {
        r.note = run.status().ToString().substr(0, 200);
        rows.push_back(r);
        continue;
      }
      r.run_s = run->result.wall_s;
      r.run_cpu_s = run->result.cpu_s;
      auto log = ReadFile(run->log_path);
      std::string used = "?";
      if (log.ok()) OpenSmRouting(*log, &r.route_ms, &used);
      if (used != engine) r.note += fmt::format("OpenSM used {}; ", used);
      r.engine = used == engine ? engine : fmt::format("{}->{}", engine, used);
      auto text = ReadFile(run->lfts_path);
      auto t = text.ok() ? ReadLftDump(*text, *f, {.source_name = run->lfts_path}) : text.status();
      if (!t.ok()) {
        r.note += t.status().ToString().substr(0, 200);
      } else {
        Measure(*f, *t, shifts, &r);
      }
      rows.push_back(r);
      std::fprintf(stderr, "done %s opensm %s\n", c.name.c_str(), engine);
    }
  }
  std::printf("| fabric | routes | verified | route ms | opensm -o wall / CPU s | a2a max flows "
              "(ratio) | shift worst / mean max flows | uplink routes max / min vs even | note |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %s %s | %s | %.2f | %s | %llu (%.2f) | %llu / %.2f | %.2f / %.2f | %s |\n",
                r.fabric.c_str(), r.source.c_str(), r.engine.c_str(), r.verified ? "yes" : "NO",
                r.route_ms,
                r.source == "opensm" ? fmt::format("{:.1f} / {:.1f}", r.run_s, r.run_cpu_s).c_str()
                                     : "-",
                static_cast<unsigned long long>(r.a2a_max), r.a2a_ratio,
                static_cast<unsigned long long>(r.shift_max), r.shift_mean, r.uplink_max,
                r.uplink_min, r.note.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace gpool

int main(int argc, char** argv) { return gpool::Main(argc, argv); }
