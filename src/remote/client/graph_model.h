// CUDA graphs and stream capture as the libcuda.so.1 stand-in keeps them: client-side records,
// no server state (driver_graphs.cc turns them into calls). Pure C++ (no CUDA header), so the
// rules are unit-tested without a server (graph_model_test.cc).
//
// A Graph is a DAG of Nodes, each one operation (Op) and the nodes it depends on. Instantiation
// freezes a deep copy in a topological order (Exec); a launch replays that order on the launch
// stream as the calls the operations would have been. Capture (CaptureTable) turns a stream's
// work into nodes instead: each capturing stream keeps its current dependency set, an event
// recorded on a capturing stream keeps the set it saw, and a stream that waits for such an event
// joins the capture with that set (the fork/join pattern). The rules follow the CUDA driver
// documentation (cuStreamBeginCapture, cuThreadExchangeStreamCaptureMode, cuStreamEndCapture).
// Thread safety: none here; the driver holds one mutex around every use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

namespace gpool::remote::client::graph {

enum class Kind { kKernel, kMemcpy, kMemset, kHost, kEmpty, kEventRecord, kEventWait };
const char* KindName(Kind k);

// Which sides of a 1-D copy are device memory.
enum class CopyDir { kH2D, kD2H, kD2D, kH2H };

// One node's operation. Handles (function, event, host function) are the driver's, opaque here.
struct Op {
  Kind kind = Kind::kEmpty;
  // kKernel: parameter bytes packed at capture / node creation (CUDA copies them then too).
  void* func = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shmem = 0;
  bool cooperative = false;
  std::vector<std::byte> params;
  // kMemcpy: 1-D, `n` bytes; a host side is read (or written) at launch time, as CUDA does.
  CopyDir dir = CopyDir::kD2D;
  uint64_t dst = 0, src = 0;
  size_t n = 0;
  // kMemset: `height` rows of `width` elements of `elem` bytes (1, 2 or 4), rows `pitch` apart.
  uint32_t value = 0;
  unsigned elem = 1;
  size_t width = 0, height = 1, pitch = 0;
  // kHost: fn(data).
  void (*fn)(void*) = nullptr;
  void* data = nullptr;
  // kEventRecord / kEventWait.
  void* event = nullptr;
};

struct Node {
  Op op;
  std::vector<Node*> deps;  // the nodes this one waits for, in the graph's own node set
};

enum class Err {
  kOk,
  kInvalidValue,
  kIllegalState,     // e.g. a stream that already captures begins again
  kNotCapturing,     // end on a stream that does not capture
  kUnmatched,        // end on a stream that joined, not the one that began
  kWrongThread,      // end from another thread in a non-relaxed mode
  kInvalidated,      // the capture was invalidated (an unsafe call, an isolation error)
  kUnjoined,         // a forked stream was not joined back into the origin stream
  kIsolation,        // a capture would merge with another, or wait for an outside event
  kUnsupported,      // an unsafe call during capture (it invalidates the capture)
  kCycle,            // instantiation of a graph with a cycle
};
struct Result {
  Err err = Err::kOk;
  std::string why;  // said with the error, naming what was wrong
  bool ok() const { return err == Err::kOk; }
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A node depending on `deps`, each of which must be a node of this graph.
  Result Add(Op op, const std::vector<Node*>& deps, Node** out);
  bool Contains(const Node* n) const { return index_.count(n) != 0; }
  // from -> to (to waits for from); duplicates are refused as CUDA does.
  Result AddEdge(Node* from, Node* to);
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Node*> Roots() const;
  // Every edge (from, to), in node order.
  std::vector<std::pair<Node*, Node*>> Edges() const;
  // to no longer waits for from; kInvalidValue if it did not.
  Result RemoveEdge(Node* from, Node* to);
  // Removes `n` and every edge to or from it.
  Result Remove(Node* n);
  // The nodes that wait for `n`, in node order.
  std::vector<Node*> Dependents(const Node* n) const;
  // A deep copy; `map` (if given) gets original node -> copy. The copy remembers the map
  // (InClone: cuGraphNodeFindInClone).
  std::unique_ptr<Graph> Clone(std::map<const Node*, Node*>* map = nullptr) const;
  // This graph's copy of `original`, a node of the graph it was cloned from, or null.
  Node* InClone(const Node* original) const;
  // The nodes in an order where each comes after its dependencies (insertion order among the
  // ready ones), or kCycle naming a node on the cycle.
  Result TopoOrder(std::vector<Node*>* out) const;

