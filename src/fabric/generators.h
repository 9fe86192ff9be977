// Synthetic fabrics: fat-trees (two and three levels, k-ary n-trees and real-radix variants),
// 3D tori and dragonflies.
//
// Generated fabrics are what gpool routes, analyses and schedules on when no real dump is at
// hand, and they are the benchmark fabrics. Naming is readable and stable:
//   fat-tree switches  "leaf-3", "spine-0"          (two levels)
//                      "leaf-p0-3", "spine-p0-3", "core-17"  (three levels; spine = aggregation)
//   torus switches     "sw-x1-y2-z0"  (dor reads the coordinates back from this name)
//   dragonfly routers  "df-g2-r1"
//   hosts              "host0001", CAs "host0001 mlx5_0" ... "host0001 mlx5_7"
// Node::level is set on switches: 0 = leaf (CA-facing), 1 = spine/aggregation, 2 = core.
// Switches are added before CAs, so with assign_lids switch LIDs come first (1..S), then the CA
// ports in host order, as OpenSM numbers a fresh subnet discovered from the first switch.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <string>

#include "common/status.h"
#include "fabric/model.h"

namespace gpool::fabric {

// Leaf oversubscription: leaf ports facing hosts : leaf ports facing up. 1:1 is non-blocking.
struct Oversubscription {
  int down = 1;
  int up = 1;
};

// A fat-tree of identical `radix`-port switches.
//
// Two levels: each leaf splits its ports down:up by `oversubscription`; there is one spine per
// leaf uplink and each spine has one link to every leaf, so a spine's ports bound the leaves
// (full tree: `radix` leaves).
//
// Three levels: pods of `leaves` leaves (default radix/2) and `leaf uplinks` aggregation
// ("spine") switches, each leaf linked once to every aggregation switch of its pod; aggregation
// switches use their remaining radix - leaves ports to go up to the cores. A core switch takes
// `core_ports_per_pod` (m) links into every pod, one to each of m consecutive aggregation
// switches, so there are (aggregation per pod / m) x (aggregation uplinks) cores and a core uses
// m x pods ports. The full (real-radix) tree has pods = radix and m = 1.
// Auto m (core_ports_per_pod = 0): the largest divisor of the aggregation count that is at most
// (radix / 2) / pods, minimum 1: cores stay at most half cabled, so the pods can double without
// new cores. With radix 36 and 7 pods that gives m = 2: 7 pods x (18 leaves + 18 aggregation),
// 162 cores, 2,268 HCAs, the fabric of our brief.
//
// A k-ary n-tree (2k-port switches, k^n hosts, top switches half used) is the real-radix tree
// with radix 2k and pods = k: see KaryNtree().
//
// The brief's 2,048 GPUs on NDR: 256 hosts x 8 HCAs (one per GPU), rail-optimised, on 64-port
// NDR switches, two levels, 1:1 = {levels 2, radix 64, hcas_per_node 8}: 64 leaves (8 groups of
// one leaf per rail, 32 hosts each) + 32 spines = 96 switches, the full two-level radix-64 tree.
// ("10 NDR switches" cannot carry it non-blocking: 10 x 64 ports < 2,048 HCA links.)
//
// Rail-optimised hosts (hcas_per_node = R > 1): leaves are taken R at a time (one per rail);
// host slot s of such a group has HCA i on port s of the group's leaf i, so HCA i of every host
// sits on rail i. Leaves (per pod, for three levels) must be a multiple of R.
struct FatTreeOptions {
  int levels = 2;         // 2 or 3
  int radix = 36;         // ports per switch (<= 254)
  int pods = 0;           // three levels: number of pods; 0 = radix (full tree)
  int leaves = 0;         // two levels: leaves (0 = radix); three: leaves per pod (0 = radix / 2)
  int core_ports_per_pod = 0;  // three levels: links from each core into each pod; 0 = auto
  Oversubscription oversubscription;
  LinkSpeed speed = LinkSpeed::kNdr;
  LinkWidth width = 4;
  int hcas_per_node = 1;  // 1, or R rail-optimised HCAs per host
  int hosts = 0;          // 0 = fill every leaf down port; else only the first `hosts` hosts
  // Assign LIDs (switches first). A subnet has 49,151 unicast LIDs: larger models (the
  // 100,000-HCA memory benchmark) must set this false and cannot be routed.
  bool assign_lids = true;
};

// The k-ary n-tree (n = 2 or 3) as FatTreeOptions: radix 2k, k^n hosts.
FatTreeOptions KaryNtree(int k, int n);

// The numbers a FatTreeOptions resolves to (after defaults), for reports and the CLI.
struct FatTreeShape {
  int levels = 0;
  int leaves = 0;            // in total
  int leaves_per_pod = 0;    // three levels
  int spines = 0;            // two levels: spines; three levels: aggregation switches in total
  int spines_per_pod = 0;
  int cores = 0;
  int pods = 0;
  int core_ports_per_pod = 0;
  int leaf_down = 0, leaf_up = 0;
  int hosts = 0;
  int hcas = 0;
  int switches() const { return leaves + spines + cores; }
  std::string ToString() const;  // one line, e.g. "3-level fat-tree: 7 pods x (18 leaf + ..."
};
StatusOr<FatTreeShape> ResolveFatTree(const FatTreeOptions& options);

StatusOr<Fabric> GenerateFatTree(const FatTreeOptions& options);

// A 3D torus of switches (a dimension of 1 is absent, of 2 has one link), each with
// `hcas_per_switch` single-HCA hosts. Switch ports: 2 per dimension of size > 2, 1 per dimension
// of size 2, then the hosts.
struct TorusOptions {
  std::array<int, 3> dims = {4, 4, 4};
  int hcas_per_switch = 1;
  LinkSpeed speed = LinkSpeed::kNdr;
  LinkWidth width = 4;
  bool assign_lids = true;
};
StatusOr<Fabric> GenerateTorus(const TorusOptions& options);

// A dragonfly: groups of all-to-all connected routers, each with hosts and global links to
// other groups. Global links are spread round-robin over group pairs (nearest offsets first),
// so the canonical balanced shape (a = 2p = 2h, groups = a*h + 1) has exactly one link between
// every pair of groups.
struct DragonflyOptions {
  int groups = 0;                    // 0 = routers_per_group * global_links_per_router + 1
  int routers_per_group = 4;         // a
  int hosts_per_router = 2;          // p
  int global_links_per_router = 2;   // h
  LinkSpeed speed = LinkSpeed::kNdr;
  LinkWidth width = 4;
  bool assign_lids = true;
};
StatusOr<Fabric> GenerateDragonfly(const DragonflyOptions& options);

}  // namespace gpool::fabric
