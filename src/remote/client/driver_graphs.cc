// CUDA graphs in the driver stand-in (driver_graphs.h; the DAG in graph_model.h): graphs built
// by capture (driver_capture.cc) or node by node, instantiated (a frozen copy in a topological
// order) and launched. A launch replays the nodes in that order on the launch stream as the
// calls they stand for: a kernel node is a launch with the parameter bytes packed when the node
// was made; a memcpy node from host memory reads that memory at launch time (as CUDA does); a
// memset node is cuMemsetD8/D16/D32Async per row; event nodes record or wait on the launch stream;
// a host node is cuLaunchHostFunc. The posts are pipelined like any other (one round trip for
// the whole launch only when the program synchronizes). Branches of the graph run one after the
// other on the launch stream: more ordering than CUDA's, never less.
//
// Implemented: cuGraphCreate/Destroy/Clone, cuGraphAdd{Kernel(_v2),Memcpy,Memset,Empty,Host,
// EventRecord,EventWait}Node, cuGraphAddNode_v2 (those kinds), cuGraphAddDependencies(_v2), cuGraphGetNodes/GetRootNodes/
// GetEdges(_v2), cuGraphNodeGetType, cuGraphKernelNodeGetParams_v2,
// cuGraphInstantiateWithFlags/WithParams, cuGraphUpload, cuGraphLaunch, cuGraphExecDestroy,
// cuGraphExecKernelNodeSetParams_v2, cuGraphExecUpdate_v2, cuGraphNodeGetDependencies/
// GetDependentNodes/RemoveDependencies(_v2), cuGraphDestroyNode, cuGraphNodeFindInClone, and the
// host, event and memset nodes' get/set calls, cuGraphNodeSetParams, cuGraphKernelNode/
// MemcpyNode/MemsetNodeSetParams, and cuGraphExecNodeSetParams with the per-kind
// cuGraphExec*SetParams/SetEvent calls. The rest of the family stays a loud stub (driver_stubs.cc).
// Memcpy nodes are 1-D (Height and Depth 1, no arrays).
#include <cuda.h>

#include <cstring>

#include "remote/client/driver_graphs.h"

using namespace gpool::remote::client::driver;  // NOLINT: the C API below is this file's point

namespace {

graph::Graph* AsGraph(CUgraph g) { return reinterpret_cast<graph::Graph*>(g); }
graph::Node* AsNode(CUgraphNode n) { return reinterpret_cast<graph::Node*>(n); }

// A live graph, else CUDA_ERROR_INVALID_HANDLE (said). Caller holds Graphs().mu.
CUresult GraphLive(const char* call, CUgraph g) {
  if (!g || !Graphs().graphs.count(AsGraph(g))) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE,
                fmt::format("graph {} is not a live graph", static_cast<const void*>(g)));
  }
  return CUDA_SUCCESS;
}
// The live graph holding node `n`, or null. Caller holds Graphs().mu.
graph::Graph* GraphOfNode(CUgraphNode n) {
  for (graph::Graph* g : Graphs().graphs) {
    if (g->Contains(AsNode(n))) return g;
  }
  return nullptr;
}

// Adds a node to graph `g` after deps[0..n), its handle in *out.
CUresult AddGraphNode(const char* call, CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                 graph::Op op) {
  if (!out) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null node pointer");
  if (n > 0 && !deps) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null dependencies");
  std::vector<graph::Node*> d;
  for (size_t i = 0; i < n; ++i) d.push_back(AsNode(deps[i]));
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive(call, g)) return r;
  graph::Node* node;
  if (graph::Result r = AsGraph(g)->Add(std::move(op), d, &node); !r.ok()) {
    return FromGraphResult(call, r);
  }
  *out = reinterpret_cast<CUgraphNode>(node);
  return CUDA_SUCCESS;
}

CUresult KernelNodeOp(const char* call, const CUDA_KERNEL_NODE_PARAMS* p, graph::Op* op) {
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUDA_KERNEL_NODE_PARAMS");
  // CUDA 12's struct names the kernel by CUfunction or CUkernel (the same record here).
  CUfunction f = p->func ? p->func : reinterpret_cast<CUfunction>(p->kern);
  if (!f) return Fail(call, CUDA_ERROR_INVALID_VALUE, "neither func nor kern is set");
  if (p->gridDimX == 0 || p->gridDimY == 0 || p->gridDimZ == 0 || p->blockDimX == 0 ||
      p->blockDimY == 0 || p->blockDimZ == 0) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "a grid or block dimension is 0");
  }
  op->kind = graph::Kind::kKernel;
  op->func = f;
  op->grid[0] = p->gridDimX;
  op->grid[1] = p->gridDimY;
  op->grid[2] = p->gridDimZ;
  op->block[0] = p->blockDimX;
  op->block[1] = p->blockDimY;
  op->block[2] = p->blockDimZ;
  op->shmem = p->sharedMemBytes;
  return PackKernelParams(call, f, p->kernelParams, p->extra, &op->params);
}

