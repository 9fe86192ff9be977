#include "agent/node_agent.h"

#include <gtest/gtest.h>

#include "agent/verbs.h"

namespace gpool::agent {
namespace {

// A fixture HCA source: what VerbsHcas would report on a node with two NDR ports.
class FixedHcas : public HcaSource {
 public:
  StatusOr<std::vector<HcaPortInfo>> List() override {
    std::vector<HcaPortInfo> out;
    for (int i = 0; i < 2; ++i) {
      HcaPortInfo h;
      h.device = "mlx5_" + std::to_string(i);
      h.guid = FormatGuid(0x0002c90300000010ull + i);
      h.lid = 17 + i;
      h.rate = IbRate(2, 128, &h.rate_gbps);
      h.state = IbPortState(i == 0 ? 4 : 1);
      out.push_back(h);
    }
    return out;
  }
};

// A fixture GPU source with PCI bus ids from the hwloc fixture.
class FixedGpus : public GpuSource {
 public:
  std::string kind() const override { return "nvml"; }
  StatusOr<std::vector<GpuInfo>> List() override {
    return std::vector<GpuInfo>{
        {.index = 0, .name = "NVIDIA H100", .uuid = "GPU-0", .pci_bus_id = "0000:12:00.0", .memory_bytes = 80ull << 30},
        {.index = 1, .name = "NVIDIA H100", .uuid = "GPU-1", .pci_bus_id = "0000:92:00.0", .memory_bytes = 80ull << 30}};
  }
  std::vector<GpuSample> Sample() override { return {}; }
};

TEST(NodeAgentTest, InventoryGoesIntoRegister) {
  NodeAgentOptions o;
  o.name = "node7";
  o.hwloc_xml = "testdata/agent/two_socket_gpus_hcas.xml";
  o.proc_dir = "testdata/agent";
  o.resume_cmd = "ipmitool -H {node}-bmc chassis power on";
  FixedGpus gpus;
  FixedHcas hcas;
  auto inv = Discover(o, &gpus, &hcas);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  v1::Node n;
  FillNodeSpec(*inv, o, &n);
  EXPECT_EQ(n.name(), "node7");
  EXPECT_EQ(n.gpus(), 2);
  EXPECT_EQ(n.gpu_model(), "NVIDIA H100");
  EXPECT_EQ(n.gpu_memory_bytes(), 80ull << 30);
  EXPECT_EQ(n.cpu_milli(), 2000);
  EXPECT_EQ(n.memory_bytes(), 24683620ull * 1024);
  EXPECT_FALSE(n.emulated_gpus());
  EXPECT_TRUE(n.power_proxy());
  ASSERT_EQ(n.gpu_uuids_size(), 2);
  EXPECT_EQ(n.gpu_uuids(1), "GPU-1");
  ASSERT_EQ(n.hcas_size(), 2);
  EXPECT_EQ(n.hcas(0).device(), "mlx5_0");
  EXPECT_EQ(n.hcas(0).guid(), "0x0002c90300000010");
  EXPECT_EQ(n.hcas(0).lid(), 17);
  EXPECT_EQ(n.hcas(0).rate(), "4xNDR");
  EXPECT_EQ(n.hcas(0).rate_gbps(), 400);
  EXPECT_EQ(n.hcas(0).state(), "active");
  EXPECT_EQ(n.hcas(1).state(), "down");
  ASSERT_EQ(n.affinity_size(), 2);
  EXPECT_EQ(n.affinity(0).hca(), "mlx5_0");
  EXPECT_EQ(n.affinity(0).distance(), "PIX");
  EXPECT_EQ(n.affinity(1).hca(), "mlx5_1");
  EXPECT_EQ(n.affinity(1).numa_node(), 1);
}

TEST(NodeAgentTest, EmulatedAndNoGpus) {
  NodeAgentOptions o;
  o.name = "cpu1";
  o.emulated_gpus = 3;
  o.emulated_gpu_model = "EMU";
  std::string why;
  auto g = MakeGpuSource(o, &why);
  ASSERT_NE(g, nullptr);
  auto inv = Discover(o, g.get(), nullptr);
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  v1::Node n;
  FillNodeSpec(*inv, o, &n);
  EXPECT_EQ(n.gpus(), 3);
  EXPECT_EQ(n.gpu_model(), "EMU");
  EXPECT_TRUE(n.emulated_gpus());
  EXPECT_FALSE(n.power_proxy());
  EXPECT_EQ(g->Sample().size(), 3u);
  // No GPU source at all (no NVML here): a 0-GPU node.
  inv = Discover(o, nullptr, nullptr);
  ASSERT_TRUE(inv.ok());
  FillNodeSpec(*inv, o, &n);
  EXPECT_EQ(n.gpus(), 0);
  EXPECT_GE(n.cpu_milli(), 1000);  // this machine's /proc
}

TEST(NodeAgentTest, NvmlAbsentMeansNoGpus) {
  std::string why;
  auto g = MakeGpuSource(NodeAgentOptions{}, &why);
  if (g != nullptr) GTEST_SKIP() << "this machine has NVML";
  EXPECT_NE(why.find("libnvidia-ml.so.1"), std::string::npos) << why;
}

TEST(NodeAgentTest, BadHwlocFixtureIsAnError) {
  NodeAgentOptions o;
  o.emulated_gpus = 1;
  o.hwloc_xml = "testdata/agent/no-such.xml";
  std::string why;
  auto g = MakeGpuSource(o, &why);
  auto inv = Discover(o, g.get(), nullptr);
  ASSERT_FALSE(inv.ok());
  EXPECT_NE(inv.status().message().find("no-such.xml"), std::string::npos);
}

}  // namespace
}  // namespace gpool::agent
