// The libnccl.so.2 stand-in's CPU reductions against values worked out by hand (and binary16
// rounding against the compiler's own _Float16 conversion): every type x operator, integer
// wrap-around, per-step rounding of half and bfloat16, NaN and infinity as NCCL's device code.
#include "remote/client/nccl_reduce.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace gpool::remote::client::nccl {
namespace {

constexpr int kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4;

// Reduces one element per rank; returns the result.
template <class T>
T Red(int dtype, int op, std::vector<T> per_rank) {
  std::vector<const void*> in;
  for (const T& v : per_rank) in.push_back(&v);
  T out{};
  Reduce(dtype, op, in.data(), static_cast<int>(in.size()), &out, 1);
  return out;
}
uint16_t H(float f) { return FloatToHalf(f); }
uint16_t B(float f) { return FloatToBf16(f); }

TEST(NcclHalf, RoundsToNearestEvenAtEveryRange) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);                // largest half
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);                // below the midpoint
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);                // the midpoint rounds to even: inf
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: to even (up)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);   // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);   // tie below it: to zero (even)
  EXPECT_EQ(FloatToHalf(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::nanf("")))));
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every half survives the round trip
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h) << std::hex << h;
  }
}

// An independent reference: GCC's _Float16 conversion (IEEE, round to nearest even).
TEST(NcclHalf, AgreesWithTheCompilersFloat16) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t x = bits(rng);
    // Mostly in and near half's range: exponent 100..150 (2^-27 .. 2^23).
    if (i % 2) x = (x & 0x807fffffu) | ((100u + x % 51u) << 23);
    float f = std::bit_cast<float>(x);
    if (std::isnan(f)) continue;
    auto want = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(FloatToHalf(f), want) << f;
  }
}

TEST(NcclBf16, RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie: to even
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie: to even (up)
  EXPECT_EQ(FloatToBf16(1.0f + 5 * std::ldexp(1.0f, -9)), 0x3f81);  // above the tie
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(std::nanf("")))));
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // overflow: inf
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if ((b & 0x7f80) == 0x7f80 && (b & 0x7f)) continue;
    ASSERT_EQ(FloatToBf16(Bf16ToFloat(static_cast<uint16_t>(b))), b) << std::hex << b;
  }
}

// 3, 5, 2, 6 on four ranks: sum 16, prod 180, max 6, min 2, avg 4 (1/4 is exact in every
// floating type), in every type NCCL reduces.
TEST(NcclReduce, EveryTypeAndOperator) {
  auto ints = [](auto zero, int dtype) {
    using T = decltype(zero);
    std::vector<T> v = {T(3), T(5), T(2), T(6)};
    EXPECT_EQ(Red<T>(dtype, kSum, v), T(16)) << TypeName(dtype);
    EXPECT_EQ(Red<T>(dtype, kProd, v), T(180)) << TypeName(dtype);
    EXPECT_EQ(Red<T>(dtype, kMax, v), T(6)) << TypeName(dtype);
    EXPECT_EQ(Red<T>(dtype, kMin, v), T(2)) << TypeName(dtype);
    EXPECT_EQ(Red<T>(dtype, kAvg, v), T(4)) << TypeName(dtype);
  };
  ints(int8_t{}, 0);
  ints(uint8_t{}, 1);
  ints(int32_t{}, 2);
  ints(uint32_t{}, 3);
  ints(int64_t{}, 4);
  ints(uint64_t{}, 5);
  ints(float{}, 7);
  ints(double{}, 8);
  std::vector<uint16_t> h = {H(3), H(5), H(2), H(6)}, b = {B(3), B(5), B(2), B(6)};
  const float want[] = {16, 180, 6, 2, 4};
  for (int op = 0; op < 5; ++op) {
    EXPECT_EQ(Red<uint16_t>(6, op, h), H(want[op])) << OpName(op);
    EXPECT_EQ(Red<uint16_t>(9, op, b), B(want[op])) << OpName(op);
    EXPECT_TRUE(CheckReducible(7, op).ok());
  }
}

TEST(NcclReduce, IntegersWrapAndAvgTruncatesTowardZero) {
  EXPECT_EQ(Red<int8_t>(0, kSum, {100, 100}), int8_t(-56));
  EXPECT_EQ(Red<uint8_t>(1, kSum, {200, 100}), uint8_t(44));
  EXPECT_EQ(Red<uint8_t>(1, kProd, {16, 16}), uint8_t(0));
  EXPECT_EQ(Red<int32_t>(2, kSum, {std::numeric_limits<int32_t>::max(), 1}),
            std::numeric_limits<int32_t>::min());
  EXPECT_EQ(Red<uint64_t>(5, kProd, {uint64_t{1} << 40, uint64_t{1} << 30}), uint64_t{0});
  EXPECT_EQ(Red<int32_t>(2, kAvg, {-3, -4}), -3);  // -7 / 2 toward zero
  EXPECT_EQ(Red<int32_t>(2, kAvg, {3, 4}), 3);
  EXPECT_EQ(Red<int8_t>(0, kMax, {-1, -7}), int8_t(-1));    // signed comparison
  EXPECT_EQ(Red<uint8_t>(1, kMax, {255, 7}), uint8_t(255)); // unsigned comparison
  EXPECT_EQ(Red<int64_t>(4, kMin, {-5, 4}), int64_t(-5));
}

