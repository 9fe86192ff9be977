// The gRPC surface, in process on an ephemeral loopback port: token roles and tenant scoping,
// the job watch stream, malformed requests as INVALID_ARGUMENT, and 1,000 concurrent submits.
#include "control/api.h"

#include <filesystem>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "control/auth.h"
#include "control/store_test_util.h"
#include "gpool/v1/gpool.grpc.pb.h"

namespace gpool::control {
namespace {

constexpr const char* kTokens = R"(# test tokens
admin-token-0123456789 admin
tenant-a-token-0123456 tenant a
tenant-b-token-0123456 tenant b
agent-token-0123456789 agent
)";

class ApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("api_test");
    auto auth = TokenAuth::Parse(kTokens, "tokens");
    ASSERT_TRUE(auth.ok()) << auth.status().ToString();
    auth_ = std::make_unique<TokenAuth>(std::move(*auth));
  }
  // keep_finished_jobs: the retention count bound (the controller's default unless given).
  void Start(bool with_auth, int64_t keep_finished_jobs = 10000) {
    ControllerOptions o;
    o.store_url = "sqlite:" + dir_ + "/state.db";
    o.keep_finished_jobs = keep_finished_jobs;
    o.schedule_interval = std::chrono::milliseconds(20);
    auto c = Controller::Open(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    controller_ = std::move(*c);
    api_ = std::make_unique<ApiServer>(controller_.get());
    ApiOptions ao;
    ao.grpc_listen = "127.0.0.1:0";
    ao.auth = with_auth ? auth_.get() : nullptr;
    Status s = api_->Start(ao);
    ASSERT_TRUE(s.ok()) << s.ToString();
    // The CLI's and agents' own channel (an IP literal: gRPC's ipv4: resolver, ChannelTarget).
    ClientOptions co;
    co.address = fmt::format("127.0.0.1:{}", api_->grpc_port());
    auto ch = MakeChannel(co);
    ASSERT_TRUE(ch.ok()) << ch.status().ToString();
    channel_ = std::move(*ch);
    jobs_ = v1::JobService::NewStub(channel_);
    nodes_ = v1::NodeService::NewStub(channel_);
    tenants_ = v1::TenantService::NewStub(channel_);
  }
  void TearDown() override {
    if (api_) api_->Shutdown();
    if (controller_) controller_->Stop();
    api_.reset();
    controller_.reset();
    std::filesystem::remove_all(dir_);
  }
  grpc::Status SubmitAs(const std::string& token, const std::string& tenant, v1::Job* out,
                        int gpus = 1) {
    grpc::ClientContext ctx;
    AttachToken(&ctx, token);
    v1::SubmitJobRequest r;
    r.set_tenant(tenant);
    r.set_gpus(gpus);
    return jobs_->Submit(&ctx, r, out);
  }

  std::string dir_;
  std::unique_ptr<TokenAuth> auth_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<ApiServer> api_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<v1::NodeService::Stub> nodes_;
  std::unique_ptr<v1::TenantService::Stub> tenants_;
};

// IP literals go to gRPC's sockaddr resolvers (no DNS lookup); anything else as given.
TEST(ChannelTargetTest, IpLiteralsSkipTheResolver) {
  EXPECT_EQ(ChannelTarget("127.0.0.1:7070"), "ipv4:127.0.0.1:7070");
  EXPECT_EQ(ChannelTarget("[::1]:7070"), "ipv6:[::1]:7070");
  EXPECT_EQ(ChannelTarget("ctl.example:7070"), "ctl.example:7070");
  EXPECT_EQ(ChannelTarget("localhost:7070"), "localhost:7070");
  EXPECT_EQ(ChannelTarget("127.0.0.1"), "127.0.0.1");          // no port: gRPC's default
  EXPECT_EQ(ChannelTarget("127.0.0.1:x"), "127.0.0.1:x");      // gRPC reports it
  EXPECT_EQ(ChannelTarget("1.2.3:80"), "1.2.3:80");            // not a dotted quad
  EXPECT_EQ(ChannelTarget("dns:///127.0.0.1:80"), "dns:///127.0.0.1:80");  // a URI stays
  EXPECT_EQ(ChannelTarget("ipv4:127.0.0.1:80"), "ipv4:127.0.0.1:80");
}

