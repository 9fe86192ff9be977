// CPU reductions for the libnccl.so.2 stand-in: semantics in nccl_reduce.h.
#include "remote/client/nccl_reduce.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include <fmt/format.h>

namespace gpool::remote::client::nccl {

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in float
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t FloatToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x1ff);  // NaN
  if (a >= 0x47800000u) return sign | 0x7c00u;  // >= 65536 (or inf): infinity
  if (a < 0x38800000u) {                        // below 2^-14: a multiple of 2^-24 in half
    // a * 2^24 < 2^10 is exact; nearbyint rounds it to nearest even (the default mode).
    return sign | static_cast<uint16_t>(std::nearbyint(std::bit_cast<float>(a) * 16777216.0f));
  }
  // Normal: round the 23-bit mantissa to 10 bits, nearest even; a carry moves into the exponent
  // (65520 and above become infinity this way).
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return sign | static_cast<uint16_t>(r >> 13);
}

float Bf16ToFloat(uint16_t b) { return std::bit_cast<float>(uint32_t{b} << 16); }

uint16_t FloatToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

size_t ElementSize(int dtype) {
  switch (static_cast<DType>(dtype)) {
    case DType::kInt8: case DType::kUint8: case DType::kFloat8e4m3: case DType::kFloat8e5m2:
      return 1;
    case DType::kFloat16: case DType::kBfloat16: return 2;
    case DType::kInt32: case DType::kUint32: case DType::kFloat32: return 4;
    case DType::kInt64: case DType::kUint64: case DType::kFloat64: return 8;
  }
  return 0;
}

std::string TypeName(int dtype) {
  static const char* const kNames[] = {"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32",
                                       "ncclInt64", "ncclUint64", "ncclFloat16", "ncclFloat32",
                                       "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3",
                                       "ncclFloat8e5m2"};
  if (dtype >= 0 && dtype < 12) return kNames[dtype];
  return fmt::format("data type {}", dtype);
}

std::string OpName(int op) {
  static const char* const kNames[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};
  if (op >= 0 && op < 5) return kNames[op];
  return fmt::format("reduction operator {}", op);
}

Status CheckType(int dtype) {
  if (ElementSize(dtype) == 0) {
    return Status::InvalidArgument(fmt::format("{} is not one of NCCL's data types (0..11)", dtype));
  }
  return Status::Ok();
}

Status CheckReducible(int dtype, int op) {
  GPOOL_RETURN_IF_ERROR(CheckType(dtype));
  if (op < 0 || op > 4) {
    return Status::Unimplemented(fmt::format(
        "{} is not a built-in operator (sum, prod, max, min, avg); gpool's libnccl.so.2 stand-in "
        "creates no custom operators (ncclRedOpCreatePreMulSum)", OpName(op)));
  }
  if (dtype == static_cast<int>(DType::kFloat8e4m3) || dtype == static_cast<int>(DType::kFloat8e5m2)) {
    return Status::Unimplemented(fmt::format(
        "{} of {}: gpool's libnccl.so.2 stand-in does not reduce fp8 (copies of it work)",
        OpName(op), TypeName(dtype)));
  }
  return Status::Ok();
}