// One side of a memcpy node: device memory (true) or host memory, and its address.
CUresult MemcpyNodeSide(const char* call, CUmemorytype type, const void* host, CUdeviceptr dev,
                    size_t x, bool* device, uint64_t* addr) {
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      *device = false;
      *addr = reinterpret_cast<uint64_t>(host) + x;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_DEVICE:
      *device = true;
      *addr = dev + x;
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED: {
      std::lock_guard<std::mutex> lk(D().mu);
      *device = D().DeviceOfLocked(dev) >= 0;
      *addr = dev + x;
      return CUDA_SUCCESS;
    }
    default:
      return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("memory type {}: a memcpy node "
                  "copies host or device memory only (CUDA arrays are not remoted)",
                  static_cast<int>(type)));
  }
}

CUresult MemcpyNodeOp(const char* call, const CUDA_MEMCPY3D* p, graph::Op* op) {
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUDA_MEMCPY3D");
  if (p->Height > 1 || p->Depth > 1 || p->srcY || p->srcZ || p->dstY || p->dstZ || p->srcLOD ||
      p->dstLOD) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("a {}x{}x{} copy: gpool's memcpy "
                "nodes are 1-D (Height and Depth 1, no Y, Z or LOD offsets)", p->WidthInBytes,
                p->Height, p->Depth));
  }
  bool sdev, ddev;
  uint64_t src, dst;
  if (CUresult r = MemcpyNodeSide(call, p->srcMemoryType, p->srcHost, p->srcDevice, p->srcXInBytes,
                              &sdev, &src)) {
    return r;
  }
  if (CUresult r = MemcpyNodeSide(call, p->dstMemoryType, p->dstHost, p->dstDevice, p->dstXInBytes,
                              &ddev, &dst)) {
    return r;
  }
  op->kind = graph::Kind::kMemcpy;
  op->dir = sdev ? (ddev ? graph::CopyDir::kD2D : graph::CopyDir::kD2H)
                 : (ddev ? graph::CopyDir::kH2D : graph::CopyDir::kH2H);
  op->src = src;
  op->dst = dst;
  op->n = p->WidthInBytes;
  return CUDA_SUCCESS;
}

CUresult MemsetNodeOp(const char* call, const CUDA_MEMSET_NODE_PARAMS* p, graph::Op* op) {
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUDA_MEMSET_NODE_PARAMS");
  if (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("elementSize {} (must be 1, 2 or 4)", p->elementSize));
  }
  if (p->height > 1 && p->pitch < p->width * p->elementSize) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("pitch {} below the row's {} bytes",
                p->pitch, p->width * p->elementSize));
  }
  op->kind = graph::Kind::kMemset;
  op->dst = p->dst;
  op->value = p->value;
  op->elem = p->elementSize;
  op->width = p->width;
  op->height = p->height == 0 ? 1 : p->height;
  op->pitch = p->pitch;
  return CUDA_SUCCESS;
}

