// What an expandable caching allocator (PyTorch's expandable segments) does with the driver's
// virtual memory management, as a driver-API program (nvcc -cudart none, -lcuda): reserve 1 GiB of
// address space, create two chunks of the allocation granularity and map them back to back, give
// the device access, copy in, run a kernel over both chunks as one buffer, copy out and check;
// then move the second chunk to another offset (its bytes go with it), map the first one twice and
// see the two mappings alias, and release everything. Prints "PASS vmm_alloc".
//
//   vmm_alloc MODULE_FILE             the walk (MODULE_FILE: driver_kernels as cubin or fatbin)
//   vmm_alloc MODULE_FILE unmapped    also copies from reserved space with nothing mapped, which
//                                     must fail (and the program go on)
//   vmm_alloc MODULE_FILE unmapped kernel
//                                     and then launches a kernel on it, which must fail with
//                                     CUDA_ERROR_ILLEGAL_ADDRESS; the program ends there (on a GPU
//                                     that error is sticky: the context is unusable after it)
//   vmm_alloc MODULE_FILE limit N     the session's memory limit fits N chunks: chunk N+1 must be
//                                     refused with CUDA_ERROR_OUT_OF_MEMORY, and fit once one is
//                                     released
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "driver_check.h"


namespace {

CUmemAllocationProp DeviceProp(CUdevice dev) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

void GiveAccess(CUdeviceptr p, size_t n, CUdevice dev) {
  CUmemAccessDesc a;
  std::memset(&a, 0, sizeof a);
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = dev;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(p, n, &a, 1));
}

