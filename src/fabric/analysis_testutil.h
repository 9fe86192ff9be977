// Small hand-built fabrics for the analysis and failure tests (header-only, tests only).
//
// Built with FabricBuilder directly so the tests do not depend on the generators; names are
// predictable: CAs "h<i>" (in leaf order), leaves "leaf<i>" / "leaf<p>.<i>", "agg<p>.<i>",
// spines "spine<i>" / cores "core<i>".
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "fabric/model.h"

namespace gpool::fabric::testutil {

struct TwoTierSpec {
  int leaves = 4;
  int spines = 2;
  int cas_per_leaf = 2;
  bool set_levels = true;
  LinkSpeed ca_speed = LinkSpeed::kNdr;
  LinkSpeed uplink_speed = LinkSpeed::kNdr;
};

// Leaf/spine: every leaf cabled once to every spine. Leaf ports 1..C go to CAs, C+1..C+S to the
// spines; spine port l+1 goes to leaf l.
inline Fabric TwoTier(const TwoTierSpec& s) {
  FabricBuilder b;
  std::vector<NodeId> spines;
  for (int i = 0; i < s.spines; ++i)
    spines.push_back(*b.AddNode({.type = NodeType::kSwitch, .name = "spine" + std::to_string(i),
                                 .num_ports = static_cast<uint16_t>(s.leaves),
                                 .level = static_cast<int16_t>(s.set_levels ? 1 : -1)}));
  int h = 0;
  for (int l = 0; l < s.leaves; ++l) {
    NodeId leaf = *b.AddNode({.type = NodeType::kSwitch, .name = "leaf" + std::to_string(l),
                              .num_ports = static_cast<uint16_t>(s.cas_per_leaf + s.spines),
                              .level = static_cast<int16_t>(s.set_levels ? 0 : -1)});
    for (int c = 0; c < s.cas_per_leaf; ++c) {
      NodeId ca = *b.AddNode({.type = NodeType::kCa, .name = "h" + std::to_string(h++)});
      EXPECT_TRUE(b.AddLink(leaf, static_cast<uint16_t>(c + 1), ca, 1, {.speed = s.ca_speed}).ok());
    }
    for (int i = 0; i < s.spines; ++i)
      EXPECT_TRUE(b.AddLink(leaf, static_cast<uint16_t>(s.cas_per_leaf + i + 1), spines[i],
                            static_cast<uint16_t>(l + 1), {.speed = s.uplink_speed})
                      .ok());
  }
  auto f = b.Build();
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

struct ThreeTierSpec {
  int pods = 2;
  int leaves_per_pod = 2;
  int aggs_per_pod = 2;
  int cores = 2;
  int cas_per_leaf = 2;
  bool set_levels = true;
};

// Three tiers: in each pod every leaf is cabled to every aggregation switch; every aggregation
// switch is cabled to every core.
inline Fabric ThreeTier(const ThreeTierSpec& s) {
  FabricBuilder b;
  auto lv = [&](int l) { return static_cast<int16_t>(s.set_levels ? l : -1); };
  std::vector<NodeId> cores;
  for (int i = 0; i < s.cores; ++i)
    cores.push_back(*b.AddNode({.type = NodeType::kSwitch, .name = "core" + std::to_string(i),
                                .num_ports = static_cast<uint16_t>(s.pods * s.aggs_per_pod),
                                .level = lv(2)}));
  int h = 0;
  for (int p = 0; p < s.pods; ++p) {
    std::vector<NodeId> aggs;
    for (int a = 0; a < s.aggs_per_pod; ++a) {
      NodeId agg = *b.AddNode({.type = NodeType::kSwitch,
                               .name = "agg" + std::to_string(p) + "." + std::to_string(a),
                               .num_ports = static_cast<uint16_t>(s.leaves_per_pod + s.cores),
                               .level = lv(1)});
      for (int c = 0; c < s.cores; ++c)
        EXPECT_TRUE(b.AddLink(agg, static_cast<uint16_t>(s.leaves_per_pod + c + 1), cores[c],
                              static_cast<uint16_t>(p * s.aggs_per_pod + a + 1))
                        .ok());
      aggs.push_back(agg);
    }
    for (int l = 0; l < s.leaves_per_pod; ++l) {
      NodeId leaf = *b.AddNode({.type = NodeType::kSwitch,
                                .name = "leaf" + std::to_string(p) + "." + std::to_string(l),
                                .num_ports = static_cast<uint16_t>(s.cas_per_leaf + s.aggs_per_pod),
                                .level = lv(0)});
      for (int c = 0; c < s.cas_per_leaf; ++c) {
        NodeId ca = *b.AddNode({.type = NodeType::kCa, .name = "h" + std::to_string(h++)});
        EXPECT_TRUE(b.AddLink(leaf, static_cast<uint16_t>(c + 1), ca, 1).ok());
      }
      for (int a = 0; a < s.aggs_per_pod; ++a)
        EXPECT_TRUE(b.AddLink(leaf, static_cast<uint16_t>(s.cas_per_leaf + a + 1), aggs[a],
                              static_cast<uint16_t>(l + 1))
                        .ok());
    }
  }
  auto f = b.Build();
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

}  // namespace gpool::fabric::testutil
