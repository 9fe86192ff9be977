// What gpool's client stand-ins share (libcuda.so.1, driver_api.cc, and the NVML and NCCL ones
// over it): the program's GPUs as `gpool run` describes them in the environment, and connecting
// to their servers.
// Thread safety: pure functions and a connect that touches no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "remote/client/link.h"

namespace gpool::remote::client {

struct DeviceRef {
  std::string server;  // HOST:PORT
  uint32_t index = 0;  // on that server
};

// The program's devices 0..N-1 and how to reach their servers.
struct PoolEnv {
  std::vector<DeviceRef> devices;  // empty: see env_error
  std::string env_error;           // why there are no devices
  std::string token;               // GPOOL_LEASE
  std::string transport = "tcp";   // GPOOL_TRANSPORT
};

// Parses GPOOL_DEVICES ("HOST:PORT/INDEX,..."; "/INDEX" may be left out for 0), GPOOL_LEASE and
// GPOOL_TRANSPORT as given (null: unset). A malformed entry leaves no devices and says which entry
// and why in env_error.
PoolEnv ParsePoolEnv(const char* devices, const char* lease, const char* transport);
// The same from the process environment.
PoolEnv ReadPoolEnv();

// The PCI address a device shows the program (cudaDeviceGetPCIBusId, cuDeviceGetPCIBusId, NVML).
// A remote GPU's PCI address is its server's, and two servers' GPUs may well have the same one
// (two emulated servers' GPU 0 are both 0000:00:00.0), while programs and libraries use the bus
// id as a device's identity (NCCL refuses two ranks on one bus id as one GPU; finding a device
// again by id), so it must be unique among the program's devices. gpool's rule: bus and device
// numbers are the GPU's own on its server (what nvidia-smi there shows), and the PCI DOMAIN is
// the server's ordinal among GPOOL_DEVICES' servers (their first appearance: the first server's
// GPUs are in domain 0000, the second's in 0001, ...); the server's own domain is not shown.
// Should two devices still share an address (one GPU listed twice, or a server whose GPUs differ
// only in their domain), the later one gets domain (number of servers + its device ordinal),
// which no server uses. The function is always 0.
struct PciAddr {
  int domain = 0, bus = 0, device = 0;
  bool operator==(const PciAddr&) const = default;
};
// Device `dev`'s address by that rule. `own[d]` is device d's {bus, device} on its server; only
// the entries of `dev`'s server's devices up to `dev` are read. `dev` must index `devices`.
PciAddr PoolPciAddress(const std::vector<DeviceRef>& devices,
                       const std::vector<std::pair<int, int>>& own, int dev);

// Connects to `server` (HOST:PORT) with the environment's token and transport, naming this
// process (host:pid) in the server's logs.
StatusOr<std::unique_ptr<ServerLink>> ConnectServer(const PoolEnv& env, const std::string& server);

}  // namespace gpool::remote::client
