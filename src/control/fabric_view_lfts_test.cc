// FabricView on OpenSM's routes (FabricViewOptions::lfts_path): paths, affected jobs, domains
// and health follow the dump, which is re-read when it changes; a bad dump keeps the old routes.
// The "OpenSM" dumps here are gpool's minhop tables with chosen entries changed (written by
// fabric::WriteLftDump, the format OpenSM writes), so that OpenSM's routes provably differ from
// the engine's; tests/fabric_ctl/opensm_routes_test.sh runs the real OpenSM under ibsim.
#include <cstdlib>
#include <filesystem>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "common/file.h"
#include "control/fabric_source.h"
#include "control/fabric_view.h"
#include "fabric/failure.h"
#include "fabric/lft_dump.h"
#include "fabric/routing.h"

namespace gpool::control {
namespace {

using ::testing::HasSubstr;
using fabric::NodeId;

// 2-level fat-tree of 8-port switches: 8 leaves (hosts on ports 1-4, spines on 5-8), 4 spines.
constexpr char kSmallLfts[] = "gen:fat-tree:levels=2,radix=8";

struct LftsFixture {
  ManualClock clock{1'000'000'000};
  std::string dir;
  std::string dump;
  fabric::Fabric f;
  fabric::RoutingTables minhop;
  std::unique_ptr<FabricView> view;

  LftsFixture() : f(*LoadFabricSource(kSmallLfts)), minhop(*fabric::Route(f, {})) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpool-lfts-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
    dump = dir + "/opensm-lfts.dump";
  }
  ~LftsFixture() { std::filesystem::remove_all(dir); }

  // OpenSM rewrites the dump (a rename gives it a new inode, so even a same-size rewrite within
  // one mtime tick is seen).
  void Write(const fabric::RoutingTables& t) { ASSERT_TRUE(WriteFileAtomic(dump, fabric::WriteLftDump(f, t)).ok()); }
  void WriteText(const std::string& text) { ASSERT_TRUE(WriteFileAtomic(dump, text).ok()); }

  Status Open() {
    FabricViewOptions o;
    o.source = kSmallLfts;
    o.lfts_path = dump;
    o.clock = &clock;
    auto v = FabricView::Open(o);
    if (!v.ok()) return v.status();
    view = std::move(*v);
    return Status::Ok();
  }