TEST(TokenAuthTest, FileErrorsNameTheLine) {
  auto a = TokenAuth::Parse("admin-token-0123456789 admin\nshort admin\n", "tok.txt");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("tok.txt:2: token"), std::string::npos)
      << a.status().message();
  a = TokenAuth::Parse("admin-token-0123456789 root\n", "tok.txt");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("tok.txt:1: role 'root'"), std::string::npos);
  a = TokenAuth::Parse("# nothing\n", "tok.txt");
  EXPECT_FALSE(a.ok());
  a = TokenAuth::Parse(kTokens, "t");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->Lookup("tenant-a-token-0123456")->tenant, "a");
  EXPECT_FALSE(a->Lookup("tenant-a-token-012345").has_value());
  EXPECT_EQ(BearerToken("Bearer xyz"), "xyz");
  EXPECT_EQ(BearerToken("Basic xyz"), "");
}

TEST(TokenAuthTest, TenantNamesFollowTheNamesSyntax) {
  auto a = TokenAuth::Parse("admin-token-0123456789 admin\nt-token-0123456789abcd tenant a\"}x\n",
                            "tok.txt");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("tok.txt:2: tenant: 'a\"}x'"), std::string::npos)
      << a.status().message();
}

TEST(TokenAuthTest, ExpiryIsParsedAndChecked) {
  auto a = TokenAuth::Parse(
      "old-token-0123456789ab tenant a expires=2020-01-01\n"
      "new-token-0123456789ab admin expires=2030-06-01T12:00:00Z\n"
      "met-token-0123456789ab metrics\n", "tok.txt");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const int64_t jan2020 = 1577836800;  // 2020-01-01T00:00:00Z
  EXPECT_TRUE(a->Authenticate("old-token-0123456789ab", jan2020 - 1).ok());
  auto p = a->Authenticate("old-token-0123456789ab", jan2020);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(), "token expired at 2020-01-01T00:00:00Z");
  p = a->Authenticate("new-token-0123456789ab", jan2020);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->role, Role::kAdmin);
  EXPECT_EQ(p->expires_unix_s, 1906545600);  // 2030-06-01T12:00:00Z
  EXPECT_EQ(a->Authenticate("met-token-0123456789ab", jan2020)->role, Role::kMetrics);
  EXPECT_EQ(a->Authenticate("", jan2020).status().message(), "missing token");
  EXPECT_EQ(a->Authenticate("zzz-token-0123456789ab", jan2020).status().message(), "unknown token");
  auto bad = TokenAuth::Parse("x-token-0123456789abcd admin expires=tomorrow\n", "tok.txt");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tok.txt:1: expires: want UTC"), std::string::npos)
      << bad.status().message();
  bad = TokenAuth::Parse("x-token-0123456789abcd admin expires=2030-01-01T00:00:00\n", "tok.txt");
  EXPECT_FALSE(bad.ok());  // no Z: not UTC
}

TEST_F(ApiTest, ExpiredTokenIsUnauthenticated) {
  auto auth = TokenAuth::Parse(
      "expired-token-01234567 admin expires=2020-01-01\n"
      "valid-token-0123456789 admin expires=2999-01-01\n", "tokens");
  ASSERT_TRUE(auth.ok()) << auth.status().ToString();
  *auth_ = std::move(*auth);
  Start(/*with_auth=*/true);
  v1::Job j;
  grpc::Status s = SubmitAs("expired-token-01234567", "a", &j);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(s.error_message(), "JobService.Submit: token expired at 2020-01-01T00:00:00Z");
  EXPECT_TRUE(SubmitAs("valid-token-0123456789", "a", &j).ok());
}

