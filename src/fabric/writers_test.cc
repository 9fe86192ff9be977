#include "fabric/writers.h"

#include <algorithm>
#include <regex.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "fabric/compare.h"
#include "fabric/generators.h"
#include "fabric/ibnetdiscover.h"
#include "fabric/test_fabrics.h"

namespace gpool::fabric {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

StatusOr<Fabric> Reparse(const std::string& text) {
  NetParseOptions o;
  o.source_name = "written.net";
  return ParseNet(text, o);
}

TEST(WritersTest, HandmadeFatTreeRoundTripsThroughIbnetdiscoverAndIbsim) {
  Fabric a = testing::SmallFatTree(2, 3, 4);
  CompareOptions all;
  all.descriptions = true;
  for (int dialect = 0; dialect < 2; ++dialect) {
    auto text = dialect == 0 ? WriteIbnetdiscover(a) : WriteIbsimNet(a);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    auto b = Reparse(*text);
    ASSERT_TRUE(b.ok()) << b.status().ToString() << "\n" << *text;
    Status same = SameFabric(a, *b, all);
    EXPECT_TRUE(same.ok()) << same.ToString() << "\n" << *text;
  }
}

TEST(WritersTest, GeneratedFatTreeAndTorusRoundTrip) {
  FatTreeOptions ft;
  ft.levels = 3;
  ft.radix = 8;
  ft.pods = 4;
  auto tree = GenerateFatTree(ft);
  ASSERT_TRUE(tree.ok()) << tree.status().ToString();
  TorusOptions to;
  to.dims = {3, 3, 2};
  to.hcas_per_switch = 2;
  auto torus = GenerateTorus(to);
  ASSERT_TRUE(torus.ok()) << torus.status().ToString();
  CompareOptions all;
  all.descriptions = true;
  for (const Fabric* a : {&*tree, &*torus}) {
    for (int dialect = 0; dialect < 2; ++dialect) {
      auto text = dialect == 0 ? WriteIbnetdiscover(*a) : WriteIbsimNet(*a);
      ASSERT_TRUE(text.ok()) << text.status().ToString();
      auto b = Reparse(*text);
      ASSERT_TRUE(b.ok()) << b.status().ToString();
      Status same = SameFabric(*a, *b, all);
      EXPECT_TRUE(same.ok()) << same.ToString();
    }
  }
  // The generated tree's levels drive the Slurm tree: cores list aggregation switches.
  auto conf = WriteSlurmTopology(*tree);
  ASSERT_TRUE(conf.ok());
  EXPECT_THAT(*conf, HasSubstr("SwitchName=leaf-p0-0 Nodes=host[0001-0004]\n"));
  EXPECT_THAT(*conf, HasSubstr("SwitchName=core-0 Switches="));
}

TEST(WritersTest, IbnetdiscoverTextLooksLikeARealDump) {
  Fabric a = testing::SmallFatTree(1, 1, 1);
  auto text = WriteIbnetdiscover(a);
  ASSERT_TRUE(text.ok());
  const Node& sw = a.node(*a.FindByName("leaf001"));
  const Node& ca = a.node(*a.FindByName("node001 HCA-1"));
  const Port& cp = a.port(PortId(ca.first_port));
  EXPECT_THAT(*text, HasSubstr(fmt::format("switchguid=0x{:x}({:x})\nSwitch\t2 \"leaf001\"\t\t# "
                                           "\"leaf\" enhanced port 0 lid {} lmc 0\n",
                                           sw.guid, sw.guid, sw.lid)));
  EXPECT_THAT(*text, HasSubstr(fmt::format("[1]\t\"node001 HCA-1\"[1]({:x}) \t\t# \"node001 HCA-1\" "
                                           "lid {} 4xNDR\n", cp.guid, cp.lid)));
  EXPECT_THAT(*text, HasSubstr(fmt::format("caguid=0x{:x}\nCa\t1 \"node001 HCA-1\"", ca.guid)));
  EXPECT_THAT(*text, HasSubstr(fmt::format("[1]({:x}) \t\"leaf001\"[1]\t\t# lid {} lmc 0 \"leaf\" "
                                           "lid {} 4xNDR\n", cp.guid, cp.lid, sw.lid)));
}

TEST(WritersTest, IbsimPutsACaConnectedLeafFirstAndChecksNames) {
  Fabric a = testing::SmallFatTree(2, 2, 1);  // spines are added first
  auto net = WriteIbsimNet(a);
  ASSERT_TRUE(net.ok());
  size_t first_record = net->find("\nSwitch");
  ASSERT_NE(first_record, std::string::npos);
  EXPECT_THAT(net->substr(first_record), StartsWith("\nSwitch\t3 \"leaf001\""));
  IbsimWriteOptions o;
  o.sm_node = "spine2";
  net = WriteIbsimNet(a, o);
  ASSERT_TRUE(net.ok());
  EXPECT_THAT(net->substr(net->find("\nSwitch")), StartsWith("\nSwitch\t2 \"spine2\""));
  o.sm_node = "nope";
  EXPECT_EQ(WriteIbsimNet(a, o).status().code(), StatusCode::kNotFound);

  FabricBuilder b;
  (void)b.AddNode({.type = NodeType::kSwitch, .name = "bad#name", .num_ports = 1});
  Fabric bad = *b.Build();
  EXPECT_THAT(WriteIbsimNet(bad).status().message(), HasSubstr("reserves '#' and '@'"));
  EXPECT_TRUE(WriteIbnetdiscover(bad).ok());  // ibnetdiscover text can hold it
  FabricBuilder q;
  (void)q.AddNode({.type = NodeType::kSwitch, .name = "quo\"te", .num_ports = 1});
  EXPECT_THAT(WriteIbnetdiscover(*q.Build()).status().message(), HasSubstr("contains a quote"));
}

TEST(WritersTest, IbsimKeepsEqualsSignsOutOfPortComments) {
  FabricBuilder b;
  NodeId s = *b.AddNode({.type = NodeType::kSwitch, .name = "s", .num_ports = 1, .description = "w=9 s=9"});
  NodeId h = *b.AddNode({.type = NodeType::kCa, .name = "h", .num_ports = 1});
  ASSERT_TRUE(b.AddLink(s, 1, h, 1).ok());
  auto net = WriteIbsimNet(*b.Build());
  ASSERT_TRUE(net.ok());
  EXPECT_THAT(*net, HasSubstr("\"w_9 s_9\" lid"));
  auto back = Reparse(*net);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->node(*back->FindByName("s")).description, "w=9 s=9");  // headers keep it
}

