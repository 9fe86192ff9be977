// The HTTP endpoint under token auth (http_auth.h), in process: a real Controller on a temp
// SQLite store, the real ApiServer with its HTTP port on loopback, and httplib clients carrying
// no, unknown, expired, tenant, agent, metrics and admin tokens.
#include "control/http_auth.h"

#include <httplib.h>

#include <filesystem>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "control/api.h"
#include "control/store_test_util.h"

namespace gpool::control {
namespace {

constexpr const char* kTokens = R"(
admin-token-0123456789 admin
tenant-a-token-0123456 tenant a
tenant-b-token-0123456 tenant b
agent-token-0123456789 agent
metrics-token-01234567 metrics
expired-a-token-012345 tenant a expires=2020-01-01
later-a-token-01234567 tenant a expires=2999-12-31T23:59:59Z
)";

class HttpAuthTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("http_auth_test"); }
  void Start(bool metrics_public = false) {
    auto auth = TokenAuth::Parse(kTokens, "tokens");
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::make_unique<TokenAuth>(std::move(*auth));
    ControllerOptions o;
    o.store_url = "sqlite:" + dir_ + "/state.db";
    o.tenant_quotas = {{"a", 8}, {"b", 8}};
    auto c = Controller::Open(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    controller_ = std::move(*c);
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_name("n1");
    r.mutable_node()->set_gpus(8);
    r.mutable_node()->set_gpu_model("H100");
    ASSERT_TRUE(controller_->RegisterNode(r).ok());
    for (const char* t : {"a", "b", "b"}) {
      v1::SubmitJobRequest s;
      s.set_tenant(t);
      s.set_gpus(2);
      ASSERT_TRUE(controller_->Submit(s).ok());
    }
    ASSERT_TRUE(controller_->ScheduleOnce().ok());  // all three run: per-tenant GPUs in use
    api_ = std::make_unique<ApiServer>(controller_.get());
    ApiOptions ao;
    ao.grpc_listen = "127.0.0.1:0";
    ao.http_listen = "127.0.0.1:0";
    ao.auth = auth_.get();
    ao.metrics_public = metrics_public;
    Status s = api_->Start(ao);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void TearDown() override {
    if (api_) api_->Shutdown();
    api_.reset();
    controller_.reset();
    std::filesystem::remove_all(dir_);
  }
  httplib::Result Get(const std::string& path, const std::string& token = "") {
    httplib::Client cli("127.0.0.1", api_->http_port());
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    return cli.Get(path, h);
  }
  static std::string Error(const httplib::Result& r) {
    return nlohmann::json::parse(r->body).value("error", "");
  }

  std::string dir_;
  std::unique_ptr<TokenAuth> auth_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<ApiServer> api_;
};

TEST_F(HttpAuthTest, NoUnknownOrExpiredTokenIs401NamingWhy) {
  Start();
  for (const char* path : {"/api/state", "/api/history", "/api/fabric", "/metrics"}) {
    auto r = Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 401) << path;
    EXPECT_NE(Error(r).find("missing 'Authorization: Bearer TOKEN'"), std::string::npos) << r->body;
    EXPECT_NE(Error(r).find(path), std::string::npos) << r->body;
    EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer realm=\"gpool\"");
    EXPECT_EQ(r->body.find("\"jobs\""), std::string::npos);
  }
  auto r = Get("/api/state", "not-a-known-token-at-all");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Error(r), "/api/state: unknown token");
  r = Get("/api/state", "expired-a-token-012345");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Error(r), "/api/state: token expired at 2020-01-01T00:00:00Z");
  r = Get("/api/state", "later-a-token-01234567");  // expires, but not yet
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // A header that is not a bearer token.
  httplib::Client cli("127.0.0.1", api_->http_port());
  r = cli.Get("/api/state", {{"Authorization", "Basic YWRtaW46YWRtaW4="}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(Error(r).find("not 'Bearer TOKEN'"), std::string::npos) << r->body;
}

TEST_F(HttpAuthTest, TenantSeesOnlyItsJobsAndUsageAdminSeesAll) {
  Start();
  auto r = Get("/api/state", "admin-token-0123456789");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto all = nlohmann::json::parse(r->body);
  EXPECT_EQ(all["jobs"].size(), 3u);
  EXPECT_EQ(all["tenants"].size(), 2u);
  EXPECT_EQ(all["nodes"].size(), 1u);

  r = Get("/api/state", "tenant-b-token-0123456");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto b = nlohmann::json::parse(r->body);
  ASSERT_EQ(b["jobs"].size(), 2u);
  for (const auto& j : b["jobs"]) EXPECT_EQ(j["tenant"], "b");
  ASSERT_EQ(b["tenants"].size(), 1u);
  EXPECT_EQ(b["tenants"][0]["name"], "b");
  EXPECT_EQ(b["nodes"].size(), 1u);  // nodes are shared, as in `gpool nodes`

  // History: one sample is taken at start; a's view keeps only a's series.
  r = Get("/api/history", "tenant-a-token-0123456");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto h = nlohmann::json::parse(r->body);
  ASSERT_GE(h["samples"].size(), 1u);
  for (const auto& s : h["samples"]) {
    for (const auto& [name, gpus] : s["tenants"].items()) EXPECT_EQ(name, "a") << s.dump();
  }
  EXPECT_EQ(h["samples"][0]["tenants"]["a"], 2);
  r = Get("/api/history", "admin-token-0123456789");
  ASSERT_TRUE(r);
  auto ha = nlohmann::json::parse(r->body);
  EXPECT_EQ(ha["samples"][0]["tenants"]["b"], 4);
  EXPECT_EQ(ha["samples"][0]["tenants"]["a"], 2);

  // Without --fabric /api/fabric is 404 for an authorized caller (not 401/403).
  r = Get("/api/fabric", "tenant-a-token-0123456");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

TEST_F(HttpAuthTest, RolesOutsideTheirPagesAre403) {
  Start();
  auto r = Get("/api/state", "agent-token-0123456789");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(Error(r), "/api/state: not allowed for an agent token");
  r = Get("/api/state", "metrics-token-01234567");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  // /metrics has every tenant's series: admin and metrics tokens only.
  r = Get("/metrics", "tenant-a-token-0123456");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_EQ(Error(r), "/metrics: not allowed for a tenant token");
  for (const char* tok : {"metrics-token-01234567", "admin-token-0123456789"}) {
    r = Get("/metrics", tok);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << tok;
    EXPECT_NE(r->body.find("gpool_tenant_gpus{tenant=\"b\"} 4"), std::string::npos) << r->body;
  }
  // The page itself carries no data and must load to read its token.
  r = Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = Get("/app.js");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpAuthTest, MetricsPublicOpensOnlyMetrics) {
  Start(/*metrics_public=*/true);
  auto r = Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("gpool_running_jobs"), std::string::npos);
  r = Get("/api/state");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
}

}  // namespace
}  // namespace gpool::control
