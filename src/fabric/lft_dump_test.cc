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

namespace gpool::fabric {
namespace {

bool SameTables(const Fabric& f, const RoutingTables& a, const RoutingTables& b) {
  for (NodeId s : f.switches())
    for (uint32_t lid = 1; lid <= f.max_lid(); ++lid)
      if (a.out_port(s, static_cast<Lid>(lid)) != b.out_port(s, static_cast<Lid>(lid))) return false;
  return true;
}

TEST(LftDumpReadTest, ReadsBackWhatWasWritten) {
  Fabric f = testutil::TwoTier({.leaves = 3, .spines = 2, .cas_per_leaf = 2});
  auto t = Route(f, {.engine = Engine::kUpdn});
  ASSERT_TRUE(t.ok());
  auto back = ReadLftDump(WriteLftDump(f, *t), f, {.source_name = "lfts.dump"});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->engine, "opensm");
  EXPECT_TRUE(SameTables(f, *t, *back));
  EXPECT_TRUE(Verify(f, *back, {}).ok());
  EXPECT_TRUE(back->notes.empty());
}

// A name with a line break and a route line in it stays inside its comment: the dump reads
// back to the same tables, with one line per route.
TEST(LftDumpReadTest, NamesCannotAddRouteLines) {
  FabricBuilder b;
  NodeId s = *b.AddNode({.type = NodeType::kSwitch, .name = "sw\n0x0001 002 # x", .num_ports = 2});
  NodeId h1 = *b.AddNode({.type = NodeType::kCa, .name = "h1\r\n2 lids dumped\n"});
  NodeId h2 = *b.AddNode({.type = NodeType::kCa, .name = "h2"});
  ASSERT_TRUE(b.AddLink(s, 1, h1, 1).ok());
  ASSERT_TRUE(b.AddLink(s, 2, h2, 1).ok());
  Fabric f = *b.Build();
  auto t = Route(f, {.engine = Engine::kMinhop});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::string dump = WriteLftDump(f, *t);
  size_t lines = 0;
  for (char c : dump) lines += c == '\n';
  EXPECT_EQ(lines, 2u + f.max_lid()) << dump;  // header, one per LID (all routed), trailer
  auto back = ReadLftDump(dump, f, {.source_name = "lfts.dump"});
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << dump;
  EXPECT_TRUE(SameTables(f, *t, *back));
}

TEST(LftDumpReadTest, ReadsOpenSmsOwnLayout) {
  // As OpenSM 3.3 writes it: the switch's own LID to port 000, CA LIDs with portguid comments.
  Fabric f = testutil::TwoTier({.leaves = 1, .spines = 0, .cas_per_leaf = 2});
  NodeId leaf = f.switches().front();
  const Node& sw = f.node(leaf);
  const Port& p1 = f.port(f.port_of(*f.FindByName("h0"), 1));
  std::string dump = fmt::format(
      "Unicast lids [0-{}] of switch Lid {} guid 0x{:016x} ('{}'):\n"
      "0x{:04x} 000 # Switch portguid 0x{:016x}: '{}'\n"
      "0x{:04x} 001 # Channel Adapter portguid 0x{:016x}: 'h0'\n"
      "{} lids dumped\n",
      f.max_lid(), sw.lid, sw.guid, sw.name, sw.lid, sw.guid, sw.name, p1.lid, p1.guid, f.max_lid());
  auto t = ReadLftDump(dump, f);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->out_port(leaf, sw.lid), 0);
  EXPECT_EQ(t->out_port(leaf, p1.lid), 1);
  // h1's LID has no line: no route.
  const Port& p2 = f.port(f.port_of(*f.FindByName("h1"), 1));
  EXPECT_EQ(t->out_port(leaf, p2.lid), kNoRoute);
}

TEST(LftDumpReadTest, ErrorsNameTheLine) {
  Fabric f = testutil::TwoTier({.leaves = 2, .spines = 1, .cas_per_leaf = 1});
  auto t = Route(f, {.engine = Engine::kMinhop});
  ASSERT_TRUE(t.ok());
  const Node& sw = f.node(f.switches().front());
  std::string head = fmt::format("Unicast lids [0-{}] of switch Lid {} guid 0x{:016x} ('{}'):\n",
                                 f.max_lid(), sw.lid, sw.guid, sw.name);
  struct Case {
    std::string text, expect;
  };
  std::vector<Case> cases = {
      {"0x0001 001 # x\n", "t.dump:1: route line before the first"},
      {"Unicast lids [0-3] of switch Lid 1 guid 0x00000000deadbeef ('x'):\n",
       "t.dump:1: switch guid 0x00000000deadbeef is not in the fabric"},
      {head + "0x0001 099 # x\n", "t.dump:2: port 99 on switch"},
      {head + "0xzz 001\n", "t.dump:2: LID '0xzz' is not a unicast LID"},
      {head + "0x0001 abc\n", "t.dump:2: port 'abc' is not a decimal number"},
      {head + "0x0001 000\n0x0001 000\n", "t.dump:3: LID 1 listed twice"},
      {head + fmt::format("0x{:04x} 001\n", f.max_lid() + 1), "beyond the fabric's highest LID"},
      {head + fmt::format("0x{:04x} 000 # Switch portguid 0x0000000000000bad: 'x'\n", sw.lid),
       "t.dump:2: LID 1 belongs to portguid 0x0000000000000bad in the dump"},
      {head + "garbage here\n", "t.dump:2: expected 'Unicast lids"},
      {"", "t.dump: no 'Unicast lids' block"},
  };
  for (const auto& c : cases) {
    auto r = ReadLftDump(c.text, f, {.source_name = "t.dump"});
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << r.status().message() << "\nexpected: " << c.expect;
  }
  // Owner checks can be turned off (a model whose LIDs differ on purpose).
  auto lax = ReadLftDump(
      head + fmt::format("0x{:04x} 000 # Switch portguid 0x0000000000000bad: 'x'\n", sw.lid), f,
      {.check_lid_owners = false});
  EXPECT_TRUE(lax.ok()) << lax.status().ToString();
  EXPECT_EQ(lax->notes.size(), 1u);  // the other switches have no table
}

}  // namespace
}  // namespace gpool::fabric
