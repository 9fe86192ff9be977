// The Prometheus text the controller serves on /metrics, read back with the exposition format's
// grammar: a label value (a tenant name) must not end its label set or its line (issue 29: a
// tenant named `x"} 1` + newline + a metric line added that metric to /metrics).
#include "control/metrics.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "control/controller_test_util.h"

namespace gpool::control {
namespace {

using ::testing::HasSubstr;

struct PromSample {
  std::string name;
  std::map<std::string, std::string> labels;  // unescaped values
  std::string value;
};

// One sample line, as Prometheus's text parser reads it; nullopt when it is not one.
std::optional<PromSample> ParseSample(const std::string& line) {
  PromSample s;
  size_t i = 0;
  auto name_char = [](char c, bool first) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
  };
  while (i < line.size() && name_char(line[i], i == 0)) s.name += line[i++];
  if (s.name.empty()) return std::nullopt;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      std::string key;
      while (i < line.size() && name_char(line[i], key.empty())) key += line[i++];
      if (key.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return std::nullopt;
      i += 2;
      std::string v;
      for (;; ++i) {
        if (i >= line.size()) return std::nullopt;
        if (line[i] == '"') break;
        if (line[i] == '\\') {
          if (++i >= line.size()) return std::nullopt;
          if (line[i] == 'n') {
            v += '\n';
          } else if (line[i] == '\\' || line[i] == '"') {
            v += line[i];
          } else {
            return std::nullopt;  // the format knows no other escape
          }
        } else {
          v += line[i];
        }
      }
      ++i;  // the closing quote
      if (!s.labels.emplace(key, v).second) return std::nullopt;
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return std::nullopt;
    ++i;  // '}'
  }
  if (i >= line.size() || line[i] != ' ') return std::nullopt;
  s.value = line.substr(i + 1);
  if (s.value.empty() || s.value.find(' ') != std::string::npos) return std::nullopt;
  return s;
}

// Every line of `text` is a comment or a sample; the samples.
std::vector<PromSample> ParseExposition(const std::string& text) {
  std::vector<PromSample> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl - start);
    start = nl == std::string::npos ? text.size() : nl + 1;
    if (line.empty() || line[0] == '#') continue;
    auto s = ParseSample(line);
    EXPECT_TRUE(s.has_value()) << "not a sample line: " << line;
    if (s) out.push_back(*s);
  }
  return out;
}

const std::string kInjection = "x\"} 1\ngpool_leader 1\n# \\";

TEST(MetricsTest, LabelValuesCannotEndTheirLabelSetOrLine) {
  std::string out;
  RenderGauge(&out, "gpool_tenant_gpus", "GPUs in use by tenant.",
              {{PromLabel("tenant", kInjection), 3}, {PromLabel("tenant", "a"), 1}});
  std::vector<PromSample> samples = ParseExposition(out);
  ASSERT_EQ(samples.size(), 2u) << out;
  EXPECT_EQ(samples[0].name, "gpool_tenant_gpus");
  EXPECT_EQ(samples[0].labels.at("tenant"), kInjection);  // escaped, and read back unchanged
  EXPECT_EQ(samples[0].value, "3");
  EXPECT_EQ(samples[1].labels.at("tenant"), "a");
  // Control bytes the format cannot escape are replaced, not passed through.
  EXPECT_EQ(PromLabel("t", std::string("a\rb\0c", 5)), "t=\"a?b?c\"");
}

class MetricsControllerTest : public ControllerFixture {
 protected:
  MetricsControllerTest() : ControllerFixture("metrics_test") {}
};

// Tenants named by --quota reach /metrics even before they have jobs: refused at Open.
TEST_F(MetricsControllerTest, QuotaTenantsWithInjectionsAreRefused) {
  opts_.tenant_quotas = {{"a", 8}, {kInjection, 8}};
  auto c = Controller::Open(opts_);
  ASSERT_FALSE(c.ok()) << (*c)->MetricsText();
  EXPECT_THAT(c.status().message(), HasSubstr("quota tenant: 'x\"} 1\\ngpool_leader"));
}

TEST_F(MetricsControllerTest, EveryLineOfTheControllersPageParses) {
  opts_.tenant_quotas = {{"a", 8}, {"team_b.prod-2", 8}};
  Open();
  v1::SubmitJobRequest r;
  r.set_tenant("team_b.prod-2");
  r.set_gpus(1);
  ASSERT_TRUE(c_->Submit(r).ok());
  std::vector<PromSample> samples = ParseExposition(c_->MetricsText());
  int tenant_rows = 0;
  for (const PromSample& s : samples) tenant_rows += s.name == "gpool_tenant_queue_length";
  EXPECT_EQ(tenant_rows, 2);
}

}  // namespace
}  // namespace gpool::control
