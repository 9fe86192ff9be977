// gpool's stand-in for libnccl.so.2: NCCL's API remoted at NCCL's own level. NCCL's transports
// need memory that a GPU and the program's process share (the network transport's FIFOs and
// staging buffers are host memory mapped into the GPU, polled by its kernels and proxy thread),
// which a GPU across the network cannot have; so instead of running NCCL's kernels, this library
// takes NCCL's calls and relays each collective's data through this process (nccl_relay.cc) with
// the driver stand-in's own calls (it links libcuda.so.1, so device pointers and streams are the
// program's, as NVIDIA's runtime inside the program made them). `gpool run` puts it first for
// programs linked with -lnccl (lib/nccl/; `--nccl native` leaves NVIDIA's NCCL in place).
//
// Scope: communicators of one process (ncclCommInitAll; ncclCommInitRank(Config) for the ranks
// of a unique id from ncclGetUniqueId of this process, in one thread inside
// ncclGroupStart/End or in one thread each). A communicator spanning processes fails loudly,
// naming why. Collectives: AllReduce, Broadcast (and Bcast), Reduce, AllGather, ReduceScatter,
// Send/Recv, every data type (fp8 moved, not reduced) and built-in operator.
//
// Ordering (NCCL's semantics, without its hang): a rank's call is queued; an operation runs when
// every rank of its communicator has posted its matching call, in posting order (Send/Recv pairs
// per sender and receiver). A group that ends with an operation still missing ranks returns
// ncclInvalidUsage naming it (NCCL would wait forever) when no other thread has used the
// communicator; otherwise ncclGroupEnd waits for the other threads' calls, up to
// GPOOL_NCCL_WAIT_S seconds (default 60). Every other NCCL entry point is a loud stub
// (nccl_stubs.cc).
#include <cuda.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

#include <fmt/format.h>

#include "remote/client/nccl_reduce.h"
#include "remote/client/nccl_state.h"

