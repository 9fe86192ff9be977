#include "control/allocation_text.h"

#include <fmt/format.h>

namespace gpool::control {

std::string GpuList(const v1::Allocation& a) {
  std::string out;
  auto add = [&](const std::string& node, uint32_t mask) {
    for (int g = 0; g < 32; ++g) {
      if (mask >> g & 1) out += fmt::format("{}{}/{}", out.empty() ? "" : ",", node, g);
    }
  };
  add(a.node(), a.gpu_mask());
  for (const auto& r : a.remote()) add(r.node(), r.gpu_mask());
  return out;
}

std::string AllocationText(const v1::Allocation& a) {
  std::string out = fmt::format("{} <- {}", a.node(), a.gpu_mask() == 0 && a.remote_size() == 0
                                                          ? "no GPU"
                                                          : GpuList(a));
  if (a.gpu_milli() > 0 && a.gpu_milli() < 1000) out += fmt::format(" ({}m)", a.gpu_milli());
  if (a.via_server()) {
    out += fmt::format(" ({}, est. slowdown {:.2f})",
                       a.remote_size() > 0 ? "remote" : "through its GPU server",
                       a.slowdown() > 0 ? a.slowdown() : 1.0);
  }
  return out;
}

}  // namespace gpool::control
