#include "fabric/ibnetdiscover.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "common/file.h"
#include "fabric/compare.h"
#include "fabric/writers.h"

namespace gpool::fabric {
namespace {

using ::testing::HasSubstr;

StatusOr<Fabric> ParseNetText(std::string_view text, std::vector<std::string>* warnings = nullptr) {
  NetParseOptions o;
  o.source_name = "t.net";
  o.warnings = warnings;
  return ParseNet(text, o);
}

const Port& PortOf(const Fabric& f, std::string_view node, uint16_t p) {
  return f.port(f.port_of(*f.FindByName(node), p));
}

std::string PeerOf(const Fabric& f, std::string_view node, uint16_t p) {
  const Port& port = PortOf(f, node, p);
  if (!port.link.valid()) return "-";
  NodeId peer = f.link_peer(port.link, port.node);
  const Link& l = f.link(port.link);
  const Port& o = f.port(f.port(l.a).node == port.node && f.port(l.a).num == p ? l.b : l.a);
  return fmt::format("{}[{}]", f.node(peer).name, o.num);
}

TEST(IbnetdiscoverTest, ReadsRealDumpWithGuidsLidsAndRates) {
  std::vector<std::string> warnings;
  NetParseOptions o;
  o.warnings = &warnings;
  auto f = LoadNetFile("testdata/fabric/jabl_1.topo", o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_switches(), 2u);
  EXPECT_EQ(f->num_cas(), 4u);
  EXPECT_EQ(f->num_links(), 7u);  // 5 from the 24-port switch, 2 more CAs on the 8-port one

  const Node& sw = f->node(*f->FindByName("S-005442ba00003080"));
  EXPECT_EQ(sw.type, NodeType::kSwitch);
  EXPECT_EQ(sw.num_ports, 24);
  EXPECT_EQ(sw.guid, 0x5442ba00003080u);
  EXPECT_EQ(sw.sysimg_guid, 0x5442ba00003000u);
  EXPECT_EQ(sw.lid, 6);
  EXPECT_EQ(sw.description, "ISR9024 Voltaire");

  const Node& ca = f->node(*f->FindByName("H-0008f10403960558"));
  EXPECT_EQ(ca.type, NodeType::kCa);
  EXPECT_EQ(ca.guid, 0x8f10403960558u);
  EXPECT_EQ(ca.lmc, 1);
  EXPECT_EQ(PortOf(*f, "H-0008f10403960558", 2).guid, 0x8f1040396055au);
  EXPECT_EQ(PortOf(*f, "H-0008f10403960558", 2).lid, 14);
  EXPECT_EQ(PortOf(*f, "H-0008f10403960558", 1).lid, 10);
  EXPECT_EQ(PeerOf(*f, "H-0008f10403960558", 2), "S-005442ba00003080[8]");
  EXPECT_EQ(PeerOf(*f, "S-0008f10400410015", 1), "S-005442ba00003080[10]");

  // The ends of two links disagree (4xSDR vs 1xSDR): each port keeps its own rate, the link runs
  // at the lower width, and both the parser and RateMismatches say so.
  EXPECT_EQ(PortOf(*f, "S-005442ba00003080", 10).width, 4);
  EXPECT_EQ(PortOf(*f, "S-0008f10400410015", 1).width, 1);
  EXPECT_EQ(PortOf(*f, "S-005442ba00003080", 12).width, 4);
  EXPECT_EQ(PortOf(*f, "H-0008f10403960558", 1).width, 1);
  EXPECT_DOUBLE_EQ(f->link_gbps(PortOf(*f, "S-005442ba00003080", 10).link), 2.5);
  EXPECT_EQ(RateMismatches(*f).size(), 2u);
  EXPECT_EQ(PortOf(*f, "S-005442ba00003080", 22).width, 4);
  EXPECT_EQ(PortOf(*f, "S-005442ba00003080", 22).speed, LinkSpeed::kSdr);
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("jabl_1.topo:"));
  EXPECT_THAT(warnings[0], HasSubstr("1xSDR"));
  EXPECT_THAT(warnings[0], HasSubstr("the ends disagree on rate"));
  EXPECT_FALSE(PortOf(*f, "S-005442ba00003080", 1).link.valid());  // ports without a line
}

TEST(IbnetdiscoverTest, ToleratesDiagnosticsBeforeTheFirstRecordAndSelfLinks) {
  std::vector<std::string> warnings;
  NetParseOptions o;
  o.warnings = &warnings;
  auto f = LoadNetFile("testdata/fabric/jabl_3.topo", o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("jabl_3.topo:1: skipped a line before the first record"));
  EXPECT_EQ(f->num_switches(), 2u);
  EXPECT_EQ(f->num_cas(), 6u);
  // Loopback cables between ports of one switch are links like any other.
  EXPECT_EQ(PeerOf(*f, "S-e41d2d030003e470", 1), "S-e41d2d030003e470[2]");
  EXPECT_EQ(PeerOf(*f, "S-e41d2d030003e470", 19), "S-e41d2d030003e470[21]");
  EXPECT_EQ(PortOf(*f, "S-e41d2d030003e470", 3).speed, LinkSpeed::kFdr);
  EXPECT_EQ(PortOf(*f, "S-e41d2d030003e470", 34).speed, LinkSpeed::kEdr);
  EXPECT_EQ(PortOf(*f, "S-f4521403005764b0", 2).speed, LinkSpeed::kQdr);
  EXPECT_EQ(f->node(*f->FindByName("S-e41d2d030003e470")).lid, 268);
  // A CA whose only cabled port is its second.
  EXPECT_FALSE(PortOf(*f, "H-0002c903003421b0", 1).link.valid());
  EXPECT_EQ(PortOf(*f, "H-0002c903003421b0", 2).lid, 3);
  EXPECT_EQ(f->node(*f->FindByName("H-0002c903003421b0")).lid, 3);
}

TEST(IbnetdiscoverTest, RealDumpsRoundTripThroughBothWriters) {
  for (int i = 1; i <= 4; ++i) {
    std::string path = fmt::format("testdata/fabric/jabl_{}.topo", i);
    SCOPED_TRACE(path);
    auto a = LoadNetFile(path, {});
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    CompareOptions all;
    all.descriptions = true;
    auto text = WriteIbnetdiscover(*a);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    auto b = ParseNetText(*text);
    ASSERT_TRUE(b.ok()) << b.status().ToString() << "\n" << *text;
    EXPECT_TRUE(SameFabric(*a, *b, all).ok()) << SameFabric(*a, *b, all).ToString();
    auto net = WriteIbsimNet(*a);
    ASSERT_TRUE(net.ok()) << net.status().ToString();
    auto c = ParseNetText(*net);
    ASSERT_TRUE(c.ok()) << c.status().ToString() << "\n" << *net;
    EXPECT_TRUE(SameFabric(*a, *c, all).ok()) << SameFabric(*a, *c, all).ToString();
  }
}

TEST(IbnetdiscoverTest, IbsimNetWithoutAddressesGetsIbsimGuidsDefaultsAndLids) {
  auto f = ParseNetText(
      "# hand-written ibsim net\n"
      "Switch\t8 \"Switch1\"\n"
      "[1]\t\"Hca1\"[1]\n"
      "[2]\t\"Hca2\"[2]\n"
      "[3]\t\"Switch2\"[3]\n"
      "[4]\t\"Switch2\"\n"  // no remote port: port 1, as ibsim assumes
      "\n"
      "Switch 8 \"Switch2\"\n"
      "[3]\t\"Switch1\"[3]\n"
      "[5]\n"  // a port line without a remote end
      "\n"
      "Hca\t2 \"Hca1\"\n"
      "[1]\t\"Switch1\"[1]\n"
      "\n"
      "Hca\t2 \"Hca2\"\n"
      "[2]\t\"Switch1\"[2]\n");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_links(), 4u);
  EXPECT_EQ(PeerOf(*f, "Switch1", 4), "Switch2[1]");
  EXPECT_FALSE(PortOf(*f, "Switch2", 5).link.valid());
  EXPECT_EQ(f->node(*f->FindByName("Switch1")).guid, 0x100000u);
  EXPECT_EQ(f->node(*f->FindByName("Switch2")).guid, 0x100001u);
  EXPECT_EQ(f->node(*f->FindByName("Hca1")).guid, 0x200000u);
  EXPECT_EQ(f->node(*f->FindByName("Hca2")).guid, 0x200003u);  // + 2 ports + 1
  EXPECT_EQ(PortOf(*f, "Switch1", 1).width, 4);
  EXPECT_EQ(PortOf(*f, "Switch1", 1).speed, LinkSpeed::kSdr);  // ibsim's default link
  // LIDs assigned: every switch and connected CA port has a distinct one.
  EXPECT_NE(f->node(*f->FindByName("Switch1")).lid, 0);
  EXPECT_NE(PortOf(*f, "Hca2", 2).lid, 0);
  EXPECT_EQ(PortOf(*f, "Hca2", 1).lid, 0);
}

