// GPUs through NVML, loaded at run time with dlopen("libnvidia-ml.so.1") so the agent builds and
// runs on machines without the NVIDIA driver (then there are no GPUs). Only the few entry points
// the agent needs are resolved, with their C signatures declared here (nvml.h is not a Debian
// package); their layouts are NVML's stable v1 ABI.
//
// Checked on a real GPU by scripts/gpu-check.sh (`gpool agent --discover`).
//
// Thread safety: NVML itself is thread-safe; one NvmlGpus may be used from one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "agent/inventory.h"

namespace gpool::agent {

// nullptr when the library is absent or nvmlInit fails; *why says which (for the log).
std::unique_ptr<GpuSource> OpenNvml(std::string* why);

}  // namespace gpool::agent
