// NCCL through gpool: one process drives every visible device (ncclCommInitAll), checks each
// communicator (ncclCommCount, ncclCommCuDevice, ncclCommUserRank), then one float sum allreduce
// across them in a group. Prints each step so a test can see how far it gets; on GPUs it checks
// the sum on every device and prints "PASS nccl_allreduce".
// Usage: nccl_allreduce [N]     init, allreduce of N floats (default 65536), destroy
//        nccl_allreduce init    init, the checks, destroy; prints "PASS nccl_allreduce init"
#include <nccl.h>

#include <cstring>
#include <vector>

#include "common.h"

#define CHECK_NCCL(call) CHECK_LIB(call, ncclSuccess, ncclGetErrorString)

int main(int argc, char** argv) {
  const bool init_only = argc > 1 && std::strcmp(argv[1], "init") == 0;
  const size_t n = argc > 1 && !init_only ? std::strtoul(argv[1], nullptr, 10) : 1 << 16;
  int ndev = 0;
  CHECK(cudaGetDeviceCount(&ndev));
  std::printf("devices: %d\n", ndev);
  std::fflush(stdout);
  EXPECT(ndev >= 2);
  std::vector<ncclComm_t> comms(ndev);
  std::vector<int> devs(ndev);
  for (int d = 0; d < ndev; ++d) devs[d] = d;
  CHECK_NCCL(ncclCommInitAll(comms.data(), ndev, devs.data()));
  std::printf("ncclCommInitAll: ok\n");
  for (int d = 0; d < ndev; ++d) {
    int count = -1, cu_dev = -1, rank = -1;
    CHECK_NCCL(ncclCommCount(comms[d], &count));
    CHECK_NCCL(ncclCommCuDevice(comms[d], &cu_dev));
    CHECK_NCCL(ncclCommUserRank(comms[d], &rank));
    std::printf("comm %d: count=%d device=%d rank=%d\n", d, count, cu_dev, rank);
    EXPECT(count == ndev && cu_dev == d && rank == d);
  }
  std::fflush(stdout);
  if (init_only) {
    for (int d = 0; d < ndev; ++d) CHECK_NCCL(ncclCommDestroy(comms[d]));
    std::printf("PASS nccl_allreduce init devices=%d\n", ndev);
    return 0;
  }
  std::vector<float*> buf(ndev);
  std::vector<cudaStream_t> streams(ndev);
  for (int d = 0; d < ndev; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamCreate(&streams[d]));
    CHECK(cudaMalloc(&buf[d], n * sizeof(float)));
    std::vector<float> h(n, float(d + 1));
    CHECK(cudaMemcpy(buf[d], h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  }
  CHECK_NCCL(ncclGroupStart());
  for (int d = 0; d < ndev; ++d) {
    CHECK_NCCL(ncclAllReduce(buf[d], buf[d], n, ncclFloat, ncclSum, comms[d], streams[d]));
  }
  CHECK_NCCL(ncclGroupEnd());
  std::printf("ncclAllReduce: enqueued\n");
  std::fflush(stdout);
  const float want = float(ndev * (ndev + 1) / 2);
  for (int d = 0; d < ndev; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamSynchronize(streams[d]));
    std::vector<float> h(n);
    CHECK(cudaMemcpy(h.data(), buf[d], n * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i += 97) EXPECT(h[i] == want);
  }
  for (int d = 0; d < ndev; ++d) CHECK_NCCL(ncclCommDestroy(comms[d]));
  std::printf("PASS nccl_allreduce devices=%d n=%zu\n", ndev, n);
  return 0;
}