namespace gpool::remote::client::nccl {

static_assert(ncclFloat16 == static_cast<int>(DType::kFloat16) &&
              ncclBfloat16 == static_cast<int>(DType::kBfloat16) &&
              ncclFloat8e5m2 == static_cast<int>(DType::kFloat8e5m2) &&
              ncclAvg == static_cast<int>(RedOp::kAvg) && ncclMin == static_cast<int>(RedOp::kMin),
              "nccl_reduce.h numbers types and operators as nccl.h does");

std::mutex& Mu() {
  static auto* m = new std::mutex();  // never destroyed: exit-time calls
  return *m;
}
std::condition_variable& Cv() {
  static auto* c = new std::condition_variable();
  return *c;
}
std::set<ncclComm*>& Comms() {
  static auto* s = new std::set<ncclComm*>();
  return *s;
}

namespace {

thread_local std::string t_last_error;
thread_local int t_group_depth = 0;
thread_local std::set<Clique*> t_group;  // cliques this thread's open group touched

std::map<std::string, Clique*>& ById() {
  static auto* m = new std::map<std::string, Clique*>();
  return *m;
}

// The unique id: a tag, this process's id and a random nonce (so a recycled pid is not taken for
// this process), and a counter. Only this process can use it.
struct IdBytes {
  char tag[16];
  uint64_t nonce;
  int64_t pid;
  uint64_t counter;
};
constexpr char kTag[16] = "gpool-nccl-id";
uint64_t ProcessNonce() {
  static const uint64_t n = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd() ^ static_cast<uint64_t>(getpid());
  }();
  return n;
}

std::string Ordinal(uint64_t n) {
  const char* s = (n % 100 >= 11 && n % 100 <= 13) ? "th"
                  : n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  return fmt::format("{}{}", n, s);
}

int WaitSeconds() {
  const char* s = std::getenv("GPOOL_NCCL_WAIT_S");
  return s && std::atoi(s) > 0 ? std::atoi(s) : 60;
}

ncclResult_t CheckComm(const char* call, ncclComm_t c) {
  if (c && Comms().count(c)) return ncclSuccess;
  return Fail(ncclInvalidArgument, fmt::format("{}: {} is not a live communicator", call,
                                               static_cast<const void*>(c)));
}

Clique* NewClique(const std::string& id, int nranks) {
  auto* c = new Clique;
  c->id = id;
  c->nranks = nranks;
  c->ranks.assign(nranks, nullptr);
  c->collectives.resize(nranks);
  c->posted.assign(nranks, 0);
  return c;
}

// Adds rank `rank` on `dev` (context `ctx`) to `c` (Mu() held).
ncclComm* Join(Clique* c, int rank, CUdevice dev, CUcontext ctx, bool retained) {
  auto* comm = new ncclComm;
  comm->clique = c;
  comm->rank = rank;
  comm->device = dev;
  comm->ctx = ctx;
  comm->retained = retained;
  c->ranks[rank] = comm;
  c->joined++;
  c->alive++;
  c->threads.insert(std::this_thread::get_id());
  Comms().insert(comm);
  Cv().notify_all();
  return comm;
}

// Removes `comm` (Mu() held); the clique goes with its last rank.
void Leave(ncclComm* comm) {
  Clique* c = comm->clique;
  Comms().erase(comm);
  if (comm->retained) cuDevicePrimaryCtxRelease(comm->device);
  c->ranks[comm->rank] = nullptr;
  delete comm;
  if (--c->alive == 0) {
    if (!c->id.empty()) ById().erase(c->id);
    t_group.erase(c);
    delete c;
  }
}

// Waits (Mu() held through `lk`) until `done`, or GPOOL_NCCL_WAIT_S passes: whether done.
template <class F>
bool WaitFor(std::unique_lock<std::mutex>& lk, F done) {
  return Cv().wait_for(lk, std::chrono::seconds(WaitSeconds()), done);
}

ncclResult_t Post(Op o) {
  const char* call = KindName(o.kind);
  std::unique_lock<std::mutex> lk(Mu());
  if (ncclResult_t r = CheckComm(call, o.comm)) return r;
  Clique& c = *o.comm->clique;
  const bool p2p = o.kind == Kind::kSend || o.kind == Kind::kRecv;
  const bool reduces = o.kind == Kind::kAllReduce || o.kind == Kind::kReduce ||
                       o.kind == Kind::kReduceScatter;
  Status st = reduces ? CheckReducible(o.dtype, o.op) : CheckType(o.dtype);
  if (!st.ok()) return Fail(st.code() == StatusCode::kUnimplemented ? ncclInvalidUsage
                                                                     : ncclInvalidArgument,
                            fmt::format("{}: {}", call, st.message()));
  if ((o.kind == Kind::kReduce || o.kind == Kind::kBroadcast || p2p) &&
      (o.root < 0 || o.root >= c.nranks)) {
    return Fail(ncclInvalidArgument, fmt::format("{}: {} {} is not a rank of this {}-rank "
                                                 "communicator", call, p2p ? "peer" : "root",
                                                 o.root, c.nranks));
  }
  if (o.count > 0 && ((o.kind != Kind::kRecv && !o.send) || (o.kind != Kind::kSend && !o.recv))) {
    return Fail(ncclInvalidArgument, fmt::format("{}: a null buffer", call));
  }
  o.seq = ++c.posted[o.comm->rank];
  c.threads.insert(std::this_thread::get_id());
  if (o.kind == Kind::kSend) {
    c.sends[{o.comm->rank, o.root}].push_back(o);
  } else if (o.kind == Kind::kRecv) {
    c.recvs[{o.root, o.comm->rank}].push_back(o);
  } else {
    c.collectives[o.comm->rank].push_back(o);
  }
  if (t_group_depth > 0) t_group.insert(&c);
  return Progress(c);
}

Op MakeOp(Kind k, const void* send, void* recv, size_t count, ncclDataType_t t, int op, int root,
          ncclComm_t comm, cudaStream_t s) {
  Op o;
  o.kind = k;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.dtype = t;
  o.op = op;
  o.root = root;
  o.comm = comm;
  o.stream = reinterpret_cast<CUstream>(s);
  return o;
}

ncclResult_t InitRank(const char* call, ncclComm_t* out, int nranks, const ncclUniqueId& id,
                      int rank) {
  if (!out) return Fail(ncclInvalidArgument, fmt::format("{}: a null communicator pointer", call));
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return Fail(ncclInvalidArgument, fmt::format("{}: rank {} of {} ranks", call, rank, nranks));
  }
  IdBytes b;
  std::memcpy(&b, id.internal, sizeof(b));
  if (std::memcmp(b.tag, kTag, sizeof(kTag)) != 0) {
    return Fail(ncclInvalidUsage, fmt::format(
        "{}: the unique id was not made by gpool's libnccl.so.2 stand-in (ncclGetUniqueId of this "
        "process); gpool's NCCL runs communicators of one process only", call));
  }
  // The pid tells a forked child (which inherits the nonce) apart; the nonce, a recycled pid.
  if (b.pid != getpid() || b.nonce != ProcessNonce()) {
    return Fail(ncclInvalidUsage, fmt::format(
        "{}: rank {} of {}: the unique id was made by another process (pid {}), this is pid {}: "
        "gpool's libnccl.so.2 stand-in runs communicators of one process only (it relays each "
        "collective through the process that drives every rank); run all ranks in one process, "
        "or NVIDIA's NCCL with `gpool run --nccl native`", call, rank, nranks, b.pid, getpid()));
  }
  // The rank's device: the calling thread's current context, as NCCL takes cudaGetDevice's.
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  bool retained = false;
  if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr || cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
    dev = 0;
    if (CUresult r = cuDevicePrimaryCtxRetain(&ctx, 0)) {
      return Fail(ncclUnhandledCudaError, fmt::format("{}: no device: cuDevicePrimaryCtxRetain "
                                                      "returned {}", call, static_cast<int>(r)));
    }
    retained = true;
  }
  const std::string key(id.internal, sizeof(b));
  std::unique_lock<std::mutex> lk(Mu());
  Clique*& c = ById()[key];
  if (!c) c = NewClique(key, nranks);
  Clique* cl = c;
  auto undo = [&] {
    if (retained) cuDevicePrimaryCtxRelease(dev);
    if (cl->alive == 0) {
      ById().erase(key);
      delete cl;
    }
  };
  if (cl->nranks != nranks) {
    undo();
    return Fail(ncclInvalidArgument, fmt::format("{}: rank {} says {} ranks, the communicator has {}",
                                                 call, rank, nranks, cl->nranks));
  }
  if (cl->ranks[rank] || cl->joined == nranks) {
    undo();
    return Fail(ncclInvalidUsage, fmt::format("{}: rank {} of this unique id was created already",
                                              call, rank));
  }
  ncclComm* comm = Join(cl, rank, dev, ctx, retained);
  *out = comm;
  if (t_group_depth > 0) {  // the group's end checks that every rank joined
    t_group.insert(cl);
    return ncclSuccess;
  }
  if (cl->joined == nranks) return ncclSuccess;
  // Outside a group NCCL blocks until every rank joins: only other threads can join now.
  if (WaitFor(lk, [&] { return cl->joined == cl->nranks; })) return ncclSuccess;
  const int joined = cl->joined;
  Leave(comm);
  *out = nullptr;
  return Fail(ncclInvalidUsage, fmt::format(
      "{}: rank {}: {} of {} ranks joined in {} s; gpool's libnccl.so.2 stand-in runs "
      "communicators of one process only, so ranks in other processes never join", call, rank,
      joined, nranks, WaitSeconds()));
}

}  // namespace

