#include "fabric/node_name_map.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fabric/generators.h"
#include "fabric/writers.h"

namespace gpool::fabric {
namespace {

using ::testing::HasSubstr;

TEST(NodeNameMapTest, ReadsQuotedAndBareNamesAndComments) {
  auto m = ParseNodeNameMap(
      "# site names\n"
      "0x0002c90300a1b2c0 \"gpu001 mlx5_0\"\n"
      "\n"
      "  7cfe900300112233\tleaf-a01  \r\n"
      "0X10 \"core 1\"\n",
      "site.map");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->size(), 3u);
  EXPECT_EQ(m->at(0x0002c90300a1b2c0), "gpu001 mlx5_0");
  EXPECT_EQ(m->at(0x7cfe900300112233), "leaf-a01");
  EXPECT_EQ(m->at(0x10), "core 1");
}

TEST(NodeNameMapTest, ErrorsNameTheLineAndWhat) {
  auto err = [](std::string_view text) {
    auto m = ParseNodeNameMap(text, "site.map");
    return m.ok() ? std::string("ok") : m.status().message();
  };
  EXPECT_THAT(err("0x1 \"a\"\nnotaguid \"b\"\n"), HasSubstr("site.map:2: 'notaguid' is not a GUID"));
  EXPECT_THAT(err("0x1 \"a\n"), HasSubstr("site.map:1: unterminated quoted name"));
  EXPECT_THAT(err("0x1\n"), HasSubstr("site.map:1: no name for GUID 0x1"));
  EXPECT_THAT(err("0x1 \"\"\n"), HasSubstr("no name"));
  EXPECT_THAT(err("0x1 a\n0x01 b\n"), HasSubstr("site.map:2: GUID 0x01 is already named at line 1"));
  EXPECT_THAT(err("0x1 \"a\x01b\"\n"), HasSubstr("control byte"));
  EXPECT_THAT(err("0x1ffffffffffffffff a\n"), HasSubstr("is not a GUID"));
}

// The Slurm writer takes host and switch names from the map; what the map leaves out keeps its
// own name, and a mapped name is made Slurm-safe like any other.
TEST(NodeNameMapTest, SlurmTopologyUsesSiteNames) {
  auto f = GenerateFatTree({.levels = 2, .radix = 4});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  NodeNameMap names;
  NodeId first_ca = f->cas().front();
  NodeId leaf;
  for (const Adjacent* a = f->adj_begin(first_ca); a != f->adj_end(first_ca); ++a) leaf = a->peer;
  names[f->node(first_ca).guid] = "gpu-a01 mlx5_0";
  names[f->node(leaf).guid] = "rack1 leaf";
  auto plain = WriteSlurmTopology(*f);
  auto mapped = WriteSlurmTopology(*f, {.node_names = &names});
  ASSERT_TRUE(plain.ok() && mapped.ok());
  EXPECT_THAT(*mapped, HasSubstr("SwitchName=rack1_leaf "));
  EXPECT_THAT(*mapped, HasSubstr("gpu-a01"));
  EXPECT_THAT(*plain, ::testing::Not(HasSubstr("gpu-a01")));
  EXPECT_NE(*plain, *mapped);
  // The map changes names only: the same number of switch lines.
  auto count = [](const std::string& s) {
    size_t n = 0;
    for (size_t p = s.find("SwitchName="); p != std::string::npos; p = s.find("SwitchName=", p + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(*plain), count(*mapped));
}

}  // namespace
}  // namespace gpool::fabric
