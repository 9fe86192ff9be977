// The kernel the driver-layer contenders launch (bench/driver_client.cc loads this as a fatbin;
// bench/layer_client.cu compiles it in): noop(int), whose CPU implementation on the emulated
// backend does nothing (bench/noop_kernels.cc, and examples/cuda/emulated_kernels.cc by the same
// mangled name _Z4noopi).
__global__ void noop(int) {}
