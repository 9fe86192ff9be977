// Small handmade fabrics shared by the fabric I/O tests.
#pragma once

#include <fmt/format.h>

#include "fabric/model.h"

namespace gpool::fabric::testing {

// Two-level fat-tree: `spines` spines, `leaves` leaves, `hosts` hosts per leaf named
// "node001 HCA-1"..., 4xNDR. Leaves are level 0, spines level 1.
inline Fabric SmallFatTree(int spines = 2, int leaves = 3, int hosts = 2) {
  FabricBuilder b;
  std::vector<NodeId> sp, lf;
  for (int s = 0; s < spines; ++s)
    sp.push_back(*b.AddNode({.type = NodeType::kSwitch, .name = fmt::format("spine{}", s + 1),
                             .num_ports = static_cast<uint16_t>(leaves), .description = "spine",
                             .level = 1}));
  for (int l = 0; l < leaves; ++l)
    lf.push_back(*b.AddNode({.type = NodeType::kSwitch, .name = fmt::format("leaf{:03}", l + 1),
                             .num_ports = static_cast<uint16_t>(hosts + spines),
                             .description = "leaf", .level = 0}));
  int h = 0;
  for (int l = 0; l < leaves; ++l) {
    for (int s = 0; s < spines; ++s)
      (void)b.AddLink(lf[l], static_cast<uint16_t>(hosts + s + 1), sp[s], static_cast<uint16_t>(l + 1));
    for (int k = 0; k < hosts; ++k) {
      std::string name = fmt::format("node{:03} HCA-1", ++h);
      NodeId c = *b.AddNode({.type = NodeType::kCa, .name = name, .num_ports = 1, .description = name});
      (void)b.AddLink(lf[l], static_cast<uint16_t>(k + 1), c, 1);
    }
  }
  return *b.Build();
}

}  // namespace gpool::fabric::testing
