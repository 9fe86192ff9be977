// The state of gpool's libnccl.so.2 stand-in (nccl_api.cc, nccl_relay.cc): communicators, the
// cliques of ranks created together, and the operations they have posted but not yet run.
// Everything here is guarded by Mu(); an operation runs (relayed through this process) under it,
// so a communicator's operations run one at a time, in posting order.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace gpool::remote::client::nccl {

struct Clique;

enum class Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kSend, kRecv };
const char* KindName(Kind k);

// One rank's call: what NCCL's API took, with the rank's stream.
struct Op {
  Kind kind = Kind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;          // elements per rank (AllGather: sent; ReduceScatter: received)
  int dtype = 0, op = 0;
  int root = 0;              // Broadcast and Reduce: the root; Send and Recv: the peer
  CUstream stream = nullptr;
  struct ::ncclComm* comm = nullptr;
  uint64_t seq = 0;          // the rank's posting number, for messages (1st, 2nd, ...)
  std::string Describe() const;
};

}  // namespace gpool::remote::client::nccl

// nccl.h declares `typedef struct ncclComm* ncclComm_t`: the stand-in's communicator is one rank.
struct ncclComm {
  gpool::remote::client::nccl::Clique* clique = nullptr;
  int rank = 0;
  CUdevice device = 0;
  CUcontext ctx = nullptr;     // the device's primary context (retained) or the creator's current
  bool retained = false;       // ctx is a primary context this stand-in retained
  ncclResult_t async_error = ncclSuccess;
};

namespace gpool::remote::client::nccl {

// Page-locked host memory (the driver stand-in's cuMemHostAlloc, so that reads into it return
// once requested) that a clique's operations are relayed through, kept from one operation to the
// next: allocated per operation it cost a cuMemHostAlloc and a cuMemFreeHost, which waits for
// every link's reads, each time. Grows to the largest request; freed with the clique.
class HostStaging {
 public:
  HostStaging() = default;
  HostStaging(HostStaging&& o) noexcept : p_(std::exchange(o.p_, nullptr)), cap_(std::exchange(o.cap_, 0)) {}
  HostStaging& operator=(HostStaging&&) = delete;
  ~HostStaging();
  // At least `n` bytes (contents not kept when it grows); nullptr when cuMemHostAlloc fails.
  std::byte* Get(size_t n);

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

// The ranks of one communicator: made by ncclCommInitAll, or joined one by one by
// ncclCommInitRank with the same unique id.
struct Clique {
  std::string id;                          // the unique id's bytes ("" for ncclCommInitAll)
  int nranks = 0;
  int joined = 0, alive = 0;
  std::vector<ncclComm*> ranks;            // by rank; nullptr until joined
  std::vector<std::deque<Op>> collectives; // by rank: posted, not yet run
  std::vector<uint64_t> posted;            // by rank: operations posted so far
  std::map<std::pair<int, int>, std::deque<Op>> sends, recvs;  // (from, to)
  std::set<std::thread::id> threads;       // threads that created ranks or posted operations
  std::deque<HostStaging> staging;         // the relay's host buffers, by slot (nccl_relay.cc)
  bool Pending() const;
  // "ncclAllReduce (count 4, ncclFloat32, ncclSum; the 3rd call posted on rank 0)" for each
  // operation still waiting for a rank, with the ranks it waits for.
  std::string DescribePending() const;
  void DropPending();
};

std::mutex& Mu();
std::condition_variable& Cv();
std::set<ncclComm*>& Comms();  // live communicators

// Says "gpool: MSG" on stderr, keeps it for ncclGetLastError, returns `r`.
ncclResult_t Fail(ncclResult_t r, const std::string& msg);

// Runs every operation of `c` whose ranks have all posted (Mu() held); the first failure.
ncclResult_t Progress(Clique& c);

}  // namespace gpool::remote::client::nccl
