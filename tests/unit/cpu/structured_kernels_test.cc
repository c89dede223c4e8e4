// Focused tests of the structured CPU kernels (matmul, conv, pooling, softmax, layer_norm,
// movement, indexing), called directly through KernelContext with the output metas inference
// would give. Results are checked against small hand-computed values or naive loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/tile.h"
#include "core/half.h"
#include "core/thread_pool.h"
#include "support/kernel_fixture.h"

namespace tw::cpu {
namespace {

using namespace kernel_test;

// Element at a multi-index of a (possibly strided) tensor, as double.
template <class T>
double at(const CpuTensor& t, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides[d];
  return static_cast<double>(t.data<T>()[off]);
}

void expect_near_all(const std::vector<double>& want, const std::vector<float>& got, double tol) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(want[i], got[i], tol * (1 + std::abs(want[i]))) << "at " << i;
  }
}

// ------------------------------------------------------------------------------------ MatMul

// Naive batched matmul in double over broadcast batch dims of (possibly strided) operands.
std::vector<double> naive_matmul(const CpuTensor& a, const CpuTensor& b, const Shape& out) {
  const size_t r = out.size();
  const int64_t n = out[r - 2], m = out[r - 1], k = a.shape.back();
  const Shape batch(out.begin(), out.end() - 2);
  std::vector<double> res;
  const int64_t batches = numel(batch);
  for (int64_t bi = 0; bi < batches; ++bi) {
    std::vector<int64_t> idx(batch.size());
    for (int64_t d = static_cast<int64_t>(batch.size()) - 1, rest = bi; d >= 0; --d) {
      idx[d] = rest % batch[d];
      rest /= batch[d];
    }
    auto offset = [&](const CpuTensor& t) {
      int64_t off = 0;
      const size_t lead = batch.size() - (t.shape.size() - 2);
      for (size_t d = 0; d + 2 < t.shape.size(); ++d) {
        off += (t.shape[d] == 1 ? 0 : idx[lead + d]) * t.strides[d];
      }
      return off;
    };
    const int64_t ao = offset(a), bo = offset(b);
    const int64_t ar = a.rank(), br = b.rank();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double av =
              a.dtype == kF32
                  ? a.data<float>()[ao + i * a.strides[ar - 2] + p * a.strides[ar - 1]]
                  : a.data<double>()[ao + i * a.strides[ar - 2] + p * a.strides[ar - 1]];
          const double bv =
              b.dtype == kF32
                  ? b.data<float>()[bo + p * b.strides[br - 2] + j * b.strides[br - 1]]
                  : b.data<double>()[bo + p * b.strides[br - 2] + j * b.strides[br - 1]];
          acc += av * bv;
        }
        res.push_back(acc);
      }
    }
  }
  return res;
}

CpuTensor matmul(const CpuTensor& a, const CpuTensor& b, const Shape& out, DType dt) {
  Harness h;
  ir::MatMul op{.a = h.in(a), .b = h.in(b), .out = h.out(out, dt)};
  return h.run(op);
}

