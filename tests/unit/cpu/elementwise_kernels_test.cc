// Focused tests of the CPU creation, elementwise, cast and reduction kernels, called directly
// through KernelContext with the output metas inference would give. They cover each op and
// dtype family, strided and broadcast inputs, 0-d and empty tensors, the accuracy of the
// vectorised f32 math and of f32 sums, and bit-identical results for 1 and 2 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/tile.h"
#include "core/half.h"
#include "core/philox.h"
#include "core/thread_pool.h"
#include "support/kernel_fixture.h"

namespace tw::cpu {
namespace {

using namespace kernel_test;

using ir::BinaryKind;
using ir::ReduceKind;
using ir::UnaryKind;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Deterministic pseudo-random values in [lo, hi).
std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = lo + (hi - lo) * philox_uniform_f32(seed, static_cast<uint64_t>(i));
  }
  return v;
}

bool same_float(double a, double b) { return (a != a && b != b) || a == b; }

CpuTensor unary(UnaryKind k, const CpuTensor& x, DType out) {
  Harness h;
  ir::Unary op;
  op.kind = k;
  op.x = h.in(x);
  op.out = h.out(x.shape, out);
  return h.run(op);
}

CpuTensor binary(BinaryKind k, const CpuTensor& a, const CpuTensor& b, const Shape& shape,
                 DType out) {
  Harness h;
  ir::Binary op;
  op.kind = k;
  op.a = h.in(a);
  op.b = h.in(b);
  op.out = h.out(shape, out);
  return h.run(op);
}

CpuTensor binary_scalar(BinaryKind k, const CpuTensor& a, ir::Scalar s, bool reverse, DType out) {
  Harness h;
  ir::BinaryScalar op;
  op.kind = k;
  op.a = h.in(a);
  op.s = s;
  op.reverse = reverse;
  op.out = h.out(a.shape, out);
  return h.run(op);
}

CpuTensor reduce(ReduceKind k, const CpuTensor& x, std::vector<int64_t> dims, const Shape& shape,
                 DType out, bool keepdim = false) {
  Harness h;
  ir::Reduce op;
  op.kind = k;
  op.x = h.in(x);
  op.dims = std::move(dims);
  op.keepdim = keepdim;
  op.out = h.out(shape, out);
  return h.run(op);
}

// (Braced initialisers run in order: the input gets its id before the output.)
CpuTensor cumsum(const CpuTensor& x, int64_t dim, DType out) {
  Harness h;
  return h.run(ir::Cumsum{.x = h.in(x), .dim = dim, .out = h.out(x.shape, out)});
}

CpuTensor cast(const CpuTensor& x, DType to) {
  Harness h;
  return h.run(ir::Cast{.x = h.in(x), .dtype = to, .out = h.out(x.shape, to)});
}

// ================================ creation ================================

TEST(CreationKernels, FullConvertsTheValueToEveryDtype) {
  auto full = [](const Shape& shape, DType dtype, ir::Scalar v) {
    Harness h;
    ir::Full op;
    op.shape = shape;
    op.dtype = dtype;
    op.value = v;
    op.out = h.out(shape, dtype);
    return h.run(op);
  };
  EXPECT_EQ(values<float>(full({2, 2}, kF32, 2.5)), std::vector<float>(4, 2.5f));
  EXPECT_EQ(values<int32_t>(full({3}, kI32, 3.9)), std::vector<int32_t>(3, 3));
  EXPECT_EQ(values<int32_t>(full({1}, kI32, -3.9)), std::vector<int32_t>{-3});
  EXPECT_EQ(values<uint8_t>(full({2}, kU8, int64_t{300})), std::vector<uint8_t>(2, 44));
  EXPECT_EQ(values<int64_t>(full({}, kI64, int64_t{-7})), std::vector<int64_t>{-7});
  EXPECT_EQ(bools(full({2}, kBool, int64_t{2})), std::vector<bool>(2, true));
  EXPECT_EQ(values<uint16_t>(full({2}, kF16, 1.5)), std::vector<uint16_t>(2, 0x3E00));
  EXPECT_EQ(values<uint16_t>(full({2}, kBF16, 1.0)), std::vector<uint16_t>(2, 0x3F80));
  EXPECT_EQ(full({0, 3}, kF64, 1.0).numel(), 0);
  // Large enough to take several parallel chunks.
  std::vector<double> big = values<double>(full({100001}, kF64, -0.25));
  EXPECT_EQ(big, std::vector<double>(100001, -0.25));
}

