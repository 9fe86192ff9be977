// Remote attachment on the fabric: a task whose GPUs are another host's (through its GPU server)
// puts flows between the two hosts, which load links and make the job "affected" when one dies.
// Expected links come from the route model itself (FabricView::Path between the two hosts), not
// from the code under test.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "control/fabric_api.h"
#include "control/fabric_monitor.h"
#include "control/fabric_view.h"

namespace gpool::control {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// 2-level fat-tree of 8-port switches: 8 leaves (4 hosts, ports 1-4; uplinks on ports 5-8) and 4
// spines; host0001-0004 hang off leaf-0, host0009 off leaf-2.
constexpr char kRemoteFabric[] = "gen:fat-tree:levels=2,radix=8";

struct RemoteFixture {
  ManualClock clock{1'000'000'000};
  std::unique_ptr<FabricView> view;
  std::vector<std::string> hosts;

  RemoteFixture() {
    FabricViewOptions o;
    o.source = kRemoteFabric;
    o.clock = &clock;
    auto v = FabricView::Open(o);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    view = std::move(*v);
    hosts = view->HostNames();
  }

  // Undirected key of a link as the API prints it.
  static std::string Key(const v1::FabricLink& l) {
    std::string a = fmt::format("{}[{}]", l.a(), l.a_port()), b = fmt::format("{}[{}]", l.b(), l.b_port());
    return a < b ? a + " - " + b : b + " - " + a;
  }
  // The route model's path from one host to another (rail 0), as link keys.
  std::vector<std::string> PathKeys(const std::string& from, const std::string& to) {
    v1::FabricPathRequest pr;
    pr.set_from(from);
    pr.set_to(to);
    auto p = view->Path(pr);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    std::vector<std::string> out;
    if (p.ok()) {
      for (const auto& l : p->links()) out.push_back(Key(l));
    }
    return out;
  }
  // Link key -> (flows, jobs) of the loaded links in Get.
  std::map<std::string, std::pair<int, std::vector<std::string>>> Loads(const std::vector<JobNodes>& jobs) {
    std::map<std::string, std::pair<int, std::vector<std::string>>> out;
    const v1::GetFabricResponse g = view->Get({}, jobs);
    for (const auto& l : g.links()) {
      out[Key(l)] = {l.flows(), std::vector<std::string>(l.jobs().begin(), l.jobs().end())};
    }
    return out;
  }
};

bool IsSwitchLink(const std::string& key) { return key.find("host") == std::string::npos; }

TEST(FabricViewRemoteTest, RemoteGpusLoadThePathBetweenHostAndLenderBothWays) {
  RemoteFixture f;
  const std::string a = f.hosts[0], b = f.hosts[8];  // leaf-0 and leaf-2
  std::vector<JobNodes> jobs = {
      {.id = "r", .tenant = "t", .nodes = {a}, .remote = {{.host = a, .lender = b}}}};
  std::vector<std::string> there = f.PathKeys(a, b), back = f.PathKeys(b, a);
  ASSERT_EQ(there.size(), 4u);  // host - leaf-0 - spine - leaf-2 - host
  ASSERT_EQ(back.size(), 4u);
  std::map<std::string, int> want;  // each direction is one flow on each link of its path
  for (const auto& k : there) ++want[k];
  for (const auto& k : back) ++want[k];

  auto loads = f.Loads(jobs);
  for (const auto& [k, n] : want) {
    ASSERT_TRUE(loads.count(k)) << k << " carries no flow";
    EXPECT_EQ(loads[k].first, n) << k;
    EXPECT_THAT(loads[k].second, ElementsAre("r")) << k;
  }
  // Nothing else is loaded: the flows are exactly the two paths.
  for (const auto& [k, v] : loads) EXPECT_TRUE(want.count(k)) << k << " is loaded but on no path";
  // Among them, leaf-0's uplink on the way to leaf-2 (the A/B uplink path).
  EXPECT_THAT(there[1], HasSubstr("leaf-0["));
  EXPECT_TRUE(IsSwitchLink(there[1]));
}

TEST(FabricViewRemoteTest, LocalGpusOnOneNodeAddNoFlowAcrossTheFabric) {
  RemoteFixture f;
  // Unchanged behaviour: a job on one host with its own GPUs depends on its HCA link only; a
  // remote entry naming the task's own node (a kRemote task served by its own GPU server) is
  // the same.
  std::vector<JobNodes> jobs = {
      {.id = "l", .tenant = "t", .nodes = {f.hosts[1]}, .remote = {}},
      {.id = "s", .tenant = "t", .nodes = {f.hosts[2]}, .remote = {{.host = f.hosts[2], .lender = f.hosts[2]}}}};
  auto loads = f.Loads(jobs);
  ASSERT_EQ(loads.size(), 2u);
  for (const auto& [k, v] : loads) {
    EXPECT_FALSE(IsSwitchLink(k)) << k;
    EXPECT_EQ(v.first, 1) << k;
    ASSERT_EQ(v.second.size(), 1u);
    EXPECT_THAT(k, HasSubstr(v.second[0] == "l" ? f.hosts[1] : f.hosts[2]));
  }
}

TEST(FabricViewRemoteTest, DeadUplinkOnARemoteFlowReportsTheJob) {
  RemoteFixture f;
  const std::string a = f.hosts[0], b = f.hosts[8];
  std::vector<JobNodes> jobs = {
      {.id = "r", .tenant = "t", .nodes = {a}, .remote = {{.host = a, .lender = b}}},
      // A gang inside leaf-0 and a local job on the same host: no uplink on their routes.
      {.id = "g", .tenant = "u", .nodes = {f.hosts[1], f.hosts[2]}, .remote = {}},
      {.id = "l", .tenant = "u", .nodes = {a}, .remote = {}}};
  f.view->TrackJobs(jobs);
  v1::FabricPathRequest pr;
  pr.set_from(a);
  pr.set_to(b);
  auto path = f.view->Path(pr);
  ASSERT_TRUE(path.ok()) << path.status().ToString();
  const v1::FabricLink up = path->links(1);
  ASSERT_EQ(up.a(), "leaf-0");
  const std::string ref = fmt::format("leaf-0[{}]", up.a_port());

  ASSERT_TRUE(f.view->ObserveLink(ref, false).ok());
  auto h = f.view->Health(jobs);
  ASSERT_EQ(h.affected_jobs_size(), 1) << h.DebugString();
  EXPECT_EQ(h.affected_jobs(0).id(), "r");
  EXPECT_EQ(h.affected_jobs(0).tenant(), "t");
  EXPECT_THAT(std::vector<std::string>(h.affected_jobs(0).links().begin(), h.affected_jobs(0).links().end()),
              Contains(HasSubstr(ref)));
  // The flows move to the surviving routes: the dead link carries none of them now.
  const v1::GetFabricResponse g = f.view->Get({}, jobs);
  for (const auto& l : g.links()) {
    if (l.a() == "leaf-0" && l.a_port() == up.a_port()) {
      EXPECT_EQ(l.flows(), 0);
    }
  }
}

TEST(FabricViewRemoteTest, JobRecordsGiveOneFlowPerHostAndLender) {
  v1::Job j;
  j.set_id("j00000007");
  j.set_tenant("t");
  v1::Allocation* t0 = j.add_allocations();
  t0->set_task(0);
  t0->set_node("host0001");
  t0->set_gpu_mask(0x3);
  t0->set_via_server(true);
  auto* r = t0->add_remote();
  r->set_node("host0009");
  r->set_gpu_mask(0x1);
  r = t0->add_remote();
  r->set_node("host0013");
  r->set_gpu_mask(0x6);
  r = t0->add_remote();
  r->set_node("host0001");  // its own node: no fabric flow
  r->set_gpu_mask(0x10);
  v1::Allocation* t1 = j.add_allocations();
  t1->set_task(1);
  t1->set_node("host0001");
  r = t1->add_remote();
  r->set_node("host0009");  // the same pair as task 0's: one flow pair
  r->set_gpu_mask(0x2);
  JobNodes n = JobNodesOf(j);
  EXPECT_EQ(n.id, "j00000007");
  EXPECT_EQ(n.tenant, "t");
  EXPECT_THAT(n.nodes, ElementsAre("host0001", "host0001"));
  EXPECT_THAT(n.remote, ElementsAre(RemoteFlow{"host0001", "host0009"}, RemoteFlow{"host0001", "host0013"}));

  v1::Job local;
  local.set_id("j00000008");
  local.add_allocations()->set_node("host0002");
  EXPECT_TRUE(JobNodesOf(local).remote.empty());
}

TEST(FabricViewRemoteTest, LendingNodesJoinTheTenantsPartition) {
  std::vector<JobNodes> jobs = {
      {.id = "r", .tenant = "t", .nodes = {"host0001"}, .remote = {{.host = "host0001", .lender = "host0009"}}},
      {.id = "g", .tenant = "u", .nodes = {"host0002", "host0003"}, .remote = {}}};
  auto by = TenantNodes(jobs);
  EXPECT_THAT(by["t"], ElementsAre("host0001", "host0009"));
  EXPECT_THAT(by["u"], ElementsAre("host0002", "host0003"));
  EXPECT_THAT(by["u"], Not(Contains("host0009")));
}

}  // namespace
}  // namespace gpool::control
