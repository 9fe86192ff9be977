// Runtime entry points no other sample calls, each with its result checked:
//   cudaLaunchKernel and cudaLaunchKernel_ptsz (the runtime calls, not <<<>>>), cudaMemsetAsync,
//   cudaPeekAtLastError (does not clear the error, unlike cudaGetLastError),
//   cudaDeviceGetStreamPriorityRange, cudaStreamCreateWithPriority (+ GetPriority/GetFlags),
//   cudaOccupancyMaxActiveBlocksPerMultiprocessor (the non-flags form), cudaDeviceReset (its
//   memory freed, cudaMemGetInfo back to the start, old pointers invalid, the device usable
//   again), and a __managed__ variable (__cudaRegisterManagedVar; host access goes through
//   __cudaInitModule).
//
//   api_coverage [api|managed-host]
// api (default): everything above but host access to the managed variable; the managed variable
//   is used by a kernel on device 0 only, then (with 2+ devices) a launch of that module's kernel
//   on device 1 is tried and its outcome printed (a real GPU runs it; gpool refuses it, since the
//   variable lives on one GPU of one server). Prints PASS api_coverage.
// managed-host: copies to and from the managed variable (cudaMemcpyToSymbol/FromSymbol), prints
//   which libraries hold the SIGSEGV/SIGBUS handlers, then reads the variable on the
//   host, after "READ": a real GPU prints its value and PASS; gpool stops the program there, with
//   a FATAL line naming the variable, and the process dies of SIGSEGV.
#include <cstring>
#include <string>
#include "common.h"

// The per-thread default stream variant, which a program gets from cudaLaunchKernel when built
// with --default-stream per-thread; declared here so this sample calls both forms.
extern "C" cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                             size_t shmem, cudaStream_t stream);

__managed__ int gManaged;

__global__ void addOffset(int* x, int delta, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += delta;
}

// One thread: adds n to the managed variable and reports its new value.
__global__ void bumpManaged(int* out, int n) {
  gManaged += n;
  *out = gManaged;
}

namespace {

constexpr size_t kMiB = size_t{1} << 20;

void PeekDoesNotClear() {
  CHECK(cudaGetLastError());
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  EXPECT(cudaSetDevice(count + 7) == cudaErrorInvalidDevice);
  EXPECT(cudaPeekAtLastError() == cudaErrorInvalidDevice);
  EXPECT(cudaPeekAtLastError() == cudaErrorInvalidDevice);  // still there: peek does not clear
  EXPECT(cudaGetLastError() == cudaErrorInvalidDevice);     // get returns it and clears it
  EXPECT(cudaGetLastError() == cudaSuccess);
  EXPECT(cudaPeekAtLastError() == cudaSuccess);
  std::printf("peek: error kept until cudaGetLastError\n");
}

// A stream of the greatest priority, memsets on it and both runtime launch calls.
void PriorityStreamMemsetAndLaunch() {
  int least = 1, greatest = 1;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT(greatest <= least);
  cudaStream_t s, low;
  CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  CHECK(cudaStreamCreateWithPriority(&low, cudaStreamDefault, least + 100));  // clamped
  int p = 1;
  unsigned flags = 7;
  CHECK(cudaStreamGetPriority(s, &p));
  EXPECT(p == greatest);
  CHECK(cudaStreamGetFlags(s, &flags));
  EXPECT(flags == cudaStreamNonBlocking);
  CHECK(cudaStreamGetPriority(low, &p));
  EXPECT(p == least);
  std::printf("priorities: least %d greatest %d\n", least, greatest);

  const int n = 5000;  // not a multiple of the block: the grid's last block is partial
  int* d;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMemsetAsync(d, 0x01, n * sizeof(int), s));
  CHECK(cudaMemsetAsync(d + n / 2, 0x02, (n / 4) * sizeof(int), s));  // a middle quarter
  int delta = 1, count = n;
  void* args_d[] = {&d, &delta, &count};
  dim3 block(128), grid((n + 127) / 128);
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(addOffset), grid, block, args_d, 0, s));
  int delta2 = 2;
  void* args_d2[] = {&d, &delta2, &count};
  CHECK(cudaLaunchKernel_ptsz(reinterpret_cast<const void*>(addOffset), grid, block, args_d2, 0, s));
  CHECK(cudaStreamSynchronize(s));
  static int h[n];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    int want = (i >= n / 2 && i < n / 2 + n / 4 ? 0x02020202 : 0x01010101) + 3;
    if (h[i] != want) {
      std::fprintf(stderr, "element %d: %#x, want %#x\n", i, h[i], want);
      std::exit(1);
    }
  }
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(low));
  CHECK(cudaStreamDestroy(s));
  std::printf("memsetAsync + cudaLaunchKernel + cudaLaunchKernel_ptsz: %d elements right\n", n);
}

