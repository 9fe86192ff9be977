#include "fabric/levels.h"

#include <map>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "fabric/analysis.h"
#include "fabric/generators.h"
#include "fabric/ibnetdiscover.h"
#include "fabric/routing.h"
#include "fabric/writers.h"

namespace gpool::fabric {
namespace {

// Drops every line of `text` for which `drop` is true.
template <typename Drop>
std::string DropLines(const std::string& text, Drop drop) {
  std::istringstream in(text);
  std::string line, out;
  while (std::getline(in, line))
    if (!drop(line)) out += line + "\n";
  return out;
}

std::string WithoutLevelHints(const std::string& text) {
  return DropLines(text, [](const std::string& l) { return l.rfind("# gpool: level", 0) == 0; });
}

Fabric ParseLevelsNet(const std::string& text) {
  auto f = ParseNet(text, {});
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? std::move(f).value() : Fabric();
}

// Locality as names: level per switch, and the pod partition as "the first node name of each
// node's pod" (pod numbers may differ, the grouping must not).
struct Named {
  int levels = 0, pods = 0;
  size_t leaves = 0;
  std::map<std::string, int> level;
  std::map<std::string, std::string> pod_mate;
};
Named Describe(const Fabric& f) {
  Locality loc = ComputeLocality(f);
  Named n;
  n.levels = loc.num_levels;
  n.pods = loc.num_pods;
  n.leaves = loc.leaves.size();
  std::map<int32_t, std::string> first_of_pod;
  for (uint32_t i = 0; i < f.num_nodes(); ++i) {
    const std::string& name = f.node(NodeId(i)).name;
    if (f.node(NodeId(i)).type == NodeType::kSwitch) n.level[name] = loc.level[i];
    int32_t p = loc.pod_of[i];
    n.pod_mate[name] = p < 0 ? "-" : first_of_pod.emplace(p, name).first->second;
  }
  return n;
}

void ExpectSame(const Named& a, const Named& b, const std::string& what) {
  EXPECT_EQ(a.levels, b.levels) << what;
  EXPECT_EQ(a.pods, b.pods) << what;
  EXPECT_EQ(a.leaves, b.leaves) << what;
  EXPECT_EQ(a.level, b.level) << what;
  EXPECT_EQ(a.pod_mate, b.pod_mate) << what;
}

struct Shape {
  const char* name;
  FatTreeOptions options;
};

// Shapes whose host counts leave leaves (and whole pods) empty, and full ones.
std::vector<Shape> Shapes() {
  std::vector<Shape> s;
  s.push_back({"3-level radix 16, 256 hosts (12 of 16 pods empty)",
               {.levels = 3, .radix = 16, .hosts = 256}});
  s.push_back({"3-level radix 8, 4 pods, 3 hosts (one leaf)",
               {.levels = 3, .radix = 8, .pods = 4, .hosts = 3}});
  s.push_back({"3-level radix 8, 4 pods, 21 hosts (pod 1 part filled)",
               {.levels = 3, .radix = 8, .pods = 4, .hosts = 21}});
  s.push_back({"3-level radix 8, 4 pods, full", {.levels = 3, .radix = 8, .pods = 4}});
  s.push_back({"2-level radix 8, 5 hosts", {.levels = 2, .radix = 8, .hosts = 5}});
  s.push_back({"2-level radix 16, 4 rails, 3 hosts",
               {.levels = 2, .radix = 16, .hcas_per_node = 4, .hosts = 3}});
  s.push_back({"2-level radix 8, full", {.levels = 2, .radix = 8}});
  return s;
}

TEST(SwitchLevelsTest, GeneratedTreesLoadBackWithTheirLevelsAndPods) {
  for (const Shape& s : Shapes()) {
    auto f = GenerateFatTree(s.options);
    ASSERT_TRUE(f.ok()) << s.name << ": " << f.status().ToString();
    auto shape = ResolveFatTree(s.options);
    ASSERT_TRUE(shape.ok());
    Named want = Describe(*f);
    ASSERT_EQ(want.levels, s.options.levels) << s.name;
    ASSERT_EQ(want.pods, shape->pods) << s.name;

    auto text = WriteIbnetdiscover(*f);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    Fabric back = ParseLevelsNet(*text);
    EXPECT_FALSE(ComputeSwitchLevels(back).inferred) << s.name << ": the file carries the levels";
    ExpectSame(want, Describe(back), std::string(s.name) + " (ibnetdiscover)");

    auto net = WriteIbsimNet(*f);
    ASSERT_TRUE(net.ok()) << net.status().ToString();
    ExpectSame(want, Describe(ParseLevelsNet(*net)), std::string(s.name) + " (ibsim)");
  }
}

TEST(SwitchLevelsTest, InfersTheTiersOfTreesWithEmptyLeavesWithoutHints) {
  for (const Shape& s : Shapes()) {
    auto f = GenerateFatTree(s.options);
    ASSERT_TRUE(f.ok()) << s.name;
    Named want = Describe(*f);
    auto text = WriteIbnetdiscover(*f);
    ASSERT_TRUE(text.ok());
    Fabric bare = ParseLevelsNet(WithoutLevelHints(*text));
    SwitchLevels lv = ComputeSwitchLevels(bare);
    EXPECT_TRUE(lv.inferred) << s.name;
    ExpectSame(want, Describe(bare), std::string(s.name) + " (inferred)");
    // The ftree engine sees the same tiers: it routes the tree without falling back to updn.
    auto t = Route(bare, {.engine = Engine::kFtree});
    ASSERT_TRUE(t.ok()) << s.name << ": " << t.status().ToString();
    EXPECT_EQ(t->engine, "ftree") << s.name;
    VerifyReport v = Verify(bare, *t, {});
    EXPECT_TRUE(v.ok()) << s.name << ": " << (v.problems.empty() ? "" : v.problems[0]);
  }
}

TEST(SwitchLevelsTest, EmptyLeavesAreNotedAsLeaves) {
  auto f = GenerateFatTree({.levels = 2, .radix = 8, .hosts = 5});
  ASSERT_TRUE(f.ok());
  Fabric bare = ParseLevelsNet(WithoutLevelHints(*WriteIbnetdiscover(*f)));
  SwitchLevels lv = ComputeSwitchLevels(bare);
  // 8 leaves of 4 down ports: hosts 1-4 on leaf-0, host 5 on leaf-1, six leaves empty.
  ASSERT_EQ(lv.notes.size(), 1u);
  EXPECT_NE(lv.notes[0].find("6 switches without CAs placed on level 0"), std::string::npos)
      << lv.notes[0];
}

TEST(SwitchLevelsTest, ATopSwitchMissingCablesStaysOnTopAndKeepsPodsApart) {
  // A full 3-level tree (4 pods, each core cabled to one aggregation switch per pod) whose
  // core-0 lost its cables into pod 0: the double sweep runs between pods 1 and 0, so core-0
  // is not midway and first lands on level 0; it joins pods 1-3, so it is a core, not a leaf.
  auto f = GenerateFatTree({.levels = 3, .radix = 8, .pods = 4});
  ASSERT_TRUE(f.ok());
  std::string text = WithoutLevelHints(*WriteIbnetdiscover(*f));
  std::string record;
  text = DropLines(text, [&](const std::string& l) {
    if (l.rfind("Switch", 0) == 0) record = l;
    bool in_core0 = record.find("\"core-0\"") != std::string::npos;
    bool in_pod0_aggr = record.find("\"spine-p0-") != std::string::npos;
    return l.rfind("[", 0) == 0 && ((in_core0 && l.find("\"spine-p0-") != std::string::npos) ||
                                    (in_pod0_aggr && l.find("\"core-0\"") != std::string::npos));
  });
  Fabric bare = ParseLevelsNet(text);
  ASSERT_EQ(bare.num_links(), f->num_links() - 1);
  Named want = Describe(*f);
  Named got = Describe(bare);
  EXPECT_EQ(got.levels, 3);
  EXPECT_EQ(got.pods, 4);
  EXPECT_EQ(got.level["core-0"], 2);
  EXPECT_EQ(got.pod_mate, want.pod_mate);
  SwitchLevels lv = ComputeSwitchLevels(bare);
  ASSERT_EQ(lv.notes.size(), 1u);
  EXPECT_NE(lv.notes[0].find("1 switch without CAs joining several pods"), std::string::npos)
      << lv.notes[0];
}

TEST(SwitchLevelsTest, NonTreesKeepHopDistanceFromTheLeaves) {
  // A torus: every switch has a host, so every switch is a leaf.
  auto torus = GenerateTorus({.dims = {3, 3, 1}});
  ASSERT_TRUE(torus.ok());
  Fabric bare = ParseLevelsNet(WithoutLevelHints(*WriteIbnetdiscover(*torus)));
  SwitchLevels lv = ComputeSwitchLevels(bare);
  EXPECT_TRUE(lv.inferred);
  for (NodeId s : bare.switches()) EXPECT_EQ(lv.level[s.value()], 0);
  EXPECT_TRUE(lv.notes.empty());
  // A chain leaf - a - b - c: the sweep spans an odd distance, so there is no tree layering;
  // levels are hop counts from the leaf. A switch cabled to nothing has none.
  FabricBuilder b;
  NodeId leaf = *b.AddNode({.type = NodeType::kSwitch, .name = "leaf", .num_ports = 2});
  NodeId a = *b.AddNode({.type = NodeType::kSwitch, .name = "a", .num_ports = 2});
  NodeId m = *b.AddNode({.type = NodeType::kSwitch, .name = "b", .num_ports = 2});
  NodeId c = *b.AddNode({.type = NodeType::kSwitch, .name = "c", .num_ports = 2});
  NodeId lone = *b.AddNode({.type = NodeType::kSwitch, .name = "lone", .num_ports = 2});
  NodeId h = *b.AddNode({.name = "h"});
  ASSERT_TRUE(b.AddLink(leaf, 1, h, 1).ok());
  ASSERT_TRUE(b.AddLink(leaf, 2, a, 1).ok());
  ASSERT_TRUE(b.AddLink(a, 2, m, 1).ok());
  ASSERT_TRUE(b.AddLink(m, 2, c, 1).ok());
  Fabric chain = *b.Build();
  lv = ComputeSwitchLevels(chain);
  EXPECT_EQ(lv.level[leaf.value()], 0);
  EXPECT_EQ(lv.level[a.value()], 1);
  EXPECT_EQ(lv.level[m.value()], 2);
  EXPECT_EQ(lv.level[c.value()], 3);
  EXPECT_EQ(lv.level[lone.value()], -1);
  EXPECT_EQ(lv.level[h.value()], -1);
  ASSERT_EQ(lv.notes.size(), 1u);
  EXPECT_NE(lv.notes[0].find("1 switches are not connected"), std::string::npos) << lv.notes[0];
}

}  // namespace
}  // namespace gpool::fabric