TEST(IbnetdiscoverTest, PortAttributesAreIbsimMasks) {
  auto f = ParseNetText(
      "Switch 4 \"a\"\n"
      "[1] \"b\"[1] w=2 e=8\n"        // 4x NDR
      "[2] \"b\"[2] w=4 s=4\n"        // 8x (w is a mask) QDR
      "[3] \"b\"[3] s=0 # lid 2 12xEDR\n"  // attribute overrides the token's speed: QDR
      "[4] \"b\"[4] # \"x\" lid 2 2xHDR w=8\n"  // ibnetdiscover -f puts them in the comment
      "\n"
      "Switch 4 \"b\"\n");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(PortOf(*f, "a", 1).width, 4);
  EXPECT_EQ(PortOf(*f, "a", 1).speed, LinkSpeed::kNdr);
  EXPECT_EQ(PortOf(*f, "a", 2).width, 8);
  EXPECT_EQ(PortOf(*f, "a", 2).speed, LinkSpeed::kQdr);
  EXPECT_EQ(PortOf(*f, "a", 3).width, 12);
  EXPECT_EQ(PortOf(*f, "a", 3).speed, LinkSpeed::kQdr);
  EXPECT_EQ(PortOf(*f, "a", 4).width, 12);
  EXPECT_EQ(PortOf(*f, "a", 4).speed, LinkSpeed::kHdr);
  EXPECT_EQ(PortOf(*f, "b", 4).width, 12);

  auto bad = ParseNetText("Switch 4 \"a\"\n[1] \"b\"[1] w=0\n\nSwitch 4 \"b\"\n");
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("t.net:2:"));
  EXPECT_THAT(bad.status().message(), HasSubstr("LinkWidth mask"));
}

