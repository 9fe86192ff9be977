// cuRAND's host API through gpool: a Philox generator (one kernel per generate call, no state
// set-up kernel), a seed, a stream, then curandGenerateUniform into device memory. Prints the
// output buffer's device address so a test can find it among the launch's parameters, then the
// call's status and, after a synchronize, checks the numbers. On a GPU they are in (0, 1] and not
// all equal, and "PASS curand_uniform" is printed; on the emulated backend cuRAND's kernel has
// no CPU implementation, so the launch reaches the server and the synchronize reports the
// kernel's error (driver_e2e_test.cc).
#include <curand.h>

#include <vector>

#include "common.h"

#define CHECK_RAND(call)                                                          \
  do {                                                                            \
    curandStatus_t s_ = (call);                                                   \
    if (s_ != CURAND_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "%s:%d: %s failed: status %d\n", __FILE__, __LINE__,   \
                   #call, int(s_));                                               \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1 << 16;
  curandGenerator_t g;
  CHECK_RAND(curandCreateGenerator(&g, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CHECK_RAND(curandSetPseudoRandomGeneratorSeed(g, 1234));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK_RAND(curandSetStream(g, s));
  float* d;
  CHECK(cudaMalloc(&d, n * sizeof(float)));
  std::printf("output=%p\n", static_cast<void*>(d));
  std::fflush(stdout);
  curandStatus_t st = curandGenerateUniform(g, d, n);
  std::printf("curandGenerateUniform: status %d\n", int(st));
  std::fflush(stdout);
  CHECK_RAND(st);
  CHECK(cudaStreamSynchronize(s));
  std::vector<float> h(n);
  CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  bool differ = false;
  for (size_t i = 0; i < n; ++i) {
    EXPECT(h[i] > 0.f && h[i] <= 1.f);
    differ |= h[i] != h[0];
  }
  EXPECT(differ);
  CHECK_RAND(curandDestroyGenerator(g));
  CHECK(cudaFree(d));
  std::printf("PASS curand_uniform n=%zu\n", n);
  return 0;
}
