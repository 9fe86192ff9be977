// The driver-layer contender of `remote_bench --interleaved --clients=DIR` (bench/layer_client.h):
// a program that calls CUDA's driver API directly (built with nvcc -cudart none, linked with
// -lcuda against the toolkit's link stub) and that `gpool run` gives gpool's libcuda.so.1
// stand-in. It loads MODULE (a fatbin with noop(int), bench/layer_kernels.cu) and then serves
// commands, one per line on stdin, each answered with "gpool-bench ok" on stdout once done:
//
//   sync N            N cuCtxSynchronize calls with nothing outstanding (each one round trip)
//   launch N          N cuLaunchKernel(noop) on the default stream, then one cuCtxSynchronize
//   h2d SIZE COUNT [REPEAT]
//                     REPEAT times (default 1): COUNT cuMemcpyHtoD of SIZE bytes from successive
//                     slices of a page-locked buffer into successive slices of device memory, then
//                     cuStreamSynchronize(0)
//   d2h SIZE COUNT [REPEAT]
//                     the other way: one cuMemcpyDtoH when COUNT is 1, else COUNT
//                     cuMemcpyDtoHAsync into page-locked memory and one cuStreamSynchronize(0)
//                     (the shape of a program streaming results back, as remote_bench's session
//                     contender and NVIDIA's runtime for cudaMemcpyAsync do it)
//
// Buffers are sized by the largest SIZE * COUNT asked so far; device memory is written once when
// allocated (untimed by the caller's step: the first step of a size is remote_bench's warm-up),
// so device-to-host copies read written pages. Any failure names the call and exits 1, which the
// bench sees as end of file.
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

void Check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* name = "?";
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "driver_client: %s failed: %s (%d)\n", what, name, static_cast<int>(r));
  std::exit(1);
}

struct Buffers {
  CUdeviceptr dev = 0;
  char* host = nullptr;
  size_t bytes = 0;

  void Reserve(size_t n) {
    if (n <= bytes) return;
    if (dev) Check(cuMemFree(dev), "cuMemFree");
    if (host) Check(cuMemFreeHost(host), "cuMemFreeHost");
    void* h = nullptr;
    Check(cuMemAllocHost(&h, n), "cuMemAllocHost");
    host = static_cast<char*>(h);
    Check(cuMemAlloc(&dev, n), "cuMemAlloc");
    std::memset(host, 3, n);
    Check(cuMemcpyHtoD(dev, host, n), "cuMemcpyHtoD (fill)");
    Check(cuCtxSynchronize(), "cuCtxSynchronize (fill)");
    bytes = n;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr,
                 "usage: driver_client MODULE_FATBIN (commands on stdin; see the source)\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (image.empty()) {
    std::fprintf(stderr, "driver_client: cannot read module %s\n", argv[1]);
    return 1;
  }
  Check(cuInit(0), "cuInit");
  CUdevice dev;
  Check(cuDeviceGet(&dev, 0), "cuDeviceGet");
  CUcontext ctx;
  Check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  Check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUmodule mod;
  Check(cuModuleLoadData(&mod, image.data()), "cuModuleLoadData");
  CUfunction noop;
  Check(cuModuleGetFunction(&noop, mod, "_Z4noopi"), "cuModuleGetFunction(noop)");
  Buffers buf;
  char line[256];
  while (std::fgets(line, sizeof line, stdin)) {
    char cmd[16] = {0};
    unsigned long long a = 0, b = 0, repeat = 1;
    int got = std::sscanf(line, "%15s %llu %llu %llu", cmd, &a, &b, &repeat);
    const std::string c = cmd;
    if (got >= 2 && c == "sync") {
      for (unsigned long long i = 0; i < a; ++i) Check(cuCtxSynchronize(), "cuCtxSynchronize");
    } else if (got >= 2 && c == "launch") {
      for (unsigned long long i = 0; i < a; ++i) {
        int arg = static_cast<int>(i);
        void* params[] = {&arg};
        Check(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, nullptr, params, nullptr),
              "cuLaunchKernel");
      }
      Check(cuCtxSynchronize(), "cuCtxSynchronize");
    } else if (got >= 3 && (c == "h2d" || c == "d2h") && a > 0 && b > 0) {
      buf.Reserve(a * b);
      for (unsigned long long r = 0; r < repeat; ++r) {
        if (c == "h2d") {
          for (unsigned long long i = 0; i < b; ++i) {
            Check(cuMemcpyHtoD(buf.dev + i * a, buf.host + i * a, a), "cuMemcpyHtoD");
          }
        } else if (b == 1) {
          buf.host[0] = buf.host[a * b - 1] = 0;  // so that the check below sees the copy land
          Check(cuMemcpyDtoH(buf.host, buf.dev, a), "cuMemcpyDtoH");
        } else {
          buf.host[0] = buf.host[a * b - 1] = 0;
          for (unsigned long long i = 0; i < b; ++i) {
            Check(cuMemcpyDtoHAsync(buf.host + i * a, buf.dev + i * a, a, nullptr),
                  "cuMemcpyDtoHAsync");
          }
        }
        Check(cuStreamSynchronize(nullptr), "cuStreamSynchronize");
        if (c == "d2h" && (buf.host[0] != 3 || buf.host[a * b - 1] != 3)) {
          std::fprintf(stderr, "driver_client: d2h %llu x %llu: the data did not arrive\n", a, b);
          return 1;
        }
      }
    } else {
      std::fprintf(stderr, "driver_client: unknown command: %s", line);
      return 2;
    }
    std::printf("gpool-bench ok\n");
    std::fflush(stdout);
  }
  return 0;
}
