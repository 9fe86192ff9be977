#include "agent/topology.h"

#include <gtest/gtest.h>

namespace gpool::agent {
namespace {

const std::string kXml = "testdata/agent/two_socket_gpus_hcas.xml";

std::vector<GpuInfo> Gpus(std::vector<std::string> bus_ids) {
  std::vector<GpuInfo> out;
  for (size_t i = 0; i < bus_ids.size(); ++i) {
    out.push_back({.index = static_cast<int>(i), .name = "H100", .uuid = "", .pci_bus_id = bus_ids[i]});
  }
  return out;
}

TEST(TopologyTest, NearestHcaByBusId) {
  // NVML order need not be bus order: give them shuffled.
  auto a = ComputeAffinity({.xml_path = kXml},
                           Gpus({"0000:a1:00.0", "0000:12:00.0", "0000:92:00.0", "0000:1e:00.0"}));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 4u);
  auto check = [&](int gpu, const char* hca, const char* dist, int numa) {
    const AffinityInfo& x = (*a)[gpu];
    EXPECT_EQ(x.gpu, gpu);
    EXPECT_EQ(x.hca, hca) << "gpu " << gpu;
    EXPECT_EQ(x.distance, dist) << "gpu " << gpu;
    EXPECT_EQ(x.numa_node, numa) << "gpu " << gpu;
  };
  check(0, "mlx5_1", "NODE", 1);  // own host bridge, same package as mlx5_1
  check(1, "mlx5_0", "PIX", 0);   // same PCIe switch
  check(2, "mlx5_1", "PIX", 1);
  check(3, "mlx5_0", "PHB", 0);   // same host bridge, not behind the switch
  EXPECT_EQ((*a)[1].pci_bus_id, "0000:12:00.0");
}

TEST(TopologyTest, EmulatedGpusTakeTheTopologysGpusInOrder) {
  auto a = ComputeAffinity({.xml_path = kXml}, Gpus({"", ""}));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 2u);
  EXPECT_EQ((*a)[0].pci_bus_id, "0000:12:00.0");
  EXPECT_EQ((*a)[0].distance, "PIX");
  EXPECT_EQ((*a)[1].pci_bus_id, "0000:1e:00.0");
}

TEST(TopologyTest, UnknownGpuAndBadFile) {
  auto a = ComputeAffinity({.xml_path = kXml}, Gpus({"0000:55:00.0"}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)[0].hca, "");
  EXPECT_EQ((*a)[0].numa_node, -1);
  auto bad = ComputeAffinity({.xml_path = "testdata/agent/meminfo"}, Gpus({""}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("testdata/agent/meminfo"), std::string::npos);
}

TEST(TopologyTest, LiveMachineLoads) {
  // No GPUs or HCAs here: every GPU gets an unknown affinity, but hwloc must load.
  auto a = ComputeAffinity({}, Gpus({""}));
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_EQ(a->size(), 1u);
}

}  // namespace
}  // namespace gpool::agent