TEST(CreationKernels, Arange) {
  auto arange = [](ir::Scalar start, ir::Scalar end, ir::Scalar step, DType dtype, int64_t n) {
    Harness h;
    ir::Arange op;
    op.start = start;
    op.end = end;
    op.step = step;
    op.dtype = dtype;
    op.out = h.out({n}, dtype);
    return h.run(op);
  };
  EXPECT_EQ(values<int64_t>(arange(int64_t{0}, int64_t{10}, int64_t{3}, kI64, 4)),
            (std::vector<int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(values<int32_t>(arange(int64_t{5}, int64_t{0}, int64_t{-2}, kI32, 3)),
            (std::vector<int32_t>{5, 3, 1}));
  EXPECT_EQ(values<float>(arange(0.0, 1.0, 0.25, kF32, 4)),
            (std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f}));
  // A float step with an integral dtype: computed in double, then truncated.
  EXPECT_EQ(values<int32_t>(arange(0.0, 2.0, 0.5, kI32, 4)), (std::vector<int32_t>{0, 0, 1, 1}));
  // Exact integer arithmetic beyond 2^53.
  const int64_t big = (int64_t{1} << 53) + 1;
  EXPECT_EQ(values<int64_t>(arange(big, big + 4, int64_t{2}, kI64, 2)),
            (std::vector<int64_t>{big, big + 2}));
  EXPECT_EQ(arange(int64_t{0}, int64_t{0}, int64_t{1}, kF64, 0).numel(), 0);
}

TEST(CreationKernels, Eye) {
  auto eye = [](int64_t n, int64_t m, DType dtype) {
    Harness h;
    return h.run(ir::Eye{.out = h.out({n, m}, dtype), .n = n, .m = m, .dtype = dtype});
  };
  EXPECT_EQ(values<float>(eye(2, 3, kF32)), (std::vector<float>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(values<uint16_t>(eye(3, 2, kF16)), (std::vector<uint16_t>{0x3C00, 0, 0, 0x3C00, 0, 0}));
}

TEST(CreationKernels, FromHostAdoptsAlignedBytesAndCopiesMisalignedOnes) {
  const std::vector<int32_t> v{1, -2, 3, 4, 5, 6};
  Harness h;
  ir::FromHost op;
  op.shape = {2, 3};
  op.dtype = kI32;
  op.data.data = Buffer::copy_of(v.data(), 24);
  op.out = h.out({2, 3}, kI32);
  CpuTensor t = h.run(op);
  EXPECT_EQ(values<int32_t>(t), v);
  EXPECT_EQ(t.buffer.data(), op.data.data.data());  // no copy
  // The same bytes one past an aligned address: copied into an aligned buffer.
  Buffer raw = Buffer::allocate(25);
  std::memcpy(raw.data() + 1, v.data(), 24);
  ir::FromHost mis = op;
  mis.data.data = raw.slice(1, 24);
  mis.out = h.out({2, 3}, kI32);
  CpuTensor m = h.run(mis);
  EXPECT_EQ(values<int32_t>(m), v);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(m.data<int32_t>()) % 4, 0u);
  // A wrong byte count is an error, never a read past the end.
  ir::FromHost bad = op;
  bad.data.data = Buffer::copy_of(v.data(), 20);
  bad.out = h.out({2, 3}, kI32);
  Status st = h.fails(bad);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("from_host"), std::string::npos) << st.message();
}

TEST(CreationKernels, RandomOpsFollowPhilox) {
  const uint64_t seed = 1234;
  Harness h;
  ir::RandUniform u;
  u.shape = {50000};
  u.dtype = kF32;
  u.seed = seed;
  u.low = -2;
  u.high = 3;
  u.out = h.out({50000}, kF32);
  std::vector<float> got = values<float>(h.run(u));
  for (int64_t i = 0; i < 50000; ++i) {
    const float want = std::fma(5.0f, philox_uniform_f32(seed, static_cast<uint64_t>(i)), -2.0f);
    ASSERT_EQ(got[i], want) << i;
    ASSERT_GE(got[i], -2.0f);
    ASSERT_LT(got[i], 3.0f);
  }
  ir::RandUniform u64 = u;
  u64.dtype = kF64;
  u64.shape = {7};
  u64.out = h.out({7}, kF64);
  std::vector<double> got64 = values<double>(h.run(u64));
  for (uint64_t i = 0; i < 7; ++i)
    EXPECT_EQ(got64[i], std::fma(5.0, philox_uniform_f64(seed, i), -2.0));

  ir::RandNormal n;
  n.shape = {3, 5};
  n.dtype = kF32;
  n.seed = seed;
  n.mean = 1;
  n.std = 2;
  n.out = h.out({3, 5}, kF32);
  std::vector<float> normal = values<float>(h.run(n));
  for (uint64_t i = 0; i < 15; ++i) {
    EXPECT_EQ(normal[i], static_cast<float>(std::fma(2.0, philox_normal(seed, i), 1.0)));
  }
}

TEST(CreationKernels, BernoulliDrawsByRowMajorPositionEvenForStridedP) {
  const uint64_t seed = 99;
  // p^T, strided: element i of the output uses counter i of p^T's row-major order.
  std::vector<double> pv(12);
  for (int i = 0; i < 12; ++i) pv[i] = i / 11.0;
  CpuTensor p = transposed(f64({3, 4}, pv));
  Harness h;
  ir::Bernoulli op;
  op.p = h.in(p);
  op.seed = seed;
  op.out = h.out({4, 3}, kF64);
  std::vector<double> got = values<double>(h.run(op));
  std::vector<double> prow = values<double>(p);
  for (uint64_t i = 0; i < 12; ++i) {
    EXPECT_EQ(got[i], philox_uniform_f64(seed, i) < prow[i] ? 1.0 : 0.0) << i;
  }
  EXPECT_EQ(got[0], 0.0);   // p = 0
  EXPECT_EQ(got[11], 1.0);  // p = 1
}

// ================================ unary ================================

// The vectorised f32 functions against double-precision libm, over a dense grid and special
// values. 4 ulp is a loose bound (measured: < 2.5 ulp).
TEST(UnaryKernels, VectorisedF32MathIsAccurate) {
  std::vector<float> xs;
  for (float x = -30.0f; x <= 30.0f; x += 0.0137f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-40f, 88.0f, -87.0f, -100.0f, 100.0f, 0.625f,
                  1.0f, 4.0f, kInf, -kInf, kNaN}) {
    xs.push_back(x);
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  CpuTensor x = f32({n}, xs);
  struct Case {
    UnaryKind kind;
    double (*ref)(double);
  };
  const Case cases[] = {
      {UnaryKind::kExp, [](double v) { return std::exp(v); }},
      {UnaryKind::kLog, [](double v) { return std::log(v); }},
      {UnaryKind::kTanh, [](double v) { return std::tanh(v); }},
      {UnaryKind::kSigmoid, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {UnaryKind::kErf, [](double v) { return std::erf(v); }},
      {UnaryKind::kGelu, [](double v) { return v * 0.5 * (1.0 + std::erf(v / std::sqrt(2.0))); }},
  };
  for (const Case& c : cases) {
    std::vector<float> got = values<float>(unary(c.kind, x, kF32));
    for (int64_t i = 0; i < n; ++i) {
      const double want = c.ref(static_cast<double>(xs[i]));
      const float wf = static_cast<float>(want);
      if (std::isnan(wf) || std::isinf(wf)) {
        EXPECT_TRUE(same_float(got[i], wf)) << ir::kind_name(c.kind) << "(" << xs[i] << ")";
        continue;
      }
      // gelu's 1 + erf cancels for very negative x (the spec's formula): absolute bound there.
      const double ulp = std::max(std::fabs(std::nextafter(wf, kInf) - wf), 1e-45f);
      const double tol = c.kind == UnaryKind::kGelu ? std::max(4 * ulp, 1e-7) : 4 * ulp;
      EXPECT_LE(std::fabs(got[i] - want), tol) << ir::kind_name(c.kind) << "(" << xs[i] << ")";
    }
  }
}

TEST(UnaryKernels, OtherFloatKindsMatchLibm) {
  const std::vector<float> xs{-2.5f, -1.0f, -0.5f, 0.0f, 0.25f, 0.5f, 1.5f, 2.5f, 9.0f, kNaN};
  CpuTensor x = f32({10}, xs);
  auto check = [&](UnaryKind k, float (*ref)(float)) {
    std::vector<float> got = values<float>(unary(k, x, kF32));
    for (size_t i = 0; i < xs.size(); ++i) {
      EXPECT_TRUE(same_float(got[i], ref(xs[i]))) << ir::kind_name(k) << "(" << xs[i] << ")";
    }
  };
  check(UnaryKind::kSqrt, [](float v) { return std::sqrt(v); });
  check(UnaryKind::kRsqrt, [](float v) { return 1.0f / std::sqrt(v); });
  check(UnaryKind::kRecip, [](float v) { return 1.0f / v; });
  check(UnaryKind::kLog1p, [](float v) { return std::log1p(v); });
  check(UnaryKind::kSin, [](float v) { return std::sin(v); });
  check(UnaryKind::kCos, [](float v) { return std::cos(v); });
  check(UnaryKind::kFloor, [](float v) { return std::floor(v); });
  check(UnaryKind::kCeil, [](float v) { return std::ceil(v); });
  check(UnaryKind::kNeg, [](float v) { return -v; });
  check(UnaryKind::kAbs, [](float v) { return std::fabs(v); });
  check(UnaryKind::kSquare, [](float v) { return v * v; });
  // round is half to even; sign propagates NaN; relu keeps NaN.
  EXPECT_EQ(values<float>(
                unary(UnaryKind::kRound, f32({6}, {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f}), kF32)),
            (std::vector<float>{-2, -2, -0.0f, 0, 2, 2}));
  std::vector<float> sign = values<float>(unary(UnaryKind::kSign, x, kF32));
  EXPECT_EQ(sign[0], -1.0f);
  EXPECT_EQ(sign[3], 0.0f);
  EXPECT_EQ(sign[8], 1.0f);
  EXPECT_TRUE(std::isnan(sign[9]));
  std::vector<float> relu = values<float>(unary(UnaryKind::kRelu, x, kF32));
  EXPECT_EQ(relu[0], 0.0f);
  EXPECT_EQ(relu[4], 0.25f);
  EXPECT_TRUE(std::isnan(relu[9]));
}

TEST(UnaryKernels, F64UsesLibm) {
  const std::vector<double> xs{-3.0, -0.5, 0.0, 0.7, 2.0, 40.0};
  CpuTensor x = f64({6}, xs);
  std::vector<double> e = values<double>(unary(UnaryKind::kExp, x, kF64));
  std::vector<double> g = values<double>(unary(UnaryKind::kGelu, x, kF64));
  std::vector<double> s = values<double>(unary(UnaryKind::kSigmoid, x, kF64));
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(e[i], std::exp(xs[i]));
    EXPECT_EQ(g[i], xs[i] * 0.5 * (1.0 + std::erf(xs[i] * 0.70710678118654752)));
    EXPECT_EQ(s[i], 1.0 / (1.0 + std::exp(-xs[i])));
  }
}

TEST(UnaryKernels, IntegralKinds) {
  EXPECT_EQ(values<uint8_t>(unary(UnaryKind::kNeg, u8({3}, {0, 1, 200}), kU8)),
            (std::vector<uint8_t>{0, 255, 56}));
  const int32_t lo = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(values<int32_t>(unary(UnaryKind::kAbs, i32({3}, {-5, 7, lo}), kI32)),
            (std::vector<int32_t>{5, 7, lo}));  // wraps
  EXPECT_EQ(values<int64_t>(unary(UnaryKind::kSign, i64({3}, {-9, 0, 4}), kI64)),
            (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(values<int32_t>(unary(UnaryKind::kSquare, i32({2}, {-3, 65536}), kI32)),
            (std::vector<int32_t>{9, 0}));  // 2^32 wraps to 0
  EXPECT_EQ(values<int32_t>(unary(UnaryKind::kRelu, i32({2}, {-3, 3}), kI32)),
            (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(values<int32_t>(unary(UnaryKind::kFloor, i32({2}, {-3, 3}), kI32)),
            (std::vector<int32_t>{-3, 3}));
  // Float kinds on integers compute in f32.
  std::vector<float> e = values<float>(unary(UnaryKind::kExp, i32({2}, {0, 2}), kF32));
  EXPECT_EQ(e[0], 1.0f);
  EXPECT_NEAR(e[1], std::exp(2.0), 1e-5);
  EXPECT_EQ(values<float>(unary(UnaryKind::kSqrt, boolean({2}, {0, 1}), kF32)),
            (std::vector<float>{0, 1}));
}

TEST(UnaryKernels, LogicalNotOnEveryDtype) {
  EXPECT_EQ(bools(unary(UnaryKind::kLogicalNot, f32({3}, {0.0f, kNaN, -2.0f}), kBool)),
            (std::vector<bool>{true, false, false}));
  EXPECT_EQ(bools(unary(UnaryKind::kLogicalNot, boolean({2}, {0, 1}), kBool)),
            (std::vector<bool>{true, false}));
  EXPECT_EQ(bools(unary(UnaryKind::kLogicalNot, i64({2}, {0, 5}), kBool)),
            (std::vector<bool>{true, false}));
}

TEST(UnaryKernels, StridedBroadcastZeroDAndEmptyInputs) {
  // Transposed: results follow the view's row-major order.
  CpuTensor x = transposed(f32({2, 3}, {0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values<float>(unary(UnaryKind::kNeg, x, kF32)),
            (std::vector<float>{-0.0f, -3, -1, -4, -2, -5}));
  std::vector<float> ex = values<float>(unary(UnaryKind::kExp, x, kF32));
  EXPECT_NEAR(ex[1], std::exp(3.0), 1e-4);
  // Expanded (stride 0).
  CpuTensor row = f32({3}, {1, 2, 3});
  CpuTensor expanded = row;
  expanded.shape = {4, 3};
  expanded.strides = {0, 1};
  EXPECT_EQ(values<float>(unary(UnaryKind::kSquare, expanded, kF32)),
            (std::vector<float>{1, 4, 9, 1, 4, 9, 1, 4, 9, 1, 4, 9}));
  EXPECT_EQ(values<float>(unary(UnaryKind::kAbs, f32({}, {-2}), kF32)), std::vector<float>{2});
  EXPECT_EQ(unary(UnaryKind::kExp, f32({0, 4}, {}), kF32).numel(), 0);
}

// ================================ binary ================================

TEST(BinaryKernels, BroadcastingPaths) {
  CpuTensor a = f32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  // row
  EXPECT_EQ(
      values<float>(binary(BinaryKind::kAdd, a, f32({4}, {100, 200, 300, 400}), {3, 4}, kF32)),
      (std::vector<float>{100, 201, 302, 403, 104, 205, 306, 407, 108, 209, 310, 411}));
  // column
  EXPECT_EQ(values<float>(binary(BinaryKind::kMul, a, f32({3, 1}, {1, 10, 100}), {3, 4}, kF32)),
            (std::vector<float>{0, 1, 2, 3, 40, 50, 60, 70, 800, 900, 1000, 1100}));
  // 0-d on the left
  EXPECT_EQ(values<float>(binary(BinaryKind::kSub, f32({}, {1}), a, {3, 4}, kF32)),
            (std::vector<float>{1, 0, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10}));
  // outer product [3, 1] x [1, 2]
  EXPECT_EQ(values<float>(binary(BinaryKind::kMul, f32({3, 1}, {1, 2, 3}), f32({1, 2}, {1, 10}),
                                 {3, 2}, kF32)),
            (std::vector<float>{1, 10, 2, 20, 3, 30}));
  // transposed + contiguous
  CpuTensor at = transposed(f32({4, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(values<float>(binary(BinaryKind::kAdd, at, a, {3, 4}, kF32)),
            (std::vector<float>{0, 4, 8, 12, 5, 9, 13, 17, 10, 14, 18, 22}));
  // 0-d with 0-d, and an empty result
  EXPECT_EQ(values<float>(binary(BinaryKind::kAdd, f32({}, {2}), f32({}, {3}), {}, kF32)),
            std::vector<float>{5});
  EXPECT_EQ(binary(BinaryKind::kAdd, f32({0, 4}, {}), f32({4}, {1, 2, 3, 4}), {0, 4}, kF32).numel(),
            0);
}

TEST(BinaryKernels, LongBroadcastRunsMatchANaiveLoop) {
  // Long rows exercise the scalar-broadcast loops and the gathered (strided) path.
  const int64_t r = 300, c = 1100;
  std::vector<float> av = random_floats(r * c, 1), bv = random_floats(c, 2),
                     cv = random_floats(r, 3);
  CpuTensor a = f32({r, c}, av);
  std::vector<float> plus_row =
      values<float>(binary(BinaryKind::kAdd, a, f32({c}, bv), {r, c}, kF32));
  std::vector<float> times_col =
      values<float>(binary(BinaryKind::kMul, a, f32({r, 1}, cv), {r, c}, kF32));
  CpuTensor at = transposed(f32({c, r}, av));  // [r, c] view with strides [1, r]
  std::vector<float> atv = values<float>(at);
  std::vector<float> strided =
      values<float>(binary(BinaryKind::kSub, at, f32({c}, bv), {r, c}, kF32));
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      ASSERT_EQ(plus_row[i * c + j], av[i * c + j] + bv[j]);
      ASSERT_EQ(times_col[i * c + j], av[i * c + j] * cv[i]);
      ASSERT_EQ(strided[i * c + j], atv[i * c + j] - bv[j]);
    }
  }
}

// f32 add/sub/mul/div of two contiguous operands past kStreamingStoreBytes take the streaming
// path (binary.cc, loop_vv_stream). 1234567 elements: chunks of 38580 start at addresses that
// are not 32-byte aligned and the last is ragged; every element must equal the plain IEEE op.
TEST(BinaryKernels, StreamedF32ArithmeticMatchesANaiveLoop) {
  constexpr int64_t n = 1234567;
  static_assert(n * 4 >= kStreamingStoreBytes);
  const std::vector<float> av = random_floats(n, 11), bv = random_floats(n, 12, 0.5f, 2.0f);
  const CpuTensor a = f32({n}, av), b = f32({n}, bv);
  for (BinaryKind k : {BinaryKind::kAdd, BinaryKind::kSub, BinaryKind::kMul, BinaryKind::kDiv}) {
    const std::vector<float> got = values<float>(binary(k, a, b, {n}, kF32));
    for (int64_t i = 0; i < n; ++i) {
      const float x = av[static_cast<size_t>(i)], y = bv[static_cast<size_t>(i)];
      const float want = k == BinaryKind::kAdd   ? x + y
                         : k == BinaryKind::kSub ? x - y
                         : k == BinaryKind::kMul ? x * y
                                                 : x / y;
      ASSERT_EQ(got[static_cast<size_t>(i)], want) << ir::kind_name(k) << " at " << i;
    }
  }
}

TEST(BinaryKernels, PromotionAndIntegerArithmetic) {
  EXPECT_EQ(
      values<float>(binary(BinaryKind::kAdd, i32({2}, {1, 2}), f32({2}, {0.5f, 0.25f}), {2}, kF32)),
      (std::vector<float>{1.5f, 2.25f}));
  EXPECT_EQ(
      values<int32_t>(binary(BinaryKind::kAdd, u8({2}, {250, 1}), i32({2}, {10, -2}), {2}, kI32)),
      (std::vector<int32_t>{260, -1}));
  const int32_t mx = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(values<int32_t>(binary(BinaryKind::kAdd, i32({1}, {mx}), i32({1}, {1}), {1}, kI32)),
            std::vector<int32_t>{std::numeric_limits<int32_t>::min()});
  EXPECT_EQ(values<uint8_t>(binary(BinaryKind::kMul, u8({1}, {200}), u8({1}, {2}), {1}, kU8)),
            std::vector<uint8_t>{144});
  EXPECT_EQ(
      values<int64_t>(binary(BinaryKind::kAdd, boolean({2}, {1, 1}), i64({2}, {1, 2}), {2}, kI64)),
      (std::vector<int64_t>{2, 3}));
  // Integral division is true division in f32; bool / bool too.
  EXPECT_EQ(values<float>(binary(BinaryKind::kDiv, i32({2}, {7, -1}), i32({2}, {2, 4}), {2}, kF32)),
            (std::vector<float>{3.5f, -0.25f}));
  EXPECT_EQ(values<float>(
                binary(BinaryKind::kDiv, boolean({2}, {1, 0}), boolean({2}, {1, 1}), {2}, kF32)),
            (std::vector<float>{1, 0}));
  EXPECT_EQ(
      values<int32_t>(binary(BinaryKind::kMaximum, i32({2}, {1, 5}), i32({2}, {3, 2}), {2}, kI32)),
      (std::vector<int32_t>{3, 5}));
  std::vector<float> mn = values<float>(
      binary(BinaryKind::kMinimum, f32({3}, {1, kNaN, 2}), f32({3}, {kNaN, 0, 1}), {3}, kF32));
  EXPECT_TRUE(std::isnan(mn[0]));
  EXPECT_TRUE(std::isnan(mn[1]));
  EXPECT_EQ(mn[2], 1.0f);
}

TEST(BinaryKernels, F64AndI64) {
  EXPECT_EQ(values<double>(binary(BinaryKind::kAdd, f64({2, 2}, {1, 2, 3, 4}),
                                  f64({2}, {0.5, 0.25}), {2, 2}, kF64)),
            (std::vector<double>{1.5, 2.25, 3.5, 4.25}));
  EXPECT_EQ(
      values<double>(binary(BinaryKind::kDiv, f64({2}, {1, -3}), i64({2}, {3, 2}), {2}, kF64)),
      (std::vector<double>{1.0 / 3.0, -1.5}));
  EXPECT_EQ(
      values<double>(binary(BinaryKind::kPow, f64({2}, {2, 10}), f64({2}, {-1, 0.5}), {2}, kF64)),
      (std::vector<double>{0.5, std::pow(10.0, 0.5)}));
  const int64_t mx = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(
      values<int64_t>(binary(BinaryKind::kMul, i64({2}, {mx, -4}), i64({2}, {2, 3}), {2}, kI64)),
      (std::vector<int64_t>{-2, -12}));  // wraps
  EXPECT_EQ(values<int64_t>(
                binary(BinaryKind::kMinimum, i64({2}, {mx, -4}), i32({2}, {2, -5}), {2}, kI64)),
            (std::vector<int64_t>{2, -5}));
  CpuTensor x = f64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(values<double>(reduce(ReduceKind::kProd, x, {1}, {2}, kF64)),
            (std::vector<double>{6, 120}));
  EXPECT_EQ(values<double>(reduce(ReduceKind::kMean, x, {0}, {3}, kF64)),
            (std::vector<double>{2.5, 3.5, 4.5}));
  EXPECT_EQ(
      values<int64_t>(reduce(ReduceKind::kArgmin, i64({2, 3}, {5, 1, 1, 0, 9, 0}), {1}, {2}, kI64)),
      (std::vector<int64_t>{1, 0}));
}

TEST(BinaryKernels, RemainderFollowsPython) {
  EXPECT_EQ(values<int32_t>(binary(BinaryKind::kRemainder, i32({4}, {-7, 7, 7, -7}),
                                   i32({4}, {3, -3, 3, -3}), {4}, kI32)),
            (std::vector<int32_t>{2, -2, 1, -1}));
  const int64_t lo = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(
      values<int64_t>(binary(BinaryKind::kRemainder, i64({1}, {lo}), i64({1}, {-1}), {1}, kI64)),
      std::vector<int64_t>{0});
  std::vector<float> f = values<float>(binary(BinaryKind::kRemainder, f32({3}, {-7.5f, 7.5f, 4.0f}),
                                              f32({3}, {2.0f, -2.0f, -2.0f}), {3}, kF32));
  EXPECT_EQ(f[0], 0.5f);
  EXPECT_EQ(f[1], -0.5f);
  EXPECT_EQ(f[2], 0.0f);
  EXPECT_TRUE(std::signbit(f[2]));  // the divisor's sign, as Python
  Harness h;
  ir::Binary op;
  op.kind = BinaryKind::kRemainder;
  op.a = h.in(i32({3}, {1, 2, 3}));
  op.b = h.in(i32({3}, {1, 0, 1}));
  op.out = h.out({3}, kI32);
  Status st = h.fails(op);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("remainder: ", 0), 0u) << st.message();
}

TEST(BinaryKernels, IntegerPowIsExact) {
  EXPECT_EQ(values<int64_t>(binary(BinaryKind::kPow, i64({7}, {2, -2, 2, 1, -1, -1, 0}),
                                   i64({7}, {10, 3, -1, -5, -3, -4, 0}), {7}, kI64)),
            (std::vector<int64_t>{1024, -8, 0, 1, -1, 1, 1}));
  EXPECT_EQ(values<int64_t>(binary(BinaryKind::kPow, i64({1}, {3}), i64({1}, {39}), {1}, kI64)),
            std::vector<int64_t>{4052555153018976267});  // 3^39 fits in i64
  EXPECT_EQ(values<uint8_t>(binary(BinaryKind::kPow, u8({1}, {3}), u8({1}, {5}), {1}, kU8)),
            std::vector<uint8_t>{243});
  EXPECT_EQ(values<int32_t>(binary(BinaryKind::kPow, i32({1}, {2}), i32({1}, {33}), {1}, kI32)),
            std::vector<int32_t>{0});  // wraps
  EXPECT_EQ(
      values<float>(binary(BinaryKind::kPow, f32({2}, {2, 9}), f32({2}, {0.5f, 0.5f}), {2}, kF32)),
      (std::vector<float>{std::pow(2.0f, 0.5f), 3.0f}));
}

TEST(BinaryKernels, ComparisonsAndLogical) {
  CpuTensor a = f32({4}, {1, 2, kNaN, 4});
  CpuTensor b = i32({4}, {1, 3, 0, 2});
  EXPECT_EQ(bools(binary(BinaryKind::kEq, a, b, {4}, kBool)),
            (std::vector<bool>{true, false, false, false}));
  EXPECT_EQ(bools(binary(BinaryKind::kNe, a, b, {4}, kBool)),
            (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(bools(binary(BinaryKind::kLt, a, b, {4}, kBool)),
            (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(bools(binary(BinaryKind::kGe, a, b, {4}, kBool)),
            (std::vector<bool>{true, false, false, true}));
  // nonzero is true; 0.5 in f32 and 0 in i32 stay distinguishable after promotion
  EXPECT_EQ(bools(binary(BinaryKind::kLogicalAnd, f32({3}, {0.5f, 0, kNaN}), i32({3}, {2, 1, 1}),
                         {3}, kBool)),
            (std::vector<bool>{true, false, true}));
  EXPECT_EQ(bools(binary(BinaryKind::kLogicalXor, boolean({4}, {0, 0, 1, 1}),
                         boolean({4}, {0, 1, 0, 1}), {4}, kBool)),
            (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ(
      bools(binary(BinaryKind::kLogicalOr, u8({2}, {0, 0}), boolean({2}, {0, 1}), {2}, kBool)),
      (std::vector<bool>{false, true}));
}

TEST(BinaryKernels, ScalarDtypeRules) {
  // a float scalar with an integral tensor computes in f32
  EXPECT_EQ(values<float>(binary_scalar(BinaryKind::kAdd, i32({2}, {1, 2}), 0.5, false, kF32)),
            (std::vector<float>{1.5f, 2.5f}));
  // an integer scalar with a bool tensor computes in i64
  EXPECT_EQ(values<int64_t>(
                binary_scalar(BinaryKind::kMul, boolean({2}, {0, 1}), int64_t{5}, false, kI64)),
            (std::vector<int64_t>{0, 5}));
  // ...and comparisons compare numbers: true == 2 is false
  EXPECT_EQ(bools(binary_scalar(BinaryKind::kEq, boolean({2}, {0, 1}), int64_t{1}, false, kBool)),
            (std::vector<bool>{false, true}));
  EXPECT_EQ(bools(binary_scalar(BinaryKind::kEq, boolean({2}, {0, 1}), int64_t{2}, false, kBool)),
            (std::vector<bool>{false, false}));
  // the scalar takes the tensor's dtype: u8 wraps
  EXPECT_EQ(
      values<uint8_t>(binary_scalar(BinaryKind::kAdd, u8({2}, {250, 1}), int64_t{10}, false, kU8)),
      (std::vector<uint8_t>{4, 11}));
  // reverse: s op a
  EXPECT_EQ(values<float>(binary_scalar(BinaryKind::kSub, f32({2}, {1, 4}), 10.0, true, kF32)),
            (std::vector<float>{9, 6}));
  EXPECT_EQ(
      values<float>(binary_scalar(BinaryKind::kDiv, i32({2}, {2, 4}), int64_t{1}, true, kF32)),
      (std::vector<float>{0.5f, 0.25f}));
  EXPECT_EQ(
      values<int32_t>(binary_scalar(BinaryKind::kPow, i32({3}, {0, 1, 3}), int64_t{2}, true, kI32)),
      (std::vector<int32_t>{1, 2, 8}));
  EXPECT_EQ(bools(binary_scalar(BinaryKind::kLt, transposed(f32({2, 2}, {1, 2, 3, 4})), 2.5, false,
                                kBool)),
            (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(values<float>(binary_scalar(BinaryKind::kAdd, f32({}, {1}), 2.0, false, kF32)),
            std::vector<float>{3});
}

TEST(BinaryKernels, ScalarRemainderByZeroIsAnError) {
  {
    Harness h;
    ir::BinaryScalar op;
    op.kind = BinaryKind::kRemainder;
    op.a = h.in(i32({2}, {1, 2}));
    op.s = int64_t{0};
    op.out = h.out({2}, kI32);
    Status st = h.fails(op);
    EXPECT_EQ(st.message().rfind("remainder_scalar: ", 0), 0u) << st.message();
  }
  {
    Harness h;
    ir::BinaryScalar op;
    op.kind = BinaryKind::kRemainder;
    op.a = h.in(i32({2}, {1, 0}));
    op.s = int64_t{5};
    op.reverse = true;
    op.out = h.out({2}, kI32);
    EXPECT_FALSE(h.fails(op).ok());
  }
  EXPECT_EQ(values<int32_t>(
                binary_scalar(BinaryKind::kRemainder, i32({2}, {-7, 7}), int64_t{3}, false, kI32)),
            (std::vector<int32_t>{2, 1}));
}

TEST(ElementwiseKernels, WhereBroadcastsAndPromotes) {
  Harness h;
  ir::Where op;
  op.cond = h.in(boolean({3, 1}, {1, 0, 1}));
  op.a = h.in(i32({1, 2}, {1, 2}));
  op.b = h.in(f32({}, {-1}));
  op.out = h.out({3, 2}, kF32);
  EXPECT_EQ(values<float>(h.run(op)), (std::vector<float>{1, 2, -1, -1, 1, 2}));
  ir::Where bools_op;
  bools_op.cond = h.in(boolean({2}, {1, 0}));
  bools_op.a = h.in(boolean({2}, {1, 1}));
  bools_op.b = h.in(boolean({2}, {0, 0}));
  bools_op.out = h.out({2}, kBool);
  EXPECT_EQ(bools(h.run(bools_op)), (std::vector<bool>{true, false}));
}

TEST(ElementwiseKernels, Clamp) {
  auto clamp = [](const CpuTensor& x, bool has_lo, ir::Scalar lo, bool has_hi, ir::Scalar hi) {
    Harness h;
    ir::Clamp op;
    op.x = h.in(x);
    op.has_lo = has_lo;
    op.lo = lo;
    op.has_hi = has_hi;
    op.hi = hi;
    op.out = h.out(x.shape, x.dtype);
    return h.run(op);
  };
  std::vector<float> f = values<float>(clamp(f32({4}, {-5, 0.5f, 5, kNaN}), true, -1.0, true, 1.0));
  EXPECT_EQ(f[0], -1.0f);
  EXPECT_EQ(f[1], 0.5f);
  EXPECT_EQ(f[2], 1.0f);
  EXPECT_TRUE(std::isnan(f[3]));
  // bounds truncate toward zero in x's dtype
  EXPECT_EQ(values<int32_t>(clamp(i32({4}, {-5, 0, 1, 5}), true, -1.7, true, 1.7)),
            (std::vector<int32_t>{-1, 0, 1, 1}));
  EXPECT_EQ(values<int32_t>(clamp(i32({2}, {-5, 5}), true, int64_t{0}, false, 0.0)),
            (std::vector<int32_t>{0, 5}));
  EXPECT_EQ(values<uint8_t>(clamp(u8({2}, {1, 200}), false, 0.0, true, int64_t{100})),
            (std::vector<uint8_t>{1, 100}));
  // integer bounds outside x's dtype saturate instead of wrapping
  EXPECT_EQ(values<uint8_t>(clamp(u8({2}, {1, 200}), true, int64_t{-1}, true, int64_t{300})),
            (std::vector<uint8_t>{1, 200}));
  // lo > hi gives hi, as min(max(x, lo), hi)
  EXPECT_EQ(values<float>(clamp(f32({2}, {0, 10}), true, 5.0, true, 1.0)),
            (std::vector<float>{1, 1}));
}

TEST(ElementwiseKernels, MaskedFill) {
  Harness h;
  ir::MaskedFill op;
  op.x = h.in(i32({2, 3}, {1, 2, 3, 4, 5, 6}));
  op.mask = h.in(boolean({3}, {1, 0, 1}));
  op.value = 9.8;
  op.out = h.out({2, 3}, kI32);
  EXPECT_EQ(values<int32_t>(h.run(op)), (std::vector<int32_t>{9, 2, 9, 9, 5, 9}));
  ir::MaskedFill t;
  t.x = h.in(transposed(f32({2, 2}, {1, 2, 3, 4})));
  t.mask = h.in(boolean({2, 1}, {0, 1}));
  t.value = -1.0;
  t.out = h.out({2, 2}, kF32);
  EXPECT_EQ(values<float>(h.run(t)), (std::vector<float>{1, 3, -1, -1}));
  ir::MaskedFill b;
  b.x = h.in(boolean({2}, {0, 0}));
  b.mask = h.in(boolean({}, {1}));
  b.value = int64_t{3};
  b.out = h.out({2}, kBool);
  EXPECT_EQ(bools(h.run(b)), (std::vector<bool>{true, true}));
}

// ================================ cast ================================

TEST(CastKernel, FloatToIntegralTruncatesAndSaturates) {
  CpuTensor x = f32({7}, {1.9f, -1.9f, kNaN, 1e10f, -1e10f, kInf, -0.5f});
  EXPECT_EQ(values<int32_t>(cast(x, kI32)),
            (std::vector<int32_t>{1, -1, 0, std::numeric_limits<int32_t>::max(),
                                  std::numeric_limits<int32_t>::min(),
                                  std::numeric_limits<int32_t>::max(), 0}));
  EXPECT_EQ(values<uint8_t>(cast(f32({4}, {300.5f, -5.0f, 254.9f, kNaN}), kU8)),
            (std::vector<uint8_t>{255, 0, 254, 0}));
  EXPECT_EQ(values<int64_t>(cast(f64({2}, {1e300, -9.3e18}), kI64)),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min()}));
}

TEST(CastKernel, IntegralNarrowingWrapsAndBoolRules) {
  EXPECT_EQ(values<uint8_t>(cast(i32({3}, {300, -1, 255}), kU8)),
            (std::vector<uint8_t>{44, 255, 255}));
  EXPECT_EQ(values<int32_t>(cast(i64({2}, {(int64_t{1} << 32) + 5, -1}), kI32)),
            (std::vector<int32_t>{5, -1}));
  EXPECT_EQ(bools(cast(f32({4}, {0.0f, -0.0f, kNaN, 0.1f}), kBool)),
            (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(values<double>(cast(boolean({2}, {1, 0}), kF64)), (std::vector<double>{1, 0}));
  EXPECT_EQ(values<int64_t>(cast(u8({1}, {200}), kI64)), std::vector<int64_t>{200});
}

TEST(CastKernel, HalfAndBFloat16RoundToNearestEven) {
  // 1 + 2^-11 is halfway between two f16 values: ties to even (1.0); 65520 overflows to inf.
  std::vector<uint16_t> h =
      values<uint16_t>(cast(f32({4}, {1.0f + 1.0f / 2048, 65520.0f, -2.0f, kNaN}), kF16));
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0x7C00);
  EXPECT_EQ(h[2], 0xC000);
  EXPECT_EQ(h[3] & 0x7C00, 0x7C00);
  EXPECT_NE(h[3] & 0x3FF, 0);
  EXPECT_EQ(values<float>(cast(make<uint16_t>({2}, kF16, {0x3C00, 0xC000}), kF32)),
            (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(values<uint16_t>(cast(f64({1}, {1.0}), kBF16)), std::vector<uint16_t>{0x3F80});
  EXPECT_EQ(values<int32_t>(cast(make<uint16_t>({1}, kBF16, {0xC0A0}), kI32)),
            std::vector<int32_t>{-5});
  EXPECT_EQ(values<uint16_t>(cast(make<uint16_t>({1}, kBF16, {0x3F80}), kF16)),
            std::vector<uint16_t>{0x3C00});
}

TEST(CastKernel, SameDtypeSharesStorageAndStridedInputsWork) {
  CpuTensor x = transposed(f32({2, 3}, {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}));
  CpuTensor same = cast(x, kF32);
  EXPECT_EQ(same.buffer.data(), x.buffer.data());
  EXPECT_EQ(values<float>(same), values<float>(x));
  EXPECT_EQ(values<int64_t>(cast(x, kI64)), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(values<double>(cast(f32({}, {2.5f}), kF64)), std::vector<double>{2.5});
}

// ================================ reductions ================================

TEST(ReduceKernels, SumOverDimsKeepdimAndLayouts) {
  // [2, 3, 4] with values 0..23
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  CpuTensor x = f32({2, 3, 4}, v);
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, x, {}, {}, kF32)), std::vector<float>{276});
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, x, {-1}, {2, 3}, kF32)),  // rows
            (std::vector<float>{6, 22, 38, 54, 70, 86}));
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, x, {1}, {2, 1, 4}, kF32, true)),  // columns
            (std::vector<float>{12, 15, 18, 21, 48, 51, 54, 57}));
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, x, {0}, {3, 4}, kF32)),
            (std::vector<float>{12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34}));
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, x, {0, 2}, {3}, kF32)),  // copied
            (std::vector<float>{60, 92, 124}));
  // transposed [3, 2] view of [[0, 1, 2], [3, 4, 5]]
  CpuTensor t = transposed(f32({2, 3}, {0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, t, {1}, {3}, kF32)),
            (std::vector<float>{3, 5, 7}));
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, t, {0}, {2}, kF32)),
            (std::vector<float>{3, 12}));
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, f32({}, {4}), {}, {}, kF32)),
            std::vector<float>{4});
  // reducing only size-1 dims
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, f32({2, 1}, {1, 2}), {1}, {2}, kF32)),
            (std::vector<float>{1, 2}));
}

