// A small data-parallel training loop in C++: a two-layer MLP (in -> hidden, ReLU -> classes,
// softmax cross-entropy) trained with SGD for --steps steps on every visible device (at most
// --devices), each replica on its own fixed batch of synthetic data (labels from a fixed random
// linear "teacher", so there is something to learn). Per step and device: forward and backward
// GEMMs through cuBLAS (or, with --naive-gemm, a naive custom kernel), custom kernels for
// bias+ReLU, its backward, the bias gradients, softmax cross-entropy and the SGD update; with
// more than one device the gradients (one buffer) are summed with one NCCL all-reduce
// (ncclCommInitAll, one process). With one device no NCCL call is made.
// Prints the loss every 10 steps and the median step time (a step: all its work on every device
// issued, then each replica's per-sample losses read back), and "PASS mlp_train ..." when the
// loss fell to under 80% of its first value and every replica's weights equal device 0's.
// --naive-gemm exists for the emulated backend (examples/cuda/emulated_kernels.cc has a CPU
// version of every kernel here, none of cuBLAS's), so the whole loop runs through gpool on a CPU.
//   mlp_train [--naive-gemm] [--steps N] [--devices N] [--batch B] [--in D] [--hidden H]
//             [--classes C] [--lr LR]
#include <cublas_v2.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common.h"

#define CHECK_BLAS(call) CHECK_LIB(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusName)
#define CHECK_NCCL(call) CHECK_LIB(call, ncclSuccess, ncclGetErrorString)

// Column-major throughout (cuBLAS's convention): a sample is a column. C = op(A) op(B), with
// op(X) = X^T when its flag is set; one thread per element of C (m x n), a 16 x 16 block each.
__global__ void gemmNaive(int ta, int tb, int m, int n, int k, const float* a, int lda,
                          const float* b, int ldb, float* c, int ldc) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= n) return;
  float acc = 0.f;
  for (int p = 0; p < k; ++p) {
    float x = ta ? a[p + size_t(i) * lda] : a[i + size_t(p) * lda];
    float y = tb ? b[j + size_t(p) * ldb] : b[p + size_t(j) * ldb];
    acc += x * y;
  }
  c[i + size_t(j) * ldc] = acc;
}

// z (rows x cols) += bias per row, then ReLU in place.
__global__ void biasRelu(float* z, const float* bias, int rows, int cols) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= rows * cols) return;
  float v = z[idx] + bias[idx % rows];
  z[idx] = v > 0.f ? v : 0.f;
}

// ReLU's backward: the gradient passes where the activation was positive.
__global__ void reluBackward(float* grad, const float* act, int n) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < n && act[idx] <= 0.f) grad[idx] = 0.f;
}

// A bias's gradient: the sum of each row of g (rows x cols).
__global__ void rowSum(const float* g, float* out, int rows, int cols) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  float s = 0.f;
  for (int j = 0; j < cols; ++j) s += g[i + size_t(j) * rows];
  out[i] = s;
}

// Softmax cross-entropy per sample (a column of logits, plus the output bias): its loss, and the
// logits' gradient (softmax - one-hot) * scale, scale = 1 / (global batch), so that the summed
// gradients of all replicas are the global batch's mean.
__global__ void softmaxXent(const float* logits, const float* bias, const int* labels,
                            float* grad, float* loss, int classes, int cols, float scale) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  const float* z = logits + size_t(j) * classes;
  float mx = -INFINITY;
  for (int c = 0; c < classes; ++c) mx = fmaxf(mx, z[c] + bias[c]);
  float sum = 0.f;
  for (int c = 0; c < classes; ++c) sum += expf(z[c] + bias[c] - mx);
  int y = labels[j];
  loss[j] = logf(sum) - (z[y] + bias[y] - mx);
  for (int c = 0; c < classes; ++c) {
    float p = expf(z[c] + bias[c] - mx) / sum;
    grad[size_t(j) * classes + c] = (p - (c == y ? 1.f : 0.f)) * scale;
  }
}

