// Hand-checked values for the reference's subtle rules, so that a mistake in the reference is
// caught here rather than blamed on a kernel.
#include "unit/ops/reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tw::ref {
namespace {

HostTensor ints(std::vector<int64_t> v, DType d) {
  HostTensor t = alloc({static_cast<int64_t>(v.size())}, d);
  t.i = std::move(v);
  return t;
}
HostTensor floats(std::vector<double> v, DType d) {
  HostTensor t = alloc({static_cast<int64_t>(v.size())}, d);
  t.f = std::move(v);
  return t;
}

TEST(Reference, RemainderTakesTheDivisorsSign) {
  EXPECT_EQ(binary("remainder", ints({7, -7, 7, -7}, kI32), ints({3, 3, -3, -3}, kI32)).i,
            (std::vector<int64_t>{1, 2, -2, -1}));
  EXPECT_EQ(binary("remainder", floats({7.5, -7.5}, kF64), floats({2, 2}, kF64)).f,
            (std::vector<double>{1.5, 0.5}));
}

TEST(Reference, IntegerPow) {
  EXPECT_EQ(binary("pow", ints({1, -1, -1, 2, 0, 3}, kI64), ints({-3, -3, -2, -1, -1, 4}, kI64)).i,
            (std::vector<int64_t>{1, -1, 1, 0, 0, 81}));
  EXPECT_EQ(binary("pow", ints({3}, kU8), ints({5}, kU8)).i, (std::vector<int64_t>{243}));
  EXPECT_EQ(binary("pow", ints({3}, kU8), ints({6}, kU8)).i, (std::vector<int64_t>{729 % 256}));
  EXPECT_EQ(binary("pow", ints({2}, kI32), ints({31}, kI32)).i, (std::vector<int64_t>{INT32_MIN}));
}

TEST(Reference, WrappingArithmetic) {
  EXPECT_EQ(binary("add", ints({INT32_MAX}, kI32), ints({1}, kI32)).i,
            (std::vector<int64_t>{INT32_MIN}));
  EXPECT_EQ(binary("sub", ints({3}, kU8), ints({5}, kU8)).i, (std::vector<int64_t>{254}));
  EXPECT_EQ(unary("neg", ints({1}, kU8)).i, (std::vector<int64_t>{255}));
  EXPECT_EQ(binary("mul", ints({INT64_MAX}, kI64), ints({2}, kI64)).i, (std::vector<int64_t>{-2}));
}

TEST(Reference, CastRules) {
  HostTensor f = floats({-1.7, 300.5, NAN, 1e19, -3e9, 2.5, -0.0}, kF64);
  EXPECT_EQ(cast(f, kU8).i, (std::vector<int64_t>{0, 255, 0, 255, 0, 2, 0}));
  EXPECT_EQ(cast(f, kI32).i, (std::vector<int64_t>{-1, 300, 0, INT32_MAX, INT32_MIN, 2, 0}));
  EXPECT_EQ(cast(f, kI64).i, (std::vector<int64_t>{-1, 300, 0, INT64_MAX, -3000000000LL, 2, 0}));
  EXPECT_EQ(cast(f, kBool).i, (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 0}));
  EXPECT_EQ(cast(ints({-1, 256, 300}, kI64), kU8).i, (std::vector<int64_t>{255, 0, 44}));
  EXPECT_EQ(cast(ints({int64_t{1} << 31}, kI64), kI32).i, (std::vector<int64_t>{INT32_MIN}));
  // f64 -> f16 through f32: 1 + 2^-11 + 2^-40 is the f32 tie 1 + 2^-11, which goes to even.
  EXPECT_EQ(cast(floats({1.0 + 0x1p-11 + 0x1p-40}, kF64), kF16).f, (std::vector<double>{1.0}));
  EXPECT_EQ(cast(floats({65520.0, 65519.0, 0.1}, kF32), kF16).f,
            (std::vector<double>{INFINITY, 65504.0, 0.0999755859375}));
  // i64 -> f32 rounds once: 2^60 + 2^36 + 1 is above the tie 2^60 + 2^36.
  EXPECT_EQ(cast(ints({(int64_t{1} << 60) + (int64_t{1} << 36) + 1}, kI64), kF32).f,
            (std::vector<double>{0x1p60 + 0x1p37}));
}

TEST(Reference, RoundHalfToEven) {
  EXPECT_EQ(unary("round", floats({0.5, 1.5, 2.5, -0.5, -1.5, -2.5}, kF32)).f,
            (std::vector<double>{0, 2, 2, -0.0, -2, -2}));
}

TEST(Reference, ScalarTakesTheTensorsDtype) {
  EXPECT_EQ(binary_scalar("add", ints({10}, kU8), Scalar(300), false).i,
            (std::vector<int64_t>{54}));
  EXPECT_EQ(binary_scalar("lt", ints({10, 50}, kU8), Scalar(300), false).i,
            (std::vector<int64_t>{1, 0}));
  HostTensor b = binary_scalar("add", ints({1}, kBool), Scalar(2), false);
  EXPECT_EQ(b.dtype, kI64);
  EXPECT_EQ(b.i, (std::vector<int64_t>{3}));
  EXPECT_EQ(binary_scalar("mul", ints({3}, kI32), Scalar(2.5), false).dtype, kF32);
  EXPECT_EQ(binary_scalar("sub", ints({3}, kI32), Scalar(10), true).i, (std::vector<int64_t>{7}));
  EXPECT_EQ(binary_scalar("eq", floats({static_cast<float>(0.1)}, kF32), Scalar(0.1), false).i,
            (std::vector<int64_t>{1}));
}