// Issue 29: names reach partitions.conf and /metrics, so the API refuses what the names syntax
// (common/names.h) does not allow, naming the field; commands may not hold NUL bytes.
TEST_F(ApiTest, NamesAreCheckedAtTheApi) {
  Start(/*with_auth=*/false);
  auto invalid = [](const grpc::Status& s, const std::string& want) {
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_NE(s.error_message().find(want), std::string::npos) << s.error_message();
  };
  v1::Job j;
  invalid(SubmitAs("", "evil\nDefault=0x7fff : ALL=full ;", &j), "tenant: 'evil\\nDefault");
  invalid(SubmitAs("", "x\"} 1\ngpool_leader 1", &j), "character '\"' at position 1");
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest r;
    r.set_gpus(1);
    r.set_client_request_id("a b");
    invalid(jobs_->Submit(&ctx, r, &j), "client_request_id: 'a b'");
  }
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest r;
    r.set_gpus(1);
    r.add_command("true");
    r.add_command(std::string("a\0b", 3));
    invalid(jobs_->Submit(&ctx, r, &j), "command[1]: a NUL byte at position 1");
  }
  {
    grpc::ClientContext ctx;
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_name("n1\nx");
    r.mutable_node()->set_gpus(8);
    r.mutable_node()->set_gpu_model("H100");
    v1::RegisterNodeResponse resp;
    invalid(nodes_->Register(&ctx, r, &resp), "node.name: 'n1\\nx'");
  }
  {
    grpc::ClientContext ctx;
    v1::ListJobsRequest r;
    r.set_tenant("a b");
    v1::ListJobsResponse resp;
    invalid(jobs_->List(&ctx, r, &resp), "tenant: 'a b'");
  }
  {
    grpc::ClientContext ctx;
    v1::GetJobRequest r;
    r.set_id("j1\n");
    invalid(jobs_->Get(&ctx, r, &j), "id: 'j1\\n'");
  }
  // Valid names pass.
  EXPECT_TRUE(SubmitAs("", "team_b.prod-2", &j).ok());
  EXPECT_EQ(j.tenant(), "team_b.prod-2");
}

