// Records read back from the store are checked before use (records.h): a bad one (written by an
// older gpool before names were checked, or edited by hand) stops the controller's start with
// the key and the field named, instead of reaching /metrics and partitions.conf or crashing.
#include "control/records.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "control/controller_test_util.h"
#include "control/store.h"

namespace gpool::control {
namespace {

using ::testing::HasSubstr;

class RecordsTest : public ControllerFixture {
 protected:
  RecordsTest() : ControllerFixture("records_test") {}
  // Writes a record the way an older controller (or a hand edit) would have.
  void Put(const std::string& key, const std::string& json) {
    auto store = OpenStore(opts_.store_url);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    TxnRequest t;
    t.Put(key, json);
    auto r = (*store)->Txn(t);
    ASSERT_TRUE(r.ok() && r->succeeded) << r.status().ToString();
  }
  Status OpenStatus() {
    auto c = Controller::Open(opts_);
    return c.status();
  }
};

TEST_F(RecordsTest, AJobWithAnInjectedTenantStopsTheStart) {
  Put("/jobs/j00000001",
      R"({"id":"j00000001","tenant":"evil\nDefault=0x7fff : ALL=full ;","state":"pending","gpus":1})");
  Status s = OpenStatus();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("store key /jobs/j00000001: tenant: 'evil\\nDefault"));
  EXPECT_THAT(s.message(), HasSubstr("fix or delete it"));
}

TEST_F(RecordsTest, ABadJobIdIsReportedNotACrash) {
  // The controller parses the number of every job id: "jx" used to throw out of Open.
  Put("/jobs/jx", R"({"id":"jx","tenant":"a","state":"pending","gpus":1})");
  EXPECT_THAT(OpenStatus().message(), HasSubstr("store key /jobs/jx: id: want 'j' and 1-19 digits"));
}

TEST_F(RecordsTest, AnAllocationOnABadNodeNameOrAMismatchedKeyIsReported) {
  Put("/jobs/j00000001",
      R"({"id":"j00000001","tenant":"a","state":"running","gpus":1,)"
      R"("allocations":[{"task":0,"node":"n1\"} 1"}]})");
  EXPECT_THAT(OpenStatus().message(), HasSubstr("allocations[0].node: 'n1\"} 1'"));
  Put("/jobs/j00000001", R"({"id":"j00000002","tenant":"a","state":"pending","gpus":1})");
  EXPECT_THAT(OpenStatus().message(), HasSubstr("id 'j00000002' does not match the key"));
}

TEST_F(RecordsTest, ANodeWithABadNameIsReported) {
  Put("/nodes/n x", R"({"name":"n x","gpus":8,"gpu_model":"H100"})");
  EXPECT_THAT(OpenStatus().message(), HasSubstr("store key /nodes/n x: name: 'n x'"));
}

TEST_F(RecordsTest, GoodRecordsLoad) {
  Put("/nodes/gpu01.example.com", R"({"name":"gpu01.example.com","gpus":8,"gpu_model":"H100"})");
  Put("/jobs/j00000007",
      R"({"id":"j00000007","tenant":"team_b.prod-2","state":"running","gpus":1,)"
      R"("num_tasks":1,"gpus_per_task":1,"allocations":[{"task":0,"node":"gpu01.example.com","gpu_mask":1}]})");
  Open();
  EXPECT_EQ(c_->GetJob("j00000007")->tenant(), "team_b.prod-2");
}

TEST(RecordsUnitTest, JobIds) {
  EXPECT_TRUE(ValidateJobId("id", "j00000042").ok());
  EXPECT_TRUE(ValidateJobId("id", "j1").ok());
  for (const char* bad : {"", "j", "00000042", "J1", "j1a", "j-1", "j123456789012345678901"}) {
    EXPECT_FALSE(ValidateJobId("id", bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace gpool::control