ncclResult_t Fail(ncclResult_t r, const std::string& msg) {
  fmt::print(stderr, "gpool: {}\n", msg);
  t_last_error = msg;
  return r;
}

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce: return "ncclAllReduce";
    case Kind::kBroadcast: return "ncclBroadcast";
    case Kind::kReduce: return "ncclReduce";
    case Kind::kAllGather: return "ncclAllGather";
    case Kind::kReduceScatter: return "ncclReduceScatter";
    case Kind::kSend: return "ncclSend";
    case Kind::kRecv: return "ncclRecv";
  }
  return "ncclUnknown";
}

std::string Op::Describe() const {
  std::string s = fmt::format("{}(count {}, {}", KindName(kind), count, TypeName(dtype));
  if (kind == Kind::kAllReduce || kind == Kind::kReduce || kind == Kind::kReduceScatter) {
    s += ", " + OpName(op);
  }
  if (kind == Kind::kReduce || kind == Kind::kBroadcast) s += fmt::format(", root {}", root);
  if (kind == Kind::kSend || kind == Kind::kRecv) s += fmt::format(", peer {}", root);
  return s + fmt::format("; the {} call posted on rank {})", Ordinal(seq), comm->rank);
}

bool Clique::Pending() const {
  for (const auto& q : collectives) {
    if (!q.empty()) return true;
  }
  for (const auto& m : {&sends, &recvs}) {
    for (const auto& [k, q] : *m) {
      if (!q.empty()) return true;
    }
  }
  return joined < nranks;
}

