#include "slurm/request.h"

#include <gtest/gtest.h>

namespace gpool::slurm {
namespace {

TEST(PluginArgs, ParsesEveryKeyAndRequiresTheController) {
  StatusOr<PluginConfig> c = ParsePluginArgs(
      {"controller=127.0.0.1:7070", "gpool=/opt/gpool/bin/gpool", "token_file=/etc/gpool/tok",
       "tenant=research", "transport=ucx", "wait=2m", "max_time=1h"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->controller, "127.0.0.1:7070");
  EXPECT_EQ(c->gpool, "/opt/gpool/bin/gpool");
  EXPECT_EQ(c->token_file, "/etc/gpool/tok");
  EXPECT_EQ(c->tenant, "research");
  EXPECT_EQ(c->transport, "ucx");
  EXPECT_EQ(c->wait_s, 120);
  EXPECT_EQ(c->hold_s, 3600);
  EXPECT_EQ(ClientLibDir(*c), "/opt/gpool/bin/../lib");

  StatusOr<PluginConfig> missing = ParsePluginArgs({"gpool=/x/gpool"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("controller=HOST:PORT is required"),
            std::string::npos);
}

TEST(PluginArgs, RefusesWhatItCannotUseNamingIt) {
  auto error = [](std::vector<std::string> args) {
    args.insert(args.begin(), "controller=h:1");
    StatusOr<PluginConfig> c = ParsePluginArgs(args);
    return c.ok() ? std::string("ok") : c.status().message();
  };
  EXPECT_NE(error({"gpool=/g", "colour=red"}).find("unknown argument 'colour'"), std::string::npos);
  EXPECT_NE(error({"gpool=/g", "tenant"}).find("'tenant': want key=value"), std::string::npos);
  EXPECT_NE(error({"gpool=/g", "tenant="}).find("tenant: empty value"), std::string::npos);
  EXPECT_NE(error({"gpool=/g", "tenant=a\nb"}).find("control character"), std::string::npos);
  EXPECT_NE(error({"gpool=/g", "transport=ib"}).find("want tcp or ucx"), std::string::npos);
  EXPECT_NE(error({"gpool=/g", "wait=-1s"}).find("wait"), std::string::npos);
  EXPECT_NE(error({"gpool=gpool"}).find("lib_dir=DIR is required"), std::string::npos);
  EXPECT_EQ(error({"gpool=gpool", "lib_dir=/l"}), "ok");
}

TEST(GpusOption, WholeGpusAndFractionsRoundedToTheMilliUnit) {
  StatusOr<GpuRequest> two = ParseGpusOption("2");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->gpus, 2);
  EXPECT_EQ(two->gpu_milli, 0);
  StatusOr<GpuRequest> half = ParseGpusOption("0.5");
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->gpus, 1);
  EXPECT_EQ(half->gpu_milli, 500);
  StatusOr<GpuRequest> tiny = ParseGpusOption("0.0014");
  ASSERT_TRUE(tiny.ok());
  EXPECT_EQ(tiny->gpu_milli, 1);
  EXPECT_TRUE(ParseGpusOption("1.0").ok());
}

TEST(GpusOption, RefusesWhatWouldSilentlyBecomeSomethingElse) {
  for (const char* bad : {"0.0004", "0", "-1", "1.5", "0.9996", "two", "", "2x", "nan", "inf"}) {
    StatusOr<GpuRequest> r = ParseGpusOption(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("--gpool-gpus="), std::string::npos) << bad;
    }
  }
  EXPECT_NE(ParseGpusOption("0.0004").status().message().find("below the unit"),
            std::string::npos);
}

TEST(Argv, SubmitNamesTheStepAndHoldsForMaxTime) {
  PluginConfig c;
  c.gpool = "/g/gpool";
  c.controller = "h:1";
  c.token_file = "/t";
  c.tenant = "research";
  c.hold_s = 600;
  std::vector<std::string> whole = SubmitArgv(c, GpuRequest{2, 0}, 41, 3);
  std::vector<std::string> want = {"/g/gpool", "submit", "--controller", "h:1", "--token-file",
                                   "/t", "--tenant", "research", "--gpus", "2", "--duration",
                                   "600s", "--request-id", "slurm-41.3", "--", "sleep", "600"};
  EXPECT_EQ(whole, want);
  std::vector<std::string> quarter = SubmitArgv(c, GpuRequest{1, 250}, 41, 4);
  ASSERT_GE(quarter.size(), 10u);
  EXPECT_EQ(quarter[8], "--gpu-fraction");
  EXPECT_EQ(quarter[9], "0.250");
  EXPECT_EQ(quarter[13], "slurm-41.4");

  c.token_file.clear();
  std::vector<std::string> describe = JobArgv(c, "describe", "j7");
  std::vector<std::string> want_describe = {"/g/gpool", "jobs", "describe", "j7", "--controller",
                                            "h:1", "-o", "json"};
  EXPECT_EQ(describe, want_describe);
}

TEST(Outputs, SubmitStateAndLeases) {
  EXPECT_EQ(*ParseSubmitOutput("j00000042\n"), "j00000042");
  EXPECT_FALSE(ParseSubmitOutput("").ok());
  EXPECT_FALSE(ParseSubmitOutput("error: no\nmore").ok());

  EXPECT_EQ(*ParseJobState(R"({"id": "j1", "state": "running"})"), "running");
  EXPECT_FALSE(ParseJobState("{").ok());
  EXPECT_FALSE(ParseJobState(R"({"state": 3})").ok());

  StatusOr<StepGpus> g = ParseLeases("0 10.0.0.1:7000/0 TOKA\n1 10.0.0.2:7000/1 TOKB\n\n");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->devices, "10.0.0.1:7000/0,10.0.0.2:7000/1");
  EXPECT_EQ(g->leases, "TOKA,TOKB");
  EXPECT_EQ(g->count, 2);
  EXPECT_NE(ParseLeases("").status().message().find("no leases"), std::string::npos);
  EXPECT_NE(ParseLeases("0 h:1/0 A\n0 h:1/1\n").status().message().find("line 2"),
            std::string::npos);
  EXPECT_FALSE(ParseLeases("0 h:1/0 A,B\n").ok());
}

TEST(Env, ClientRuntimeComesFirst) {
  EXPECT_EQ(PrependLibraryPath("/g/lib", ""), "/g/lib");
  EXPECT_EQ(PrependLibraryPath("/g/lib", "/usr/local/lib"), "/g/lib:/usr/local/lib");
}

}  // namespace
}  // namespace gpool::slurm
