// A GoogleTest fixture for end-to-end tests of the gpool command: runs the built binary (GPOOL_BIN,
// set by CTest) through the shell in a per-test scratch directory, the way a user or script
// would, and captures exit status, stdout and stderr.
//
// Thread safety: one fixture per test, as GoogleTest uses it.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace gpool::clitest {

namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Result {
  int code = -1;
  std::string out, err;
};

inline std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* bin = std::getenv("GPOOL_BIN");
    ASSERT_NE(bin, nullptr) << "GPOOL_BIN must name the gpool binary (CTest sets it)";
    bin_ = bin;
    dir_ = fs::temp_directory_path() /
           ("gpool-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `gpool ARGS` through the shell (ARGS are quoted by the caller where needed).
  Result Run(const std::string& args) {
    fs::path out = dir_ / "stdout", err = dir_ / "stderr";
    std::string cmd = "'" + bin_ + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "'";
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }
  Json RunJson(const std::string& args) {
    Result r = Run(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    Json j = Json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << args << ": not one JSON document:\n" << r.out;
    return j;
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(dir_ / name) << text;
  }

  std::string bin_;
  fs::path dir_;
};

}  // namespace gpool::clitest
