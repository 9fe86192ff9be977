// Small clusters shared by the simulator's tests (test code only).
#ifndef GPOOL_SIM_TEST_CLUSTERS_H_
#define GPOOL_SIM_TEST_CLUSTERS_H_

#include <string>

#include "sim/cluster.h"

namespace gpool::sim {

// Two pods of two leaves of two 8-GPU hosts; hosts 1600 Gb/s, leaf uplinks 3200 Gb/s (1:1),
// pod uplinks 3200 Gb/s (2:1). No fabric routes: the aggregate pipes model.
inline SimCluster TestTwoPodTree() {
  SimCluster c;
  c.pod_names = {"p0", "p1"};
  c.leaf_names = {"l0", "l1", "l2", "l3"};
  for (int h = 0; h < 8; ++h) {
    c.hosts.push_back({.name = "h" + std::to_string(h), .gpus = 8, .leaf = h / 2, .pod = h / 4,
                       .nic_gbps = 1600});
  }
  c.leaf_uplink_gbps = {3200, 3200, 3200, 3200};
  c.pod_uplink_gbps = {3200, 3200};
  return c;
}

}  // namespace gpool::sim

#endif  // GPOOL_SIM_TEST_CLUSTERS_H_
