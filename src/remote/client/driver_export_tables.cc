// The driver stand-in's private export tables (cuGetExportTable): what NVIDIA's runtime
// (libcudart.so.13, libcudart_static.a, and the copy inside cuBLAS and the other libraries) asks
// the driver for besides the public API. docs/remoting/driver-api.md ("Export tables") says, table by table
// and slot by slot, what each entry does here and why.
//
// A table is an array of pointers whose slot 0 is, for most tables, the table's size in bytes.
// Layouts and signatures are not published by NVIDIA: they come from what CUDA 13.0's runtime
// was seen to call over this stand-in, checked against public reverse-engineering work (ZLUDA's
// "dark API" notes), which was read, not copied. Slots whose use is unknown hold a loud stub that
// names its table and slot, so a runtime that starts calling one is seen at once, never silently.
#include <cuda.h>
#include <nettle/hmac.h>
#include <nettle/md2.h>
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string_view>
#include <utility>

#include "remote/client/driver_state.h"

namespace gpool::remote::client::driver {
namespace {

// A slot of a table that gpool does not know the use of: says so, naming the table and slot.
// Called with whatever arguments the caller passes (the x86-64 calling convention makes that
// harmless for a function that reads none), it returns CUDA_ERROR_NOT_SUPPORTED.
template <int kTable, int kSlot>
CUresult UnknownSlot();

// ---- 6bd5fb6c-5bf4-e74a-8987-d93912fd9df9: the runtime interface

// Slot 2: the device's primary context (the runtime makes it current itself). Unlike
// cuDevicePrimaryCtxRetain it takes no reference: the runtime releases nothing it got here.
CUresult RtPrimaryContext(CUcontext* pctx, CUdevice dev) {
  const char* call = "cuGetExportTable(runtime interface) primary context";
  if (!pctx) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null context pointer");
  if (CUresult r = Ready(call)) return r;
  Driver& d = D();
  std::lock_guard<std::mutex> lk(d.mu);
  if (dev < 0 || dev >= d.device_count()) {
    return Fail(call, CUDA_ERROR_INVALID_DEVICE, fmt::format("device {} of {}", dev, d.device_count()));
  }
  *pctx = reinterpret_cast<CUcontext>(d.primary[dev]);
  return CUDA_SUCCESS;
}

// Slots 1, 6 and 8: a module from the program's registered fatbin (the wrapper
// __cudaRegisterFatBinary gets, or the fatbin itself), in the current context. Extra arguments
// (6, 8) carry options the runtime passes as null/0 for ordinary programs; anything else is
// refused, naming what was passed, rather than ignored.
CUresult RtModuleFromWrapper(CUmodule* out, const void* wrapper) {
  return LoadModule("cuGetExportTable(runtime interface) module from fatbin", out, wrapper);
}
CUresult RtModuleFromWrapperEx(CUmodule* out, const void* wrapper, void* a3, void* a4, unsigned a5) {
  const char* call = "cuGetExportTable(runtime interface) module from fatbin (ex)";
  if (a3 || a4 || a5) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                fmt::format("module options ({}, {}, {}) are not supported by gpool", a3, a4, a5));
  }
  return LoadModule(call, out, wrapper);
}
CUresult RtModuleFromFatbin(const void* fatbin, CUmodule* out, void* a3, void* a4, unsigned a5) {
  const char* call = "cuGetExportTable(runtime interface) module from fatbin header";
  if (a3 || a4 || a5) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED,
                fmt::format("module options ({}, {}, {}) are not supported by gpool", a3, a4, a5));
  }
  return LoadModule(call, out, fatbin);
}
// Slot 7: a notification with one argument; nothing to do on the client.
void RtNotify(uintptr_t) {}
// Slot 12: in NVIDIA's driver it loads the PTX compiler and NVVM; the servers compile, so
// nothing to load here.
CUresult RtLoadCompilers() { return CUDA_SUCCESS; }

