// The client runtime's state: the devices of GPOOL_DEVICES, lazy connections to their servers,
// registered modules/kernels/variables, device allocations, streams and events.
//
// Devices 0..N-1 are the entries of GPOOL_DEVICES ("HOST:PORT/INDEX,..."), possibly on several
// servers; each server gets one ServerLink (one session), opened at the first call that needs it,
// and receives every registration made so far in one batch. Device pointers are the servers' own
// addresses; the client keeps a table of allocations to route copies, and refuses an allocation
// that overlaps one from another server (emulated servers avoid this by address hints; see
// docs/remoting.md). Thread safety: all methods are thread-safe; state is guarded by one mutex
// and each link's own mutex (taken in that order).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "remote/client/link.h"
#include "remote/client/pool.h"
#include "remote/fatbin/fatbin.h"
#include "remote/protocol/messages.h"

namespace gpool::remote::client {

struct FunctionRec;
struct VarRec;

// One device of one server (its session's link and the server-local index): where a module's
// variables live, since every device that loads a module has its own copy of them.
struct ServerDevice {
  ServerLink* link = nullptr;
  uint32_t index = 0;
  auto operator<=>(const ServerDevice&) const = default;
};

struct ModuleRec {
  uint64_t id = 0;
  std::vector<std::byte> image;
  bool parsed = false;  // client-side layouts (the fallback) parsed?
  Status parse_status;
  fatbin::Module layouts;
  // Names of its __managed__ variables. Managed memory is not remoted: each is one device
  // variable on a GPU server, so the module's kernels may run on one device only (the first they
  // are launched on), and host access to the variables stops the program (cudart_api.cc).
  std::vector<std::string> managed;
  int managed_device = -1;
  // Its functions and variables, whose caches (layouts per server, variable addresses per server
  // device) one GetModuleInfo round trip per server device fills (cudart_api.cc,
  // FetchModuleInfo). Ownership: shared between the module, the runtime's indexes (by host
  // address) and any call in flight that looked one up (a launch holds its FunctionRec across
  // its round trips without R().mu). __cudaUnregisterFatBinary drops the module and its records
  // from every index, so its kernels and variables are refused from then on, and a library
  // loaded again at the same host addresses registers new records; a call still in flight keeps
  // its records (and module) alive until it returns, and finds `unregistered` set.
  std::vector<std::shared_ptr<FunctionRec>> functions;
  std::vector<std::shared_ptr<VarRec>> vars;
  bool unregistered = false;  // set under R().mu
  // Held while fetching the module's info from a server device, so threads racing to its first
  // launch or symbol use there send one request. Taken before R().mu and any link's mutex, never while holding either.
  std::mutex fetch_mu;
};

struct FunctionRec {
  uint64_t id = 0;
  uint64_t module = 0;
  const void* host_fun = nullptr;
  std::string name;
  std::unordered_map<ServerLink*, std::vector<proto::ParamSlot>> params;  // cached per server
  // Per server whose module info had no layout for it: the server's reason (the client's fatbin
  // parser is asked at launch; its layout then goes into `params`).
  std::unordered_map<ServerLink*, std::string> no_layout;
};

struct VarRec {
  uint64_t id = 0;
  uint64_t module = 0;
  const void* host = nullptr;  // the host shadow (the key of Runtime::vars)
  std::string name;
  uint64_t size = 0;
  bool constant = false;
  // Address and size, cached per server device: each device has its own copy of the variable
  // (two devices of one server give two addresses).
  std::map<ServerDevice, proto::Symbol> symbol;
  struct Failure {
    int32_t code = 0;
    std::string message;
  };
  std::map<ServerDevice, Failure> failure;  // per server device that could not find it
};

struct StreamRec {
  int device = 0;
  uint64_t id = 0;
  unsigned flags = 0;  // as created (cudaStreamGetFlags)
  int priority = 0;    // as created, clamped to the device's range (cudaStreamGetPriority)
};
struct EventRec {
  int device = 0;
  uint64_t id = 0;
};
struct AllocRec {
  uint64_t size = 0;
  int device = 0;
};

}  // namespace gpool::remote::client
