// CPU implementations of the samples' kernels for gpool's emulated GPU backend
// (gpool gpu-server --backend emulated --emulated-kernels libgpool_example_kernels.so).
// Each loops over the whole grid; parameters are read at the offsets of the kernel's real
// parameter layout, so this also checks that the client packed them byte-exact.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "remote/server/emulated_kernels.h"

namespace {

template <class Fn>
void ForEachThread(const gpool_emu_launch* l, Fn fn) {
  uint64_t bx = l->block.x, gx = l->grid.x;
  for (uint64_t b = 0; b < gx * l->grid.y * l->grid.z; ++b) {
    for (uint64_t t = 0; t < bx * l->block.y * l->block.z; ++t) fn(b % gx * bx + t % bx);
  }
}

int Fail(const gpool_emu_launch* l, const char* why) {
  std::snprintf(l->error, l->error_capacity, "%s", why);
  return 1;
}

bool Sizes(const gpool_emu_launch* l, std::initializer_list<unsigned> sizes) {
  if (l->param_count != sizes.size()) return false;
  unsigned i = 0;
  for (unsigned s : sizes) {
    if (l->param_sizes[i++] != s) return false;
  }
  return true;
}

// vectorAdd(const float* a, const float* b, float* c, int n)
int VectorAdd(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 8, 4})) return Fail(l, "vectorAdd: unexpected parameter layout");
  auto a = gpool_emu_param<const float*>(l, 0);
  auto b = gpool_emu_param<const float*>(l, 1);
  auto c = gpool_emu_param<float*>(l, 2);
  int n = gpool_emu_param<int>(l, 3);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n)) c[i] = a[i] + b[i];
  });
  return 0;
}

// applyParams(Params p, Wide w, char c, float* out): structs as the GPU lays them out.
struct Params {
  char tag;
  double scale;
  int dims[3];
  short small;
};
struct alignas(16) Wide {
  float v[5];
};
int ApplyParams(const gpool_emu_launch* l) {
  if (!Sizes(l, {sizeof(Params), sizeof(Wide), 1, 8})) {
    return Fail(l, "applyParams: unexpected parameter layout");
  }
  auto p = gpool_emu_param<Params>(l, 0);
  auto w = gpool_emu_param<Wide>(l, 1);
  auto c = gpool_emu_param<char>(l, 2);
  auto out = gpool_emu_param<float*>(l, 3);
  out[0] = p.tag;
  out[1] = static_cast<float>(p.scale);
  out[2] = p.dims[0] + p.dims[1] * 10 + p.dims[2] * 100;
  out[3] = p.small;
  out[4] = w.v[0] + w.v[4];
  out[5] = c;
  return 0;
}

// scale(float* x, float f, int n)
int Scale(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 4, 4})) return Fail(l, "scale: unexpected parameter layout");
  auto x = gpool_emu_param<float*>(l, 0);
  float f = gpool_emu_param<float>(l, 1);
  int n = gpool_emu_param<int>(l, 2);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n)) x[i] *= f;
  });
  return 0;
}

// polynomial(const float* x, float* y, int n) with __constant__ kCoeffs[4], __device__ gCounter
int Polynomial(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 4})) return Fail(l, "polynomial: unexpected parameter layout");
  auto* k = static_cast<const float*>(l->symbol(l->ctx, "kCoeffs"));
  auto* counter = static_cast<int*>(l->symbol(l->ctx, "gCounter"));
  if (!k || !counter) return Fail(l, "polynomial: symbols kCoeffs/gCounter not registered");
  auto x = gpool_emu_param<const float*>(l, 0);
  auto y = gpool_emu_param<float*>(l, 1);
  int n = gpool_emu_param<int>(l, 2);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n)) {
      float v = x[i];
      y[i] = k[0] + v * (k[1] + v * (k[2] + v * k[3]));
      ++*counter;
    }
  });
  return 0;
}

// setCounter(int value) (symbols): gCounter = value.
int SetCounter(const gpool_emu_launch* l) {
  if (!Sizes(l, {4})) return Fail(l, "setCounter: unexpected parameter layout");
  auto* counter = static_cast<int*>(l->symbol(l->ctx, "gCounter"));
  if (!counter) return Fail(l, "setCounter: symbol gCounter not registered");
  *counter = gpool_emu_param<int>(l, 0);
  return 0;
}