// Half and bfloat16 round after every step, as NCCL's __hadd: 2048 + 1 is 2048 in half (the
// spacing there is 2, and the tie goes to even), so 2048 + 1 + 1 stays 2048, not 2050.
TEST(NcclReduce, HalfAndBf16RoundEveryStep) {
  EXPECT_EQ(Red<uint16_t>(6, kSum, {H(2048), H(1), H(1)}), H(2048));
  EXPECT_EQ(Red<uint16_t>(6, kSum, {H(2048), H(3)}), H(2052));  // 2051: tie to even
  EXPECT_EQ(Red<uint16_t>(6, kSum, {H(60000), H(10000)}), 0x7c00);  // overflow: inf
  EXPECT_EQ(Red<uint16_t>(9, kSum, {B(256), B(1), B(1)}), B(256));
  EXPECT_EQ(Red<uint16_t>(9, kSum, {B(256), B(3)}), B(260));  // 259: tie to even
  // avg of three 7s: each input times half(1/3) = 1365/4096 first, rounded to half: 7 * 1365/4096
  // = 2.3327... -> 2.33203125 (half's spacing there is 2^-9); the sums 4.6640625 and 6.99609375
  // are exact. Not 7: the pre-multiplication (NCCL's PreMulSum) shows.
  EXPECT_EQ(Red<uint16_t>(6, kAvg, {H(7), H(7), H(7)}), H(6.99609375f));
  EXPECT_EQ(Red<float>(7, kAvg, {7, 7}), 7.0f);  // 1/2 is exact
}

TEST(NcclReduce, NanAndInfinityAsNcclsDeviceCode) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(Red<float>(7, kSum, {nan, 1})));
  EXPECT_TRUE(std::isnan(Red<float>(7, kProd, {2, nan})));
  EXPECT_TRUE(std::isnan(Red<float>(7, kSum, {inf, -inf})));
  EXPECT_EQ(Red<float>(7, kSum, {inf, 1}), inf);
  EXPECT_EQ(Red<float>(7, kMax, {nan, 1}), 1.0f);  // fmaxf: the other operand
  EXPECT_EQ(Red<float>(7, kMax, {1, nan}), 1.0f);
  EXPECT_EQ(Red<float>(7, kMin, {nan, -3}), -3.0f);
  EXPECT_TRUE(std::isnan(Red<float>(7, kMax, {nan, nan})));
  EXPECT_EQ(Red<float>(7, kMax, {-inf, 3}), 3.0f);
  EXPECT_EQ(Red<double>(8, kMin, {std::nan(""), 2.5}), 2.5);
  EXPECT_TRUE(std::isnan(Red<double>(8, kAvg, {std::nan(""), 2.5})));
  for (int dt : {6, 9}) {  // __hmax/__hmin and __hadd on half and bfloat16
    auto c = dt == 6 ? H : B;
    auto f = dt == 6 ? HalfToFloat : Bf16ToFloat;
    EXPECT_TRUE(std::isnan(f(Red<uint16_t>(dt, kSum, {c(nan), c(1)})))) << dt;
    EXPECT_EQ(Red<uint16_t>(dt, kMax, {c(nan), c(1)}), c(1)) << dt;
    EXPECT_EQ(Red<uint16_t>(dt, kMin, {c(4), c(nan)}), c(4)) << dt;
    EXPECT_TRUE(std::isnan(f(Red<uint16_t>(dt, kMin, {c(nan), c(nan)})))) << dt;
    EXPECT_EQ(Red<uint16_t>(dt, kMax, {c(-inf), c(-2)}), c(-2)) << dt;
  }
}

TEST(NcclReduce, RefusesFp8AndUnknownOperatorsNamingThem) {
  Status s = CheckReducible(10, kSum);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ncclFloat8e4m3"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckType(11).ok());  // fp8 moves (broadcast, all-gather) without arithmetic
  s = CheckReducible(7, 5);
  EXPECT_NE(s.message().find("reduction operator 5"), std::string::npos) << s.message();
  s = CheckType(12);
  EXPECT_NE(s.message().find("12 is not one of NCCL's data types"), std::string::npos) << s.message();
}

TEST(NcclReduce, ManyElementsInPlace) {
  std::vector<float> a(1000), b(1000);
  for (int i = 0; i < 1000; ++i) a[i] = float(i), b[i] = float(2 * i);
  const void* in[] = {a.data(), b.data()};
  Reduce(7, kSum, in, 2, a.data(), a.size());  // out is input 0, as an in-place all-reduce
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(a[i], float(3 * i));
  std::vector<int32_t> x = {1, 2, 3}, y = {10, 20, 30};
  const void* in2[] = {x.data(), y.data()};
  Reduce(2, kMax, in2, 2, y.data(), y.size());  // out is the later input
  EXPECT_EQ(y, (std::vector<int32_t>{10, 20, 30}));
  Reduce(2, kSum, in2, 2, y.data(), y.size());
  EXPECT_EQ(y, (std::vector<int32_t>{11, 22, 33}));
}

}  // namespace
}  // namespace gpool::remote::client::nccl
