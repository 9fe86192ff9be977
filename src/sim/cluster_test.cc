#include "sim/cluster.h"

#include <gtest/gtest.h>

#include "common/file.h"
#include "fabric/model.h"

namespace gpool::sim {
namespace {

TEST(OpenbNodes, ParsesSample) {
  auto text = ReadFile("testdata/sim/openb_nodes_sample.csv");
  ASSERT_TRUE(text.ok());
  auto c = ParseOpenbNodes(*text, "nodes.csv", {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hosts.size(), 21u);
  EXPECT_EQ(c->hosts[0].name, "openb-node-0000");
  EXPECT_EQ(c->hosts[0].gpus, 2);
  EXPECT_EQ(c->hosts[0].model, "P100");
  EXPECT_EQ(c->hosts[0].cpu_milli, 64000);
  EXPECT_EQ(c->leaf_names.size(), 1u);  // 21 hosts fit one synthetic leaf of 32
  EXPECT_TRUE(c->Validate().ok());
}

TEST(OpenbNodes, RejectsBadRows) {
  auto bad = ParseOpenbNodes("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,10,99,T4\n", "n.csv", {});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("n.csv:2: field 'gpu'"), std::string::npos);
  auto hdr = ParseOpenbNodes("sn,gpu\nn0,1\n", "n.csv", {});
  ASSERT_FALSE(hdr.ok());
  EXPECT_NE(hdr.status().message().find("cpu_milli"), std::string::npos);
}

TEST(ClosCsv, LeavesArePswAswPairsAndPodsArePsw) {
  auto text = ReadFile("testdata/sim/lingjun_sample.csv");
  ASSERT_TRUE(text.ok());
  ClosCsvOptions o;  // 8 GPUs per host, 1600 Gb/s hosts, leaf 1:1, pod 2:1
  auto c = ParseClosCsv(*text, "topo.csv", o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->hosts.size(), 40u);
  EXPECT_EQ(c->total_gpus(), 320);
  EXPECT_EQ(c->leaf_names.size(), 9u);  // S14, S2, S6 under each of P8, P10, P12
  EXPECT_EQ(c->pod_names.size(), 3u);
  // Hosts are grouped by leaf, and every leaf's uplink is its hosts' NICs (1:1).
  std::vector<int> per_leaf(c->leaf_names.size(), 0);
  for (size_t i = 0; i < c->hosts.size(); ++i) {
    ++per_leaf[c->hosts[i].leaf];
    if (i > 0) {
      EXPECT_LE(c->hosts[i - 1].pod, c->hosts[i].pod);
    }
  }
  for (size_t l = 0; l < per_leaf.size(); ++l) {
    EXPECT_DOUBLE_EQ(c->leaf_uplink_gbps[l], per_leaf[l] * 1600.0);
  }
  double sum_pod = 0;
  for (double g : c->pod_uplink_gbps) sum_pod += g;
  EXPECT_DOUBLE_EQ(sum_pod, 40 * 1600.0 / 2);
}

TEST(ClosCsv, RejectsDuplicatesAndEmptyFields) {
  auto dup = ParseClosCsv("ip,DSW,PSW,ASW\na,G,P,S\na,G,P,S\n", "t.csv", {});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("t.csv:3"), std::string::npos);
  auto empty = ParseClosCsv("ip,DSW,PSW,ASW\na,G,,S\n", "t.csv", {});
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("'PSW'"), std::string::npos);
}

TEST(NodeFormat, Detects) {
  EXPECT_EQ(*DetectNodeFormat("sn,cpu_milli\n", "x"), "openb");
  EXPECT_EQ(*DetectNodeFormat("ip,DSW,PSW,ASW\n", "x"), "clos-csv");
  EXPECT_FALSE(DetectNodeFormat("foo,bar\n", "x").ok());
}

TEST(ClusterFromFabric, LeavesFromSwitchesAndCapacitiesFromLinks) {
  using fabric::NodeType;
  fabric::FabricBuilder b;
  auto spine = *b.AddNode({.type = NodeType::kSwitch, .name = "spine", .num_ports = 4});
  auto l0 = *b.AddNode({.type = NodeType::kSwitch, .name = "leaf0", .num_ports = 4});
  auto l1 = *b.AddNode({.type = NodeType::kSwitch, .name = "leaf1", .num_ports = 4});
  ASSERT_TRUE(b.AddLink(l0, 4, spine, 1).ok());
  ASSERT_TRUE(b.AddLink(l1, 4, spine, 2).ok());
  for (int i = 0; i < 4; ++i) {
    auto h = *b.AddNode({.type = NodeType::kCa, .name = "h" + std::to_string(i), .num_ports = 1});
    ASSERT_TRUE(b.AddLink(h, 1, i < 2 ? l0 : l1, 1 + i % 2).ok());
  }
  auto f = b.Build();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto c = ClusterFromFabric(*f, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->hosts.size(), 4u);
  EXPECT_EQ(c->leaf_names.size(), 2u);
  EXPECT_EQ(c->hosts[0].leaf, c->hosts[1].leaf);
  EXPECT_NE(c->hosts[1].leaf, c->hosts[2].leaf);
  // 4x NDR = 400 Gb/s per link: each host NIC, and each leaf's single uplink.
  EXPECT_DOUBLE_EQ(c->hosts[0].nic_gbps, 400);
  EXPECT_DOUBLE_EQ(c->leaf_uplink_gbps[0], 400);
  EXPECT_EQ(c->total_gpus(), 32);
  EXPECT_TRUE(c->Validate().ok());
}

}  // namespace
}  // namespace gpool::sim
