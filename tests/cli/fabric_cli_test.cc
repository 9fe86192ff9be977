// End-to-end tests of `gpool fabric`: run the built binary (GPOOL_BIN, set by CTest) the way a
// user or script would, and check exit status, JSON output and error messages.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "cli_test_util.h"

namespace {

using gpool::clitest::Json;
using gpool::clitest::Result;
using gpool::clitest::Slurp;
namespace fs = std::filesystem;

class FabricCliTest : public gpool::clitest::CliTest {};

// A 2-level fat-tree of 8-port switches: 8 leaves x 4 HCAs, 4 spines.
TEST_F(FabricCliTest, GenLoadRouteAnalyzeFailExport) {
  std::string topo = Path("ft.topo");
  Json gen = RunJson("fabric gen fat-tree --levels 2 --radix 8 --out " + topo + " -o json");
  EXPECT_EQ(gen["switches"], 12);
  EXPECT_EQ(gen["cas"], 32);
  EXPECT_EQ(gen["links"], 32 + 8 * 4);
  ASSERT_TRUE(fs::exists(topo));

  Json load = RunJson("fabric load " + topo + " -o json");
  EXPECT_EQ(load["format"], "ibnetdiscover");
  EXPECT_EQ(load["switches"], 12);
  EXPECT_EQ(load["cas"], 32);
  EXPECT_EQ(load["links"], 64);
  EXPECT_EQ(load["levels"], 2);
  EXPECT_EQ(load["levels_inferred"], false);  // gpool writes them as '# gpool: level N' lines
  EXPECT_EQ(load["leaves"], 8);

  std::string lfts = Path("lfts.dump");
  Json route = RunJson("fabric route " + topo + " --engine ftree --lft-out " + lfts + " -o json");
  EXPECT_EQ(route["engine"], "ftree");
  EXPECT_EQ(route["verify"]["ok"], true);
  EXPECT_EQ(route["verify"]["unreachable"], 0);
  EXPECT_EQ(route["verify"]["pairs_checked"], 32 * 31);
  std::string dump = Slurp(lfts);
  size_t blocks = 0;
  for (size_t p = dump.find("Unicast lids"); p != std::string::npos; p = dump.find("Unicast lids", p + 1))
    ++blocks;
  EXPECT_EQ(blocks, 12u);

  Json an = RunJson("fabric analyze " + topo + " --engine ftree --pattern all-to-all -o json");
  EXPECT_EQ(an["load"]["flows"], 32 * 31);
  EXPECT_EQ(an["load"]["unroutable"], 0);
  EXPECT_GT(an["load"]["max_flows_per_link"].get<int>(), 0);
  EXPECT_DOUBLE_EQ(an["bisection"]["ratio"].get<double>(), 1.0);
  EXPECT_FALSE(an["load"]["histogram"].empty());

  Json shift = RunJson("fabric analyze " + topo + " --engine minhop --pattern shift -o json");
  EXPECT_EQ(shift["load"]["shift"]["evaluated"], 31);
  EXPECT_EQ(shift["load"]["flows"], 31 * 32);

  Json ring = RunJson("fabric analyze " + topo + " --engine updn --pattern ring:4 -o json");
  EXPECT_EQ(ring["load"]["pattern"], "ring:4");
  EXPECT_EQ(ring["load"]["flows"], 4);

  Json fail = RunJson("fabric fail " + topo + " --link leaf-0[5] --engine ftree -o json");
  EXPECT_EQ(fail["kind"], "link");
  EXPECT_GT(fail["pairs_affected"].get<int>(), 0);
  EXPECT_EQ(fail["pairs_unreachable_after"], 0);
  EXPECT_EQ(fail["after"]["unroutable"], 0);
  EXPECT_GT(fail["affected_destinations"].get<int>(), 0);

  EXPECT_EQ(fail["balance_check"]["full_reroute"], fail["full_reroute"]);  // ftree is checked
  EXPECT_LE(fail["after"]["max_load_ratio"].get<double>(),
            fail["balance_check"]["full_max_load"].get<double>() * 1.1 + 1e-9);

  Json sw = RunJson("fabric fail " + topo + " --switch spine-1 --engine minhop -o json");
  EXPECT_EQ(sw["kind"], "switch");
  EXPECT_EQ(sw["pairs_unreachable_after"], 0);

  Result dot = Run("fabric export " + topo + " --format dot");
  EXPECT_EQ(dot.code, 0) << dot.err;
  EXPECT_NE(dot.out.find("graph"), std::string::npos);
  Result slurm = Run("fabric export " + topo + " --format slurm --out " + Path("topology.conf"));
  EXPECT_EQ(slurm.code, 0) << slurm.err;
  EXPECT_NE(Slurp(Path("topology.conf")).find("SwitchName="), std::string::npos);
  Json js = RunJson("fabric export " + topo + " --format json");
  EXPECT_EQ(js["switches"], 12);
  EXPECT_EQ(js["cas"], 32);
}

TEST_F(FabricCliTest, HumanTablesNameTheCounts) {
  std::string topo = Path("ft.topo");
  ASSERT_EQ(Run("fabric gen fat-tree --levels 2 --radix 4 --out " + topo).code, 0);
  Result r = Run("fabric load " + topo);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("switches"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cas"), std::string::npos);
  r = Run("fabric analyze " + topo + " --engine minhop");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("max flows/link"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bisection"), std::string::npos) << r.out;
}

TEST_F(FabricCliTest, ThreeLevelTreeAndTorus) {
  std::string ft = Path("ft3.topo");
  Json gen = RunJson("fabric gen fat-tree --levels 3 --radix 4 --out " + ft + " -o json");
  EXPECT_EQ(gen["levels"], 3);
  Json load = RunJson("fabric load " + ft + " -o json");
  EXPECT_EQ(load["levels"], 3);
  EXPECT_EQ(load["pods"], gen["pods"]);
  Json an = RunJson("fabric analyze " + ft + " --engine ftree -o json");
  EXPECT_EQ(an["load"]["unroutable"], 0);

  std::string torus = Path("torus.topo");
  Json tg = RunJson("fabric gen torus --dims 3x3x2 --out " + torus + " -o json");
  EXPECT_EQ(tg["switches"], 18);
  Json route = RunJson("fabric route " + torus + " --engine dor -o json");
  EXPECT_EQ(route["verify"]["unreachable"], 0);
  EXPECT_EQ(route["verify"]["deadlock_free"], true);
}

// 256 hosts fill 4 of the 16 pods of a radix-16 three-level tree: the other 96 leaves have no
// host. The file loads back with the generator's 3 levels and 16 pods, and so does a copy
// without the level lines, whose tiers are inferred.
TEST_F(FabricCliTest, GeneratedTreesWithEmptyLeavesLoadBackWithTheirPods) {
  std::string ft = Path("ft.topo");
  Json gen = RunJson("fabric gen fat-tree --levels 3 --radix 16 --hosts 256 --out " + ft +
                     " -o json");
  EXPECT_EQ(gen["levels"], 3);
  EXPECT_EQ(gen["pods"], 16);
  Json load = RunJson("fabric load " + ft + " -o json");
  EXPECT_EQ(load["levels"], 3);
  EXPECT_EQ(load["pods"], 16);
  EXPECT_EQ(load["leaves"], gen["leaves"]);
  EXPECT_EQ(load["levels_inferred"], false);

  std::string bare = Path("bare.topo");
  ASSERT_EQ(Run("fabric export " + ft + " --format ibnetdiscover --out " + bare).code, 0);
  std::string text = Slurp(bare), stripped;
  size_t hints = 0;
  for (size_t b = 0, e; b < text.size(); b = e + 1) {
    e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    std::string line = text.substr(b, e - b);
    if (line.rfind("# gpool: level", 0) == 0) {
      ++hints;
      continue;
    }
    stripped += line + "\n";
  }
  EXPECT_EQ(hints, 16u * 16 + 64);  // every switch: 128 leaves + 128 aggregation + 64 cores
  {
    std::ofstream out(bare, std::ios::trunc);
    out << stripped;
  }
  Json inferred = RunJson("fabric load " + bare + " -o json");
  EXPECT_EQ(inferred["levels_inferred"], true);
  EXPECT_EQ(inferred["levels"], 3);
  EXPECT_EQ(inferred["pods"], 16);
  EXPECT_EQ(inferred["leaves"], gen["leaves"]);
}

// A leaf uplink of a three-level tree whose cores reach each pod through two aggregation switches
// (the 2,268-HCA tree's shape, smaller): the re-route stays within 10% of a full re-route, and
// the report lists the hot links and writes the LFTs.
TEST_F(FabricCliTest, FailOnAThreeLevelTreeKeepsTheBalanceOfAFullReroute) {
  std::string ft = Path("ft3.topo"), lfts = Path("after.dump");
  ASSERT_EQ(Run("fabric gen fat-tree --levels 3 --radix 8 --pods 2 --out " + ft).code, 0);
  Json fail = RunJson("fabric fail " + ft + " --link leaf-p1-1[6] --engine ftree --top 2 " +
                      "--lft-out " + lfts + " -o json");
  ASSERT_TRUE(fail.contains("balance_check")) << fail.dump();
  double full = fail["balance_check"]["full_max_load"].get<double>();
  EXPECT_GT(full, 1.0);
  EXPECT_LE(fail["after"]["max_load_ratio"].get<double>(), full * 1.1 + 1e-9);
  EXPECT_EQ(fail["full_reroute"], false) << fail.dump();
  EXPECT_EQ(fail["after"]["top_links"].size(), 2u);
  EXPECT_NE(Slurp(lfts).find("Unicast lids"), std::string::npos);
  Result table = Run("fabric fail " + ft + " --link leaf-p1-1[6] --engine ftree");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("balance check"), std::string::npos) << table.out;
}

// A cable whose switch end reads 4xQDR and whose HCA end reads 4xDDR.
TEST_F(FabricCliTest, LoadFlagsALinkWhoseEndsDisagreeOnRate) {
  Json j = RunJson("fabric load testdata/fabric/rate_mismatch.topo -o json");
  ASSERT_EQ(j["rate_mismatches"].size(), 1u) << j.dump();
  EXPECT_EQ(j["rate_mismatches"][0],
            "'S-0002c90300002000'[2] 4xQDR <-> 'H-0002c90300001002'[1] 4xDDR: the ends disagree "
            "on rate; the link runs at 4xDDR");
  ASSERT_EQ(j["warnings"].size(), 1u) << j.dump();
  EXPECT_NE(j["warnings"][0].get<std::string>().find("the ends disagree on rate"),
            std::string::npos);
  EXPECT_EQ(j["link_rates"]["4xDDR"], 1);
  EXPECT_EQ(j["link_rates"]["4xQDR"], 1);
  Result r = Run("fabric load testdata/fabric/rate_mismatch.topo");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("rate mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("'S-0002c90300002000'[2] 4xQDR <-> 'H-0002c90300001002'[1] 4xDDR"),
            std::string::npos)
      << r.out;
  // A consistent fabric has none.
  Json ok = RunJson("fabric load testdata/fabric/jabl_3.topo -o json");
  EXPECT_TRUE(ok["rate_mismatches"].empty()) << ok.dump();
}

TEST_F(FabricCliTest, GenWithoutOutWritesTheFabricToStdout) {
  Result r = Run("fabric gen fat-tree --levels 2 --radix 4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Switch"), std::string::npos);
  EXPECT_NE(r.out.find("Ca"), std::string::npos);
}

TEST_F(FabricCliTest, LoadsARealDump) {
  Json j = RunJson("fabric load testdata/cli/jabl_3.topo -o json");
  EXPECT_EQ(j["format"], "ibnetdiscover");
  EXPECT_GT(j["switches"].get<int>(), 0);
  EXPECT_GT(j["cas"].get<int>(), 0);
  Json r = RunJson("fabric route testdata/cli/jabl_3.topo --engine minhop -o json");
  EXPECT_EQ(r["verify"]["unreachable"], 0);
}

TEST_F(FabricCliTest, BadInputFailsWithAClearMessage) {
  Result r = Run("fabric load " + Path("missing.topo"));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("missing.topo"), std::string::npos) << r.err;