TEST(WritersTest, CompressHostlist) {
  EXPECT_EQ(CompressHostlist({"node003", "node001", "node002"}), "node[001-003]");
  EXPECT_EQ(CompressHostlist({"node001", "node002", "node004", "node005", "node007"}),
            "node[001-002,004-005,007]");
  EXPECT_EQ(CompressHostlist({"n9", "n10", "n11"}), "n[9-11]");
  EXPECT_EQ(CompressHostlist({"n09", "n10"}), "n[09-10]");
  EXPECT_EQ(CompressHostlist({"n009", "n10"}), "n[009,10]");  // widths differ, one padded
  EXPECT_EQ(CompressHostlist({"alpha", "node5", "beta"}), "alpha,beta,node5");
  EXPECT_EQ(CompressHostlist({"a1", "b1", "a2", "a2"}), "a[1-2],b1");
  EXPECT_EQ(CompressHostlist({}), "");
}

TEST(WritersTest, SlurmHostNames) {
  Node n;
  n.name = "node001 HCA-1";
  EXPECT_EQ(SlurmHostName(n), "node001");
  n.name = "H-0002c902002789ac";
  n.description = "compute-00-01 HCA-1";
  EXPECT_EQ(SlurmHostName(n), "compute-00-01");
  n.description = "gpu7 mlx5_3";
  EXPECT_EQ(SlurmHostName(n), "gpu7");
  n.description = "MT23108 InfiniHost Mellanox Technologies";  // names a model, not a host
  EXPECT_EQ(SlurmHostName(n), "H-0002c902002789ac");
  n.name = "host0001 mlx5_0";
  n.description = "";
  EXPECT_EQ(SlurmHostName(n), "host0001");
}

