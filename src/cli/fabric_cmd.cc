// `gpool fabric`: generate, load, route, analyse, fail and export fabrics offline (see
// docs/cli.md, "Fabric"). Each subcommand loads the file afresh, so they compose in scripts;
// errors go to stderr naming the file:line or the flag, with exit status 1 (2 for bad flags,
// from CLI11).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/fabric_ib_cmd.h"
#include "cli/fabric_watch_cmd.h"
#include "cli/fabric_ctl.h"
#include "common/file.h"
#include "fabric/analysis.h"
#include "fabric/compare.h"
#include "fabric/failure.h"
#include "fabric/generators.h"
#include "fabric/lft_dump.h"
#include "fabric/node_name_map.h"
#include "fabric/load.h"
#include "fabric/routing.h"
#include "fabric/writers.h"

namespace gpool::cli {
namespace {

using namespace gpool::fabric;  // NOLINT: this file is the fabric front end
using Json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Output helpers

int FabricFail(std::string_view cmd, const Status& s) {
  fmt::print(stderr, "gpool fabric {}: {}\n", cmd, s.message());
  return 1;
}

void PrintJson(const Json& j) { fmt::print("{}\n", j.dump(2)); }

// Key/value lines with the keys padded to one column.
class Table {
 public:
  void Row(std::string key, std::string value) { rows_.emplace_back(std::move(key), std::move(value)); }
  void Print() const {
    size_t w = 0;
    for (const auto& [k, v] : rows_) w = std::max(w, k.size());
    for (const auto& [k, v] : rows_) fmt::print("{:<{}}  {}\n", k, w, v);
  }

