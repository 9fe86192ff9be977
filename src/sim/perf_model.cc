#include "sim/perf_model.h"

#include <algorithm>
#include <limits>

#include "sim/fabric_routes.h"

namespace gpool::sim {

NetModel::NetModel(const SimCluster& c) : cluster_(&c), routes_(c.routes.get()) {
  if (routes_ != nullptr) {
    capacity_.resize(routes_->num_directed_links());
    for (size_t l = 0; l < capacity_.size(); ++l) capacity_[l] = routes_->capacity_gbps(l);
    flows_.assign(capacity_.size(), 0);
    return;
  }
  leaf_base_ = 2 * c.hosts.size();
  pod_base_ = leaf_base_ + 2 * c.leaf_names.size();
  capacity_.resize(pod_base_ + 2 * c.pod_names.size());
  for (size_t h = 0; h < c.hosts.size(); ++h) {
    capacity_[HostUp(h)] = capacity_[HostDown(h)] = c.hosts[h].nic_gbps;
  }
  for (size_t l = 0; l < c.leaf_names.size(); ++l) {
    capacity_[LeafUp(l)] = capacity_[LeafDown(l)] = c.leaf_uplink_gbps[l];
  }
  for (size_t p = 0; p < c.pod_names.size(); ++p) {
    capacity_[PodUp(p)] = capacity_[PodDown(p)] = c.pod_uplink_gbps[p];
  }
  flows_.assign(capacity_.size(), 0);
}

template <typename Fn>
void NetModel::ForEachLink(uint32_t a, uint32_t b, Fn&& fn) const {
  if (routes_ != nullptr) {
    for (int k = 0; k < routes_->channels(a); ++k) routes_->ForEachHop(a, b, k, fn);
    return;
  }
  const SimHost& ha = cluster_->hosts[a];
  const SimHost& hb = cluster_->hosts[b];
  fn(HostUp(a));
  if (ha.leaf != hb.leaf) {
    fn(LeafUp(ha.leaf));
    if (ha.pod != hb.pod) {
      fn(PodUp(ha.pod));
      fn(PodDown(hb.pod));
    }
    fn(LeafDown(hb.leaf));
  }
  fn(HostDown(b));
}

void NetModel::AddRing(const std::vector<uint32_t>& hosts, int sign) {
  if (hosts.size() < 2) return;
  for (size_t i = 0; i < hosts.size(); ++i) {
    uint32_t a = hosts[i], b = hosts[(i + 1) % hosts.size()];
    ForEachLink(a, b, [&](size_t link) { flows_[link] += sign; });
  }
}

double NetModel::EdgeRateGbps(uint32_t a, uint32_t b) const {
  const double nic = std::min(cluster_->hosts[a].nic_gbps, cluster_->hosts[b].nic_gbps);
  if (routes_ == nullptr) {
    double rate = nic;
    ForEachLink(a, b, [&](size_t link) {
      rate = std::min(rate, capacity_[link] / std::max(flows_[link], 1));
    });
    return rate;
  }
  // Channels split the edge's data evenly by their ideal rates; the edge finishes with its
  // slowest channel relative to that share.
  double ideal_sum = 0, worst = 1;
  const int nb = routes_->channels(b);
  for (int k = 0; k < routes_->channels(a); ++k) {
    const double ideal = std::min(routes_->channel_gbps(a, k), routes_->channel_gbps(b, k % nb));
    double rate = ideal;
    routes_->ForEachHop(a, b, k, [&](size_t link) {
      rate = std::min(rate, capacity_[link] / std::max(flows_[link], 1));
    });
    ideal_sum += ideal;
    if (ideal > 0) worst = std::min(worst, rate / ideal);
  }
  return std::min(nic, ideal_sum * worst);
}

double NetModel::RingRateGbps(const std::vector<uint32_t>& hosts) const {
  double rate = std::numeric_limits<double>::infinity();
  if (hosts.size() < 2) return rate;
  for (size_t i = 0; i < hosts.size(); ++i) {
    rate = std::min(rate, EdgeRateGbps(hosts[i], hosts[(i + 1) % hosts.size()]));
  }
  return rate;
}

double NetModel::Slowdown(double comm_fraction, const std::vector<uint32_t>& hosts) const {
  if (hosts.size() < 2 || comm_fraction <= 0) return 1.0;
  double nic = std::numeric_limits<double>::infinity();
  for (uint32_t h : hosts) nic = std::min(nic, cluster_->hosts[h].nic_gbps);
  double rate = RingRateGbps(hosts);
  if (!(rate > 0)) return 1e6;  // no bandwidth at all: effectively never finishes
  return (1 - comm_fraction) + comm_fraction * std::max(1.0, nic / rate);
}

bool NetModel::idle() const {
  return std::all_of(flows_.begin(), flows_.end(), [](int32_t f) { return f == 0; });
}

}  // namespace gpool::sim