// One node of a launch, on stream `s`; errors name `call` (cuGraphLaunch).
CUresult ReplayNode(const char* call, const graph::Op& op, CUstream s) {
  switch (op.kind) {
    case graph::Kind::kKernel: {
      // The packed bytes as a launch's parameter buffer (never a null pointer: PackParams wants
      // one even for a kernel without parameters).
      static std::byte none{};
      size_t size = op.params.size();
      void* buf = size ? const_cast<std::byte*>(op.params.data()) : &none;
      void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                       CU_LAUNCH_PARAM_END};
      return LaunchKernel(call, static_cast<CUfunction>(op.func), op.grid[0], op.grid[1],
                          op.grid[2], op.block[0], op.block[1], op.block[2], op.shmem, s, nullptr,
                          extra, op.cooperative);
    }
    case graph::Kind::kMemcpy:
      switch (op.dir) {
        case graph::CopyDir::kH2D:
          return CopyH2D(call, op.dst, reinterpret_cast<const void*>(op.src), op.n, s);
        case graph::CopyDir::kD2H:
          return CopyD2H(call, reinterpret_cast<void*>(op.dst), op.src, op.n, s,
                         /*async_call=*/true);
        case graph::CopyDir::kD2D:
          return CopyD2D(call, op.dst, op.src, op.n, s);
        case graph::CopyDir::kH2H:
          if (CUresult r = cuStreamSynchronize(s)) return r;
          if (op.n) {
            std::memmove(reinterpret_cast<void*>(op.dst), reinterpret_cast<const void*>(op.src),
                         op.n);
          }
          return CUDA_SUCCESS;
      }
      return CUDA_ERROR_INVALID_VALUE;
    case graph::Kind::kMemset:
      for (size_t row = 0; row < op.height; ++row) {
        CUdeviceptr at = op.dst + row * op.pitch;
        CUresult r = op.elem == 1   ? cuMemsetD8Async(at, static_cast<unsigned char>(op.value),
                                                      op.width, s)
                     : op.elem == 2 ? cuMemsetD16Async(at, static_cast<unsigned short>(op.value),
                                                       op.width, s)
                                    : cuMemsetD32Async(at, op.value, op.width, s);
        if (r) return r;
      }
      return CUDA_SUCCESS;
    case graph::Kind::kHost:
      return cuLaunchHostFunc(s, op.fn, op.data);
    case graph::Kind::kEventRecord:
      return cuEventRecord(static_cast<CUevent>(op.event), s);
    case graph::Kind::kEventWait:
      return cuStreamWaitEvent(s, static_cast<CUevent>(op.event), 0);
    case graph::Kind::kEmpty:
      return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult InstantiateGraph(const char* call, CUgraphExec* out, CUgraph g, unsigned long long flags,
                          CUgraphNode* err_node) {
  if (!out) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null exec pointer");
  if (err_node) *err_node = nullptr;
  const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                   CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                   CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & ~known) {
    return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("flags {:#x}: device launch is not "
                "remoted (gpool replays graphs from the client)", flags));
  }
  std::unique_ptr<graph::Exec> e;
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive(call, g)) return r;
  if (graph::Result r = graph::Instantiate(*AsGraph(g), &e); !r.ok()) return FromGraphResult(call, r);
  graph::Exec* raw = e.release();
  Graphs().execs.insert(raw);
  *out = reinterpret_cast<CUgraphExec>(raw);
  return CUDA_SUCCESS;
}

// A node's operation from the generic CUgraphNodeParams (cuGraphAddNode, cuGraphNodeSetParams,
// cuGraphExecNodeSetParams): the node kinds gpool's graphs take, others refused naming the type.
CUresult OpFromParams(const char* call, const CUgraphNodeParams* p, graph::Op* op) {
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUgraphNodeParams");
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: {
      const CUDA_KERNEL_NODE_PARAMS_v3& k = p->kernel;
      CUDA_KERNEL_NODE_PARAMS v2{k.func, k.gridDimX, k.gridDimY, k.gridDimZ, k.blockDimX,
                                 k.blockDimY, k.blockDimZ, k.sharedMemBytes, k.kernelParams,
                                 k.extra, k.kern, k.ctx};
      if (CUresult r = KernelNodeOp(call, &v2, op)) return r;
      break;
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (CUresult r = MemcpyNodeOp(call, &p->memcpy.copyParams, op)) return r;
      break;
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS_v2& m = p->memset;
      CUDA_MEMSET_NODE_PARAMS v1{m.dst, m.pitch, m.value, m.elementSize, m.width, m.height};
      if (CUresult r = MemsetNodeOp(call, &v1, op)) return r;
      break;
    }
    case CU_GRAPH_NODE_TYPE_HOST:
      if (!p->host.fn) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null host function");
      op->kind = graph::Kind::kHost;
      op->fn = p->host.fn;
      op->data = p->host.userData;
      break;
    case CU_GRAPH_NODE_TYPE_EMPTY:
      break;
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: {
      const bool record = p->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD;
      op->kind = record ? graph::Kind::kEventRecord : graph::Kind::kEventWait;
      op->event = record ? p->eventRecord.event : p->eventWait.event;
      if (!op->event) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null event");
      break;
    }
    default:
      return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("node type {}: gpool's graphs take "
                  "kernel, memcpy, memset, host, empty and event nodes", static_cast<int>(p->type)));
  }
  return CUDA_SUCCESS;
}

