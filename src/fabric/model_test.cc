#include "fabric/model.h"

#include <gtest/gtest.h>

namespace gpool::fabric {
namespace {

// Two switches, each with two CAs, joined by one link.
Fabric TwoLeaves() {
  FabricBuilder b;
  NodeId s1 = *b.AddNode({.type = NodeType::kSwitch, .name = "sw1", .num_ports = 4});
  NodeId s2 = *b.AddNode({.type = NodeType::kSwitch, .name = "sw2", .num_ports = 4});
  for (int i = 0; i < 4; ++i) {
    NodeId h = *b.AddNode({.type = NodeType::kCa, .name = "h" + std::to_string(i), .num_ports = 1});
    EXPECT_TRUE(b.AddLink(i < 2 ? s1 : s2, static_cast<uint16_t>(i % 2 + 1), h, 1).ok());
  }
  EXPECT_TRUE(b.AddLink(s1, 4, s2, 4, {.width = 4, .speed = LinkSpeed::kHdr}).ok());
  return *b.Build();
}

TEST(ModelTest, BuildsCsrAdjacencyAndLids) {
  Fabric f = TwoLeaves();
  EXPECT_EQ(f.num_switches(), 2u);
  EXPECT_EQ(f.num_cas(), 4u);
  EXPECT_EQ(f.num_links(), 5u);
  NodeId s1 = *f.FindByName("sw1");
  ASSERT_EQ(f.degree(s1), 3u);
  // Port order: ports 1, 2 to hosts, port 4 to sw2.
  EXPECT_EQ(f.adj_begin(s1)[2].port, 4);
  EXPECT_EQ(f.adj_begin(s1)[2].peer, *f.FindByName("sw2"));
  EXPECT_DOUBLE_EQ(f.link_gbps(f.adj_begin(s1)[2].link), 200);
  // Every switch and connected CA port has a distinct LID.
  EXPECT_EQ(f.max_lid(), 6);
  for (Lid l = 1; l <= 6; ++l) EXPECT_TRUE(f.FindByLid(l).has_value()) << l;
  EXPECT_EQ(f.FindByGuid(f.node(s1).guid), s1);
}

TEST(ModelTest, RejectsConflictingLinks) {
  FabricBuilder b;
  NodeId s = *b.AddNode({.type = NodeType::kSwitch, .name = "s", .num_ports = 2});
  NodeId h1 = *b.AddNode({.name = "h1"});
  NodeId h2 = *b.AddNode({.name = "h2"});
  ASSERT_TRUE(b.AddLink(s, 1, h1, 1).ok());
  EXPECT_TRUE(b.AddLink(h1, 1, s, 1).ok());  // the same link from its other end
  Status st = b.AddLink(s, 1, h2, 1);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("s[1] is already linked to h1[1]"), std::string::npos) << st.message();
  EXPECT_FALSE(b.AddLink(s, 3, h2, 1).ok());  // no port 3
  EXPECT_EQ(b.AddNode({.name = "h1"}).status().code(), StatusCode::kAlreadyExists);
}

TEST(ModelTest, DuplicateLidsAreAnError) {
  FabricBuilder b;
  NodeId s = *b.AddNode({.type = NodeType::kSwitch, .name = "s", .num_ports = 2, .lid = 5});
  NodeId h = *b.AddNode({.name = "h"});
  ASSERT_TRUE(b.AddLink(s, 1, h, 1).ok());
  ASSERT_TRUE(b.SetPortAddress(h, 1, 0, 5).ok());
  auto f = b.Build();
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("LID 5"), std::string::npos);
}

TEST(ModelTest, FailuresMakeLinksUnusable) {
  Fabric f = TwoLeaves();
  NodeId s2 = *f.FindByName("sw2");
  LinkId trunk = f.adj_begin(s2)[2].link;
  EXPECT_TRUE(f.link_usable(trunk));
  ASSERT_TRUE(f.SetLinkUp(trunk, false).ok());
  EXPECT_FALSE(f.link_usable(trunk));
  ASSERT_TRUE(f.SetLinkUp(trunk, true).ok());
  ASSERT_TRUE(f.SetNodeUp(s2, false).ok());
  EXPECT_FALSE(f.link_usable(trunk));
  EXPECT_FALSE(f.SetLinkUp(LinkId(99), false).ok());
}

TEST(ModelTest, WidthSpeedTokens) {
  LinkWidth w;
  LinkSpeed s;
  ASSERT_TRUE(ParseWidthSpeed("4xNDR", &w, &s));
  EXPECT_EQ(w, 4);
  EXPECT_EQ(s, LinkSpeed::kNdr);
  ASSERT_TRUE(ParseWidthSpeed("1xSDR", &w, &s));
  EXPECT_EQ(w, 1);
  EXPECT_FALSE(ParseWidthSpeed("3xQDR", &w, &s));
  EXPECT_FALSE(ParseWidthSpeed("4xFOO", &w, &s));
  EXPECT_EQ(FormatGuid(0x8f10403960558), "0x0008f10403960558");
}

}  // namespace
}  // namespace gpool::fabric
