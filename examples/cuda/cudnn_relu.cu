// cuDNN through gpool: cudnnCreate, a stream, then one ReLU (cudnnActivationForward) over an
// n-element float tensor. Prints the buffers' device addresses so a test can find them among the
// launch's parameters, then the call's status and, after a synchronize, checks the result and
// prints "PASS cudnn_relu" (on a GPU). On the emulated backend cuDNN's kernels have no CPU
// implementation, so the launch reaches the server and the synchronize reports the kernel's
// error (driver_e2e_test.cc).
#include <cudnn.h>

#include <vector>

#include "common.h"

#define CHECK_DNN(call) CHECK_LIB(call, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = float(i % 9) - 4.f;
  cudnnHandle_t h;
  CHECK_DNN(cudnnCreate(&h));
  std::printf("cudnnCreate: ok (cuDNN %zu)\n", cudnnGetVersion());
  std::fflush(stdout);
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  CHECK_DNN(cudnnSetStream(h, s));
  cudnnTensorDescriptor_t t;
  CHECK_DNN(cudnnCreateTensorDescriptor(&t));
  CHECK_DNN(cudnnSetTensor4dDescriptor(t, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, 1, 1, n));
  cudnnActivationDescriptor_t act;
  CHECK_DNN(cudnnCreateActivationDescriptor(&act));
  CHECK_DNN(cudnnSetActivationDescriptor(act, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
  float *dx, *dy;
  CHECK(cudaMalloc(&dx, n * sizeof(float)));
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  std::printf("buffers x=%p y=%p\n", static_cast<void*>(dx), static_cast<void*>(dy));
  std::fflush(stdout);
  CHECK(cudaMemcpyAsync(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  const float one = 1.f, zero = 0.f;
  cudnnStatus_t st = cudnnActivationForward(h, act, &one, t, dx, &zero, t, dy);
  std::printf("cudnnActivationForward: %s\n", cudnnGetErrorString(st));
  std::fflush(stdout);
  CHECK_DNN(st);
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(y[i] == (x[i] > 0 ? x[i] : 0.f));
  CHECK_DNN(cudnnDestroyActivationDescriptor(act));
  CHECK_DNN(cudnnDestroyTensorDescriptor(t));
  CHECK_DNN(cudnnDestroy(h));
  std::printf("PASS cudnn_relu n=%d\n", n);
  return 0;
}
