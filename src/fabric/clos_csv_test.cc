#include "fabric/clos_csv.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fabric/compare.h"
#include "fabric/ibnetdiscover.h"
#include "fabric/writers.h"

namespace gpool::fabric {
namespace {

using ::testing::HasSubstr;

StatusOr<Fabric> Parse(std::string_view text, ClosCsvOptions o = {}) {
  o.source_name = "t.csv";
  return ParseClosCsv(text, o);
}

constexpr std::string_view kSmall =
    "ip,DSW,PSW,ASW\n"
    "a1,G1,P1,S1\n"
    "a2,G1,P1,S1\n"
    "b1,G1,P2,S1\n"  // S1 again, under another PSW: a different ToR
    "c1,G2,P1,S2\n";  // P1 also under core G2

TEST(ClosCsvTest, BuildsThreeLevelsFromPairs) {
  auto f = Parse(kSmall);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_cas(), 4u);
  // Cores G1 G2, aggregations P1 P2, ToRs P1-S1 P2-S1 P1-S2.
  EXPECT_EQ(f->num_switches(), 7u);
  // 4 host links, 3 ToR uplinks, aggregation-core pairs (P1,G1) (P2,G1) (P1,G2).
  EXPECT_EQ(f->num_links(), 10u);
  const Node& tor = f->node(*f->FindByName("P1-S1"));
  EXPECT_EQ(tor.level, 0);
  EXPECT_EQ(tor.num_ports, 3);  // two hosts and one uplink
  EXPECT_EQ(f->node(*f->FindByName("P1")).level, 1);
  EXPECT_EQ(f->node(*f->FindByName("P1")).num_ports, 4);  // ToRs P1-S1, P1-S2; cores G1, G2
  EXPECT_EQ(f->node(*f->FindByName("G1")).level, 2);
  EXPECT_EQ(f->node(*f->FindByName("G1")).num_ports, 2);
  NodeId h = *f->FindByName("a2 HCA-1");
  const Adjacent* adj = f->adj_begin(h);
  EXPECT_EQ(f->node(adj->peer).name, "P1-S1");
  EXPECT_EQ(adj->peer_port, 2);
  EXPECT_EQ(f->port(f->port_of(h, 1)).speed, LinkSpeed::kNdr);
  EXPECT_NE(f->port(f->port_of(h, 1)).lid, 0);
}

TEST(ClosCsvTest, EightHcasAndParallelUplinks) {
  ClosCsvOptions o;
  o.hcas_per_host = 8;
  o.tor_uplinks = 4;
  o.agg_uplinks = 2;
  auto f = Parse(kSmall, o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_cas(), 32u);
  EXPECT_EQ(f->node(*f->FindByName("P1-S1")).num_ports, 2 * 8 + 4);
  EXPECT_TRUE(f->FindByName("a1 HCA-8").has_value());
  EXPECT_EQ(f->node(*f->FindByName("P1")).num_ports, 2 * 4 + 2 * 2);
  EXPECT_EQ(f->num_links(), 32u + 3 * 4 + 3 * 2);

  o.wiring = HcaWiring::kRailOptimized;
  EXPECT_EQ(Parse(kSmall, o).status().code(), StatusCode::kUnimplemented);
}

TEST(ClosCsvTest, RealLingjunTopology) {
  auto f = LoadClosCsv("testdata/fabric/alibaba-lingjun-2023-topo.csv", {});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_cas(), 847u);
  EXPECT_EQ(f->num_switches(), 1u + 3u + 119u);
  EXPECT_EQ(f->num_links(), 847u + 119u + 3u);
  // Hosts are 64-hex ids, cut to 16 characters.
  const Node& ca = f->node(f->cas().front());
  EXPECT_EQ(ca.name, "0c9d9de1b19e7f39 HCA-1");
  EXPECT_EQ(SlurmHostName(ca), "0c9d9de1b19e7f39");
  // It survives an ibnetdiscover round trip (levels are not in that format).
  auto text = WriteIbnetdiscover(*f);
  ASSERT_TRUE(text.ok());
  auto back = ParseNet(*text, {});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  Status same = SameFabric(*f, *back);
  EXPECT_TRUE(same.ok()) << same.ToString();
  auto conf = WriteSlurmTopology(*f);
  ASSERT_TRUE(conf.ok());
  EXPECT_THAT(*conf, HasSubstr("SwitchName=G6 Switches=P[8,10,12]\n"));
}

TEST(ClosCsvTest, MalformedInput) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"ip,DSW,PSW\na,b,c\n", "t.csv:1: expected a header naming the columns ip,DSW,PSW,ASW; 'ASW' is missing"},
      {"ip,DSW,PSW,ASW\na,G,P\n", "t.csv:2: expected 4 comma-separated fields, got 3"},
      {"ip,DSW,PSW,ASW\na,G,,S\n", "t.csv:2: the PSW field is empty"},
      {"ip,DSW,PSW,ASW\na,G,P,S\n\na,G,P,S\n", "t.csv:4: host 'a' is listed twice (first at line 2)"},
      {"ip,DSW,PSW,ASW\n", "t.csv: no host rows"},
      {"", "t.csv: empty file"},
  };
  for (const Case& c : cases) {
    auto f = Parse(c.text);
    ASSERT_FALSE(f.ok()) << c.text;
    EXPECT_THAT(f.status().message(), HasSubstr(c.want)) << c.text;
  }
  // A switch name used at two levels.
  auto clash = Parse("ip,DSW,PSW,ASW\nh,X,X,S\n");
  ASSERT_FALSE(clash.ok());
  EXPECT_THAT(clash.status().message(), HasSubstr("'X' is defined twice"));
  // Too many hosts for one ToR.
  std::string big = "ip,DSW,PSW,ASW\n";
  for (int i = 0; i < 40; ++i) big += fmt::format("h{},G,P,S\n", i);
  ClosCsvOptions o;
  o.hcas_per_host = 8;
  EXPECT_THAT(Parse(big, o).status().message(), HasSubstr("switch 'P-S' would need 321 ports"));
}

}  // namespace
}  // namespace gpool::fabric