TEST(ReduceKernels, IntegralAndBoolSumsAreExactI64) {
  EXPECT_EQ(values<int64_t>(
                reduce(ReduceKind::kSum, i32({3}, {2147483647, 2147483647, -5}), {}, {}, kI64)),
            std::vector<int64_t>{4294967289});
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kSum, u8({3}, {255, 255, 1}), {}, {}, kI64)),
            std::vector<int64_t>{511});
  EXPECT_EQ(
      values<int64_t>(reduce(ReduceKind::kSum, boolean({2, 2}, {1, 0, 1, 1}), {0}, {2}, kI64)),
      (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kProd, i32({2, 2}, {-2, 3, 4, 5}), {1}, {2}, kI64)),
            (std::vector<int64_t>{-6, 20}));
  EXPECT_EQ(values<float>(reduce(ReduceKind::kMean, i32({4}, {1, 2, 3, 5}), {}, {}, kF32)),
            std::vector<float>{2.75f});
}

TEST(ReduceKernels, EmptyReductions) {
  CpuTensor e = f32({0, 3}, {});
  EXPECT_EQ(values<float>(reduce(ReduceKind::kSum, e, {0}, {3}, kF32)), std::vector<float>(3, 0));
  EXPECT_EQ(values<float>(reduce(ReduceKind::kProd, e, {0}, {3}, kF32)), std::vector<float>(3, 1));
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kSum, i32({0}, {}), {}, {}, kI64)),
            std::vector<int64_t>{0});
  std::vector<float> mean = values<float>(reduce(ReduceKind::kMean, e, {}, {}, kF32));
  EXPECT_TRUE(std::isnan(mean[0]));
  EXPECT_EQ(reduce(ReduceKind::kMax, e, {1}, {0}, kF32).numel(), 0);  // nothing to reduce
}

