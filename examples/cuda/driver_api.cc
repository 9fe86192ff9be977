// A CUDA driver API program (no runtime: built with nvcc -cudart none, linked with -lcuda against
// the toolkit's stub): devices, primary and created contexts, a module loaded from a file (cubin,
// fatbin or PTX of driver_kernels.cu), launches with kernelParams and with a parameter buffer,
// copies, memsets, a module variable, streams and events, pointer queries, memory pools and
// stream-ordered allocation, unified copies, and cuGetProcAddress. Prints
// "PASS driver_api" on success.
//
//   driver_api MODULE_FILE            the whole walk
//   driver_api MODULE_FILE stub       also calls an entry point gpool does not implement, directly
//                                     and through cuGetProcAddress, and prints what it returned
//   driver_api MODULE_FILE noglobals  skips the module variable (a PTX module: gpool's client
//                                     reads no variables from PTX, see docs/remoting/driver-api.md)
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

#include "driver_check.h"


int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: driver_api MODULE_FILE [stub]\n");
    return 2;
  }
  const bool stub = argc > 2 && std::strcmp(argv[2], "stub") == 0;
  const bool globals = !(argc > 2 && std::strcmp(argv[2], "noglobals") == 0);
  std::ifstream in(argv[1], std::ios::binary);
  std::vector<char> image((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT(!image.empty());
  image.push_back('\0');  // PTX is read as a C string; the binary forms carry their own length

  int version = 0;
  CU(cuDriverGetVersion(&version));
  EXPECT(version >= 12000);
  CUdevice dev0;
  EXPECT(cuDeviceGet(&dev0, 0) == CUDA_ERROR_NOT_INITIALIZED);  // before cuInit
  CU(cuInit(0));
  int count = 0;
  CU(cuDeviceGetCount(&count));
  EXPECT(count >= 1);
  CU(cuDeviceGet(&dev0, 0));
  EXPECT(cuDeviceGet(&dev0, count) == CUDA_ERROR_INVALID_DEVICE);
  char name[256];
  CU(cuDeviceGetName(name, sizeof name, dev0));
  size_t total = 0;
  CU(cuDeviceTotalMem(&total, dev0));
  EXPECT(total > 0);
  CUuuid uuid;
  CU(cuDeviceGetUuid(&uuid, dev0));
  int major = 0, threads = 0;
  CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev0));
  CU(cuDeviceGetAttribute(&threads, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev0));
  EXPECT(major >= 1 && threads >= 64);
  std::printf("device 0: %s, %zu MiB, compute %d, driver API %d\n", name, total >> 20, major,
              version);

  // No context yet: calls that need one say so.
  CUdeviceptr none;
  EXPECT(cuMemAlloc(&none, 16) == CUDA_ERROR_INVALID_CONTEXT);
  CUcontext primary, current;
  CU(cuDevicePrimaryCtxRetain(&primary, dev0));
  CU(cuCtxSetCurrent(primary));
  CU(cuCtxGetCurrent(&current));
  EXPECT(current == primary);
  CUdevice cdev = -1;
  CU(cuCtxGetDevice(&cdev));
  EXPECT(cdev == dev0);
  unsigned pflags = 0;
  int active = 0;
  CU(cuDevicePrimaryCtxGetState(dev0, &pflags, &active));
  EXPECT(active == 1);

  CUmoduleLoadingMode loading;
  CU(cuModuleGetLoadingMode(&loading));
  EXPECT(loading == CU_MODULE_EAGER_LOADING || loading == CU_MODULE_LAZY_LOADING);
  // A module loaded and unloaded without a lookup: with lazy loading it never reaches the
  // server (the test reads the server's module count and the stand-in's GPOOL_DRIVER_STATS).
  CUmodule unused;
  CU(cuModuleLoadData(&unused, image.data()));
  CU(cuModuleUnload(unused));
  CUmodule mod;
  CU(cuModuleLoadData(&mod, image.data()));
  CUfunction add, scale, take;
  CU(cuModuleGetFunction(&add, mod, "_Z9vectorAddPKfS0_Pfi"));
  CU(cuModuleGetFunction(&scale, mod, "_Z5scalePffi"));
  CU(cuModuleGetFunction(&take, mod, "_Z11takeCounterPii"));
  CUfunction missing;
  EXPECT(cuModuleGetFunction(&missing, mod, "noSuchKernel") == CUDA_ERROR_NOT_FOUND);

  // vectorAdd with kernelParams.
  const int n = 1000;
  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) a[i] = float(i), b[i] = float(2 * i);
  CUdeviceptr da, db, dc;
  CU(cuMemAlloc(&da, n * sizeof(float)));
  CU(cuMemAlloc(&db, n * sizeof(float)));
  CU(cuMemAlloc(&dc, n * sizeof(float)));
  CU(cuMemcpyHtoD(da, a.data(), n * sizeof(float)));
  CU(cuMemcpyHtoD(db, b.data(), n * sizeof(float)));

  // Pointer queries (libraries ask them about the buffers they are handed): an interior pointer
  // of an allocation belongs to it, two allocations have distinct buffer ids, a pointer CUDA does
  // not know is refused by cuPointerGetAttribute and reads 0 through cuPointerGetAttributes.
  unsigned memtype = 0;
  CU(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, db + 12));
  EXPECT(memtype == CU_MEMORYTYPE_DEVICE);
  int ordinal = -1;
  CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, db + 12));
  EXPECT(ordinal == 0);
  CUdeviceptr range_start = 0, base = 0;
  size_t range = 0, bytes = 0;
  CU(cuPointerGetAttribute(&range_start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, db + 12));
  CU(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, db + 12));
  EXPECT(range_start == db && range == n * sizeof(float));
  CU(cuMemGetAddressRange(&base, &bytes, db + 12));
  EXPECT(base == db && bytes == n * sizeof(float));
  unsigned long long id_a = 0, id_b = 0;
  CU(cuPointerGetAttribute(&id_a, CU_POINTER_ATTRIBUTE_BUFFER_ID, da));
  CU(cuPointerGetAttribute(&id_b, CU_POINTER_ATTRIBUTE_BUFFER_ID, db));
  EXPECT(id_a != 0 && id_b != 0 && id_a != id_b);
  int on_stack = 0;
  CUdeviceptr stack_ptr = reinterpret_cast<CUdeviceptr>(&on_stack);
  EXPECT(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, stack_ptr) ==
         CUDA_ERROR_INVALID_VALUE);
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID};
  memtype = 7;
  id_a = 7;
  void* values[] = {&memtype, &id_a};
  CU(cuPointerGetAttributes(2, attrs, values, stack_ptr));
  EXPECT(memtype == 0 && id_a == 0);
  void* host = nullptr;
  CU(cuMemAllocHost(&host, 64));
  CU(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                           reinterpret_cast<CUdeviceptr>(host)));
  EXPECT(memtype == CU_MEMORYTYPE_HOST);
  CU(cuMemFreeHost(host));
  char bus_id[32] = {};
  CU(cuDeviceGetPCIBusId(bus_id, sizeof bus_id, dev0));
  EXPECT(std::strlen(bus_id) == 12 && bus_id[4] == ':' && bus_id[7] == ':' && bus_id[10] == '.');
  // No stream captures here; the thread's capture mode is kept and exchanged.
  CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  CU(cuStreamIsCapturing(nullptr, &capturing));
  EXPECT(capturing == CU_STREAM_CAPTURE_STATUS_NONE);
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  CU(cuThreadExchangeStreamCaptureMode(&mode));
  CU(cuThreadExchangeStreamCaptureMode(&mode));
  EXPECT(mode == CU_STREAM_CAPTURE_MODE_RELAXED);

  int nn = n;
  void* args[] = {&da, &db, &dc, &nn};
  CU(cuLaunchKernel(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
  CU(cuCtxSynchronize());
  CU(cuMemcpyDtoH(c.data(), dc, n * sizeof(float)));
  for (int i = 0; i < n; ++i) EXPECT(c[i] == float(3 * i));

  // scale on a stream, its parameters as one buffer (CU_LAUNCH_PARAM_BUFFER_POINTER), timed
  // with events; the copies on the stream too.
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUevent start, stop;
  CU(cuEventCreate(&start, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&stop, CU_EVENT_DEFAULT));
  CU(cuEventRecord(start, s));
  CU(cuMemcpyHtoDAsync(dc, a.data(), n * sizeof(float), s));
  struct {
    CUdeviceptr x;
    float f;
    int n;
  } params{dc, 0.5f, n};
  size_t psize = sizeof params;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &params, CU_LAUNCH_PARAM_BUFFER_SIZE, &psize,
                   CU_LAUNCH_PARAM_END};
  CU(cuLaunchKernel(scale, (n + 127) / 128, 1, 1, 128, 1, 1, 0, s, nullptr, extra));
  CU(cuEventRecord(stop, s));
  CU(cuMemcpyDtoHAsync(c.data(), dc, n * sizeof(float), s));
  CU(cuStreamSynchronize(s));
  CU(cuEventSynchronize(stop));
  EXPECT(cuStreamQuery(s) == CUDA_SUCCESS);
  float ms = -1;
  CU(cuEventElapsedTime(&ms, start, stop));
  EXPECT(ms >= 0);
  for (int i = 0; i < n; ++i) EXPECT(c[i] == float(i) * 0.5f);

  // Stream capture and a graph through the older entry points a CUDA 10.0-12.0 runtime fetches
  // by version (cuStreamBeginCapture without a mode, cuStreamGetCaptureInfo with the id only,
  // cuGraphAddDependencies and cuGraphGetEdges without edge data, cuGraphInstantiate with an
  // error log): the capture holds the scale launch, a memset node (2.0f) is put before it, and
  // two launches leave 1.0f everywhere.
  {
    CUdriverProcAddressQueryResult q;
    void *begin, *info, *add_deps, *get_edges, *instantiate;
    CU(cuGetProcAddress("cuStreamBeginCapture", &begin, 10000, 0, &q));
    CU(cuGetProcAddress("cuStreamGetCaptureInfo", &info, 10010, 0, &q));
    CU(cuGetProcAddress("cuGraphAddDependencies", &add_deps, 12000, 0, &q));
    CU(cuGetProcAddress("cuGraphGetEdges", &get_edges, 12000, 0, &q));
    CU(cuGetProcAddress("cuGraphInstantiate", &instantiate, 10000, 0, &q));
    CU(reinterpret_cast<CUresult (*)(CUstream)>(begin)(s));
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t id = 0;
    CU(reinterpret_cast<CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*)>(info)(
        s, &st, &id));
    EXPECT(st == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0);
    CU(cuLaunchKernel(scale, (n + 127) / 128, 1, 1, 128, 1, 1, 0, s, nullptr, extra));
    CUgraph g;
    CU(cuStreamEndCapture(s, &g));
    CUgraphNode kern;
    size_t count = 1;
    CU(cuGraphGetNodes(g, &kern, &count));
    EXPECT(count == 1);
    CUcontext ctx;
    CU(cuCtxGetCurrent(&ctx));
    CUDA_MEMSET_NODE_PARAMS mp{};
    mp.dst = dc;
    mp.value = 0x40000000u;  // 2.0f
    mp.elementSize = 4;
    mp.width = n;
    mp.height = 1;
    CUgraphNode set;
    CU(cuGraphAddMemsetNode(&set, g, nullptr, 0, &mp, ctx));
    CU(reinterpret_cast<CUresult (*)(CUgraph, const CUgraphNode*, const CUgraphNode*, size_t)>(
        add_deps)(g, &set, &kern, 1));
    size_t edges = 0;
    CU(reinterpret_cast<CUresult (*)(CUgraph, CUgraphNode*, CUgraphNode*, size_t*)>(get_edges)(
        g, nullptr, nullptr, &edges));
    EXPECT(edges == 1);
    CUgraphExec exec;
    CUgraphNode bad;
    char log[128];
    CU(reinterpret_cast<CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t)>(
        instantiate)(&exec, g, &bad, log, sizeof log));
    for (int launch = 0; launch < 2; ++launch) CU(cuGraphLaunch(exec, s));
    CU(cuStreamSynchronize(s));
    CU(cuMemcpyDtoH(c.data(), dc, n * sizeof(float)));
    for (int i = 0; i < n; ++i) EXPECT(c[i] == 1.0f);
    CU(cuGraphExecDestroy(exec));
    CU(cuGraphDestroy(g));
    std::printf("driver_api: a graph through the CUDA 10.0-12.0 entry points ran\n");
  }

  // Device-to-device copy and memsets (a byte, and a 32-bit pattern of distinct bytes).
  CU(cuMemcpyDtoD(db, da, n * sizeof(float)));
  CU(cuMemcpyDtoH(c.data(), db, n * sizeof(float)));
  for (int i = 0; i < n; ++i) EXPECT(c[i] == a[i]);
  std::vector<unsigned> words(n);
  CU(cuMemsetD32(da, 0x12345678u, n));
  CU(cuMemcpyDtoH(words.data(), da, n * 4));
  for (int i = 0; i < n; ++i) EXPECT(words[i] == 0x12345678u);
  CU(cuMemsetD8Async(da + 4, 0xab, 8, s));
  CU(cuMemsetD32Async(da + 12, 0, 1, s));
  CU(cuStreamSynchronize(s));
  CU(cuMemcpyDtoH(words.data(), da, 5 * 4));
  EXPECT(words[0] == 0x12345678u && words[1] == 0xababababu && words[2] == 0xababababu &&
         words[3] == 0 && words[4] == 0x12345678u);

  int start_value = 41, seen = 0;
  if (globals) {
    // A module variable: its address and size, written, used and changed by a kernel, read back.
    CUdeviceptr counter;
    size_t counter_size = 0;
    CU(cuModuleGetGlobal(&counter, &counter_size, mod, "gCounter"));
    EXPECT(counter_size == sizeof(int));
    EXPECT(cuModuleGetGlobal(&counter, &counter_size, mod, "noSuchVariable") == CUDA_ERROR_NOT_FOUND);
    CU(cuMemcpyHtoD(counter, &start_value, sizeof start_value));
    int delta = 9;
    void* take_args[] = {&dc, &delta};
    CU(cuLaunchKernel(take, 1, 1, 1, 1, 1, 1, 0, nullptr, take_args, nullptr));
    int now = 0;
    CU(cuMemcpyDtoH(&seen, dc, sizeof seen));
    CU(cuMemcpyDtoH(&now, counter, sizeof now));
    EXPECT(seen == 41 && now == 50);
  }

  size_t free_mem = 0, total_mem = 0;
  CU(cuMemGetInfo(&free_mem, &total_mem));
  EXPECT(total_mem > 0 && free_mem <= total_mem);

  // A created context: pushed on creation, current until popped; the primary is current again.
  CUcontext mine, popped;
  CU(cuCtxCreate(&mine, nullptr, 0, dev0));
  CU(cuCtxGetCurrent(&current));
  EXPECT(current == mine);
  CU(cuCtxPopCurrent(&popped));
  EXPECT(popped == mine);
  CU(cuCtxGetCurrent(&current));
  EXPECT(current == primary);
  CU(cuCtxPushCurrent(mine));
  CU(cuCtxPopCurrent(nullptr));
  CU(cuCtxDestroy(mine));
  EXPECT(cuCtxPushCurrent(mine) == CUDA_ERROR_INVALID_CONTEXT);

  // cuGetProcAddress: implemented entry points by base name work when called through the pointer.
  void* fn = nullptr;
  CUdriverProcAddressQueryResult found;
  CU(cuGetProcAddress("cuDeviceGetCount", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  EXPECT(fn != nullptr && found == CU_GET_PROC_ADDRESS_SUCCESS);
  int count2 = 0;
  CU(reinterpret_cast<CUresult (*)(int*)>(fn)(&count2));
  EXPECT(count2 == count);
  CU(cuGetProcAddress("cuMemAlloc", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &found));
  void* by_versioned_name = nullptr;  // the exported name cuda.h maps cuMemAlloc to
  CU(cuGetProcAddress("cuMemAlloc_v2", &by_versioned_name, 13000, 0, &found));
  EXPECT(by_versioned_name == fn);
  CUdeviceptr via;
  CU(reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(fn)(&via, 64));
  CU(cuMemFree(via));
  CU(cuGetProcAddress("cuMemcpyHtoDAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                      &found));
  EXPECT(fn != nullptr);
  CU(reinterpret_cast<CUresult (*)(CUdeviceptr, const void*, size_t, CUstream)>(fn)(
      da, &start_value, sizeof start_value, nullptr));
  CU(cuGetProcAddress("cuLaunchKernel", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
                      &found));
  float two = 2.0f;
  void* scale_args[] = {&db, &two, &nn};
  CU(reinterpret_cast<decltype(&cuLaunchKernel)>(fn)(scale, 4, 1, 1, 256, 1, 1, 0, nullptr,
                                                     scale_args, nullptr));
  CU(cuMemcpyDtoH(c.data(), db, n * sizeof(float)));
  for (int i = 0; i < n; ++i) EXPECT(c[i] == 2 * a[i]);
  // Unknown names and versions before an entry point existed.
  EXPECT(cuGetProcAddress("cuNoSuchEntryPoint", &fn, 13000, 0, &found) == CUDA_ERROR_NOT_FOUND);
  EXPECT(fn == nullptr && found == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT(cuGetProcAddress("cuLaunchKernelEx", &fn, 11000, 0, &found) == CUDA_ERROR_NOT_FOUND);
  EXPECT(fn == nullptr && found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);

  if (stub) {
    // An entry point gpool does not implement: loud, named, never silent success.
    CUdeviceptr managed = 0;
    CUresult direct = cuMemAllocManaged(&managed, 64, CU_MEM_ATTACH_GLOBAL);
    std::printf("cuMemAllocManaged returned %d\n", static_cast<int>(direct));
    CU(cuGetProcAddress("cuGraphAddChildGraphNode", &fn, 13000, 0, &found));
    EXPECT(fn != nullptr && found == CU_GET_PROC_ADDRESS_SUCCESS);
    CUgraph graph;
    CU(cuGraphCreate(&graph, 0));
    CUgraphNode node;
    CUresult fetched = reinterpret_cast<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*,
                                                      size_t, CUgraph)>(fn)(&node, graph, nullptr,
                                                                            0, graph);
    std::printf("cuGraphAddChildGraphNode through cuGetProcAddress returned %d\n",
                static_cast<int>(fetched));
    CU(cuGraphDestroy(graph));
    EXPECT(direct == CUDA_ERROR_NOT_SUPPORTED && fetched == CUDA_ERROR_NOT_SUPPORTED);
  }

  // Stream-ordered allocation: a pool of the device (as NCCL makes per communicator), its
  // attributes, allocations from it and from the device's default pool that hold data, copies
  // with unified addressing in each direction, and frees on the stream.
  {
    CUmemPoolProps props = {};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev0;
    CUmemoryPool pool;
    CU(cuMemPoolCreate(&pool, &props));
    cuuint64_t threshold = ~cuuint64_t(0), back = 0, used = 1;
    CU(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &back));
    EXPECT(back == threshold);
    CUdeviceptr p1 = 0, p2 = 0;
    CU(cuMemAllocFromPoolAsync(&p1, 4096, pool, s));
    CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    EXPECT(used == 4096);
    CU(cuMemAllocAsync(&p2, 4096, s));
    std::vector<int> in(1024, 7), out(1024, 0);
    CU(cuMemcpyAsync(p1, reinterpret_cast<CUdeviceptr>(in.data()), 4096, s));  // host to device
    CU(cuMemcpyAsync(p2, p1, 4096, s));                                          // device to device
    CU(cuMemcpy(reinterpret_cast<CUdeviceptr>(out.data()), p2, 4096));           // device to host
    for (int v : out) EXPECT(v == 7);
    CU(cuMemFreeAsync(p1, s));
    CU(cuMemFreeAsync(p2, s));
    CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    EXPECT(used == 0);
    CUmemoryPool def = nullptr, cur = nullptr;
    CU(cuDeviceGetDefaultMemPool(&def, dev0));
    CU(cuDeviceGetMemPool(&cur, dev0));
    EXPECT(def == cur && def != pool);
    CU(cuMemPoolDestroy(pool));
    // Not capturing: no capture id.
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    cuuint64_t capture_id = 1;
    CU(cuStreamGetCaptureInfo(s, &status, &capture_id, nullptr, nullptr, nullptr, nullptr));
    EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE && capture_id == 0);
  }

  CU(cuEventDestroy(start));
  CU(cuEventDestroy(stop));
  CU(cuStreamDestroy(s));
  CU(cuMemFree(da));
  CU(cuMemFree(db));
  CU(cuMemFree(dc));
  EXPECT(cuMemFree(dc) == CUDA_ERROR_INVALID_VALUE);
  CU(cuModuleUnload(mod));
  EXPECT(cuModuleGetFunction(&missing, mod, "_Z5scalePffi") == CUDA_ERROR_INVALID_HANDLE);
  CU(cuDevicePrimaryCtxRelease(dev0));
  std::printf("PASS driver_api\n");
  return 0;
}