TEST(StructuredKernels, MatMulSmallHandComputed) {
  const CpuTensor a = f32({2, 3}, {1, 2, 3, 4, 5, 6});
  const CpuTensor b = f32({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_EQ(values<float>(matmul(a, b, {2, 2}, kF32)), (std::vector<float>{58, 64, 139, 154}));
  const CpuTensor ai = i64({2, 3}, {1, 2, 3, 4, 5, 6});
  const CpuTensor bi = i64({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_EQ(values<int64_t>(matmul(ai, bi, {2, 2}, kI64)),
            (std::vector<int64_t>{58, 64, 139, 154}));
}

TEST(StructuredKernels, MatMulF32AgainstNaive) {
  for (auto [n, k, m] : {std::tuple{1, 1, 1}, {7, 13, 5}, {64, 64, 64}, {33, 100, 17}}) {
    const CpuTensor a = random_f32({n, k}, 1), b = random_f32({k, m}, 2);
    expect_near_all(naive_matmul(a, b, {n, m}), values<float>(matmul(a, b, {n, m}, kF32)), 1e-5);
  }
}

TEST(StructuredKernels, MatMulTransposedAndStridedInputs) {
  // a^T as a permuted view (column-major), b sliced with step 2 along columns (no gemm layout).
  const CpuTensor at_base = random_f32({20, 9}, 3);
  Harness h;
  ir::Permute perm{.x = h.in(at_base), .dims = {1, 0}, .out = h.out({9, 20}, kF32)};
  const CpuTensor a = h.run(perm);
  ASSERT_EQ(a.strides, (Strides{1, 9}));
  const CpuTensor b_base = random_f32({20, 22}, 4);
  ir::Slice sl{.x = h.in(b_base),
               .starts = {0, 0},
               .ends = {20, 22},
               .steps = {1, 2},
               .out = h.out({20, 11}, kF32)};
  const CpuTensor b = h.run(sl);
  expect_near_all(naive_matmul(a, b, {9, 11}), values<float>(matmul(a, b, {9, 11}, kF32)), 1e-5);
  const CpuTensor a64 = random_f64({20, 9}, 5);
  ir::Permute perm64{.x = h.in(a64), .dims = {1, 0}, .out = h.out({9, 20}, kF64)};
  const CpuTensor a64t = h.run(perm64);
  const CpuTensor b64 = random_f64({11, 20}, 6);
  ir::Permute permb{.x = h.in(b64), .dims = {1, 0}, .out = h.out({20, 11}, kF64)};
  const CpuTensor b64t = h.run(permb);
  const std::vector<double> want = naive_matmul(a64t, b64t, {9, 11});
  const std::vector<double> got = values<double>(matmul(a64t, b64t, {9, 11}, kF64));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-13) << i;
}

// c = a x b checked at sampled elements against sums in double; a is [batch, rows, k], b is
// [k, cols] (shared by every batch) or [batch, k, cols].
void expect_sampled_matmul(const CpuTensor& a, const CpuTensor& b, const CpuTensor& c) {
  const int64_t batches = a.shape[0], rows = a.shape[1], k = a.shape[2];
  const int64_t cols = b.shape.back();
  for (int64_t n = 0; n < batches; ++n) {
    for (int64_t i = 0; i < rows; i += 37) {
      for (int64_t j = 0; j < cols; j += 101) {
        double want = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double bv = b.rank() == 2 ? at<float>(b, {p, j}) : at<float>(b, {n, p, j});
          const double t = at<float>(a, {n, i, p}) * bv;
          want += t;
          mag += std::abs(t);
        }
        ASSERT_NEAR(at<float>(c, {n, i, j}), want, 1e-5 * mag) << n << ", " << i << ", " << j;
      }
    }
  }
}

// Products large enough that b is first reordered to oneDNN's blocked layout (matmul.cc,
// reorders_b): a contiguous b, b as a column slice of a wider matrix (rows 1600 apart), a
// batched a sharing one b (its batches become rows of one product), and a batched b (reordered
// batch by batch).
TEST(StructuredKernels, MatMulLargeRowMajorBReorderedAgainstNaive) {
  constexpr int64_t kRows = 256, kK = 512, kCols = 1536;
  const CpuTensor a = random_f32({1, kRows, kK}, 7);
  const CpuTensor wide = random_f32({kK, 1600}, 8);
  Harness h;
  ir::Slice sl{.x = h.in(wide),
               .starts = {0, 40},
               .ends = {kK, 40 + kCols},
               .steps = {1, 1},
               .out = h.out({kK, kCols}, kF32)};
  const CpuTensor sliced = h.run(sl);
  ASSERT_EQ(sliced.strides, (Strides{1600, 1}));
  for (const CpuTensor& b : {random_f32({kK, kCols}, 9), sliced}) {
    SCOPED_TRACE(b.strides[0]);
    expect_sampled_matmul(a, b, matmul(a, b, {1, kRows, kCols}, kF32));
  }
  const CpuTensor a3 = random_f32({3, kRows, kK}, 10), b2 = random_f32({kK, kCols}, 11);
  expect_sampled_matmul(a3, b2, matmul(a3, b2, {3, kRows, kCols}, kF32));
  const CpuTensor b3 = random_f32({3, kK, kCols}, 12);
  expect_sampled_matmul(a3, b3, matmul(a3, b3, {3, kRows, kCols}, kF32));
}

// Small batches sharing one b fold into rows of one product whatever their size; the result is
// the same as the naive loops'.
TEST(StructuredKernels, MatMulBatchesSharingBFoldIntoRows) {
  const CpuTensor a = random_f32({3, 5, 7}, 15), b = random_f32({7, 4}, 16);
  expect_near_all(naive_matmul(a, b, {3, 5, 4}), values<float>(matmul(a, b, {3, 5, 4}, kF32)),
                  1e-5);
  const CpuTensor a4 = random_f32({2, 3, 5, 7}, 17);
  expect_near_all(naive_matmul(a4, b, {2, 3, 5, 4}),
                  values<float>(matmul(a4, b, {2, 3, 5, 4}, kF32)), 1e-5);
}

TEST(StructuredKernels, MatMulBatchedBroadcast) {
  // [2, 1, 3, 4] x [5, 4, 6] -> [2, 5, 3, 6]
  const CpuTensor a = random_f32({2, 1, 3, 4}, 7), b = random_f32({5, 4, 6}, 8);
  expect_near_all(naive_matmul(a, b, {2, 5, 3, 6}), values<float>(matmul(a, b, {2, 5, 3, 6}, kF32)),
                  1e-5);
  const CpuTensor a64 = random_f64({2, 1, 3, 4}, 7), b64 = random_f64({5, 4, 6}, 8);
  const std::vector<double> got64 = values<double>(matmul(a64, b64, {2, 5, 3, 6}, kF64));
  const std::vector<double> want64 = naive_matmul(a64, b64, {2, 5, 3, 6});
  for (size_t i = 0; i < want64.size(); ++i) ASSERT_NEAR(got64[i], want64[i], 1e-13) << i;
  // A batch dim interleaved with the matrix rows: [3, 2, 4] permuted to [2, 3, 4].
  Harness h;
  ir::Permute perm{
      .x = h.in(random_f32({3, 2, 4}, 13)), .dims = {1, 0, 2}, .out = h.out({2, 3, 4}, kF32)};
  const CpuTensor ai = h.run(perm), bi = random_f32({4, 6}, 14);
  expect_near_all(naive_matmul(ai, bi, {2, 3, 6}), values<float>(matmul(ai, bi, {2, 3, 6}, kF32)),
                  1e-5);
  // An expanded operand (batch stride 0 with size > 1).
  CpuTensor e = random_f32({1, 3, 4}, 9);
  e.shape = {4, 3, 4};
  e.strides = {0, 4, 1};
  const CpuTensor b2 = random_f32({4, 4, 2}, 10);
  expect_near_all(naive_matmul(e, b2, {4, 3, 2}), values<float>(matmul(e, b2, {4, 3, 2}, kF32)),
                  1e-5);
}

TEST(StructuredKernels, MatMulManyBatchDims) {
  // 11 batch dims that cannot be merged (the operands alternate broadcasting), more than oneDNN's
  // 12-dim limit allows with the matrix dims.
  Shape as, bs, os;
  for (int i = 0; i < 11; ++i) {
    as.push_back(i % 2 ? 1 : 2);
    bs.push_back(i % 2 ? 2 : 1);
    os.push_back(2);
  }
  as.insert(as.end(), {2, 3});
  bs.insert(bs.end(), {3, 2});
  os.insert(os.end(), {2, 2});
  const CpuTensor a = random_f32(as, 11), b = random_f32(bs, 12);
  expect_near_all(naive_matmul(a, b, os), values<float>(matmul(a, b, os, kF32)), 1e-5);
}

TEST(StructuredKernels, MatMulIntegerWrapsAndEdgeSizes) {
  const CpuTensor a = i32({1, 2}, {2147483647, 2});
  const CpuTensor b = i32({2, 1}, {2, 3});
  // 2147483647 * 2 + 6 wraps modulo 2^32.
  EXPECT_EQ(values<int32_t>(matmul(a, b, {1, 1}, kI32)), (std::vector<int32_t>{4}));
  // k == 0 gives zeros; n == 0 gives an empty result.
  const CpuTensor ek = f32({3, 0}, {}), bk = f32({0, 2}, {});
  EXPECT_EQ(values<float>(matmul(ek, bk, {3, 2}, kF32)), std::vector<float>(6, 0.f));
  const CpuTensor en = f32({0, 4}, {}), bn = random_f32({4, 2}, 1);
  EXPECT_EQ(matmul(en, bn, {0, 2}, kF32).numel(), 0);
  const std::vector<int64_t> av = {1, -2, 3, 4, 5, -6, 7, 8, 9, 10, 11, 12};
  const CpuTensor ai = i64({3, 4}, av), bi = i64({4, 3}, av);
  const std::vector<int64_t> got = values<int64_t>(matmul(ai, bi, {3, 3}, kI64));
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      int64_t acc = 0;
      for (int p = 0; p < 4; ++p) acc += av[i * 4 + p] * av[p * 3 + j];
      EXPECT_EQ(got[i * 3 + j], acc);
    }
  }
}

