// The runtime-API contenders of `remote_bench --interleaved --clients=DIR` (bench/layer_client.h),
// one source built twice (bench/CMakeLists.txt):
//   layer_runtime  nvcc -cudart shared: `gpool run` gives it NVIDIA's libcudart.so.13 from the
//                  client lib dir, over gpool's driver stand-in (libcuda.so.1);
//   layer_static   plain nvcc (NVIDIA's static runtime) with cuBLAS (-DGPOOL_BENCH_CUBLAS): NVIDIA's
//                  runtime and cuBLAS over gpool's driver stand-in (libcuda.so.1).
// Commands, one per line on stdin, each answered with "gpool-bench ok" on stdout once done:
//   sync N     N cudaDeviceSynchronize calls with nothing outstanding
//   launch N   N launches of noop<<<1, 1>>> (bench/layer_kernels.cu), then cudaDeviceSynchronize
//   sgemm N    (layer_static) N cublasSgemm of M x M matrices on one stream, then
//              cudaStreamSynchronize: cuBLAS-sized work, each SGEMM one library call
// `layer_static probe [M]` runs one SGEMM and exits: bench/driver_layer.sh reads which kernels it
// launched from the server's launch log, to give the emulated server no-op CPU versions of them.
// Usage: layer_runtime | layer_static [probe] [M] (M: the SGEMM's matrix size, default 64).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "layer_kernels.cu"

#ifdef GPOOL_BENCH_CUBLAS
#include <cublas_v2.h>
#endif

namespace {

void Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "layer_client: %s failed: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

#ifdef GPOOL_BENCH_CUBLAS
void CheckBlas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "layer_client: %s failed: %s\n", what, cublasGetStatusName(s));
  std::exit(1);
}

struct Sgemm {
  cublasHandle_t h;
  cudaStream_t s;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  int m;

  explicit Sgemm(int size) : m(size) {
    CheckBlas(cublasCreate(&h), "cublasCreate");
    Check(cudaStreamCreate(&s), "cudaStreamCreate");
    CheckBlas(cublasSetStream(h, s), "cublasSetStream");
    const size_t bytes = size_t(m) * m * sizeof(float);
    Check(cudaMalloc(&a, bytes), "cudaMalloc");
    Check(cudaMalloc(&b, bytes), "cudaMalloc");
    Check(cudaMalloc(&c, bytes), "cudaMalloc");
    std::vector<float> host(size_t(m) * m, 1.f);
    Check(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    Check(cudaMemcpy(b, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  void Run(long n) {
    const float one = 1.f, zero = 0.f;
    for (long i = 0; i < n; ++i) {
      CheckBlas(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, a, m, b, m, &zero, c, m),
                "cublasSgemm");
    }
    Check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }
};
#endif

}  // namespace

int main(int argc, char** argv) {
  const bool probe = argc > 1 && std::strcmp(argv[1], "probe") == 0;
  const int m = argc > 1 + probe ? std::atoi(argv[1 + probe]) : 64;
  if (m <= 0) {
    std::fprintf(stderr, "usage: layer_client [probe] [M>0]\n");
    return 2;
  }
  Check(cudaFree(nullptr), "cudaFree(nullptr)");  // the runtime's start-up
#ifdef GPOOL_BENCH_CUBLAS
  Sgemm blas(m);
  if (probe) {
    blas.Run(1);  // on the emulated backend without CPU kernels: fails naming the kernel
    return 0;
  }
#else
  if (probe) {
    std::fprintf(stderr, "layer_client: probe needs the cuBLAS build (layer_static)\n");
    return 2;
  }
#endif
  char line[256];
  while (std::fgets(line, sizeof line, stdin)) {
    char cmd[16] = {0};
    long n = 0;
    const int got = std::sscanf(line, "%15s %ld", cmd, &n);
    const std::string c = cmd;
    if (got == 2 && c == "sync") {
      for (long i = 0; i < n; ++i) Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    } else if (got == 2 && c == "launch") {
      for (long i = 0; i < n; ++i) noop<<<1, 1>>>(static_cast<int>(i));
      Check(cudaGetLastError(), "noop<<<1, 1>>>");
      Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#ifdef GPOOL_BENCH_CUBLAS
    } else if (got == 2 && c == "sgemm") {
      blas.Run(n);
#endif
    } else {
      std::fprintf(stderr, "layer_client: unknown command: %s", line);
      return 2;
    }
    std::printf("gpool-bench ok\n");
    std::fflush(stdout);
  }
  return 0;
}
