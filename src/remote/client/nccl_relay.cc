// The data path of gpool's libnccl.so.2 stand-in: a collective whose ranks have all posted runs
// here, relayed through this process over the driver stand-in's own calls. For each rank, in rank
// order: its input is read with cuMemcpyDtoHAsync on the rank's stream into the driver
// stand-in's page-locked host memory (requested for every rank first, then each stream
// synchronized, so reads from different servers overlap); the CPU reduces (nccl_reduce.h); the result goes back to each rank that
// receives one with cuMemcpyHtoDAsync on the rank's stream, so work the program queues on that
// stream afterwards runs after it, as after NCCL's kernel. Correct on either backend and on real
// GPUs, whatever server each rank's GPU is on.
//
// Cost, for N ranks of S bytes each (each crossing is one rank's server link):
//   AllReduce      N*S up, N*S down          (NCCL's ring: 2(N-1)/N * S per rank, GPU to GPU)
//   Reduce         N*S up, S down
//   Broadcast      S up,   N*S down
//   AllGather      N*S up, N*N*S down        (S = one rank's part)
//   ReduceScatter  N*S up, S down            (S = one rank's whole input; each gets S/N)
//   Send/Recv      S up,   S down
// plus one round trip per rank for the reads. Docs: docs/remoting/nccl.md.
//
// Limits: the reads wait for each stream, so the call that completes an operation (the last
// rank's, or ncclGroupEnd) blocks until the inputs are ready, where NCCL returns at once; and
// work the program queued on a rank's stream between that rank's call and the completing call
// runs before the read (NCCL orders its kernel before it).
#include <cuda.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "remote/client/nccl_reduce.h"
#include "remote/client/nccl_state.h"

namespace gpool::remote::client::nccl {
namespace {

const char* CuName(CUresult r) {
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  return s ? s : "unknown CUresult";
}

// The rank's context current for the duration (the legacy stream resolves through it).
class OnRank {
 public:
  explicit OnRank(const ncclComm* c) : ok_(cuCtxPushCurrent(c->ctx) == CUDA_SUCCESS) {}
  ~OnRank() {
    if (ok_) cuCtxPopCurrent(nullptr);
  }
  OnRank(const OnRank&) = delete;
  OnRank& operator=(const OnRank&) = delete;

 private:
  bool ok_;
};

ncclResult_t CudaFailed(const Op& o, const char* what, const void* ptr, size_t bytes, CUresult r) {
  o.comm->async_error = ncclUnhandledCudaError;
  return Fail(ncclUnhandledCudaError,
              fmt::format("{} on rank {} (device {}): {} {} ({} bytes) failed: {}", KindName(o.kind),
                          o.comm->rank, o.comm->device, what, ptr, bytes, CuName(r)));
}

ncclResult_t Read(const Op& o, const void* dev, void* host, size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  OnRank on(o.comm);
  CUresult r = cuMemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(dev), bytes, o.stream);
  return r == CUDA_SUCCESS ? ncclSuccess : CudaFailed(o, "reading", dev, bytes, r);
}

// Slot `slot` of the clique's kept host buffers, at least `n` bytes.
std::byte* Staging(const Op& o, size_t slot, size_t n) {
  std::deque<HostStaging>& s = o.comm->clique->staging;
  while (s.size() <= slot) s.emplace_back();
  return s[slot].Get(n);
}

// Reads `bytes` of each rank's `src(op)` into `dst[r]`: every copy requested first, then each
// rank's stream synchronized (which lands it).
template <class Src>
ncclResult_t ReadAll(const std::vector<Op>& ops, Src src, const std::vector<std::byte*>& dst,
                     size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  for (size_t r = 0; r < ops.size(); ++r) {
    if (!dst[r]) continue;
    OnRank on(ops[r].comm);
    CUresult e = cuMemcpyDtoHAsync(dst[r], reinterpret_cast<CUdeviceptr>(src(ops[r])), bytes,
                                   ops[r].stream);
    if (e != CUDA_SUCCESS) return CudaFailed(ops[r], "reading", src(ops[r]), bytes, e);
  }
  for (size_t r = 0; r < ops.size(); ++r) {
    if (!dst[r]) continue;
    OnRank on(ops[r].comm);
    CUresult e = cuStreamSynchronize(ops[r].stream);
    if (e != CUDA_SUCCESS) return CudaFailed(ops[r], "reading (stream synchronize)", src(ops[r]), bytes, e);
  }
  return ncclSuccess;
}

ncclResult_t Write(const Op& o, void* dev, const void* host, size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  OnRank on(o.comm);
  CUresult r = cuMemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dev), host, bytes, o.stream);
  return r == CUDA_SUCCESS ? ncclSuccess : CudaFailed(o, "writing", dev, bytes, r);
}