namespace {

// Element access: integers and float/double as themselves, half and bfloat16 through float.
template <class T> struct Native {
  using Store = T;
  using Calc = T;
  static Calc Load(Store s) { return s; }
  static Store Put(Calc c) { return c; }
};
struct Half {
  using Store = uint16_t;
  using Calc = float;
  static float Load(uint16_t s) { return HalfToFloat(s); }
  static uint16_t Put(float c) { return FloatToHalf(c); }
};
struct Bf16 {
  using Store = uint16_t;
  using Calc = float;
  static float Load(uint16_t s) { return Bf16ToFloat(s); }
  static uint16_t Put(float c) { return FloatToBf16(c); }
};

template <class C>
C Sum(C a, C b) {
  if constexpr (std::is_integral_v<C>) {  // wraps, as the GPU's integer add does
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class C>
C Prod(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    // unsigned int at least, so that uint8/uint16 products are not promoted to a signed int.
    using U = std::common_type_t<std::make_unsigned_t<C>, unsigned>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
// NaN-ignoring for floating types (fmax/fmin: the other operand, NaN only if both are).
template <class C>
C Max(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return std::fmax(a, b);
  else return a < b ? b : a;
}
template <class C>
C Min(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) return std::fmin(a, b);
  else return b < a ? b : a;
}

// Integer avg (NCCL's SumPostDiv): the magnitude divided, truncating toward zero.
template <class C>
C DivideTowardZero(C x, int n) {
  using U = std::make_unsigned_t<C>;
  const bool neg = std::is_signed_v<C> && x < 0;
  const U mag = neg ? static_cast<U>(U{0} - static_cast<U>(x)) : static_cast<U>(x);
  const U q = static_cast<U>(mag / static_cast<U>(n));
  return neg ? static_cast<C>(static_cast<U>(U{0} - q)) : static_cast<C>(q);
}

// acc[i] = f(acc[i], input[i]) for each further input in rank order, each step rounded to the
// element type; the operator is a template argument, so the inner loop has no branch on it.
template <class A, class F>
void Fold(bool premul, const void* const* inputs, int n, void* out, size_t count, F f) {
  using S = typename A::Store;
  using C = typename A::Calc;
  // Floating avg: each input times 1/n rounded to the element type first (PreMulSum).
  const C scale = A::Load(A::Put(static_cast<C>(1.0 / n)));
  auto load = [&](int r, size_t i) {
    S s;
    std::memcpy(&s, static_cast<const char*>(inputs[r]) + i * sizeof(S), sizeof(S));
    C v = A::Load(s);
    if constexpr (std::is_floating_point_v<C>) {
      if (premul) v = A::Load(A::Put(v * scale));
    }
    return v;
  };
  if constexpr (std::is_same_v<S, C>) {
    bool aliased = false;  // `out` is a later input: it must not be overwritten before it is read
    for (int r = 1; r < n; ++r) aliased = aliased || inputs[r] == out;
    if (!premul && !aliased) {  // integers and float/double: straight into `out`, nothing to round
      auto* o = static_cast<char*>(out);  // bytes: `out` need not be aligned for C
      if (out != inputs[0]) std::memmove(out, inputs[0], count * sizeof(C));
      for (int r = 1; r < n; ++r) {
        const auto* in = static_cast<const char*>(inputs[r]);
        for (size_t i = 0; i < count; ++i) {
          C a, b;
          std::memcpy(&a, o + i * sizeof(C), sizeof(C));
          std::memcpy(&b, in + i * sizeof(C), sizeof(C));
          a = f(a, b);
          std::memcpy(o + i * sizeof(C), &a, sizeof(C));
        }
      }
      return;
    }
  }
  std::vector<C> acc(count);
  for (size_t i = 0; i < count; ++i) acc[i] = load(0, i);
  for (int r = 1; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) acc[i] = A::Load(A::Put(f(acc[i], load(r, i))));
  }
  for (size_t i = 0; i < count; ++i) {
    C v = acc[i];
    if constexpr (std::is_integral_v<C>) {
      if (premul) v = DivideTowardZero(v, n);  // integer avg: the sum's magnitude divided
    }
    const S s = A::Put(v);
    std::memcpy(static_cast<char*>(out) + i * sizeof(S), &s, sizeof(S));
  }
}

template <class A>
void ReduceAs(int op, const void* const* inputs, int n, void* out, size_t count) {
  using C = typename A::Calc;
  const bool avg = op == static_cast<int>(RedOp::kAvg);
  switch (static_cast<RedOp>(op)) {
    case RedOp::kSum: case RedOp::kAvg:
      return Fold<A>(avg, inputs, n, out, count, [](C a, C b) { return Sum(a, b); });
    case RedOp::kProd: return Fold<A>(false, inputs, n, out, count, [](C a, C b) { return Prod(a, b); });
    case RedOp::kMax: return Fold<A>(false, inputs, n, out, count, [](C a, C b) { return Max(a, b); });
    case RedOp::kMin: return Fold<A>(false, inputs, n, out, count, [](C a, C b) { return Min(a, b); });
  }
}

}  // namespace

void Reduce(int dtype, int op, const void* const* inputs, int n, void* out, size_t count) {
  switch (static_cast<DType>(dtype)) {
    case DType::kInt8: return ReduceAs<Native<int8_t>>(op, inputs, n, out, count);
    case DType::kUint8: return ReduceAs<Native<uint8_t>>(op, inputs, n, out, count);
    case DType::kInt32: return ReduceAs<Native<int32_t>>(op, inputs, n, out, count);
    case DType::kUint32: return ReduceAs<Native<uint32_t>>(op, inputs, n, out, count);
    case DType::kInt64: return ReduceAs<Native<int64_t>>(op, inputs, n, out, count);
    case DType::kUint64: return ReduceAs<Native<uint64_t>>(op, inputs, n, out, count);
    case DType::kFloat16: return ReduceAs<Half>(op, inputs, n, out, count);
    case DType::kFloat32: return ReduceAs<Native<float>>(op, inputs, n, out, count);
    case DType::kFloat64: return ReduceAs<Native<double>>(op, inputs, n, out, count);
    case DType::kBfloat16: return ReduceAs<Bf16>(op, inputs, n, out, count);
    case DType::kFloat8e4m3: case DType::kFloat8e5m2: return;  // refused by CheckReducible
  }
}

}  // namespace gpool::remote::client::nccl
