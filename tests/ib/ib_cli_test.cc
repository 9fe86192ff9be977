// `gpool fabric discover`, `gpool fabric port` and `gpool fabric analyze --lfts` against a live
// ibsim fabric routed by the real OpenSM: the built binary (GPOOL_BIN) runs through umad2sim as a
// user would run it on a cluster.
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "fabric/analysis.h"
#include "fabric/compare.h"
#include "fabric/generators.h"
#include "fabric/lft_dump.h"
#include "fabric/load.h"
#include "fabric/routing.h"
#include "fabric/writers.h"
#include "ib/ibsim.h"

namespace gpool::ib {
namespace {

using Json = nlohmann::json;

class IbCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("GPOOL_BIN");
    ASSERT_NE(bin, nullptr) << "GPOOL_BIN must name the gpool binary (CTest sets it)";
    bin_ = bin;
    // 4 leaves x 4 hosts, 4 spines, HDR (ibsim 0.10 knows speeds up to HDR).
    auto f = fabric::GenerateFatTree({.levels = 2, .radix = 8, .leaves = 4,
                                      .speed = fabric::LinkSpeed::kHdr});
    ASSERT_TRUE(f.ok());
    plan_ = std::move(*f);
    auto net = fabric::WriteIbsimNet(plan_);
    ASSERT_TRUE(net.ok());
    auto sim = Ibsim::Start({.net_text = *net});
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    sim_ = std::move(*sim);
  }

  StatusOr<ToolResult> Gpool(std::vector<std::string> args) {
    args.insert(args.begin(), bin_);
    return sim_->Run(args, {.timeout_s = 60});
  }
  Json GpoolJson(std::vector<std::string> args) {
    auto r = Gpool(args);
    EXPECT_TRUE(r.ok());
    if (!r.ok()) return Json();
    EXPECT_EQ(r->exit_code, 0) << r->err;
    Json j = Json::parse(r->out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r->out;
    return j;
  }

  std::string bin_;
  fabric::Fabric plan_;
  std::unique_ptr<Ibsim> sim_;
};

TEST_F(IbCliTest, DiscoverWritesTheLiveFabricAndChecksItAgainstThePlan) {
  std::string out = sim_->dir() + "/discovered.topo";
  Json j = GpoolJson({"fabric", "discover", "--out", out, "--expect", sim_->net_path(), "-o", "json"});
  EXPECT_EQ(j["switches"], 8);
  EXPECT_EQ(j["cas"], 16);
  EXPECT_EQ(j["matches"], true) << j.dump();
  // The written file is the plan, read back by gpool's own parser.
  auto back = fabric::LoadFabric(out);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  Status same = fabric::SameFabric(plan_, *back, {.unknown_sysimg_matches = true});
  EXPECT_TRUE(same.ok()) << same.ToString();

  // A host cable pulled: the live fabric no longer matches, and the exit status says so.
  ASSERT_TRUE(sim_->Unlink("leaf-2", 3).ok());
  auto r = Gpool({"fabric", "discover", "--expect", sim_->net_path()});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1) << r->out << r->err;
  EXPECT_NE(r->out.find("differ"), std::string::npos) << r->out;
}

// A plan whose cable reads 4xQDR at the switch and 4xDDR at the HCA fails the expectation when
// the live cable runs at 4xDDR: gpool used to take the plan's link at the lower rate and call
// them equal.
TEST(IbCliExpectTest, APlannedLinkWhoseEndsDisagreeOnRateFailsTheExpectation) {
  const char* bin = std::getenv("GPOOL_BIN");
  ASSERT_NE(bin, nullptr) << "GPOOL_BIN must name the gpool binary (CTest sets it)";
  auto f = fabric::GenerateFatTree({.levels = 2, .radix = 4, .speed = fabric::LinkSpeed::kQdr});
  ASSERT_TRUE(f.ok());
  auto net = fabric::WriteIbsimNet(*f);
  ASSERT_TRUE(net.ok());
  // The two port lines of leaf-0[1] <-> host0001 mlx5_0[1] (the first port lines naming them).
  auto rate_at = [&](const std::string& text, const std::string& needle) {
    size_t line = text.find(needle);
    EXPECT_NE(line, std::string::npos) << needle;
    size_t at = text.find("4xQDR", line);
    EXPECT_LT(at, text.find('\n', line)) << needle;
    return at;
  };
  std::string live = *net, plan = *net;
  const std::string sw_side = "[1]\t\"host0001 mlx5_0\"[1]", ca_side = "\t\"leaf-0\"[1]";
  live.replace(rate_at(live, sw_side), 5, "4xDDR");
  live.replace(rate_at(live, ca_side), 5, "4xDDR");
  plan.replace(rate_at(plan, ca_side), 5, "4xDDR");
  auto sim = Ibsim::Start({.net_text = live});
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  std::string plan_path = (*sim)->dir() + "/plan.net";
  ASSERT_TRUE(WriteFileAtomic(plan_path, plan).ok());

  // The live fabric is the live net file: the cable runs at 4xDDR at both ends.
  auto same = (*sim)->Run({bin, "fabric", "discover", "--expect", (*sim)->net_path(), "-o", "json"},
                          {.timeout_s = 60});
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->exit_code, 0) << same->out << same->err;
  auto r = (*sim)->Run({bin, "fabric", "discover", "--expect", plan_path, "-o", "json"},
                       {.timeout_s = 60});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 1) << r->out << r->err;
  Json j = Json::parse(r->out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r->out;
  EXPECT_EQ(j["matches"], false);
  EXPECT_NE(j["difference"].get<std::string>().find("node 'leaf-0' port 1: rate 4xQDR vs 4xDDR"),
            std::string::npos)
      << j.dump();
}