// ---- a094798c-2e74-2e74-93f2-0800200c0a66: tools callback hooks
// Slots 2 and 6 hand the runtime a buffer it fills (tool callback state) and its size. The
// runtime checks the size: with 512 bytes it refused the driver (cudaErrorInsufficientDriver);
// 1024 and 14 are what NVIDIA's driver gives. The buffers are larger than said, so a runtime
// that counts words rather than bytes still stays inside them.
alignas(16) std::array<uint64_t, 1024> g_hooks_buffer1{};
alignas(16) std::array<uint64_t, 4> g_hooks_buffer2{};
void HooksBuffer1(void** ptr, size_t* size) {
  if (ptr) *ptr = g_hooks_buffer1.data();
  if (size) *size = 1024;
}
void HooksBuffer2(void** ptr, size_t* size) {
  if (ptr) *ptr = g_hooks_buffer2.data();
  if (size) *size = 14;
}

// ---- 42d85a81-23f6-cb47-8298-f6e78a3aecdc: tools thread-local state
// Slot 2 `(void** state)`: cuBLASLt calls it before each algorithm heuristic query,
// unconditionally (a null slot crashes it), then asks for table 21318c60 and calls its slot 4 with
// the state; when either fails, the heuristic query fails (cublasSgemm returns
// CUBLAS_STATUS_NOT_SUPPORTED). The state is a zeroed block per thread, which nothing here reads.
CUresult ToolsThreadState(void** state) {
  static thread_local std::array<uint64_t, 64> t_state{};
  if (!state) return CUDA_ERROR_INVALID_VALUE;
  *state = t_state.data();
  return CUDA_SUCCESS;
}

// ---- 21318c60-9714-3248-8ca6-41ff7324c8f2: tools thread-local state, second table
// Slot 4 `(void* state, void** out)`: called with slot 2's state before each algorithm
// heuristic query of cuBLASLt; its success is what lets the query go on. No tool is attached, so
// there is nothing to hand out: null, and success.
CUresult ToolsThreadData(void*, void** out) {
  if (out) *out = nullptr;
  return CUDA_SUCCESS;
}