  NodeId Node(const std::string& name) { return *f.FindByName(name); }
  fabric::Lid LidOf(const std::string& ca) {
    NodeId n = Node(ca);
    return f.lid_of_port(f.port_of(n, 1));
  }
  // The path as "sw[port]" hops the view reports, from the a end of each link.
  // host0001 (leaf-0) -> host0005 (leaf-1): the path every test follows.
  static v1::FabricPathRequest Host1ToHost5() {
    v1::FabricPathRequest req;
    req.set_from("host0001");
    req.set_to("host0005");
    return req;
  }
  static std::vector<std::string> Hops(const v1::FabricPathResponse& r) {
    std::vector<std::string> out;
    for (const auto& l : r.links()) out.push_back(fmt::format("{}[{}]", l.a(), l.a_port()));
    return out;
  }
};

// host0001 is on leaf-0, host0005 on leaf-1. minhop sends host0001 -> host0005 out of leaf-0
// port P and host0005 -> host0001 down into leaf-0 from spine S; "OpenSM" uses another uplink
// U of leaf-0 that neither direction of minhop's routes touches.
struct Detour {
  uint8_t minhop_port = 0;
  uint8_t opensm_port = 0;
};
Detour MakeDetour(LftsFixture& x, fabric::RoutingTables* opensm) {
  NodeId leaf0 = x.Node("leaf-0");
  Detour d;
  d.minhop_port = x.minhop.out_port(leaf0, x.LidOf("host0005 mlx5_0"));
  // The spine minhop's reverse route comes down from.
  auto back = fabric::TracePath(x.f, x.minhop, x.f.port_of(x.Node("host0005 mlx5_0"), 1),
                                x.LidOf("host0001 mlx5_0"));
  EXPECT_TRUE(back.ok());
  std::set<uint8_t> used{d.minhop_port};
  for (fabric::LinkId l : *back) {
    const auto& k = x.f.link(l);
    for (fabric::PortId p : {k.a, k.b}) {
      if (x.f.port(p).node == leaf0) used.insert(static_cast<uint8_t>(x.f.port(p).num));
    }
  }
  for (uint8_t p = 5; p <= 8; ++p) {
    if (!used.count(p)) {
      d.opensm_port = p;
      break;
    }
  }
  EXPECT_NE(d.opensm_port, 0);
  *opensm = x.minhop;
  opensm->engine = "opensm";
  opensm->set_out_port(leaf0, x.LidOf("host0005 mlx5_0"), d.opensm_port);
  return d;
}

TEST(FabricViewLftsTest, PathsAndAffectedJobsFollowOpenSmsRoutes) {
  LftsFixture x;
  fabric::RoutingTables opensm(x.f);
  Detour d = MakeDetour(x, &opensm);
  ASSERT_NE(d.minhop_port, d.opensm_port);
  x.Write(opensm);
  ASSERT_TRUE(x.Open().ok());

  v1::FabricPathRequest req = LftsFixture::Host1ToHost5();
  auto p = x.view->Path(req);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto hops = LftsFixture::Hops(*p);
  ASSERT_EQ(hops.size(), 4u);
  EXPECT_EQ(hops[1], fmt::format("leaf-0[{}]", d.opensm_port));  // OpenSM's uplink, not minhop's
  EXPECT_EQ(x.view->Get({}, {}).engine(), "opensm");
  auto h = x.view->Health({});
  EXPECT_TRUE(h.healthy());
  EXPECT_EQ(h.routes(), "opensm:" + x.dump);
  EXPECT_EQ(h.routes_error(), "");
  EXPECT_GT(h.routes_loaded_ms(), 0);
  EXPECT_EQ(h.unreachable_pairs(), 0);

  // Two jobs: a on leaf-0/leaf-1 (the detoured pair), b on leaf-2/leaf-3. The load follows
  // OpenSM's route.
  std::vector<JobNodes> jobs{{.id = "a", .tenant = "t", .nodes = {"host0001", "host0005"}},
                             {.id = "b", .tenant = "t", .nodes = {"host0009", "host0013"}}};
  x.view->TrackJobs(jobs);
  v1::GetFabricRequest all;
  all.set_all_links(true);
  auto g = x.view->Get(all, jobs);
  std::map<std::string, int> flows;
  for (const auto& l : g.links()) flows[fmt::format("{}[{}]", l.a(), l.a_port())] += l.flows();
  // One flow (host0001 -> host0005) on the uplink that minhop's routes leave unused.
  EXPECT_EQ(flows[fmt::format("leaf-0[{}]", d.opensm_port)], 1);

  // The uplink only OpenSM's route takes fails: job a is affected (minhop's routes would not
  // have put it there), b is not. No re-route of our own: the switches keep OpenSM's LFTs, so
  // the pair is broken until OpenSM rewrites the dump, and Health says so.
  const uint64_t gen = x.view->generation();
  ASSERT_TRUE(x.view->ObserveLink(fmt::format("leaf-0[{}]", d.opensm_port), false).ok());
  h = x.view->Health(jobs);
  EXPECT_FALSE(h.healthy());
  ASSERT_EQ(h.affected_jobs_size(), 1);
  EXPECT_EQ(h.affected_jobs(0).id(), "a");
  EXPECT_GT(h.unreachable_pairs(), 0);
  ASSERT_GT(h.route_problems_size(), 0);
  EXPECT_THAT(h.route_problems(0), HasSubstr("no route from switch"));
  auto broken = x.view->Path(req);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(broken.status().message(), HasSubstr("down"));

  // OpenSM's heavy sweep re-routes around it and rewrites the dump: the next tick loads it.
  fabric::Fabric without = x.f;
  auto dead = fabric::ResolveLink(without, fmt::format("leaf-0[{}]", d.opensm_port));
  ASSERT_TRUE(dead.ok());
  ASSERT_TRUE(without.SetLinkUp(dead->link, false).ok());
  auto rerouted = fabric::Route(without, {});
  ASSERT_TRUE(rerouted.ok());
  x.Write(*rerouted);
  x.view->Tick();
  EXPECT_GT(x.view->generation(), gen + 1);
  p = x.view->Path(req);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  uint8_t now_port = rerouted->out_port(x.Node("leaf-0"), x.LidOf("host0005 mlx5_0"));
  EXPECT_NE(now_port, d.opensm_port);
  EXPECT_EQ(LftsFixture::Hops(*p)[1], fmt::format("leaf-0[{}]", now_port));
  h = x.view->Health(jobs);
  EXPECT_EQ(h.unreachable_pairs(), 0);
  EXPECT_EQ(h.route_problems_size(), 0);
  // Still affected: its traffic was on the dead link when it failed.
  ASSERT_EQ(h.affected_jobs_size(), 1);
  EXPECT_EQ(h.affected_jobs(0).id(), "a");
}

TEST(FabricViewLftsTest, BadDumpKeepsTheOldRoutesAndSaysWhere) {
  LftsFixture x;
  fabric::RoutingTables opensm(x.f);
  Detour d = MakeDetour(x, &opensm);
  x.Write(opensm);
  ASSERT_TRUE(x.Open().ok());
  const uint64_t gen = x.view->generation();

  std::string text = fabric::WriteLftDump(x.f, opensm);
  // Line 3 of the first block gets a port the switch does not have.
  size_t l2 = text.find('\n', text.find('\n') + 1);
  size_t l3 = text.find('\n', l2 + 1);
  text.replace(l2 + 1, l3 - l2 - 1, "0x0002 099 # broken");
  x.WriteText(text);
  x.view->Tick();
  auto h = x.view->Health({});
  EXPECT_THAT(h.routes_error(), HasSubstr(x.dump + ":3:"));
  EXPECT_THAT(h.routes_error(), HasSubstr("keeping the routes loaded before"));
  EXPECT_EQ(h.routes(), "opensm:" + x.dump);
  EXPECT_EQ(x.view->generation(), gen);
  v1::FabricPathRequest req = LftsFixture::Host1ToHost5();
  auto p = x.view->Path(req);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(LftsFixture::Hops(*p)[1], fmt::format("leaf-0[{}]", d.opensm_port));

  // The next good version is taken.
  x.Write(x.minhop);
  x.view->Tick();
  h = x.view->Health({});
  EXPECT_EQ(h.routes_error(), "");
  EXPECT_EQ(x.view->generation(), gen + 1);
  p = x.view->Path(req);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(LftsFixture::Hops(*p)[1], fmt::format("leaf-0[{}]", d.minhop_port));
}

TEST(FabricViewLftsTest, NoDumpYetUsesTheEngineAndSaysSoUntilItAppears) {
  LftsFixture x;
  ASSERT_TRUE(x.Open().ok());
  auto h = x.view->Health({});
  EXPECT_EQ(h.routes(), "minhop");
  EXPECT_THAT(h.routes_error(), HasSubstr("not there yet"));
  fabric::RoutingTables opensm(x.f);
  Detour d = MakeDetour(x, &opensm);
  x.Write(opensm);
  h = x.view->Health({});
  EXPECT_EQ(h.routes(), "opensm:" + x.dump);
  EXPECT_EQ(h.routes_error(), "");
  v1::FabricPathRequest req = LftsFixture::Host1ToHost5();
  auto p = x.view->Path(req);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(LftsFixture::Hops(*p)[1], fmt::format("leaf-0[{}]", d.opensm_port));
}

TEST(FabricViewLftsTest, BadDumpAtStartIsAnErrorNamingTheLine) {
  LftsFixture x;
  x.WriteText("Unicast lids [0-3] of switch Lid 1 guid 0x0000000000000bad ('x'):\n");
  Status s = x.Open();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("--fabric-lfts"));
  EXPECT_THAT(s.message(), HasSubstr(x.dump + ":1:"));
}

TEST(FabricViewLftsTest, MissingRoutesAreReportedNotHidden) {
  LftsFixture x;
  fabric::RoutingTables opensm = x.minhop;
  opensm.set_out_port(x.Node("leaf-0"), x.LidOf("host0005 mlx5_0"), fabric::kNoRoute);
  x.Write(opensm);
  ASSERT_TRUE(x.Open().ok());
  auto h = x.view->Health({});
  EXPECT_FALSE(h.healthy());
  // Every CA of leaf-0 (4) lacks a route to host0005.
  EXPECT_EQ(h.unreachable_pairs(), 4);
  ASSERT_GT(h.route_problems_size(), 0);
  v1::FabricPathRequest req = LftsFixture::Host1ToHost5();
  EXPECT_FALSE(x.view->Path(req).ok());
}

TEST(FabricViewLftsTest, LeafBandwidthCountsTheUplinksOpenSmsRoutesUse) {
  LftsFixture x;
  // OpenSM sends everything leaving leaf-0 out of port 5.
  fabric::RoutingTables opensm = x.minhop;
  NodeId leaf0 = x.Node("leaf-0");
  for (NodeId ca : x.f.cas()) {
    fabric::PortId p = x.f.port_of(ca, 1);
    if (x.f.link_peer(x.f.port(p).link, ca) != leaf0) opensm.set_out_port(leaf0, x.f.lid_of_port(p), 5);
  }
  x.Write(opensm);
  ASSERT_TRUE(x.Open().ok());
  sched::ClusterSpec spec;
  spec.gpu_models = {"H100"};
  for (const char* n : {"host0001", "host0005"}) {
    sched::NodeSpec ns;
    ns.name = n;
    ns.gpus = 8;
    ns.gpu_model = 0;
    spec.nodes.push_back(ns);
  }
  ASSERT_TRUE(x.view->BuildDomains(&spec).ok());
  const auto& leaf0_dom = spec.domains[spec.nodes[0].leaf.value()];
  const auto& leaf1_dom = spec.domains[spec.nodes[1].leaf.value()];
  EXPECT_DOUBLE_EQ(leaf0_dom.nominal_bandwidth_gbps, 1600);
  EXPECT_DOUBLE_EQ(leaf0_dom.bandwidth_gbps, 400);  // one uplink of 4 carries its routes
  EXPECT_DOUBLE_EQ(leaf1_dom.bandwidth_gbps, 1600);
  auto h = x.view->Health({});
  bool degraded = false;
  for (const auto& dd : h.degraded()) degraded |= dd.name() == "leaf-0";
  EXPECT_TRUE(degraded);
}

}  // namespace
}  // namespace gpool::control