int Limit(CUdevice dev, size_t gran, int fits) {
  CUmemAllocationProp prop = DeviceProp(dev);
  std::vector<CUmemGenericAllocationHandle> hs(fits);
  for (auto& h : hs) CU(cuMemCreate(&h, gran, &prop, 0));
  CUmemGenericAllocationHandle over;
  CUresult r = cuMemCreate(&over, gran, &prop, 0);
  EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY);
  std::printf("chunk %d of %zu bytes refused: out of memory\n", fits + 1, gran);
  CU(cuMemRelease(hs.back()));
  CU(cuMemCreate(&hs.back(), gran, &prop, 0));  // fits again
  for (auto h : hs) CU(cuMemRelease(h));
  std::printf("PASS vmm_alloc limit\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: vmm_alloc MODULE_FILE [unmapped | limit N]\n");
    return 2;
  }
  const bool unmapped = argc > 2 && std::strcmp(argv[2], "unmapped") == 0;
  const bool unmapped_kernel = unmapped && argc > 3 && std::strcmp(argv[3], "kernel") == 0;
  const bool limit = argc > 3 && std::strcmp(argv[2], "limit") == 0;
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  int vmm = 0;
  CU(cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
  EXPECT(vmm == 1);
  CUmemAllocationProp prop = DeviceProp(dev);
  size_t gran = 0, recommended = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CU(cuMemGetAllocationGranularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT(gran > 0 && recommended % gran == 0);
  std::printf("granularity %zu (recommended %zu)\n", gran, recommended);
  if (limit) return Limit(dev, gran, std::atoi(argv[3]));

  const size_t reserve = size_t{1} << 30;
  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, reserve, 0, 0, 0));
  EXPECT(va % gran == 0);
  // The second chunk as PyTorch's expandable segments ask for theirs: exportable as a POSIX file
  // descriptor (a request; nothing here exports it).
  CUmemGenericAllocationHandle h[2];
  CU(cuMemCreate(&h[0], gran, &prop, 0));
  CUmemAllocationProp posix = prop;
  posix.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CU(cuMemCreate(&h[1], gran, &posix, 0));
  CU(cuMemMap(va, gran, 0, h[0], 0));
  CU(cuMemMap(va + gran, gran, 0, h[1], 0));
  GiveAccess(va, 2 * gran, dev);
  CUmemLocation here;
  here.type = CU_MEM_LOCATION_TYPE_DEVICE;
  here.id = dev;
  unsigned long long access = 0;
  CU(cuMemGetAccess(&access, &here, va + gran + 4096));
  EXPECT(access == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  CUmemAllocationProp got;
  CU(cuMemGetAllocationPropertiesFromHandle(&got, h[1]));
  EXPECT(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.id == dev);
  EXPECT(got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);

  // Both chunks as one buffer: copy in, scale by 2 in a kernel, copy out.
  int n = static_cast<int>(2 * gran / sizeof(float));
  std::vector<float> host(n), back(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 100000) + 0.5f;
  CU(cuMemcpyHtoD(va, host.data(), 2 * gran));
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT(!image.empty());
  CUmodule mod;
  CU(cuModuleLoadData(&mod, image.data()));
  CUfunction scale;
  CU(cuModuleGetFunction(&scale, mod, "_Z5scalePffi"));
  float f = 2.0f;
  void* params[] = {&va, &f, &n};
  CU(cuLaunchKernel(scale, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, params, nullptr));
  CU(cuCtxSynchronize());
  CU(cuMemcpyDtoH(back.data(), va, 2 * gran));
  for (int i = 0; i < n; ++i) EXPECT(back[i] == 2.0f * host[i]);
  // A memset and a device-to-device copy across the seam.
  CU(cuMemsetD32(va + gran - 8, 0x3f800000u, 4));  // 1.0f x 4, two on each side
  CU(cuMemcpyDtoD(va + 64, va + gran - 8, 16));
  float seam[4];
  CU(cuMemcpyDtoH(seam, va + 64, sizeof seam));
  for (float x : seam) EXPECT(x == 1.0f);
  std::printf("kernel over %d floats in two mapped chunks: ok\n", n);

  // The allocator shrinks and grows again: chunk 1 moves to offset 8 x gran, its bytes with it.
  CU(cuMemUnmap(va + gran, gran));
  if (unmapped) {
    std::vector<char> tmp(64);
    CUresult r = cuMemcpyDtoH(tmp.data(), va + gran, tmp.size());
    EXPECT(r != CUDA_SUCCESS);
    const char* name = "?";
    cuGetErrorName(r, &name);
    std::printf("copy from unmapped reserved space refused: %s\n", name);
    if (unmapped_kernel) {
      CUdeviceptr hole = va + gran;
      int m = 16;
      void* hp[] = {&hole, &f, &m};
      CU(cuLaunchKernel(scale, 1, 1, 1, 16, 1, 1, 0, nullptr, hp, nullptr));
      r = cuCtxSynchronize();
      cuGetErrorName(r, &name);
      EXPECT(r == CUDA_ERROR_ILLEGAL_ADDRESS);
      std::printf("kernel on unmapped reserved space refused: %s\n", name);
      return 0;
    }
  }
  CU(cuMemMap(va + 8 * gran, gran, 0, h[1], 0));
  GiveAccess(va + 8 * gran, gran, dev);
  std::vector<float> moved(n / 2);
  CU(cuMemcpyDtoH(moved.data(), va + 8 * gran, gran));
  // (its first two floats are the seam's memset)
  for (int i = 0; i < n / 2; ++i) EXPECT(moved[i] == (i < 2 ? 1.0f : 2.0f * host[n / 2 + i]));
  // Chunk 0 mapped a second time aliases the first mapping.
  CU(cuMemMap(va + 16 * gran, gran, 0, h[0], 0));
  GiveAccess(va + 16 * gran, gran, dev);
  const unsigned pattern = 0xabcd1234u;
  CU(cuMemsetD32(va + 16 * gran + 4096, pattern, 16));
  unsigned seen[16];
  CU(cuMemcpyDtoH(seen, va + 4096, sizeof seen));
  for (unsigned x : seen) EXPECT(x == pattern);
  CUmemGenericAllocationHandle again = 0;
  CU(cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va + 16 * gran + 100)));
  EXPECT(again == h[0]);
  CU(cuMemRelease(again));
  std::printf("remap and aliasing: ok\n");

  CU(cuModuleUnload(mod));
  CU(cuMemUnmap(va, gran));
  CU(cuMemUnmap(va + 8 * gran, gran));
  CU(cuMemUnmap(va + 16 * gran, gran));
  for (auto x : h) CU(cuMemRelease(x));
  CU(cuMemAddressFree(va, reserve));
  CU(cuDevicePrimaryCtxRelease(dev));
  std::printf("PASS vmm_alloc\n");
  return 0;
}
