#include "ib/smp_probe.h"

#include <infiniband/mad.h>

#include <fmt/format.h>

namespace gpool::ib {
namespace {

constexpr size_t kMadBuf = 1024;  // libibmad answers need room for a whole MAD and more

ib_portid_t ByLid(uint16_t lid) {
  ib_portid_t id{};
  ib_portid_set(&id, lid, 0, 0);
  return id;
}

StatusOr<ib_portid_t> ByPath(const std::vector<uint8_t>& path) {
  if (path.size() + 1 >= IB_SUBNET_PATH_HOPS_MAX) {
    return Status::InvalidArgument(fmt::format("directed route of {} hops is too long", path.size()));
  }
  ib_portid_t id{};
  ib_portid_set(&id, 0, 0, 0);
  id.drpath.cnt = static_cast<int>(path.size());
  id.drpath.p[0] = 0;
  for (size_t i = 0; i < path.size(); ++i) id.drpath.p[i + 1] = path[i];
  id.drpath.drslid = 0xffff;  // permissive: a pure directed route
  id.drpath.drdlid = 0xffff;
  return id;
}

std::string PathName(const std::vector<uint8_t>& path) {
  std::string s = "DR 0";
  for (uint8_t p : path) s += fmt::format(",{}", p);
  return s;
}

std::string TrimDesc(const uint8_t* buf) {
  std::string d(reinterpret_cast<const char*>(buf), strnlen(reinterpret_cast<const char*>(buf), IB_SMP_DATA_SIZE));
  while (!d.empty() && (d.back() == ' ' || d.back() == '\0')) d.pop_back();
  return d;
}

}  // namespace

const char* LinkPhaseName(LinkPhase p) {
  switch (p) {
    case LinkPhase::kDown: return "down";
    case LinkPhase::kInit: return "init";
    case LinkPhase::kActive: return "active";
  }
  return "?";
}

StatusOr<std::unique_ptr<SmpProbe>> SmpProbe::Open(const SmpProbeOptions& options) {
  if (options.timeout_ms <= 0) return Status::InvalidArgument("SmpProbe: timeout_ms must be > 0");
  if (options.retries < 0) return Status::InvalidArgument("SmpProbe: retries must be >= 0");
  int classes[] = {IB_SMI_CLASS, IB_SMI_DIRECT_CLASS};
  std::string ca = options.ca_name;
  ibmad_port* p = mad_rpc_open_port(ca.empty() ? nullptr : ca.data(), options.ca_port, classes, 2);
  if (!p) {
    return Status::Unavailable(fmt::format(
        "cannot open a MAD port on {} port {} (no InfiniBand device or no umad access; under "
        "ibsim run with LD_PRELOAD=libumad2sim.so)",
        ca.empty() ? "the first CA" : ca, options.ca_port));
  }
  mad_rpc_set_retries(p, options.retries);
  mad_rpc_set_timeout(p, options.timeout_ms);
  std::unique_ptr<SmpProbe> s(new SmpProbe());
  s->port_ = p;
  s->options_ = options;
  return s;
}

SmpProbe::~SmpProbe() {
  if (port_) mad_rpc_close_port(port_);
}

Status SmpProbe::Query(void* id, unsigned attr, unsigned mod, uint8_t* buf, const std::string& what) {
  ++mads_;
  if (!smp_query_via(buf, static_cast<ib_portid_t*>(id), attr, mod, static_cast<unsigned>(options_.timeout_ms),
                     port_)) {
    return Status::Unavailable(fmt::format("{} query of {} failed (timeout {} ms, {} retries)",
                                           attr == IB_ATTR_PORT_INFO ? "PortInfo"
                                           : attr == IB_ATTR_NODE_INFO ? "NodeInfo"
                                                                       : "NodeDescription",
                                           what, options_.timeout_ms, options_.retries));
  }
  return Status::Ok();
}

StatusOr<LinkPhase> SmpProbe::Phase(const uint8_t* buf) {
  uint32_t state = mad_get_field(const_cast<uint8_t*>(buf), 0, IB_PORT_STATE_F);
  uint32_t phys = mad_get_field(const_cast<uint8_t*>(buf), 0, IB_PORT_PHYS_STATE_F);
  if (state >= 4) return LinkPhase::kActive;              // Active, ActiveDefer
  if (state >= 2 && phys == 5) return LinkPhase::kInit;  // Initialize/Armed over LinkUp
  return LinkPhase::kDown;
}

StatusOr<std::string> SmpProbe::NodeDescription(uint16_t lid) {
  if (lid == 0) return Status::InvalidArgument("NodeDescription: LID 0");
  ib_portid_t id = ByLid(lid);
  uint8_t buf[kMadBuf] = {};
  GPOOL_RETURN_IF_ERROR(Query(&id, IB_ATTR_NODE_DESC, 0, buf, fmt::format("LID {}", lid)));
  return TrimDesc(buf);
}

StatusOr<uint64_t> SmpProbe::NodeGuid(uint16_t lid) {
  if (lid == 0) return Status::InvalidArgument("NodeInfo: LID 0");
  ib_portid_t id = ByLid(lid);
  uint8_t buf[kMadBuf] = {};
  GPOOL_RETURN_IF_ERROR(Query(&id, IB_ATTR_NODE_INFO, 0, buf, fmt::format("LID {}", lid)));
  return static_cast<uint64_t>(mad_get_field64(buf, 0, IB_NODE_GUID_F));
}

StatusOr<LinkPhase> SmpProbe::PortPhase(uint16_t lid, int port) {
  if (lid == 0) return Status::InvalidArgument("PortInfo: LID 0");
  if (port < 1 || port > 254) return Status::InvalidArgument(fmt::format("PortInfo: port {} out of range", port));
  ib_portid_t id = ByLid(lid);
  uint8_t buf[kMadBuf] = {};
  GPOOL_RETURN_IF_ERROR(Query(&id, IB_ATTR_PORT_INFO, static_cast<unsigned>(port), buf,
                              fmt::format("LID {} port {}", lid, port)));
  return Phase(buf);
}

StatusOr<std::string> SmpProbe::NodeDescriptionDr(const std::vector<uint8_t>& path) {
  GPOOL_ASSIGN_OR_RETURN(ib_portid_t id, ByPath(path));
  uint8_t buf[kMadBuf] = {};
  GPOOL_RETURN_IF_ERROR(Query(&id, IB_ATTR_NODE_DESC, 0, buf, PathName(path)));
  return TrimDesc(buf);
}

StatusOr<uint64_t> SmpProbe::NodeGuidDr(const std::vector<uint8_t>& path) {
  GPOOL_ASSIGN_OR_RETURN(ib_portid_t id, ByPath(path));
  uint8_t buf[kMadBuf] = {};
  GPOOL_RETURN_IF_ERROR(Query(&id, IB_ATTR_NODE_INFO, 0, buf, PathName(path)));
  return static_cast<uint64_t>(mad_get_field64(buf, 0, IB_NODE_GUID_F));
}

StatusOr<LinkPhase> SmpProbe::PortPhaseDr(const std::vector<uint8_t>& path, int port) {
  if (port < 1 || port > 254) return Status::InvalidArgument(fmt::format("PortInfo: port {} out of range", port));
  GPOOL_ASSIGN_OR_RETURN(ib_portid_t id, ByPath(path));
  uint8_t buf[kMadBuf] = {};
  GPOOL_RETURN_IF_ERROR(Query(&id, IB_ATTR_PORT_INFO, static_cast<unsigned>(port), buf,
                              fmt::format("{} port {}", PathName(path), port)));
  return Phase(buf);
}

}  // namespace gpool::ib