// addCounter(float* y, int n) (symbols): y[i] += gCounter + kCoeffs[0].
int AddCounter(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 4})) return Fail(l, "addCounter: unexpected parameter layout");
  auto* k = static_cast<const float*>(l->symbol(l->ctx, "kCoeffs"));
  auto* counter = static_cast<const int*>(l->symbol(l->ctx, "gCounter"));
  if (!k || !counter) return Fail(l, "addCounter: symbols kCoeffs/gCounter not registered");
  auto y = gpool_emu_param<float*>(l, 0);
  int n = gpool_emu_param<int>(l, 1);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n)) y[i] += *counter + k[0];
  });
  return 0;
}

// takeCounter(int* out, int delta) (symbols): *out = gCounter; gCounter += delta, in the copy of
// the device the kernel runs on.
int TakeCounter(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 4})) return Fail(l, "takeCounter: unexpected parameter layout");
  auto* counter = static_cast<int*>(l->symbol(l->ctx, "gCounter"));
  if (!counter) return Fail(l, "takeCounter: symbol gCounter not registered");
  *gpool_emu_param<int*>(l, 0) = *counter;
  *counter += gpool_emu_param<int>(l, 1);
  return 0;
}

// reloadBump(int* out, int add) (reload_kernels.cu): gRound += add; *out = gRound.
int ReloadBump(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 4})) return Fail(l, "reloadBump: unexpected parameter layout");
  auto* round = static_cast<int*>(l->symbol(l->ctx, "gRound"));
  auto* ballast = static_cast<char*>(l->symbol(l->ctx, "gBallast"));
  if (!round || !ballast) return Fail(l, "reloadBump: symbols gRound/gBallast not registered");
  *round += gpool_emu_param<int>(l, 1);
  ballast[0] = static_cast<char>(*round);
  *gpool_emu_param<int*>(l, 0) = *round;
  return 0;
}

// fill(int* x, int value, int n)
int FillKernel(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 4, 4})) return Fail(l, "fill: unexpected parameter layout");
  auto x = gpool_emu_param<int*>(l, 0);
  int value = gpool_emu_param<int>(l, 1);
  int n = gpool_emu_param<int>(l, 2);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n)) x[i] = value + static_cast<int>(i);
  });
  return 0;
}

// alwaysFails(int*): stands for a kernel that faults on the GPU.
int AlwaysFails(const gpool_emu_launch* l) { return Fail(l, "illegal address (emulated fault)"); }

// A kernel that does nothing: the benchmark's launch-rate probe, noop(int).
int Noop(const gpool_emu_launch*) { return 0; }

// spin(long long cycles, unsigned long long* done), share_loop's load: busy-waits the kernel's
// time once for the whole grid, at the emulated device's clock (clock_rate 1,000,000 kHz, so
// 1,000 cycles a microsecond), then counts the kernel as the GPU's block 0 does.
int Spin(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8})) return Fail(l, "spin: unexpected parameter layout");
  auto cycles = gpool_emu_param<long long>(l, 0);
  auto done = gpool_emu_param<unsigned long long*>(l, 1);
  auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(cycles);
  while (std::chrono::steady_clock::now() < until) {
  }
  ++*done;
  return 0;
}

// reverseShared(float* x, int n): reverses through "shared memory" of the launch's dynamic size,
// which must hold the n floats (on a GPU the kernel would read past its shared memory).
int ReverseShared(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 4})) return Fail(l, "reverseShared: unexpected parameter layout");
  auto x = gpool_emu_param<float*>(l, 0);
  int n = gpool_emu_param<int>(l, 1);
  if (n < 0 || uint64_t(n) * sizeof(float) > l->shared_mem) {
    return Fail(l, "reverseShared: n floats do not fit the dynamic shared memory");
  }
  std::vector<float> s(x, x + n);
  for (int i = 0; i < n; ++i) x[i] = s[n - 1 - i];
  return 0;
}

// addOffset(int* x, int delta, int n) (api_coverage): x[i] += delta over the whole grid, so a
// launch with a wrong grid leaves elements unchanged.
int AddOffset(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 4, 4})) return Fail(l, "addOffset: unexpected parameter layout");
  auto x = gpool_emu_param<int*>(l, 0);
  int delta = gpool_emu_param<int>(l, 1);
  int n = gpool_emu_param<int>(l, 2);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n)) x[i] += delta;
  });
  return 0;
}

