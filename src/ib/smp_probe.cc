#include "ib/smp_probe.h"

#include <infiniband/mad.h>

#include <fmt/format.h>

namespace gpool::ib {
namespace {
constexpr size_t kMadBuf = 1024;  // libibmad answers need room for a whole MAD and more
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

StatusOr<std::string> SmpProbe::NodeDescription(uint16_t lid) {
  if (lid == 0) return Status::InvalidArgument("NodeDescription: LID 0");
  ib_portid_t id{};
  ib_portid_set(&id, lid, 0, 0);
  uint8_t buf[kMadBuf] = {};
  ++mads_;
  if (!smp_query_via(buf, &id, IB_ATTR_NODE_DESC, 0, static_cast<unsigned>(options_.timeout_ms), port_)) {
    return Status::Unavailable(fmt::format("NodeDescription query of LID {} failed (timeout {} ms)", lid,
                                           options_.timeout_ms));
  }
  std::string d(reinterpret_cast<const char*>(buf), strnlen(reinterpret_cast<const char*>(buf), IB_SMP_DATA_SIZE));
  while (!d.empty() && (d.back() == ' ' || d.back() == '\0')) d.pop_back();
  return d;
}

StatusOr<uint64_t> SmpProbe::NodeGuid(uint16_t lid) {
  if (lid == 0) return Status::InvalidArgument("NodeInfo: LID 0");
  ib_portid_t id{};
  ib_portid_set(&id, lid, 0, 0);
  uint8_t buf[kMadBuf] = {};
  ++mads_;
  if (!smp_query_via(buf, &id, IB_ATTR_NODE_INFO, 0, static_cast<unsigned>(options_.timeout_ms), port_)) {
    return Status::Unavailable(fmt::format("NodeInfo query of LID {} failed (timeout {} ms)", lid,
                                           options_.timeout_ms));
  }
  return static_cast<uint64_t>(mad_get_field64(buf, 0, IB_NODE_GUID_F));
}

StatusOr<LinkPhase> SmpProbe::PortPhase(uint16_t lid, int port) {
  if (lid == 0) return Status::InvalidArgument("PortInfo: LID 0");
  if (port < 1 || port > 254) return Status::InvalidArgument(fmt::format("PortInfo: port {} out of range", port));
  ib_portid_t id{};
  ib_portid_set(&id, lid, 0, 0);
  uint8_t buf[kMadBuf] = {};
  ++mads_;
  if (!smp_query_via(buf, &id, IB_ATTR_PORT_INFO, static_cast<unsigned>(port),
                     static_cast<unsigned>(options_.timeout_ms), port_)) {
    return Status::Unavailable(fmt::format("PortInfo query of LID {} port {} failed (timeout {} ms)", lid, port,
                                           options_.timeout_ms));
  }
  uint32_t state = mad_get_field(buf, 0, IB_PORT_STATE_F);
  uint32_t phys = mad_get_field(buf, 0, IB_PORT_PHYS_STATE_F);
  if (state >= 4) return LinkPhase::kActive;  // Active, ActiveDefer
  if (state >= 2 && phys == 5) return LinkPhase::kInit;  // Initialize/Armed over LinkUp
  return LinkPhase::kDown;
}

}  // namespace gpool::ib