// oneDNN finding (Debian libdnnl 2.6.3, OpenMP runtime, AVX-512 host, 1 vs 2 threads): f32
// matmul (brgemm kernels; 256^3, 1024^3 and the K-heavy 64x4096x64 and 8x16384x8) and conv
// (first-layer 3->64, 256->256 3x3, 64->64 1x1) gave bit-identical results, consistent with
// each output being reduced by one thread. oneDNN does not promise this (with many threads its
// matmul may split k), so this test pins the observed behaviour for 1 vs 2 threads and always
// asserts identity between repeated runs at the same thread count.
TEST(StructuredKernels, OneDnnThreadCountIdentity) {
  const CpuTensor a = random_f32({256, 256}, 21), b = random_f32({256, 256}, 22);
  const CpuTensor x = random_f32({4, 16, 20, 20}, 23), w = random_f32({32, 16, 3, 3}, 24);
  const CpuTensor bias = random_f32({32}, 25);
  const CpuTensor xc = random_f32({9, 16, 16, 16}, 26), wc = random_f32({32, 16, 3, 3}, 27);
  auto conv = [&] {
    Harness h;
    ir::Conv2d op{.x = h.in(x),
                  .w = h.in(w),
                  .bias = h.in(bias),
                  .padding = {1, 1},
                  .out = h.out({4, 32, 20, 20}, kF32)};
    std::vector<float> r = values<float>(h.run(op));
    // One that conv.cc runs per chunk of images (9 images: chunks of 2 and a tail of 1).
    ir::Conv2d chunked{.x = h.in(xc),
                       .w = h.in(wc),
                       .bias = {},
                       .padding = {1, 1},
                       .out = h.out({9, 32, 16, 16}, kF32)};
    const std::vector<float> c = values<float>(h.run(chunked));
    r.insert(r.end(), c.begin(), c.end());
    return r;
  };
  std::vector<float> mm1, mm2, mm2b, cv1, cv2, cv2b;
  with_threads(1, [&] {
    mm1 = values<float>(matmul(a, b, {256, 256}, kF32));
    cv1 = conv();
  });
  with_threads(2, [&] {
    mm2 = values<float>(matmul(a, b, {256, 256}, kF32));
    mm2b = values<float>(matmul(a, b, {256, 256}, kF32));
    cv2 = conv();
    cv2b = conv();
  });
  EXPECT_EQ(mm2, mm2b);
  EXPECT_EQ(cv2, cv2b);
  EXPECT_EQ(mm1, mm2);
  EXPECT_EQ(cv1, cv2);
}

// -------------------------------------------------------------------------------------- Conv

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw, groups;
  std::vector<int64_t> stride, padding, dilation;
  bool bias;
};

template <class T>
std::vector<double> naive_conv(const ConvCase& k, const CpuTensor& x, const CpuTensor& w,
                               const CpuTensor* b, int64_t ho, int64_t wo) {
  std::vector<double> out;
  const int64_t cg = k.c / k.groups, og = k.o / k.groups;
  for (int64_t n = 0; n < k.n; ++n) {
    for (int64_t o = 0; o < k.o; ++o) {
      for (int64_t oy = 0; oy < ho; ++oy) {
        for (int64_t ox = 0; ox < wo; ++ox) {
          double acc = b ? at<T>(*b, {o}) : 0.0;
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t ky = 0; ky < k.kh; ++ky) {
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                const int64_t iy = oy * k.stride[0] - k.padding[0] + ky * k.dilation[0];
                const int64_t ix = ox * k.stride[1] - k.padding[1] + kx * k.dilation[1];
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                acc += at<T>(x, {n, (o / og) * cg + c, iy, ix}) * at<T>(w, {o, c, ky, kx});
              }
            }
          }
          out.push_back(acc);
        }
      }
    }
  }
  return out;
}

