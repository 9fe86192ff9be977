// Kernels for driver_api.cc, which loads them as a module (built with nvcc -cubin, -fatbin and
// -ptx). Their names and parameters are those of the example kernels' CPU implementations
// (emulated_kernels.cc), so the emulated backend runs them.
__constant__ float kCoeffs[4];
__device__ int gCounter;

__global__ void vectorAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void scale(float* x, float f, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}

// *out = gCounter, then gCounter += delta.
__global__ void takeCounter(int* out, int delta) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    *out = gCounter;
    gCounter += delta;
  }
}
