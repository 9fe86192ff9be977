// NCCL's collectives over every visible device, each result checked on the host against values
// worked out here: AllReduce of every data type but fp8 with every built-in operator (in a
// group), Broadcast and Reduce (ungrouped: one call per rank in turn), AllGather, ReduceScatter
// (half and bfloat16 among them), a ring of Send/Recv (grouped), and a copy queued on the stream
// after an AllReduce (it must see the result: the collective's write is ordered on the stream).
// Usage: nccl_collectives MODE [INIT]
//   MODE all      the collectives above; prints "PASS nccl_collectives all init=INIT devices=N"
//        missing  a group that posts an AllReduce on rank 0 only: ncclGroupEnd must fail
//        stub     ncclAlltoAll (not implemented by gpool's stand-in) must fail, naming itself
//        fp8      an fp8 sum must be refused (gpool's stand-in moves fp8 but does not reduce it)
//        xproc    a unique id used by another process (a forked child) must be refused
//        threads  one thread per device: ncclCommInitRank outside a group, then an AllReduce
//        bench BYTES REPS  times REPS float AllReduces of BYTES per rank (bench/nccl_relay.sh)
//   INIT all (ncclCommInitAll, default) or uid (ncclGetUniqueId, ncclCommInitRank and
//        ncclCommInitRankConfig in one group)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <nccl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common.h"

#define CHECK_NCCL(call) CHECK_LIB(call, ncclSuccess, ncclGetErrorString)

namespace {

int g_ndev = 0;
std::vector<ncclComm_t> g_comms;
std::vector<cudaStream_t> g_streams;
constexpr size_t kCount = 1000;

// Rank r's element i: small integers, exact in every type; the expected results follow.
double Value(int r, size_t i) { return double(r + 1) + double(i % 5); }
double Expected(int op, bool integer, size_t i) {
  double sum = 0, prod = 1, mx = -1e300, mn = 1e300;
  for (int r = 0; r < g_ndev; ++r) {
    double v = Value(r, i);
    sum += v, prod *= v, mx = std::fmax(mx, v), mn = std::fmin(mn, v);
  }
  switch (op) {
    case ncclSum: return sum;
    case ncclProd: return prod;
    case ncclMax: return mx;
    case ncclMin: return mn;
    default: return integer ? std::floor(sum / g_ndev) : sum / g_ndev;  // ncclAvg
  }
}

template <class T> T To(double v) { return T(v); }
template <> __half To<__half>(double v) { return __float2half(float(v)); }
template <> __nv_bfloat16 To<__nv_bfloat16>(double v) { return __float2bfloat16(float(v)); }
template <class T> double From(T v) { return double(v); }
template <> double From<__half>(__half v) { return double(__half2float(v)); }
template <> double From<__nv_bfloat16>(__nv_bfloat16 v) { return double(__bfloat162float(v)); }

bool Close(double got, double want, bool integer) {
  if (integer) return got == want;
  return std::fabs(got - want) <= 1e-2 * std::fmax(1.0, std::fabs(want));
}

template <class T>
T* Upload(int d, const std::vector<T>& h) {
  T* p = nullptr;
  CHECK(cudaSetDevice(d));
  CHECK(cudaMalloc(&p, h.size() * sizeof(T) + 1));
  CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}
template <class T>
std::vector<T> Download(int d, const T* p, size_t n) {
  std::vector<T> h(n);
  CHECK(cudaSetDevice(d));
  CHECK(cudaStreamSynchronize(g_streams[d]));
  CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
std::vector<std::vector<double>> Inputs(size_t n) {
  std::vector<std::vector<double>> in(g_ndev, std::vector<double>(n));
  for (int r = 0; r < g_ndev; ++r) {
    for (size_t i = 0; i < n; ++i) in[r][i] = Value(r, i);
  }
  return in;
}
template <class T>
std::vector<T> Cast(const std::vector<double>& v) {
  std::vector<T> out;
  for (double x : v) out.push_back(To<T>(x));
  return out;
}

// AllReduce of type T with every operator, in place, all ranks in one group.
template <class T>
void AllReduceEveryOp(ncclDataType_t t, const char* name, bool integer) {
  for (int op = 0; op < ncclNumOps; ++op) {
    std::vector<T*> buf(g_ndev);
    auto in = Inputs(kCount);
    for (int d = 0; d < g_ndev; ++d) buf[d] = Upload(d, Cast<T>(in[d]));
    CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < g_ndev; ++d) {
      CHECK_NCCL(ncclAllReduce(buf[d], buf[d], kCount, t, ncclRedOp_t(op), g_comms[d], g_streams[d]));
    }
    CHECK_NCCL(ncclGroupEnd());
    for (int d = 0; d < g_ndev; ++d) {
      auto h = Download(d, buf[d], kCount);
      for (size_t i = 0; i < kCount; ++i) {
        if (!Close(From(h[i]), Expected(op, integer, i), integer)) {
          std::fprintf(stderr, "allreduce %s op %d device %d element %zu: got %g, want %g\n", name,
                       op, d, i, From(h[i]), Expected(op, integer, i));
          std::exit(1);
        }
      }
      CHECK(cudaFree(buf[d]));
    }
  }
  std::printf("allreduce %s: 5 ops ok\n", name);
}

// Broadcast and Reduce from the last rank, ungrouped; AllGather and ReduceScatter grouped.
template <class T>
void RootedAndScattered(ncclDataType_t t, const char* name) {
  const int root = g_ndev - 1;
  auto in = Inputs(kCount);
  std::vector<T*> a(g_ndev), b(g_ndev);
  for (int d = 0; d < g_ndev; ++d) {
    a[d] = Upload(d, Cast<T>(in[d]));
    b[d] = Upload(d, std::vector<T>(kCount * g_ndev, To<T>(0)));
  }
  for (int d = 0; d < g_ndev; ++d) {  // ungrouped: runs at the last rank's call
    CHECK_NCCL(ncclBroadcast(a[d], b[d], kCount, t, root, g_comms[d], g_streams[d]));
  }
  for (int d = 0; d < g_ndev; ++d) {
    auto h = Download(d, b[d], kCount);
    for (size_t i = 0; i < kCount; ++i) EXPECT(From(h[i]) == in[root][i]);
  }
  for (int d = 0; d < g_ndev; ++d) {
    CHECK_NCCL(ncclReduce(a[d], b[d], kCount, t, ncclMax, root, g_comms[d], g_streams[d]));
  }
  auto h = Download(root, b[root], kCount);
  for (size_t i = 0; i < kCount; ++i) EXPECT(From(h[i]) == Expected(ncclMax, true, i));
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < g_ndev; ++d) {
    CHECK_NCCL(ncclAllGather(a[d], b[d], kCount, t, g_comms[d], g_streams[d]));
  }
  CHECK_NCCL(ncclGroupEnd());
  for (int d = 0; d < g_ndev; ++d) {
    auto g = Download(d, b[d], kCount * g_ndev);
    for (int r = 0; r < g_ndev; ++r) {
      for (size_t i = 0; i < kCount; ++i) EXPECT(From(g[r * kCount + i]) == in[r][i]);
    }
  }
  // ReduceScatter: each rank's input is n blocks of kCount/n; rank r gets block r's sum.
  const size_t per = kCount / g_ndev;
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < g_ndev; ++d) {
    CHECK_NCCL(ncclReduceScatter(a[d], b[d], per, t, ncclSum, g_comms[d], g_streams[d]));
  }
  CHECK_NCCL(ncclGroupEnd());
  for (int d = 0; d < g_ndev; ++d) {
    auto s = Download(d, b[d], per);
    for (size_t i = 0; i < per; ++i) EXPECT(From(s[i]) == Expected(ncclSum, true, d * per + i));
  }
  for (int d = 0; d < g_ndev; ++d) {
    CHECK(cudaFree(a[d]));
    CHECK(cudaFree(b[d]));
  }
  std::printf("broadcast, reduce, allgather, reducescatter %s: ok\n", name);
}

