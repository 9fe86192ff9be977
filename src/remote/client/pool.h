// What gpool's two client stand-ins share, libcudart.so.13 (cudart_api.cc) and libcuda.so.1
// (driver_api.cc): the program's GPUs as `gpool run` describes them in the environment, and
// connecting to their servers. Each stand-in loaded in a process opens its own session per server.
// Thread safety: pure functions and a connect that touches no shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
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

// Connects to `server` (HOST:PORT) with the environment's token and transport, naming this
// process (host:pid) in the server's logs.
StatusOr<std::unique_ptr<ServerLink>> ConnectServer(const PoolEnv& env, const std::string& server);

}  // namespace gpool::remote::client