// Archived jobs (retention) follow the live jobs' rules: a tenant sees, lists and cancels its
// own only; another tenant's archived job does not exist for it.
TEST_F(ApiTest, TenantsSeeOnlyTheirOwnArchivedJobs) {
  Start(/*with_auth=*/true, /*keep_finished_jobs=*/0);
  v1::Job ja, jb, j;
  ASSERT_TRUE(SubmitAs("tenant-a-token-0123456", "a", &ja).ok());
  ASSERT_TRUE(SubmitAs("tenant-b-token-0123456", "b", &jb).ok());
  for (const v1::Job* x : {&ja, &jb}) ASSERT_TRUE(controller_->Cancel(x->id()).ok());
  ASSERT_TRUE(controller_->RetainOnce().ok());
  ASSERT_EQ(controller_->ListJobs({}).jobs_size(), 0) << "both should have left the live state";

  auto get = [&](const std::string& token, const std::string& id, v1::Job* out) {
    grpc::ClientContext ctx;
    AttachToken(&ctx, token);
    v1::GetJobRequest g;
    g.set_id(id);
    return jobs_->Get(&ctx, g, out).error_code();
  };
  EXPECT_EQ(get("tenant-a-token-0123456", ja.id(), &j), grpc::StatusCode::OK);
  EXPECT_EQ(j.state(), "cancelled");
  EXPECT_EQ(get("tenant-a-token-0123456", jb.id(), &j), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(get("admin-token-0123456789", jb.id(), &j), grpc::StatusCode::OK);
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "tenant-a-token-0123456");
    v1::CancelJobRequest c;
    c.set_id(jb.id());
    EXPECT_EQ(jobs_->Cancel(&ctx, c, &j).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  auto history = [&](const std::string& token, const std::string& tenant,
                     std::set<std::string>* ids) {
    grpc::ClientContext ctx;
    AttachToken(&ctx, token);
    v1::ListJobsRequest r;
    r.set_history(true);
    r.set_tenant(tenant);
    v1::ListJobsResponse resp;
    grpc::Status s = jobs_->List(&ctx, r, &resp);
    for (const auto& x : resp.jobs()) ids->insert(x.id());
    return s.error_code();
  };
  std::set<std::string> ids;
  EXPECT_EQ(history("tenant-a-token-0123456", "", &ids), grpc::StatusCode::OK);
  EXPECT_EQ(ids, std::set<std::string>{ja.id()});
  ids.clear();
  EXPECT_EQ(history("tenant-a-token-0123456", "b", &ids), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(ids.empty());
  EXPECT_EQ(history("admin-token-0123456789", "", &ids), grpc::StatusCode::OK);
  EXPECT_EQ(ids, (std::set<std::string>{ja.id(), jb.id()}));
}

TEST_F(ApiTest, TokensScopeEveryCall) {
  Start(/*with_auth=*/true);
  v1::Job ja, jb, j;
  // No token, unknown token.
  grpc::Status s = SubmitAs("", "a", &j);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  s = SubmitAs("nope-nope-nope-nope-nope", "a", &j);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // A tenant acts for itself only; an empty tenant means its own.
  ASSERT_TRUE(SubmitAs("tenant-a-token-0123456", "a", &ja).ok());
  s = SubmitAs("tenant-a-token-0123456", "b", &j);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  ASSERT_TRUE(SubmitAs("tenant-b-token-0123456", "", &jb).ok());
  EXPECT_EQ(jb.tenant(), "b");
  // Agents don't submit; admins submit for anyone.
  s = SubmitAs("agent-token-0123456789", "a", &j);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(SubmitAs("admin-token-0123456789", "c", &j).ok());

  auto list = [&](const std::string& token) {
    grpc::ClientContext ctx;
    AttachToken(&ctx, token);
    v1::ListJobsResponse resp;
    EXPECT_TRUE(jobs_->List(&ctx, v1::ListJobsRequest(), &resp).ok());
    std::set<std::string> t;
    for (const auto& x : resp.jobs()) t.insert(x.tenant());
    return t;
  };
  EXPECT_EQ(list("tenant-a-token-0123456"), std::set<std::string>{"a"});
  EXPECT_EQ(list("admin-token-0123456789"), (std::set<std::string>{"a", "b", "c"}));
  // Another tenant's job does not exist for a: Get and Cancel say NOT_FOUND, nothing changes.
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "tenant-a-token-0123456");
    v1::GetJobRequest g;
    g.set_id(jb.id());
    EXPECT_EQ(jobs_->Get(&ctx, g, &j).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "tenant-a-token-0123456");
    v1::CancelJobRequest c;
    c.set_id(jb.id());
    EXPECT_EQ(jobs_->Cancel(&ctx, c, &j).error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(controller_->GetJob(jb.id())->state(), "pending");
  }
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "tenant-b-token-0123456");
    v1::CancelJobRequest c;
    c.set_id(jb.id());
    ASSERT_TRUE(jobs_->Cancel(&ctx, c, &j).ok());
    EXPECT_EQ(j.state(), "cancelled");
  }
  // Nodes: agents register and heartbeat; tenants may not.
  v1::RegisterNodeRequest reg;
  reg.mutable_node()->set_name("n0");
  reg.mutable_node()->set_gpus(8);
  reg.mutable_node()->set_gpu_model("H100");
  v1::RegisterNodeResponse rr;
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "tenant-a-token-0123456");
    EXPECT_EQ(nodes_->Register(&ctx, reg, &rr).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "agent-token-0123456789");
    EXPECT_TRUE(nodes_->Register(&ctx, reg, &rr).ok());
  }
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "agent-token-0123456789");
    v1::ListNodesResponse ln;
    EXPECT_EQ(nodes_->List(&ctx, v1::ListNodesRequest(), &ln).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }
  // Tenants see their own row only.
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "tenant-a-token-0123456");
    v1::ListTenantsResponse lt;
    ASSERT_TRUE(tenants_->List(&ctx, v1::ListTenantsRequest(), &lt).ok());
    ASSERT_EQ(lt.tenants_size(), 1);
    EXPECT_EQ(lt.tenants(0).name(), "a");
  }
  // A tenant's watch is scoped too.
  {
    grpc::ClientContext ctx;
    AttachToken(&ctx, "tenant-a-token-0123456");
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::WatchJobsRequest w;
    w.set_tenant("b");
    auto reader = jobs_->Watch(&ctx, w);
    v1::JobEvent ev;
    EXPECT_FALSE(reader->Read(&ev));
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
}