TEST(WritersTest, SlurmTopologyOfAFatTree) {
  Fabric a = testing::SmallFatTree(2, 3, 2);
  auto conf = WriteSlurmTopology(a);
  ASSERT_TRUE(conf.ok()) << conf.status().ToString();
  EXPECT_THAT(*conf, HasSubstr("\nSwitchName=leaf001 Nodes=node[001-002]\n"
                               "SwitchName=leaf002 Nodes=node[003-004]\n"
                               "SwitchName=leaf003 Nodes=node[005-006]\n"
                               "SwitchName=spine1 Switches=leaf[001-003]\n"
                               "SwitchName=spine2 Switches=leaf[001-003]\n"));
}

TEST(WritersTest, SlurmTopologyDerivesLevelsAndHostsFromADump) {
  auto f = LoadNetFile("testdata/fabric/jabl_3.topo", {});
  ASSERT_TRUE(f.ok());
  auto conf = WriteSlurmTopology(*f);
  ASSERT_TRUE(conf.ok());
  // Both switches have CAs, so both are leaves; r-ufm101's two HCAs make one host.
  EXPECT_THAT(*conf, HasSubstr("SwitchName=S-e41d2d030003e470 Nodes=r-ufm[111,216]\n"));
  EXPECT_THAT(*conf, HasSubstr("SwitchName=S-f4521403005764b0 Nodes=r-ufm[96,100-101]\n"));
}

// Fabric names come from files and devices, not through gpool's name checks, so the writers of
// text formats escape or replace what their format gives meaning to (issue 29). Each output is
// read back: no name adds a statement or a line.
Fabric HostileFabric() {
  FabricBuilder b;
  NodeId s = *b.AddNode({.type = NodeType::kSwitch,
                         .name = "sw\"]; evil -- x [label=\"\\",
                         .num_ports = 2,
                         .level = 0});
  NodeId h1 = *b.AddNode({.type = NodeType::kCa,
                          .name = "h1\r\n} graph g {",
                          .description = "evil\nSwitchName=x HCA-1"});
  NodeId h2 = *b.AddNode({.type = NodeType::kCa, .name = "h2\x01\x7f", .description = "ok2 mlx5_0"});
  EXPECT_TRUE(b.AddLink(s, 1, h1, 1).ok());
  EXPECT_TRUE(b.AddLink(s, 2, h2, 1).ok());
  return *b.Build();
}

