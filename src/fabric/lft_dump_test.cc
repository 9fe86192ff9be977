#include "fabric/lft_dump.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "fabric/analysis_testutil.h"

namespace gpool::fabric {
namespace {

TEST(LftDumpTest, OneBlockPerSwitchInOpenSmLayout) {
  Fabric f = testutil::TwoTier({.leaves = 2, .spines = 1, .cas_per_leaf = 1});
  auto t = Route(f, {.engine = Engine::kMinhop});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  NodeId leaf0 = *f.FindByName("leaf0");
  NodeId h0 = *f.FindByName("h0");
  NodeId h1 = *f.FindByName("h1");
  Lid h1_lid = f.node(h1).lid;
  // Drop one entry: it must be left out, as OpenSM leaves out unrouted LIDs.
  t->set_out_port(leaf0, h1_lid, kNoRoute);
  std::string dump = WriteLftDump(f, *t);

  const Node& leaf = f.node(leaf0);
  std::string header = fmt::format("Unicast lids [0-{}] of switch Lid {} guid 0x{:016x} ('leaf0'):\n",
                                   f.max_lid(), leaf.lid, leaf.guid);
  size_t at = dump.find(header);
  ASSERT_NE(at, std::string::npos) << dump;
  size_t end = dump.find(" lids dumped\n", at);
  std::string block = dump.substr(at, end - at);
  // The switch's own LID goes to port 0; h0 (port 1 of leaf0) to port 001.
  EXPECT_NE(block.find(fmt::format("0x{:04x} 000 # Switch portguid 0x{:016x}: 'leaf0'\n", leaf.lid,
                                   leaf.guid)),
            std::string::npos)
      << block;
  const Port& p0 = f.port(f.port_of(h0, 1));
  EXPECT_NE(block.find(fmt::format("0x{:04x} 001 # Channel Adapter portguid 0x{:016x}: 'h0'\n",
                                   p0.lid, p0.guid)),
            std::string::npos)
      << block;
  EXPECT_EQ(block.find(fmt::format("0x{:04x} ", h1_lid)), std::string::npos) << block;
  // Three switches, three blocks and three trailers.
  size_t blocks = 0;
  for (size_t p = dump.find("Unicast lids"); p != std::string::npos; p = dump.find("Unicast lids", p + 1))
    ++blocks;
  EXPECT_EQ(blocks, 3u);
  EXPECT_NE(dump.find(fmt::format("{} lids dumped\n", f.max_lid())), std::string::npos);
}

}  // namespace
}  // namespace gpool::fabric