 private:
  void Reindex();

  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<const Node*, size_t> index_;
  std::map<const Node*, Node*> cloned_from_;  // the source graph's node -> this graph's copy
};

// An instantiated graph: a frozen copy and its launch order.
struct Exec {
  std::unique_ptr<Graph> graph;
  std::vector<Node*> order;
  std::map<const Node*, Node*> from_original;  // the source graph's node -> this copy's
};
Result Instantiate(const Graph& g, std::unique_ptr<Exec>* out);
// cuGraphExecUpdate: `g` must have the exec's shape (the same nodes in the same order, each of
// the same kind with the same dependencies; a kernel node may change its parameters and launch
// shape, others their parameters). Then the exec takes g's operations and g's nodes name the
// exec's from now on; else kTopology (*why_node the first node that differs, or null when the
// node counts differ) or kNodeType, and the exec is unchanged.
enum class UpdateFail { kNone, kTopology, kNodeType };
Result UpdateExec(Exec* e, const Graph& g, UpdateFail* fail, const Node** why_node);

// cuStreamBeginCapture's modes (CU_STREAM_CAPTURE_MODE_* have these values).
enum class Mode { kGlobal = 0, kThreadLocal = 1, kRelaxed = 2 };

struct Capture {
  uint64_t id = 0;
  Graph* graph = nullptr;
  bool owns_graph = true;   // false: cuStreamBeginCaptureToGraph's graph, the program's
  Mode mode = Mode::kGlobal;
  uint64_t thread = 0;      // the beginning thread
  const void* origin = nullptr;
  bool invalid = false;
  std::string invalid_why;
  std::set<const void*> streams;  // origin and the streams that joined
};

// Which streams and events take part in which capture. Streams and events are keys (the driver's
// handles); a capture's graph is owned here until End hands it out.
class CaptureTable {
 public:
  ~CaptureTable();
  bool any() const { return !streams_.empty(); }
  // Begins capturing `stream` into `into` (null: a new graph) in `mode` for `thread`.
  Result Begin(const void* stream, Mode mode, uint64_t thread, Graph* into = nullptr);
  // The capture `stream` takes part in, or null.
  Capture* Of(const void* stream) const;
  // The stream's current dependencies (the nodes its next operation waits for).
  const std::vector<Node*>* Deps(const void* stream) const;
  // Appends an operation to `stream`'s capture: a node after the stream's dependencies, which
  // becomes the stream's only dependency. kInvalidated when the capture was invalidated.
  Result Append(const void* stream, Op op, Node** out = nullptr);
  // cuStreamUpdateCaptureDependencies: replaces (`add` false) or extends the stream's set.
  Result SetDeps(const void* stream, const std::vector<Node*>& deps, bool add);
  // An event recorded on a capturing stream: it keeps the stream's dependencies.
  void RecordEvent(const void* event, const void* stream);
  // The event recorded outside capture (a plain record) or destroyed: it carries nothing.
  void ForgetEvent(const void* event) { events_.erase(event); }
  // Whether the event was last recorded in a capture that is still going on.
  bool EventCaptured(const void* event) const;
  // The event, recorded in a capture going on, is waited for or queried from the host (which a
  // capture cannot take): that capture is invalidated. False when the event is not captured.
  bool HostUsesCapturedEvent(const void* event, const std::string& call);
  // `stream` waits for `event`: if the event was recorded in a capture, the stream joins it (or,
  // already in it, adds the event's nodes to its dependencies). A capturing stream waiting for
  // an event of another capture or from outside capture: kIsolation (the capture invalidated).
  // *joined says whether this was capture work (false: a plain wait, the caller posts it).
  Result WaitEvent(const void* stream, const void* event, bool* captured);
  // Ends `stream`'s capture: its graph in *out (owned by the caller unless the capture was
  // into the program's graph). Every stream of the capture stops capturing, whatever the result.
  Result End(const void* stream, uint64_t thread, Graph** out);
  // A stream destroyed mid-capture: the capture is invalidated and the stream leaves it.
  void ForgetStream(const void* stream);
  // An unsafe call (a synchronous copy, a device sync, an allocation) from `thread`, whose
  // exchange mode is `thread_mode`: kUnsupported (and the captures that forbid it invalidated)
  // when a capture forbids it, per cuThreadExchangeStreamCaptureMode's rules.
  Result Unsafe(uint64_t thread, Mode thread_mode, const std::string& call);
  // Whether a capture going on adds nodes to `g` (it must not be destroyed meanwhile).
  bool Uses(const Graph* g) const;
  // Invalidates `stream`'s capture (an operation it cannot take), saying why.
  void Invalidate(const void* stream, const std::string& why);

 private:
  struct StreamState {
    Capture* cap = nullptr;
    std::vector<Node*> deps;
  };
  struct EventState {
    Capture* cap = nullptr;
    std::vector<Node*> nodes;
  };
  void Drop(Capture* c);

  uint64_t next_id_ = 1;
  std::map<const void*, StreamState> streams_;
  std::map<const void*, EventState> events_;
  std::set<Capture*> captures_;  // owned
};

}  // namespace gpool::remote::client::graph
