#include "control/history.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace gpool::control {
namespace {

UtilSample At(int64_t t, int64_t allocated) {
  UtilSample s;
  s.t_ms = t;
  s.gpus_total = 16;
  s.gpus_allocated = allocated;
  return s;
}

TEST(History, KeepsSamplesOldestFirstBeforeWrapping) {
  History h(4);
  h.Add(At(10, 1));
  h.Add(At(20, 2));
  auto all = h.Since(0);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].t_ms, 10);
  EXPECT_EQ(all[1].t_ms, 20);
  EXPECT_EQ(h.size(), 2u);
}

TEST(History, OverwritesTheOldestWhenFull) {
  History h(3);
  for (int i = 1; i <= 7; ++i) h.Add(At(i * 10, i));
  EXPECT_EQ(h.size(), 3u);
  auto all = h.Since(0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].t_ms, 50);  // 10..40 were overwritten
  EXPECT_EQ(all[1].t_ms, 60);
  EXPECT_EQ(all[2].t_ms, 70);
  EXPECT_EQ(all[2].gpus_allocated, 7);
}

TEST(History, SinceReturnsOnlyNewerSamples) {
  History h(8);
  for (int i = 1; i <= 5; ++i) h.Add(At(i * 10, i));
  auto newer = h.Since(30);  // strictly newer: a client passes the last t it has
  ASSERT_EQ(newer.size(), 2u);
  EXPECT_EQ(newer[0].t_ms, 40);
  EXPECT_TRUE(h.Since(50).empty());
}

TEST(History, ZeroCapacityKeepsOne) {
  History h(0);
  h.Add(At(1, 1));
  h.Add(At(2, 2));
  EXPECT_EQ(h.capacity(), 1u);
  ASSERT_EQ(h.Since(0).size(), 1u);
  EXPECT_EQ(h.Since(0)[0].t_ms, 2);
}

TEST(History, JsonHasEveryField) {
  History h(2);
  UtilSample s = At(1000, 12);
  s.gpus_down = 8;
  s.nodes_ready = 1;
  s.nodes_down = 1;
  s.jobs_running = 3;
  s.jobs_pending = 4;
  s.tenant_gpus = {{"prod", 8}, {"research", 4}};
  h.Add(s);
  auto j = nlohmann::json::parse(h.Json(0, 500));
  EXPECT_EQ(j["capacity"], 2);
  EXPECT_EQ(j["interval_ms"], 500);
  ASSERT_EQ(j["samples"].size(), 1u);
  auto x = j["samples"][0];
  EXPECT_EQ(x["t"], 1000);
  EXPECT_EQ(x["total"], 16);
  EXPECT_EQ(x["allocated"], 12);
  EXPECT_EQ(x["down"], 8);
  EXPECT_EQ(x["nodes_ready"], 1);
  EXPECT_EQ(x["nodes_down"], 1);
  EXPECT_EQ(x["running"], 3);
  EXPECT_EQ(x["pending"], 4);
  EXPECT_EQ(x["tenants"]["prod"], 8);
  EXPECT_EQ(x["tenants"]["research"], 4);
  EXPECT_EQ(nlohmann::json::parse(h.Json(1000, 500))["samples"].size(), 0u);
}

TEST(History, ParseSinceMs) {
  EXPECT_EQ(*ParseSinceMs(""), 0);
  EXPECT_EQ(*ParseSinceMs("1700000000000"), 1700000000000);
  for (const char* bad : {"abc", "12x", "-5", "1e3"}) {
    auto r = ParseSinceMs(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("since"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().ToString();
  }
  // The message goes into a JSON error body: request bytes that are not UTF-8 (or break lines)
  // are escaped, so the body can be written (`?since=%ff` was an HTTP 500).
  auto r = ParseSinceMs("1\xff\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "since: want Unix milliseconds >= 0, got '1\\xff\\n'");
  EXPECT_NO_THROW((void)nlohmann::json({{"error", r.status().message()}}).dump());
}

}  // namespace
}  // namespace gpool::control
