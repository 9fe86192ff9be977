// Test-only: the fixture shared by the controller's tests (controller_test.cc,
// controller_power_test.cc): a controller on a fresh SQLite store in a temp dir, driven by a
// manual clock, reopened on the same store to test restarts. Not thread-safe (gtest fixtures).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "control/controller.h"
#include "control/store_test_util.h"

namespace gpool::control {

class ControllerFixture : public ::testing::Test {
 protected:
  static constexpr int64_t kStartNs = 1'750'000'000LL * 1'000'000'000;  // a Unix time, for leases

  explicit ControllerFixture(std::string dir_prefix) : dir_prefix_(std::move(dir_prefix)) {}
  void SetUp() override {
    dir_ = MakeTempDir(dir_prefix_);
    clock_.SetNanos(kStartNs);
    opts_.store_url = "sqlite:" + dir_ + "/state.db";
    opts_.node_timeout = std::chrono::milliseconds(5000);
    opts_.clock = &clock_;
  }
  void TearDown() override {
    c_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Opens the controller, or restarts it on the same store.
  void Open() {
    c_.reset();
    auto c = Controller::Open(opts_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    c_ = std::move(*c);
  }

  std::string dir_prefix_;
  std::string dir_;
  ManualClock clock_;
  ControllerOptions opts_;
  std::unique_ptr<Controller> c_;
};

}  // namespace gpool::control
