// Module lifecycle: a library of kernels (reload_kernels.cu) loaded and unloaded repeatedly,
// and cudaDeviceReset.
//
//   module_reload LIBRARY ROUNDS
// Each round dlopen()s LIBRARY, launches its kernel and reads and writes its __device__ variable
// (which starts at 0 in every fresh load), then dlclose()s it, and checks that the library was
// really unloaded (its module unregistered) and that device memory came back: the module's 8 MiB
// variable is freed on the server, so free memory after each round equals free memory before the
// first (within 4 MiB: a real GPU's context may differ a little). Then the reset: with the
// library loaded once more, it sets the variable, allocates, creates a stream and an event, and
// calls cudaDeviceReset: the variable reads its initial value again, the allocation, stream and
// event are invalid, free memory is back, and the kernel runs again. Prints PASS module_reload.
// (Against a server with a session memory limit cudaMemGetInfo reports the limit's view, which
// does not count module variables: run it on a server without one.)
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

struct Library {
  void* handle = nullptr;
  cudaError_t (*bump)(int*, int) = nullptr;
  cudaError_t (*read)(int*) = nullptr;
  cudaError_t (*write)(int) = nullptr;
};

Library Open(const char* path) {
  Library l;
  l.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!l.handle) {
    std::fprintf(stderr, "dlopen(%s): %s\n", path, dlerror());
    std::exit(1);
  }
  l.bump = reinterpret_cast<cudaError_t (*)(int*, int)>(dlsym(l.handle, "reload_bump"));
  l.read = reinterpret_cast<cudaError_t (*)(int*)>(dlsym(l.handle, "reload_read"));
  l.write = reinterpret_cast<cudaError_t (*)(int)>(dlsym(l.handle, "reload_write"));
  EXPECT(l.bump && l.read && l.write);
  return l;
}

// Closes the library and checks that it is gone (a library kept loaded would never unregister
// its module, and the rounds would test nothing).
void Close(Library& l, const char* path) {
  EXPECT(dlclose(l.handle) == 0);
  void* still = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (still) {
    std::fprintf(stderr, "%s is still loaded after dlclose: its module was not unregistered\n", path);
    std::exit(1);
  }
}

size_t FreeMemory() {
  size_t free = 0, total = 0;
  CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

// The kernel adds `add` to the variable, which must read `before` first.
void Bump(const Library& l, int* out, int before, int add) {
  CHECK(l.bump(out, add));
  int got = 0;
  CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
  EXPECT(got == before + add);
  int read = 0;
  CHECK(l.read(&read));
  EXPECT(read == before + add);
}

void Rounds(const char* path, int rounds, int* out, size_t free_at_start) {
  const void* first_at = nullptr;
  int same = 0;
  for (int r = 1; r <= rounds; ++r) {
    Library l = Open(path);
    const void* at = reinterpret_cast<const void*>(l.bump);
    if (r == 1) first_at = at;
    same += at == first_at;
    Bump(l, out, 0, r);  // a fresh module: the variable starts at 0
    CHECK(l.write(1000 + r));
    Bump(l, out, 1000 + r, 1);
    Close(l, path);
    size_t free = FreeMemory();
    if (free + 4 * kMiB < free_at_start) {
      std::fprintf(stderr, "round %d: %zu MiB of device memory not freed after dlclose\n", r,
                   (free_at_start - free) / kMiB);
      std::exit(1);
    }
  }
  std::printf("reload: %d rounds, %d at the first round's addresses, no device memory kept\n",
              rounds, same);
}

void Reset(const char* path) {
  Library l = Open(path);
  int* out = nullptr;
  void* block = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  Bump(l, out, 0, 7);
  const size_t free_loaded = FreeMemory();  // with the module loaded (its variables)
  CHECK(cudaMalloc(&block, 16 * kMiB));
  CHECK(l.write(41));
  cudaStream_t stream;
  cudaEvent_t event;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaEventCreate(&event));
  CHECK(cudaEventRecord(event, stream));
  CHECK(cudaDeviceReset());
  int value = -1;
  CHECK(l.read(&value));
  EXPECT(value == 0);  // the module was loaded again: its initial value
  cudaError_t e = cudaStreamSynchronize(stream);
  EXPECT(e != cudaSuccess);
  cudaGetLastError();
  e = cudaEventQuery(event);
  EXPECT(e != cudaSuccess && e != cudaErrorNotReady);
  cudaGetLastError();
  e = cudaFree(block);
  EXPECT(e != cudaSuccess);
  cudaGetLastError();
  EXPECT(FreeMemory() + 4 * kMiB >= free_loaded);  // the 16 MiB block is free again
  CHECK(cudaMalloc(&out, sizeof(int)));
  Bump(l, out, 0, 5);  // the device works after the reset
  CHECK(cudaFree(out));
  Close(l, path);
  std::printf("reset: variable back to 0, stream, event and allocation invalid, memory back\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::atoi(argv[2]) < 1) {
    std::fprintf(stderr, "usage: module_reload LIBRARY ROUNDS (ROUNDS >= 1)\n");
    return 2;
  }
  const char* path = argv[1];
  size_t free_at_start = FreeMemory();  // connects: later registrations reach the server at once
  int* out = nullptr;
  CHECK(cudaMalloc(&out, sizeof(int)));
  Rounds(path, std::atoi(argv[2]), out, free_at_start);
  CHECK(cudaFree(out));
  Reset(path);
  std::printf("PASS module_reload\n");
  return 0;
}
