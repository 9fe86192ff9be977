#include "remote/transport/socket.h"

#include <gtest/gtest.h>

namespace gpool::remote::net {
namespace {

TEST(SplitHostPortTest, AcceptsV4NamesAndBracketedV6) {
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(SplitHostPort("127.0.0.1:5000", &host, &port).ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 5000);
  ASSERT_TRUE(SplitHostPort("[::1]:0", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(SplitHostPort("gpu-7:65535", &host, &port).ok());
  EXPECT_EQ(host, "gpu-7");
}

TEST(SplitHostPortTest, RejectsBadPorts) {
  std::string host;
  uint16_t port = 0;
  for (const char* bad : {"host", "host:", "host:65536", "host:12x", "[::1:5", "[::1]5"}) {
    Status s = SplitHostPort(bad, &host, &port);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s.message();
  }
}

TEST(SliceTest, CoversRangesAcrossParts) {
  std::vector<std::byte> a(5), b(0), c(7);
  std::vector<ByteSpan> parts = {ByteSpan(a), ByteSpan(b), ByteSpan(c)};
  auto v = SliceParts(parts, 3, 6);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].iov_base, a.data() + 3);
  EXPECT_EQ(v[0].iov_len, 2u);
  EXPECT_EQ(v[1].iov_base, c.data());
  EXPECT_EQ(v[1].iov_len, 4u);
  EXPECT_TRUE(SliceParts(parts, 12, 0).empty());
}

}  // namespace
}  // namespace gpool::remote::net
