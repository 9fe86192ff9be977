// Switch tiers (levels) of a fabric: read from Node::level, or inferred from the switch graph.
//
// One function serves every consumer that needs tiers (locality domains, the ftree engine, the
// Slurm writer), so a fabric has the same tiers everywhere.
//
// Given levels. When every switch has Node::level set (generators and the Clos CSV set it;
// ibnetdiscover/ibsim files written by gpool carry it as `# gpool: level N` comment lines, see
// ibnetdiscover.h), those levels are used as they are.
//
// Inferred levels, per connected component of the switch graph (all cabled switch-to-switch
// links, up or down: a tier is physical and does not move when a cable fails):
//  - From the top. A double sweep finds the tree's top tier without assuming every leaf has a
//    CA: breadth-first from the first CA-facing switch to the farthest switch v, from v to the
//    farthest switch w; in a fat-tree v and w are leaves on opposite sides of the top, and the
//    switches midway between them (distance D/2 from both) are the top tier. Every switch then
//    gets D/2 minus its hop distance from that tier. The result is used when it is a tree
//    layering: every CA-facing switch lands on level 0, no switch below 0, every link joins
//    adjacent levels. This is what places leaves that have no hosts (a partly filled
//    fat-tree: leaves and whole pods without hosts) at level 0, as the fabric was built.
//  - From the leaves, otherwise (tori, dragonflies, irregular fabrics): a leaf (level 0) is a
//    switch with a CA attached and every other switch gets its hop distance from the nearest
//    leaf.
// Limits of the inference:
//  - A top switch that is not midway between v and w (one missing cables to v's or w's part of
//    the tree) is taken for a leaf; when such a switch joins several pods it is put back on
//    level 2 (with a note), which is right for three-level trees. Files gpool writes carry the
//    levels and need none of this.
//  - A tree whose top switches each reach only one pod (a single pod with a core tier) has
//    cores indistinguishable from leaves without hosts; they come out as leaves.
//  - Switches in components without any CA get level -1.
//
// Cost: O(switches + links) per breadth-first pass, five passes per component.
//
// Thread safety: a pure function over a const fabric.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fabric/model.h"

namespace gpool::fabric {

struct SwitchLevels {
  // Indexed by NodeId: switch tier (0 = leaf); -1 for CAs, routers and unplaced switches.
  std::vector<int16_t> level;
  bool inferred = false;  // false when every switch carried Node::level
  // How the levels were found and what an operator should know ("levels inferred from the top
  // tier: 12 leaves without CAs placed on level 0", ...).
  std::vector<std::string> notes;
};

SwitchLevels ComputeSwitchLevels(const Fabric& fabric);

}  // namespace gpool::fabric