 private:
  std::vector<std::pair<std::string, std::string>> rows_;
};

double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// "leaf-3[33] -> spine-0[4]" for one direction of a link.
std::string DirectedLinkName(const Fabric& f, LinkId l, bool a_to_b) {
  const Link& k = f.link(l);
  const Port& from = f.port(a_to_b ? k.a : k.b);
  const Port& to = f.port(a_to_b ? k.b : k.a);
  return fmt::format("{}[{}] -> {}[{}]", f.node(from.node).name, from.num, f.node(to.node).name,
                     to.num);
}

std::string LinkRateName(const Fabric& f, LinkId l) {
  const Port& a = f.port(f.link(l).a);
  const Port& b = f.port(f.link(l).b);
  LinkSpeed s = LaneGbps(a.speed) <= LaneGbps(b.speed) ? a.speed : b.speed;
  return fmt::format("{}x{}", std::min(a.width, b.width), LinkSpeedName(s));
}

// ---------------------------------------------------------------------------------------------
// Loading

struct InputFlags {
  std::string file;
  std::string format = "auto";
  std::string output = "table";
};

struct Loaded {
  Fabric fabric;
  FabricFormat format = FabricFormat::kAuto;
  std::vector<std::string> warnings;
  double load_ms = 0;
};

StatusOr<Loaded> LoadInput(const InputFlags& in) {
  Loaded l;
  GPOOL_ASSIGN_OR_RETURN(FabricFormat fmt_, ParseFabricFormat(in.format));
  fabric::LoadOptions opts;
  opts.format = fmt_;
  opts.detected = &l.format;
  opts.warnings = &l.warnings;
  auto t0 = std::chrono::steady_clock::now();
  GPOOL_ASSIGN_OR_RETURN(l.fabric, LoadFabric(in.file, opts));
  l.load_ms = MsSince(t0);
  return l;
}

void AddInputFlags(CLI::App* c, InputFlags* in, bool with_output) {
  c->add_option("FILE", in->file, "fabric file (ibnetdiscover dump, ibsim net, Clos CSV)")
      ->required();
  c->add_option("--input-format", in->format, "auto, ibnetdiscover, ibsim or clos-csv")
      ->check(CLI::IsMember({"auto", "ibnetdiscover", "ibsim", "clos-csv"}));
  if (with_output)
    c->add_option("-o,--output", in->output, "table or json")
        ->check(CLI::IsMember({"table", "json"}));
}

// Routes with `engine`, or, when `lfts` names a file, reads the routes OpenSM really programmed
// from its opensm-lfts.dump (the fabric's LIDs must be the subnet's: see ReadLftDump).
StatusOr<RoutingTables> RouteWith(const Fabric& f, const std::string& engine, double* ms,
                                  const std::string& lfts = "") {
  if (!lfts.empty()) {
    auto t0 = std::chrono::steady_clock::now();
    GPOOL_ASSIGN_OR_RETURN(std::string text, ReadFile(lfts));
    auto t = ReadLftDump(text, f, {.source_name = lfts});
    *ms = MsSince(t0);
    return t;
  }
  if (engine.empty()) return Status::InvalidArgument("give --engine ENGINE or --lfts FILE");
  GPOOL_ASSIGN_OR_RETURN(Engine e, ParseEngine(engine));
  auto t0 = std::chrono::steady_clock::now();
  auto t = Route(f, {.engine = e});
  *ms = MsSince(t0);
  if (!t.ok()) return t.status().WithContext(fmt::format("routing with {}", engine));
  return t;
}

Json SummaryJson(const Fabric& f, const Locality& loc) {
  std::map<std::string, size_t> rates;
  for (uint32_t l = 0; l < f.num_links(); ++l) ++rates[LinkRateName(f, LinkId(l))];
  Json j;
  j["switches"] = f.num_switches();
  j["cas"] = f.num_cas();
  j["routers"] = f.num_nodes() - f.num_switches() - f.num_cas();
  j["links"] = f.num_links();
  j["endpoints"] = Endpoints(f).size();
  j["levels"] = loc.num_levels;
  j["levels_inferred"] = loc.inferred;
  j["leaves"] = loc.leaves.size();
  j["pods"] = loc.num_pods;
  j["max_lid"] = f.max_lid();
  j["link_rates"] = rates;
  j["rate_mismatches"] = RateMismatches(f);
  j["locality_notes"] = loc.notes;
  return j;
}

void SummaryTable(const Fabric& f, const Locality& loc, Table* t) {
  std::map<std::string, size_t> rates;
  for (uint32_t l = 0; l < f.num_links(); ++l) ++rates[LinkRateName(f, LinkId(l))];
  std::string r;
  for (const auto& [name, n] : rates) r += fmt::format("{}{} x {}", r.empty() ? "" : ", ", n, name);
  t->Row("switches", fmt::format("{}", f.num_switches()));
  t->Row("cas", fmt::format("{}", f.num_cas()));
  if (size_t routers = f.num_nodes() - f.num_switches() - f.num_cas())
    t->Row("routers", fmt::format("{}", routers));
  t->Row("links", fmt::format("{} ({})", f.num_links(), r.empty() ? "none" : r));
  t->Row("levels", fmt::format("{}{}", loc.num_levels, loc.inferred ? " (inferred)" : ""));
  t->Row("leaves", fmt::format("{}", loc.leaves.size()));
  t->Row("pods", loc.num_levels >= 3 ? fmt::format("{}", loc.num_pods)
                                     : fmt::format("{} (fewer than 3 tiers: a pod is the fabric)",
                                                   loc.num_pods));
  t->Row("max LID", fmt::format("{}", f.max_lid()));
  for (const auto& n : loc.notes) t->Row("note", n);
  for (const auto& m : RateMismatches(f)) t->Row("rate mismatch", m);
}

// ---------------------------------------------------------------------------------------------
// gen

struct GenFlags {
  std::string kind;  // fat-tree, torus, dragonfly, brief
  std::string out;
  std::string format = "ibnetdiscover";
  std::string output = "table";
  // fat-tree
  int levels = 2, radix = 36, pods = 0, leaves = 0, core_links = 0, hcas_per_node = 1, hosts = 0;
  std::string oversubscription = "1:1";
  std::string rate = "4xNDR";
  // torus
  std::string dims = "4x4x4";
  int hcas_per_switch = 1;
  // dragonfly
  int groups = 0, routers = 4, hosts_per_router = 2, global_links = 2;
};

bool ParseInt(std::string_view text, int* out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), *out);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

StatusOr<std::pair<LinkWidth, LinkSpeed>> ParseRate(const std::string& text) {
  LinkWidth w = 4;
  LinkSpeed s;
  if (ParseWidthSpeed(text, &w, &s)) return std::pair{w, s};
  if (auto sp = ParseLinkSpeed(text)) return std::pair{LinkWidth{4}, *sp};
  return Status::InvalidArgument(
      fmt::format("--rate '{}': expected a speed (SDR ... NDR, XDR) or WIDTHxSPEED such as 4xNDR",
                  text));
}

StatusOr<Oversubscription> ParseOversubscription(const std::string& text) {
  auto parts = Split(text, ':');
  Oversubscription o;
  if (parts.size() != 2 || !ParseInt(parts[0], &o.down) || !ParseInt(parts[1], &o.up))
    return Status::InvalidArgument(
        fmt::format("--oversubscription '{}': expected DOWN:UP such as 1:1 or 2:1", text));
  return o;
}

// The brief's "2,048 GPUs on NDR": 256 hosts of 8 GPUs, one NDR HCA per GPU, rail-optimised on a
// non-blocking two-level fat-tree of 64-port NDR switches (64 leaves + 32 spines). The brief's
// "10 switches" cannot carry 2,048 NDR endpoints at 1:1 (see docs/cli.md).
FatTreeOptions BriefFabric() {
  FatTreeOptions o;
  o.levels = 2;
  o.radix = 64;
  o.hcas_per_node = 8;
  o.speed = LinkSpeed::kNdr;
  return o;
}

int RunGen(const GenFlags& g) {
  const std::string cmd = "gen " + g.kind;
  StatusOr<Fabric> fabric = Status::InvalidArgument("unknown generator");
  std::string shape;
  auto rate = ParseRate(g.rate);
  if (!rate.ok()) return FabricFail(cmd, rate.status());
  if (g.kind == "fat-tree" || g.kind == "brief") {
    FatTreeOptions o;
    if (g.kind == "brief") {
      o = BriefFabric();
    } else {
      auto over = ParseOversubscription(g.oversubscription);
      if (!over.ok()) return FabricFail(cmd, over.status());
      o.levels = g.levels;
      o.radix = g.radix;
      o.pods = g.pods;
      o.leaves = g.leaves;
      o.core_ports_per_pod = g.core_links;
      o.oversubscription = *over;
      o.width = rate->first;
      o.speed = rate->second;
      o.hcas_per_node = g.hcas_per_node;
      o.hosts = g.hosts;
    }
    auto s = ResolveFatTree(o);
    if (!s.ok()) return FabricFail(cmd, s.status());
    shape = s->ToString();
    fabric = GenerateFatTree(o);
  } else if (g.kind == "torus") {
    TorusOptions o;
    auto d = Split(g.dims, 'x');
    if (d.size() < 1 || d.size() > 3)
      return FabricFail(cmd, Status::InvalidArgument(
                           fmt::format("--dims '{}': expected XxYxZ such as 8x8x8", g.dims)));
    for (size_t i = 0; i < 3; ++i) {
      o.dims[i] = 1;
      if (i < d.size() && (!ParseInt(d[i], &o.dims[i]) || o.dims[i] < 1))
        return FabricFail(cmd, Status::InvalidArgument(
                             fmt::format("--dims '{}': '{}' is not a positive size", g.dims, d[i])));
    }
    o.hcas_per_switch = g.hcas_per_switch;
    o.width = rate->first;
    o.speed = rate->second;
    shape = fmt::format("3D torus {}x{}x{}, {} HCAs per switch", o.dims[0], o.dims[1], o.dims[2],
                        o.hcas_per_switch);
    fabric = GenerateTorus(o);
  } else {
    DragonflyOptions o;
    o.groups = g.groups;
    o.routers_per_group = g.routers;
    o.hosts_per_router = g.hosts_per_router;
    o.global_links_per_router = g.global_links;
    o.width = rate->first;
    o.speed = rate->second;
    shape = fmt::format("dragonfly: {} routers per group, {} hosts and {} global links per router",
                        o.routers_per_group, o.hosts_per_router, o.global_links_per_router);
    fabric = GenerateDragonfly(o);
  }
  if (!fabric.ok()) return FabricFail(cmd, fabric.status());

  StatusOr<std::string> text = Status::Internal("no format");
  if (g.format == "ibnetdiscover") text = WriteIbnetdiscover(*fabric);
  else if (g.format == "ibsim") text = WriteIbsimNet(*fabric);
  else text = WriteJson(*fabric);
  if (!text.ok()) return FabricFail(cmd, text.status());
  if (g.out.empty()) {
    std::fwrite(text->data(), 1, text->size(), stdout);
    return 0;
  }
  if (Status s = WriteFileAtomic(g.out, *text); !s.ok()) return FabricFail(cmd, s);
  Locality loc = ComputeLocality(*fabric);
  if (g.output == "json") {
    Json j;
    j["file"] = g.out;
    j["format"] = g.format;
    j["shape"] = shape;
    j.update(SummaryJson(*fabric, loc));
    PrintJson(j);
  } else {
    Table t;
    t.Row("wrote", fmt::format("{} ({})", g.out, g.format));
    t.Row("shape", shape);
    SummaryTable(*fabric, loc, &t);
    t.Print();
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// load

int RunLoad(const InputFlags& in) {
  auto l = LoadInput(in);
  if (!l.ok()) return FabricFail("load", l.status());
  const Fabric& f = l->fabric;
  Locality loc = ComputeLocality(f);
  if (in.output == "json") {
    Json j;
    j["file"] = in.file;
    j["format"] = FabricFormatName(l->format);
    j.update(SummaryJson(f, loc));
    j["load_ms"] = l->load_ms;
    j["warnings"] = l->warnings;
    PrintJson(j);
    return 0;
  }
  Table t;
  t.Row("file", fmt::format("{} ({})", in.file, FabricFormatName(l->format)));
  SummaryTable(f, loc, &t);
  t.Row("load time", fmt::format("{:.1f} ms", l->load_ms));
  for (const auto& w : l->warnings) t.Row("warning", w);
  t.Print();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// route

struct RouteFlags {
  InputFlags in;
  std::string engine;
  std::string lfts;  // read OpenSM's routes instead of computing them
  std::string lft_out;
};

int RunRoute(const RouteFlags& r) {
  auto l = LoadInput(r.in);
  if (!l.ok()) return FabricFail("route", l.status());
  const Fabric& f = l->fabric;
  double route_ms = 0;
  auto t = RouteWith(f, r.engine, &route_ms, r.lfts);
  if (!t.ok()) return FabricFail("route", t.status());
  auto t0 = std::chrono::steady_clock::now();
  VerifyReport v = Verify(f, *t, {});
  double verify_ms = MsSince(t0);
  size_t entries = 0;
  for (NodeId s : f.switches())
    for (uint32_t lid = 1; lid <= t->max_lid(); ++lid)
      entries += t->out_port(s, static_cast<Lid>(lid)) != kNoRoute;
  if (!r.lft_out.empty()) {
    if (Status s = WriteFileAtomic(r.lft_out, WriteLftDump(f, *t)); !s.ok())
      return FabricFail("route", s.WithContext("--lft-out"));
  }
  if (r.in.output == "json") {
    Json j;
    j["file"] = r.in.file;
    j["engine"] = t->engine;
    j["switches"] = f.num_switches();
    j["cas"] = f.num_cas();
    j["links"] = f.num_links();
    j["max_lid"] = t->max_lid();
    j["entries"] = entries;
    j["vls"] = t->num_vls;
    j["route_ms"] = route_ms;
    j["verify"] = {{"pairs_checked", v.pairs_checked}, {"unreachable", v.unreachable},
                   {"loops", v.loops},                 {"deadlock_free", v.deadlock_free},
                   {"ok", v.ok()},                     {"problems", v.problems},
                   {"verify_ms", verify_ms}};
    j["notes"] = t->notes;
    if (!r.lft_out.empty()) j["lft_out"] = r.lft_out;
    PrintJson(j);
    return 0;
  }
  Table tb;
  tb.Row("file", r.in.file);
  tb.Row("engine", t->engine);
  tb.Row("switches", fmt::format("{}", f.num_switches()));
  tb.Row("cas", fmt::format("{}", f.num_cas()));
  tb.Row("LFT entries", fmt::format("{} (LIDs 1..{}, {} VL{})", entries, t->max_lid(), t->num_vls,
                                    t->num_vls == 1 ? "" : "s"));
  tb.Row("route time", fmt::format("{:.1f} ms", route_ms));
  tb.Row("verify", fmt::format("{}: {} CA pairs, {} unreachable, {} loops, {}", v.ok() ? "ok" : "FAILED",
                               v.pairs_checked, v.unreachable, v.loops,
                               v.deadlock_free ? "deadlock-free" : "CREDIT LOOP (deadlock possible)"));
  for (const auto& p : v.problems) tb.Row("problem", p);
  for (const auto& n : t->notes) tb.Row("note", n);
  if (!r.lft_out.empty()) tb.Row("LFTs written", r.lft_out);
  tb.Print();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// analyze

struct AnalyzeFlags {
  InputFlags in;
  std::string engine;
  std::string lfts;  // analyse OpenSM's routes instead of computing them
  std::string pattern = "all-to-all";
  size_t shifts = 0;
  size_t top = 5;
};

// The most loaded directed links, by load ratio.
std::vector<std::pair<uint32_t, double>> TopLinks(const Fabric& f, const LoadReport& r, size_t n) {
  std::vector<std::pair<uint32_t, double>> all;
  for (uint32_t d = 0; d < r.link_flows.size(); ++d)
    if (r.link_flows[d]) all.emplace_back(d, r.link_gbps[d] / f.link_gbps(LinkId(d / 2)));
  n = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<ptrdiff_t>(n), all.end(),
                    [](auto& a, auto& b) { return a.second > b.second || (a.second == b.second && a.first < b.first); });
  all.resize(n);
  return all;
}

Json LoadJson(const Fabric& f, const LoadReport& r, size_t top) {
  Json j;
  j["pattern"] = r.pattern;
  j["endpoints"] = r.endpoints;
  j["flows"] = r.flows;
  j["unroutable"] = r.unroutable;
  j["max_flows_per_link"] = r.max_flows;
  j["max_load_ratio"] = r.max_load_ratio;
  j["max_load_gbps"] = r.max_load_gbps;
  if (r.worst_link.valid())
    j["worst_link"] = {{"link", DirectedLinkName(f, r.worst_link, r.worst_a_to_b)},
                       {"gbps", f.link_gbps(r.worst_link)}};
  j["directed_links"] = r.directed_links;
  j["directed_links_used"] = r.directed_links_used;
  Json h = Json::array();
  for (const auto& b : r.histogram)
    h.push_back({{"flows_min", b.lo}, {"flows_max", b.hi}, {"links", b.links}});
  j["histogram"] = h;
  if (r.shifts_evaluated)
    j["shift"] = {{"worst_shift", r.worst_shift},
                  {"evaluated", r.shifts_evaluated},
                  {"mean_max_flows", r.mean_max_flows}};
  Json tl = Json::array();
  for (auto [d, ratio] : TopLinks(f, r, top))
    tl.push_back({{"link", DirectedLinkName(f, LinkId(d / 2), d % 2 == 0)},
                  {"flows", r.link_flows[d]},
                  {"load_gbps", r.link_gbps[d]},
                  {"load_ratio", ratio}});
  j["top_links"] = tl;
  j["problems"] = r.problems;
  return j;
}

void LoadTable(const Fabric& f, const LoadReport& r, size_t top, const std::string& prefix, Table* t) {
  t->Row(prefix + "flows", fmt::format("{} routed, {} unroutable ({} endpoints)", r.flows,
                                       r.unroutable, r.endpoints));
  if (r.shifts_evaluated)
    t->Row(prefix + "shifts", fmt::format("{} evaluated; worst k = {}; mean per-shift max {:.2f} "
                                          "flows/link",
                                          r.shifts_evaluated, r.worst_shift, r.mean_max_flows));
  t->Row(prefix + "max flows/link", fmt::format("{}", r.max_flows));
  if (r.worst_link.valid())
    t->Row(prefix + "max load", fmt::format("{:.2f} x link rate ({:.1f} of {:.0f} Gb/s) on {}",
                                            r.max_load_ratio, r.max_load_gbps,
                                            f.link_gbps(r.worst_link),
                                            DirectedLinkName(f, r.worst_link, r.worst_a_to_b)));
  t->Row(prefix + "links used", fmt::format("{} of {} directed links", r.directed_links_used,
                                            r.directed_links));
  std::string h;
  for (const auto& b : r.histogram)
    h += fmt::format("{}{}: {}", h.empty() ? "" : ", ",
                     b.lo == b.hi ? fmt::format("{}", b.lo) : fmt::format("{}-{}", b.lo, b.hi),
                     b.links);
  t->Row(prefix + "flows/link histogram", h.empty() ? "(no traffic)" : h + " (flows: links)");
  for (auto [d, ratio] : TopLinks(f, r, top))
    t->Row(prefix + "hot link", fmt::format("{:.2f} x  {} flows  {}", ratio, r.link_flows[d],
                                            DirectedLinkName(f, LinkId(d / 2), d % 2 == 0)));
  for (const auto& p : r.problems) t->Row(prefix + "unroutable", p);
}

int RunAnalyze(const AnalyzeFlags& a) {
  auto l = LoadInput(a.in);
  if (!l.ok()) return FabricFail("analyze", l.status());
  const Fabric& f = l->fabric;
  auto pattern = ParsePattern(f, a.pattern);
  if (!pattern.ok()) return FabricFail("analyze", pattern.status());
  double route_ms = 0;
  auto t = RouteWith(f, a.engine, &route_ms, a.lfts);
  if (!t.ok()) return FabricFail("analyze", t.status());
  auto t0 = std::chrono::steady_clock::now();
  auto load = AnalyzeLoad(f, *t, *pattern, {.max_shifts = a.shifts, .keep_per_link = true});
  double analyze_ms = MsSince(t0);
  if (!load.ok()) return FabricFail("analyze", load.status());
  Locality loc = ComputeLocality(f);
  auto bis = Bisection(f, loc);
  if (!bis.ok()) return FabricFail("analyze", bis.status());
  if (a.in.output == "json") {
    Json j;
    j["file"] = a.in.file;
    j["engine"] = t->engine;
    j["switches"] = f.num_switches();
    j["cas"] = f.num_cas();
    j["links"] = f.num_links();
    j["locality"] = {{"levels", loc.num_levels}, {"levels_inferred", loc.inferred},
                     {"leaves", loc.leaves.size()}, {"pods", loc.num_pods}};
    j["load"] = LoadJson(f, *load, a.top);
    j["bisection"] = {{"method", "max-flow between CA halves ordered by pod, leaf"},
                      {"side_a", bis->side_a},
                      {"side_b", bis->side_b},
                      {"cut_gbps", bis->cut_gbps},
                      {"injection_gbps", bis->injection_gbps},
                      {"ratio", bis->ratio}};
    j["route_ms"] = route_ms;
    j["analyze_ms"] = analyze_ms;
    PrintJson(j);
    return 0;
  }
  Table tb;
  tb.Row("file", a.in.file);
  tb.Row("fabric", fmt::format("{} switches, {} cas, {} links; {} levels{}, {} leaves, {} pods",
                               f.num_switches(), f.num_cas(), f.num_links(), loc.num_levels,
                               loc.inferred ? " (inferred)" : "", loc.leaves.size(), loc.num_pods));
  tb.Row("engine", fmt::format("{} ({:.1f} ms)", t->engine, route_ms));
  tb.Row("pattern", fmt::format("{} ({:.1f} ms)", load->pattern, analyze_ms));
  LoadTable(f, *load, a.top, "", &tb);
  tb.Row("bisection", fmt::format("{:.0f} of {:.0f} Gb/s = {:.2f} ({} | {} CAs, max-flow)",
                                  bis->cut_gbps, bis->injection_gbps, bis->ratio, bis->side_a,
                                  bis->side_b));
  tb.Print();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// fail

struct FailFlags {
  InputFlags in;
  std::string engine;
  std::string link, sw;
  std::string pattern = "all-to-all";
  size_t shifts = 0;
  size_t top = 0;
  std::string lft_out;
};

int RunFail(const FailFlags& ff) {
  auto l = LoadInput(ff.in);
  if (!l.ok()) return FabricFail("fail", l.status());
  Fabric& f = l->fabric;
  auto target = !ff.link.empty() ? ResolveLink(f, ff.link) : ResolveSwitch(f, ff.sw);
  if (!target.ok()) return FabricFail("fail", target.status());
  auto pattern = ParsePattern(f, ff.pattern);
  if (!pattern.ok()) return FabricFail("fail", pattern.status());
  double route_ms = 0;
  auto t = RouteWith(f, ff.engine, &route_ms);
  if (!t.ok()) return FabricFail("fail", t.status());
  TrafficOptions topts{.max_shifts = ff.shifts};
  auto before = AnalyzeLoad(f, *t, *pattern, topts);
  if (!before.ok()) return FabricFail("fail", before.status());

  // Timed on its own (without pair counting), then counted on a copy for the report.
  Fabric counted_fabric = f;
  RoutingTables counted_tables = *t;
  auto t0 = std::chrono::steady_clock::now();
  auto timed = FailAndReroute(&f, &*t, *target, {.count_pairs = false});
  double reroute_ms = MsSince(t0);
  if (!timed.ok()) return FabricFail("fail", timed.status());
  auto r = FailAndReroute(&counted_fabric, &counted_tables, *target, {});
  if (!r.ok()) return FabricFail("fail", r.status());
  auto after = AnalyzeLoad(f, *t, *pattern, {.max_shifts = ff.shifts, .keep_per_link = ff.top > 0});
  if (!after.ok()) return FabricFail("fail", after.status());
  VerifyReport v = Verify(f, *t, {});
  if (!ff.lft_out.empty())
    if (Status s = WriteFileAtomic(ff.lft_out, WriteLftDump(f, *t)); !s.ok())
      return FabricFail("fail", s.WithContext("--lft-out"));

  if (ff.in.output == "json") {
    Json j;
    j["file"] = ff.in.file;
    j["engine"] = t->engine;
    j["target"] = target->label;
    j["kind"] = target->kind == FailureTarget::Kind::kLink ? "link" : "switch";
    j["affected_destinations"] = r->affected_lids.size();
    j["entries_changed"] = r->entries_changed;
    j["pairs_total"] = r->pairs_total;
    j["pairs_affected"] = r->pairs_affected;
    j["pairs_unreachable_after"] = r->pairs_unreachable_after;
    j["reroute_ms"] = reroute_ms;
    j["route_ms"] = route_ms;
    j["before"] = LoadJson(f, *before, 0);
    j["after"] = LoadJson(f, *after, ff.top);
    j["verify_after"] = {{"unreachable", v.unreachable}, {"loops", v.loops},
                         {"deadlock_free", v.deadlock_free}};
    if (r->balance_checked)
      j["balance_check"] = {{"incremental_max_load", r->incremental_max_load},
                            {"full_max_load", r->full_max_load},
                            {"full_reroute", r->full_reroute}};
    j["full_reroute"] = r->full_reroute;
    j["notes"] = r->notes;
    PrintJson(j);
    return 0;
  }
  Table tb;
  tb.Row("file", ff.in.file);
  tb.Row("engine", fmt::format("{} ({:.1f} ms full route)", t->engine, route_ms));
  tb.Row("failed", fmt::format("{} {}", target->kind == FailureTarget::Kind::kLink ? "link" : "switch",
                               target->label));
  tb.Row("re-routed", fmt::format("{} destination LIDs, {} LFT entries changed, in {:.2f} ms",
                                  r->affected_lids.size(), r->entries_changed, reroute_ms));
  tb.Row("pairs affected", fmt::format("{} of {} CA pairs crossed it; {} have no route now",
                                       r->pairs_affected, r->pairs_total,
                                       r->pairs_unreachable_after));
  if (r->balance_checked)
    tb.Row("balance check", fmt::format("all-to-all max load {:.2f}x incremental vs {:.2f}x full "
                                        "re-route: {}",
                                        r->incremental_max_load, r->full_max_load,
                                        r->full_reroute ? "took the full re-route"
                                                        : "kept the incremental one"));
  for (const auto& n : r->notes) tb.Row("note", n);
  tb.Row("pattern", before->pattern);
  tb.Row("max flows/link", fmt::format("{} before, {} after", before->max_flows, after->max_flows));
  tb.Row("max load", fmt::format("{:.2f} before, {:.2f} after (x link rate)", before->max_load_ratio,
                                 after->max_load_ratio));
  tb.Row("unroutable flows", fmt::format("{} before, {} after", before->unroutable, after->unroutable));
  for (auto [d, ratio] : TopLinks(f, *after, ff.top))
    tb.Row("hot link after", fmt::format("{:.2f} x  {} flows  {}", ratio, after->link_flows[d],
                                         DirectedLinkName(f, LinkId(d / 2), d % 2 == 0)));
  tb.Row("verify after", fmt::format("{} unreachable CA pairs, {} loops, {}", v.unreachable, v.loops,
                                     v.deadlock_free ? "deadlock-free" : "CREDIT LOOP"));
  tb.Print();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// export

struct ExportFlags {
  InputFlags in;
  std::string format;
  std::string out;
  std::string node_name_map;  // slurm: site names by GUID (ibnetdiscover --node-name-map format)
};

int RunExport(const ExportFlags& e) {
  auto l = LoadInput(e.in);
  if (!l.ok()) return FabricFail("export", l.status());
  const Fabric& f = l->fabric;
  StatusOr<std::string> text = Status::Internal("no format");
  if (e.format == "ibsim") text = WriteIbsimNet(f);
  else if (e.format == "ibnetdiscover") text = WriteIbnetdiscover(f);
  else if (e.format == "slurm") {
    NodeNameMap names;
    if (!e.node_name_map.empty()) {
      StatusOr<std::string> map_text = ReadFile(e.node_name_map);
      if (!map_text.ok()) return FabricFail("export", map_text.status());
      StatusOr<NodeNameMap> m = ParseNodeNameMap(*map_text, e.node_name_map);
      if (!m.ok()) return FabricFail("export", m.status());
      names = std::move(*m);
    }
    text = WriteSlurmTopology(f, {.node_names = &names});
  }
  else if (e.format == "dot") text = WriteDot(f);
  else text = WriteJson(f);
  if (!text.ok()) return FabricFail("export", text.status());
  if (e.out.empty()) {
    std::fwrite(text->data(), 1, text->size(), stdout);
    return 0;
  }
  if (Status s = WriteFileAtomic(e.out, *text); !s.ok()) return FabricFail("export", s);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Registration

const std::vector<std::string> kEngines = {"minhop", "updn", "ftree", "dor"};

void RegisterFabric(CLI::App& app, const GlobalFlags&, int* exit_code) {
  auto* fab = app.add_subcommand("fabric", "generate, load, route, analyse and fail fabrics offline");
  fab->require_subcommand(1);

  // gen
  auto* gen = fab->add_subcommand("gen", "generate a fabric: fat-tree, torus, dragonfly, brief");
  gen->require_subcommand(1);
  auto add_gen = [&](const std::string& kind, const std::string& help) {
    auto g = std::make_shared<GenFlags>();
    g->kind = kind;
    auto* c = gen->add_subcommand(kind, help);
    c->add_option("--out", g->out, "write here (default: the fabric to stdout)");
    c->add_option("--format", g->format, "ibnetdiscover (default), ibsim or json")
        ->check(CLI::IsMember({"ibnetdiscover", "ibsim", "json"}));
    c->add_option("-o,--output", g->output, "summary with --out: table or json")
        ->check(CLI::IsMember({"table", "json"}));
    c->add_option("--rate", g->rate, "link rate: NDR, HDR, ... or 4xNDR (default 4xNDR)");
    c->callback([g, exit_code] { *exit_code = RunGen(*g); });
    return std::pair{c, g};
  };
  {
    auto [c, g] = add_gen("fat-tree", "two- or three-level fat-tree of identical switches");
    c->add_option("--levels", g->levels, "2 or 3")->check(CLI::IsMember({2, 3}));
    c->add_option("--radix", g->radix, "ports per switch (default 36)");
    c->add_option("--pods", g->pods, "three levels: pods (default radix: full tree)");
    c->add_option("--leaves", g->leaves, "leaves (two levels) or leaves per pod (three)");
    c->add_option("--core-links", g->core_links, "three levels: links from each core into each pod");
    c->add_option("--oversubscription", g->oversubscription, "leaf DOWN:UP ports, e.g. 1:1, 2:1");
    c->add_option("--hcas-per-node", g->hcas_per_node, "1, or R rail-optimised HCAs per host (8)");
    c->add_option("--hosts", g->hosts, "fill only the first N hosts (default: every leaf port)");
  }
  {
    auto [c, g] = add_gen("torus", "3D torus of switches");
    c->add_option("--dims", g->dims, "XxYxZ, e.g. 8x8x8")->required();
    c->add_option("--hcas-per-switch", g->hcas_per_switch, "hosts per switch (default 1)");
  }
  {
    auto [c, g] = add_gen("dragonfly", "dragonfly of all-to-all router groups");
    c->add_option("--groups", g->groups, "groups (default routers x global links + 1)");
    c->add_option("--routers", g->routers, "routers per group (a)");
    c->add_option("--hosts-per-router", g->hosts_per_router, "hosts per router (p)");
    c->add_option("--global-links", g->global_links, "global links per router (h)");
  }
  add_gen("brief", "the brief's 2,048-GPU NDR fabric (2-level, 64-port switches, 8 rails)");

  // load
  auto in = std::make_shared<InputFlags>();
  auto* load = fab->add_subcommand("load", "load a fabric file and summarise it");
  load->add_option("FILE", in->file, "fabric file")->required();
  load->add_option("--format", in->format, "auto, ibnetdiscover, ibsim or clos-csv")
      ->check(CLI::IsMember({"auto", "ibnetdiscover", "ibsim", "clos-csv"}));
  load->add_option("-o,--output", in->output, "table or json")->check(CLI::IsMember({"table", "json"}));
  load->callback([in, exit_code] { *exit_code = RunLoad(*in); });

  // route
  auto rf = std::make_shared<RouteFlags>();
  auto* route = fab->add_subcommand("route", "compute LFTs with an engine and verify them");
  AddInputFlags(route, &rf->in, true);
  auto* re = route->add_option("--engine", rf->engine, "minhop, updn, ftree or dor")
      ->check(CLI::IsMember(kEngines));
  route->add_option("--lfts", rf->lfts, "verify OpenSM's routes from its opensm-lfts.dump")
      ->excludes(re);
  route->add_option("--lft-out", rf->lft_out, "write the LFTs as an opensm-lfts.dump-like file");
  route->callback([rf, exit_code] {
    if (rf->engine.empty() && rf->lfts.empty()) {
      fmt::print(stderr, "gpool fabric route: give --engine ENGINE or --lfts FILE\n");
      *exit_code = 2;
      return;
    }
    *exit_code = RunRoute(*rf);
  });

  // analyze
  auto af = std::make_shared<AnalyzeFlags>();
  auto* an = fab->add_subcommand("analyze", "link load of a traffic pattern over the routes, and bisection");
  AddInputFlags(an, &af->in, true);
  auto* ae = an->add_option("--engine", af->engine, "minhop, updn, ftree or dor")
      ->check(CLI::IsMember(kEngines));
  an->add_option("--lfts", af->lfts, "analyse OpenSM's routes from its opensm-lfts.dump")
      ->excludes(ae);
  an->add_option("--pattern", af->pattern, "all-to-all (default), shift, ring:all|N|CA,CA,...");
  an->add_option("--shifts", af->shifts, "shift: evaluate N shifts spread over 1..N-1 (0 = all)");
  an->add_option("--top", af->top, "hot links to list (default 5)");
  an->callback([af, exit_code] {
    if (af->engine.empty() && af->lfts.empty()) {
      fmt::print(stderr, "gpool fabric analyze: give --engine ENGINE or --lfts FILE\n");
      *exit_code = 2;
      return;
    }
    *exit_code = RunAnalyze(*af);
  });

  // fail
  auto ff = std::make_shared<FailFlags>();
  auto* fl = fab->add_subcommand("fail", "fail a link or switch, re-route incrementally, report");
  AddInputFlags(fl, &ff->in, true);
  auto* lk = fl->add_option("--link", ff->link, "SWITCH[PORT]: the cable on that port");
  auto* sw = fl->add_option("--switch", ff->sw, "switch NAME");
  lk->excludes(sw);
  fl->add_option("--engine", ff->engine, "minhop, updn, ftree or dor")
      ->required()->check(CLI::IsMember(kEngines));
  fl->add_option("--pattern", ff->pattern, "traffic for the congestion report (default all-to-all)");
  fl->add_option("--shifts", ff->shifts, "shift: evaluate N shifts (0 = all)");
  fl->add_option("--top", ff->top, "hot links to list after the re-route (default 0)");
  fl->add_option("--lft-out", ff->lft_out, "write the LFTs after the re-route (opensm-lfts.dump-like)");
  fl->callback([ff, exit_code] {
    if (ff->link.empty() && ff->sw.empty()) {
      fmt::print(stderr, "gpool fabric fail: give --link SWITCH[PORT] or --switch NAME\n");
      *exit_code = 2;
      return;
    }
    *exit_code = RunFail(*ff);
  });

  // export
  auto ef = std::make_shared<ExportFlags>();
  auto* ex = fab->add_subcommand("export", "write the fabric for another tool");
  AddInputFlags(ex, &ef->in, false);
  ex->add_option("--format", ef->format, "ibsim, ibnetdiscover, slurm, dot or json")
      ->required()->check(CLI::IsMember({"ibsim", "ibnetdiscover", "slurm", "dot", "json"}));
  ex->add_option("--out", ef->out, "write here (default stdout)");
  ex->add_option("--node-name-map", ef->node_name_map,
                 "slurm: host and switch names by node GUID (ibnetdiscover's --node-name-map file)");
  ex->callback([ef, exit_code] { *exit_code = RunExport(*ef); });

  // discover, port (live fabric through libibnetdisc/libibmad): fabric_ib_cmd.cc
  RegisterFabricIbCommands(fab, exit_code);
  // show, path, health: the controller's live fabric (fabric_ctl_cmd.cc)
  RegisterFabricClient(fab, exit_code);
  // watch: OpenSM events -> targeted probes -> controller (fabric_watch_cmd.cc)
  RegisterFabricWatch(fab, exit_code);
}

GPOOL_REGISTER_COMMAND(RegisterFabric);

}  // namespace
}  // namespace gpool::cli
