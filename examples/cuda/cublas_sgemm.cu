// cuBLAS through gpool: cublasCreate, a stream and a workspace, then one SGEMM (C = A * B, n x n).
// Prints the matrices' device addresses so a test can find them among the launch's parameters,
// then the SGEMM's status and, after a synchronize, the stream's result. On a GPU the product is
// checked against a CPU reference on 64 sampled entries and "PASS cublas_sgemm" printed (the
// inputs are small integers and halves, so every sum is exact in FP32, also at the n = 4096 that
// scripts/gpu-check.sh runs, and in TF32 were cuBLAS to use it); on the
// emulated backend cuBLAS's kernels have no CPU implementation, so the launch reaches the server
// and the synchronize reports the kernel's error (driver_e2e_test.cc). It also prints how long
// cublasCreate took (informational; it loads cuBLAS's kernel libraries, docs/remoting/driver-api.md).
#include <cublas_v2.h>

#include <chrono>
#include <cmath>
#include <vector>

#include "common.h"

#define CHECK_BLAS(call) CHECK_LIB(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusName)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  const size_t bytes = size_t(n) * n * sizeof(float);
  std::vector<float> a(size_t(n) * n), b(size_t(n) * n), c(size_t(n) * n, 0.f);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i % 7) - 3.f;
    b[i] = float(i % 5) * 0.5f;
  }
  cublasHandle_t h;
  CHECK(cudaFree(nullptr));  // the runtime's own start-up, not counted below
  auto t0 = std::chrono::steady_clock::now();
  CHECK_BLAS(cublasCreate(&h));
  std::printf("cublasCreate: %.0f ms\n",
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK_BLAS(cublasSetStream(h, s));
  void* workspace;
  const size_t workspace_bytes = size_t(4) << 20;
  CHECK(cudaMalloc(&workspace, workspace_bytes));
  CHECK_BLAS(cublasSetWorkspace(h, workspace, workspace_bytes));
  float *da, *db, *dc;
  CHECK(cudaMalloc(&da, bytes));
  CHECK(cudaMalloc(&db, bytes));
  CHECK(cudaMalloc(&dc, bytes));
  std::printf("matrices A=%p B=%p C=%p\n", static_cast<void*>(da), static_cast<void*>(db),
              static_cast<void*>(dc));
  std::fflush(stdout);
  CHECK(cudaMemcpyAsync(da, a.data(), bytes, cudaMemcpyHostToDevice, s));
  CHECK(cudaMemcpyAsync(db, b.data(), bytes, cudaMemcpyHostToDevice, s));
  const float one = 1.f, zero = 0.f;
  cublasStatus_t st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, db, n, &zero, dc, n);
  std::printf("cublasSgemm: %s\n", cublasGetStatusName(st));
  std::fflush(stdout);
  CHECK_BLAS(st);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(c.data(), dc, bytes, cudaMemcpyDeviceToHost));
  // Column-major: C[i + j*n] = sum_k A[i + k*n] * B[k + j*n], on a sample of entries.
  for (int t = 0; t < 64; ++t) {
    int i = (t * 37) % n, j = (t * 91) % n;
    double ref = 0;
    for (int k = 0; k < n; ++k) ref += double(a[i + size_t(k) * n]) * b[k + size_t(j) * n];
    EXPECT(std::fabs(ref - c[i + size_t(j) * n]) <= 1e-3 * (1 + std::fabs(ref)));
  }
  CHECK_BLAS(cublasDestroy(h));
  std::printf("PASS cublas_sgemm n=%d\n", n);
  return 0;
}