TEST(ReduceKernels, MaxMinPropagateNaN) {
  CpuTensor x = f32({2, 3}, {1, kNaN, 3, -1, -7, 2});
  std::vector<float> mx = values<float>(reduce(ReduceKind::kMax, x, {1}, {2}, kF32));
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_EQ(mx[1], 2.0f);
  std::vector<float> mn = values<float>(reduce(ReduceKind::kMin, x, {0}, {3}, kF32));
  EXPECT_EQ(mn[0], -1.0f);
  EXPECT_TRUE(std::isnan(mn[1]));
  EXPECT_EQ(mn[2], 2.0f);
  EXPECT_EQ(values<int32_t>(reduce(ReduceKind::kMin, i32({3}, {4, -9, 2}), {}, {}, kI32)),
            std::vector<int32_t>{-9});
  EXPECT_EQ(bools(reduce(ReduceKind::kMax, boolean({2, 2}, {0, 0, 0, 1}), {1}, {2}, kBool)),
            (std::vector<bool>{false, true}));
  EXPECT_EQ(values<uint8_t>(reduce(ReduceKind::kMax, u8({3}, {4, 250, 2}), {}, {}, kU8)),
            std::vector<uint8_t>{250});
}

TEST(ReduceKernels, ArgmaxArgminFirstOccurrenceAndNaN) {
  CpuTensor x = f32({2, 4}, {1, 5, 5, 0, 3, kNaN, 9, kNaN});
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmax, x, {1}, {2}, kI64)),
            (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmin, x, {1}, {2}, kI64)),
            (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmax, x, {0}, {4}, kI64)),
            (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmax, x, {}, {}, kI64)), std::vector<int64_t>{5});
  // all dims of a transposed view index its row-major order: [[1, 3], [5, NaN], [5, 9], [0, NaN]]
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmax, transposed(x), {}, {1, 1}, kI64, true)),
            std::vector<int64_t>{3});
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmin, i32({5}, {3, 1, 4, 1, 5}), {0}, {}, kI64)),
            std::vector<int64_t>{1});
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmax, boolean({3}, {0, 1, 1}), {}, {}, kI64)),
            std::vector<int64_t>{1});
  // a long row (parallel leaves) with ties across leaf boundaries
  std::vector<int32_t> lv(100000, 7);
  lv[70000] = 8;
  lv[90000] = 8;
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmax, i32({100000}, lv), {}, {}, kI64)),
            std::vector<int64_t>{70000});
  EXPECT_EQ(values<int64_t>(reduce(ReduceKind::kArgmin, i32({100000}, lv), {}, {}, kI64)),
            std::vector<int64_t>{0});
}

