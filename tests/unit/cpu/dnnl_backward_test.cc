// The fast paths of the conv and pool kernels. Conv backward on oneDNN (conv_backward.cc) and
// pool backward (pool_backward.cc) at 1, 2 and 4 intra-op threads: the same bytes each time, and
// conv within f32 rounding of a double reference; the shapes cut the batch into several chunks
// of images, the last one short, and take both plain (few channels) and blocked (16+ channels)
// layouts. The 2x2 pooling paths (pool.cc, pool_backward.cc) against the general kernels, byte
// for byte, on values that exercise the max rule's ties, NaN, -inf and signed zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <vector>

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
#include <omp.h>
#endif

#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "core/thread_pool.h"
#include "unit/cpu/kernel_test_util.h"

namespace tw::cpu {
namespace {

using test::at_every_thread_count;
using test::filled;
using test::run_op;

struct ConvCase {
  Shape x, w;
  int64_t stride, padding, groups;
};

Shape grad_shape(const ConvCase& c) {
  const int64_t ho = (c.x[2] + 2 * c.padding - c.w[2]) / c.stride + 1;
  const int64_t wo = (c.x[3] + 2 * c.padding - c.w[3]) / c.stride + 1;
  return {c.x[0], c.w[0], ho, wo};
}

// d x and d w of sum(grad * conv2d(x, w)) in double.
void reference(const ConvCase& c, const float* x, const float* w, const float* g,
               std::vector<double>& dx, std::vector<double>& dw) {
  const Shape gs = grad_shape(c);
  const int64_t n = c.x[0], ch = c.x[1], h = c.x[2], wd = c.x[3];
  const int64_t o = c.w[0], cg = c.w[1], kh = c.w[2], kw = c.w[3], og = o / c.groups;
  dx.assign(static_cast<size_t>(numel(c.x)), 0);
  dw.assign(static_cast<size_t>(numel(c.w)), 0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oy = 0; oy < gs[2]; ++oy)
        for (int64_t ox = 0; ox < gs[3]; ++ox) {
          const double gv = g[((b * o + oc) * gs[2] + oy) * gs[3] + ox];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * c.stride - c.padding + ky;
                const int64_t ix = ox * c.stride - c.padding + kx;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t xi = ((b * ch + oc / og * cg + ci) * h + iy) * wd + ix;
                const int64_t wi = ((oc * cg + ci) * kh + ky) * kw + kx;
                dx[static_cast<size_t>(xi)] += gv * w[wi];
                dw[static_cast<size_t>(wi)] += gv * x[xi];
              }
        }
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at " << i;
}

const std::vector<ConvCase> kCases = {
    {{64, 1, 8, 8}, {16, 1, 3, 3}, 1, 1, 1},     // the digits CNN's first conv (plain x)
    {{64, 16, 4, 4}, {32, 16, 3, 3}, 1, 1, 1},   // its second (blocked layouts)
    {{37, 16, 8, 8}, {32, 16, 3, 3}, 1, 1, 1},   // 3 chunks of 13 images, the last of 11
    {{9, 32, 12, 12}, {32, 32, 3, 3}, 2, 1, 1},  // one image per chunk, strided
    {{6, 32, 6, 6}, {32, 8, 3, 3}, 1, 0, 4},     // grouped
};

TEST(DnnlBackward, ConvGradientsIdenticalAcrossThreadCounts) {
  for (const ConvCase& c : kCases) {
    SCOPED_TRACE("x " + shape_str(c.x) + " w " + shape_str(c.w));
    const Shape gs = grad_shape(c);
    const CpuTensor x = filled(c.x, 1), w = filled(c.w, 2), g = filled(gs, 3);
    const std::vector<int64_t> stride{c.stride, c.stride}, pad{c.padding, c.padding}, dil{1, 1};
    const auto dx = at_every_thread_count([&] {
      return run_op(ir::Conv2dBackwardInput{{1}, {2}, c.x, stride, pad, dil, c.groups, {}}, {g, w},
                    c.x);
    });
    const auto dw = at_every_thread_count([&] {
      return run_op(ir::Conv2dBackwardWeight{{1}, {2}, c.w, stride, pad, dil, c.groups, {}}, {g, x},
                    c.w);
    });
    std::vector<double> want_dx, want_dw;
    reference(c, x.data<float>(), w.data<float>(), g.data<float>(), want_dx, want_dw);
    expect_near(dx, want_dx, 1e-4);
    expect_near(dw, want_dw, 1e-4);
  }
}

TEST(DnnlBackward, PoolGradientsIdenticalAcrossThreadCounts) {
  const Shape xs{64, 16, 8, 8}, gs{64, 16, 4, 4};
  const CpuTensor x = filled(xs, 4), g = filled(gs, 5);
  for (ir::PoolKind kind : {ir::PoolKind::kMax, ir::PoolKind::kAvg}) {
    at_every_thread_count([&] {
      return run_op(ir::Pool2dBackward{kind, {1}, {2}, {2, 2}, {2, 2}, {0, 0}, {}}, {g, x}, xs);
    });
  }
  const Shape as{64, 16, 3, 3};
  const CpuTensor ag = filled(as, 6);
  at_every_thread_count([&] {
    return run_op(ir::AdaptiveAvgPool2dBackward{{1}, {8, 8}, {}}, {ag}, xs);
  });
}

// Planes of (n + 1) x (n + 1) (the general kernels: 2x2 windows do not tile them) and their
// top-left n x n (the 2x2 paths, n even): the pooled values, and the gradient on the n x n part,
// must match bytewise. n / 2 odd leaves the vectorised f32 path a scalar tail.
template <class T>
void check_2x2_paths(int64_t n) {
  SCOPED_TRACE("n " + std::to_string(n));
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  const T specials[] = {nan, -inf, inf, T(0), -T(0), T(1), T(1), -T(2)};
  const int64_t planes = 6;
  const Shape big{2, 3, n + 1, n + 1}, small{2, 3, n, n}, out{2, 3, n / 2, n / 2};
  CpuTensor xb = alloc_tensor({big, sizeof(T) == 8 ? kF64 : kF32});
  CpuTensor xs = alloc_tensor({small, xb.dtype});
  CpuTensor g = alloc_tensor({out, xb.dtype});
  uint64_t s = 7;
  auto next = [&] { return (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int64_t i = 0; i < xb.numel(); ++i) {
    // Mostly a few small integers (ties), sometimes a special value.
    const uint64_t r = next();
    xb.data<T>()[i] = r % 4 == 0 ? specials[r / 4 % 8] : static_cast<T>(r / 4 % 3);
  }
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t y = 0; y < n; ++y)
      for (int64_t x = 0; x < n; ++x)
        xs.data<T>()[(p * n + y) * n + x] = xb.data<T>()[(p * (n + 1) + y) * (n + 1) + x];
  for (int64_t i = 0; i < g.numel(); ++i) {
    const uint64_t r = next();
    g.data<T>()[i] = r % 5 == 0 ? -T(0) : static_cast<T>(static_cast<double>(r % 1000) / 7.0 - 70);
  }
  // Bytes equal, or both NaN: a sum meeting two NaNs (inf + -inf makes one) keeps either one's
  // sign, as the compiler orders the operands of a vectorised add; every path is deterministic.
  auto same = [](const std::vector<T>& a, const std::vector<T>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0 && !(a[i] != a[i] && b[i] != b[i])) {
        ADD_FAILURE() << "element " << i << ": " << a[i] << " vs " << b[i];
        return false;
      }
    }
    return true;
  };
  for (ir::PoolKind kind : {ir::PoolKind::kMax, ir::PoolKind::kAvg}) {
    SCOPED_TRACE(kind == ir::PoolKind::kMax ? "max" : "avg");
    const ir::Pool2d fwd{kind, {1}, {2, 2}, {2, 2}, {0, 0}, {}};
    EXPECT_TRUE(same(run_op<ir::Pool2d, T>(fwd, {xb}, out), run_op<ir::Pool2d, T>(fwd, {xs}, out)));
    const ir::Pool2dBackward bwd{kind, {1}, {2}, {2, 2}, {2, 2}, {0, 0}, {}};
    const auto gb = run_op<ir::Pool2dBackward, T>(bwd, {g, xb}, big);
    const auto gs = run_op<ir::Pool2dBackward, T>(bwd, {g, xs}, small);
    ASSERT_EQ(gs.size(), static_cast<size_t>(numel(small)));
    std::vector<T> crop;
    for (int64_t p = 0; p < planes; ++p)
      for (int64_t y = 0; y < n; ++y)
        for (int64_t x = 0; x < n; ++x)
          crop.push_back(gb[static_cast<size_t>((p * (n + 1) + y) * (n + 1) + x)]);
    EXPECT_TRUE(same(crop, gs));
  }
}

