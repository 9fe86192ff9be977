#include "control/partitions.h"

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
  auto p = PlanPartitions({{"a", {0xa1, 0xa2, 0xa1}}, {"b c", {0xb1}}, {"idle", {}}}, o);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto lines = Lines(p->partitions_conf);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines.front(),
            "Default=0x7fff : ALL=limited, ALL_SWITCHES=full, 0x0000000000001111=full, SELF=full ;");
  EXPECT_EQ(lines.back(), "Default=0x7fff : SELF=full ;");
  EXPECT_EQ(lines[1], fmt::format("a=0x{:04x} : 0x00000000000000a1=full, 0x00000000000000a2=full ;",
                                  p->pkeys.at("a")));
  EXPECT_EQ(lines[2], fmt::format("b_c=0x{:04x} : 0x00000000000000b1=full ;", p->pkeys.at("b c")));
  EXPECT_EQ(lines[3], fmt::format("idle=0x{:04x} : ;", p->pkeys.at("idle")));
  // Tenant a's partition has none of b's ports.
  EXPECT_THAT(lines[1], Not(HasSubstr("b1")));
  EXPECT_EQ(p->sls.at("a"), 2);
  EXPECT_EQ(p->sls.at("b c"), 1);
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
