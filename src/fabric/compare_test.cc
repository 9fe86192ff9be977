#include "fabric/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fabric/test_fabrics.h"

namespace gpool::fabric {
namespace {

using ::testing::HasSubstr;

// The same small fabric, with one thing changed by `edit`.
Fabric Variant(const std::function<void(FabricBuilder&, std::vector<NodeId>&)>& edit) {
  FabricBuilder b;
  std::vector<NodeId> n;
  n.push_back(*b.AddNode({.type = NodeType::kSwitch, .name = "sw", .num_ports = 4, .guid = 0x10}));
  n.push_back(*b.AddNode({.type = NodeType::kCa, .name = "h1", .num_ports = 1, .guid = 0x20}));
  n.push_back(*b.AddNode({.type = NodeType::kCa, .name = "h2", .num_ports = 1, .guid = 0x30}));
  edit(b, n);
  return *b.Build();
}

void Standard(FabricBuilder& b, std::vector<NodeId>& n) {
  (void)b.AddLink(n[0], 1, n[1], 1);
  (void)b.AddLink(n[0], 2, n[2], 1);
}

TEST(CompareTest, IdenticalFabricsAreSame) {
  Fabric a = testing::SmallFatTree();
  Fabric b = testing::SmallFatTree();
  EXPECT_TRUE(SameFabric(a, b).ok());
  EXPECT_TRUE(SameFabric(Variant(Standard), Variant(Standard)).ok());
}

TEST(CompareTest, NodeOrderDoesNotMatter) {
  FabricBuilder b;
  NodeId h2 = *b.AddNode({.type = NodeType::kCa, .name = "h2", .num_ports = 1, .guid = 0x30});
  NodeId sw = *b.AddNode({.type = NodeType::kSwitch, .name = "sw", .num_ports = 4, .guid = 0x10});
  NodeId h1 = *b.AddNode({.type = NodeType::kCa, .name = "h1", .num_ports = 1, .guid = 0x20});
  ASSERT_TRUE(b.AddLink(h2, 1, sw, 2).ok());
  ASSERT_TRUE(b.AddLink(sw, 1, h1, 1).ok());
  // LIDs follow node order, so compare without them.
  CompareOptions o;
  o.lids = false;
  Status s = SameFabric(Variant(Standard), *b.Build(), o);
  EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(CompareTest, NamesTheFirstDifference) {
  Fabric base = Variant(Standard);
  auto diff = [&](const Fabric& other) { return SameFabric(base, other).message(); };
  EXPECT_THAT(diff(Variant([](FabricBuilder& b, std::vector<NodeId>& n) {
                (void)b.AddLink(n[0], 1, n[1], 1);
                (void)b.AddLink(n[0], 3, n[2], 1);
              })),
              HasSubstr("node 'sw' port 2: linked to 'h2'[1] vs unconnected"));
  EXPECT_THAT(diff(Variant([](FabricBuilder& b, std::vector<NodeId>& n) {
                (void)b.AddLink(n[0], 1, n[1], 1);
                (void)b.AddLink(n[0], 2, n[2], 1, LinkSpec{4, LinkSpeed::kHdr});
              })),
              HasSubstr("node 'sw' port 2: rate 4xNDR vs 4xHDR"));
  EXPECT_THAT(diff(Variant([](FabricBuilder& b, std::vector<NodeId>& n) {
                Standard(b, n);
                (void)b.SetPortAddress(n[1], 1, 0x99, 0);
              })),
              HasSubstr("node 'h1' port 1: GUID"));
  EXPECT_THAT(diff(Variant([](FabricBuilder& b, std::vector<NodeId>& n) {
                Standard(b, n);
                n.push_back(*b.AddNode({.type = NodeType::kCa, .name = "h3", .num_ports = 1}));
              })),
              HasSubstr("3 nodes vs 4"));
  // A different switch GUID, and the option that ignores it.
  FabricBuilder b;
  NodeId sw = *b.AddNode({.type = NodeType::kSwitch, .name = "sw", .num_ports = 4, .guid = 0x11});
  NodeId h1 = *b.AddNode({.type = NodeType::kCa, .name = "h1", .num_ports = 1, .guid = 0x20});
  NodeId h2 = *b.AddNode({.type = NodeType::kCa, .name = "h2", .num_ports = 1, .guid = 0x30});
  (void)b.AddLink(sw, 1, h1, 1);
  (void)b.AddLink(sw, 2, h2, 1);
  Fabric other = *b.Build();
  EXPECT_THAT(diff(other), HasSubstr("node 'sw': GUID 0x0000000000000010 vs 0x0000000000000011"));
  CompareOptions no_guids;
  no_guids.guids = false;
  EXPECT_TRUE(SameFabric(base, other, no_guids).ok());
  EXPECT_EQ(SameFabric(base, other).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gpool::fabric

namespace gpool::fabric {
namespace {

Fabric WithSysimg(uint64_t sysimg) {
  FabricBuilder b;
  NodeId sw = *b.AddNode({.type = NodeType::kSwitch, .name = "sw", .num_ports = 2, .guid = 0x10,
                          .sysimg_guid = sysimg});
  NodeId h = *b.AddNode({.type = NodeType::kCa, .name = "h1", .num_ports = 1, .guid = 0x20});
  (void)b.AddLink(sw, 1, h, 1);
  return *b.Build();
}

TEST(CompareTest, UnknownSystemImageGuidMatchesOnlyWhenAsked) {
  EXPECT_FALSE(SameFabric(WithSysimg(0), WithSysimg(0x10)).ok());
  EXPECT_TRUE(SameFabric(WithSysimg(0), WithSysimg(0x10), {.unknown_sysimg_matches = true}).ok());
  EXPECT_TRUE(SameFabric(WithSysimg(0x10), WithSysimg(0), {.unknown_sysimg_matches = true}).ok());
  // Two known, different values still differ.
  EXPECT_FALSE(
      SameFabric(WithSysimg(0x11), WithSysimg(0x10), {.unknown_sysimg_matches = true}).ok());
}

}  // namespace
}  // namespace gpool::fabric