  r = Run("fabric load testdata/cli/broken.topo");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("broken.topo:"), std::string::npos) << r.err;  // file:line
  EXPECT_TRUE(r.out.empty());

  std::string topo = Path("ft.topo");
  ASSERT_EQ(Run("fabric gen fat-tree --levels 2 --radix 4 --out " + topo).code, 0);
  r = Run("fabric analyze " + topo + " --engine minhop --pattern butterfly");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--pattern 'butterfly'"), std::string::npos) << r.err;
  r = Run("fabric analyze " + topo + " --engine minhop --pattern ring:nosuch,other");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("'nosuch'"), std::string::npos) << r.err;
  r = Run("fabric fail " + topo + " --link 'leaf-0[99]' --engine minhop");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("leaf-0[99]"), std::string::npos) << r.err;
  r = Run("fabric fail " + topo + " --switch nosuch --engine minhop");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("'nosuch'"), std::string::npos) << r.err;
  r = Run("fabric fail " + topo + " --engine minhop");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--link"), std::string::npos) << r.err;
  r = Run("fabric route " + topo + " --engine fastest");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--engine"), std::string::npos) << r.err;
  r = Run("fabric gen fat-tree --levels 2 --radix 4 --rate 4xFAST");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--rate '4xFAST'"), std::string::npos) << r.err;
  r = Run("fabric gen torus --dims 3xAx2");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--dims"), std::string::npos) << r.err;
}

}  // namespace
