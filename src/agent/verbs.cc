#include "agent/verbs.h"

#include <endian.h>
#include <infiniband/verbs.h>

#include <filesystem>

#include <fmt/format.h>

namespace gpool::agent {

int IbWidthLanes(uint8_t w) {
  switch (w) {
    case 1: return 1;
    case 2: return 4;
    case 4: return 8;
    case 8: return 12;
    case 16: return 2;
    default: return 0;
  }
}

bool IbSpeed(uint32_t s, fabric::LinkSpeed* out) {
  using fabric::LinkSpeed;
  switch (s) {
    case 1: *out = LinkSpeed::kSdr; return true;
    case 2: *out = LinkSpeed::kDdr; return true;
    case 4: *out = LinkSpeed::kQdr; return true;
    case 8: *out = LinkSpeed::kFdr10; return true;
    case 16: *out = LinkSpeed::kFdr; return true;
    case 32: *out = LinkSpeed::kEdr; return true;
    case 64: *out = LinkSpeed::kHdr; return true;
    case 128: *out = LinkSpeed::kNdr; return true;
    case 256: *out = LinkSpeed::kXdr; return true;
    default: return false;
  }
}

std::string IbRate(uint8_t active_width, uint32_t active_speed, double* gbps) {
  int lanes = IbWidthLanes(active_width);
  fabric::LinkSpeed s;
  if (lanes == 0 || !IbSpeed(active_speed, &s)) {
    *gbps = 0;
    return "unknown";
  }
  *gbps = lanes * fabric::LaneGbps(s);
  return fmt::format("{}x{}", lanes, fabric::LinkSpeedName(s));
}

std::string IbPortState(int state) {
  switch (state) {
    case 0: return "nop";
    case 1: return "down";
    case 2: return "init";
    case 3: return "armed";
    case 4: return "active";
    case 5: return "active_defer";
    default: return fmt::format("unknown({})", state);
  }
}

std::string FormatGuid(uint64_t guid) { return fmt::format("{:#018x}", guid); }

StatusOr<std::vector<HcaPortInfo>> VerbsHcas::List() {
  std::vector<HcaPortInfo> out;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) return out;  // no RDMA subsystem (no devices, no kernel module)
  for (int i = 0; i < n; ++i) {
    const char* name = ibv_get_device_name(list[i]);
    ibv_context* ctx = ibv_open_device(list[i]);
    if (ctx == nullptr) continue;  // e.g. no permission on /dev/infiniband: skip, as absent
    ibv_device_attr dev{};
    if (ibv_query_device(ctx, &dev) == 0) {
      std::string pci;
      std::error_code ec;
      auto p = std::filesystem::canonical(fmt::format("/sys/class/infiniband/{}/device", name), ec);
      if (!ec) pci = p.filename().string();
      for (int port = 1; port <= dev.phys_port_cnt; ++port) {
        ibv_port_attr pa{};
        if (ibv_query_port(ctx, static_cast<uint8_t>(port), &pa) != 0) continue;
        HcaPortInfo h;
        h.device = name;
        h.port = port;
        h.lid = pa.lid;
        h.state = IbPortState(pa.state);
        h.rate = IbRate(pa.active_width, pa.active_speed, &h.rate_gbps);
        ibv_gid gid{};
        if (ibv_query_gid(ctx, static_cast<uint8_t>(port), 0, &gid) == 0) {
          h.guid = FormatGuid(be64toh(gid.global.interface_id));
        }
        h.pci_bus_id = pci;
        out.push_back(std::move(h));
      }
    }
    ibv_close_device(ctx);
  }
  ibv_free_device_list(list);
  return out;
}

}  // namespace gpool::agent