TEST_F(ApiTest, MalformedRequestsAreInvalidArgumentNamingTheField) {
  Start(/*with_auth=*/false);
  v1::Job j;
  grpc::ClientContext ctx;
  v1::SubmitJobRequest r;
  r.set_tenant("t");
  r.set_gpus(3);
  r.set_gpu_milli(100);
  grpc::Status s = jobs_->Submit(&ctx, r, &j);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("gpus"), std::string::npos) << s.error_message();
  grpc::ClientContext ctx2;
  v1::HeartbeatRequest hb;
  v1::HeartbeatResponse hr;
  s = nodes_->Heartbeat(&ctx2, hb, &hr);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("node"), std::string::npos);
}

TEST_F(ApiTest, WatchStreamsSubmitAndBind) {
  Start(/*with_auth=*/false);
  v1::RegisterNodeRequest reg;
  reg.mutable_node()->set_name("n0");
  reg.mutable_node()->set_gpus(8);
  reg.mutable_node()->set_gpu_model("H100");
  ASSERT_TRUE(controller_->RegisterNode(reg).ok());
  controller_->Start();
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::WatchJobsRequest w;
  w.set_initial(true);
  auto reader = jobs_->Watch(&ctx, w);
  v1::Job j;
  grpc::ClientContext sctx;
  v1::SubmitJobRequest r;
  r.set_tenant("t");
  r.set_gpus(8);
  ASSERT_TRUE(jobs_->Submit(&sctx, r, &j).ok());
  v1::JobEvent ev;
  std::vector<std::string> states;
  while (reader->Read(&ev)) {
    if (ev.job().id() != j.id()) continue;
    states.push_back(ev.job().state());
    if (ev.job().state() == "running") break;
  }
  ctx.TryCancel();
  (void)reader->Finish();
  // Bound at submit (Controller::Submit, inline bind): the reply is the bound job, and the
  // stream's one event of it is the commit that created and bound it.
  EXPECT_EQ(j.state(), "running");
  EXPECT_EQ(states, std::vector<std::string>{"running"});
}

TEST_F(ApiTest, ThousandConcurrentSubmitsAllAcknowledgedUniqueAndPersisted) {
  Start(/*with_auth=*/false);
  constexpr int kThreads = 40, kPerThread = 25;  // 1,000 submits, 40 in flight at a time
  std::vector<std::vector<std::string>> ids(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        v1::SubmitJobRequest r;
        r.set_tenant(fmt::format("t{}", t % 3));
        r.set_gpus(1 + i % 8);
        r.set_client_request_id(fmt::format("c{}-{}", t, i));
        v1::Job j;
        grpc::Status s = jobs_->Submit(&ctx, r, &j);
        if (s.ok()) {
          ids[t].push_back(j.id());
        } else {
          ++failures;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  std::set<std::string> all;
  for (const auto& v : ids) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 1000u);
  // Persisted: a fresh controller on the same store has exactly these jobs.
  api_->Shutdown();
  controller_.reset();
  ControllerOptions o;
  o.store_url = "sqlite:" + dir_ + "/state.db";
  auto c = Controller::Open(o);
  ASSERT_TRUE(c.ok());
  std::set<std::string> recovered;
  v1::ListJobsResponse jobs = (*c)->ListJobs({});
  for (const auto& j : jobs.jobs()) recovered.insert(j.id());
  EXPECT_EQ(recovered, all);
}

}  // namespace
}  // namespace gpool::control