#define GPOOL_NCCL_TRY(expr)                      \
  do {                                            \
    if (ncclResult_t r_ = (expr)) return r_;      \
  } while (0)

ncclResult_t NoHostMemory(const Op& o, size_t bytes) {
  return Fail(ncclSystemError, fmt::format("{}: cannot allocate {} bytes of host memory for the "
                                           "relay", KindName(o.kind), bytes));
}

// Reads every rank's first `count` elements of its send buffer and reduces them into `out`.
ncclResult_t ReadAndReduce(const std::vector<Op>& ops, size_t count, std::vector<std::byte>* out) {
  const size_t bytes = count * ElementSize(ops[0].dtype);
  std::vector<std::byte*> dst;
  for (size_t r = 0; r < ops.size(); ++r) {
    dst.push_back(Staging(ops[0], r, bytes));
    if (!dst.back()) return NoHostMemory(ops[0], bytes);
  }
  GPOOL_NCCL_TRY(ReadAll(ops, [](const Op& o) { return o.send; }, dst, bytes));
  std::vector<const void*> ptrs(dst.begin(), dst.end());
  out->resize(bytes);
  Reduce(ops[0].dtype, ops[0].op, ptrs.data(), static_cast<int>(ptrs.size()), out->data(), count);
  return ncclSuccess;
}

ncclResult_t RunCollective(const std::vector<Op>& ops) {
  const Op& o = ops[0];
  const size_t n = ops.size(), esz = ElementSize(o.dtype), bytes = o.count * esz;
  std::vector<std::byte> buf;
  switch (o.kind) {
    case Kind::kAllReduce:
      GPOOL_NCCL_TRY(ReadAndReduce(ops, o.count, &buf));
      for (const Op& x : ops) GPOOL_NCCL_TRY(Write(x, x.recv, buf.data(), bytes));
      return ncclSuccess;
    case Kind::kReduce:
      GPOOL_NCCL_TRY(ReadAndReduce(ops, o.count, &buf));
      return Write(ops[o.root], ops[o.root].recv, buf.data(), bytes);
    case Kind::kBroadcast: {
      std::byte* h = Staging(o, 0, bytes);
      if (!h) return NoHostMemory(o, bytes);
      std::vector<std::byte*> dst(n, nullptr);
      dst[o.root] = h;
      GPOOL_NCCL_TRY(ReadAll(ops, [](const Op& x) { return x.send; }, dst, bytes));
      for (const Op& x : ops) {
        if (&x != &ops[o.root] || x.recv != x.send) GPOOL_NCCL_TRY(Write(x, x.recv, h, bytes));
      }
      return ncclSuccess;
    }
    case Kind::kAllGather: {
      std::byte* h = Staging(o, 0, n * bytes);
      if (!h) return NoHostMemory(o, n * bytes);
      std::vector<std::byte*> dst;
      for (size_t r = 0; r < n; ++r) dst.push_back(h + r * bytes);
      GPOOL_NCCL_TRY(ReadAll(ops, [](const Op& x) { return x.send; }, dst, bytes));
      for (const Op& x : ops) GPOOL_NCCL_TRY(Write(x, x.recv, h, n * bytes));
      return ncclSuccess;
    }
    case Kind::kReduceScatter:
      GPOOL_NCCL_TRY(ReadAndReduce(ops, n * o.count, &buf));
      for (size_t r = 0; r < n; ++r) GPOOL_NCCL_TRY(Write(ops[r], ops[r].recv, buf.data() + r * bytes, bytes));
      return ncclSuccess;
    case Kind::kSend: case Kind::kRecv: break;
  }
  return Fail(ncclInternalError, fmt::format("{} is not a collective", KindName(o.kind)));
}

