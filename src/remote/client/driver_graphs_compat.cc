// The CUDA 10.0-12.2 forms of the capture and graph calls (driver_capture.cc, driver_graphs.cc
// implement the current ones). Runtimes and libraries built against those toolkits fetch these
// with cuGetProcAddress by version: a CUDA 12.0-12.2 runtime gets cuGraphGetEdges,
// cuGraphAddDependencies and cuStreamUpdateCaptureDependencies without edge data, an 11.x one
// cuGraphAddKernelNode with the CUDA 11 parameter struct and cuGraphInstantiate with an error log.
// Each is the current call with its newer arguments defaulted. cuda.h maps these names to the
// current forms by macro, so the macros are lifted here, and restored at the end (the file may
// share a unity translation unit with later ones).
#include <cuda.h>

#include <cstring>

#include "remote/client/driver_graphs.h"

#undef cuStreamBeginCapture
#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies
#undef cuGraphInstantiate
#undef cuGraphAddKernelNode
#undef cuGraphKernelNodeGetParams
#undef cuGraphExecKernelNodeSetParams
#undef cuGraphGetEdges
#undef cuGraphAddDependencies
#undef cuGraphExecUpdate
#undef cuGraphNodeGetDependencies
#undef cuGraphNodeGetDependentNodes
#undef cuGraphRemoveDependencies
#undef cuGraphAddNode
#undef cuGraphKernelNodeSetParams

using gpool::remote::client::driver::Fail;

namespace {

CUDA_KERNEL_NODE_PARAMS FromV1(const CUDA_KERNEL_NODE_PARAMS_v1& p) {
  CUDA_KERNEL_NODE_PARAMS q{};
  q.func = p.func;
  q.gridDimX = p.gridDimX;
  q.gridDimY = p.gridDimY;
  q.gridDimZ = p.gridDimZ;
  q.blockDimX = p.blockDimX;
  q.blockDimY = p.blockDimY;
  q.blockDimZ = p.blockDimZ;
  q.sharedMemBytes = p.sharedMemBytes;
  q.kernelParams = p.kernelParams;
  q.extra = p.extra;
  return q;
}

}  // namespace

#pragma GCC visibility push(default)
extern "C" {

CUresult cuStreamBeginCapture(CUstream s);
CUresult cuStreamBeginCapture_ptsz(CUstream s);
CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id);
CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id);
CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* deps, size_t n,
                                           unsigned int flags);
CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* deps, size_t n,
                                                unsigned int flags);
CUresult cuGraphInstantiate(CUgraphExec* out, CUgraph g, CUgraphNode* err_node, char* log,
                            size_t log_size);
CUresult cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode* err_node, char* log,
                               size_t log_size);
CUresult cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1* p);
CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* p);
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode node,
                                        const CUDA_KERNEL_NODE_PARAMS_v1* p);
CUresult cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* n);
CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                size_t n);
CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode* err_node,
                           CUgraphExecUpdateResult* result);
CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* n);
CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* out, size_t* n);
CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                   size_t n);

CUresult cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                        CUgraphNodeParams* p);
CUresult cuGraphAddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                        CUgraphNodeParams* p) {
  return cuGraphAddNode_v2(out, g, deps, nullptr, n, p);
}
CUresult cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* n) {
  return cuGraphNodeGetDependencies_v2(node, deps, nullptr, n);
}
CUresult cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* out, size_t* n) {
  return cuGraphNodeGetDependentNodes_v2(node, out, nullptr, n);
}
CUresult cuGraphRemoveDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                   size_t n) {
  return cuGraphRemoveDependencies_v2(g, from, to, nullptr, n);
}

// CUDA 10.0's capture had no mode argument: global, as the default mode is.
CUresult cuStreamBeginCapture(CUstream s) {
  return cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
CUresult cuStreamBeginCapture_ptsz(CUstream s) { return cuStreamBeginCapture(s); }

CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return cuStreamGetCaptureInfo_v3(s, status, id, nullptr, nullptr, nullptr, nullptr);
}
CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  return cuStreamGetCaptureInfo(s, status, id);
}

CUresult cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* deps, size_t n,
                                           unsigned int flags) {
  return cuStreamUpdateCaptureDependencies_v2(s, deps, nullptr, n, flags);
}
CUresult cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* deps, size_t n,
                                                unsigned int flags) {
  return cuStreamUpdateCaptureDependencies(s, deps, n, flags);
}