TEST(IbnetdiscoverTest, UnknownSpeedTokenWarnsAndKeepsTheWidth) {
  std::vector<std::string> warnings;
  auto f = ParseNetText("Switch 4 \"a\"\n[1] \"b\"[1] # \"b\" lid 3 4x???\n\nSwitch 4 \"b\"\n", &warnings);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(PortOf(*f, "a", 1).width, 4);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("t.net:2: unknown link width/speed '4x??" "?'"));
}

TEST(IbnetdiscoverTest, MalformedInputNamesFileLineAndExpectation) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"Switch 4 \"a\"\n[1] \"nowhere\"[1]\n", "t.net:2: port 1 of 'a' links to 'nowhere', which has no record"},
      {"Switch 4 \"a\"\n[5] \"a\"[1]\n", "t.net:2: port 5 is outside 1..4 of 'a'"},
      {"Switch 4 \"a\"\n[1] \"b\"[9]\n\nCa 2 \"b\"\n", "t.net:2: 'b' has ports 1..2, not port 9"},
      {"Switch 4 \"a\"\n[1] \"b\"[1]\n[2] \"b\"[1]\n\nCa 1 \"b\"\n", "t.net:3: 'b'[1] is already linked to 'a'[1] (from t.net:2)"},
      {"Switch 4 \"a\"\n[1] \"b\"[1]\n[1] \"b\"[2]\n\nCa 2 \"b\"\n", "t.net:3: port 1 of 'a' is listed twice"},
      {"Switch 4 \"a\n", "t.net:1: expected a quoted node name"},
      {"Switch x \"a\"\n", "t.net:1: expected the port count after 'Switch'"},
      {"Switch 300 \"a\"\n", "t.net:1: port count 300 is outside 1..254"},
      {"\n[1] \"b\"[1]\n", "t.net:2: port line outside a node record"},
      {"Switch 4 \"a\"\n\nSwitch 4 \"a\"\n", "t.net:3: node 'a' already has a record at t.net:1"},
      {"Switch 4 \"a\"\nbogus line\n", "t.net:2: expected a node record"},
      {"Switch 4 \"a\"  # \"d\" base port 0 lid 70000 lmc 0\n", "t.net:1: LID 70000 is not a unicast LID"},
      {"Ca 2 \"h\"\n[1](zz) \"a\"[1]\n", "t.net:2: expected '(port GUID in hex)'"},
      {"Switch 4 \"a\"\n[1] \"a\"[1]\n", "t.net:2: port 1 of 'a' is linked to itself"},
      {"switchguid=\nSwitch 4 \"a\"\n", "t.net:1: expected a number"},
      {"switchguid=0x10\nSwitch 4 \"a\"\nswitchguid=0x10\nSwitch 4 \"b\"\n", "t.net:4: node 'b': GUID"},
      {"Switch 4 \"a\"\n[1] \"b\"[1] junk\n\nCa 1 \"b\"\n", "t.net:2: unexpected 'junk' in port line"},
      {"Switch 4 \"a\"\n[0] \"b\"[1]\n", "t.net:2: port 0 is a switch's management port"},
  };
  for (const Case& c : cases) {
    auto f = ParseNetText(c.text);
    ASSERT_FALSE(f.ok()) << c.text;
    EXPECT_THAT(f.status().message(), HasSubstr(c.want)) << c.text;
  }
  auto unimpl = ParseNetText("do Unlink \"a\"\n");
  EXPECT_EQ(unimpl.status().code(), StatusCode::kUnimplemented);
}

