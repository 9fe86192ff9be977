// Structs by value: odd sizes, alignment padding and a double must arrive byte-exact.
#include "common.h"

struct Params {
  char tag;        // offset 0, then 7 bytes of padding
  double scale;    // offset 8
  int dims[3];     // offset 16
  short small;     // offset 28
};
struct alignas(16) Wide {
  float v[5];
};

__global__ void applyParams(Params p, Wide w, char c, float* out) {
  out[0] = p.tag;
  out[1] = static_cast<float>(p.scale);
  out[2] = p.dims[0] + p.dims[1] * 10 + p.dims[2] * 100;
  out[3] = p.small;
  out[4] = w.v[0] + w.v[4];
  out[5] = c;
}

int main() {
  float* d;
  CHECK(cudaMalloc(&d, 6 * sizeof(float)));
  Params p{'x', 2.5, {1, 2, 3}, -7};
  Wide w{{1.5f, 0, 0, 0, 4.0f}};
  applyParams<<<1, 1>>>(p, w, 'q', d);
  CHECK(cudaGetLastError());
  float h[6];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  EXPECT(h[0] == 'x');
  EXPECT(h[1] == 2.5f);
  EXPECT(h[2] == 321.0f);
  EXPECT(h[3] == -7.0f);
  EXPECT(h[4] == 5.5f);
  EXPECT(h[5] == 'q');
  CHECK(cudaFree(d));
  std::printf("PASS struct_param\n");
  return 0;
}