ncclResult_t RunSendRecv(const Op& send, const Op& recv) {
  const size_t bytes = send.count * ElementSize(send.dtype);
  std::vector<std::byte> buf(bytes);
  GPOOL_NCCL_TRY(Read(send, send.send, buf.data(), bytes));
  return Write(recv, recv.recv, buf.data(), bytes);
}

// Whether every rank's call is the same collective (NCCL requires it; a mismatch there hangs or
// corrupts): "" or why not.
std::string Mismatch(const std::vector<Op>& ops) {
  const Op& a = ops[0];
  for (const Op& b : ops) {
    const bool reduces = a.kind == Kind::kAllReduce || a.kind == Kind::kReduce ||
                         a.kind == Kind::kReduceScatter;
    const bool rooted = a.kind == Kind::kReduce || a.kind == Kind::kBroadcast;
    if (b.kind != a.kind || b.count != a.count || b.dtype != a.dtype ||
        (reduces && b.op != a.op) || (rooted && b.root != a.root)) {
      return fmt::format("rank {} posted {} but rank {} posted {}", a.comm->rank, a.Describe(),
                         b.comm->rank, b.Describe());
    }
  }
  return "";
}

}  // namespace

HostStaging::~HostStaging() {
  if (p_) cuMemFreeHost(p_);
}

std::byte* HostStaging::Get(size_t n) {
  if (p_ && cap_ >= n) return static_cast<std::byte*>(p_);
  if (p_) cuMemFreeHost(p_);
  p_ = nullptr;
  cap_ = 0;
  const size_t want = std::max<size_t>(n, 4096);
  if (cuMemHostAlloc(&p_, want, 0) != CUDA_SUCCESS) {
    p_ = nullptr;
    return nullptr;
  }
  cap_ = want;
  return static_cast<std::byte*>(p_);
}

ncclResult_t Progress(Clique& c) {
  ncclResult_t first = ncclSuccess;
  auto note = [&](ncclResult_t r) {
    if (r != ncclSuccess && first == ncclSuccess) first = r;
  };
  for (bool ran = true; ran;) {
    ran = false;
    bool all = c.joined == c.nranks;
    for (const auto& q : c.collectives) all = all && !q.empty();
    if (all) {
      std::vector<Op> ops;
      for (auto& q : c.collectives) {
        ops.push_back(q.front());
        q.pop_front();
      }
      if (std::string why = Mismatch(ops); !why.empty()) {
        note(Fail(ncclInvalidUsage, fmt::format("the ranks' calls do not match: {}; NCCL would "
                                                "hang or mix them up; gpool dropped them", why)));
      } else {
        note(RunCollective(ops));
      }
      ran = true;
    }
    for (auto& [pair, sq] : c.sends) {
      auto it = c.recvs.find(pair);
      while (!sq.empty() && it != c.recvs.end() && !it->second.empty()) {
        Op s = sq.front(), r = it->second.front();
        sq.pop_front();
        it->second.pop_front();
        if (s.count != r.count || s.dtype != r.dtype) {
          note(Fail(ncclInvalidUsage, fmt::format("rank {}'s {} does not match rank {}'s {}; "
                                                  "gpool dropped both", s.comm->rank, s.Describe(),
                                                  r.comm->rank, r.Describe())));
        } else {
          note(RunSendRecv(s, r));
        }
        ran = true;
      }
    }
  }
  Cv().notify_all();
  return first;
}

}  // namespace gpool::remote::client::nccl
