// The libcudart.so.13 stand-in's module registration entry points, called as nvcc's generated
// code calls them (loaded with dlopen, as a program loads the library), on the paths a normal
// program never takes: a handle unregistered twice, one never given out, and an old handle after
// new registrations. Each is refused with a message naming the call, reads nothing through the
// handle, and leaves other modules registered. No server is needed: registration talks to none
// until a link exists.
#include <dlfcn.h>

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace {

using RegisterFn = void** (*)(void*);
using UnregisterFn = void (*)(void**);
using RegisterFunctionFn = void (*)(void**, const char*, char*, const char*, int, void*, void*,
                                    void*, void*, int*);

struct Cudart {
  void* lib = nullptr;
  RegisterFn reg = nullptr;
  UnregisterFn unreg = nullptr;
  RegisterFunctionFn reg_fn = nullptr;
};

Cudart Load() {
  Cudart c;
  c.lib = dlopen(GPOOL_CUDART_PATH, RTLD_NOW | RTLD_LOCAL);
  if (c.lib == nullptr) return c;
  c.reg = reinterpret_cast<RegisterFn>(dlsym(c.lib, "__cudaRegisterFatBinary"));
  c.unreg = reinterpret_cast<UnregisterFn>(dlsym(c.lib, "__cudaUnregisterFatBinary"));
  c.reg_fn = reinterpret_cast<RegisterFunctionFn>(dlsym(c.lib, "__cudaRegisterFunction"));
  return c;
}

// nvcc's fatbin wrapper: {magic, version, data, filename}. This one's magic is wrong, which the
// stand-in reports and then registers an empty module anyway (as for any module it cannot read:
// launching from it fails later, loudly).
struct Wrapper {
  uint32_t magic = 0x12345678;
  uint32_t version = 1;
  const void* data = nullptr;
  void* filename = nullptr;
};

TEST(CudartRegistration, ARepeatedOrStrayUnregistrationIsRefusedAndReadsNothing) {
  Cudart c = Load();
  ASSERT_NE(c.lib, nullptr) << dlerror();
  ASSERT_NE(c.reg, nullptr);
  ASSERT_NE(c.unreg, nullptr);
  ASSERT_NE(c.reg_fn, nullptr);
  Wrapper w;
  testing::internal::CaptureStderr();
  void** a = c.reg(&w);
  void** b = c.reg(&w);
  std::string out = testing::internal::GetCapturedStderr();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b) << "two registrations share a handle";
  EXPECT_NE(out.find("__cudaRegisterFatBinary: "), std::string::npos) << out;
  static char stub;
  int unused = 0;
  c.reg_fn(b, &stub, const_cast<char*>("_Z1kv"), "_Z1kv", -1, nullptr, nullptr, nullptr, nullptr,
           &unused);

  testing::internal::CaptureStderr();
  c.unreg(a);
  out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "") << "a normal unregistration complained";

  // A retired handle stays readable (never freed: nvcc's code keeps it in a static; under ASan
  // a freed one fails here), and using it again is refused.
  EXPECT_NE(*a, nullptr);
  testing::internal::CaptureStderr();
  c.unreg(a);
  c.reg_fn(a, &stub, const_cast<char*>("_Z1kv"), "_Z1kv", -1, nullptr, nullptr, nullptr, nullptr,
           &unused);
  out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("__cudaUnregisterFatBinary: handle"), std::string::npos) << out;
  EXPECT_NE(out.find("is not registered"), std::string::npos) << out;
  EXPECT_NE(out.find("__cudaRegisterFunction: handle"), std::string::npos) << out;

  void* never = reinterpret_cast<void*>(uintptr_t{0xdead});
  testing::internal::CaptureStderr();
  c.unreg(&never);  // a handle the library never gave out
  out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("is not registered"), std::string::npos) << out;
  EXPECT_EQ(never, reinterpret_cast<void*>(uintptr_t{0xdead}));

  // The other module is untouched by all this, and goes normally.
  testing::internal::CaptureStderr();
  c.unreg(b);
  out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "") << out;

  // A library closed and opened again registers anew; a stale unregistration of an old handle
  // must not take the new module with it (a freed handle's address could be given out again).
  testing::internal::CaptureStderr();
  void** fresh = c.reg(&w);
  c.unreg(a);
  c.unreg(b);
  out = testing::internal::GetCapturedStderr();
  EXPECT_NE(fresh, a);
  EXPECT_NE(fresh, b);
  testing::internal::CaptureStderr();
  c.unreg(fresh);
  out = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out, "") << "the new module was unregistered by a stale handle: " << out;
}

}  // namespace