// bumpManaged(int* out, int n) (api_coverage) with __managed__ int gManaged, which the emulated
// server holds as a plain device variable of the module: gManaged += n; *out = gManaged.
int BumpManaged(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 4})) return Fail(l, "bumpManaged: unexpected parameter layout");
  auto* managed = static_cast<int*>(l->symbol(l->ctx, "gManaged"));
  if (!managed) return Fail(l, "bumpManaged: symbol gManaged not registered");
  auto out = gpool_emu_param<int*>(l, 0);
  *managed += gpool_emu_param<int>(l, 1);
  *out = *managed;
  return 0;
}

// addInto(int* dst, const int* src, int n) (runtime_calls)
int AddInto(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 4})) return Fail(l, "addInto: unexpected parameter layout");
  auto dst = gpool_emu_param<int*>(l, 0);
  auto src = gpool_emu_param<const int*>(l, 1);
  int n = gpool_emu_param<int>(l, 2);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n)) dst[i] += src[i];
  });
  return 0;
}

// coopFlip(int* data, int* out, int n) (runtime_calls): doubles data, grid-wide sync, then
// out[i] = data[n-1-i]. The grid sync is the phase boundary: the whole first loop, then the second.
int CoopFlip(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 4})) return Fail(l, "coopFlip: unexpected parameter layout");
  auto data = gpool_emu_param<int*>(l, 0);
  auto out = gpool_emu_param<int*>(l, 1);
  int n = gpool_emu_param<int>(l, 2);
  for (int i = 0; i < n; ++i) data[i] *= 2;
  for (int i = 0; i < n; ++i) out[i] = data[n - 1 - i];
  return 0;
}

// mlp_train.cu's kernels (column-major matrices, as there).
// gemmNaive(int ta, int tb, int m, int n, int k, const float* a, int lda, const float* b,
// int ldb, float* c, int ldc): C = op(A) op(B) over the elements the 2-D grid covers.
int GemmNaive(const gpool_emu_launch* l) {
  if (!Sizes(l, {4, 4, 4, 4, 4, 8, 4, 8, 4, 8, 4})) {
    return Fail(l, "gemmNaive: unexpected parameter layout");
  }
  int ta = gpool_emu_param<int>(l, 0), tb = gpool_emu_param<int>(l, 1);
  int m = gpool_emu_param<int>(l, 2), n = gpool_emu_param<int>(l, 3);
  int k = gpool_emu_param<int>(l, 4);
  auto a = gpool_emu_param<const float*>(l, 5);
  int lda = gpool_emu_param<int>(l, 6);
  auto b = gpool_emu_param<const float*>(l, 7);
  int ldb = gpool_emu_param<int>(l, 8);
  auto c = gpool_emu_param<float*>(l, 9);
  int ldc = gpool_emu_param<int>(l, 10);
  uint64_t rows = std::min<uint64_t>(uint64_t(m), uint64_t(l->grid.x) * l->block.x);
  uint64_t cols = std::min<uint64_t>(uint64_t(n), uint64_t(l->grid.y) * l->block.y);
  for (uint64_t j = 0; j < cols; ++j) {
    for (uint64_t i = 0; i < rows; ++i) {
      float acc = 0.f;
      for (int p = 0; p < k; ++p) {
        float x = ta ? a[p + i * lda] : a[i + uint64_t(p) * lda];
        float y = tb ? b[j + uint64_t(p) * ldb] : b[p + j * ldb];
        acc += x * y;
      }
      c[i + j * ldc] = acc;
    }
  }
  return 0;
}

// biasRelu(float* z, const float* bias, int rows, int cols)
int BiasRelu(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 4, 4})) return Fail(l, "biasRelu: unexpected parameter layout");
  auto z = gpool_emu_param<float*>(l, 0);
  auto bias = gpool_emu_param<const float*>(l, 1);
  int rows = gpool_emu_param<int>(l, 2), cols = gpool_emu_param<int>(l, 3);
  ForEachThread(l, [&](uint64_t i) {
    if (rows > 0 && i < uint64_t(rows) * uint64_t(cols)) {
      float v = z[i] + bias[i % uint64_t(rows)];
      z[i] = v > 0.f ? v : 0.f;
    }
  });
  return 0;
}

// reluBackward(float* grad, const float* act, int n)
int ReluBackward(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 4})) return Fail(l, "reluBackward: unexpected parameter layout");
  auto grad = gpool_emu_param<float*>(l, 0);
  auto act = gpool_emu_param<const float*>(l, 1);
  int n = gpool_emu_param<int>(l, 2);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n) && act[i] <= 0.f) grad[i] = 0.f;
  });
  return 0;
}

