// Fixture source for the fatbin parser tests; see README.md (make_fixtures.sh rebuilds).
struct Params { double a; float b[3]; int c; };  // 24 bytes, align 8
extern "C" __global__ void plain(float* out, const float* in, int n, Params p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * p.b[0] + (float)p.a + p.c;
}
__global__ void scale(float* out, const float* in, int n, Params p) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * p.b[1];
}
template <typename T> __global__ void fill(T* out, T v, char tag) { out[threadIdx.x] = v + tag; }
template __global__ void fill<double>(double*, double, char);
