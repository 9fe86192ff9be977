// A small shared library of kernels for module_reload.cu, which dlopen()s and dlclose()s it
// repeatedly (built with nvcc -shared -Xcompiler -fPIC -cudart shared: its module is registered
// when it is loaded and unregistered when it is closed). Its API is plain C, looked up with dlsym.
#include <cuda_runtime.h>

// Zero when the module is loaded: a fresh load (or a reload after cudaDeviceReset) starts over.
// (The emulated backend does not emulate static initialisers, so a non-zero one would differ.)
__device__ int gRound;
// 8 MiB of device memory per loaded copy of the module: a server that never frees unloaded
// modules shows it in cudaMemGetInfo after the first reload.
__device__ char gBallast[8 << 20];

// gRound += add; *out = gRound; and one byte of the ballast, so the variable is used.
__global__ void reloadBump(int* out, int add) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    gRound += add;
    gBallast[0] = static_cast<char>(gRound);
    *out = gRound;
  }
}

extern "C" {
// Launches reloadBump<<<1, 1>>>(out, add) on the default stream.
cudaError_t reload_bump(int* out, int add) {
  reloadBump<<<1, 1>>>(out, add);
  return cudaGetLastError();
}
cudaError_t reload_read(int* value) { return cudaMemcpyFromSymbol(value, gRound, sizeof(int)); }
cudaError_t reload_write(int value) { return cudaMemcpyToSymbol(gRound, &value, sizeof(int)); }
}