// rowSum(const float* g, float* out, int rows, int cols)
int RowSum(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 4, 4})) return Fail(l, "rowSum: unexpected parameter layout");
  auto g = gpool_emu_param<const float*>(l, 0);
  auto out = gpool_emu_param<float*>(l, 1);
  int rows = gpool_emu_param<int>(l, 2), cols = gpool_emu_param<int>(l, 3);
  ForEachThread(l, [&](uint64_t i) {
    if (i >= uint64_t(rows)) return;
    float s = 0.f;
    for (int j = 0; j < cols; ++j) s += g[i + uint64_t(j) * rows];
    out[i] = s;
  });
  return 0;
}

// softmaxXent(const float* logits, const float* bias, const int* labels, float* grad,
// float* loss, int classes, int cols, float scale)
int SoftmaxXent(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 8, 8, 8, 4, 4, 4})) {
    return Fail(l, "softmaxXent: unexpected parameter layout");
  }
  auto logits = gpool_emu_param<const float*>(l, 0);
  auto bias = gpool_emu_param<const float*>(l, 1);
  auto labels = gpool_emu_param<const int*>(l, 2);
  auto grad = gpool_emu_param<float*>(l, 3);
  auto loss = gpool_emu_param<float*>(l, 4);
  int classes = gpool_emu_param<int>(l, 5), cols = gpool_emu_param<int>(l, 6);
  float scale = gpool_emu_param<float>(l, 7);
  ForEachThread(l, [&](uint64_t j) {
    if (j >= uint64_t(cols)) return;
    const float* z = logits + j * classes;
    float mx = -INFINITY;
    for (int c = 0; c < classes; ++c) mx = std::fmax(mx, z[c] + bias[c]);
    float sum = 0.f;
    for (int c = 0; c < classes; ++c) sum += std::exp(z[c] + bias[c] - mx);
    int y = labels[j];
    loss[j] = std::log(sum) - (z[y] + bias[y] - mx);
    for (int c = 0; c < classes; ++c) {
      float p = std::exp(z[c] + bias[c] - mx) / sum;
      grad[j * classes + c] = (p - (c == y ? 1.f : 0.f)) * scale;
    }
  });
  return 0;
}

// sgdUpdate(float* w, const float* g, float lr, int n)
int SgdUpdate(const gpool_emu_launch* l) {
  if (!Sizes(l, {8, 8, 4, 4})) return Fail(l, "sgdUpdate: unexpected parameter layout");
  auto w = gpool_emu_param<float*>(l, 0);
  auto g = gpool_emu_param<const float*>(l, 1);
  float lr = gpool_emu_param<float>(l, 2);
  int n = gpool_emu_param<int>(l, 3);
  ForEachThread(l, [&](uint64_t i) {
    if (i < uint64_t(n)) w[i] -= lr * g[i];
  });
  return 0;
}

const gpool_emu_kernel kKernels[] = {
    {"_Z9vectorAddPKfS0_Pfi", VectorAdd},
    {"_Z11applyParams6Params4WidecPf", ApplyParams},
    {"_Z5scalePffi", Scale},
    {"_Z10polynomialPKfPfi", Polynomial},
    {"_Z10setCounteri", SetCounter},
    {"_Z10addCounterPfi", AddCounter},
    {"_Z11takeCounterPii", TakeCounter},
    {"_Z4fillPiii", FillKernel},
    {"_Z10reloadBumpPii", ReloadBump},
    {"_Z11alwaysFailsPi", AlwaysFails},
    {"_Z4noopi", Noop},
    {"_Z4spinxPy", Spin},
    {"_Z13reverseSharedPfi", ReverseShared},
    {"_Z9addOffsetPiii", AddOffset},
    {"_Z11bumpManagedPii", BumpManaged},
    {"_Z7addIntoPiPKii", AddInto},
    {"_Z8coopFlipPiS_i", CoopFlip},
    {"_Z9gemmNaiveiiiiiPKfiS0_iPfi", GemmNaive},
    {"_Z8biasReluPfPKfii", BiasRelu},
    {"_Z12reluBackwardPfPKfi", ReluBackward},
    {"_Z6rowSumPKfPfii", RowSum},
    {"_Z11softmaxXentPKfS0_PKiPfS3_iif", SoftmaxXent},
    {"_Z9sgdUpdatePfPKffi", SgdUpdate},
};

}  // namespace

extern "C" const gpool_emu_kernel* gpool_emulated_kernels(size_t* count) {
  *count = sizeof(kKernels) / sizeof(kKernels[0]);
  return kKernels;
}