// New parameters for a node of a live graph: `op` must be of the node's kind.
CUresult SetGraphNodeOp(const char* call, CUgraphNode node, graph::Op op) {
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!node || !GraphOfNode(node)) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "not a node of a live graph");
  }
  graph::Op& cur = AsNode(node)->op;
  if (cur.kind != op.kind) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("the node is a {} node, the "
                "parameters a {} node's", graph::KindName(cur.kind), graph::KindName(op.kind)));
  }
  cur = std::move(op);
  return CUDA_SUCCESS;
}
// New parameters for the executable graph's copy of `node` (a node of the graph it was
// instantiated from): `op` must be of the node's kind. Not to be raced with a launch of it.
CUresult SetExecNodeOp(const char* call, CUgraphExec e, CUgraphNode node, graph::Op op) {
  auto* exec = reinterpret_cast<graph::Exec*>(e);
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!Graphs().execs.count(exec)) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE, "not a live executable graph");
  }
  auto it = exec->from_original.find(AsNode(node));
  if (it == exec->from_original.end()) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "not a node of the graph the executable graph "
                "was instantiated from");
  }
  if (it->second->op.kind != op.kind) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, fmt::format("the node is a {} node, the "
                "parameters a {} node's", graph::KindName(it->second->op.kind),
                graph::KindName(op.kind)));
  }
  it->second->op = std::move(op);
  return CUDA_SUCCESS;
}

// Copies up to *n entries of `v` into `out` (nulls past the end), or counts when `out` is null;
// *n becomes the full count (cuGraphGetNodes' convention).
template <class T, class U>
void ListOut(const std::vector<U>& v, T* out, size_t* n) {
  if (out) {
    for (size_t i = 0; i < *n; ++i) out[i] = i < v.size() ? reinterpret_cast<T>(v[i]) : T{};
  }
  *n = v.size();
}

}  // namespace

#pragma GCC visibility push(default)
extern "C" {

CUresult cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (!out) return Fail("cuGraphCreate", CUDA_ERROR_INVALID_VALUE, "null graph pointer");
  if (flags != 0) {
    return Fail("cuGraphCreate", CUDA_ERROR_INVALID_VALUE, fmt::format("flags {:#x} (must be 0)",
                flags));
  }
  auto* g = new graph::Graph;
  std::lock_guard<std::mutex> lk(Graphs().mu);
  Graphs().graphs.insert(g);
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph g) {
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive("cuGraphDestroy", g)) return r;
  if (Graphs().captures.Uses(AsGraph(g))) {
    return Fail("cuGraphDestroy", CUDA_ERROR_ILLEGAL_STATE, "a stream capture is adding nodes to "
                "the graph (end the capture first)");
  }
  Graphs().graphs.erase(AsGraph(g));
  delete AsGraph(g);
  return CUDA_SUCCESS;
}

CUresult cuGraphClone(CUgraph* out, CUgraph g) {
  if (!out) return Fail("cuGraphClone", CUDA_ERROR_INVALID_VALUE, "null graph pointer");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive("cuGraphClone", g)) return r;
  graph::Graph* c = AsGraph(g)->Clone().release();
  Graphs().graphs.insert(c);
  *out = reinterpret_cast<CUgraph>(c);
  return CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS* p) {
  const char* call = "cuGraphAddKernelNode_v2";
  graph::Op op;
  if (CUresult r = KernelNodeOp(call, p, &op)) return r;
  return AddGraphNode(call, out, g, deps, n, std::move(op));
}

CUresult cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_MEMCPY3D* p, CUcontext) {
  const char* call = "cuGraphAddMemcpyNode";
  graph::Op op;
  if (CUresult r = MemcpyNodeOp(call, p, &op)) return r;
  return AddGraphNode(call, out, g, deps, n, std::move(op));
}

CUresult cuGraphAddMemsetNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  const char* call = "cuGraphAddMemsetNode";
  graph::Op op;
  if (CUresult r = MemsetNodeOp(call, p, &op)) return r;
  return AddGraphNode(call, out, g, deps, n, std::move(op));
}

CUresult cuGraphAddEmptyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n) {
  return AddGraphNode("cuGraphAddEmptyNode", out, g, deps, n, graph::Op{});
}

CUresult cuGraphAddHostNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                            const CUDA_HOST_NODE_PARAMS* p) {
  const char* call = "cuGraphAddHostNode";
  if (!p || !p->fn) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null host function");
  graph::Op op;
  op.kind = graph::Kind::kHost;
  op.fn = p->fn;
  op.data = p->userData;
  return AddGraphNode(call, out, g, deps, n, std::move(op));
}

CUresult cuGraphAddEventRecordNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                   CUevent e) {
  if (!e) return Fail("cuGraphAddEventRecordNode", CUDA_ERROR_INVALID_VALUE, "null event");
  graph::Op op;
  op.kind = graph::Kind::kEventRecord;
  op.event = e;
  return AddGraphNode("cuGraphAddEventRecordNode", out, g, deps, n, std::move(op));
}

CUresult cuGraphAddEventWaitNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                 CUevent e) {
  if (!e) return Fail("cuGraphAddEventWaitNode", CUDA_ERROR_INVALID_VALUE, "null event");
  graph::Op op;
  op.kind = graph::Kind::kEventWait;
  op.event = e;
  return AddGraphNode("cuGraphAddEventWaitNode", out, g, deps, n, std::move(op));
}

// Edge data (CUDA 12.3+) must be default: gpool makes no programmatic (early-launch) edges.
CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                const CUgraphEdgeData* edges, size_t n) {
  const char* call = "cuGraphAddDependencies_v2";
  if (n > 0 && (!from || !to)) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null node arrays");
  if (edges) {
    for (size_t i = 0; i < n; ++i) {
      if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || edges[i].from_port != 0 ||
          edges[i].to_port != 0) {
        return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("edge {}: only default edges "
                    "are remoted", i));
      }
    }
  }
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive(call, g)) return r;
  for (size_t i = 0; i < n; ++i) {
    if (graph::Result r = AsGraph(g)->AddEdge(AsNode(from[i]), AsNode(to[i])); !r.ok()) {
      r.why = fmt::format("edge {}: {}", i, r.why);
      return FromGraphResult(call, r);
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* n) {
  if (!n) return Fail("cuGraphGetNodes", CUDA_ERROR_INVALID_VALUE, "null count");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive("cuGraphGetNodes", g)) return r;
  std::vector<graph::Node*> v;
  for (const auto& node : AsGraph(g)->nodes()) v.push_back(node.get());
  ListOut(v, nodes, n);
  return CUDA_SUCCESS;
}

CUresult cuGraphGetRootNodes(CUgraph g, CUgraphNode* nodes, size_t* n) {
  if (!n) return Fail("cuGraphGetRootNodes", CUDA_ERROR_INVALID_VALUE, "null count");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive("cuGraphGetRootNodes", g)) return r;
  ListOut(AsGraph(g)->Roots(), nodes, n);
  return CUDA_SUCCESS;
}

CUresult cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges,
                         size_t* n) {
  const char* call = "cuGraphGetEdges_v2";
  if (!n) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null count");
  if (!from != !to) return Fail(call, CUDA_ERROR_INVALID_VALUE, "from and to must both be given");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive(call, g)) return r;
  std::vector<graph::Node*> f, t;
  for (const auto& [a, b] : AsGraph(g)->Edges()) {
    f.push_back(a);
    t.push_back(b);
  }
  size_t want = *n;
  if (from) {
    ListOut(f, from, &want);
    want = *n;
    ListOut(t, to, &want);
    if (edges) {
      for (size_t i = 0; i < *n; ++i) edges[i] = CUgraphEdgeData{};
    }
  }
  *n = f.size();
  return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (!type) return Fail("cuGraphNodeGetType", CUDA_ERROR_INVALID_VALUE, "null type");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!node || !GraphOfNode(node)) {
    return Fail("cuGraphNodeGetType", CUDA_ERROR_INVALID_HANDLE, "not a node of a live graph");
  }
  switch (AsNode(node)->op.kind) {
    case graph::Kind::kKernel: *type = CU_GRAPH_NODE_TYPE_KERNEL; break;
    case graph::Kind::kMemcpy: *type = CU_GRAPH_NODE_TYPE_MEMCPY; break;
    case graph::Kind::kMemset: *type = CU_GRAPH_NODE_TYPE_MEMSET; break;
    case graph::Kind::kHost: *type = CU_GRAPH_NODE_TYPE_HOST; break;
    case graph::Kind::kEmpty: *type = CU_GRAPH_NODE_TYPE_EMPTY; break;
    case graph::Kind::kEventRecord: *type = CU_GRAPH_NODE_TYPE_EVENT_RECORD; break;
    case graph::Kind::kEventWait: *type = CU_GRAPH_NODE_TYPE_WAIT_EVENT; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  return InstantiateGraph("cuGraphInstantiateWithFlags", out, g, flags, nullptr);
}

CUresult cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph g,
                                      CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  const char* call = "cuGraphInstantiateWithParams";
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUDA_GRAPH_INSTANTIATE_PARAMS");
  CUresult r = InstantiateGraph(call, out, g, p->flags, &p->hErrNode_out);
  p->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

