// Virtual memory management through a session (protocol v9) on the emulated backend, as an
// expandable allocator drives it: reserve address space, create 2 MiB handles, map them back to
// back, give access, copy across the seam as one buffer, remap a handle elsewhere and see it
// alias, release. Physical memory counts against the session's memory limit exactly as cudaMalloc
// does, and copies into reserved space with nothing mapped fail clearly. EmulatedVmm's own rules
// (the driver's) are checked directly below.
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <thread>

#include "remote/server/emulated_vmm.h"
#include "remote/server/session.h"
#include "remote/server/session_test_fixture.h"

namespace gpool::remote::server {
namespace {

using namespace proto;  // NOLINT: message structs

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kChunk = 2 * kMiB;

class VmmSessionTest : public test::SessionTest {
 protected:
  EmulatedOptions Options() override {
    return {.memory_bytes = 64 * kMiB, .va_bytes = uint64_t{4} << 30};
  }
  // A 5 MiB limit: two 2 MiB chunks fit, a third does not.
  SessionLimits Limits() override { return {.memory_bytes = 5 * kMiB}; }
  // One synchronous request and its reply.
  template <class Msg, class Body>
  void Ask(Msg q, ReplyHead* h, Body* body) {
    BatchWriter w;
    w.AddRequest(q);
    ASSERT_TRUE(client_->Send(w.Finish()).ok());
    *h = ReplyHead{};
    Reply(static_cast<uint16_t>(Msg::kOp), h, body);
  }
  template <class Msg>
  ReplyHead Ask(Msg q) {
    ReplyHead h;
    Empty none;
    Ask(q, &h, &none);
    return h;
  }
  uint64_t Create(uint64_t size, ReplyHead* h) {
    U64Value v;
    Ask(MemCreate{.device = 0, .size = size}, h, &v);
    return v.value;
  }
  // Posts a host-to-device copy, then a Ping whose head carries the copy's error, if any.
  ReplyHead Write(uint64_t dst, const std::vector<std::byte>& data) {
    return PostThenPing(MemcpyH2D{.dst = dst, .data = data});
  }
  std::vector<std::byte> Read(uint64_t src, uint64_t n, ReplyHead* h) {
    Data d;
    Ask(MemcpyD2H{.src = src, .size = n}, h, &d);
    return {d.data.begin(), d.data.end()};
  }
  uint64_t FreeMemory() {
    ReplyHead h;
    MemInfo m;
    MemGetInfo q;
    Ask(q, &h, &m);
    EXPECT_EQ(h.error, 0) << h.message;
    return m.free;
  }
};

std::vector<std::byte> Bytes(size_t n, uint8_t seed) {
  std::vector<std::byte> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::byte(static_cast<uint8_t>(i * 13 + seed + (i >> 12)));
  return v;
}

TEST_F(VmmSessionTest, AnExpandableAllocatorsSequenceWorksAndCountsAgainstTheLimit) {
  ReplyHead h;
  U64Value gran;
  Ask(MemGranularity{.device = 0}, &h, &gran);
  ASSERT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(gran.value, kChunk);
  Pointer va;
  Ask(MemAddressReserve{.device = 0, .size = uint64_t{1} << 30}, &h, &va);
  ASSERT_EQ(h.error, 0) << h.message;
  ASSERT_NE(va.ptr, 0u);
  EXPECT_EQ(va.ptr % kChunk, 0u);
  const uint64_t free_before = FreeMemory();
  uint64_t a = Create(kChunk, &h);
  ASSERT_EQ(h.error, 0) << h.message;
  uint64_t b = Create(kChunk, &h);
  ASSERT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(FreeMemory(), free_before - 2 * kChunk);
  // A third chunk is over the 5 MiB limit, refused as cudaMalloc is, naming the call.
  (void)Create(kChunk, &h);
  EXPECT_EQ(h.error, kErrMemoryAllocation);
  EXPECT_NE(h.message.find("cuMemCreate"), std::string::npos) << h.message;
  EXPECT_NE(h.message.find("memory limit"), std::string::npos) << h.message;

  ASSERT_EQ(Ask(MemMap{.ptr = va.ptr, .size = kChunk, .handle = a}).error, 0);
  ASSERT_EQ(Ask(MemMap{.ptr = va.ptr + kChunk, .size = kChunk, .handle = b}).error, 0);
  // Mapped but no access yet: a copy is refused, saying so.
  ReplyHead wh = Write(va.ptr, Bytes(64, 1));
  EXPECT_EQ(wh.async_error, kErrInvalidValue);
  EXPECT_NE(wh.async_message.find("without access"), std::string::npos) << wh.async_message;
  ReplyHead ah = Ask(MemSetAccess{.ptr = va.ptr, .size = 2 * kChunk, .device = 0, .flags = 3});
  ASSERT_EQ(ah.error, 0) << ah.message;

  // 4 MiB across the seam of the two chunks, as one buffer.
  const std::vector<std::byte> data = Bytes(2 * kChunk, 7);
  wh = Write(va.ptr, data);
  ASSERT_EQ(wh.async_error, 0) << wh.async_message;
  std::vector<std::byte> got = Read(va.ptr, 2 * kChunk, &h);
  ASSERT_EQ(h.error, 0) << h.message;
  EXPECT_TRUE(got == data);

  // Past the mapped 4 MiB is reserved space with nothing mapped: refused, not a crash.
  got = Read(va.ptr + kChunk, 2 * kChunk, &h);
  EXPECT_EQ(h.error, kErrInvalidValue);
  EXPECT_NE(h.message.find("nothing mapped"), std::string::npos) << h.message;

  // Chunk b moves to offset 10 MiB; b's bytes are there, and a second mapping of a aliases it.
  ASSERT_EQ(Ask(MemUnmap{.ptr = va.ptr + kChunk, .size = kChunk}).error, 0);
  ASSERT_EQ(Ask(MemMap{.ptr = va.ptr + 10 * kMiB, .size = kChunk, .handle = b}).error, 0);
  ASSERT_EQ(Ask(MemMap{.ptr = va.ptr + 20 * kMiB, .size = kChunk, .handle = a}).error, 0);
  ASSERT_EQ(Ask(MemSetAccess{.ptr = va.ptr + 10 * kMiB, .size = kChunk, .flags = 3}).error, 0);
  ASSERT_EQ(Ask(MemSetAccess{.ptr = va.ptr + 20 * kMiB, .size = kChunk, .flags = 3}).error, 0);
  got = Read(va.ptr + 10 * kMiB, kChunk, &h);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), data.begin() + kChunk));
  ASSERT_EQ(Write(va.ptr + 20 * kMiB, Bytes(kChunk, 9)).async_error, 0);
  got = Read(va.ptr, kChunk, &h);
  EXPECT_TRUE(got == Bytes(kChunk, 9)) << "two mappings of one handle do not alias";
  // Remapped memory counts once.
  EXPECT_EQ(FreeMemory(), free_before - 2 * kChunk);

  // Released while mapped: the memory stays until its last mapping goes.
  ASSERT_EQ(Ask(MemRelease{.handle = a}).error, 0);
  EXPECT_EQ(FreeMemory(), free_before - 2 * kChunk);
  ASSERT_EQ(Ask(MemUnmap{.ptr = va.ptr, .size = kChunk}).error, 0);
  EXPECT_EQ(FreeMemory(), free_before - 2 * kChunk);  // still mapped at +20 MiB
  ASSERT_EQ(Ask(MemUnmap{.ptr = va.ptr + 20 * kMiB, .size = kChunk}).error, 0);
  EXPECT_EQ(FreeMemory(), free_before - kChunk);
  // The limit sees it too: a new chunk fits again.
  uint64_t c = Create(kChunk, &h);
  EXPECT_EQ(h.error, 0) << h.message;
  EXPECT_EQ(Ask(MemRelease{.handle = c}).error, 0);
  // Freeing a reservation that still has a mapping is refused; after the unmap it is not.
  ReplyHead fh = Ask(MemAddressFree{.ptr = va.ptr, .size = uint64_t{1} << 30});
  EXPECT_EQ(fh.error, kErrInvalidValue);
  EXPECT_NE(fh.message.find("still mapped"), std::string::npos) << fh.message;
  ASSERT_EQ(Ask(MemUnmap{.ptr = va.ptr + 10 * kMiB, .size = kChunk}).error, 0);
  ASSERT_EQ(Ask(MemRelease{.handle = b}).error, 0);
  EXPECT_EQ(Ask(MemAddressFree{.ptr = va.ptr, .size = uint64_t{1} << 30}).error, 0);
  EXPECT_EQ(FreeMemory(), free_before);
  EXPECT_EQ(session_->stats().peak_memory, 4 * kMiB);
}