std::string Clique::DescribePending() const {
  std::vector<std::string> parts;
  if (joined < nranks) {
    std::string missing;
    for (int r = 0; r < nranks; ++r) {
      if (!ranks[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    parts.push_back(fmt::format("{} of {} ranks created (missing: {})", joined, nranks, missing));
  }
  size_t longest = 0;
  for (const auto& q : collectives) longest = std::max(longest, q.size());
  for (size_t i = 0; i < longest; ++i) {
    std::string have, missing;
    const Op* any = nullptr;
    for (int r = 0; r < nranks; ++r) {
      if (i < collectives[r].size()) {
        any = &collectives[r][i];
      } else {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
    }
    if (any) parts.push_back(fmt::format("{} has no matching call on rank(s) {}", any->Describe(), missing));
  }
  for (const auto& [pair, q] : sends) {
    for (const Op& o : q) parts.push_back(fmt::format("{} has no matching ncclRecv on rank {}", o.Describe(), pair.second));
  }
  for (const auto& [pair, q] : recvs) {
    for (const Op& o : q) parts.push_back(fmt::format("{} has no matching ncclSend on rank {}", o.Describe(), pair.first));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

void Clique::DropPending() {
  for (auto& q : collectives) q.clear();
  sends.clear();
  recvs.clear();
}

}  // namespace gpool::remote::client::nccl

using namespace gpool::remote::client::nccl;  // NOLINT: the C API below is this file's point

#pragma GCC visibility push(default)
extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return Fail(ncclInvalidArgument, "ncclGetVersion: a null pointer");
  *version = NCCL_VERSION_CODE;  // the nccl.h this stand-in implements
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (gpool's stand-in said which on stderr)";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument (gpool's stand-in said which on stderr)";
    case ncclInvalidUsage: return "invalid usage (gpool's stand-in said why on stderr)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return Fail(ncclInvalidArgument, "ncclGetUniqueId: a null pointer");
  static std::atomic<uint64_t> counter{0};
  IdBytes b{};
  std::memcpy(b.tag, kTag, sizeof(kTag));
  b.nonce = ProcessNonce();
  b.pid = getpid();
  b.counter = ++counter;
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, &b, sizeof(b));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return InitRank("ncclCommInitRank", comm, nranks, id, rank);
}

// The config (blocking, CGA size, ...) changes nothing here: every call completes before it
// returns, so a non-blocking communicator never reports ncclInProgress.
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t*) {
  return InitRank("ncclCommInitRankConfig", comm, nranks, id, rank);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) {
    return Fail(ncclInvalidArgument, fmt::format("ncclCommInitAll: {} devices", ndev));
  }
  int count = 0;
  if (CUresult r = cuInit(0); r != CUDA_SUCCESS) {
    return Fail(ncclUnhandledCudaError, fmt::format("ncclCommInitAll: cuInit returned {}", static_cast<int>(r)));
  }
  cuDeviceGetCount(&count);
  std::vector<CUcontext> ctx(ndev);
  for (int i = 0; i < ndev; ++i) {
    const int d = devlist ? devlist[i] : i;
    CUresult r = d >= 0 && d < count ? cuDevicePrimaryCtxRetain(&ctx[i], d) : CUDA_ERROR_INVALID_DEVICE;
    if (r != CUDA_SUCCESS) {
      for (int j = 0; j < i; ++j) cuDevicePrimaryCtxRelease(devlist ? devlist[j] : j);
      return Fail(ncclInvalidArgument, fmt::format("ncclCommInitAll: device {} (of {}): {}", d,
                                                   count, static_cast<int>(r)));
    }
  }
  std::lock_guard<std::mutex> lk(Mu());
  Clique* c = NewClique("", ndev);
  for (int i = 0; i < ndev; ++i) comms[i] = Join(c, i, devlist ? devlist[i] : i, ctx[i], true);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  std::lock_guard<std::mutex> lk(Mu());
  if (ncclResult_t r = CheckComm("ncclCommCount", comm)) return r;
  if (!count) return Fail(ncclInvalidArgument, "ncclCommCount: a null pointer");
  *count = comm->clique->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  std::lock_guard<std::mutex> lk(Mu());
  if (ncclResult_t r = CheckComm("ncclCommCuDevice", comm)) return r;
  if (!device) return Fail(ncclInvalidArgument, "ncclCommCuDevice: a null pointer");
  *device = comm->device;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  std::lock_guard<std::mutex> lk(Mu());
  if (ncclResult_t r = CheckComm("ncclCommUserRank", comm)) return r;
  if (!rank) return Fail(ncclInvalidArgument, "ncclCommUserRank: a null pointer");
  *rank = comm->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* err) {
  std::lock_guard<std::mutex> lk(Mu());
  if (ncclResult_t r = CheckComm("ncclCommGetAsyncError", comm)) return r;
  if (!err) return Fail(ncclInvalidArgument, "ncclCommGetAsyncError: a null pointer");
  *err = comm->async_error;
  return ncclSuccess;
}

// Operations of the communicator still waiting for other ranks cannot run once a rank is gone:
// said, and dropped (NCCL would hang in them).
static ncclResult_t Finish(const char* call, ncclComm_t comm, bool quiet) {
  std::lock_guard<std::mutex> lk(Mu());
  if (ncclResult_t r = CheckComm(call, comm)) return r;
  Clique& c = *comm->clique;
  ncclResult_t result = ncclSuccess;
  bool waiting = false;
  for (const auto& q : c.collectives) waiting = waiting || !q.empty();
  for (const auto& m : {&c.sends, &c.recvs}) {
    for (const auto& [k, q] : *m) waiting = waiting || !q.empty();
  }
  if (waiting && !quiet) {
    result = Fail(ncclInvalidUsage, fmt::format("{} (rank {}): operations never completed, "
                                                "dropped: {}", call, comm->rank, c.DescribePending()));
  }
  if (waiting) c.DropPending();
  return result;
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) { return Finish("ncclCommFinalize", comm, false); }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;  // NCCL accepts a null communicator here
  ncclResult_t r = Finish("ncclCommDestroy", comm, false);
  if (r == ncclInvalidArgument) return r;
  std::lock_guard<std::mutex> lk(Mu());
  Leave(comm);
  return r;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  if (ncclResult_t r = Finish("ncclCommAbort", comm, true)) return r;
  std::lock_guard<std::mutex> lk(Mu());
  Leave(comm);
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++t_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (t_group_depth == 0) {
    return Fail(ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart is open in this thread");
  }
  if (--t_group_depth > 0) return ncclSuccess;
  std::set<Clique*> group;
  group.swap(t_group);
  std::unique_lock<std::mutex> lk(Mu());
  ncclResult_t result = ncclSuccess;
  for (Clique* c : group) {
    bool live = false;  // a clique may be gone (destroyed inside the group)
    for (ncclComm* comm : Comms()) live = live || comm->clique == c;
    if (!live || !c->Pending()) continue;
    // Other threads may still post their ranks' calls; this thread alone never will.
    if (c->threads.size() > 1 && WaitFor(lk, [&] {
          bool still = false;
          for (ncclComm* comm : Comms()) still = still || comm->clique == c;
          return !still || !c->Pending();
        })) {
      continue;
    }
    const bool missing_ranks = c->joined < c->nranks;
    result = Fail(ncclInvalidUsage, fmt::format(
        "ncclGroupEnd: the group ended with {}: NCCL would wait here forever{}", c->DescribePending(),
        missing_ranks ? "; gpool's libnccl.so.2 stand-in runs communicators of one process only, "
                        "so ranks in other processes never join" : "; gpool dropped them"));
    c->DropPending();
  }
  return result;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  return Post(MakeOp(Kind::kAllReduce, send, recv, count, t, op, 0, comm, s));
}
ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t s) {
  return Post(MakeOp(Kind::kReduce, send, recv, count, t, op, root, comm, s));
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t t, int root,
                           ncclComm_t comm, cudaStream_t s) {
  return Post(MakeOp(Kind::kBroadcast, send, recv, count, t, 0, root, comm, s));
}
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t t, int root, ncclComm_t comm,
                       cudaStream_t s) {
  return Post(MakeOp(Kind::kBroadcast, buff, buff, count, t, 0, root, comm, s));
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendcount, ncclDataType_t t,
                           ncclComm_t comm, cudaStream_t s) {
  return Post(MakeOp(Kind::kAllGather, send, recv, sendcount, t, 0, 0, comm, s));
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvcount, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s) {
  return Post(MakeOp(Kind::kReduceScatter, send, recv, recvcount, t, op, 0, comm, s));
}
ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t s) {
  return Post(MakeOp(Kind::kSend, send, nullptr, count, t, 0, peer, comm, s));
}
ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                      cudaStream_t s) {
  return Post(MakeOp(Kind::kRecv, nullptr, recv, count, t, 0, peer, comm, s));
}

