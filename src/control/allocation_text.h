// An allocation for people (the CLI's jobs, describe and top): the client's side of
// allocations.h, with no scheduler types, so that the CLI's client binary (src/cli, "Two
// binaries" in docs/cli.md) links it without the scheduler.
//
// Thread safety: free functions, no state.
#pragma once

#include <string>

#include "gpool/v1/gpool.pb.h"

namespace gpool::control {

// "node/gpu" of each GPU the allocation uses, in the task's order: "gpu-1/0,gpu-1/1,gpu-2/3".
std::string GpuList(const v1::Allocation& a);
// One task's placement for people: its host and its GPUs, e.g.
// "cpu-0 <- gpu-1/0,gpu-1/1,gpu-2/3 (remote, est. slowdown 1.04)", "n0 <- n0/2,n0/3",
// "n0 <- n0/1 (250m)", "n0 <- n0/0 (through its GPU server, est. slowdown 1.02)".
std::string AllocationText(const v1::Allocation& a);

}  // namespace gpool::control