// The error, if any, also goes to the log buffer (CUDA writes its diagnostics there).
CUresult cuGraphInstantiate(CUgraphExec* out, CUgraph g, CUgraphNode* err_node, char* log,
                            size_t log_size) {
  if (err_node) *err_node = nullptr;
  CUresult r = cuGraphInstantiateWithFlags(out, g, 0);
  if (log && log_size > 0) {
    const char* what = r == CUDA_SUCCESS ? "" : "gpool: cuGraphInstantiate failed (see stderr)";
    std::strncpy(log, what, log_size - 1);
    log[log_size - 1] = '\0';
  }
  return r;
}
CUresult cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode* err_node, char* log,
                               size_t log_size) {
  return cuGraphInstantiate(out, g, err_node, log, log_size);
}

CUresult cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                              const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (!p) return Fail("cuGraphAddKernelNode", CUDA_ERROR_INVALID_VALUE, "null params");
  CUDA_KERNEL_NODE_PARAMS q = FromV1(*p);
  return cuGraphAddKernelNode_v2(out, g, deps, n, &q);
}
CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (!p) return Fail("cuGraphKernelNodeGetParams", CUDA_ERROR_INVALID_VALUE, "null params");
  CUDA_KERNEL_NODE_PARAMS q;
  if (CUresult r = cuGraphKernelNodeGetParams_v2(node, &q)) return r;
  *p = CUDA_KERNEL_NODE_PARAMS_v1{q.func,      q.gridDimX,  q.gridDimY,       q.gridDimZ,
                                  q.blockDimX, q.blockDimY, q.blockDimZ,      q.sharedMemBytes,
                                  q.kernelParams, q.extra};
  return CUDA_SUCCESS;
}
CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* p);
CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (!p) return Fail("cuGraphKernelNodeSetParams", CUDA_ERROR_INVALID_VALUE, "null params");
  CUDA_KERNEL_NODE_PARAMS q = FromV1(*p);
  return cuGraphKernelNodeSetParams_v2(node, &q);
}
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode node,
                                        const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (!p) return Fail("cuGraphExecKernelNodeSetParams", CUDA_ERROR_INVALID_VALUE, "null params");
  CUDA_KERNEL_NODE_PARAMS q = FromV1(*p);
  return cuGraphExecKernelNodeSetParams_v2(e, node, &q);
}

CUresult cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* n) {
  return cuGraphGetEdges_v2(g, from, to, nullptr, n);
}
CUresult cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                size_t n) {
  return cuGraphAddDependencies_v2(g, from, to, nullptr, n);
}

CUresult cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode* err_node,
                           CUgraphExecUpdateResult* result) {
  CUgraphExecUpdateResultInfo info{};
  CUresult r = cuGraphExecUpdate_v2(e, g, &info);
  if (err_node) *err_node = info.errorNode;
  if (result) *result = info.result;
  return r;
}

}  // extern "C"
#pragma GCC visibility pop

// cuda.h's mappings again, for whatever follows in a unity build.
#define cuStreamBeginCapture __CUDA_API_PTSZ(cuStreamBeginCapture_v2)
#define cuStreamGetCaptureInfo __CUDA_API_PTSZ(cuStreamGetCaptureInfo_v3)
#define cuStreamUpdateCaptureDependencies __CUDA_API_PTSZ(cuStreamUpdateCaptureDependencies_v2)
#define cuGraphInstantiate cuGraphInstantiateWithFlags
#define cuGraphAddKernelNode cuGraphAddKernelNode_v2
#define cuGraphKernelNodeGetParams cuGraphKernelNodeGetParams_v2
#define cuGraphExecKernelNodeSetParams cuGraphExecKernelNodeSetParams_v2
#define cuGraphGetEdges cuGraphGetEdges_v2
#define cuGraphAddDependencies cuGraphAddDependencies_v2
#define cuGraphExecUpdate cuGraphExecUpdate_v2
#define cuGraphNodeGetDependencies cuGraphNodeGetDependencies_v2
#define cuGraphNodeGetDependentNodes cuGraphNodeGetDependentNodes_v2
#define cuGraphRemoveDependencies cuGraphRemoveDependencies_v2
#define cuGraphAddNode cuGraphAddNode_v2
#define cuGraphKernelNodeSetParams cuGraphKernelNodeSetParams_v2