TEST(Pool2x2, SameBytesAsTheGeneralKernels) {
  for (int64_t n : {2, 4, 6, 8, 14}) {
    check_2x2_paths<float>(n);
    check_2x2_paths<double>(n);
  }
}

#if DNNL_CPU_RUNTIME == DNNL_RUNTIME_OMP
// A small problem runs on one thread and puts OpenMP's per-thread count back afterwards: the
// torch backend, in the same process, reads that count (left at 1, it ran its conv on one
// thread on some threads and two on others, and devices gave different bytes).
TEST(DnnlThreads, SmallProblemsRunOnOneThreadAndPutTheCountBack) {
  const int before = get_num_threads();
  set_num_threads(2);
  dnnl_sync_threads();
  {
    const DnnlThreadsFor small(kDnnlSerialMacs - 1);
    EXPECT_EQ(small.threads(), 1);
    EXPECT_EQ(omp_get_max_threads(), 1);
  }
  EXPECT_EQ(omp_get_max_threads(), 2);
  {
    const DnnlThreadsFor large(kDnnlSerialMacs);
    EXPECT_EQ(large.threads(), 2);
    EXPECT_EQ(omp_get_max_threads(), 2);
  }
  // The digits CNN's second conv (4.7M multiply-adds), forward and both gradients.
  const Shape xs{64, 16, 4, 4}, ws{32, 16, 3, 3}, ys{64, 32, 4, 4};
  const CpuTensor x = filled(xs, 6), w = filled(ws, 7), g = filled(ys, 8);
  const std::vector<int64_t> one{1, 1};
  (void)run_op(ir::Conv2d{{1}, {2}, {}, one, one, one, 1, {}}, {x, w}, ys);
  EXPECT_EQ(omp_get_max_threads(), 2);
  (void)run_op(ir::Conv2dBackwardInput{{1}, {2}, xs, one, one, one, 1, {}}, {g, w}, xs);
  (void)run_op(ir::Conv2dBackwardWeight{{1}, {2}, ws, one, one, one, 1, {}}, {g, x}, ws);
  EXPECT_EQ(omp_get_max_threads(), 2);
  set_num_threads(before);
}
#endif

}  // namespace
}  // namespace tw::cpu
