#include "sim/load_view.h"

#include <algorithm>

#include "sim/fabric_routes.h"

namespace gpool::sim {

std::shared_ptr<const sched::FabricLoad> FabricLoadOf(const SimCluster& c, const NetModel& net) {
  auto load = std::make_shared<sched::FabricLoad>();
  const size_t pods = c.pod_names.size(), leaves = c.leaf_names.size();
  load->up_gbps.assign(1 + pods + leaves, -1);
  load->down_gbps.assign(1 + pods + leaves, -1);
  const FabricRoutes* r = c.routes.get();
  // Mean over parallel links of what one more flow would get on each.
  auto mean_rate = [&](const std::vector<size_t>& links) -> float {
    double sum = 0;
    int n = 0;
    for (size_t l : links) {
      const double cap = r->capacity_gbps(l);
      if (!(cap > 0)) continue;
      sum += cap / (net.link_flows(l) + 1);
      ++n;
    }
    return n > 0 ? static_cast<float>(sum / n) : 0.0f;
  };
  if (r != nullptr) {
    for (size_t h = 0; h < c.hosts.size(); ++h) {
      for (int k = 0; k < r->channels(static_cast<uint32_t>(h)); ++k) {
        load->flow_gbps = std::max(load->flow_gbps, r->channel_gbps(static_cast<uint32_t>(h), k));
      }
    }
    for (size_t p = 0; p < pods && p < r->pod_uplinks().size(); ++p) {
      load->up_gbps[1 + p] = mean_rate(r->pod_uplinks()[p].up);
      load->down_gbps[1 + p] = mean_rate(r->pod_uplinks()[p].down);
    }
    for (size_t l = 0; l < leaves && l < r->leaf_uplinks().size(); ++l) {
      load->up_gbps[1 + pods + l] = mean_rate(r->leaf_uplinks()[l].up);
      load->down_gbps[1 + pods + l] = mean_rate(r->leaf_uplinks()[l].down);
    }
    return load;
  }
  for (const SimHost& h : c.hosts) load->flow_gbps = std::max(load->flow_gbps, h.nic_gbps);
  for (size_t p = 0; p < pods; ++p) {
    const int32_t i = static_cast<int32_t>(p);
    load->up_gbps[1 + p] = static_cast<float>(c.pod_uplink_gbps[p] / (net.pod_up_flows(i) + 1));
    load->down_gbps[1 + p] = static_cast<float>(c.pod_uplink_gbps[p] / (net.pod_down_flows(i) + 1));
  }
  for (size_t l = 0; l < leaves; ++l) {
    const int32_t i = static_cast<int32_t>(l);
    load->up_gbps[1 + pods + l] = static_cast<float>(c.leaf_uplink_gbps[l] / (net.leaf_up_flows(i) + 1));
    load->down_gbps[1 + pods + l] = static_cast<float>(c.leaf_uplink_gbps[l] / (net.leaf_down_flows(i) + 1));
  }
  return load;
}

}  // namespace gpool::sim
