// The graph and capture rules of the driver stand-in (graph_model.h), without a server: DAG
// building and topological order, cloning, capture with fork/join through events, the end-of-
// capture checks, and cuThreadExchangeStreamCaptureMode's rules for unsafe calls.
#include "remote/client/graph_model.h"

#include <algorithm>

#include <gtest/gtest.h>

namespace gpool::remote::client::graph {
namespace {

Op Kernel(int tag) {
  Op op;
  op.kind = Kind::kKernel;
  op.grid[0] = static_cast<unsigned>(tag);  // tells the nodes apart in the assertions
  return op;
}
size_t Pos(const std::vector<Node*>& order, const Node* n) {
  return static_cast<size_t>(std::find(order.begin(), order.end(), n) - order.begin());
}

// A diamond a -> {b, c} -> d, with d added before c: the order follows edges, not insertion.
TEST(GraphModel, TopologicalOrderFollowsEdges) {
  Graph g;
  Node *a, *b, *c, *d;
  ASSERT_TRUE(g.Add(Kernel(1), {}, &a).ok());
  ASSERT_TRUE(g.Add(Kernel(2), {a}, &b).ok());
  ASSERT_TRUE(g.Add(Kernel(4), {b}, &d).ok());
  ASSERT_TRUE(g.Add(Kernel(3), {a}, &c).ok());
  ASSERT_TRUE(g.AddEdge(c, d).ok());
  std::vector<Node*> order;
  ASSERT_TRUE(g.TopoOrder(&order).ok());
  ASSERT_EQ(order.size(), 4u);
  EXPECT_LT(Pos(order, a), Pos(order, b));
  EXPECT_LT(Pos(order, a), Pos(order, c));
  EXPECT_LT(Pos(order, c), Pos(order, d));
  EXPECT_LT(Pos(order, b), Pos(order, d));
  EXPECT_EQ(g.Roots(), std::vector<Node*>{a});
  EXPECT_EQ(g.Edges().size(), 4u);
}

TEST(GraphModel, CycleIsRefusedAtInstantiation) {
  Graph g;
  Node *a, *b;
  ASSERT_TRUE(g.Add(Kernel(1), {}, &a).ok());
  ASSERT_TRUE(g.Add(Kernel(2), {a}, &b).ok());
  ASSERT_TRUE(g.AddEdge(b, a).ok());
  std::unique_ptr<Exec> e;
  Result r = Instantiate(g, &e);
  EXPECT_EQ(r.err, Err::kCycle);
  EXPECT_NE(r.why.find("cycle"), std::string::npos) << r.why;
  EXPECT_EQ(e, nullptr);
}

TEST(GraphModel, BadDependenciesAndEdgesAreRefused) {
  Graph g, other;
  Node *a, *x;
  ASSERT_TRUE(g.Add(Kernel(1), {}, &a).ok());
  ASSERT_TRUE(other.Add(Kernel(9), {}, &x).ok());
  EXPECT_EQ(g.Add(Kernel(2), {x}, nullptr).err, Err::kInvalidValue);
  EXPECT_EQ(g.Add(Kernel(2), {a, a}, nullptr).err, Err::kInvalidValue);
  EXPECT_EQ(g.AddEdge(a, a).err, Err::kInvalidValue);
  EXPECT_EQ(g.AddEdge(x, a).err, Err::kInvalidValue);
  Node* b;
  ASSERT_TRUE(g.Add(Kernel(2), {a}, &b).ok());
  EXPECT_EQ(g.AddEdge(a, b).err, Err::kInvalidValue);  // exists already
  EXPECT_EQ(g.nodes().size(), 2u);  // nothing added by the refused calls
}

// An exec is a deep copy: changing or destroying the source graph later leaves it as it was.
TEST(GraphModel, InstantiationFreezesACopy) {
  auto g = std::make_unique<Graph>();
  Node* a;
  ASSERT_TRUE(g->Add(Kernel(1), {}, &a).ok());
  a->op.params = {std::byte{7}};
  std::unique_ptr<Exec> e;
  ASSERT_TRUE(Instantiate(*g, &e).ok());
  ASSERT_EQ(e->order.size(), 1u);
  EXPECT_NE(e->order[0], a);
  EXPECT_EQ(e->from_original.at(a), e->order[0]);
  a->op.params = {std::byte{9}};
  ASSERT_TRUE(g->Add(Kernel(2), {a}, nullptr).ok());
  g.reset();
  ASSERT_EQ(e->order.size(), 1u);
  EXPECT_EQ(e->order[0]->op.params, std::vector<std::byte>{std::byte{7}});
}

// cuGraphExecUpdate: a graph of the same shape (as a re-capture of the same code gives) updates
// the exec's operations; another shape or node kind leaves it as it was.
TEST(GraphModel, ExecUpdateTakesOperationsOfTheSameShape) {
  Graph g;
  Node *a, *b;
  ASSERT_TRUE(g.Add(Kernel(1), {}, &a).ok());
  ASSERT_TRUE(g.Add(Kernel(2), {a}, &b).ok());
  std::unique_ptr<Exec> e;
  ASSERT_TRUE(Instantiate(g, &e).ok());
  Graph same;
  Node *a2, *b2;
  ASSERT_TRUE(same.Add(Kernel(5), {}, &a2).ok());
  ASSERT_TRUE(same.Add(Kernel(6), {a2}, &b2).ok());
  UpdateFail fail;
  const Node* why;
  ASSERT_TRUE(UpdateExec(e.get(), same, &fail, &why).ok());
  EXPECT_EQ(fail, UpdateFail::kNone);
  EXPECT_EQ(e->order[0]->op.grid[0], 5u);
  EXPECT_EQ(e->order[1]->op.grid[0], 6u);
  EXPECT_EQ(e->from_original.at(b2), e->order[1]);

  Graph other_edges;
  Node *x, *y;
  ASSERT_TRUE(other_edges.Add(Kernel(7), {}, &x).ok());
  ASSERT_TRUE(other_edges.Add(Kernel(8), {}, &y).ok());  // no edge x -> y
  EXPECT_FALSE(UpdateExec(e.get(), other_edges, &fail, &why).ok());
  EXPECT_EQ(fail, UpdateFail::kTopology);
  EXPECT_EQ(why, y);
  Graph other_kind;
  Node* m;
  Op memset;
  memset.kind = Kind::kMemset;
  ASSERT_TRUE(other_kind.Add(memset, {}, &m).ok());
  ASSERT_TRUE(other_kind.Add(Kernel(9), {m}, nullptr).ok());
  EXPECT_FALSE(UpdateExec(e.get(), other_kind, &fail, &why).ok());
  EXPECT_EQ(fail, UpdateFail::kNodeType);
  EXPECT_EQ(why, m);
  EXPECT_EQ(e->order[0]->op.grid[0], 5u);  // unchanged by the refused updates
}

TEST(GraphModel, CloneKeepsShapeWithNewNodes) {
  Graph g;
  Node *a, *b;
  ASSERT_TRUE(g.Add(Kernel(1), {}, &a).ok());
  ASSERT_TRUE(g.Add(Kernel(2), {a}, &b).ok());
  std::map<const Node*, Node*> m;
  auto c = g.Clone(&m);
  ASSERT_EQ(c->nodes().size(), 2u);
  EXPECT_TRUE(c->Contains(m[a]));
  EXPECT_FALSE(c->Contains(a));
  EXPECT_EQ(m[b]->deps, std::vector<Node*>{m[a]});
  EXPECT_EQ(c->InClone(a), m[a]);
  EXPECT_EQ(c->InClone(b), m[b]);
  EXPECT_EQ(g.InClone(a), nullptr);  // the source is not a clone
}

TEST(GraphModel, RemovingEdgesAndNodes) {
  Graph g;
  Node *a, *b, *c;
  ASSERT_TRUE(g.Add(Kernel(1), {}, &a).ok());
  ASSERT_TRUE(g.Add(Kernel(2), {a}, &b).ok());
  ASSERT_TRUE(g.Add(Kernel(3), {a, b}, &c).ok());
  EXPECT_EQ(g.Dependents(a), (std::vector<Node*>{b, c}));
  ASSERT_TRUE(g.RemoveEdge(a, c).ok());
  EXPECT_EQ(g.RemoveEdge(a, c).err, Err::kInvalidValue);  // gone already
  EXPECT_EQ(c->deps, std::vector<Node*>{b});
  ASSERT_TRUE(g.Remove(b).ok());
  EXPECT_FALSE(g.Contains(b));
  EXPECT_TRUE(c->deps.empty());
  EXPECT_EQ(g.Roots(), (std::vector<Node*>{a, c}));
  std::vector<Node*> order;
  ASSERT_TRUE(g.TopoOrder(&order).ok());
  EXPECT_EQ(order.size(), 2u);
}

const void* const kS1 = reinterpret_cast<const void*>(0x100);
const void* const kS2 = reinterpret_cast<const void*>(0x200);
const void* const kS3 = reinterpret_cast<const void*>(0x300);
const void* const kE1 = reinterpret_cast<const void*>(0x1000);
const void* const kE2 = reinterpret_cast<const void*>(0x2000);

// One stream: each captured operation depends on the one before.
TEST(CaptureModel, SequentialCaptureChainsNodes) {
  CaptureTable t;
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  EXPECT_TRUE(t.any());
  EXPECT_EQ(t.Begin(kS1, Mode::kGlobal, 1).err, Err::kIllegalState);
  Node *a, *b;
  ASSERT_TRUE(t.Append(kS1, Kernel(1), &a).ok());
  ASSERT_TRUE(t.Append(kS1, Kernel(2), &b).ok());
  EXPECT_EQ(*t.Deps(kS1), std::vector<Node*>{b});
  Graph* g = nullptr;
  ASSERT_TRUE(t.End(kS1, 1, &g).ok());
  ASSERT_NE(g, nullptr);
  std::unique_ptr<Graph> owned(g);
  EXPECT_FALSE(t.any());
  ASSERT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(g->nodes()[1]->deps, std::vector<Node*>{g->nodes()[0].get()});
  EXPECT_EQ(t.Append(kS1, Kernel(3)).err, Err::kNotCapturing);
}

// s1: a, record e1; s2 waits e1 (joins), b; s1: c; s2 records e2, s1 waits e2, d.
// Graph: a -> b, a -> c, {c, b} -> d.
TEST(CaptureModel, ForkAndJoinThroughEvents) {
  CaptureTable t;
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  Node *a, *b, *c, *d;
  ASSERT_TRUE(t.Append(kS1, Kernel(1), &a).ok());
  t.RecordEvent(kE1, kS1);
  EXPECT_TRUE(t.EventCaptured(kE1));
  bool captured = false;
  ASSERT_TRUE(t.WaitEvent(kS2, kE1, &captured).ok());
  EXPECT_TRUE(captured);
  EXPECT_EQ(t.Of(kS2), t.Of(kS1));
  ASSERT_TRUE(t.Append(kS2, Kernel(2), &b).ok());
  ASSERT_TRUE(t.Append(kS1, Kernel(3), &c).ok());
  t.RecordEvent(kE2, kS2);
  ASSERT_TRUE(t.WaitEvent(kS1, kE2, &captured).ok());
  ASSERT_TRUE(t.Append(kS1, Kernel(4), &d).ok());
  EXPECT_EQ(b->deps, std::vector<Node*>{a});
  EXPECT_EQ(c->deps, std::vector<Node*>{a});
  EXPECT_EQ(d->deps.size(), 2u);
  EXPECT_NE(std::find(d->deps.begin(), d->deps.end(), b), d->deps.end());
  EXPECT_NE(std::find(d->deps.begin(), d->deps.end(), c), d->deps.end());
  Graph* g = nullptr;
  ASSERT_TRUE(t.End(kS1, 1, &g).ok());
  std::unique_ptr<Graph> owned(g);
  EXPECT_EQ(t.Of(kS2), nullptr);  // the joined stream left with the end
  EXPECT_FALSE(t.EventCaptured(kE1));
}

TEST(CaptureModel, UnjoinedForkFailsTheEnd) {
  CaptureTable t;
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  ASSERT_TRUE(t.Append(kS1, Kernel(1)).ok());
  t.RecordEvent(kE1, kS1);
  bool captured;
  ASSERT_TRUE(t.WaitEvent(kS2, kE1, &captured).ok());
  ASSERT_TRUE(t.Append(kS2, Kernel(2)).ok());  // never joined back
  Graph* g = reinterpret_cast<Graph*>(1);
  EXPECT_EQ(t.End(kS2, 1, &g).err, Err::kUnmatched);  // not the origin
  Result r = t.End(kS1, 1, &g);
  EXPECT_EQ(r.err, Err::kUnjoined) << r.why;
  EXPECT_EQ(g, nullptr);
  EXPECT_FALSE(t.any());  // every stream stopped capturing
}

// A fork whose stream did no work is joined by construction (its dependencies are the origin's
// earlier nodes).
TEST(CaptureModel, ForkWithoutWorkNeedsNoJoin) {
  CaptureTable t;
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  ASSERT_TRUE(t.Append(kS1, Kernel(1)).ok());
  t.RecordEvent(kE1, kS1);
  bool captured;
  ASSERT_TRUE(t.WaitEvent(kS2, kE1, &captured).ok());
  ASSERT_TRUE(t.Append(kS1, Kernel(2)).ok());
  Graph* g = nullptr;
  ASSERT_TRUE(t.End(kS1, 1, &g).ok());
  delete g;
}

TEST(CaptureModel, WaitingOnAnOutsideEventIsolatesAndInvalidates) {
  CaptureTable t;
  bool captured = true;
  // Neither captures: a plain wait, for the caller to send.
  ASSERT_TRUE(t.WaitEvent(kS2, kE2, &captured).ok());
  EXPECT_FALSE(captured);
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  Result r = t.WaitEvent(kS1, kE2, &captured);
  EXPECT_EQ(r.err, Err::kIsolation);
  EXPECT_TRUE(t.Of(kS1)->invalid);
  EXPECT_EQ(t.Append(kS1, Kernel(1)).err, Err::kInvalidated);
  Graph* g = nullptr;
  EXPECT_EQ(t.End(kS1, 1, &g).err, Err::kInvalidated);
  EXPECT_EQ(g, nullptr);
}

// cuEventSynchronize/cuEventQuery of an event recorded in a capture: the capture cannot take it.
TEST(CaptureModel, HostWaitOnACapturedEventInvalidates) {
  CaptureTable t;
  EXPECT_FALSE(t.HostUsesCapturedEvent(kE1, "cuEventSynchronize"));  // not captured: a plain wait
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  t.RecordEvent(kE1, kS1);
  EXPECT_TRUE(t.HostUsesCapturedEvent(kE1, "cuEventSynchronize"));
  Graph* g = nullptr;
  Result r = t.End(kS1, 1, &g);
  EXPECT_EQ(r.err, Err::kInvalidated);
  EXPECT_NE(r.why.find("cuEventSynchronize"), std::string::npos) << r.why;
  EXPECT_FALSE(t.HostUsesCapturedEvent(kE1, "cuEventSynchronize"));  // the capture is over
}

TEST(CaptureModel, TwoCapturesDoNotMerge) {
  CaptureTable t;
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  ASSERT_TRUE(t.Begin(kS3, Mode::kGlobal, 1).ok());
  t.RecordEvent(kE1, kS1);
  bool captured;
  EXPECT_EQ(t.WaitEvent(kS3, kE1, &captured).err, Err::kIsolation);
  Graph* g = nullptr;
  ASSERT_TRUE(t.End(kS1, 1, &g).ok());
  delete g;
  EXPECT_EQ(t.End(kS3, 1, &g).err, Err::kInvalidated);
}

// cuThreadExchangeStreamCaptureMode's rules for a potentially unsafe call.
TEST(CaptureModel, UnsafeCallsFollowTheModes) {
  {
    // Global capture on thread 1: thread 1 (any mode but relaxed) and thread 2 in global mode
    // are forbidden; thread 2 in thread-local mode is not.
    CaptureTable t;
    ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
    EXPECT_TRUE(t.Unsafe(2, Mode::kThreadLocal, "cuMemcpyDtoH_v2").ok());
    EXPECT_TRUE(t.Unsafe(1, Mode::kRelaxed, "cuMemcpyDtoH_v2").ok());
    EXPECT_FALSE(t.Of(kS1)->invalid);
    Result r = t.Unsafe(2, Mode::kGlobal, "cuCtxSynchronize");
    EXPECT_EQ(r.err, Err::kUnsupported);
    EXPECT_TRUE(t.Of(kS1)->invalid);
    Graph* g = nullptr;
    Result end = t.End(kS1, 1, &g);
    EXPECT_EQ(end.err, Err::kInvalidated);
    EXPECT_NE(end.why.find("cuCtxSynchronize"), std::string::npos) << end.why;
  }
  {
    // Thread-local capture: other threads are free whatever their mode; its own thread is not.
    CaptureTable t;
    ASSERT_TRUE(t.Begin(kS1, Mode::kThreadLocal, 1).ok());
    EXPECT_TRUE(t.Unsafe(2, Mode::kGlobal, "cuMemFree_v2").ok());
    EXPECT_EQ(t.Unsafe(1, Mode::kGlobal, "cuMemFree_v2").err, Err::kUnsupported);
  }
  {
    // Relaxed capture: nobody is forbidden.
    CaptureTable t;
    ASSERT_TRUE(t.Begin(kS1, Mode::kRelaxed, 1).ok());
    EXPECT_TRUE(t.Unsafe(1, Mode::kGlobal, "cuMemFree_v2").ok());
    EXPECT_TRUE(t.Unsafe(2, Mode::kGlobal, "cuMemFree_v2").ok());
    Graph* g = nullptr;
    EXPECT_TRUE(t.End(kS1, 2, &g).ok());  // relaxed: any thread may end it
    delete g;
  }
}

TEST(CaptureModel, OnlyTheBeginningThreadEndsANonRelaxedCapture) {
  CaptureTable t;
  ASSERT_TRUE(t.Begin(kS1, Mode::kThreadLocal, 1).ok());
  Graph* g = nullptr;
  EXPECT_EQ(t.End(kS1, 2, &g).err, Err::kWrongThread);
  EXPECT_TRUE(t.any());  // still capturing
  ASSERT_TRUE(t.End(kS1, 1, &g).ok());
  delete g;
}

// Capture into an existing graph after given nodes (cuStreamBeginCaptureToGraph), and
// cuStreamUpdateCaptureDependencies.
TEST(CaptureModel, CaptureIntoAGraphAfterItsNodes) {
  Graph g;
  Node *root, *other;
  ASSERT_TRUE(g.Add(Kernel(1), {}, &root).ok());
  ASSERT_TRUE(g.Add(Kernel(2), {}, &other).ok());
  CaptureTable t;
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1, &g).ok());
  ASSERT_TRUE(t.SetDeps(kS1, {root}, false).ok());
  ASSERT_TRUE(t.SetDeps(kS1, {other}, true).ok());
  Node* n;
  ASSERT_TRUE(t.Append(kS1, Kernel(3), &n).ok());
  EXPECT_EQ(n->deps, (std::vector<Node*>{root, other}));
  Graph foreign;
  Node* f;
  ASSERT_TRUE(foreign.Add(Kernel(9), {}, &f).ok());
  EXPECT_EQ(t.SetDeps(kS1, {f}, true).err, Err::kInvalidValue);
  EXPECT_TRUE(t.Uses(&g));
  EXPECT_FALSE(t.Uses(&foreign));
  Graph* out = nullptr;
  ASSERT_TRUE(t.End(kS1, 1, &out).ok());
  EXPECT_FALSE(t.Uses(&g));
  EXPECT_EQ(out, &g);  // the program's graph, not a new one (and not freed by the table)
  EXPECT_EQ(g.nodes().size(), 3u);
}

TEST(CaptureModel, DestroyingAJoinedStreamInvalidates) {
  CaptureTable t;
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  t.RecordEvent(kE1, kS1);
  bool captured;
  ASSERT_TRUE(t.WaitEvent(kS2, kE1, &captured).ok());
  t.ForgetStream(kS2);
  EXPECT_EQ(t.Of(kS2), nullptr);
  Graph* g = nullptr;
  EXPECT_EQ(t.End(kS1, 1, &g).err, Err::kInvalidated);
  // The origin destroyed mid-capture: the capture goes with it.
  ASSERT_TRUE(t.Begin(kS1, Mode::kGlobal, 1).ok());
  t.ForgetStream(kS1);
  EXPECT_FALSE(t.any());
}

}  // namespace
}  // namespace gpool::remote::client::graph