TEST(StructuredKernels, Conv2dAgainstNaive) {
  const std::vector<ConvCase> cases = {
      {2, 3, 9, 11, 8, 3, 3, 1, {1, 1}, {1, 1}, {1, 1}, true},
      {1, 4, 10, 7, 6, 3, 2, 2, {2, 1}, {1, 0}, {2, 1}, false},
      {2, 32, 8, 8, 32, 3, 3, 2, {1, 2}, {2, 1}, {1, 2}, true},
      {1, 8, 6, 6, 8, 3, 3, 8, {1, 1}, {1, 1}, {1, 1}, true},  // depthwise
      {3, 2, 5, 5, 4, 5, 5, 1, {3, 3}, {2, 2}, {1, 1}, true},
      // 16 and 48 output channels: oneDNN writes nChw16c, which tile.h's transpose turns into
      // NCHW, here with 99 and 35 pixels per plane (a tail of 3 after 16-pixel tiles).
      {2, 3, 9, 11, 16, 3, 3, 1, {1, 1}, {1, 1}, {1, 1}, true},
      {3, 16, 5, 7, 48, 3, 3, 1, {1, 1}, {1, 1}, {1, 1}, false},
      // An output of 4.5 MiB from conv_first.h's kernel (3 channels, rows of 96), written with
      // streaming stores.
      {2, 3, 96, 96, 64, 3, 3, 1, {1, 1}, {1, 1}, {1, 1}, true},
      // conv_first.h's kernel at its edges: rows of 33 (a 1-output tail after 32), 13 and 5
      // output channels (tiles of 8 and a remainder), height stride and dilation, width
      // dilation, padding wider than the kernel reaches, 32 taps (8 channels of 2x2), and the
      // biggest kernel it takes (64 taps).
      {2, 1, 20, 37, 13, 3, 5, 1, {2, 1}, {1, 2}, {2, 2}, true},
      {1, 2, 4, 16, 5, 3, 3, 1, {1, 1}, {2, 2}, {1, 1}, false},
      {3, 8, 9, 40, 24, 2, 2, 1, {1, 1}, {0, 0}, {1, 1}, true},
      {1, 1, 12, 20, 9, 8, 8, 1, {1, 1}, {3, 3}, {1, 1}, true},
      // Large enough to run per chunk of images (conv.cc's chunk_images): 9 images in chunks
      // of 2 and a tail of 1.
      {9, 16, 16, 16, 32, 3, 3, 1, {1, 1}, {1, 1}, {1, 1}, true},
  };
  for (const ConvCase& k : cases) {
    const int64_t ho = (k.h + 2 * k.padding[0] - k.dilation[0] * (k.kh - 1) - 1) / k.stride[0] + 1;
    const int64_t wo = (k.w + 2 * k.padding[1] - k.dilation[1] * (k.kw - 1) - 1) / k.stride[1] + 1;
    for (DType dt : {kF32, kF64}) {
      auto rnd = [&](const Shape& s, uint64_t seed) {
        return dt == kF32 ? random_f32(s, seed) : random_f64(s, seed);
      };
      const CpuTensor x = rnd({k.n, k.c, k.h, k.w}, 31),
                      w = rnd({k.o, k.c / k.groups, k.kh, k.kw}, 32);
      const CpuTensor b = rnd({k.o}, 33);
      Harness h;
      ir::Conv2d op{.x = h.in(x),
                    .w = h.in(w),
                    .bias = k.bias ? h.in(b) : ir::In{},
                    .stride = k.stride,
                    .padding = k.padding,
                    .dilation = k.dilation,
                    .groups = k.groups,
                    .out = h.out({k.n, k.o, ho, wo}, dt)};
      const CpuTensor y = h.run(op);
      if (dt == kF32) {
        expect_near_all(naive_conv<float>(k, x, w, k.bias ? &b : nullptr, ho, wo), values<float>(y),
                        1e-5);
      } else {
        const std::vector<double> want = naive_conv<double>(k, x, w, k.bias ? &b : nullptr, ho, wo);
        const std::vector<double> got = values<double>(y);
        ASSERT_EQ(want.size(), got.size());
        for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(want[i], got[i], 1e-12) << i;
      }
    }
  }
}

// The nChw16c -> NCHW transpose itself, on every path it has (AVX-512 when the CPU has it, the
// portable loops always): pixel counts around the 16-pixel tile, destination planes wider than
// the source (dst_plane > hw), streaming on and off, aligned and misaligned destinations.
TEST(StructuredKernels, Untile16AgainstIndexing) {
  for (int64_t hw : {1, 15, 16, 17, 64, 1029}) {
    for (int64_t extra : {0, 16, 3}) {
      const int64_t plane = hw + extra;
      std::vector<float> src(static_cast<size_t>(hw * 16));
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
      for (bool streaming : {false, true}) {
        for (int64_t misalign : {0, 1}) {
          for (bool portable : {false, true}) {
            // A pooled buffer is 64-byte aligned (what streaming stores need).
            Buffer dst = Buffer::allocate(static_cast<size_t>(16 * plane + 1) * sizeof(float));
            float* d = reinterpret_cast<float*>(dst.data()) + misalign;
            std::fill(d, d + 16 * plane, -1.0f);
            if (portable) {
              untile16_portable(src.data(), d, hw, plane);
            } else {
              untile16(src.data(), d, hw, plane, streaming);
            }
            for (int64_t c = 0; c < 16; ++c) {
              for (int64_t p = 0; p < plane; ++p) {
                const float want = p < hw ? static_cast<float>(p * 16 + c) : -1.0f;
                ASSERT_EQ(d[c * plane + p], want)
                    << "hw " << hw << " plane " << plane << " channel " << c << " pixel " << p
                    << (portable ? " portable" : "") << (streaming ? " streaming" : "");
              }
            }
          }
        }
      }
    }
  }
}

TEST(StructuredKernels, Conv2dNonContiguousAndEmpty) {
  // x given as a permuted view of NHWC data.
  const CpuTensor nhwc = random_f32({2, 6, 5, 3}, 41);
  Harness h;
  ir::Permute p{.x = h.in(nhwc), .dims = {0, 3, 1, 2}, .out = h.out({2, 3, 6, 5}, kF32)};
  const CpuTensor x = h.run(p);
  const CpuTensor w = random_f32({4, 3, 3, 3}, 42);
  ir::Conv2d op{
      .x = h.in(x), .w = h.in(w), .bias = {}, .padding = {1, 1}, .out = h.out({2, 4, 6, 5}, kF32)};
  const ConvCase k{2, 3, 6, 5, 4, 3, 3, 1, {1, 1}, {1, 1}, {1, 1}, false};
  expect_near_all(naive_conv<float>(k, x, w, nullptr, 6, 5), values<float>(h.run(op)), 1e-5);
  // Zero images: an empty result.
  const CpuTensor x0 = f32({0, 3, 4, 4}, {});
  ir::Conv2d op0{
      .x = h.in(x0), .w = h.in(w), .bias = {}, .padding = {1, 1}, .out = h.out({0, 4, 4, 4}, kF32)};
  EXPECT_EQ(h.run(op0).numel(), 0);
}

