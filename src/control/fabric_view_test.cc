#include "control/fabric_view.h"

#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "control/fabric_source.h"
#include "fabric/failure.h"
#include "sched/cluster.h"

namespace gpool::control {
namespace {

using ::testing::HasSubstr;

// 2-level fat-tree of 8-port switches: 8 leaves (4 hosts, 4 uplinks each) and 4 spines.
constexpr char kSmall[] = "gen:fat-tree:levels=2,radix=8";

struct Fixture {
  ManualClock clock{1'000'000'000};
  std::unique_ptr<FabricView> view;

  explicit Fixture(const std::string& source = kSmall) {
    FabricViewOptions o;
    o.source = source;
    o.hold_down = std::chrono::milliseconds(5000);
    o.half_life = std::chrono::milliseconds(10000);
    o.clock = &clock;
    auto v = FabricView::Open(o);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    view = std::move(*v);
  }

  sched::ClusterSpec Spec(const std::vector<std::string>& names) {
    sched::ClusterSpec spec;
    spec.gpu_models = {"H100"};
    for (const auto& n : names) {
      sched::NodeSpec ns;
      ns.name = n;
      ns.gpus = 8;
      ns.gpu_model = 0;
      spec.nodes.push_back(ns);
    }
    EXPECT_TRUE(view->BuildDomains(&spec).ok());
    return spec;
  }
  std::string LeafOf(const sched::ClusterSpec& s, size_t i) { return s.domains[s.nodes[i].leaf.value()].name; }
  const sched::DomainSpec& Leaf(const sched::ClusterSpec& s, size_t i) { return s.domains[s.nodes[i].leaf.value()]; }
  std::string FabricOf(const sched::ClusterSpec& s, size_t i) {
    const auto& pod = s.domains[s.nodes[i].leaf.value()].parent;
    return s.domains[s.domains[pod.value()].parent.value()].name;
  }
  void Advance(int ms) { clock.AdvanceNanos(static_cast<int64_t>(ms) * 1'000'000); }
};

TEST(FabricViewTest, DomainsComeFromTheFabric) {
  Fixture f;
  std::vector<std::string> hosts = f.view->HostNames();
  ASSERT_EQ(hosts.size(), 32u);
  EXPECT_EQ(hosts[0], "host0001");
  auto spec = f.Spec({hosts[0], hosts[3], hosts[4], "stranger"});
  // hosts 1-4 share leaf-0; host 5 is on leaf-1.
  EXPECT_EQ(f.LeafOf(spec, 0), "leaf-0");
  EXPECT_EQ(f.LeafOf(spec, 1), "leaf-0");
  EXPECT_EQ(f.LeafOf(spec, 2), "leaf-1");
  EXPECT_EQ(f.FabricOf(spec, 0), "fabric");
  // A node that is not a fabric host never shares a fabric domain with one.
  EXPECT_EQ(f.LeafOf(spec, 3), "unplaced-leaf");
  EXPECT_EQ(f.FabricOf(spec, 3), "unplaced");
  // 4 NDR uplinks per leaf: 4 x 400 Gb/s, not degraded.
  EXPECT_DOUBLE_EQ(f.Leaf(spec, 0).nominal_bandwidth_gbps, 1600);
  EXPECT_DOUBLE_EQ(f.Leaf(spec, 0).bandwidth_gbps, 1600);
  auto st = sched::ClusterState::Create(spec);
  EXPECT_TRUE(st.ok()) << st.status().ToString();
}

TEST(FabricViewTest, RailOptimisedHostsGroupByTheirLeaves) {
  Fixture f("gen:fat-tree:levels=2,radix=8,hcas-per-node=4");
  std::vector<std::string> hosts = f.view->HostNames();
  ASSERT_FALSE(hosts.empty());
  auto spec = f.Spec({hosts[0], hosts[1], hosts.back()});
  EXPECT_EQ(f.LeafOf(spec, 0), f.LeafOf(spec, 1));
  EXPECT_THAT(f.LeafOf(spec, 0), HasSubstr("+3"));  // 4 rail leaves
  EXPECT_NE(f.LeafOf(spec, 0), f.LeafOf(spec, 2));
  EXPECT_EQ(f.view->HostPortGuids(hosts[0]).size(), 4u);
}

TEST(FabricViewTest, DeadUplinkDegradesTheLeafAndComesBackAfterHoldDown) {
  Fixture f;
  auto hosts = f.view->HostNames();
  // leaf-0's port 5 is its first uplink (ports 1-4 go down to hosts).
  ASSERT_TRUE(f.view->ObserveLink("leaf-0[5]", false).ok());
  EXPECT_EQ(f.view->generation(), 1u);
  auto spec = f.Spec({hosts[0], hosts[4]});
  EXPECT_DOUBLE_EQ(f.Leaf(spec, 0).bandwidth_gbps, 1200);
  EXPECT_DOUBLE_EQ(f.Leaf(spec, 0).nominal_bandwidth_gbps, 1600);
  EXPECT_DOUBLE_EQ(f.Leaf(spec, 1).bandwidth_gbps, 1600);
  auto h = f.view->Health({});
  EXPECT_FALSE(h.healthy());
  ASSERT_EQ(h.dead_links_size(), 1);
  EXPECT_EQ(h.dead_links(0).a(), "leaf-0");
  EXPECT_EQ(h.dead_links(0).a_port(), 5);
  EXPECT_EQ(h.dead_links(0).state(), "down");
  bool leaf0 = false;
  for (const auto& d : h.degraded()) leaf0 |= d.name() == "leaf-0" && d.level() == "leaf";
  EXPECT_TRUE(leaf0);

  // Back up: held until it has stayed up for the hold-down time.
  ASSERT_TRUE(f.view->ObserveLink("leaf-0[5]", true).ok());
  h = f.view->Health({});
  ASSERT_EQ(h.dead_links_size(), 1);
  EXPECT_EQ(h.dead_links(0).state(), "held");
  f.Advance(5001);
  h = f.view->Health({});
  EXPECT_TRUE(h.healthy());
  EXPECT_EQ(f.view->generation(), 2u);
  spec = f.Spec({hosts[0]});
  EXPECT_DOUBLE_EQ(f.Leaf(spec, 0).bandwidth_gbps, 1600);
}

TEST(FabricViewTest, FlappingLinkIsDampedNotThrashed) {
  Fixture f;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(f.view->ObserveLink("leaf-1[6]", false).ok());
    f.Advance(100);
    ASSERT_TRUE(f.view->ObserveLink("leaf-1[6]", true).ok());
    f.Advance(100);
  }
  // Ten flaps, one effective change: down once, and it stayed down.
  EXPECT_EQ(f.view->generation(), 1u);
  // Stable past the hold-down, but the penalty (~10, suppress at 3) keeps it down.
  f.Advance(6000);
  auto h = f.view->Health({});
  ASSERT_EQ(h.dead_links_size(), 1);
  EXPECT_EQ(h.dead_links(0).state(), "held");
  EXPECT_EQ(f.view->generation(), 1u);
  // Penalty halves every 10 s: below 1 after ~34 s more.
  f.Advance(40000);
  h = f.view->Health({});
  EXPECT_TRUE(h.healthy());
  EXPECT_EQ(f.view->generation(), 2u);
}

TEST(FabricViewTest, JobsWhoseRoutesCrossedADeadLinkAreReported) {
  Fixture f;
  auto hosts = f.view->HostNames();
  std::vector<JobNodes> jobs = {{.id = "j1", .tenant = "a", .nodes = {hosts[0], hosts[8]}},
                                {.id = "j2", .tenant = "b", .nodes = {hosts[16], hosts[20]}}};
  f.view->TrackJobs(jobs);
  v1::FabricPathRequest pr;
  pr.set_from(hosts[0]);
  pr.set_to(hosts[8]);
  auto path = f.view->Path(pr);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  ASSERT_EQ(path->links_size(), 4);  // host - leaf - spine - leaf - host
  EXPECT_EQ(path->switches(), 3);
  EXPECT_THAT(path->links(0).a(), HasSubstr(hosts[0]));
  const v1::FabricLink up = path->links(1);  // leaf-0[p] -> spine; a copy: `path` is reassigned below
  ASSERT_EQ(up.a(), "leaf-0");
  // The load view sees both jobs' flows.
  auto g = f.view->Get({}, jobs);
  bool seen = false;
  for (const auto& l : g.links()) {
    if (l.a() == up.a() && l.a_port() == up.a_port()) {
      seen = true;
      EXPECT_GE(l.flows(), 1);
      EXPECT_THAT(std::vector<std::string>(l.jobs().begin(), l.jobs().end()), ::testing::Contains("j1"));
    }
  }
  EXPECT_TRUE(seen);

  ASSERT_TRUE(f.view->ObserveLink(fmt::format("leaf-0[{}]", up.a_port()), false).ok());
  auto h = f.view->Health(jobs);
  ASSERT_EQ(h.affected_jobs_size(), 1);
  EXPECT_EQ(h.affected_jobs(0).id(), "j1");
  EXPECT_EQ(h.affected_jobs(0).tenant(), "a");
  EXPECT_THAT(h.affected_jobs(0).links(0), HasSubstr(fmt::format("leaf-0[{}]", up.a_port())));
  // Re-routed: the path no longer uses the dead link.
  path = f.view->Path(pr);
  ASSERT_TRUE(path.ok());
  for (const auto& l : path->links()) EXPECT_FALSE(l.a() == "leaf-0" && l.a_port() == up.a_port());

  ASSERT_TRUE(f.view->ObserveLink(fmt::format("leaf-0[{}]", up.a_port()), true).ok());
  f.Advance(5001);
  h = f.view->Health(jobs);
  EXPECT_EQ(h.affected_jobs_size(), 0);
  EXPECT_TRUE(h.healthy());
}

TEST(FabricViewTest, CutOffLeafBecomesItsOwnFabricAndDeadHostLinkMakesTheNodeUnhealthy) {
  Fixture f;
  auto hosts = f.view->HostNames();
  for (int p = 5; p <= 8; ++p) ASSERT_TRUE(f.view->ObserveLink(fmt::format("leaf-2[{}]", p), false).ok());
  ASSERT_TRUE(f.view->ObserveLink("leaf-3[1]", false).ok());  // host0013's only cable
  auto spec = f.Spec({hosts[0], hosts[8], hosts[9], hosts[12], hosts[13]});
  EXPECT_EQ(f.FabricOf(spec, 0), "fabric");
  EXPECT_THAT(f.FabricOf(spec, 1), HasSubstr("fabric-cut"));
  EXPECT_EQ(f.FabricOf(spec, 1), f.FabricOf(spec, 2));
  EXPECT_DOUBLE_EQ(f.Leaf(spec, 1).bandwidth_gbps, 0);
  EXPECT_EQ(spec.nodes[3].health, sched::Health::kUnhealthy);
  EXPECT_EQ(spec.nodes[4].health, sched::Health::kHealthy);
  auto h = f.view->Health({});
  EXPECT_THAT(std::vector<std::string>(h.unreachable_hosts().begin(), h.unreachable_hosts().end()),
              ::testing::ElementsAre(hosts[12]));
  auto st = sched::ClusterState::Create(spec);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->domains_at(sched::Level::kFabric).size(), 2u);
}

TEST(FabricViewTest, SwitchDownAndDiscoveredFabric) {
  Fixture f;
  ASSERT_TRUE(f.view->ObserveSwitch("spine-1", false).ok());
  auto h = f.view->Health({});
  ASSERT_EQ(h.dead_switches_size(), 1);
  EXPECT_EQ(h.dead_switches(0), "spine-1");
  // A sweep that finds everything: the switch and its links come back after the hold-down.
  auto live = LoadFabricSource(kSmall);
  ASSERT_TRUE(live.ok());
  ASSERT_TRUE(f.view->ObserveDiscovered(*live).ok());
  f.Advance(5001);
  f.view->Tick();
  EXPECT_TRUE(f.view->Health({}).healthy());
  // A sweep where one cable is missing.
  auto l = fabric::ResolveLink(*live, "leaf-4[7]");
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(live->SetLinkUp(l->link, false).ok());
  // One sweep without it is not enough (a partial discovery); two in a row are.
  ASSERT_TRUE(f.view->ObserveDiscovered(*live).ok());
  EXPECT_TRUE(f.view->Health({}).healthy());
  ASSERT_TRUE(f.view->ObserveDiscovered(*live).ok());
  h = f.view->Health({});
  ASSERT_EQ(h.dead_links_size(), 1);
  EXPECT_EQ(h.dead_links(0).a(), "leaf-4");
  EXPECT_EQ(h.dead_links(0).a_port(), 7);
}

TEST(FabricViewTest, ErrorsNameWhatIsWrong) {
  Fixture f;
  Status s = f.view->ObserveLink("leaf-99[1]", false);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("leaf-99"));
  v1::FabricPathRequest pr;
  pr.set_from("host0001");
  pr.set_to("nosuch");
  auto p = f.view->Path(pr);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("to: 'nosuch'"));
  auto bad = LoadFabricSource("gen:fat-tree:radix=8,colour=blue");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("colour"));
  bad = LoadFabricSource("gen:torus");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("torus"));
  bad = LoadFabricSource("/nonexistent/fabric.topo");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("/nonexistent/fabric.topo"));
}

}  // namespace
}  // namespace gpool::control