TEST(IbnetdiscoverTest, IncludesResolveRelativeToTheIncludingFile) {
  auto f = LoadNetFile("testdata/fabric/include/top.net", {});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->num_switches(), 2u);
  EXPECT_EQ(f->num_cas(), 2u);
  EXPECT_EQ(PeerOf(*f, "h2", 1), "sw1[2]");
  EXPECT_EQ(PortOf(*f, "sw1", 3).speed, LinkSpeed::kNdr);  // w=2 e=8 on one end only
  EXPECT_EQ(f->node(*f->FindByName("sw1")).guid, 0x100u);
  EXPECT_EQ(f->node(*f->FindByName("sw2")).guid, 0x101u);

  auto cycle = LoadNetFile("testdata/fabric/include/cycle_a.net", {});
  ASSERT_FALSE(cycle.ok());
  EXPECT_THAT(cycle.status().message(), HasSubstr("include cycle"));
  EXPECT_THAT(cycle.status().message(), HasSubstr("cycle_b.net:1"));

  // From a string there is nothing to include from unless a reader is given.
  EXPECT_THAT(ParseNetText("include \"x.net\"\n").status().message(), HasSubstr("t.net:1: include"));
  std::map<std::string, std::string> files = {{"dir/x.net", "Switch 2 \"s\"\n"}};
  NetParseOptions o;
  o.source_name = "dir/main.net";
  o.read_include = [&](const std::string& p) -> StatusOr<std::string> {
    auto it = files.find(p);
    if (it == files.end()) return Status::NotFound("no " + p);
    return it->second;
  };
  auto g = ParseNet("include \"x.net\"\n", o);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->num_switches(), 1u);
  auto missing = ParseNet("include \"y.net\"\n", o);
  EXPECT_THAT(missing.status().message(), HasSubstr("dir/main.net:1: include \"y.net\""));
}