// ----------------------------------------------------------------------------------- Pooling

// One Pool2d kernel run on x, with the output shape the caller computed by hand.
CpuTensor pool2d(ir::PoolKind kind, const CpuTensor& x, std::vector<int64_t> kernel,
                 std::vector<int64_t> stride, std::vector<int64_t> padding, const Shape& out) {
  Harness h;
  return h.run(ir::Pool2d{.kind = kind,
                          .x = h.in(x),
                          .kernel = std::move(kernel),
                          .stride = std::move(stride),
                          .padding = std::move(padding),
                          .out = h.out(out, x.dtype)});
}

TEST(StructuredKernels, Pool2dMaxAndAvg) {
  // 1 x 1 x 4 x 4, kernel 3, stride 2, padding 1 -> 2 x 2
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[i] = static_cast<float>(i);
  const CpuTensor x = f32({1, 1, 4, 4}, v);
  const CpuTensor mx = pool2d(ir::PoolKind::kMax, x, {3, 3}, {2, 2}, {1, 1}, {1, 1, 2, 2});
  EXPECT_EQ(values<float>(mx), (std::vector<float>{5, 7, 13, 15}));
  const CpuTensor avg = pool2d(ir::PoolKind::kAvg, x, {3, 3}, {2, 2}, {1, 1}, {1, 1, 2, 2});
  // Window sums: (0+1+4+5)=10, (1+2+3+5+6+7)=24, (4+5+8+9+12+13)=51, (5+6+7+9+10+11+13+14+15)=90;
  // each divided by 9 (padding counts).
  const std::vector<float> got = values<float>(avg);
  const std::vector<float> want = {10.f / 9, 24.f / 9, 51.f / 9, 90.f / 9};
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(got[i], want[i]);
  // NaN propagates through max.
  v[5] = std::numeric_limits<float>::quiet_NaN();
  const CpuTensor xn = f32({1, 1, 4, 4}, v);
  const CpuTensor mxn = pool2d(ir::PoolKind::kMax, xn, {2, 2}, {2, 2}, {0, 0}, {1, 1, 2, 2});
  const std::vector<float> gn = values<float>(mxn);
  EXPECT_TRUE(std::isnan(gn[0]));
  EXPECT_EQ(gn[1], 7);
}

TEST(StructuredKernels, Pool2dAgainstNaiveF64) {
  const CpuTensor x = random_f64({2, 3, 7, 9}, 51);
  for (bool is_max : {true, false}) {
    const CpuTensor y = pool2d(is_max ? ir::PoolKind::kMax : ir::PoolKind::kAvg, x, {3, 2}, {2, 1},
                               {1, 1}, {2, 3, 4, 10});
    const std::vector<double> got = values<double>(y);
    size_t i = 0;
    for (int64_t p = 0; p < 6; ++p) {
      for (int64_t oy = 0; oy < 4; ++oy) {
        for (int64_t ox = 0; ox < 10; ++ox, ++i) {
          double acc = is_max ? -INFINITY : 0;
          for (int64_t ky = 0; ky < 3; ++ky) {
            for (int64_t kx = 0; kx < 2; ++kx) {
              const int64_t iy = oy * 2 - 1 + ky, ix = ox - 1 + kx;
              if (iy < 0 || iy >= 7 || ix < 0 || ix >= 9) continue;
              const double v = at<double>(x, {p / 3, p % 3, iy, ix});
              acc = is_max ? std::max(acc, v) : acc + v;
            }
          }
          ASSERT_NEAR(got[i], is_max ? acc : acc / 6, 1e-12);
        }
      }
    }
  }
}

TEST(StructuredKernels, AdaptiveAvgPool2dUnevenBins) {
  // H = 5 into 3 bins: [0, 2), [1, 4), [3, 5); W = 2 into 1 bin.
  const CpuTensor x = f32({1, 1, 5, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  Harness h;
  ir::AdaptiveAvgPool2d op{.x = h.in(x), .output_size = {3, 1}, .out = h.out({1, 1, 3, 1}, kF32)};
  const std::vector<float> got = values<float>(h.run(op));
  EXPECT_FLOAT_EQ(got[0], (1 + 2 + 3 + 4) / 4.f);
  EXPECT_FLOAT_EQ(got[1], (3 + 4 + 5 + 6 + 7 + 8) / 6.f);
  EXPECT_FLOAT_EQ(got[2], (7 + 8 + 9 + 10) / 4.f);
}

// ----------------------------------------------------------------------------------- Softmax

std::vector<double> naive_softmax(const CpuTensor& x, int64_t dim, bool log_out) {
  const std::vector<double> v = [&] {
    std::vector<double> r;
    if (x.dtype == kF32) {
      for (float f : values<float>(x)) r.push_back(f);
    } else {
      r = values<double>(x);
    }
    return r;
  }();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape[d];
  for (int64_t d = dim + 1; d < x.rank(); ++d) inner *= x.shape[d];
  const int64_t len = x.shape[dim];
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto idx = [&](int64_t l) { return static_cast<size_t>((o * len + l) * inner + i); };
      double m = -INFINITY, s = 0;
      for (int64_t l = 0; l < len; ++l) m = std::max(m, v[idx(l)]);
      for (int64_t l = 0; l < len; ++l) s += std::exp(v[idx(l)] - m);
      for (int64_t l = 0; l < len; ++l) {
        out[idx(l)] = log_out ? v[idx(l)] - m - std::log(s) : std::exp(v[idx(l)] - m) / s;
      }
    }
  }
  return out;
}

