// The CPU reductions of gpool's libnccl.so.2 stand-in (nccl_api.cc): NCCL's element types and
// reduction operators, computed on the client as NCCL's device code computes them, so that a
// collective relayed through the client gives what NCCL would on the GPUs:
//  - sum and prod of integers wrap (two's complement), as the GPU's integer arithmetic does;
//  - half and bfloat16 are reduced one pair at a time, each step rounded to the type (NCCL's
//    __hadd/__hmul; the step is computed in float and rounded once, which is the correctly
//    rounded result because float has more than twice the bits: no double-rounding error);
//  - max and min of floating types return the other operand when one is NaN and NaN only when
//    both are (fmaxf/fminf, __hmax/__hmin in NCCL's reduce_kernel.h); sum and prod propagate NaN
//    and infinities as IEEE arithmetic does;
//  - avg of floating types multiplies each input by 1/nranks rounded to the type, then sums
//    (NCCL's PreMulSum with that scalar); avg of integers sums (wrapping) and divides the
//    magnitude, truncating toward zero (NCCL's SumPostDiv).
// Limit: NCCL's order of additions follows its ring or tree; this code adds in rank order, so
// floating sums of three or more ranks may differ from NCCL's in the last bits (as NCCL's own
// results differ between algorithms). fp8 (e4m3, e5m2) is refused, naming the type.
// The numbering of types and operators is NCCL's (nccl.h), checked there by nccl_api.cc.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/status.h"

namespace gpool::remote::client::nccl {

enum class DType : int {
  kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
  kFloat16 = 6, kFloat32 = 7, kFloat64 = 8, kBfloat16 = 9, kFloat8e4m3 = 10, kFloat8e5m2 = 11,
};
enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

// Bytes of one element; 0 for a number that is not one of NCCL's types.
size_t ElementSize(int dtype);
std::string TypeName(int dtype);
std::string OpName(int op);
// Ok when `dtype` and `op` can be reduced here; else why, naming both.
Status CheckReducible(int dtype, int op);
// Ok when `dtype` can be moved (every type NCCL has, fp8 included: copies need no arithmetic).
Status CheckType(int dtype);

// out[i] = inputs[0][i] (op) inputs[1][i] (op) ... for i < count, in rank order; `out` may be
// one of the inputs. CheckReducible must have passed.
void Reduce(int dtype, int op, const void* const* inputs, int ninputs, void* out, size_t count);

// IEEE binary16 and bfloat16 from and to float, rounding to nearest even (CUDA's __float2half_rn
// and __float2bfloat16_rn); NaN stays NaN, overflow gives infinity.
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToBf16(float f);

}  // namespace gpool::remote::client::nccl