// Device memory for NCCL buffers: plain allocations on the current device (NCCL's own use
// cuMem* with multicast and NVLink handles, which pooled GPUs have no use for).
ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (!ptr) return Fail(ncclInvalidArgument, "ncclMemAlloc: a null pointer");
  CUdeviceptr p = 0;
  if (CUresult r = cuMemAlloc(&p, size)) {
    return Fail(ncclUnhandledCudaError, fmt::format("ncclMemAlloc: cuMemAlloc of {} bytes returned {}",
                                                    size, static_cast<int>(r)));
  }
  *ptr = reinterpret_cast<void*>(p);
  return ncclSuccess;
}
ncclResult_t ncclMemFree(void* ptr) {
  if (!ptr) return ncclSuccess;
  if (CUresult r = cuMemFree(reinterpret_cast<CUdeviceptr>(ptr))) {
    return Fail(ncclUnhandledCudaError, fmt::format("ncclMemFree: cuMemFree of {} returned {}", ptr,
                                                    static_cast<int>(r)));
  }
  return ncclSuccess;
}

// Custom operators: refused by name (only the built-in ones are reduced on the CPU).
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t,
                                      ncclComm_t) {
  return Fail(ncclInvalidUsage, "ncclRedOpCreatePreMulSum is not implemented by gpool's "
                                "libnccl.so.2 stand-in (only sum, prod, max, min and avg)");
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t) {
  return Fail(ncclInvalidArgument, fmt::format("ncclRedOpDestroy: {} was not created by "
                                               "ncclRedOpCreatePreMulSum", static_cast<int>(op)));
}

}  // extern "C"