TEST(StructuredKernels, SoftmaxAgainstNaive) {
  for (const Shape& shape : {Shape{3, 37}, Shape{2, 19, 11}, Shape{5, 8}, Shape{1, 1}}) {
    for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
      for (bool log_out : {false, true}) {
        std::vector<float> v = random_values<float>(numel(shape), 61);
        for (float& f : v) f *= 30;  // spread so exp covers a wide range
        const CpuTensor x = f32(shape, v);
        Harness h;
        ir::Softmax op{.x = h.in(x),
                       .dim = dim - static_cast<int64_t>(shape.size()),
                       .log = log_out,
                       .out = h.out(shape, kF32)};
        const std::vector<float> got = values<float>(h.run(op));
        const std::vector<double> want = naive_softmax(x, dim, log_out);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-6 * (1 + std::abs(want[i]))) << i;
        }
        const CpuTensor x64 = random_f64(shape, 62);
        ir::Softmax op64{.x = h.in(x64), .dim = dim, .log = log_out, .out = h.out(shape, kF64)};
        const std::vector<double> got64 = values<double>(h.run(op64));
        const std::vector<double> want64 = naive_softmax(x64, dim, log_out);
        for (size_t i = 0; i < want64.size(); ++i) ASSERT_NEAR(got64[i], want64[i], 1e-14);
      }
    }
  }
}

TEST(StructuredKernels, SoftmaxExtremesAndStridedInput) {
  const float inf = std::numeric_limits<float>::infinity();
  const CpuTensor x = f32({2, 3}, {0, -inf, -200, 1, 1, 1});
  Harness h;
  ir::Softmax op{.x = h.in(x), .dim = 1, .out = h.out({2, 3}, kF32)};
  const std::vector<float> got = values<float>(h.run(op));
  EXPECT_EQ(got[0], 1.f);
  EXPECT_EQ(got[1], 0.f);
  EXPECT_EQ(got[2], 0.f);
  EXPECT_FLOAT_EQ(got[3], 1.f / 3);
  // A transposed view.
  const CpuTensor base = random_f32({9, 4}, 63);
  ir::Permute p{.x = h.in(base), .dims = {1, 0}, .out = h.out({4, 9}, kF32)};
  const CpuTensor xt = h.run(p);
  ir::Softmax op2{.x = h.in(xt), .dim = 1, .log = true, .out = h.out({4, 9}, kF32)};
  const std::vector<float> got2 = values<float>(h.run(op2));
  const std::vector<double> want2 = naive_softmax(contiguous(xt), 1, true);
  for (size_t i = 0; i < want2.size(); ++i) ASSERT_NEAR(got2[i], want2[i], 1e-6);
}

TEST(StructuredKernels, OwnKernelsIdenticalForAnyThreadCount) {
  const CpuTensor x = random_f32({300, 1000}, 71);
  const CpuTensor x3 = random_f32({30, 100, 70}, 72);
  const CpuTensor x4 = random_f32({3, 10, 100, 70}, 72);
  const CpuTensor m64a = random_f64({130, 70}, 73), m64b = random_f64({70, 90}, 74);
  // A first-layer convolution (conv_first.h's kernel): 3 -> 20 channels on 48x40 images.
  const CpuTensor cx = random_f32({4, 3, 48, 40}, 75), cw = random_f32({20, 3, 3, 3}, 76);
  auto compute = [&] {
    Harness h;
    ir::Conv2d cv{.x = h.in(cx),
                  .w = h.in(cw),
                  .bias = {},
                  .padding = {1, 1},
                  .out = h.out({4, 20, 48, 40}, kF32)};
    ir::Softmax s1{.x = h.in(x), .dim = -1, .out = h.out({300, 1000}, kF32)};
    ir::Softmax s2{.x = h.in(x3), .dim = 1, .out = h.out({30, 100, 70}, kF32)};
    ir::LayerNorm ln{.x = h.in(x), .weight = {}, .bias = {}, .out = h.out({300, 1000}, kF32)};
    ir::Pool2d pl{.kind = ir::PoolKind::kAvg,
                  .x = h.in(x4),
                  .kernel = {3, 3},
                  .stride = {1, 1},
                  .padding = {1, 1},
                  .out = h.out({3, 10, 100, 70}, kF32)};
    std::vector<float> r = values<float>(h.run(s1));
    for (const CpuTensor& t : {h.run(s2), h.run(ln), h.run(pl), h.run(cv)}) {
      const std::vector<float> v = values<float>(t);
      r.insert(r.end(), v.begin(), v.end());
    }
    const std::vector<double> mm = values<double>(matmul(m64a, m64b, {130, 90}, kF64));
    for (double d : mm) r.push_back(static_cast<float>(d));
    return r;
  };
  std::vector<float> one, two;
  with_threads(1, [&] { one = compute(); });
  with_threads(2, [&] { two = compute(); });
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
}

// -------------------------------------------------------------------------------- LayerNorm

TEST(StructuredKernels, LayerNormAgainstNaive) {
  const CpuTensor x = random_f32({3, 4, 5}, 81);
  const CpuTensor w = random_f32({4, 5}, 82), b = random_f32({4, 5}, 83);
  for (int variant = 0; variant < 4; ++variant) {
    const bool has_w = variant & 1, has_b = variant & 2;
    Harness h;
    ir::LayerNorm op{.x = h.in(x),
                     .weight = has_w ? h.in(w) : ir::In{},
                     .bias = has_b ? h.in(b) : ir::In{},
                     .normalized_dims = 2,
                     .eps = 1e-5,
                     .out = h.out({3, 4, 5}, kF32)};
    const std::vector<float> got = values<float>(h.run(op));
    const std::vector<float> xv = values<float>(x), wv = values<float>(w), bv = values<float>(b);
    for (int r = 0; r < 3; ++r) {
      double mean = 0, var = 0;
      for (int i = 0; i < 20; ++i) mean += xv[r * 20 + i];
      mean /= 20;
      for (int i = 0; i < 20; ++i) var += (xv[r * 20 + i] - mean) * (xv[r * 20 + i] - mean);
      var /= 20;
      for (int i = 0; i < 20; ++i) {
        double y = (xv[r * 20 + i] - mean) / std::sqrt(var + 1e-5);
        if (has_w) y *= wv[i];
        if (has_b) y += bv[i];
        ASSERT_NEAR(got[r * 20 + i], y, 1e-5);
      }
    }
  }
}