// ---- c693336e-1121-df11-a8c3-68f355d89593: context-local storage
// The runtime keeps its per-context state in the driver's context: a value per (context, key),
// with a destructor called when the context goes (cuCtxDestroy here). A null context is the
// current one.
CUresult ClsContext(const char* call, CUcontext c, Ctx** out) {
  if (CUresult r = Ready(call)) return r;
  if (c == nullptr) {
    CUcontext cur = nullptr;
    if (cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur == nullptr) {
      return Fail(call, CUDA_ERROR_INVALID_CONTEXT, "no context given and none current");
    }
    c = cur;
  }
  std::lock_guard<std::mutex> lk(D().mu);
  auto* ctx = reinterpret_cast<Ctx*>(c);
  if (!D().contexts.count(ctx)) {
    return Fail(call, CUDA_ERROR_INVALID_CONTEXT, fmt::format("{} is no live context", fmt::ptr(c)));
  }
  *out = ctx;
  return CUDA_SUCCESS;
}
CUresult ClsPut(CUcontext c, void* key, void* value, Ctx::StorageDtor dtor) {
  const char* call = "cuGetExportTable(context-local storage) put";
  Ctx* ctx;
  if (CUresult r = ClsContext(call, c, &ctx)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  ctx->storage[key] = {value, dtor};
  return CUDA_SUCCESS;
}
CUresult ClsDelete(CUcontext c, void* key) {
  const char* call = "cuGetExportTable(context-local storage) delete";
  Ctx* ctx;
  if (CUresult r = ClsContext(call, c, &ctx)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  ctx->storage.erase(key);
  return CUDA_SUCCESS;
}
// Not said: the runtime asks before it puts, and asks with no context current at start-up, so a
// key never put (CUDA_ERROR_INVALID_HANDLE) and no current context (CUDA_ERROR_INVALID_CONTEXT)
// are answers it expects, not errors.
CUresult ClsGet(void** value, CUcontext c, void* key) {
  const char* call = "cuGetExportTable(context-local storage) get";
  if (!value) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null value pointer");
  if (CUresult r = Ready(call)) return r;
  if (c == nullptr && (cuCtxGetCurrent(&c) != CUDA_SUCCESS || c == nullptr)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  Ctx* ctx;
  if (CUresult r = ClsContext(call, c, &ctx)) return r;
  std::lock_guard<std::mutex> lk(D().mu);
  auto it = ctx->storage.find(key);
  if (it == ctx->storage.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = it->second.value;
  return CUDA_SUCCESS;
}

// ---- 263e8860-7cd2-6143-92f6-bbd5006dfa7e: context checks
// Slot 2: whether a context wraps another (an interop context); gpool's never do.
CUresult CtxIsWrapped(CUcontext, unsigned* wrapped, CUcontext* inner) {
  if (wrapped) *wrapped = 0;
  if (inner) *inner = nullptr;
  return CUDA_SUCCESS;
}
// Slot 3: the runtime calls it at start-up and goes on when it answers 0.
unsigned CtxCheck3() { return 0; }

// ---- 6e163fbe-b958-444d-835c-e182aff1991e: module and function internals
// Slot 7 `(CUcontext, CUmodule, void (*cb)(void* arg, CUfunction f), void* arg)`: calls `cb` for
// each function of the module and returns how many. cuFFT loads each of its kernels as a module
// of one function (cuModuleLoadData) and takes that function from here instead of asking
// cuModuleGetFunction by name; its callback stores `f` at `arg`, and it requires a count of 1.
// The functions are those of the client's parse of the image, in name order.
uint64_t ModuleFunctions(CUcontext, CUmodule module, void (*cb)(void*, CUfunction), void* arg) {
  const char* call = "cuGetExportTable(module and function internals) functions of a module";
  if (!cb || !module) {
    Fail(call, CUDA_ERROR_INVALID_VALUE, "null module or callback");
    return 0;
  }
  auto* m = reinterpret_cast<Module*>(module);
  {
    std::lock_guard<std::mutex> lk(D().mu);
    if (!D().modules.count(m)) {
      Fail(call, CUDA_ERROR_INVALID_HANDLE, fmt::format("module {} is not a loaded module",
                                                        static_cast<const void*>(module)));
      return 0;
    }
  }
  if (EnsureLoaded(call, m) != CUDA_SUCCESS) return 0;
  if (!m->parse_status.ok()) {
    Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("the client could not read the module's "
         "image, so cannot list its functions: {}", m->parse_status.message()));
    return 0;
  }
  uint64_t n = 0;
  for (const auto& [name, kernel] : m->parsed.kernels) {
    CUfunction f = nullptr;
    if (cuModuleGetFunction(&f, module, name.c_str()) != CUDA_SUCCESS) return n;
    cb(arg, f);
    ++n;
  }
  return n;
}

// ---- d4082055-bde6-704b-8d34-ba123c66e1f2: the integrity check (see IntegrityCheck below)
CUresult IntegrityCheck(unsigned version, uint64_t unix_seconds, uint8_t (*digest)[16]);

template <int kTable, int kSlot>
CUresult UnknownSlot();

// The tables. Slot 0 holds the size in bytes where the table has one.
template <size_t N>
constexpr const void* SizeOf() {
  return reinterpret_cast<const void*>(N * sizeof(void*));
}
#define GPOOL_FN(f) reinterpret_cast<const void*>(&f)
#define GPOOL_UNKNOWN(t, s) reinterpret_cast<const void*>(&UnknownSlot<t, s>)

const void* const kRuntimeInterface[13] = {
    SizeOf<13>(),
    GPOOL_FN(RtModuleFromWrapper),
    GPOOL_FN(RtPrimaryContext),
    GPOOL_UNKNOWN(0, 3),
    GPOOL_UNKNOWN(0, 4),
    GPOOL_UNKNOWN(0, 5),
    GPOOL_FN(RtModuleFromWrapperEx),
    GPOOL_FN(RtNotify),
    GPOOL_FN(RtModuleFromFatbin),
    GPOOL_UNKNOWN(0, 9),
    GPOOL_UNKNOWN(0, 10),
    GPOOL_UNKNOWN(0, 11),
    GPOOL_FN(RtLoadCompilers),
};
const void* const kToolsHooks[7] = {
    SizeOf<7>(),        GPOOL_UNKNOWN(1, 1), GPOOL_FN(HooksBuffer1), GPOOL_UNKNOWN(1, 3),
    GPOOL_UNKNOWN(1, 4), GPOOL_UNKNOWN(1, 5), GPOOL_FN(HooksBuffer2),
};
const void* const kToolsTls[4] = {
    SizeOf<4>(), GPOOL_UNKNOWN(2, 1), GPOOL_FN(ToolsThreadState), GPOOL_UNKNOWN(2, 3),
};
const void* const kContextStorage[4] = {
    GPOOL_FN(ClsPut), GPOOL_FN(ClsDelete), GPOOL_FN(ClsGet), GPOOL_UNKNOWN(3, 3),
};
const void* const kContextChecks[4] = {
    SizeOf<4>(), GPOOL_UNKNOWN(4, 1), GPOOL_FN(CtxIsWrapped), GPOOL_FN(CtxCheck3),
};
// Its length is not known: slot 4 is the last one seen called.
const void* const kToolsThreadData[8] = {
    SizeOf<8>(), GPOOL_UNKNOWN(6, 1), GPOOL_UNKNOWN(6, 2), GPOOL_UNKNOWN(6, 3),
    GPOOL_FN(ToolsThreadData), GPOOL_UNKNOWN(6, 5), GPOOL_UNKNOWN(6, 6), GPOOL_UNKNOWN(6, 7),
};
const void* const kIntegrity[3] = {
    SizeOf<3>(), GPOOL_FN(IntegrityCheck), GPOOL_UNKNOWN(5, 2),
};
// 6e163fbe-b958-444d-835c-e182aff1991e: module and function internals (public work: a
// function's name, cache configuration, argument descriptors, iterating a module's functions).
// cuFFT asks for it at its first plan. Its length is not known; every slot but 7 is loud.
template <int kTable, size_t... I>
constexpr std::array<const void*, sizeof...(I) + 1> AllUnknown(std::index_sequence<I...>) {
  return {SizeOf<sizeof...(I) + 1>(), GPOOL_UNKNOWN(kTable, I + 1)...};
}
std::array<const void*, 64> FunctionInternals() {
  auto t = AllUnknown<7>(std::make_index_sequence<63>());
  t[7] = GPOOL_FN(ModuleFunctions);
  return t;
}
const std::array<const void*, 64> kFunctionInternals = FunctionInternals();
#undef GPOOL_FN
#undef GPOOL_UNKNOWN

struct Table {
  std::array<uint8_t, 16> id;  // the UUID's bytes in memory order
  const char* name;
  const void* const* slots;  // null: not provided, and not said (the runtime goes on without it)
};
const Table kTables[] = {
    {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9},
     "runtime interface", kRuntimeInterface},
    {{0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66},
     "tools callback hooks", kToolsHooks},
    {{0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc},
     "tools thread-local state", kToolsTls},
    {{0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93},
     "context-local storage", kContextStorage},
    {{0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e},
     "context checks", kContextChecks},
    {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2},
     "integrity check", kIntegrity},
    {{0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2},
     "tools thread-local data", kToolsThreadData},
    {{0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e},
     "module and function internals", kFunctionInternals.data()},
    // Asked first by CUDA 13's runtime, which goes on without it (public work: a table of
    // requirements); what it would hold is not known, so it is refused, quietly.
    {{0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb, 0x46, 0x9e, 0x7c, 0x0d, 0xd9},
     "requirements", nullptr},
};

template <int kTable, int kSlot>
CUresult UnknownSlot() {
  return Fail("cuGetExportTable", CUDA_ERROR_NOT_SUPPORTED,
              fmt::format("slot {} of the {} table is not implemented by gpool's libcuda.so.1 "
                          "stand-in", kSlot, kTables[kTable].name));
}

// The integrity check. NVIDIA's runtime calls slot 1 with its version (13000, 13001, 13002 for
// CUDA 13.0), a Unix time and a 16-byte output, computes the same value itself from what the
// driver told it, and refuses the driver (cudaErrorSoftwareValidityNotEstablished) when the two
// differ. The value is an HMAC over MD2 (RFC 1319; 16-byte blocks, so the key needs no padding)
// with a fixed 16-byte key, of, in memory order (x86-64, little-endian):
//   u32 driver version (cuDriverGetVersion), u32 the runtime's version argument,
//   u32 process id, u32 the low 32 bits of pthread_self(),
//   the addresses of the runtime interface table, of this table and of this slot's function,
//   u64 the Unix time argument;
// then per device (cuDeviceGetCount): its UUID (16 bytes), i32 PCI domain, bus and device ids.
// For a version whose last decimal digit is 0 or 1 the runtime expects fixed values instead.
// The key and the fixed values are constants of NVIDIA's runtime, as published by ZLUDA's
// reverse engineering; MD2 and HMAC are nettle's.
constexpr uint8_t kIntegrityKey[16] = {0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52,
                                       0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f};
constexpr uint64_t kIntegrityFixed[2][2] = {{0x3341181c03cb675cULL, 0x8ed383aa1f4cd1e8ULL},
                                            {0x1841181c03cb675cULL, 0x8ed383aa1f4cd1e8ULL}};

struct IntegrityHead {
  uint32_t driver_version;
  uint32_t version;
  uint32_t process;
  uint32_t thread;
  const void* runtime_table;
  const void* integrity_table;
  const void* check_fn;
  uint64_t unix_seconds;
};
static_assert(sizeof(IntegrityHead) == 48, "hashed as 48 bytes, no padding");
struct IntegrityDevice {
  uint8_t uuid[16];
  int32_t pci_domain, pci_bus, pci_device;
};
static_assert(sizeof(IntegrityDevice) == 28, "hashed as 28 bytes, no padding");

CUresult IntegrityCheck(unsigned version, uint64_t unix_seconds, uint8_t (*digest)[16]) {
  const char* call = "cuGetExportTable(integrity check)";
  if (!digest) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null result pointer");
  if (version % 10 <= 1) {
    std::memcpy(*digest, kIntegrityFixed[version % 10], 16);
    return CUDA_SUCCESS;
  }
  int driver_version = 0, count = 0;
  if (CUresult r = cuDriverGetVersion(&driver_version)) return r;
  if (CUresult r = cuDeviceGetCount(&count)) return r;
  IntegrityHead head{.driver_version = static_cast<uint32_t>(driver_version),
                     .version = version,
                     .process = static_cast<uint32_t>(getpid()),
                     .thread = static_cast<uint32_t>(pthread_self()),
                     .runtime_table = kRuntimeInterface,
                     .integrity_table = kIntegrity,
                     .check_fn = kIntegrity[1],
                     .unix_seconds = unix_seconds};
  struct hmac_md2_ctx HMAC_CTX(struct md2_ctx) h;
  HMAC_SET_KEY(&h, &nettle_md2, sizeof kIntegrityKey, kIntegrityKey);
  md2_update(&h.state, sizeof head, reinterpret_cast<const uint8_t*>(&head));
  for (int dev = 0; dev < count; ++dev) {
    IntegrityDevice d{};
    CUuuid uuid;
    if (CUresult r = cuDeviceGetUuid(&uuid, dev)) return r;
    std::memcpy(d.uuid, uuid.bytes, sizeof d.uuid);
    if (CUresult r = cuDeviceGetAttribute(&d.pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev)) return r;
    if (CUresult r = cuDeviceGetAttribute(&d.pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev)) return r;
    if (CUresult r = cuDeviceGetAttribute(&d.pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev)) return r;
    md2_update(&h.state, sizeof d, reinterpret_cast<const uint8_t*>(&d));
  }
  HMAC_DIGEST(&h, &nettle_md2, MD2_DIGEST_SIZE, *digest);
  return CUDA_SUCCESS;
}

std::string TableName(const CUuuid* id) {
  std::string s;
  for (int i = 0; i < 16; ++i) {
    s += fmt::format("{:02x}", static_cast<unsigned char>(id->bytes[i]));
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return s;
}

}  // namespace

// The tables above; any other is CUDA_ERROR_NOT_SUPPORTED, named on stderr once per table (a
// runtime goes on without the optional ones, and a run shows what a new one needs).
CUresult GetExportTable(const void** table, const CUuuid* id) {
  if (!table || !id) return CUDA_ERROR_INVALID_VALUE;
  for (const Table& t : kTables) {
    if (std::memcmp(t.id.data(), id->bytes, 16) == 0) {
      *table = t.slots;
      return t.slots ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  *table = nullptr;
  static std::mutex mu;
  static std::set<std::string> said;
  std::string name = TableName(id);
  std::lock_guard<std::mutex> lk(mu);
  if (said.insert(name).second) {
    Say(fmt::format("cuGetExportTable: table {} is not provided by gpool's libcuda.so.1 stand-in "
                    "(returning CUDA_ERROR_NOT_SUPPORTED)", name));
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace gpool::remote::client::driver