// NCCL's profiling names (pnccl*): the same functions.
#define GPOOL_NCCL_ALIAS(name) \
  extern "C" __attribute__((alias(#name))) decltype(name) p##name;
GPOOL_NCCL_ALIAS(ncclGetVersion)
GPOOL_NCCL_ALIAS(ncclGetErrorString)
GPOOL_NCCL_ALIAS(ncclGetLastError)
GPOOL_NCCL_ALIAS(ncclGetUniqueId)
GPOOL_NCCL_ALIAS(ncclCommInitRank)
GPOOL_NCCL_ALIAS(ncclCommInitRankConfig)
GPOOL_NCCL_ALIAS(ncclCommInitAll)
GPOOL_NCCL_ALIAS(ncclCommCount)
GPOOL_NCCL_ALIAS(ncclCommCuDevice)
GPOOL_NCCL_ALIAS(ncclCommUserRank)
GPOOL_NCCL_ALIAS(ncclCommGetAsyncError)
GPOOL_NCCL_ALIAS(ncclCommFinalize)
GPOOL_NCCL_ALIAS(ncclCommDestroy)
GPOOL_NCCL_ALIAS(ncclCommAbort)
GPOOL_NCCL_ALIAS(ncclGroupStart)
GPOOL_NCCL_ALIAS(ncclGroupEnd)
GPOOL_NCCL_ALIAS(ncclAllReduce)
GPOOL_NCCL_ALIAS(ncclReduce)
GPOOL_NCCL_ALIAS(ncclBroadcast)
GPOOL_NCCL_ALIAS(ncclBcast)
GPOOL_NCCL_ALIAS(ncclAllGather)
GPOOL_NCCL_ALIAS(ncclReduceScatter)
GPOOL_NCCL_ALIAS(ncclSend)
GPOOL_NCCL_ALIAS(ncclRecv)
GPOOL_NCCL_ALIAS(ncclMemAlloc)
GPOOL_NCCL_ALIAS(ncclMemFree)
GPOOL_NCCL_ALIAS(ncclRedOpCreatePreMulSum)
GPOOL_NCCL_ALIAS(ncclRedOpDestroy)
#pragma GCC visibility pop