// --------------------------------------------------------------------------------- Movement

TEST(StructuredKernels, ViewsShareTheBuffer) {
  const CpuTensor x = random_f32({4, 6}, 91);
  Harness h;
  ir::Reshape rs{.x = h.in(x), .shape = {2, 3, 4}, .out = h.out({2, 3, 4}, kF32)};
  const CpuTensor r = h.run(rs);
  EXPECT_EQ(r.buffer.data(), x.buffer.data());
  EXPECT_EQ(values<float>(r), values<float>(x));
  ir::Permute pm{.x = h.in(x), .dims = {-1, 0}, .out = h.out({6, 4}, kF32)};
  const CpuTensor p = h.run(pm);
  EXPECT_EQ(p.buffer.data(), x.buffer.data());
  EXPECT_EQ(at<float>(p, {5, 1}), at<float>(x, {1, 5}));
  // Reshape of the transposed view cannot be a view: it copies.
  ir::Reshape rs2{.x = h.in(p), .shape = {24}, .out = h.out({24}, kF32)};
  const CpuTensor flat = h.run(rs2);
  EXPECT_NE(flat.buffer.data(), x.buffer.data());
  EXPECT_EQ(values<float>(flat), values<float>(p));
  // Splitting a dim of the transposed view is still a view.
  ir::Reshape rs3{.x = h.in(p), .shape = {2, 3, 4}, .out = h.out({2, 3, 4}, kF32)};
  const CpuTensor split = h.run(rs3);
  EXPECT_EQ(split.buffer.data(), x.buffer.data());
  EXPECT_EQ(values<float>(split), values<float>(p));
  ir::Expand ex{
      .x = h.in(f32({3, 1}, {1, 2, 3})), .shape = {2, -1, 4}, .out = h.out({2, 3, 4}, kF32)};
  const CpuTensor e = h.run(ex);
  EXPECT_EQ(e.strides[0], 0);
  EXPECT_EQ(e.strides[2], 0);
  EXPECT_EQ(at<float>(e, {1, 2, 3}), 3);
  ir::Slice sl{.x = h.in(x),
               .starts = {-3, 1},
               .ends = {100, -1},
               .steps = {2, 3},
               .out = h.out({2, 2}, kF32)};
  const CpuTensor s = h.run(sl);
  EXPECT_EQ(s.buffer.data(), x.buffer.data());
  EXPECT_EQ(values<float>(s), (std::vector<float>{static_cast<float>(at<float>(x, {1, 1})),
                                                  static_cast<float>(at<float>(x, {1, 4})),
                                                  static_cast<float>(at<float>(x, {3, 1})),
                                                  static_cast<float>(at<float>(x, {3, 4}))}));
  ir::Slice empty{
      .x = h.in(x), .starts = {3, 0}, .ends = {1, 6}, .steps = {1, 1}, .out = h.out({0, 6}, kF32)};
  EXPECT_EQ(h.run(empty).numel(), 0);
}