TEST(WritersTest, DotQuotesEveryNameSoItStaysOneId) {
  Fabric f = HostileFabric();
  std::string dot = WriteDot(f);
  // Tokenise: quoted strings (DOT escapes only \" inside them) become Q; decode ours to compare.
  std::string skeleton;
  std::vector<std::string> ids;
  for (char ch : dot) {  // line breaks only between statements; no other control byte at all
    unsigned char c = static_cast<unsigned char>(ch);
    if (c != '\n') {
      EXPECT_TRUE(c >= 0x20 && c != 0x7f) << "raw control byte " << int(c) << " in\n" << dot;
    }
  }
  for (size_t i = 0; i < dot.size(); ++i) {
    if (dot[i] != '"') {
      skeleton += dot[i];
      continue;
    }
    std::string v;
    for (++i; i < dot.size() && dot[i] != '"'; ++i) {
      if (dot[i] == '\\' && i + 1 < dot.size()) {
        char e = dot[++i];
        if (e == 'n') {
          v += '\n';
        } else if (e == 'x') {
          v += static_cast<char>(std::stoi(dot.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          v += e;
        }
      } else {
        v += dot[i];
      }
    }
    ids.push_back(v);
    skeleton += 'Q';
  }
  size_t nodes = 0, edges = 0;
  for (size_t p = skeleton.find("Q [shape="); p != std::string::npos; p = skeleton.find("Q [shape=", p + 1)) ++nodes;
  for (size_t p = skeleton.find("Q -- Q"); p != std::string::npos; p = skeleton.find("Q -- Q", p + 1)) ++edges;
  EXPECT_EQ(nodes, f.num_nodes()) << skeleton;
  EXPECT_EQ(edges, f.num_links()) << skeleton;
  EXPECT_EQ(std::count(skeleton.begin(), skeleton.end(), '{'), 2) << skeleton;  // graph + one rank
  for (uint32_t i = 0; i < f.num_nodes(); ++i) {
    EXPECT_NE(std::find(ids.begin(), ids.end(), f.node(NodeId(i)).name), ids.end())
        << "name " << i << " does not read back";
  }
}

TEST(WritersTest, SlurmTopologyLinesHoldOnlySlurmNames) {
  auto conf = WriteSlurmTopology(HostileFabric(), {.switch_prefix = "p\n"});
  ASSERT_TRUE(conf.ok()) << conf.status().ToString();
  // POSIX ERE rather than std::regex: GCC 12's -Wmaybe-uninitialized misfires inside
  // std::regex's std::function at -O1 with ASan (the sanitizer tree builds with -Werror).
  regex_t line;
  ASSERT_EQ(regcomp(&line,
                    "^SwitchName=[A-Za-z0-9._-]+( Switches=[][A-Za-z0-9._,-]+)?"
                    "( Nodes=[][A-Za-z0-9._,-]+)?$",
                    REG_EXTENDED | REG_NOSUB),
            0);
  int switches = 0;
  for (auto l : Split(*conf, '\n')) {
    if (l.empty() || l[0] == '#') continue;
    EXPECT_EQ(regexec(&line, std::string(l).c_str(), 0, nullptr, 0), 0) << l;
    ++switches;
  }
  regfree(&line);
  EXPECT_EQ(switches, 1) << *conf;
  EXPECT_THAT(*conf, HasSubstr("Nodes=evil_SwitchName_x,ok2\n"));
}

TEST(WritersTest, DotAndJson) {
  Fabric a = testing::SmallFatTree(1, 2, 1);
  std::string dot = WriteDot(a);
  EXPECT_THAT(dot, StartsWith("graph fabric {"));
  EXPECT_THAT(dot, HasSubstr("\"leaf001\" [shape=box"));
  EXPECT_THAT(dot, HasSubstr("\"node001 HCA-1\" [shape=ellipse"));
  EXPECT_THAT(dot, HasSubstr("{ rank=same; \"leaf001\"; \"leaf002\"; }"));
  size_t edges = 0;
  for (size_t p = dot.find(" -- "); p != std::string::npos; p = dot.find(" -- ", p + 1)) ++edges;
  EXPECT_EQ(edges, a.num_links());

  auto j = nlohmann::json::parse(WriteJson(a));
  EXPECT_EQ(j["switches"], 3);
  EXPECT_EQ(j["cas"], 2);
  EXPECT_EQ(j["links"], 4);
  ASSERT_EQ(j["nodes"].size(), 5u);
  ASSERT_EQ(j["edges"].size(), 4u);
  EXPECT_EQ(j["nodes"][0]["name"], "spine1");
  EXPECT_EQ(j["nodes"][0]["type"], "Switch");
  EXPECT_EQ(j["nodes"][0]["level"], 1);
  EXPECT_EQ(j["edges"][0]["speed"], "NDR");
  EXPECT_EQ(j["edges"][0]["gbps"], 400.0);
}

}  // namespace
}  // namespace gpool::fabric