__global__ void sgdUpdate(float* w, const float* g, float lr, int n) {
  int idx = blockIdx.x * blockDim.x + threadIdx.x;
  if (idx < n) w[idx] -= lr * g[idx];
}

namespace {

int Blocks(long n) { return int((n + 255) / 256); }

struct Options {
  bool naive_gemm = false;
  int steps = 100, max_devices = 1 << 20, batch = 64, in = 32, hidden = 64, classes = 4;
  float lr = 0.5f;
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mlp_train: %s wants a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--naive-gemm") o.naive_gemm = true;
    else if (a == "--steps") o.steps = std::atoi(value());
    else if (a == "--devices") o.max_devices = std::atoi(value());
    else if (a == "--batch") o.batch = std::atoi(value());
    else if (a == "--in") o.in = std::atoi(value());
    else if (a == "--hidden") o.hidden = std::atoi(value());
    else if (a == "--classes") o.classes = std::atoi(value());
    else if (a == "--lr") o.lr = float(std::atof(value()));
    else {
      std::fprintf(stderr, "mlp_train: unknown argument %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (o.steps < 2 || o.max_devices < 1 || o.batch < 1 || o.in < 1 || o.hidden < 1 ||
      o.classes < 2 || !(o.lr > 0)) {
    std::fprintf(stderr, "mlp_train: want steps >= 2, classes >= 2, the rest positive\n");
    std::exit(2);
  }
  return o;
}

// Deterministic pseudo-random numbers in [-1, 1) (the same on every run and machine).
struct Lcg {
  uint64_t s;
  float Next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return float((s >> 40) & 0xffffff) / float(1 << 23) - 1.f;
  }
};

// One replica: its device, stream, cuBLAS handle and buffers. Parameters and gradients are each
// one buffer laid out [W1 (hidden x in) | b1 | W2 (classes x hidden) | b2], so one all-reduce
// sums every gradient.
struct Replica {
  int device;
  cudaStream_t stream;
  cublasHandle_t blas = nullptr;
  float *params, *grads, *x, *act, *dact, *logits, *dlogits, *loss;
  int* labels;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  int visible = 0;
  CHECK(cudaGetDeviceCount(&visible));
  const int ndev = std::min(visible, o.max_devices);
  EXPECT(ndev >= 1);
  const int B = o.batch, D = o.in, H = o.hidden, C = o.classes;
  const long n_w1 = long(H) * D, n_w2 = long(C) * H;
  const long n_params = n_w1 + H + n_w2 + C;
  std::printf("mlp_train: devices=%d gemm=%s batch=%d per device, in=%d hidden=%d classes=%d, "
              "%ld parameters\n", ndev, o.naive_gemm ? "naive" : "cublas", B, D, H, C, n_params);

  // The same initial weights on every replica; each replica its own batch.
  std::vector<float> init(n_params);
  Lcg g{42};
  for (long i = 0; i < n_w1; ++i) init[i] = g.Next() * std::sqrt(3.f / D);
  for (long i = 0; i < H; ++i) init[n_w1 + i] = 0.f;
  for (long i = 0; i < n_w2; ++i) init[n_w1 + H + i] = g.Next() * std::sqrt(3.f / H);
  for (long i = 0; i < C; ++i) init[n_w1 + H + n_w2 + i] = 0.f;
  std::vector<float> teacher(size_t(C) * D);
  for (auto& t : teacher) t = g.Next();

