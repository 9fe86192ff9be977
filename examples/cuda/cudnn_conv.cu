// cuDNN convolution forward through gpool: cudnnCreate, a stream, tensor, filter and convolution
// descriptors (NCHW floats, 3x3 filters, padding 1, stride 1), the algorithm cuDNN's heuristics
// rank first, its workspace, then cudnnConvolutionForward. Checked against a direct CPU
// convolution of every output (the sizes are small for that: N=2, C=3, 32x32, K=8 by default).
// The inputs are small integers and halves, exact in TF32 as in FP32, and the math type is FMA
// (no TF32 tensor cores), so the check's tolerance is for summation order only.
// Prints the buffers' device addresses so a test can find them among a launch's parameters, then
// the call's status; on the emulated backend cuDNN's kernels have no CPU implementation, so the
// launch reaches the server and the synchronize reports that kernel's error (driver_e2e_test.cc).
//   cudnn_conv [N C H W K]
#include <cudnn.h>

#include <cmath>
#include <vector>

#include "common.h"

#define CHECK_DNN(call) CHECK_LIB(call, CUDNN_STATUS_SUCCESS, cudnnGetErrorString)

int main(int argc, char** argv) {
  int n = 2, c = 3, h = 32, w = 32, k = 8;
  if (argc == 6) {
    n = std::atoi(argv[1]), c = std::atoi(argv[2]), h = std::atoi(argv[3]);
    w = std::atoi(argv[4]), k = std::atoi(argv[5]);
  } else if (argc != 1) {
    std::fprintf(stderr, "usage: cudnn_conv [N C H W K]\n");
    return 2;
  }
  EXPECT(n > 0 && c > 0 && h > 0 && w > 0 && k > 0 && n * c * h * w <= (1 << 24));
  const int r = 3, s = 3, pad = 1, stride = 1;
  std::vector<float> x(size_t(n) * c * h * w), f(size_t(k) * c * r * s);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 11) - 5);
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(int(i % 5) - 2) * 0.5f;

  cudnnHandle_t dnn;
  CHECK_DNN(cudnnCreate(&dnn));
  std::printf("cudnnCreate: ok (cuDNN %zu)\n", cudnnGetVersion());
  std::fflush(stdout);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK_DNN(cudnnSetStream(dnn, stream));
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t fd;
  cudnnConvolutionDescriptor_t cd;
  CHECK_DNN(cudnnCreateTensorDescriptor(&xd));
  CHECK_DNN(cudnnCreateTensorDescriptor(&yd));
  CHECK_DNN(cudnnCreateFilterDescriptor(&fd));
  CHECK_DNN(cudnnCreateConvolutionDescriptor(&cd));
  CHECK_DNN(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
  CHECK_DNN(cudnnSetFilter4dDescriptor(fd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c, r, s));
  CHECK_DNN(cudnnSetConvolution2dDescriptor(cd, pad, pad, stride, stride, 1, 1,
                                            CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CHECK_DNN(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  int on, oc, oh, ow;
  CHECK_DNN(cudnnGetConvolution2dForwardOutputDim(cd, xd, fd, &on, &oc, &oh, &ow));
  EXPECT(on == n && oc == k && oh == h && ow == w);
  CHECK_DNN(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow));
  // The heuristics' first choice that works, as frameworks pick one.
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int found = 0;
  CHECK_DNN(cudnnGetConvolutionForwardAlgorithm_v7(dnn, xd, fd, cd, yd,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found, perf));
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  for (int i = 0; i < found; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS) {
      algo = perf[i].algo;
      break;
    }
  }
  size_t ws_bytes = 0;
  CHECK_DNN(cudnnGetConvolutionForwardWorkspaceSize(dnn, xd, fd, cd, yd, algo, &ws_bytes));
  std::printf("algorithm %d, workspace %zu bytes\n", int(algo), ws_bytes);
  std::vector<float> y(size_t(on) * oc * oh * ow, -1.f);
  float *dx, *df, *dy;
  void* ws = nullptr;
  CHECK(cudaMalloc(&dx, x.size() * sizeof(float)));
  CHECK(cudaMalloc(&df, f.size() * sizeof(float)));
  CHECK(cudaMalloc(&dy, y.size() * sizeof(float)));
  if (ws_bytes) CHECK(cudaMalloc(&ws, ws_bytes));
  std::printf("buffers x=%p w=%p y=%p\n", static_cast<void*>(dx), static_cast<void*>(df),
              static_cast<void*>(dy));
  std::fflush(stdout);
  CHECK(cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  CHECK(cudaMemcpyAsync(df, f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  const float one = 1.f, zero = 0.f;
  cudnnStatus_t st =
      cudnnConvolutionForward(dnn, &one, xd, dx, fd, df, cd, algo, ws, ws_bytes, &zero, yd, dy);
  std::printf("cudnnConvolutionForward: %s\n", cudnnGetErrorString(st));
  std::fflush(stdout);
  CHECK_DNN(st);
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost));

  // Direct convolution (cross-correlation, as cuDNN's CUDNN_CROSS_CORRELATION) of every output.
  double max_err = 0;
  for (int b = 0; b < n; ++b)
    for (int o = 0; o < k; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double ref = 0;
          for (int ch = 0; ch < c; ++ch)
            for (int u = 0; u < r; ++u)
              for (int v = 0; v < s; ++v) {
                int yi = i * stride - pad + u, xj = j * stride - pad + v;
                if (yi < 0 || yi >= h || xj < 0 || xj >= w) continue;
                ref += double(x[((size_t(b) * c + ch) * h + yi) * w + xj]) *
                       f[((size_t(o) * c + ch) * r + u) * s + v];
              }
          double got = y[((size_t(b) * k + o) * oh + i) * ow + j];
          max_err = std::fmax(max_err, std::fabs(got - ref));
          if (std::fabs(got - ref) > 1e-3 * (1 + std::fabs(ref))) {
            std::fprintf(stderr, "cudnn_conv: y[%d,%d,%d,%d] = %g, CPU reference %g\n", b, o, i, j,
                         got, ref);
            return 1;
          }
        }
  std::printf("checked %zu outputs against the CPU, max error %g\n", y.size(), max_err);
  if (ws) CHECK(cudaFree(ws));
  CHECK(cudaFree(dx));
  CHECK(cudaFree(df));
  CHECK(cudaFree(dy));
  CHECK_DNN(cudnnDestroyConvolutionDescriptor(cd));
  CHECK_DNN(cudnnDestroyFilterDescriptor(fd));
  CHECK_DNN(cudnnDestroyTensorDescriptor(yd));
  CHECK_DNN(cudnnDestroyTensorDescriptor(xd));
  CHECK_DNN(cudnnDestroy(dnn));
  CHECK(cudaStreamDestroy(stream));
  std::printf("PASS cudnn_conv n=%d c=%d h=%d w=%d k=%d\n", n, c, h, w, k);
  return 0;
}
