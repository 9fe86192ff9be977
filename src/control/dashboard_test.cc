// The dashboard's server side against a real Controller (SQLite store in a temp dir) and a real
// httplib server on a free loopback port: embedded files are served byte-exact, and
// /api/history reports the controller's registered GPUs and jobs.
#include "control/dashboard.h"

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "control/controller.h"
#include "control/store_test_util.h"
#include "control/web_assets.h"

namespace gpool::control {
namespace {

std::string ReadSource(const std::string& rel) {
  const char* root = std::getenv("GPOOL_SOURCE_DIR");
  std::ifstream f(std::string(root ? root : ".") + "/" + rel, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class DashboardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("dashboard");
    ControllerOptions o;
    o.store_url = "sqlite:" + dir_ + "/state.db";
    o.tenant_quotas = {{"research", 8}};
    auto c = Controller::Open(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    controller_ = std::move(*c);
    for (const char* name : {"n1", "n2"}) {
      v1::RegisterNodeRequest r;
      r.mutable_node()->set_name(name);
      r.mutable_node()->set_gpus(8);
      r.mutable_node()->set_gpu_model("H100");
      ASSERT_TRUE(controller_->RegisterNode(r).ok());
    }
    DashboardOptions d;
    d.sample_interval = std::chrono::milliseconds(20);
    d.history_capacity = 1000;
    dashboard_ = std::make_unique<Dashboard>(controller_.get(), d);
    dashboard_->Register(&http_);
    port_ = http_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { http_.listen_after_bind(); });
    // bind_to_any_port already listens: clients queue in the backlog until the loop accepts.
  }
  void TearDown() override {
    http_.stop();
    if (thread_.joinable()) thread_.join();
    dashboard_.reset();
    controller_.reset();
    std::filesystem::remove_all(dir_);
  }
  httplib::Result Get(const std::string& path) {
    httplib::Client cli("127.0.0.1", port_);
    return cli.Get(path);
  }

  std::string dir_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Dashboard> dashboard_;
  httplib::Server http_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(DashboardTest, ServesEveryEmbeddedFileByteExact) {
  ASSERT_GE(kWebAssetCount, 3u);  // index.html, app.js, style.css at least
  for (size_t i = 0; i < kWebAssetCount; ++i) {
    const WebAsset& a = kWebAssets[i];
    auto r = Get(a.path);
    ASSERT_TRUE(r) << a.path;
    EXPECT_EQ(r->status, 200) << a.path;
    EXPECT_EQ(r->get_header_value("Content-Type"), a.content_type) << a.path;
    EXPECT_EQ(r->body, ReadSource(std::string("web") + a.path)) << a.path << " differs from web/";
  }
}

TEST_F(DashboardTest, RootIsTheIndexPage) {
  auto r = Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, ReadSource("web/index.html"));
  EXPECT_NE(r->body.find("app.js"), std::string::npos);
  ASSERT_NE(FindWebAsset("/"), nullptr);
  EXPECT_EQ(FindWebAsset("/nope.js"), nullptr);
  auto missing = Get("/nope.js");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST_F(DashboardTest, HistoryReportsTheControllersGpusAndJobs) {
  v1::SubmitJobRequest s;
  s.set_tenant("research");
  s.set_gpus(8);
  ASSERT_TRUE(controller_->Submit(s).ok());
  s.set_gpus(16);
  ASSERT_TRUE(controller_->Submit(s).ok());
  ASSERT_TRUE(controller_->ScheduleOnce().ok());  // binds one of the two (16 GPUs in total)

  dashboard_->Start();
  // The sampler's first sample is taken at Start; wait (bounded) until one shows the bind.
  nlohmann::json last;
  for (int i = 0; i < 500; ++i) {
    auto r = Get("/api/history");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    last = nlohmann::json::parse(r->body);
    if (!last["samples"].empty() && last["samples"].back()["running"] == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(last["samples"].empty()) << last.dump();
  auto x = last["samples"].back();
  EXPECT_EQ(x["total"], 16);
  EXPECT_EQ(x["running"], 1);
  EXPECT_EQ(x["pending"], 1);
  EXPECT_EQ(x["nodes_ready"], 2);
  EXPECT_EQ(x["down"], 0);
  EXPECT_EQ(x["allocated"], x["tenants"]["research"]);
  EXPECT_GT(x["allocated"].get<int>(), 0);
  EXPECT_EQ(last["interval_ms"], 20);
  EXPECT_EQ(last["capacity"], 1000);

  // `since` filters: nothing is newer than the last sample's own time... unless the sampler
  // added one meanwhile, which must then be strictly newer.
  int64_t t = x["t"];
  auto r = Get("/api/history?since=" + std::to_string(t));
  ASSERT_TRUE(r);
  // Keep the parsed document alive: a range-for over parse(...)["samples"] would iterate a member
  // of a temporary that is already destroyed (C++20 does not extend its lifetime).
  const nlohmann::json newer = nlohmann::json::parse(r->body);
  for (const auto& s2 : newer["samples"]) EXPECT_GT(s2["t"].get<int64_t>(), t);
  dashboard_->Stop();
  EXPECT_GE(dashboard_->history().size(), 1u);
}

TEST_F(DashboardTest, BadSinceIsABadRequestNamingTheParameter) {
  auto r = Get("/api/history?since=yesterday");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  auto j = nlohmann::json::parse(r->body);
  EXPECT_NE(j["error"].get<std::string>().find("since"), std::string::npos) << r->body;
  EXPECT_NE(j["error"].get<std::string>().find("yesterday"), std::string::npos) << r->body;
}

}  // namespace
}  // namespace gpool::control
