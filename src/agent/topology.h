// GPU-to-HCA PCIe affinity through hwloc: for each GPU, the nearest HCA and how near, in
// nvidia-smi topo's terms:
//   PIX   the lowest common ancestor is a PCI bridge (same PCIe switch)
//   PHB   it is a host bridge (same root complex)
//   NODE  different host bridges under the same NUMA node(s)
//   SYS   across NUMA nodes
// (PXB, "several PCIe bridges", is reported as PIX: both mean a switch path without the CPU.)
// Ties go to the HCA with the fewest GPUs already assigned, then by name, so rail-optimised
// nodes (one HCA per GPU pair or per GPU) spread over their rails.
//
// GPUs are matched by PCI bus id (from NVML); when no GPU has one (emulated GPUs), the
// topology's NVIDIA display/3D controllers are taken in bus order. HCAs are the topology's
// OpenFabrics OS devices ("mlx5_0").
//
// Thread safety: pure function of its inputs; hwloc topologies are created and freed per call.
#pragma once

#include <string>
#include <vector>

#include "agent/inventory.h"

namespace gpool::agent {

struct TopologyOptions {
  std::string xml_path;  // empty: the live machine; else an hwloc v2 XML export (tests)
};

// Errors: the XML does not load (named by path). A machine without GPUs gives an empty list.
StatusOr<std::vector<AffinityInfo>> ComputeAffinity(const TopologyOptions& options,
                                                    const std::vector<GpuInfo>& gpus);

}  // namespace gpool::agent