  std::vector<Replica> reps(ndev);
  for (int d = 0; d < ndev; ++d) {
    Replica& r = reps[d];
    r.device = d;
    CHECK(cudaSetDevice(d));
    CHECK(cudaStreamCreate(&r.stream));
    if (!o.naive_gemm) {
      CHECK_BLAS(cublasCreate(&r.blas));
      CHECK_BLAS(cublasSetStream(r.blas, r.stream));
    }
    CHECK(cudaMalloc(&r.params, n_params * sizeof(float)));
    CHECK(cudaMalloc(&r.grads, n_params * sizeof(float)));
    CHECK(cudaMalloc(&r.x, size_t(D) * B * sizeof(float)));
    CHECK(cudaMalloc(&r.act, size_t(H) * B * sizeof(float)));
    CHECK(cudaMalloc(&r.dact, size_t(H) * B * sizeof(float)));
    CHECK(cudaMalloc(&r.logits, size_t(C) * B * sizeof(float)));
    CHECK(cudaMalloc(&r.dlogits, size_t(C) * B * sizeof(float)));
    CHECK(cudaMalloc(&r.loss, B * sizeof(float)));
    CHECK(cudaMalloc(&r.labels, B * sizeof(int)));
    std::vector<float> x(size_t(D) * B);
    std::vector<int> labels(B);
    Lcg dg{1000 + uint64_t(d)};
    for (int j = 0; j < B; ++j) {
      for (int i = 0; i < D; ++i) x[i + size_t(j) * D] = dg.Next();
      int best = 0;
      float best_v = -INFINITY;
      for (int c = 0; c < C; ++c) {
        float v = 0;
        for (int i = 0; i < D; ++i) v += teacher[c + size_t(i) * C] * x[i + size_t(j) * D];
        if (v > best_v) best_v = v, best = c;
      }
      labels[j] = best;
    }
    CHECK(cudaMemcpy(r.params, init.data(), n_params * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(r.x, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(r.labels, labels.data(), B * sizeof(int), cudaMemcpyHostToDevice));
  }
  std::vector<ncclComm_t> comms(ndev);
  if (ndev > 1) {
    std::vector<int> devs(ndev);
    for (int d = 0; d < ndev; ++d) devs[d] = d;
    CHECK_NCCL(ncclCommInitAll(comms.data(), ndev, devs.data()));
    std::printf("ncclCommInitAll: ok (%d ranks)\n", ndev);
  }

  // C (m x n) = op(A) op(B), column-major, on the replica's stream.
  auto gemm = [&](Replica& r, bool ta, bool tb, int m, int n, int k, const float* a, int lda,
                  const float* b, int ldb, float* c, int ldc) {
    if (o.naive_gemm) {
      dim3 block(16, 16), grid((m + 15) / 16, (n + 15) / 16);
      gemmNaive<<<grid, block, 0, r.stream>>>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
      CHECK(cudaGetLastError());
    } else {
      const float one = 1.f, zero = 0.f;
      CHECK_BLAS(cublasSgemm(r.blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                             m, n, k, &one, a, lda, b, ldb, &zero, c, ldc));
    }
  };
  const float scale = 1.f / (float(B) * ndev);
  std::vector<float> step_ms, losses;
  std::vector<float> host_loss(B);
  for (int step = 0; step < o.steps; ++step) {
    auto t0 = std::chrono::steady_clock::now();
    for (Replica& r : reps) {
      CHECK(cudaSetDevice(r.device));
      float *w1 = r.params, *b1 = w1 + n_w1, *w2 = b1 + H, *b2 = w2 + n_w2;
      float *gw1 = r.grads, *gb1 = gw1 + n_w1, *gw2 = gb1 + H, *gb2 = gw2 + n_w2;
      // Forward: act = relu(W1 x + b1); logits = W2 act (+ b2 inside the loss).
      gemm(r, false, false, H, B, D, w1, H, r.x, D, r.act, H);
      biasRelu<<<Blocks(long(H) * B), 256, 0, r.stream>>>(r.act, b1, H, B);
      gemm(r, false, false, C, B, H, w2, C, r.act, H, r.logits, C);
      softmaxXent<<<Blocks(B), 256, 0, r.stream>>>(r.logits, b2, r.labels, r.dlogits, r.loss, C,
                                                    B, scale);
      // Backward.
      gemm(r, false, true, C, H, B, r.dlogits, C, r.act, H, gw2, C);
      rowSum<<<Blocks(C), 256, 0, r.stream>>>(r.dlogits, gb2, C, B);
      gemm(r, true, false, H, B, C, w2, C, r.dlogits, C, r.dact, H);
      reluBackward<<<Blocks(long(H) * B), 256, 0, r.stream>>>(r.dact, r.act, H * B);
      gemm(r, false, true, H, D, B, r.dact, H, r.x, D, gw1, H);
      rowSum<<<Blocks(H), 256, 0, r.stream>>>(r.dact, gb1, H, B);
      CHECK(cudaGetLastError());
    }
    if (ndev > 1) {
      CHECK_NCCL(ncclGroupStart());
      for (Replica& r : reps) {
        CHECK_NCCL(ncclAllReduce(r.grads, r.grads, size_t(n_params), ncclFloat, ncclSum,
                                 comms[r.device], r.stream));
      }
      CHECK_NCCL(ncclGroupEnd());
    }
    double total = 0;
    for (Replica& r : reps) {
      CHECK(cudaSetDevice(r.device));
      sgdUpdate<<<Blocks(n_params), 256, 0, r.stream>>>(r.params, r.grads, o.lr, int(n_params));
      CHECK(cudaGetLastError());
      CHECK(cudaMemcpyAsync(host_loss.data(), r.loss, B * sizeof(float), cudaMemcpyDeviceToHost,
                            r.stream));
      CHECK(cudaStreamSynchronize(r.stream));
      for (float l : host_loss) total += l;
    }
    step_ms.push_back(
        std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - t0).count());
    losses.push_back(float(total / (double(B) * ndev)));
    if (step % 10 == 0 || step == o.steps - 1) std::printf("step %d loss %.4f\n", step, losses.back());
    if (!std::isfinite(losses.back())) {
      std::fprintf(stderr, "mlp_train: loss is not finite at step %d\n", step);
      return 1;
    }
  }
  std::vector<float> sorted = step_ms;
  std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
  std::printf("median_step_ms=%.3f\n", sorted[sorted.size() / 2]);

  // Every replica applied the same summed gradients to the same initial weights.
  std::vector<float> w0(n_params), wd(n_params);
  CHECK(cudaSetDevice(0));
  CHECK(cudaMemcpy(w0.data(), reps[0].params, n_params * sizeof(float), cudaMemcpyDeviceToHost));
  double max_diff = 0;
  bool agree = true;
  for (int d = 1; d < ndev; ++d) {
    CHECK(cudaSetDevice(d));
    CHECK(cudaMemcpy(wd.data(), reps[d].params, n_params * sizeof(float), cudaMemcpyDeviceToHost));
    for (long i = 0; i < n_params; ++i) {
      double diff = std::fabs(double(wd[i]) - w0[i]);
      max_diff = std::max(max_diff, diff);
      agree &= diff <= 1e-5 * (1 + std::fabs(w0[i]));
    }
  }
  std::printf("replicas: %d, max weight difference from device 0: %g\n", ndev, max_diff);
  const bool fell = losses.back() < 0.8f * losses.front();
  std::printf("loss first=%.4f last=%.4f\n", losses.front(), losses.back());
  if (ndev > 1) {
    for (int d = 0; d < ndev; ++d) CHECK_NCCL(ncclCommDestroy(comms[d]));
  }
  for (Replica& r : reps) {
    CHECK(cudaSetDevice(r.device));
    if (r.blas) CHECK_BLAS(cublasDestroy(r.blas));
    for (void* p : {static_cast<void*>(r.params), static_cast<void*>(r.grads),
                    static_cast<void*>(r.x), static_cast<void*>(r.act), static_cast<void*>(r.dact),
                    static_cast<void*>(r.logits), static_cast<void*>(r.dlogits),
                    static_cast<void*>(r.loss), static_cast<void*>(r.labels)}) {
      CHECK(cudaFree(p));
    }
    CHECK(cudaStreamDestroy(r.stream));
  }
  if (!fell || !agree) {
    std::fprintf(stderr, "mlp_train: %s\n",
                 !fell ? "the loss did not fall under 80% of its first value"
                       : "the replicas' weights differ");
    return 1;
  }
  std::printf("PASS mlp_train steps=%d gemm=%s\n", o.steps, o.naive_gemm ? "naive" : "cublas");
  return 0;
}
