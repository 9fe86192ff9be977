#include "agent/topology.h"

#include <hwloc.h>

#include <algorithm>
#include <map>

#include <fmt/format.h>

namespace gpool::agent {
namespace {

// Frees the topology on every path.
struct Topo {
  hwloc_topology_t t = nullptr;
  ~Topo() {
    if (t) hwloc_topology_destroy(t);
  }
};

std::string BusId(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", a.domain, a.bus, a.dev, a.func);
}

bool IsNvidiaGpu(hwloc_obj_t pci) {
  const auto& a = pci->attr->pcidev;
  return a.vendor_id == 0x10de && (a.class_id == 0x0300 || a.class_id == 0x0302);
}

std::vector<hwloc_obj_t> Ancestors(hwloc_obj_t o) {
  std::vector<hwloc_obj_t> out;
  for (; o != nullptr; o = o->parent) out.push_back(o);
  return out;
}

int NumaOf(hwloc_topology_t t, hwloc_obj_t o) {
  hwloc_obj_t host = hwloc_get_non_io_ancestor_obj(t, o);
  if (host == nullptr || host->nodeset == nullptr) return -1;
  return hwloc_bitmap_first(host->nodeset);
}

// 0 PIX, 1 PHB, 2 NODE, 3 SYS.
int Distance(hwloc_topology_t t, hwloc_obj_t a, hwloc_obj_t b) {
  std::vector<hwloc_obj_t> pa = Ancestors(a), pb = Ancestors(b);
  hwloc_obj_t lca = nullptr;
  for (hwloc_obj_t x : pa) {
    if (std::find(pb.begin(), pb.end(), x) != pb.end()) {
      lca = x;
      break;
    }
  }
  if (lca != nullptr && lca->type == HWLOC_OBJ_BRIDGE) {
    return lca->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST ? 1 : 0;
  }
  hwloc_obj_t ha = hwloc_get_non_io_ancestor_obj(t, a), hb = hwloc_get_non_io_ancestor_obj(t, b);
  if (ha && hb && ha->nodeset && hb->nodeset && hwloc_bitmap_isequal(ha->nodeset, hb->nodeset)) return 2;
  return 3;
}

const char* kDistanceNames[] = {"PIX", "PHB", "NODE", "SYS"};

}  // namespace

StatusOr<std::vector<AffinityInfo>> ComputeAffinity(const TopologyOptions& options,
                                                    const std::vector<GpuInfo>& gpus) {
  Topo topo;
  if (hwloc_topology_init(&topo.t) != 0) return Status::Internal("hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(topo.t, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (!options.xml_path.empty() && hwloc_topology_set_xml(topo.t, options.xml_path.c_str()) != 0) {
    return Status::InvalidArgument(fmt::format("{}: not an hwloc XML topology", options.xml_path));
  }
  if (hwloc_topology_load(topo.t) != 0) {
    return Status::InvalidArgument(
        fmt::format("hwloc: cannot load topology {}", options.xml_path.empty() ? "(live)" : options.xml_path));
  }
  std::map<std::string, hwloc_obj_t> pci_by_bus;
  std::vector<hwloc_obj_t> nvidia;
  for (hwloc_obj_t p = hwloc_get_next_pcidev(topo.t, nullptr); p; p = hwloc_get_next_pcidev(topo.t, p)) {
    pci_by_bus[BusId(p)] = p;
    if (IsNvidiaGpu(p)) nvidia.push_back(p);
  }
  std::vector<std::pair<std::string, hwloc_obj_t>> hcas;
  for (hwloc_obj_t o = hwloc_get_next_osdev(topo.t, nullptr); o; o = hwloc_get_next_osdev(topo.t, o)) {
    if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS && o->name) hcas.push_back({o->name, o});
  }
  std::sort(hcas.begin(), hcas.end(),
            [](const auto& x, const auto& y) { return x.first < y.first; });
  const bool by_bus = std::any_of(gpus.begin(), gpus.end(), [](const GpuInfo& g) { return !g.pci_bus_id.empty(); });

  std::map<std::string, int> load;  // GPUs assigned per HCA
  std::vector<AffinityInfo> out;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const GpuInfo& g = gpus[i];
    hwloc_obj_t obj = nullptr;
    if (by_bus) {
      auto it = pci_by_bus.find(g.pci_bus_id);
      if (it != pci_by_bus.end()) obj = it->second;
    } else if (i < nvidia.size()) {
      obj = nvidia[i];
    }
    AffinityInfo a;
    a.gpu = g.index;
    if (obj == nullptr) {
      a.pci_bus_id = g.pci_bus_id;
      out.push_back(a);  // not in the topology: unknown affinity
      continue;
    }
    a.pci_bus_id = BusId(obj);
    a.numa_node = NumaOf(topo.t, obj);
    int best = 4;
    for (const auto& [name, h] : hcas) {
      int d = Distance(topo.t, obj, h);
      if (d < best || (d == best && load[name] < load[a.hca])) {
        best = d;
        a.hca = name;
      }
    }
    if (!a.hca.empty()) {
      a.distance = kDistanceNames[best];
      ++load[a.hca];
    }
    out.push_back(a);
  }
  return out;
}

}  // namespace gpool::agent
