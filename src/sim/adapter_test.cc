// The job fields of the generic format reach the scheduler (adapter) and the engine honours them.
#include "sim/adapter.h"

#include <gtest/gtest.h>

#include "sim/baselines.h"
#include "sim/engine.h"
#include "sim/test_clusters.h"
#include "sim/test_util.h"
#include "sim/trace.h"

namespace gpool::sim {
namespace {

using test::Job;
using test::OneLeaf;

using test::Jobs;
using test::RunPolicy;

TEST(Adapter, CarriesJobFieldsFromTheTraceToJobSpec) {
  auto w = ParseJobsCsv(
      "submit_s,run_s,gpus,locality,preemptible,min_runtime_s,est_s,kind,allow_split\n"
      "0,100,8,leaf!,false,60,250,inference,true\n"
      "1,100,8,pod,1,,none,interactive,0\n"
      "2,100,8,,,,,,\n",
      "j.csv");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  auto noest = ParseJobsCsv("submit_s,run_s,gpus\n0,100,8\n", "k.csv");
  ASSERT_TRUE(noest.ok()) << noest.status().ToString();
  SimCluster c = TestTwoPodTree();
  sched::ClusterSpec spec = ToClusterSpec(c);
  TenantQueues q = MakeTenantQueues(*w, c.total_gpus());

  auto a = ToJobSpec(w->jobs[0], spec, q, 8);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->locality.level, sched::Level::kLeaf);
  EXPECT_TRUE(a->locality.required);
  EXPECT_FALSE(a->preemptible);
  EXPECT_DOUBLE_EQ(a->min_runtime_s, 60);
  EXPECT_DOUBLE_EQ(a->est_runtime_s, 250);
  EXPECT_EQ(a->kind, sched::JobKind::kInference);
  EXPECT_TRUE(a->allow_split);

  auto b = ToJobSpec(w->jobs[1], spec, q, 8);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->locality.level, sched::Level::kPod);
  EXPECT_FALSE(b->locality.required);
  EXPECT_TRUE(b->preemptible);
  EXPECT_DOUBLE_EQ(b->est_runtime_s, 0);  // "none": no estimate
  EXPECT_EQ(b->kind, sched::JobKind::kInteractive);
  EXPECT_FALSE(b->allow_split);

  // An est_s column with an empty cell: no estimate; empty cells elsewhere keep the defaults.
  auto d = ToJobSpec(w->jobs[2], spec, q, 8);
  ASSERT_TRUE(d.ok());
  EXPECT_DOUBLE_EQ(d->est_runtime_s, 0);
  EXPECT_EQ(d->locality.level, sched::Level::kFabric);
  EXPECT_FALSE(d->locality.required);
  EXPECT_TRUE(d->preemptible);
  EXPECT_EQ(d->kind, sched::JobKind::kTraining);

  // No est_s column: the exact run time, as before the column existed.
  auto e = ToJobSpec(noest->jobs[0], spec, MakeTenantQueues(*noest, c.total_gpus()), 8);
  ASSERT_TRUE(e.ok());
  EXPECT_DOUBLE_EQ(e->est_runtime_s, 100);
}