TEST(EmulatedVmm, FollowsTheDriversRules) {
  EmulatedVmm vmm(0, uint64_t{1} << 30);
  uint64_t va = 0, h = 0;
  std::vector<uint64_t> freed;
  ASSERT_TRUE(vmm.Reserve(64 * kMiB, 0, 0, &va).ok());
  EXPECT_FALSE(vmm.Reserve(100, 0, 0, &va).ok()) << "size not a page multiple";
  EXPECT_FALSE(vmm.Reserve(kChunk, 3 * kMiB, 0, &va).ok()) << "alignment not a power of two";
  EXPECT_FALSE(vmm.Create(0, kMiB, &h).ok()) << "size below the granularity";
  ASSERT_TRUE(vmm.Create(0, 2 * kChunk, &h).ok());
  EXPECT_EQ(vmm.bytes_on(0), 2 * kChunk);
  Result r = vmm.Map(va, kChunk, kChunk, h);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.message.find("offset"), std::string::npos) << r.message;
  EXPECT_FALSE(vmm.Map(va + kMiB, kChunk, 0, h).ok()) << "address not granule-aligned";
  EXPECT_FALSE(vmm.Map(va, 3 * kChunk, 0, h).ok()) << "larger than the allocation";
  EXPECT_FALSE(vmm.Map(va + 63 * kMiB - kMiB, 2 * kChunk, 0, h).ok()) << "past the reservation";
  ASSERT_TRUE(vmm.Map(va, 2 * kChunk, 0, h).ok());
  EXPECT_FALSE(vmm.Map(va + kChunk, kChunk, 0, h).ok()) << "over an existing mapping";
  // Only whole mappings are unmapped or given access.
  r = vmm.Unmap(va, kChunk, &freed);
  EXPECT_NE(r.message.find("whole mappings"), std::string::npos) << r.message;
  EXPECT_FALSE(vmm.SetAccess(va + kChunk, kChunk, 0, 3).ok());
  EXPECT_EQ(vmm.SetAccess(va, 2 * kChunk, 0, 1).code, kErrNotSupported) << "read-only";
  EXPECT_EQ(vmm.SetAccess(va, 2 * kChunk, 1, 3).code, kErrNotSupported) << "another device";
  ASSERT_TRUE(vmm.SetAccess(va, 2 * kChunk, 0, 3).ok());
  EXPECT_TRUE(vmm.Check(va, 2 * kChunk, "t").ok());
  EXPECT_FALSE(vmm.Check(va + kChunk, 2 * kChunk, "t").ok());
  // The memory is real and shared: a second mapping sees the first one's bytes.
  ASSERT_TRUE(vmm.Map(va + 8 * kChunk, 2 * kChunk, 0, h).ok());
  ASSERT_TRUE(vmm.SetAccess(va + 8 * kChunk, 2 * kChunk, 0, 3).ok());
  std::memset(reinterpret_cast<void*>(va + kChunk + 5), 0x5a, 3);
  EXPECT_EQ(*reinterpret_cast<const uint8_t*>(va + 9 * kChunk + 6), 0x5a);
  ASSERT_TRUE(vmm.Release(h, &freed).ok());
  EXPECT_TRUE(freed.empty()) << "freed while mapped";
  EXPECT_FALSE(vmm.Release(h, &freed).ok()) << "released twice";
  EXPECT_FALSE(vmm.Map(va + 16 * kChunk, kChunk, 0, h).ok()) << "a released handle";
  ASSERT_TRUE(vmm.Unmap(va, 2 * kChunk, &freed).ok());
  EXPECT_TRUE(freed.empty()) << "freed while still mapped elsewhere";
  ASSERT_TRUE(vmm.Unmap(va + 8 * kChunk, 2 * kChunk, &freed).ok());
  EXPECT_EQ(freed, std::vector<uint64_t>{h});
  EXPECT_EQ(vmm.bytes_on(0), 0u);
  EXPECT_FALSE(vmm.Check(va, 1, "t").ok()) << "unmapped space reads as mapped";
  EXPECT_FALSE(vmm.FreeReservation(va, kChunk).ok()) << "not the reservation's size";
  ASSERT_TRUE(vmm.FreeReservation(va, 64 * kMiB).ok());
  EXPECT_FALSE(vmm.Reserved(va));
  // The freed space is reserved again (coalesced with the rest of the window).
  uint64_t again = 0;
  ASSERT_TRUE(vmm.Reserve(512 * kMiB, 0, va, &again).ok());
  EXPECT_EQ(again, va) << "the hint, free again, was not honoured";
}

}  // namespace
}  // namespace gpool::remote::server
