#include "fabric/generators.h"

#include <algorithm>
#include <vector>

#include <fmt/format.h>

namespace gpool::fabric {
namespace {

// Generated HCAs of one host share a system image GUID so consumers can group them by host.
constexpr uint64_t kHostSysimgBase = 0x0002c90500000000ULL;

std::string HostName(int host, int total_hosts) {
  int width = std::max(4, static_cast<int>(fmt::format("{}", total_hosts).size()));
  return fmt::format("host{:0{}}", host + 1, width);
}

// Adds the hosts of one rail group: `rail_leaves[i]` is the leaf of rail i, host slot s cabled
// to port first_port + s of each. `next_host` counts hosts across the fabric.
Status AddRailGroup(FabricBuilder& b, const std::vector<NodeId>& rail_leaves, int slots,
                    int first_port, int hosts_limit, int total_hosts, const LinkSpec& link,
                    int* next_host) {
  for (int s = 0; s < slots; ++s) {
    if (hosts_limit > 0 && *next_host >= hosts_limit) return Status::Ok();
    std::string host = HostName(*next_host, total_hosts);
    for (size_t i = 0; i < rail_leaves.size(); ++i) {
      std::string name = fmt::format("{} mlx5_{}", host, i);
      NodeSpec spec{.type = NodeType::kCa,
                    .name = name,
                    .num_ports = 1,
                    .sysimg_guid = kHostSysimgBase + static_cast<uint64_t>(*next_host),
                    .description = name};
      GPOOL_ASSIGN_OR_RETURN(NodeId ca, b.AddNode(std::move(spec)));
      GPOOL_RETURN_IF_ERROR(
          b.AddLink(rail_leaves[i], static_cast<uint16_t>(first_port + s), ca, 1, link));
    }
    ++*next_host;
  }
  return Status::Ok();
}

StatusOr<NodeId> AddSwitch(FabricBuilder& b, std::string name, int ports, int level) {
  return b.AddNode(NodeSpec{.type = NodeType::kSwitch,
                            .name = std::move(name),
                            .num_ports = static_cast<uint16_t>(ports),
                            .level = static_cast<int16_t>(level)});
}

}  // namespace

FatTreeOptions KaryNtree(int k, int n) {
  FatTreeOptions o;
  o.levels = n;
  o.radix = 2 * k;
  o.leaves = k;
  if (n == 3) o.pods = k;
  return o;
}

std::string FatTreeShape::ToString() const {
  if (levels == 2)
    return fmt::format(
        "2-level fat-tree: {} leaves ({} down / {} up) + {} spines = {} switches; {} hosts, {} HCAs",
        leaves, leaf_down, leaf_up, spines, switches(), hosts, hcas);
  return fmt::format(
      "3-level fat-tree: {} pods x ({} leaves ({} down / {} up) + {} aggregation) + {} cores "
      "({} links per pod each) = {} switches; {} hosts, {} HCAs",
      pods, leaves_per_pod, leaf_down, leaf_up, spines_per_pod, cores, core_ports_per_pod,
      switches(), hosts, hcas);
}

StatusOr<FatTreeShape> ResolveFatTree(const FatTreeOptions& o) {
  if (o.levels != 2 && o.levels != 3)
    return Status::InvalidArgument(fmt::format("fat-tree levels must be 2 or 3, not {}", o.levels));
  if (o.radix < 2 || o.radix > 254)
    return Status::InvalidArgument(fmt::format("switch radix {} is outside 2..254", o.radix));
  if (o.oversubscription.down < 1 || o.oversubscription.up < 1)
    return Status::InvalidArgument(fmt::format("oversubscription {}:{} must be positive",
                                               o.oversubscription.down, o.oversubscription.up));
  if (o.hcas_per_node < 1 || o.hcas_per_node > 16)
    return Status::InvalidArgument(
        fmt::format("hcas_per_node {} is outside 1..16", o.hcas_per_node));
  if (o.hosts < 0) return Status::InvalidArgument("hosts must not be negative");
  FatTreeShape s;
  s.levels = o.levels;
  s.leaf_down = o.radix * o.oversubscription.down /
                (o.oversubscription.down + o.oversubscription.up);
  s.leaf_up = o.radix - s.leaf_down;
  if (s.leaf_down < 1 || s.leaf_up < 1)
    return Status::InvalidArgument(fmt::format(
        "radix {} with oversubscription {}:{} leaves a leaf without down or up ports", o.radix,
        o.oversubscription.down, o.oversubscription.up));
  if (o.levels == 2) {
    s.pods = 1;
    s.leaves = o.leaves ? o.leaves : o.radix;
    if (s.leaves < 1 || s.leaves > o.radix)
      return Status::InvalidArgument(fmt::format(
          "two levels: {} leaves do not fit {}-port spines (one link per leaf)", s.leaves, o.radix));
    s.leaves_per_pod = s.leaves;
    s.spines = s.spines_per_pod = s.leaf_up;
  } else {
    s.leaves_per_pod = o.leaves ? o.leaves : o.radix / 2;
    if (s.leaves_per_pod < 1 || s.leaves_per_pod >= o.radix)
      return Status::InvalidArgument(fmt::format(
          "three levels: {} leaves per pod leave no uplinks on {}-port aggregation switches",
          s.leaves_per_pod, o.radix));
    int aggr_up = o.radix - s.leaves_per_pod;
    s.spines_per_pod = s.leaf_up;
    s.pods = o.pods ? o.pods : o.radix;
    if (s.pods < 1) return Status::InvalidArgument("pods must be positive");
    int m = o.core_ports_per_pod;
    if (m == 0) {
      int cap = std::max(1, o.radix / 2 / s.pods);
      for (m = std::min(cap, s.spines_per_pod); m > 1 && s.spines_per_pod % m != 0; --m) {
      }
    }
    if (m < 1 || s.spines_per_pod % m != 0)
      return Status::InvalidArgument(fmt::format(
          "core_ports_per_pod {} must divide the {} aggregation switches per pod", m,
          s.spines_per_pod));
    if (m * s.pods > o.radix)
      return Status::InvalidArgument(fmt::format(
          "{} pods x {} links per pod exceed the {}-port core switches", s.pods, m, o.radix));
    s.core_ports_per_pod = m;
    s.leaves = s.leaves_per_pod * s.pods;
    s.spines = s.spines_per_pod * s.pods;
    s.cores = s.spines_per_pod / m * aggr_up;
  }
  if (s.leaves_per_pod % o.hcas_per_node != 0)
    return Status::InvalidArgument(fmt::format(
        "rail-optimised hosts need leaves per pod ({}) to be a multiple of hcas_per_node ({})",
        s.leaves_per_pod, o.hcas_per_node));
  int max_hosts = s.leaves * s.leaf_down / o.hcas_per_node;
  if (o.hosts > max_hosts)
    return Status::InvalidArgument(
        fmt::format("{} hosts do not fit; this fat-tree holds {}", o.hosts, max_hosts));
  s.hosts = o.hosts ? o.hosts : max_hosts;
  s.hcas = s.hosts * o.hcas_per_node;
  return s;
}

StatusOr<Fabric> GenerateFatTree(const FatTreeOptions& o) {
  GPOOL_ASSIGN_OR_RETURN(FatTreeShape s, ResolveFatTree(o));
  FabricBuilder b;
  const LinkSpec link{.width = o.width, .speed = o.speed};
  std::vector<NodeId> leaves, spines, cores;
  leaves.reserve(s.leaves);
  spines.reserve(s.spines);
  if (o.levels == 2) {
    for (int i = 0; i < s.leaves; ++i) {
      GPOOL_ASSIGN_OR_RETURN(NodeId n, AddSwitch(b, fmt::format("leaf-{}", i), o.radix, 0));
      leaves.push_back(n);
    }
    for (int j = 0; j < s.spines; ++j) {
      GPOOL_ASSIGN_OR_RETURN(NodeId n, AddSwitch(b, fmt::format("spine-{}", j), o.radix, 1));
      spines.push_back(n);
    }
    // Leaf up port leaf_down + 1 + j goes to spine j, at the spine's port (leaf index + 1).
    for (int i = 0; i < s.leaves; ++i)
      for (int j = 0; j < s.spines; ++j)
        GPOOL_RETURN_IF_ERROR(b.AddLink(leaves[i], static_cast<uint16_t>(s.leaf_down + 1 + j),
                                        spines[j], static_cast<uint16_t>(i + 1), link));
  } else {
    for (int p = 0; p < s.pods; ++p)
      for (int i = 0; i < s.leaves_per_pod; ++i) {
        GPOOL_ASSIGN_OR_RETURN(NodeId n,
                               AddSwitch(b, fmt::format("leaf-p{}-{}", p, i), o.radix, 0));
        leaves.push_back(n);
      }
    for (int p = 0; p < s.pods; ++p)
      for (int a = 0; a < s.spines_per_pod; ++a) {
        GPOOL_ASSIGN_OR_RETURN(NodeId n,
                               AddSwitch(b, fmt::format("spine-p{}-{}", p, a), o.radix, 1));
        spines.push_back(n);
      }
    for (int c = 0; c < s.cores; ++c) {
      GPOOL_ASSIGN_OR_RETURN(NodeId n, AddSwitch(b, fmt::format("core-{}", c), o.radix, 2));
      cores.push_back(n);
    }
    const int aggr_up = o.radix - s.leaves_per_pod;
    const int m = s.core_ports_per_pod;
    for (int p = 0; p < s.pods; ++p) {
      for (int i = 0; i < s.leaves_per_pod; ++i)
        for (int a = 0; a < s.spines_per_pod; ++a)
          GPOOL_RETURN_IF_ERROR(b.AddLink(
              leaves[p * s.leaves_per_pod + i], static_cast<uint16_t>(s.leaf_down + 1 + a),
              spines[p * s.spines_per_pod + a], static_cast<uint16_t>(i + 1), link));
      // Aggregation a, up port j -> core (a / m) * aggr_up + j, at core port p * m + a % m + 1.
      for (int a = 0; a < s.spines_per_pod; ++a)
        for (int j = 0; j < aggr_up; ++j)
          GPOOL_RETURN_IF_ERROR(b.AddLink(
              spines[p * s.spines_per_pod + a], static_cast<uint16_t>(s.leaves_per_pod + 1 + j),
              cores[(a / m) * aggr_up + j], static_cast<uint16_t>(p * m + a % m + 1), link));
    }
  }
  int next_host = 0;
  const int rails = o.hcas_per_node;
  for (int g = 0; g * rails < s.leaves; ++g) {
    std::vector<NodeId> group(leaves.begin() + g * rails, leaves.begin() + (g + 1) * rails);
    GPOOL_RETURN_IF_ERROR(
        AddRailGroup(b, group, s.leaf_down, 1, s.hosts, s.hosts, link, &next_host));
  }
  return b.Build({.assign_lids = o.assign_lids});
}

StatusOr<Fabric> GenerateTorus(const TorusOptions& o) {
  for (int d : o.dims)
    if (d < 1 || d > 64)
      return Status::InvalidArgument(fmt::format("torus dimension {} is outside 1..64", d));
  if (o.hcas_per_switch < 0) return Status::InvalidArgument("hcas_per_switch must not be negative");
  int link_ports = 0;
  for (int d : o.dims) link_ports += d > 2 ? 2 : (d == 2 ? 1 : 0);
  int ports = link_ports + o.hcas_per_switch;
  if (ports < 1 || ports > 254)
    return Status::InvalidArgument(fmt::format("torus switches would need {} ports", ports));
  // Plain locals, not a structured binding: clang 14 cannot capture those in a lambda.
  const int X = o.dims[0], Y = o.dims[1], Z = o.dims[2];
  auto index = [&](int x, int y, int z) { return (z * Y + y) * X + x; };
  FabricBuilder b;
  std::vector<NodeId> sw(static_cast<size_t>(X) * Y * Z);
  for (int z = 0; z < Z; ++z)
    for (int y = 0; y < Y; ++y)
      for (int x = 0; x < X; ++x) {
        GPOOL_ASSIGN_OR_RETURN(sw[index(x, y, z)],
                               AddSwitch(b, fmt::format("sw-x{}-y{}-z{}", x, y, z), ports, 0));
      }
  const LinkSpec link{.width = o.width, .speed = o.speed};
  // Port layout per switch: for each dimension of size > 2, "+" then "-"; size 2: one port.
  std::array<int, 3> plus_port{}, minus_port{};
  int next = 1;
  for (int d = 0; d < 3; ++d) {
    if (o.dims[d] > 2) {
      plus_port[d] = next++;
      minus_port[d] = next++;
    } else if (o.dims[d] == 2) {
      plus_port[d] = minus_port[d] = next++;
    }
  }
  for (int z = 0; z < Z; ++z)
    for (int y = 0; y < Y; ++y)
      for (int x = 0; x < X; ++x) {
        std::array<int, 3> c = {x, y, z};
        for (int d = 0; d < 3; ++d) {
          if (o.dims[d] < 2) continue;
          std::array<int, 3> n = c;
          n[d] = (c[d] + 1) % o.dims[d];
          // Size 2: the "+" neighbour of 1 is 0, cabled already from 0's side.
          if (o.dims[d] == 2 && c[d] == 1) continue;
          GPOOL_RETURN_IF_ERROR(b.AddLink(sw[index(c[0], c[1], c[2])],
                                          static_cast<uint16_t>(plus_port[d]),
                                          sw[index(n[0], n[1], n[2])],
                                          static_cast<uint16_t>(minus_port[d]), link));
        }
      }
  int total_hosts = static_cast<int>(sw.size()) * o.hcas_per_switch;
  int host = 0;
  for (NodeId s : sw) {
    std::vector<NodeId> rail = {s};
    GPOOL_RETURN_IF_ERROR(AddRailGroup(b, rail, o.hcas_per_switch, link_ports + 1, 0,
                                       total_hosts, link, &host));
  }
  return b.Build({.assign_lids = o.assign_lids});
}

StatusOr<Fabric> GenerateDragonfly(const DragonflyOptions& o) {
  const int a = o.routers_per_group, p = o.hosts_per_router, h = o.global_links_per_router;
  if (a < 1 || p < 0 || h < 0)
    return Status::InvalidArgument("dragonfly: routers, hosts and global links must be positive");
  const int groups = o.groups ? o.groups : a * h + 1;
  if (groups < 1) return Status::InvalidArgument("dragonfly: groups must be positive");
  if (groups > 1 && h == 0)
    return Status::InvalidArgument("dragonfly: several groups need global links");
  int ports = (a - 1) + h + p;
  if (ports < 1 || ports > 254)
    return Status::InvalidArgument(fmt::format("dragonfly routers would need {} ports", ports));
  FabricBuilder b;
  const LinkSpec link{.width = o.width, .speed = o.speed};
  std::vector<NodeId> r(static_cast<size_t>(groups) * a);
  for (int g = 0; g < groups; ++g)
    for (int i = 0; i < a; ++i) {
      GPOOL_ASSIGN_OR_RETURN(r[g * a + i],
                             AddSwitch(b, fmt::format("df-g{}-r{}", g, i), ports, 0));
    }
  // Local links: router i port j+1 (j < a-1) goes to the j-th other router of the group.
  auto local_port = [](int from, int to) { return static_cast<uint16_t>((to < from ? to : to - 1) + 1); };
  for (int g = 0; g < groups; ++g)
    for (int i = 0; i < a; ++i)
      for (int j = i + 1; j < a; ++j)
        GPOOL_RETURN_IF_ERROR(
            b.AddLink(r[g * a + i], local_port(i, j), r[g * a + j], local_port(j, i), link));
  // Global links: slot s of a group is router s / h, port a + s % h. Pairs are taken by
  // increasing offset, round after round, while both groups have a free slot.
  std::vector<int> used(groups, 0);
  const int slots = a * h;
  bool progress = groups > 1;
  while (progress) {
    progress = false;
    for (int off = 1; off <= groups / 2; ++off)
      for (int g = 0; g < groups; ++g) {
        int t = (g + off) % groups;
        if (off * 2 == groups && t < g) continue;  // the opposite pair, once
        if (used[g] >= slots || used[t] >= slots) continue;
        int sg = used[g]++, st = used[t]++;
        GPOOL_RETURN_IF_ERROR(b.AddLink(r[g * a + sg / h], static_cast<uint16_t>(a + sg % h),
                                        r[t * a + st / h], static_cast<uint16_t>(a + st % h),
                                        link));
        progress = true;
      }
  }
  int total_hosts = groups * a * p;
  int host = 0;
  for (NodeId s : r) {
    std::vector<NodeId> rail = {s};
    GPOOL_RETURN_IF_ERROR(AddRailGroup(b, rail, p, a + h, 0, total_hosts, link, &host));
  }
  return b.Build({.assign_lids = o.assign_lids});
}

}  // namespace gpool::fabric