TEST(Adapter, RequiredLocalityLargerThanAnyDomainIsRejected) {
  SimCluster c = TestTwoPodTree();  // leaves of 16 GPUs, pods of 32
  sched::ClusterSpec spec = ToClusterSpec(c);
  Workload w = Jobs({Job(0, 10, 32), Job(1, 10, 32), Job(2, 10, 16)});
  w.jobs[0].locality = {.level = sched::Level::kLeaf, .required = true};
  w.jobs[1].locality = {.level = sched::Level::kPod, .required = true};
  w.jobs[2].locality = {.level = sched::Level::kNode, .required = true};
  TenantQueues q = MakeTenantQueues(w, c.total_gpus());
  auto leaf = ToJobSpec(w.jobs[0], spec, q, 8);
  auto pod = ToJobSpec(w.jobs[1], spec, q, 8);
  auto node = ToJobSpec(w.jobs[2], spec, q, 8);
  ASSERT_TRUE(leaf.ok() && pod.ok() && node.ok());
  Status s = FitsEmptyCluster(*leaf, spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("32 GPUs in one leaf"), std::string::npos) << s.message();
  EXPECT_TRUE(FitsEmptyCluster(*pod, spec).ok());
  EXPECT_FALSE(FitsEmptyCluster(*node, spec).ok());  // 16 GPUs on one 8-GPU host

  // In a run: rejected and reported, not left waiting forever.
  auto r = RunPolicy(c, w, "gpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->jobs[0].rejected);
  EXPECT_FALSE(r->jobs[1].rejected);
  EXPECT_TRUE(r->jobs[2].rejected);
  EXPECT_EQ(r->unfinished, 0);
}

// Eight 8-GPU jobs fill the eight hosts of TestTwoPodTree (two per leaf, two leaves per pod);
// the ones on odd hosts end at 10 s, leaving one free host in each leaf. A 16-GPU job arriving
// at 20 s fits only across leaves until the even hosts' jobs end at 1,000 s.
Workload FragmentedLeaves(sched::Locality locality) {
  std::vector<SimJob> jobs;
  for (int h = 0; h < 8; ++h) jobs.push_back(Job(0, h % 2 == 0 ? 1000 : 10, 8));
  SimJob x = Job(20, 50, 16);
  x.name = "x";
  x.locality = locality;
  jobs.push_back(x);
  return Jobs(std::move(jobs));
}

TEST(EngineJobFields, RequiredLeafLocalityWaitsRatherThanSpanningLeaves) {
  SimCluster c = TestTwoPodTree();
  const uint32_t x = 8;  // its id
  // First fit puts job h on host h, so the free hosts at 20 s are one per leaf.
  auto any = RunPolicy(c, FragmentedLeaves({}), "fifo");
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_DOUBLE_EQ(any->jobs[x].start_s, 20);
  EXPECT_EQ(any->jobs[x].leaves, 2);

  auto pod = RunPolicy(c, FragmentedLeaves({.level = sched::Level::kPod, .required = true}), "fifo");
  ASSERT_TRUE(pod.ok()) << pod.status().ToString();
  EXPECT_DOUBLE_EQ(pod->jobs[x].start_s, 20);  // two leaves of one pod are allowed
  EXPECT_EQ(pod->jobs[x].leaves, 2);

  const sched::Locality leaf{.level = sched::Level::kLeaf, .required = true};
  for (const auto& name : PolicyNames()) {
    SimFeedback fb;
    auto r = RunPolicy(c, FragmentedLeaves(leaf), name, &fb);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
    EXPECT_EQ(r->jobs[x].leaves, 1) << name;
    EXPECT_GE(r->jobs[x].finish_s, 0) << name;
    EXPECT_EQ(r->unfinished, 0) << name;
    if (name == "fifo") {
      EXPECT_DOUBLE_EQ(r->jobs[x].start_s, 1000);
    }
  }
}

// Places every pending job on hosts 0 and 2 (leaves l0 and l1 of TestTwoPodTree), whatever
// its locality.
class SpanningPolicy final : public sched::Policy {
 public:
  std::string_view name() const override { return "spanning"; }
  StatusOr<sched::Decisions> Schedule(const sched::SchedulingInput& in) const override {
    sched::Decisions d;
    for (const auto& j : *in.pending) {
      d.binds.push_back({.job = j.id,
                         .placement = {.tasks = {{.node = sched::NodeId(0), .gpu_mask = 0xff, .gpu_milli = 1000},
                                                 {.node = sched::NodeId(2), .gpu_mask = 0xff, .gpu_milli = 1000}}}});
    }
    return d;
  }
};

TEST(EngineJobFields, EngineRefusesABindAcrossARequiredLocality) {
  SimCluster c = TestTwoPodTree();
  SpanningPolicy p;
  Workload pod = Jobs({Job(0, 10, 16)});
  pod.jobs[0].locality = {.level = sched::Level::kPod, .required = true};
  EXPECT_TRUE(RunSimulation(c, pod, p, {}).ok());  // l0 and l1 share pod p0
  Workload leaf = pod;
  leaf.jobs[0].locality.level = sched::Level::kLeaf;
  auto r = RunSimulation(c, leaf, p, {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("policy 'spanning' placed job 0 (j0) across more than one leaf"),
            std::string::npos)
      << r.status().message();
}

// Tiresias preempts the job with the most attained service (over a GPU-hour, run >= 600 s) for
// a newcomer; gpool preempts lower priority for higher. Neither may take a non-preemptible job.
TEST(EngineJobFields, NonPreemptibleJobIsNeverAVictim) {
  SimCluster c = OneLeaf(1);
  for (const char* name : {"tiresias", "gpool"}) {
    for (bool preemptible : {true, false}) {
      SimJob a = Job(0, 10000, 8);
      a.preemptible = preemptible;
      SimJob b = Job(1000, 100, 8);
      b.priority = 1;
      SimFeedback fb;
      auto r = RunPolicy(c, Jobs({a, b}), name, &fb);
      ASSERT_TRUE(r.ok()) << name << ": " << r.status().ToString();
      if (preemptible) {
        EXPECT_EQ(r->jobs[0].preemptions, 1) << name;  // the scenario does preempt
        EXPECT_LT(r->jobs[1].start_s, 10000) << name;
      } else {
        EXPECT_EQ(r->preemptions, 0) << name;
        EXPECT_DOUBLE_EQ(r->jobs[0].finish_s, 10000) << name;
        EXPECT_DOUBLE_EQ(r->jobs[1].start_s, 10000) << name;
      }
    }
  }
}

// min_runtime_s holds off a priority preemption until the victim has run that long.
TEST(EngineJobFields, MinRuntimeDelaysPreemption) {
  SimCluster c = OneLeaf(1);
  SimJob a = Job(0, 10000, 8);
  a.min_runtime_s = 3000;
  SimJob b = Job(1000, 100, 8);
  b.priority = 1;
  SimJob tick = Job(3500, 10, 0);  // an event after 3,000 s (a CPU task) gives a cycle then
  tick.cpu_milli = 1000;
  auto r = RunPolicy(c, Jobs({a, b, tick}), "gpool");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs[0].preemptions, 1);
  EXPECT_GE(r->jobs[1].start_s, 3000);
  EXPECT_LT(r->jobs[1].start_s, 10000);
}

}  // namespace
}  // namespace gpool::sim