TEST_F(IbCliTest, DiscoverWithoutADeviceFailsClearly) {
  // Not through umad2sim: there is no InfiniBand device on this machine.
  std::string cmd = "'" + bin_ + "' fabric discover --timeout-ms 200 >/dev/null 2>" + sim_->dir() +
                    "/err.txt";
  int rc = std::system(cmd.c_str());
  EXPECT_NE(rc, 0);
  auto err = ReadFile(sim_->dir() + "/err.txt");
  ASSERT_TRUE(err.ok());
  EXPECT_NE(err->find("gpool fabric discover:"), std::string::npos) << *err;
}

TEST_F(IbCliTest, OpenSmRoutesAreImportedVerifiedAndAnalysed) {
  auto osm = sim_->RunOpenSmOnce({.engine = "ftree"});
  ASSERT_TRUE(osm.ok()) << osm.status().ToString();
  // Discover after OpenSM: the model carries the LIDs OpenSM assigned.
  std::string model = sim_->dir() + "/model.topo";
  auto d = Gpool({"fabric", "discover", "--out", model});
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->exit_code, 0) << d->err;

  auto f = fabric::LoadFabric(model);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto text = ReadFile(osm->lfts_path);
  ASSERT_TRUE(text.ok());
  auto t = fabric::ReadLftDump(*text, *f, {.source_name = osm->lfts_path});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE(t->notes.empty());
  fabric::VerifyReport v = fabric::Verify(*f, *t, {});
  EXPECT_TRUE(v.ok()) << (v.problems.empty() ? "" : v.problems.front());
  EXPECT_EQ(v.pairs_checked, 16u * 15u);
  auto load = fabric::AnalyzeLoad(*f, *t, {.kind = fabric::PatternKind::kAllToAll}, {});
  ASSERT_TRUE(load.ok()) << load.status().ToString();
  EXPECT_EQ(load->unroutable, 0u);
  EXPECT_EQ(load->flows, 16u * 15u);
  EXPECT_GT(load->max_load_ratio, 0.0);

  // The same through the CLI.
  Json r = GpoolJson({"fabric", "route", model, "--lfts", osm->lfts_path, "-o", "json"});
  EXPECT_EQ(r["engine"], "opensm");
  Json a = GpoolJson({"fabric", "analyze", model, "--lfts", osm->lfts_path, "-o", "json"});
  EXPECT_EQ(a["engine"], "opensm");
  EXPECT_TRUE(a.contains("load")) << a.dump();

  // A model whose LIDs are not the subnet's is refused, naming the line.
  auto other = fabric::GenerateFatTree({.levels = 2, .radix = 8, .leaves = 4,
                                        .speed = fabric::LinkSpeed::kHdr, .hosts = 15});
  ASSERT_TRUE(other.ok());
  auto bad = fabric::ReadLftDump(*text, *other, {.source_name = "opensm-lfts.dump"});
  EXPECT_FALSE(bad.ok());
}

TEST_F(IbCliTest, PortStateAndCounters) {
  ASSERT_TRUE(sim_->RunOpenSmOnce({.engine = "minhop"}).ok());
  // leaf-0 is LID 1 (switches first); its port 1 goes to host0001.
  Json p = GpoolJson({"fabric", "port", "1", "1", "-o", "json"});
  EXPECT_EQ(p["state"], "Active");
  EXPECT_EQ(p["phys_state"], "LinkUp");
  EXPECT_EQ(p["width"], 4);
  EXPECT_EQ(p["speed"], "HDR");
  EXPECT_GT(p["counters"]["xmit_packets"].get<uint64_t>(), 0u);  // OpenSM's SMPs

  ASSERT_TRUE(sim_->Console("PerformanceSet \"leaf-0\"[1] PortCounters.SymbolErrorCounter=7").ok());
  ASSERT_TRUE(
      sim_->Console("PerformanceSet \"leaf-0\"[1] PortCountersExtended.PortXmitData=123456789012")
          .ok());
  p = GpoolJson({"fabric", "port", "1", "1", "-o", "json", "--reset"});
  EXPECT_EQ(p["counters"]["symbol_errors"], 7);
  EXPECT_EQ(p["counters"]["xmit_data_words"], 123456789012ull);
  EXPECT_EQ(p["counters"]["extended"], true);
  p = GpoolJson({"fabric", "port", "1", "1", "-o", "json"});
  EXPECT_EQ(p["counters"]["symbol_errors"], 0);
  EXPECT_LT(p["counters"]["xmit_data_words"].get<uint64_t>(), 1000u);

  ASSERT_TRUE(sim_->Unlink("leaf-0", 1).ok());
  p = GpoolJson({"fabric", "port", "1", "1", "-o", "json"});
  EXPECT_EQ(p["state"], "Down");
  EXPECT_EQ(p["width"], 0);

  auto bad = Gpool({"fabric", "port", "0", "1"});
  ASSERT_TRUE(bad.ok());
  EXPECT_NE(bad->exit_code, 0);
  EXPECT_NE(bad->err.find("LID 0"), std::string::npos) << bad->err;
}

}  // namespace
}  // namespace gpool::ib
