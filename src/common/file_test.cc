#include "common/file.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace gpool {
namespace {

TEST(FileTest, AtomicWriteThenRead) {
  auto dir = std::filesystem::temp_directory_path() / ("gpool_file_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "a.conf").string();
  ASSERT_TRUE(WriteFileAtomic(path, "one\n").ok());
  ASSERT_TRUE(WriteFileAtomic(path, "two\n").ok());
  EXPECT_EQ(*ReadFile(path), "two\n");
  // No temporary file is left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  std::filesystem::remove_all(dir);
}

TEST(FileTest, MissingFileNamesThePath) {
  auto r = ReadFile("/nonexistent/gpool/x.topo");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/gpool/x.topo"), std::string::npos);
}

TEST(FileTest, LineReaderCountsLines) {
  LineReader r("a\r\n\nlast");
  std::string_view l;
  ASSERT_TRUE(r.Next(&l));
  EXPECT_EQ(l, "a");
  ASSERT_TRUE(r.Next(&l));
  EXPECT_EQ(l, "");
  ASSERT_TRUE(r.Next(&l));
  EXPECT_EQ(l, "last");
  EXPECT_EQ(r.line_number(), 3);
  EXPECT_FALSE(r.Next(&l));
}

TEST(FileTest, SplitAndTrim) {
  auto f = Split("a,,b", ',');
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(f[1], "");
  EXPECT_EQ(Trim("  x y\t"), "x y");
}

}  // namespace
}  // namespace gpool
