// The ibsim harness against the real ibsim, OpenSM and infiniband-diags (see ibsim.h).
#include "ib/ibsim.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include <gtest/gtest.h>

#include "common/file.h"
#include "fabric/generators.h"
#include "fabric/writers.h"

namespace gpool::ib {
namespace {

// A two-level fat-tree of 8-port switches: 4 leaves x 4 hosts, 4 spines (20 nodes).
std::string SmallNet(int leaves = 4) {
  auto f = fabric::GenerateFatTree({.levels = 2, .radix = 8, .leaves = leaves,
                                    .speed = fabric::LinkSpeed::kHdr});
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  auto net = fabric::WriteIbsimNet(*f);
  EXPECT_TRUE(net.ok()) << net.status().ToString();
  return *net;
}

int CountLines(const std::string& text, const std::string& prefix) {
  int n = 0;
  LineReader r(text);
  std::string_view line;
  while (r.Next(&line)) n += line.substr(0, prefix.size()) == prefix;
  return n;
}

TEST(IbsimTest, StartsRunsDiagsAndCleansUp) {
  std::string dir;
  pid_t pid;
  {
    auto sim = Ibsim::Start({.net_text = SmallNet()});
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    dir = (*sim)->dir();
    pid = (*sim)->pid();
    EXPECT_TRUE(std::filesystem::exists((*sim)->net_path()));
    auto r = (*sim)->RunOk({"ibnetdiscover"});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(CountLines(r->out, "Switch"), 8) << r->out;
    EXPECT_EQ(CountLines(r->out, "Ca"), 16) << r->out;
    // A tool that fails is reported, not hidden.
    auto bad = (*sim)->Run({"smpquery", "nodeinfo", "9999"}, {.timeout_s = 10});
    ASSERT_TRUE(bad.ok());
    EXPECT_NE(bad->exit_code, 0);
    EXPECT_FALSE((*sim)->RunOk({"smpquery", "nodeinfo", "9999"}, {.timeout_s = 10}).ok());
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  EXPECT_NE(kill(pid, 0), 0) << "ibsim still running after the harness was destroyed";
}

TEST(IbsimTest, ConcurrentInstancesDoNotSeeEachOther) {
  auto a = Ibsim::Start({.net_text = SmallNet(4)});
  auto b = Ibsim::Start({.net_text = SmallNet(2)});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE((*a)->socket_name(), (*b)->socket_name());
  auto ra = (*a)->RunOk({"ibnetdiscover"});
  auto rb = (*b)->RunOk({"ibnetdiscover"});
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  ASSERT_TRUE(rb.ok()) << rb.status().ToString();
  EXPECT_EQ(CountLines(ra->out, "Ca"), 16);
  EXPECT_EQ(CountLines(rb->out, "Ca"), 8);
}

TEST(IbsimTest, UnlinkAndReLinkChangeWhatDiscoverySees) {
  auto sim = Ibsim::Start({.net_text = SmallNet()});
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  // Host 0's link (leaf-0 port 1): the CA drops out of discovery, then comes back.
  ASSERT_TRUE((*sim)->Unlink("leaf-0", 1).ok());
  auto r = (*sim)->RunOk({"ibnetdiscover"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(CountLines(r->out, "Ca"), 15) << r->out;
  ASSERT_TRUE((*sim)->ReLink("leaf-0", 1).ok());
  r = (*sim)->RunOk({"ibnetdiscover"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(CountLines(r->out, "Ca"), 16);
  // A node ibsim does not know is an error naming it.
  Status s = (*sim)->Unlink("no-such-switch", 1);
  EXPECT_FALSE(s.ok());
}

TEST(IbsimTest, ManyClientsInARowAndKilledClientsDoNotExhaustSlots) {
  auto sim = Ibsim::Start({.net_text = SmallNet(2)});
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  // ibsim has 10 client slots: 12 clients in a row only work if each gives its slot back.
  for (int i = 0; i < 12; ++i) {
    auto r = (*sim)->RunOk({"ibstat"}, {.timeout_s = 10});
    ASSERT_TRUE(r.ok()) << "client " << i << ": " << r.status().ToString();
  }
  // A client killed with SIGKILL keeps its slot until the harness frees it (Run does so when a
  // tool times out). OpenSM as a daemon never exits by itself.
  auto r = (*sim)->Run({"timeout", "-s", "KILL", "2", "opensm", "-f", (*sim)->dir() + "/k.log"},
                       {.timeout_s = 20, .env = {{"OSM_CACHE_DIR", (*sim)->dir()},
                                                 {"OSM_TMP_DIR", (*sim)->dir()}}});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out) << r->exit_code;
  auto attached = (*sim)->AttachedClients();
  ASSERT_TRUE(attached.ok()) << attached.status().ToString();
  EXPECT_TRUE(attached->empty()) << attached->size() << " stale client(s) left";
  EXPECT_TRUE((*sim)->RunOk({"ibstat"}, {.timeout_s = 10}).ok());
}

TEST(IbsimTest, OpenSmOnceWritesForwardingTables) {
  auto sim = Ibsim::Start({.net_text = SmallNet()});
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  auto osm = (*sim)->RunOpenSmOnce({.engine = "updn"});
  ASSERT_TRUE(osm.ok()) << osm.status().ToString();
  auto lfts = ReadFile(osm->lfts_path);
  ASSERT_TRUE(lfts.ok());
  // One block per switch (8), each routing the 16 CA LIDs (updn leaves out spine-to-spine
  // routes, which would go down and up again).
  EXPECT_EQ(CountLines(*lfts, "Unicast lids"), 8) << *lfts;
  int ca_routes = 0;
  for (size_t p = lfts->find("Channel Adapter"); p != std::string::npos;
       p = lfts->find("Channel Adapter", p + 1))
    ++ca_routes;
  EXPECT_EQ(ca_routes, 8 * 16) << *lfts;
  // After OpenSM the ports are Active: the SM set them up.
  auto st = (*sim)->RunOk({"ibstat"});
  ASSERT_TRUE(st.ok());
  EXPECT_NE(st->out.find("Active"), std::string::npos);
}

TEST(IbsimTest, OpenSmDaemonResweepsAfterALinkFails) {
  auto sim = Ibsim::Start({.net_text = SmallNet()});
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  auto osm = (*sim)->StartOpenSm({.base = {.engine = "minhop"}});
  ASSERT_TRUE(osm.ok()) << osm.status().ToString();
  int up = (*osm)->CountInLog("SUBNET UP");
  // A leaf uplink fails: the switch sends trap 128 and OpenSM sweeps again.
  Status un = (*sim)->Unlink("leaf-1", 5);
  ASSERT_TRUE(un.ok()) << un.ToString();
  Status s = (*osm)->WaitForLog("SUBNET UP", up + 1, 60);
  EXPECT_TRUE(s.ok()) << s.ToString();
  (*osm)->Stop();
  auto attached = (*sim)->AttachedClients();
  ASSERT_TRUE(attached.ok());
  EXPECT_TRUE(attached->empty());
}

}  // namespace
}  // namespace gpool::ib