TEST(StructuredKernels, SliceAssignCatFlipRepeat) {
  const CpuTensor x = f32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Harness h;
  ir::SliceAssign sa{.x = h.in(x),
                     .src = h.in(f32({2}, {-1, -2})),
                     .starts = {0, 1},
                     .ends = {3, 4},
                     .steps = {2, 2},
                     .out = h.out({3, 4}, kF32)};
  EXPECT_EQ(values<float>(h.run(sa)),
            (std::vector<float>{0, -1, 2, -2, 4, 5, 6, 7, 8, -1, 10, -2}));
  EXPECT_EQ(values<float>(x)[1], 1);  // the input is untouched
  ir::Permute pm{.x = h.in(x), .dims = {1, 0}, .out = h.out({4, 3}, kF32)};
  const CpuTensor xt = h.run(pm);
  ir::Cat cat{.xs = {h.in(xt), h.in(f32({4, 1}, {-1, -2, -3, -4})), h.in(f32({4, 0}, {}))},
              .dim = -1,
              .out = h.out({4, 4}, kF32)};
  EXPECT_EQ(values<float>(h.run(cat)),
            (std::vector<float>{0, 4, 8, -1, 1, 5, 9, -2, 2, 6, 10, -3, 3, 7, 11, -4}));
  ir::Flip fl{.x = h.in(x), .dims = {0, -1}, .out = h.out({3, 4}, kF32)};
  EXPECT_EQ(values<float>(h.run(fl)), (std::vector<float>{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  ir::Repeat rp{.x = h.in(f32({2}, {1, 2})), .repeats = {2, 3}, .out = h.out({2, 6}, kF32)};
  EXPECT_EQ(values<float>(h.run(rp)), (std::vector<float>{1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 1, 2}));
  ir::Repeat rp0{.x = h.in(x), .repeats = {0, 2}, .out = h.out({0, 8}, kF32)};
  EXPECT_EQ(h.run(rp0).numel(), 0);
}

TEST(StructuredKernels, MovementOfStorageOnlyDtypes) {
  // f16 and bf16 move as raw 2-byte elements.
  std::vector<uint16_t> bits;
  for (float f : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) bits.push_back(f32_to_f16(f));
  const CpuTensor x = make({2, 3}, kF16, bits);
  Harness h;
  ir::Flip fl{.x = h.in(x), .dims = {1}, .out = h.out({2, 3}, kF16)};
  const std::vector<uint16_t> got = values<uint16_t>(h.run(fl));
  EXPECT_EQ(f16_to_f32(got[0]), 3.f);
  EXPECT_EQ(f16_to_f32(got[5]), 4.f);
  const CpuTensor bf =
      make({3}, kBF16, std::vector<uint16_t>{f32_to_bf16(1), f32_to_bf16(2), f32_to_bf16(3)});
  ir::Cat cat{.xs = {h.in(bf), h.in(bf)}, .dim = 0, .out = h.out({6}, kBF16)};
  EXPECT_EQ(bf16_to_f32(values<uint16_t>(h.run(cat))[4]), 2.f);
  ir::Gather g{.x = h.in(bf), .dim = 0, .index = h.in(i64({2}, {2, 0})), .out = h.out({2}, kBF16)};
  EXPECT_EQ(bf16_to_f32(values<uint16_t>(h.run(g))[0]), 3.f);
}

// --------------------------------------------------------------------------------- Indexing

TEST(StructuredKernels, GatherAndErrors) {
  const CpuTensor x = f32({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  Harness h;
  ir::Gather g{
      .x = h.in(x), .dim = 1, .index = h.in(i32({2, 2}, {4, 0, 1, 1})), .out = h.out({2, 2}, kF32)};
  EXPECT_EQ(values<float>(h.run(g)), (std::vector<float>{4, 0, 6, 6}));
  ir::Gather g0{
      .x = h.in(x), .dim = 0, .index = h.in(i64({1, 3}, {1, 0, 1})), .out = h.out({1, 3}, kF32)};
  EXPECT_EQ(values<float>(h.run(g0)), (std::vector<float>{5, 1, 7}));
  ir::Gather bad{.x = h.in(x),
                 .dim = 1,
                 .index = h.in(i64({2, 2}, {0, 7, -1, 9})),
                 .out = h.out({2, 2}, kF32)};
  Status st = run(bad, h.ctx);
  EXPECT_EQ(st.message(), "gather: index 7 out of range for dim 1 of size 5 (expected -5..4)");
}

TEST(StructuredKernels, ScatterAddOrderIsRowMajor) {
  // All three additions land on out[0][0]; in f32, (1e8 + 1) + 1 - ... depends on order, and the
  // kernel must add in row-major index order: ((x + 1e8) + 1) + -1e8.
  const CpuTensor x = f32({2, 2}, {0, 0, 0, 0});
  const CpuTensor src = f32({3, 2}, {1e8f, 5, 1, 6, -1e8f, 7});
  Harness h;
  ir::ScatterAdd sa{.x = h.in(x),
                    .dim = 0,
                    .index = h.in(i64({3, 2}, {0, 1, 0, 1, 0, 0})),
                    .src = h.in(src),
                    .out = h.out({2, 2}, kF32)};
  const std::vector<float> got = values<float>(h.run(sa));
  float want00 = 0;
  for (float v : {1e8f, 1.f, -1e8f}) want00 += v;
  EXPECT_EQ(got[0], want00);
  EXPECT_EQ(got[1], 7);
  EXPECT_EQ(got[2], 0);
  EXPECT_EQ(got[3], 11);
  // Integer sums wrap; only the index's extent of src is used.
  const CpuTensor xi = i32({1, 3}, {2147483647, 0, 0});
  const CpuTensor si = i32({2, 3}, {1, 2, 3, 4, 5, 6});
  ir::ScatterAdd sai{.x = h.in(xi),
                     .dim = 1,
                     .index = h.in(i64({1, 2}, {0, 0})),
                     .src = h.in(si),
                     .out = h.out({1, 3}, kI32)};
  EXPECT_EQ(values<int32_t>(h.run(sai)), (std::vector<int32_t>{-2147483646, 0, 0}));
  ir::ScatterAdd bad{.x = h.in(x),
                     .dim = 1,
                     .index = h.in(i64({1, 1}, {2})),
                     .src = h.in(src),
                     .out = h.out({2, 2}, kF32)};
  EXPECT_EQ(run(bad, h.ctx).message(),
            "scatter_add: index 2 out of range for dim 1 of size 2 (expected -2..1)");
}

TEST(StructuredKernels, IndexSelectAndOneHot) {
  const CpuTensor x = f32({2, 3, 2}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Harness h;
  ir::IndexSelect is{
      .x = h.in(x), .dim = 1, .index = h.in(i32({4}, {2, 0, 2, 1})), .out = h.out({2, 4, 2}, kF32)};
  EXPECT_EQ(values<float>(h.run(is)),
            (std::vector<float>{4, 5, 0, 1, 4, 5, 2, 3, 10, 11, 6, 7, 10, 11, 8, 9}));
  ir::IndexSelect empty{
      .x = h.in(x), .dim = 0, .index = h.in(i64({0}, {})), .out = h.out({0, 3, 2}, kF32)};
  EXPECT_EQ(h.run(empty).numel(), 0);
  ir::IndexSelect bad{
      .x = h.in(x), .dim = -1, .index = h.in(i64({2}, {1, 2})), .out = h.out({2, 3, 2}, kF32)};
  EXPECT_EQ(run(bad, h.ctx).message(),
            "index_select: index 2 out of range for dim 2 of size 2 (expected -2..1)");
  ir::OneHot oh{.x = h.in(make({3}, kU8, std::vector<uint8_t>{2, 0, 1})),
                .num_classes = 3,
                .out = h.out({3, 3}, kI64)};
  EXPECT_EQ(values<int64_t>(h.run(oh)), (std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 1, 0}));
  ir::OneHot ohbad{.x = h.in(i64({2}, {1, 3})), .num_classes = 3, .out = h.out({2, 3}, kI64)};
  EXPECT_EQ(run(ohbad, h.ctx).message(), "one_hot: value 3 out of range for num_classes 3");
}

}  // namespace
}  // namespace tw::cpu