TEST(Reference, ArgmaxFirstOccurrenceAndNaN) {
  EXPECT_EQ(reduce("argmax", floats({1, 3, 3, 2}, kF32), {}, false).i, (std::vector<int64_t>{1}));
  EXPECT_EQ(reduce("argmin", floats({1, NAN, 0, NAN}, kF32), {}, false).i,
            (std::vector<int64_t>{1}));
  EXPECT_TRUE(std::isnan(reduce("max", floats({1, NAN, 5}, kF64), {}, false).f[0]));
  HostTensor m = alloc({2, 3}, kI32);
  m.i = {5, 1, 5, 0, 9, 9};
  EXPECT_EQ(reduce("argmax", m, {1}, true).i, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(reduce("argmax", m, {1}, true).shape, (Shape{2, 1}));
}

TEST(Reference, EmptyReductions) {
  HostTensor e = alloc({0, 3}, kF32);
  EXPECT_EQ(reduce("sum", e, {0}, false).f, (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(reduce("prod", e, {0}, false).f, (std::vector<double>{1, 1, 1}));
  EXPECT_TRUE(std::isnan(reduce("mean", e, {0}, false).f[0]));
  EXPECT_THROW(reduce("max", e, {0}, false), std::invalid_argument);
  EXPECT_EQ(reduce("max", e, {1}, false).shape, (Shape{0}));
}

TEST(Reference, SlicePythonSemantics) {
  HostTensor x = ints({0, 1, 2, 3, 4, 5}, kI64);
  EXPECT_EQ(slice(x, 0, -3, 100, 1).i, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(slice(x, 0, -100, -1, 2).i, (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(slice(x, 0, 5, 2, 1).i, (std::vector<int64_t>{}));
  EXPECT_EQ(slice_assign(x, 0, 1, 6, 2, ints({9}, kI64)).i,
            (std::vector<int64_t>{0, 9, 2, 9, 4, 9}));
}

TEST(Reference, AdaptivePoolBins) {
  HostTensor x = alloc({1, 1, 1, 5}, kF64);
  x.f = {1, 2, 3, 4, 5};
  // Wo = 3 over W = 5: bins [0, 2), [1, 4), [3, 5).
  EXPECT_EQ(adaptive_avg_pool2d(x, {1, 3}).f, (std::vector<double>{1.5, 3.0, 4.5}));
}

TEST(Reference, PoolPadding) {
  HostTensor x = alloc({1, 1, 2, 2}, kF64);
  x.f = {-1, -2, -3, -4};
  EXPECT_EQ(pool2d("max", x, {2, 2}, {1, 1}, {1, 1}).f,
            (std::vector<double>{-1, -1, -2, -1, -1, -2, -3, -3, -4}));
  EXPECT_EQ(pool2d("avg", x, {2, 2}, {2, 2}, {1, 1}).f,
            (std::vector<double>{-0.25, -0.5, -0.75, -1.0}));
}

TEST(Reference, RepeatAndArange) {
  HostTensor x = ints({1, 2}, kI32);
  EXPECT_EQ(repeat(x, {2, 2}).i, (std::vector<int64_t>{1, 2, 1, 2, 1, 2, 1, 2}));
  EXPECT_EQ(repeat(x, {2, 2}).shape, (Shape{2, 4}));
  EXPECT_EQ(arange(Scalar(0), Scalar(5), Scalar(1.5), kI32).i, (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(arange(Scalar(5), Scalar(0), Scalar(-2), kI64).i, (std::vector<int64_t>{5, 3, 1}));
}

TEST(Reference, MatmulVectorForms) {
  HostTensor a = floats({1, 2}, kF64), m = alloc({2, 2}, kF64);
  m.f = {1, 2, 3, 4};
  EXPECT_EQ(matmul(a, m).f, (std::vector<double>{7, 10}));
  EXPECT_EQ(matmul(m, a).f, (std::vector<double>{5, 11}));
  EXPECT_EQ(matmul(a, a).shape, Shape{});
  EXPECT_EQ(matmul(a, a).f, (std::vector<double>{5}));
}

TEST(Reference, GatherAndScatterAdd) {
  HostTensor x = alloc({2, 3}, kI64);
  x.i = {10, 11, 12, 20, 21, 22};
  HostTensor idx = alloc({1, 3}, kI64);
  idx.i = {1, 0, 1};
  EXPECT_EQ(gather(x, 0, idx).i, (std::vector<int64_t>{20, 11, 22}));
  HostTensor src = alloc({1, 3}, kI64);
  src.i = {1, 2, 3};
  EXPECT_EQ(scatter_add(x, 0, idx, src).i, (std::vector<int64_t>{10, 13, 12, 21, 21, 25}));
}

}  // namespace
}  // namespace tw::ref