TEST(ReduceKernels, LongRowsAndColumnsMatchDoubleSums) {
  // rows longer than one leaf, many rows per column block, and a column tile boundary
  const Shape shapes[] = {{3, 50000}, {1000, 3}, {300, 700}};
  for (const Shape& s : shapes) {
    std::vector<float> v = random_floats(numel(s), 7);
    CpuTensor x = f32(s, v);
    std::vector<float> rows = values<float>(reduce(ReduceKind::kSum, x, {1}, {s[0]}, kF32));
    std::vector<float> cols = values<float>(reduce(ReduceKind::kMean, x, {0}, {s[1]}, kF32));
    for (int64_t i = 0; i < s[0]; ++i) {
      double want = 0, magnitude = 0;
      for (int64_t j = 0; j < s[1]; ++j) {
        want += v[i * s[1] + j];
        magnitude += std::fabs(v[i * s[1] + j]);
      }
      EXPECT_NEAR(rows[i], want, 1e-6 * magnitude) << shape_str(s) << " row " << i;
    }
    for (int64_t j = 0; j < s[1]; ++j) {
      double want = 0;
      for (int64_t i = 0; i < s[0]; ++i) want += v[i * s[1] + j];
      EXPECT_NEAR(cols[j], want / s[0], 1e-6) << shape_str(s) << " column " << j;
    }
  }
}