// Each rank sends its buffer to the next and receives the previous one's, in one group.
void SendRecvRing() {
  auto in = Inputs(kCount);
  std::vector<float*> a(g_ndev), b(g_ndev);
  for (int d = 0; d < g_ndev; ++d) {
    a[d] = Upload(d, Cast<float>(in[d]));
    b[d] = Upload(d, std::vector<float>(kCount, 0.f));
  }
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < g_ndev; ++d) {
    CHECK_NCCL(ncclSend(a[d], kCount, ncclFloat, (d + 1) % g_ndev, g_comms[d], g_streams[d]));
    CHECK_NCCL(ncclRecv(b[d], kCount, ncclFloat, (d + g_ndev - 1) % g_ndev, g_comms[d], g_streams[d]));
  }
  CHECK_NCCL(ncclGroupEnd());
  for (int d = 0; d < g_ndev; ++d) {
    auto h = Download(d, b[d], kCount);
    for (size_t i = 0; i < kCount; ++i) EXPECT(h[i] == float(in[(d + g_ndev - 1) % g_ndev][i]));
    CHECK(cudaFree(a[d]));
    CHECK(cudaFree(b[d]));
  }
  std::printf("send/recv ring: ok\n");
}

// A copy queued on the stream after the AllReduce sees its result.
void OrderedOnTheStream() {
  auto in = Inputs(kCount);
  std::vector<float*> a(g_ndev), b(g_ndev);
  for (int d = 0; d < g_ndev; ++d) {
    a[d] = Upload(d, Cast<float>(in[d]));
    b[d] = Upload(d, std::vector<float>(kCount, 0.f));
  }
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < g_ndev; ++d) {
    CHECK_NCCL(ncclAllReduce(a[d], a[d], kCount, ncclFloat, ncclSum, g_comms[d], g_streams[d]));
  }
  CHECK_NCCL(ncclGroupEnd());
  for (int d = 0; d < g_ndev; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMemcpyAsync(b[d], a[d], kCount * sizeof(float), cudaMemcpyDeviceToDevice, g_streams[d]));
  }
  for (int d = 0; d < g_ndev; ++d) {
    auto h = Download(d, b[d], kCount);
    for (size_t i = 0; i < kCount; ++i) EXPECT(h[i] == float(Expected(ncclSum, false, i)));
    CHECK(cudaFree(a[d]));
    CHECK(cudaFree(b[d]));
  }
  std::printf("ordered on the stream: ok\n");
}