// Nothing to upload: an instantiated graph lives in the client until it is launched.
CUresult cuGraphUpload(CUgraphExec e, CUstream) {
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!Graphs().execs.count(reinterpret_cast<graph::Exec*>(e))) {
    return Fail("cuGraphUpload", CUDA_ERROR_INVALID_HANDLE, "not a live executable graph");
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  const char* call = "cuGraphLaunch";
  auto* exec = reinterpret_cast<graph::Exec*>(e);
  {
    std::lock_guard<std::mutex> lk(Graphs().mu);
    if (!Graphs().execs.count(exec)) {
      return Fail(call, CUDA_ERROR_INVALID_HANDLE, "not a live executable graph");
    }
  }
  if (Capturing(s)) return CaptureRefuse(call, s, "a graph launch into a capture (child graph)");
  // The exec is read without the lock: CUDA's graph objects are not to be changed while they are
  // launched (cuGraphExecKernelNodeSetParams from another thread during a launch is the
  // program's race, as with CUDA).
  for (const graph::Node* n : exec->order) {
    if (CUresult r = ReplayNode(call, n->op, s)) return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec e) {
  auto* exec = reinterpret_cast<graph::Exec*>(e);
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!Graphs().execs.erase(exec)) {
    return Fail("cuGraphExecDestroy", CUDA_ERROR_INVALID_HANDLE, "not a live executable graph");
  }
  delete exec;
  return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  const char* call = "cuGraphKernelNodeGetParams_v2";
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null params");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!node || !GraphOfNode(node) || AsNode(node)->op.kind != graph::Kind::kKernel) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "not a kernel node of a live graph");
  }
  const graph::Op& op = AsNode(node)->op;
  *p = CUDA_KERNEL_NODE_PARAMS{};
  p->func = static_cast<CUfunction>(op.func);
  p->gridDimX = op.grid[0];
  p->gridDimY = op.grid[1];
  p->gridDimZ = op.grid[2];
  p->blockDimX = op.block[0];
  p->blockDimY = op.block[1];
  p->blockDimZ = op.block[2];
  p->sharedMemBytes = op.shmem;
  // The packed bytes are not split back into kernelParams (CUDA gives pointers into its own
  // copy; a program reading them would need the layout): kernelParams stays null.
  return CUDA_SUCCESS;
}

// New launch parameters for a kernel node of the exec (named by the source graph's node).
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode node,
                                        const CUDA_KERNEL_NODE_PARAMS* p) {
  const char* call = "cuGraphExecKernelNodeSetParams_v2";
  graph::Op op;
  if (CUresult r = KernelNodeOp(call, p, &op)) return r;
  return SetExecNodeOp(call, e, node, std::move(op));
}

// A graph of the exec's shape gives it its node parameters (graph_model.h, UpdateExec).
CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  const char* call = "cuGraphExecUpdate_v2";
  auto* exec = reinterpret_cast<graph::Exec*>(e);
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!Graphs().execs.count(exec)) {
    return Fail(call, CUDA_ERROR_INVALID_HANDLE, "not a live executable graph");
  }
  if (CUresult r = GraphLive(call, g)) return r;
  graph::UpdateFail fail;
  const graph::Node* why;
  graph::Result r = graph::UpdateExec(exec, *AsGraph(g), &fail, &why);
  if (info) {
    *info = CUgraphExecUpdateResultInfo{};
    info->result = fail == graph::UpdateFail::kNone       ? CU_GRAPH_EXEC_UPDATE_SUCCESS
                   : fail == graph::UpdateFail::kNodeType ? CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
                                                          : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    info->errorNode = reinterpret_cast<CUgraphNode>(const_cast<graph::Node*>(why));
  }
  if (!r.ok()) return Fail(call, CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, r.why);
  return CUDA_SUCCESS;
}

// The generic form (CUDA 12.2+): the node kinds above by their CUgraphNodeParams. Edge data
// must be default, as for cuGraphAddDependencies.
CUresult cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                        const CUgraphEdgeData* edges, size_t n, CUgraphNodeParams* p) {
  const char* call = "cuGraphAddNode_v2";
  if (!p) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null CUgraphNodeParams");
  if (edges) {
    for (size_t i = 0; i < n; ++i) {
      if (edges[i].type != CU_GRAPH_DEPENDENCY_TYPE_DEFAULT || edges[i].from_port != 0 ||
          edges[i].to_port != 0) {
        return Fail(call, CUDA_ERROR_NOT_SUPPORTED, fmt::format("edge {}: only default edges "
                    "are remoted", i));
      }
    }
  }
  graph::Op op;
  if (CUresult r = OpFromParams(call, p, &op)) return r;
  return AddGraphNode(call, out, g, deps, n, std::move(op));
}

// ---- new parameters for a node of a graph, or of an executable graph

CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* p) {
  graph::Op op;
  if (CUresult r = OpFromParams("cuGraphNodeSetParams", p, &op)) return r;
  return SetGraphNodeOp("cuGraphNodeSetParams", node, std::move(op));
}
CUresult cuGraphExecNodeSetParams(CUgraphExec e, CUgraphNode node, CUgraphNodeParams* p) {
  graph::Op op;
  if (CUresult r = OpFromParams("cuGraphExecNodeSetParams", p, &op)) return r;
  return SetExecNodeOp("cuGraphExecNodeSetParams", e, node, std::move(op));
}
CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  const char* call = "cuGraphKernelNodeSetParams_v2";
  graph::Op op;
  if (CUresult r = KernelNodeOp(call, p, &op)) return r;
  return SetGraphNodeOp(call, node, std::move(op));
}
CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* p) {
  graph::Op op;
  if (CUresult r = MemcpyNodeOp("cuGraphMemcpyNodeSetParams", p, &op)) return r;
  return SetGraphNodeOp("cuGraphMemcpyNodeSetParams", node, std::move(op));
}
CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  graph::Op op;
  if (CUresult r = MemsetNodeOp("cuGraphMemsetNodeSetParams", p, &op)) return r;
  return SetGraphNodeOp("cuGraphMemsetNodeSetParams", node, std::move(op));
}
CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode node, const CUDA_MEMCPY3D* p,
                                        CUcontext) {
  graph::Op op;
  if (CUresult r = MemcpyNodeOp("cuGraphExecMemcpyNodeSetParams", p, &op)) return r;
  return SetExecNodeOp("cuGraphExecMemcpyNodeSetParams", e, node, std::move(op));
}
CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode node,
                                        const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  graph::Op op;
  if (CUresult r = MemsetNodeOp("cuGraphExecMemsetNodeSetParams", p, &op)) return r;
  return SetExecNodeOp("cuGraphExecMemsetNodeSetParams", e, node, std::move(op));
}
CUresult cuGraphExecHostNodeSetParams(CUgraphExec e, CUgraphNode node,
                                      const CUDA_HOST_NODE_PARAMS* p) {
  const char* call = "cuGraphExecHostNodeSetParams";
  if (!p || !p->fn) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null host function");
  graph::Op op;
  op.kind = graph::Kind::kHost;
  op.fn = p->fn;
  op.data = p->userData;
  return SetExecNodeOp(call, e, node, std::move(op));
}
CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec e, CUgraphNode node, CUevent ev) {
  const char* call = "cuGraphExecEventRecordNodeSetEvent";
  if (!ev) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null event");
  graph::Op op;
  op.kind = graph::Kind::kEventRecord;
  op.event = ev;
  return SetExecNodeOp(call, e, node, std::move(op));
}
CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec e, CUgraphNode node, CUevent ev) {
  const char* call = "cuGraphExecEventWaitNodeSetEvent";
  if (!ev) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null event");
  graph::Op op;
  op.kind = graph::Kind::kEventWait;
  op.event = ev;
  return SetExecNodeOp(call, e, node, std::move(op));
}

// ---- node queries and edits

CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, CUgraphEdgeData* edges,
                                    size_t* n) {
  const char* call = "cuGraphNodeGetDependencies_v2";
  if (!n) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null count");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!node || !GraphOfNode(node)) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "not a node of a live graph");
  }
  const size_t room = *n;
  ListOut(AsNode(node)->deps, deps, n);
  if (deps && edges) {
    for (size_t i = 0; i < room; ++i) edges[i] = CUgraphEdgeData{};
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* out, CUgraphEdgeData* edges,
                                      size_t* n) {
  const char* call = "cuGraphNodeGetDependentNodes_v2";
  if (!n) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null count");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  graph::Graph* g = node ? GraphOfNode(node) : nullptr;
  if (!g) return Fail(call, CUDA_ERROR_INVALID_VALUE, "not a node of a live graph");
  const size_t room = *n;
  ListOut(g->Dependents(AsNode(node)), out, n);
  if (out && edges) {
    for (size_t i = 0; i < room; ++i) edges[i] = CUgraphEdgeData{};
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                   const CUgraphEdgeData*, size_t n) {
  const char* call = "cuGraphRemoveDependencies_v2";
  if (n > 0 && (!from || !to)) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null node arrays");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive(call, g)) return r;
  for (size_t i = 0; i < n; ++i) {
    if (graph::Result r = AsGraph(g)->RemoveEdge(AsNode(from[i]), AsNode(to[i])); !r.ok()) {
      r.why = fmt::format("edge {}: {}", i, r.why);
      return FromGraphResult(call, r);
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroyNode(CUgraphNode node) {
  const char* call = "cuGraphDestroyNode";
  std::lock_guard<std::mutex> lk(Graphs().mu);
  graph::Graph* g = node ? GraphOfNode(node) : nullptr;
  if (!g) return Fail(call, CUDA_ERROR_INVALID_VALUE, "not a node of a live graph");
  if (Graphs().captures.Uses(g)) {
    return Fail(call, CUDA_ERROR_ILLEGAL_STATE, "a stream capture is adding nodes to the graph");
  }
  return FromGraphResult(call, g->Remove(AsNode(node)));
}

CUresult cuGraphNodeFindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone) {
  const char* call = "cuGraphNodeFindInClone";
  if (!out) return Fail(call, CUDA_ERROR_INVALID_VALUE, "null node pointer");
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (CUresult r = GraphLive(call, clone)) return r;
  graph::Node* n = AsGraph(clone)->InClone(AsNode(original));
  if (!n) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE, "the node is not one of the graph the clone was "
                "made from");
  }
  *out = reinterpret_cast<CUgraphNode>(n);
  return CUDA_SUCCESS;
}

extern "C++" namespace {
// The per-kind get/set calls: `f` reads or writes the op of `node`, a node of kind `kind` in a
// live graph, under Graphs().mu; any other node is refused, said naming `call`.
template <class F>
CUresult OnNodeOp(const char* call, CUgraphNode node, graph::Kind kind, F&& f) {
  std::lock_guard<std::mutex> lk(Graphs().mu);
  if (!node || !GraphOfNode(node) || AsNode(node)->op.kind != kind) {
    return Fail(call, CUDA_ERROR_INVALID_VALUE,
                fmt::format("not a {} node of a live graph", graph::KindName(kind)));
  }
  f(AsNode(node)->op);
  return CUDA_SUCCESS;
}
}  // namespace

CUresult cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) {
  if (!p) return Fail("cuGraphHostNodeGetParams", CUDA_ERROR_INVALID_VALUE, "null params");
  return OnNodeOp("cuGraphHostNodeGetParams", node, graph::Kind::kHost, [&](graph::Op& op) {
    p->fn = op.fn;
    p->userData = op.data;
  });
}
CUresult cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  if (!p || !p->fn) return Fail("cuGraphHostNodeSetParams", CUDA_ERROR_INVALID_VALUE, "null function");
  return OnNodeOp("cuGraphHostNodeSetParams", node, graph::Kind::kHost, [&](graph::Op& op) {
    op.fn = p->fn;
    op.data = p->userData;
  });
}
CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* e) {
  if (!e) return Fail("cuGraphEventRecordNodeGetEvent", CUDA_ERROR_INVALID_VALUE, "null event");
  return OnNodeOp("cuGraphEventRecordNodeGetEvent", node, graph::Kind::kEventRecord,
                  [&](graph::Op& op) { *e = static_cast<CUevent>(op.event); });
}
CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent e) {
  if (!e) return Fail("cuGraphEventRecordNodeSetEvent", CUDA_ERROR_INVALID_VALUE, "null event");
  return OnNodeOp("cuGraphEventRecordNodeSetEvent", node, graph::Kind::kEventRecord,
                  [&](graph::Op& op) { op.event = e; });
}
CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* e) {
  if (!e) return Fail("cuGraphEventWaitNodeGetEvent", CUDA_ERROR_INVALID_VALUE, "null event");
  return OnNodeOp("cuGraphEventWaitNodeGetEvent", node, graph::Kind::kEventWait,
                  [&](graph::Op& op) { *e = static_cast<CUevent>(op.event); });
}
CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent e) {
  if (!e) return Fail("cuGraphEventWaitNodeSetEvent", CUDA_ERROR_INVALID_VALUE, "null event");
  return OnNodeOp("cuGraphEventWaitNodeSetEvent", node, graph::Kind::kEventWait,
                  [&](graph::Op& op) { op.event = e; });
}
CUresult cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  if (!p) return Fail("cuGraphMemsetNodeGetParams", CUDA_ERROR_INVALID_VALUE, "null params");
  return OnNodeOp("cuGraphMemsetNodeGetParams", node, graph::Kind::kMemset, [&](graph::Op& op) {
    *p = CUDA_MEMSET_NODE_PARAMS{};
    p->dst = op.dst;
    p->pitch = op.pitch;
    p->value = op.value;
    p->elementSize = op.elem;
    p->width = op.width;
    p->height = op.height;
  });
}

CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s);
CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return cuGraphLaunch(e, s); }
CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s);
CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s) { return cuGraphUpload(e, s); }
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph g,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* p);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph g,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* p) {
  return cuGraphInstantiateWithParams(out, g, p);
}

}  // extern "C"
#pragma GCC visibility pop