TEST(IbnetdiscoverTest, ALinkWhoseEndsDisagreeOnRateKeepsBothAndIsListed) {
  std::vector<std::string> warnings;
  NetParseOptions o;
  o.warnings = &warnings;
  auto f = LoadNetFile("testdata/fabric/rate_mismatch.topo", o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const Port& sw = PortOf(*f, "S-0002c90300002000", 2);
  const Port& ca = PortOf(*f, "H-0002c90300001002", 1);
  EXPECT_EQ(sw.speed, LinkSpeed::kQdr);
  EXPECT_EQ(ca.speed, LinkSpeed::kDdr);
  EXPECT_DOUBLE_EQ(f->link_gbps(sw.link), 4 * LaneGbps(LinkSpeed::kDdr));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("rate_mismatch.topo:27:"));
  EXPECT_THAT(warnings[0], HasSubstr("4xDDR here but 4xQDR at"));
  auto m = RateMismatches(*f);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], "'S-0002c90300002000'[2] 4xQDR <-> 'H-0002c90300001002'[1] 4xDDR: the ends "
                  "disagree on rate; the link runs at 4xDDR");
  // Written and read back, the mismatch survives; a plan with it is not the same fabric as one
  // whose link is 4xDDR at both ends.
  auto text = WriteIbnetdiscover(*f);
  ASSERT_TRUE(text.ok());
  auto back = ParseNet(*text, {});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(RateMismatches(*back), m);
  std::string both_ddr = *text;
  size_t at = both_ddr.find("lid 3 4xQDR");
  ASSERT_NE(at, std::string::npos);
  both_ddr.replace(at, 11, "lid 3 4xDDR");
  auto ddr = ParseNet(both_ddr, {});
  ASSERT_TRUE(ddr.ok()) << ddr.status().ToString();
  EXPECT_TRUE(RateMismatches(*ddr).empty());
  Status same = SameFabric(*f, *ddr);
  EXPECT_FALSE(same.ok());
  EXPECT_THAT(same.message(), HasSubstr("node 'S-0002c90300002000' port 2: rate 4xQDR vs 4xDDR"));
}

TEST(IbnetdiscoverTest, LevelHintsSetSwitchLevels) {
  const char* net = R"(
Switch 4 "sw"
# gpool: level 1
[1] "h"[1]

Ca 1 "h"
# gpool: level 0
[1] "sw"[1]
)";
  std::vector<std::string> warnings;
  NetParseOptions o;
  o.warnings = &warnings;
  auto f = ParseNet(net, o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->node(*f->FindByName("sw")).level, 1);
  EXPECT_EQ(f->node(*f->FindByName("h")).level, -1);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("<input>:7: level hint outside a switch record; ignored"));
  // Other gpool comments and ordinary comments are comments.
  EXPECT_TRUE(ParseNet("Switch 2 \"sw\"\n# gpool: something else\n# level x\n", {}).ok());
  for (const char* bad : {"# gpool: level x", "# gpool: level 40", "# gpool: level 1 2"}) {
    auto r = ParseNet(std::string("Switch 2 \"sw\"\n") + bad + "\n", {});
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("<input>:2: expected '# gpool: level N'")) << bad;
  }
}

}  // namespace
}  // namespace gpool::fabric