void Init(const std::string& how) {
  g_comms.assign(g_ndev, nullptr);
  if (how == "uid") {
    ncclUniqueId id;
    CHECK_NCCL(ncclGetUniqueId(&id));
    CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < g_ndev; ++d) {
      CHECK(cudaSetDevice(d));
      if (d % 2) {
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        CHECK_NCCL(ncclCommInitRankConfig(&g_comms[d], g_ndev, id, d, &config));
      } else {
        CHECK_NCCL(ncclCommInitRank(&g_comms[d], g_ndev, id, d));
      }
    }
    CHECK_NCCL(ncclGroupEnd());
  } else {
    CHECK_NCCL(ncclCommInitAll(g_comms.data(), g_ndev, nullptr));
  }
  g_streams.assign(g_ndev, nullptr);
  for (int d = 0; d < g_ndev; ++d) {
    int count = -1, dev = -1, rank = -1;
    CHECK_NCCL(ncclCommCount(g_comms[d], &count));
    CHECK_NCCL(ncclCommCuDevice(g_comms[d], &dev));
    CHECK_NCCL(ncclCommUserRank(g_comms[d], &rank));
    EXPECT(count == g_ndev && dev == d && rank == d);
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamCreate(&g_streams[d]));
  }
  std::printf("init %s: ok\n", how.c_str());
}

void Destroy() {
  for (int d = 0; d < g_ndev; ++d) {
    ncclResult_t async = ncclInternalError;
    CHECK_NCCL(ncclCommGetAsyncError(g_comms[d], &async));
    EXPECT(async == ncclSuccess);
    CHECK_NCCL(ncclCommFinalize(g_comms[d]));
    CHECK_NCCL(ncclCommDestroy(g_comms[d]));
  }
}