// docs: a sum of 16M uniform values is within 1e-5 relative of a double sum.
TEST(ReduceKernels, F32SumOf16MUniformValuesIsAccurate) {
  const int64_t n = int64_t{1} << 24;
  Harness h;
  ir::RandUniform u;
  u.shape = {n};
  u.seed = 5;
  u.out = h.out({n}, kF32);
  CpuTensor x = h.run(u);
  const float* p = x.data<float>();
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += p[i];
  const float got = values<float>(reduce(ReduceKind::kSum, x, {}, {}, kF32))[0];
  EXPECT_NEAR(got, want, 1e-5 * want);
  const float mean = values<float>(reduce(ReduceKind::kMean, x, {0}, {}, kF32))[0];
  EXPECT_NEAR(mean, want / n, 1e-5 * want / n);
}

// ================================ cumsum ================================

TEST(CumsumKernel, AlongEachDimAndDtype) {
  CpuTensor x = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(values<float>(cumsum(x, 1, kF32)), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(values<float>(cumsum(x, 0, kF32)), (std::vector<float>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(values<float>(cumsum(transposed(x), -1, kF32)), (std::vector<float>{1, 5, 2, 7, 3, 9}));
  EXPECT_EQ(values<int64_t>(cumsum(i32({3}, {2147483647, 1, -5}), 0, kI64)),
            (std::vector<int64_t>{2147483647, 2147483648, 2147483643}));
  EXPECT_EQ(values<int64_t>(cumsum(boolean({4}, {1, 0, 1, 1}), 0, kI64)),
            (std::vector<int64_t>{1, 1, 2, 3}));
  EXPECT_EQ(values<int64_t>(cumsum(u8({2}, {200, 100}), 0, kI64)),
            (std::vector<int64_t>{200, 300}));
  EXPECT_EQ(values<double>(cumsum(f64({}, {2.5}), 0, kF64)), std::vector<double>{2.5});
  EXPECT_EQ(cumsum(f32({0, 3}, {}), 0, kF32).numel(), 0);
}

TEST(CumsumKernel, LongLinesMatchADoubleRunningSum) {
  const int64_t n = 200001;  // several scan blocks
  std::vector<float> v = random_floats(n, 11, 0, 1);
  std::vector<float> got = values<float>(cumsum(f32({n}, v), 0, kF32));
  double run = 0;
  for (int64_t i = 0; i < n; ++i) {
    run += v[i];
    ASSERT_NEAR(got[i], run, 1e-6 * run + 1e-6) << i;
  }
  // and a wide vertical scan: [5, 1000] along dim 0
  std::vector<float> w = random_floats(5000, 12);
  std::vector<float> vert = values<float>(cumsum(f32({5, 1000}, w), 0, kF32));
  for (int64_t j = 0; j < 1000; ++j) {
    double acc = 0;
    for (int64_t i = 0; i < 5; ++i) {
      acc += w[i * 1000 + j];
      ASSERT_EQ(vert[i * 1000 + j], static_cast<float>(acc));
    }
  }
}

// ================================ determinism ================================

// The same inputs give the same bits on 1 and 2 threads.
TEST(Determinism, ResultsAreBitIdenticalForAnyThreadCount) {
  const int64_t n = int64_t{1} << 20;
  CpuTensor x = f32({n}, random_floats(n, 21, -3, 3));
  CpuTensor y = f32({n}, random_floats(n, 22, -3, 3));
  CpuTensor m = f32({1024, 1024}, random_floats(n, 23));
  auto outputs = [&] {
    std::vector<CpuTensor> r;
    r.push_back(reduce(ReduceKind::kSum, x, {}, {}, kF32));
    r.push_back(reduce(ReduceKind::kSum, m, {0}, {1024}, kF32));
    r.push_back(reduce(ReduceKind::kProd, m, {1}, {1024}, kF32));
    r.push_back(reduce(ReduceKind::kArgmax, x, {}, {}, kI64));
    r.push_back(unary(UnaryKind::kExp, x, kF32));
    r.push_back(binary(BinaryKind::kAdd, x, y, {n}, kF32));
    r.push_back(cumsum(x, 0, kF32));
    r.push_back(cumsum(m, 1, kF32));
    return r;
  };
  const int before = get_num_threads();
  set_num_threads(1);
  std::vector<CpuTensor> one = outputs();
  set_num_threads(2);
  std::vector<CpuTensor> two = outputs();
  set_num_threads(before);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    const size_t bytes = static_cast<size_t>(one[i].numel()) * dtype_size(one[i].dtype);
    ASSERT_EQ(bytes, static_cast<size_t>(two[i].numel()) * dtype_size(two[i].dtype));
    EXPECT_EQ(std::memcmp(one[i].bytes(), two[i].bytes(), bytes), 0) << "output " << i;
  }
}

}  // namespace
}  // namespace tw::cpu