void Occupancy() {
  int blocks = -1, with_flags = -2;
  // The C function, not cuda_runtime.h's template of the same name (which calls WithFlags).
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, reinterpret_cast<const void*>(addOffset), 128, 0));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&with_flags, addOffset, 128, 0,
                                                                cudaOccupancyDefault));
  EXPECT(blocks > 0 && blocks <= 2048 / 128);
  EXPECT(blocks == with_flags);
  std::printf("occupancy: %d blocks of 128 threads per multiprocessor\n", blocks);
}

// The managed variable on the device: two launches on device 0 accumulate in it. With a second
// device, a launch of the same module there: a real GPU runs it (one managed variable for all);
// gpool refuses it (the variable lives on device 0's server only). Both outcomes are printed.
void ManagedOnDevice() {
  CHECK(cudaSetDevice(0));
  int* out;
  CHECK(cudaMalloc(&out, sizeof(int)));
  int got = 0;
  bumpManaged<<<1, 1>>>(out, 3);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
  EXPECT(got == 3);
  bumpManaged<<<1, 1>>>(out, 4);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
  EXPECT(got == 7);
  CHECK(cudaFree(out));
  std::printf("managed: device 0 kernels see one variable (7)\n");
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  if (count < 2) return;
  CHECK(cudaSetDevice(1));
  int* out1;
  CHECK(cudaMalloc(&out1, sizeof(int)));
  bumpManaged<<<1, 1>>>(out1, 5);
  cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) {
    CHECK(cudaMemcpy(&got, out1, sizeof got, cudaMemcpyDeviceToHost));
    EXPECT(got == 12);  // the same variable, seen from device 1
  } else {
    EXPECT(e == cudaErrorNotSupported);
  }
  std::printf("managed: launch on device 1: %s\n", cudaGetErrorName(e));
  CHECK(cudaFree(out1));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaSetDevice(0));
}

// cudaDeviceReset frees every allocation of the device: free memory returns to where it was
// before them, the old pointers are invalid, and the device works again afterwards.
void Reset(size_t free_at_start) {
  void* blocks[4];
  for (void*& b : blocks) CHECK(cudaMalloc(&b, 16 * kMiB));
  size_t free_full = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_full, &total));
  EXPECT(free_full + 64 * kMiB <= free_at_start);
  CHECK(cudaDeviceReset());
  size_t free_after = 0;
  CHECK(cudaMemGetInfo(&free_after, &total));
  // A real GPU's context may come back a little different: 8 MiB of slack, well under the 64.
  EXPECT(free_after + 8 * kMiB >= free_at_start);
  cudaError_t e = cudaFree(blocks[0]);
  EXPECT(e != cudaSuccess);
  EXPECT(cudaGetLastError() == e);
  std::printf("reset: %zu MiB freed, %lld bytes short of the start; cudaFree(old pointer): %s\n",
              (free_after - free_full) / kMiB,
              static_cast<long long>(free_at_start) - static_cast<long long>(free_after),
              cudaGetErrorName(e));
  // The device is usable again, kernels included.
  int* d;
  const int n = 256;
  CHECK(cudaMalloc(&d, n * sizeof(int)));
  CHECK(cudaMemset(d, 0, n * sizeof(int)));
  int delta = 9, count = n;
  void* args[] = {&d, &delta, &count};
  CHECK(cudaLaunchKernel(reinterpret_cast<const void*>(addOffset), dim3(2), dim3(128), args, 0,
                         nullptr));
  int h[n];
  CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT(h[i] == 9);
  CHECK(cudaFree(d));
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "api";
  if (mode == "managed-host") {
    CHECK(cudaSetDevice(0));
    CHECK(cudaDeviceSynchronize());
    // Copies are the way to the variable from the host that works everywhere.
    const int put = 41;
    CHECK(cudaMemcpyToSymbol(gManaged, &put, sizeof put));
    int back = 0;
    CHECK(cudaMemcpyFromSymbol(&back, gManaged, sizeof back));
    EXPECT(back == 41);
    std::printf("managed: symbol copies see %d; fault handlers: %s\n", back,
                FaultHandlers().c_str());
    std::printf("READ\n");
    std::fflush(stdout);
    int v = gManaged;  // host access: through __cudaInitModule
    std::printf("managed: host reads %d\n", v);
    std::printf("PASS api_coverage managed-host\n");
    return 0;
  }
  if (mode != "api") {
    std::fprintf(stderr, "usage: api_coverage [api|managed-host]\n");
    return 2;
  }
  CHECK(cudaSetDevice(0));
  size_t free_at_start = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_at_start, &total));
  PeekDoesNotClear();
  PriorityStreamMemsetAndLaunch();
  Occupancy();
  ManagedOnDevice();
  Reset(free_at_start);
  std::printf("PASS api_coverage\n");
  return 0;
}