int Threads() {
  ncclUniqueId id;
  CHECK_NCCL(ncclGetUniqueId(&id));
  std::vector<int> ok(g_ndev, 0);
  std::vector<std::thread> threads;
  for (int d = 0; d < g_ndev; ++d) {
    threads.emplace_back([&, d] {
      CHECK(cudaSetDevice(d));
      ncclComm_t comm;
      CHECK_NCCL(ncclCommInitRank(&comm, g_ndev, id, d));
      cudaStream_t s;
      CHECK(cudaStreamCreate(&s));
      std::vector<float> h(kCount, float(d + 1));
      float* p;
      CHECK(cudaMalloc(&p, kCount * sizeof(float)));
      CHECK(cudaMemcpy(p, h.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
      CHECK_NCCL(ncclGroupStart());
      CHECK_NCCL(ncclAllReduce(p, p, kCount, ncclFloat, ncclSum, comm, s));
      CHECK_NCCL(ncclGroupEnd());
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaMemcpy(h.data(), p, kCount * sizeof(float), cudaMemcpyDeviceToHost));
      ok[d] = h[0] == float(g_ndev * (g_ndev + 1) / 2) && h[kCount - 1] == h[0];
      CHECK(cudaFree(p));
      CHECK_NCCL(ncclCommDestroy(comm));
    });
  }
  for (auto& t : threads) t.join();
  for (int d = 0; d < g_ndev; ++d) EXPECT(ok[d]);
  std::printf("PASS nccl_collectives threads devices=%d\n", g_ndev);
  return 0;
}

// The median time of one grouped float AllReduce of `bytes` per rank, over `reps` (after one
// warm-up), each ended by every rank's stream synchronize, as a training step's would be.
int Bench(size_t bytes, int reps) {
  const size_t n = bytes / sizeof(float);
  std::vector<float*> buf(g_ndev);
  for (int d = 0; d < g_ndev; ++d) buf[d] = Upload(d, std::vector<float>(n, float(d + 1)));
  std::vector<double> us;
  for (int i = 0; i <= reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < g_ndev; ++d) {
      CHECK_NCCL(ncclAllReduce(buf[d], buf[d], n, ncclFloat, ncclSum, g_comms[d], g_streams[d]));
    }
    CHECK_NCCL(ncclGroupEnd());
    for (int d = 0; d < g_ndev; ++d) {
      CHECK(cudaSetDevice(d));
      CHECK(cudaStreamSynchronize(g_streams[d]));
    }
    auto t1 = std::chrono::steady_clock::now();
    if (i > 0) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::printf("bench allreduce bytes=%zu ranks=%d reps=%d median_us=%.1f min_us=%.1f\n",
              n * sizeof(float), g_ndev, reps, us[us.size() / 2], us[0]);
  for (int d = 0; d < g_ndev; ++d) CHECK(cudaFree(buf[d]));
  Destroy();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "all";
  const std::string init = argc > 2 ? argv[2] : "all";
  int version = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  std::printf("nccl version %d\n", version);
  if (mode == "xproc") {  // before any CUDA call: the child only hands the id to NCCL
    ncclUniqueId id;
    CHECK_NCCL(ncclGetUniqueId(&id));
    std::fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
      ncclComm_t comm = nullptr;
      ncclResult_t r = ncclCommInitRank(&comm, 2, id, 1);
      std::printf("child: ncclCommInitRank returned %s\n", ncclGetErrorString(r));
      std::fflush(stdout);
      _exit(r == ncclInvalidUsage ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    std::printf("PASS nccl_collectives xproc\n");
    return 0;
  }
  CHECK(cudaGetDeviceCount(&g_ndev));
  std::printf("devices: %d\n", g_ndev);
  std::fflush(stdout);
  EXPECT(g_ndev >= 2);
  if (mode == "threads") return Threads();
  if (mode == "bench") {
    Init("all");
    return Bench(argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1 << 20,
                 argc > 3 ? std::atoi(argv[3]) : 5);
  }
  Init(init);
  if (mode == "missing") {
    float* p = Upload(0, std::vector<float>(16, 1.f));
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclAllReduce(p, p, 16, ncclFloat, ncclSum, g_comms[0], g_streams[0]));
    ncclResult_t r = ncclGroupEnd();
    std::printf("ncclGroupEnd returned %s; last error: %s\n", ncclGetErrorString(r),
                ncclGetLastError(g_comms[0]));
    EXPECT(r == ncclInvalidUsage);
    // The dropped call leaves nothing behind: a full AllReduce still works.
    OrderedOnTheStream();
    CHECK(cudaFree(p));
    Destroy();
    std::printf("PASS nccl_collectives missing\n");
    return 0;
  }
  if (mode == "stub" || mode == "fp8") {
    void* p = Upload(0, std::vector<float>(16, 1.f));
    ncclResult_t r = mode == "stub"
        ? ncclAlltoAll(p, p, 4, ncclFloat, g_comms[0], g_streams[0])
        : ncclAllReduce(p, p, 16, ncclFloat8e4m3, ncclSum, g_comms[0], g_streams[0]);
    std::printf("%s returned %s\n", mode == "stub" ? "ncclAlltoAll" : "fp8 ncclAllReduce",
                ncclGetErrorString(r));
    EXPECT(r != ncclSuccess);
    CHECK(cudaFree(p));
    Destroy();
    std::printf("PASS nccl_collectives %s\n", mode.c_str());
    return 0;
  }
  AllReduceEveryOp<int8_t>(ncclInt8, "int8", true);
  AllReduceEveryOp<uint8_t>(ncclUint8, "uint8", true);
  AllReduceEveryOp<int32_t>(ncclInt32, "int32", true);
  AllReduceEveryOp<uint32_t>(ncclUint32, "uint32", true);
  AllReduceEveryOp<int64_t>(ncclInt64, "int64", true);
  AllReduceEveryOp<uint64_t>(ncclUint64, "uint64", true);
  AllReduceEveryOp<__half>(ncclFloat16, "half", false);
  AllReduceEveryOp<float>(ncclFloat32, "float", false);
  AllReduceEveryOp<double>(ncclFloat64, "double", false);
  AllReduceEveryOp<__nv_bfloat16>(ncclBfloat16, "bfloat16", false);
  RootedAndScattered<float>(ncclFloat32, "float");
  RootedAndScattered<__half>(ncclFloat16, "half");
  RootedAndScattered<__nv_bfloat16>(ncclBfloat16, "bfloat16");
  RootedAndScattered<int32_t>(ncclInt32, "int32");
  SendRecvRing();
  OrderedOnTheStream();
  Destroy();
  std::printf("PASS nccl_collectives all init=%s devices=%d\n", init.c_str(), g_ndev);
  return 0;
}
