// cuFFT through gpool: a 1-D complex-to-complex plan (cufftPlan1d), a stream, then one forward
// transform (cufftExecC2C) out of place. The input is a single complex exponential, so the
// transform is one spike of height n at its frequency. Prints the buffers' device addresses so a
// test can find them among the launches' parameters, then the call's status and, after a
// synchronize, checks the spectrum and prints "PASS cufft_c2c" (on a GPU). On the emulated
// backend cuFFT's kernels have no CPU implementation, so the launch reaches the server and the
// synchronize reports the kernel's error (driver_e2e_test.cc).
#include <cufft.h>

#include <cmath>
#include <vector>

#include "common.h"

#define CHECK_FFT(call)                                                           \
  do {                                                                            \
    cufftResult r_ = (call);                                                      \
    if (r_ != CUFFT_SUCCESS) {                                                    \
      std::fprintf(stderr, "%s:%d: %s failed: cufftResult %d\n", __FILE__,        \
                   __LINE__, #call, int(r_));                                     \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1024;
  const int freq = 5;
  std::vector<cufftComplex> in(n), out(n);
  for (int i = 0; i < n; ++i) {
    double a = 2 * M_PI * freq * i / n;
    in[i] = {float(std::cos(a)), float(std::sin(a))};
  }
  cufftHandle plan;
  CHECK_FFT(cufftPlan1d(&plan, n, CUFFT_C2C, 1));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK_FFT(cufftSetStream(plan, s));
  cufftComplex *din, *dout;
  CHECK(cudaMalloc(&din, n * sizeof(cufftComplex)));
  CHECK(cudaMalloc(&dout, n * sizeof(cufftComplex)));
  std::printf("buffers in=%p out=%p\n", static_cast<void*>(din), static_cast<void*>(dout));
  std::fflush(stdout);
  CHECK(cudaMemcpyAsync(din, in.data(), n * sizeof(cufftComplex), cudaMemcpyHostToDevice, s));
  cufftResult r = cufftExecC2C(plan, din, dout, CUFFT_FORWARD);
  std::printf("cufftExecC2C: cufftResult %d\n", int(r));
  std::fflush(stdout);
  CHECK_FFT(r);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(out.data(), dout, n * sizeof(cufftComplex), cudaMemcpyDeviceToHost));
  for (int k = 0; k < n; ++k) {
    double want = k == freq ? n : 0;
    EXPECT(std::fabs(out[k].x - want) < 1e-2 * n && std::fabs(out[k].y) < 1e-2 * n);
  }
  CHECK_FFT(cufftDestroy(plan));
  std::printf("PASS cufft_c2c n=%d\n", n);
  return 0;
}
