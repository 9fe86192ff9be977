// Remote attachment through the controller (controller.h, allocations.h): a pooled or remote
// job's placement becomes allocations whose lent GPUs stay on their own nodes (counted there,
// in tenant usage and caps, and after a restart), its host is told its devices and leases, a
// lost lending node or host frees all of the job's GPUs, a node that stops serving fails the
// job, and preemption takes lent GPUs back. In process, on a real SQLite store; nodes register
// as agents do (RegisterNode) and time is a ManualClock.
#include <gtest/gtest.h>

#include <bit>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "control/allocations.h"
#include "control/controller.h"
#include "control/controller_test_util.h"
#include "remote/lease/lease.h"

namespace gpool::control {
namespace {

const std::string kKey(32, 'k');

class RemoteTest : public ControllerFixture {
 protected:
  RemoteTest() : ControllerFixture("controller_remote_test") {}
  void SetUp() override {
    ControllerFixture::SetUp();
    opts_.lease_key = kKey;
  }

  // A node; `server` "" = no GPU server. `cpu_milli` 0: no task asking CPU can run there, so
  // tests choose the host of a remote-attached task by its CPU request.
  void AddNode(const std::string& name, int gpus, const std::string& server,
               int64_t cpu_milli = 0) {
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_name(name);
    r.mutable_node()->set_gpus(gpus);
    if (gpus > 0) r.mutable_node()->set_gpu_model("H100");
    r.mutable_node()->set_gpu_memory_bytes(80ull << 30);
    r.mutable_node()->set_cpu_milli(cpu_milli);
    r.mutable_node()->set_memory_bytes(512ull << 30);
    r.mutable_node()->set_gpu_server(server);
    auto s = c_->RegisterNode(r);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    names_.insert(name);
  }
  // cpu-0: a CPU-only host; gpu-1, gpu-2: `gpus` GPUs each behind GPU servers, no CPU to host.
  void AddCluster(int gpus) {
    AddNode("cpu-0", 0, "", 64000);
    AddNode("gpu-1", gpus, "10.0.0.1:9001");
    AddNode("gpu-2", gpus, "10.0.0.2:9001");
  }
  static v1::SubmitJobRequest Request(int gpus, const std::string& source,
                                      const std::string& tenant = "t", int64_t cpu_milli = 1000) {
    v1::SubmitJobRequest r;
    r.set_tenant(tenant);
    r.set_gpus(gpus);
    r.set_gpu_source(source);
    r.set_cpu_milli(cpu_milli);
    r.set_duration_s(600);
    return r;
  }
  v1::Job Submit(const v1::SubmitJobRequest& r) {
    auto j = c_->Submit(r);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : v1::Job();
  }
  v1::Job Get(const std::string& id) {
    auto j = c_->GetJob(id);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? *j : v1::Job();
  }
  v1::HeartbeatResponse Beat(const std::string& node) {
    v1::HeartbeatRequest r;
    r.set_node(node);
    auto s = c_->Heartbeat(r);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? *s : v1::HeartbeatResponse();
  }
  // One second: a heartbeat from every node but `silent`, then one scheduling cycle.
  void Cycle(const std::set<std::string>& silent = {}) {
    clock_.AdvanceSeconds(1);
    for (const std::string& n : names_) {
      if (!silent.count(n)) Beat(n);
    }
    Status s = c_->ScheduleOnce();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  std::map<std::string, int> Allocated() {
    std::map<std::string, int> out;
    const v1::ListNodesResponse nodes = c_->ListNodes();
    for (const auto& n : nodes.nodes()) out[n.name()] = n.gpus_allocated();
    return out;
  }
  // No GPU, local or lent, held by two running whole-GPU tasks; fractions add up to <= 1000.
  void ExpectNoDoubleAllocation() {
    std::map<std::string, int> milli;  // "node/gpu"
    const v1::ListJobsResponse all = c_->ListJobs({});
    for (const auto& j : all.jobs()) {
      if (j.state() != "running") continue;
      for (const auto& a : j.allocations()) {
        const std::string list = GpuList(a);
        size_t i = 0;
        while (i < list.size()) {
          size_t k = list.find(',', i);
          if (k == std::string::npos) k = list.size();
          milli[list.substr(i, k - i)] += a.gpu_milli() ? a.gpu_milli() : 1000;
          i = k + 1;
        }
      }
    }
    for (const auto& [gpu, m] : milli) EXPECT_LE(m, 1000) << "GPU " << gpu << " over-allocated";
  }
  // The GPU addresses of task `a`, in its order, as the servers of `servers` name them.
  static std::vector<std::string> Addresses(const v1::Allocation& a,
                                            const std::map<std::string, std::string>& servers) {
    std::vector<std::string> out;
    auto add = [&](const std::string& node, uint32_t mask) {
      for (int g = 0; g < 32; ++g) {
        if (mask >> g & 1) out.push_back(servers.at(node) + "/" + std::to_string(g));
      }
    };
    add(a.node(), a.gpu_mask());
    for (const auto& r : a.remote()) add(r.node(), r.gpu_mask());
    return out;
  }
  static std::vector<std::string> Split(const std::string& s) {
    std::vector<std::string> out;
    size_t i = 0;
    while (i <= s.size() && !s.empty()) {
      size_t k = s.find(',', i);
      if (k == std::string::npos) k = s.size();
      out.push_back(s.substr(i, k - i));
      i = k + 1;
    }
    return out;
  }

  const std::map<std::string, std::string> servers_ = {{"gpu-1", "10.0.0.1:9001"},
                                                       {"gpu-2", "10.0.0.2:9001"},
                                                       {"cpu-0", ""}};
  std::set<std::string> names_;
};

TEST_F(RemoteTest, MalformedRemoteSubmitsNameTheField) {
  Open();
  AddCluster(2);
  struct Case {
    std::string source, within;
    double slowdown;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"cloud", "", 0, "gpu_source"},
      {"", "leaf", 0, "gpu_within"},        // within only with pooled/remote
      {"local", "pod", 0, "gpu_within"},
      {"pooled", "rack", 0, "gpu_within"},
      {"remote", "", 0.5, "max_slowdown"},  // a factor >= 1
      {"remote", "", -1, "max_slowdown"},
      {"local", "", 1.2, "max_slowdown"},   // only with pooled/remote
  };
  for (const Case& c : cases) {
    v1::SubmitJobRequest r = Request(1, c.source);
    r.set_gpu_within(c.within);
    r.set_max_slowdown(c.slowdown);
    auto j = c_->Submit(r);
    ASSERT_FALSE(j.ok()) << c.field;
    EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(j.status().message().rfind(c.field + ":", 0), 0u) << j.status().message();
  }
  EXPECT_TRUE(c_->ListJobs({}).jobs().empty()) << "a refused submit left a job";
  // Accepted values are stored normalized.
  v1::SubmitJobRequest ok = Request(1, "Pooled");
  ok.set_gpu_within("leaf");
  ok.set_max_slowdown(1.25);
  v1::Job j = Submit(ok);
  EXPECT_EQ(j.gpu_source(), "pooled");
  EXPECT_EQ(j.gpu_within(), "leaf");
  EXPECT_DOUBLE_EQ(j.max_slowdown(), 1.25);
  EXPECT_EQ(Submit(Request(1, "")).gpu_source(), "local");
  EXPECT_EQ(Submit(Request(1, "remote")).gpu_within(), "any");
}

TEST_F(RemoteTest, PlacementBecomesAllocationsDevicesAndLeases) {
  Open();
  AddCluster(2);
  v1::Job j = Submit(Request(3, "remote"));
  Cycle();
  j = Get(j.id());
  ASSERT_EQ(j.state(), "running") << j.message() << j.pending_reason();
  ASSERT_EQ(j.allocations_size(), 1);
  const v1::Allocation a = j.allocations(0);
  // Only cpu-0 has the CPU the task asks; it has no GPUs: all three are lent.
  EXPECT_EQ(a.node(), "cpu-0");
  EXPECT_EQ(a.gpu_mask(), 0u);
  EXPECT_TRUE(a.via_server());
  EXPECT_GE(a.slowdown(), 1.0);
  EXPECT_EQ(RemoteGpuCount(a), 3);
  for (const auto& r : a.remote()) EXPECT_TRUE(r.node() == "gpu-1" || r.node() == "gpu-2");

  // The host is told every GPU through its server, in the task's order, one lease each.
  v1::HeartbeatResponse hb = Beat("cpu-0");
  ASSERT_EQ(hb.tasks_size(), 1);
  const v1::TaskAssignment& t = hb.tasks(0);
  EXPECT_EQ(t.job_id(), j.id());
  const std::vector<std::string> want = Addresses(a, servers_);
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(Split(t.devices()), want);
  const std::vector<std::string> leases = Split(t.lease());
  ASSERT_EQ(leases.size(), want.size());
  auto auth = remote::LeaseAuthority::Create(kKey);
  ASSERT_TRUE(auth.ok());
  for (size_t i = 0; i < want.size(); ++i) {
    auto lease = auth->Verify(leases[i], want[i], clock_);
    ASSERT_TRUE(lease.ok()) << want[i] << ": " << lease.status().ToString();
    EXPECT_EQ(lease->job, j.id());
    EXPECT_EQ(lease->tenant, "t");
    EXPECT_EQ(lease->compute_milli, 1000);  // whole GPUs
  }
  // The lending nodes run nothing of it.
  EXPECT_EQ(Beat("gpu-1").tasks_size(), 0);
  EXPECT_EQ(Beat("gpu-2").tasks_size(), 0);

  // The lease API covers the lent GPUs too, in the same order.
  v1::IssueLeasesRequest req;
  req.set_job_id(j.id());
  auto issued = c_->IssueLeases(req);
  ASSERT_TRUE(issued.ok()) << issued.status().ToString();
  std::vector<std::string> gpus;
  for (const auto& l : issued->leases()) {
    gpus.push_back(l.gpu());
    EXPECT_TRUE(auth->Verify(l.token(), l.gpu(), clock_).ok()) << l.gpu();
  }
  EXPECT_EQ(gpus, want);

  // Lent GPUs count on the nodes that lend them, not on the host.
  std::map<std::string, int> alloc = Allocated();
  EXPECT_EQ(alloc["cpu-0"], 0);
  EXPECT_EQ(alloc["gpu-1"] + alloc["gpu-2"], 3);
  for (const auto& r : a.remote()) EXPECT_EQ(alloc[r.node()], std::popcount(r.gpu_mask()));
  EXPECT_EQ(AllocationText(a).rfind("cpu-0 <- ", 0), 0u) << AllocationText(a);
}

TEST_F(RemoteTest, PooledJobIsLocalWhenItFitsElseDrawsLentGpus) {
  Open();
  AddNode("n0", 4, "10.0.0.1:9001", 64000);
  AddNode("n1", 4, "10.0.0.2:9001", 64000);
  const std::map<std::string, std::string> servers = {{"n0", "10.0.0.1:9001"},
                                                      {"n1", "10.0.0.2:9001"}};
  std::vector<std::string> ids;
  for (int i = 0; i < 2; ++i) {
    v1::Job j = Submit(Request(3, "pooled"));
    Cycle();
    j = Get(j.id());
    ASSERT_EQ(j.state(), "running");
    EXPECT_FALSE(j.allocations(0).via_server());
    EXPECT_EQ(j.allocations(0).remote_size(), 0);
    ids.push_back(j.id());
  }
  v1::HeartbeatResponse hb = Beat(Get(ids[0]).allocations(0).node());
  ASSERT_EQ(hb.tasks_size(), 1);
  EXPECT_EQ(hb.tasks(0).devices(), "") << "a local task uses CUDA_VISIBLE_DEVICES";
  // One GPU is left on each node: a task of 2 fits on neither, so it takes its host's last GPU
  // through the host's server and the other node's last one.
  v1::Job p = Submit(Request(2, "pooled"));
  Cycle();
  p = Get(p.id());
  ASSERT_EQ(p.state(), "running") << p.pending_reason();
  const v1::Allocation& a = p.allocations(0);
  EXPECT_TRUE(a.via_server());
  EXPECT_EQ(std::popcount(a.gpu_mask()), 1);
  ASSERT_EQ(a.remote_size(), 1);
  EXPECT_NE(a.remote(0).node(), a.node());
  hb = Beat(a.node());
  bool found = false;
  for (const auto& t : hb.tasks()) {
    if (t.job_id() != p.id()) continue;
    found = true;
    EXPECT_EQ(Split(t.devices()), Addresses(a, servers)) << "its own GPU first, then the lent";
    EXPECT_EQ(Split(t.lease()).size(), 2u);
  }
  EXPECT_TRUE(found);
  ExpectNoDoubleAllocation();
  std::map<std::string, int> alloc = Allocated();
  EXPECT_EQ(alloc["n0"], 4);
  EXPECT_EQ(alloc["n1"], 4);
}

TEST_F(RemoteTest, TenantUsageAndCapCountLentGpus) {
  opts_.tenant_max_gpus = {{"t", 4}};
  Open();
  AddCluster(4);
  v1::Job first = Submit(Request(3, "remote"));
  Cycle();
  ASSERT_EQ(Get(first.id()).state(), "running");
  v1::ListTenantsResponse tenants = c_->ListTenants();
  ASSERT_EQ(tenants.tenants_size(), 1);
  EXPECT_EQ(tenants.tenants(0).gpus_in_use(), 3);
  // 5 GPUs are free, but the cap leaves t one more: 2 wait, 1 runs.
  v1::Job two = Submit(Request(2, "remote"));
  v1::Job one = Submit(Request(1, "remote"));
  Cycle();
  two = Get(two.id());
  EXPECT_EQ(two.state(), "pending");
  EXPECT_NE(two.pending_reason().find("cap"), std::string::npos) << two.pending_reason();
  EXPECT_EQ(Get(one.id()).state(), "running");
  EXPECT_EQ(c_->ListTenants().tenants(0).gpus_in_use(), 4);
  const std::string metrics = c_->MetricsText();
  EXPECT_NE(metrics.find("gpool_tenant_gpus{tenant=\"t\"} 4"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("gpool_gpus{state=\"allocated\"} 4"), std::string::npos) << metrics;
}

TEST_F(RemoteTest, LostLendingNodeRequeuesTheJobAndFreesAllItsGpus) {
  Open();
  AddCluster(2);
  v1::Job j = Submit(Request(3, "remote"));  // needs both lending nodes
  Cycle();
  ASSERT_EQ(Get(j.id()).state(), "running");
  for (int i = 0; i < 7; ++i) Cycle({"gpu-1"});  // past the 5 s node timeout
  j = Get(j.id());
  EXPECT_EQ(j.state(), "pending") << "2 GPUs are left for a job of 3";
  EXPECT_EQ(j.requeues(), 1);
  EXPECT_EQ(j.allocations_size(), 0);
  EXPECT_NE(j.message().find("node gpu-1 (lending GPUs to task 0) was lost"), std::string::npos)
      << j.message();
  EXPECT_EQ(Allocated()["gpu-2"], 0) << "the GPUs it held on the live node are freed";
  EXPECT_EQ(Beat("cpu-0").tasks_size(), 0) << "its host stops the task";
  // The freed GPUs serve another job.
  v1::Job other = Submit(Request(2, "remote"));
  Cycle({"gpu-1"});
  EXPECT_EQ(Get(other.id()).state(), "running");
  EXPECT_EQ(Allocated()["gpu-2"], 2);
}

TEST_F(RemoteTest, LostLendingNodeFailsTheJobUnderTheFailPolicy) {
  opts_.lost_node_policy = LostNodePolicy::kFail;
  Open();
  AddCluster(2);
  v1::Job j = Submit(Request(3, "remote"));
  Cycle();
  ASSERT_EQ(Get(j.id()).state(), "running");
  for (int i = 0; i < 7; ++i) Cycle({"gpu-2"});
  j = Get(j.id());
  EXPECT_EQ(j.state(), "failed");
  EXPECT_NE(j.message().find("node gpu-2 (lending GPUs to task 0) was lost"), std::string::npos)
      << j.message();
  EXPECT_EQ(Allocated()["gpu-1"], 0);
}

TEST_F(RemoteTest, LostHostFreesTheLentGpus) {
  Open();
  AddCluster(2);
  v1::Job j = Submit(Request(3, "remote"));
  Cycle();
  ASSERT_EQ(Get(j.id()).state(), "running");
  for (int i = 0; i < 7; ++i) Cycle({"cpu-0"});
  j = Get(j.id());
  EXPECT_EQ(j.state(), "pending") << "no other node has the CPU it asks";
  EXPECT_NE(j.message().find("requeued: node cpu-0 was lost"), std::string::npos) << j.message();
  std::map<std::string, int> alloc = Allocated();
  EXPECT_EQ(alloc["gpu-1"], 0);
  EXPECT_EQ(alloc["gpu-2"], 0);
}

TEST_F(RemoteTest, RestartKeepsLentGpusAllocated) {
  Open();
  AddCluster(2);
  v1::Job j = Submit(Request(3, "remote"));
  Cycle();
  ASSERT_EQ(Get(j.id()).state(), "running");
  const v1::Allocation before = Get(j.id()).allocations(0);
  Open();  // a restart: the scheduler's state is rebuilt from the stored jobs
  EXPECT_EQ(Allocated()["gpu-1"] + Allocated()["gpu-2"], 3);
  // One GPU is free: a job of 2 waits, a job of 1 takes the last one, none is lent twice.
  v1::Job two = Submit(Request(2, "remote"));
  v1::Job one = Submit(Request(1, "remote"));
  Cycle();
  EXPECT_EQ(Get(j.id()).state(), "running");
  EXPECT_EQ(Get(j.id()).allocations(0).SerializeAsString(), before.SerializeAsString());
  EXPECT_EQ(Get(two.id()).state(), "pending");
  EXPECT_EQ(Get(one.id()).state(), "running");
  ExpectNoDoubleAllocation();
  EXPECT_EQ(Allocated()["gpu-1"] + Allocated()["gpu-2"], 4);
}

TEST_F(RemoteTest, RestartWithoutLeaseKeyFailsRemoteJobsAndSaysWhy) {
  Open();
  AddCluster(2);
  v1::Job j = Submit(Request(3, "remote"));
  Cycle();
  ASSERT_EQ(Get(j.id()).state(), "running");
  opts_.lease_key.clear();
  Open();
  Cycle();
  j = Get(j.id());
  EXPECT_EQ(j.state(), "failed");
  EXPECT_NE(j.message().find("no lease key"), std::string::npos) << j.message();
  EXPECT_EQ(Allocated()["gpu-1"] + Allocated()["gpu-2"], 0);
  // A new remote job waits, and says what the operator must configure.
  v1::Job k = Submit(Request(1, "remote"));
  Cycle();
  k = Get(k.id());
  ASSERT_EQ(k.state(), "pending");
  const std::string why = k.pending_reason().empty() ? k.message() : k.pending_reason();
  EXPECT_NE(why.find("--lease-key"), std::string::npos) << why;
}

TEST_F(RemoteTest, LendingNodeWithoutGpuServerFailsTheJobAtAssignment) {
  Open();
  AddCluster(2);
  v1::Job j = Submit(Request(3, "remote"));
  Cycle();
  ASSERT_EQ(Get(j.id()).state(), "running");
  // gpu-1's agent comes back without --gpu-server.
  AddNode("gpu-1", 2, "");
  v1::HeartbeatResponse hb = Beat("cpu-0");
  EXPECT_EQ(hb.tasks_size(), 0) << "never run without its devices";
  j = Get(j.id());
  EXPECT_EQ(j.state(), "failed");
  EXPECT_NE(j.message().find("node gpu-1"), std::string::npos) << j.message();
  EXPECT_NE(j.message().find("gpu_server"), std::string::npos) << j.message();
  EXPECT_EQ(Allocated()["gpu-2"], 0);
}

TEST_F(RemoteTest, ReclaimPreemptsARemoteJobAndTakesBackItsLentGpus) {
  opts_.tenant_quotas = {{"a", 4}};
  Open();
  AddNode("cpu-0", 0, "", 64000);
  AddNode("gpu-1", 4, "10.0.0.1:9001");
  v1::Job b = Submit(Request(4, "remote", "b"));
  Cycle();
  ASSERT_EQ(Get(b.id()).state(), "running");
  EXPECT_EQ(Allocated()["gpu-1"], 4);
  // a's guarantee: its local job needs gpu-1's GPUs, which b borrowed.
  v1::Job a = Submit(Request(4, "local", "a", 0));
  for (int i = 0; i < 3 && Get(a.id()).state() != "running"; ++i) Cycle();
  a = Get(a.id());
  b = Get(b.id());
  ASSERT_EQ(a.state(), "running") << a.pending_reason();
  EXPECT_EQ(a.allocations(0).node(), "gpu-1");
  EXPECT_EQ(b.state(), "pending");
  EXPECT_EQ(b.preemptions(), 1);
  EXPECT_EQ(Allocated()["gpu-1"], 4);
  ExpectNoDoubleAllocation();
  EXPECT_EQ(Beat("cpu-0").tasks_size(), 0) << "the preempted task is stopped on its host";
}

TEST_F(RemoteTest, LendingNodeCannotDropLentGpusByReRegistering) {
  Open();
  AddCluster(2);
  v1::Job j = Submit(Request(4, "remote"));  // every GPU of both lenders
  Cycle();
  ASSERT_EQ(Get(j.id()).state(), "running");
  v1::RegisterNodeRequest r;
  r.mutable_node()->set_name("gpu-2");
  r.mutable_node()->set_gpus(1);
  r.mutable_node()->set_gpu_model("H100");
  r.mutable_node()->set_gpu_server("10.0.0.2:9001");
  auto s = c_->RegisterNode(r);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.status().message().find(j.id()), std::string::npos) << s.status().message();
}

// How `gpool jobs` and `gpool jobs describe` show a task (allocations.h).
TEST(AllocationTextTest, HostThenEveryGpuInTheTasksOrder) {
  v1::Allocation a;
  a.set_node("cpu-0");
  auto* r1 = a.add_remote();
  r1->set_node("gpu-1");
  r1->set_gpu_mask(0b11);
  auto* r2 = a.add_remote();
  r2->set_node("gpu-2");
  r2->set_gpu_mask(0b1000);
  a.set_via_server(true);
  a.set_slowdown(1.04);
  EXPECT_EQ(AllocationText(a), "cpu-0 <- gpu-1/0,gpu-1/1,gpu-2/3 (remote, est. slowdown 1.04)");
  v1::Allocation local;
  local.set_node("n0");
  local.set_gpu_mask(0b1100);
  EXPECT_EQ(AllocationText(local), "n0 <- n0/2,n0/3");
  local.set_gpu_mask(0b10);
  local.set_gpu_milli(250);
  local.set_via_server(true);
  local.set_slowdown(1.02);
  EXPECT_EQ(AllocationText(local), "n0 <- n0/1 (250m) (through its GPU server, est. slowdown 1.02)");
}

}  // namespace
}  // namespace gpool::control
