#include "control/partitions.h"

#include <regex.h>
#include <set>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/file.h"

namespace gpool::control {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  for (auto l : Split(text, '\n')) {
    l = Trim(l);
    if (!l.empty() && l[0] != '#') out.emplace_back(l);
  }
  return out;
}

TEST(PartitionsTest, PkeysAreStableUniqueAndInRange) {
  auto a = AssignPkeys({"alpha", "beta"});
  auto b = AssignPkeys({"gamma", "alpha", "delta"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->at("alpha"), b->at("alpha"));  // no collision here: the key follows the name
  std::vector<std::string> many;
  for (int i = 0; i < 2000; ++i) many.push_back("tenant-" + std::to_string(i));
  auto m = AssignPkeys(many);
  ASSERT_TRUE(m.ok());
  std::set<uint16_t> keys;
  for (const auto& [t, k] : *m) {
    EXPECT_GE(k, 1);
    EXPECT_LE(k, 0x7ffe);
    keys.insert(k);
  }
  EXPECT_EQ(keys.size(), 2000u);
}

TEST(PartitionsTest, OnePartitionPerTenantWithItsPortsManagementFirstSelfLast) {
  PartitionOptions o;
  o.tenant_sl = {{"a", 2}};
  o.default_sl = 1;
  o.management_ports = {0x1111};
  o.partitions_path = "/run/gpool/partitions.conf";
  o.qos_policy_path = "/run/gpool/qos-policy.conf";
  auto p = PlanPartitions({{"a", {0xa1, 0xa2, 0xa1}}, {"b-c.2", {0xb1}}, {"idle", {}}}, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto lines = Lines(p->partitions_conf);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines.front(),
            "Default=0x7fff : ALL=limited, ALL_SWITCHES=full, 0x0000000000001111=full, SELF=full ;");
  EXPECT_EQ(lines.back(), "Default=0x7fff : SELF=full ;");
  EXPECT_EQ(lines[1], fmt::format("a=0x{:04x} : 0x00000000000000a1=full, 0x00000000000000a2=full ;",
                                  p->pkeys.at("a")));
  EXPECT_EQ(lines[2], fmt::format("b-c.2=0x{:04x} : 0x00000000000000b1=full ;", p->pkeys.at("b-c.2")));
  EXPECT_EQ(lines[3], fmt::format("idle=0x{:04x} : ;", p->pkeys.at("idle")));
  // Tenant a's partition has none of b's ports.
  EXPECT_THAT(lines[1], Not(HasSubstr("b1")));
  EXPECT_EQ(p->sls.at("a"), 2);
  EXPECT_EQ(p->sls.at("b-c.2"), 1);
  EXPECT_THAT(p->qos_policy, HasSubstr(fmt::format("any, pkey 0x{:04x} : 2", p->pkeys.at("a"))));
  EXPECT_THAT(p->qos_policy, HasSubstr("default : 1"));
  EXPECT_THAT(p->qos_policy, HasSubstr("end-qos-ulps"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos TRUE\n"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos_max_vls 8\n"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos_sl2vl 0,1,2,3,4,5,6,7,7,7,7,7,7,7,7,7\n"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos_vlarb_low 0:4,1:4,2:4,3:4,4:4,5:4,6:4,7:4\n"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("partition_config_file /run/gpool/partitions.conf\n"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos_policy_file /run/gpool/qos-policy.conf\n"));
}

// Issue 29: a tenant named with a line break and a partition line wrote a live
// `Default=0x7fff : ALL=full ;` into partitions.conf (every port a full member of the
// management partition), through the `# tenant NAME` comment. Such names are refused, and so
// are option values that would do the same to the QoS policy or opensm.conf.
TEST(PartitionsTest, NamesThatWouldWriteTheirOwnLinesAreRefused) {
  const std::string evil = "evil\nDefault=0x7fff : ALL=full ;";
  auto p = PlanPartitions({{"a", {0xa1}}, {evil, {0xe1}}}, {});
  ASSERT_FALSE(p.ok()) << p->partitions_conf;
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("tenant: 'evil\\nDefault=0x7fff : ALL=full ;'"));
  EXPECT_THAT(p.status().message(), HasSubstr("at position 4"));
  for (const char* bad : {"a b", "a,b", "a:b", "a;b", "a=b", "a#b", "a\rb", "a]b", ""}) {
    EXPECT_FALSE(PlanPartitions({{bad, {0x1}}}, {}).ok()) << bad;
  }
  PartitionOptions o;
  o.tenant_sl = {{"x\ny=0x0001 : ALL=full ;", 1}};
  EXPECT_THAT(PlanPartitions({}, o).status().message(), HasSubstr("tenant_sl tenant"));
  o = {};
  o.partitions_path = "/run/p.conf\nqos FALSE";
  EXPECT_THAT(PlanPartitions({}, o).status().message(), HasSubstr("partitions_path"));
  o = {};
  o.qos_policy_path = "/run/q policy";
  EXPECT_THAT(PlanPartitions({}, o).status().message(), HasSubstr("qos_policy_path"));
}

// What OpenSM reads back: every line that is not a comment is one partition definition, one
// per tenant plus the two management lines, whatever the (valid) names.
TEST(PartitionsTest, EveryLineIsOnePartitionDefinition) {
  std::vector<TenantPorts> tenants = {{"a", {0xa1}}, {"team_b.prod-2", {0xb1, 0xb2}}, {"7", {}}};
  PartitionOptions o;
  o.tenant_sl = {{"team_b.prod-2", 3}};
  auto p = PlanPartitions(tenants, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  // POSIX ERE rather than std::regex: GCC 12's -Wmaybe-uninitialized misfires inside
  // std::regex's std::function at -O1 with ASan (the sanitizer tree builds with -Werror).
  auto matches = [](const std::string& text, const char* ere) {
    regex_t re;
    if (regcomp(&re, ere, REG_EXTENDED | REG_NOSUB) != 0) return false;
    const bool ok = regexec(&re, text.c_str(), 0, nullptr, 0) == 0;
    regfree(&re);
    return ok;
  };
  const char* def =
      "^(Default=0x7fff|[A-Za-z0-9][A-Za-z0-9._-]*=0x[0-9a-f]{4}) :"
      "( [A-Z_]+=(full|limited)| 0x[0-9a-f]{16}=full)?(, ([A-Z_]+|0x[0-9a-f]{16})=(full|limited))* ;$";
  auto lines = Lines(p->partitions_conf);
  ASSERT_EQ(lines.size(), tenants.size() + 2);
  for (const std::string& l : lines) EXPECT_TRUE(matches(l, def)) << l;
  for (const auto& l : Lines(p->qos_policy)) {
    EXPECT_TRUE(matches(l, "^(qos-ulps|end-qos-ulps|default : [0-9]+|"
                           "any, pkey 0x[0-9a-f]{4} : [0-9]+  # [A-Za-z0-9._-]+)$"))
        << l;
  }
}

TEST(PartitionsTest, WeightsAndHighPriorityVls) {
  PartitionOptions o;
  o.max_vls = 4;
  o.vl_weights = {8, 16, 32, 64};
  o.high_vls = {3};
  o.high_limit = 10;
  auto p = PlanPartitions({}, o);
  ASSERT_TRUE(p.ok());
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos_vlarb_high 0:0,1:0,2:0,3:255\n"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos_vlarb_low 0:8,1:16,2:32,3:0\n"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos_high_limit 10\n"));
  EXPECT_THAT(p->opensm_conf, HasSubstr("qos_sl2vl 0,1,2,3,3,3"));
}

TEST(PartitionsTest, BadOptionsNameTheField) {
  PartitionOptions o;
  o.tenant_sl = {{"x", 16}};
  auto p = PlanPartitions({}, o);
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(p.status().message(), HasSubstr("tenant_sl[x]"));
  o = {};
  o.max_vls = 3;
  EXPECT_THAT(PlanPartitions({}, o).status().message(), HasSubstr("max_vls"));
  o = {};
  o.vl_weights = {1, 2};
  EXPECT_THAT(PlanPartitions({}, o).status().message(), HasSubstr("vl_weights"));
  EXPECT_THAT(PlanPartitions({{"", {1}}}, {}).status().message(), HasSubstr("tenant"));
}

}  // namespace
}  // namespace gpool::control
