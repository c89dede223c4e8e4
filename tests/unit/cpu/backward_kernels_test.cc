// Focused tests of autograd's backward kernels (conv_backward.cc, pool_backward.cc), called
// directly through KernelContext: values against naive double loops over many geometries, the
// tie/NaN/-inf rules of max pooling, and bytes identical for 1, 2 and 3 intra-op threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "core/thread_pool.h"
#include "ir/infer.h"
#include "support/kernel_fixture.h"

namespace tw::cpu {
namespace {

using namespace kernel_test;

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
};

const std::vector<ConvCase> kConvCases = {
    {{2, 3, 5, 5}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
    {{2, 3, 7, 6}, {4, 3, 3, 2}, {2, 1}, {1, 1}, {1, 1}, 1},
    {{1, 2, 9, 9}, {3, 2, 3, 3}, {1, 2}, {2, 0}, {2, 3}, 1},
    {{2, 4, 6, 5}, {6, 2, 2, 3}, {1, 1}, {1, 1}, {1, 1}, 2},
    {{3, 6, 8, 8}, {6, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 6},      // depthwise
    {{64, 16, 4, 4}, {32, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},  // the digits CNN's second conv
    {{1, 1, 1, 1}, {2, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
    {{2, 2, 3, 3}, {2, 2, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},  // kernel larger than the input
};

// Naive gradients in double: dx and dw of sum(grad * conv2d(x, w)).
void naive_conv_grads(const ConvCase& c, const std::vector<double>& x, const std::vector<double>& w,
                      const std::vector<double>& g, const Shape& gs, std::vector<double>& dx,
                      std::vector<double>& dw) {
  const int64_t n = c.x[0], ch = c.x[1], h = c.x[2], wd = c.x[3];
  const int64_t o = c.w[0], cg = c.w[1], kh = c.w[2], kw = c.w[3];
  const int64_t og = o / c.groups, ho = gs[2], wo = gs[3];
  dx.assign(x.size(), 0);
  dw.assign(w.size(), 0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t oy = 0; oy < ho; ++oy)
        for (int64_t ox = 0; ox < wo; ++ox) {
          const double gv = g[((b * o + oc) * ho + oy) * wo + ox];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < kh; ++ky)
              for (int64_t kx = 0; kx < kw; ++kx) {
                const int64_t iy = oy * c.stride[0] - c.padding[0] + ky * c.dilation[0];
                const int64_t ix = ox * c.stride[1] - c.padding[1] + kx * c.dilation[1];
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t chn = (oc / og) * cg + ci;
                const size_t xi = static_cast<size_t>(((b * ch + chn) * h + iy) * wd + ix);
                const size_t wi = static_cast<size_t>(((oc * cg + ci) * kh + ky) * kw + kx);
                dx[xi] += gv * w[wi];
                dw[wi] += gv * x[xi];
              }
        }
}

template <class T>
void check_conv(const ConvCase& c, double tol) {
  SCOPED_TRACE("x " + shape_str(c.x) + " w " + shape_str(c.w));
  Shape gs{c.x[0], c.w[0], 0, 0};
  for (int i = 0; i < 2; ++i) {
    gs[2 + i] =
        ir::window_out_size(c.x[2 + i], c.w[2 + i], c.stride[i], c.padding[i], c.dilation[i]);
  }
  const auto x = random_values<T>(numel(c.x), 1), w = random_values<T>(numel(c.w), 2),
             g = random_values<T>(numel(gs), 3);
  const CpuTensor xt = make(c.x, x), wt = make(c.w, w), gt = make(gs, g);
  std::vector<double> dx, dw;
  naive_conv_grads(c, {x.begin(), x.end()}, {w.begin(), w.end()}, {g.begin(), g.end()}, gs, dx, dw);

  const CpuTensor gx = thread_independent([&] {
    return run_inferred(
        ir::Conv2dBackwardInput{{}, {}, c.x, c.stride, c.padding, c.dilation, c.groups, {}},
        {gt, wt});
  });
  const CpuTensor gw = thread_independent([&] {
    return run_inferred(
        ir::Conv2dBackwardWeight{{}, {}, c.w, c.stride, c.padding, c.dilation, c.groups, {}},
        {gt, xt});
  });
  const auto gxv = values<T>(gx), gwv = values<T>(gw);
  ASSERT_EQ(gxv.size(), dx.size());
  ASSERT_EQ(gwv.size(), dw.size());
  for (size_t i = 0; i < dx.size(); ++i)
    ASSERT_NEAR(gxv[i], dx[i], tol * (1 + std::abs(dx[i]))) << "dx " << i;
  for (size_t i = 0; i < dw.size(); ++i)
    ASSERT_NEAR(gwv[i], dw[i], tol * (1 + std::abs(dw[i]))) << "dw " << i;
}

TEST(ConvBackward, MatchesNaiveF64) {
  for (const ConvCase& c : kConvCases) check_conv<double>(c, 1e-12);
}

TEST(ConvBackward, MatchesNaiveF32) {
  for (const ConvCase& c : kConvCases) check_conv<float>(c, 1e-4);
}

TEST(ConvBackward, StridedInputsAreRead) {
  // A permuted (non-contiguous) grad gives the same result as its contiguous copy.
  const ConvCase c = kConvCases[1];
  const Shape gs{2, 4, 4, 7};
  const auto g = random_values<float>(numel(gs), 5);
  CpuTensor gt = make(gs, g);
  CpuTensor transposed = alloc_tensor({{2, 4, 7, 4}, kF32});  // g's values laid out [n, o, wo, ho]
  for (int64_t i = 0; i < 8; ++i)
    for (int64_t y = 0; y < 4; ++y)
      for (int64_t x = 0; x < 7; ++x)
        transposed.data<float>()[(i * 7 + x) * 4 + y] = g[static_cast<size_t>((i * 4 + y) * 7 + x)];
  CpuTensor view = transposed;
  view.shape = gs;
  view.strides = {4 * 28, 28, 1, 4};
  const CpuTensor wt = make(c.w, random_values<float>(numel(c.w), 6));
  auto a = values<float>(run_inferred(
      ir::Conv2dBackwardInput{{}, {}, c.x, c.stride, c.padding, c.dilation, 1, {}}, {gt, wt}));
  auto b = values<float>(run_inferred(
      ir::Conv2dBackwardInput{{}, {}, c.x, c.stride, c.padding, c.dilation, 1, {}}, {view, wt}));
  EXPECT_EQ(a, b);
}

// ------------------------------------------------------------------------------------ pooling

struct PoolCase {
  Shape x;
  std::vector<int64_t> kernel, stride, padding;
};

const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 4, 4}, {2, 2}, {2, 2}, {0, 0}},
    {{1, 2, 5, 7}, {3, 3}, {1, 2}, {1, 1}},
    {{2, 1, 6, 5}, {2, 3}, {2, 1}, {1, 1}},
    {{64, 16, 8, 8}, {2, 2}, {2, 2}, {0, 0}},
};

Shape pool_out(const PoolCase& c) {
  Shape s{c.x[0], c.x[1], 0, 0};
  for (int i = 0; i < 2; ++i)
    s[2 + i] = ir::window_out_size(c.x[2 + i], c.kernel[i], c.stride[i], c.padding[i], 1);
  return s;
}

template <class T>
void check_pool(const PoolCase& c, ir::PoolKind kind) {
  SCOPED_TRACE("x " + shape_str(c.x) + (kind == ir::PoolKind::kMax ? " max" : " avg"));
  const Shape gs = pool_out(c);
  const auto x = random_values<T>(numel(c.x), 11), g = random_values<T>(numel(gs), 12);
  const CpuTensor xt = make(c.x, x), gt = make(gs, g);
  const CpuTensor gx = thread_independent([&] {
    return run_inferred(ir::Pool2dBackward{kind, {}, {}, c.kernel, c.stride, c.padding, {}},
                        {gt, xt});
  });
  std::vector<double> want(x.size(), 0);
  const int64_t h = c.x[2], w = c.x[3];
  for (int64_t p = 0; p < c.x[0] * c.x[1]; ++p)
    for (int64_t oy = 0; oy < gs[2]; ++oy)
      for (int64_t ox = 0; ox < gs[3]; ++ox) {
        const double gv = g[static_cast<size_t>((p * gs[2] + oy) * gs[3] + ox)];
        int64_t best = -1;
        for (int64_t ky = 0; ky < c.kernel[0]; ++ky)
          for (int64_t kx = 0; kx < c.kernel[1]; ++kx) {
            const int64_t iy = oy * c.stride[0] - c.padding[0] + ky,
                          ix = ox * c.stride[1] - c.padding[1] + kx;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const int64_t i = (p * h + iy) * w + ix;
            if (kind == ir::PoolKind::kAvg) {
              want[static_cast<size_t>(i)] += gv / static_cast<double>(c.kernel[0] * c.kernel[1]);
            } else if (best < 0 || x[static_cast<size_t>(i)] > x[static_cast<size_t>(best)]) {
              best = i;
            }
          }
        if (kind == ir::PoolKind::kMax) want[static_cast<size_t>(best)] += gv;
      }
  const auto got = values<T>(gx);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << i;
}

TEST(PoolBackward, MatchesNaive) {
  for (const PoolCase& c : kPoolCases) {
    check_pool<float>(c, ir::PoolKind::kMax);
    check_pool<float>(c, ir::PoolKind::kAvg);
    check_pool<double>(c, ir::PoolKind::kMax);
    check_pool<double>(c, ir::PoolKind::kAvg);
  }
}

TEST(PoolBackward, MaxTiesNaNAndInfinity) {
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  // One 2x2 window per plane: ties go to the first, a NaN wins (the last NaN seen), a window of
  // only -inf sends the gradient to its first tap.
  const CpuTensor x =
      make<float>({3, 1, 2, 2}, {5, 5, 1, 5, 1, nan, 9, nan, -inf, -inf, -inf, -inf});
  const CpuTensor g = make<float>({3, 1, 1, 1}, {1, 2, 3});
  const auto got = values<float>(run_inferred(
      ir::Pool2dBackward{ir::PoolKind::kMax, {}, {}, {2, 2}, {2, 2}, {0, 0}, {}}, {g, x}));
  EXPECT_EQ(got, (std::vector<float>{1, 0, 0, 0, 0, 0, 0, 2, 3, 0, 0, 0}));
}

TEST(AdaptiveAvgPoolBackward, MatchesNaive) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {{{2, 3, 5, 7}, {3, 2}},
                                                                     {{1, 2, 2, 3}, {3, 4}},
                                                                     {{1, 1, 4, 4}, {1, 1}},
                                                                     {{2, 2, 6, 6}, {3, 3}}};
  for (const auto& [xs, size] : cases) {
    SCOPED_TRACE(shape_str(xs) + " -> " + shape_str(size));
    const Shape gs{xs[0], xs[1], size[0], size[1]};
    const auto g = random_values<double>(numel(gs), 21);
    const CpuTensor gx = thread_independent([&] {
      return run_inferred(ir::AdaptiveAvgPool2dBackward{{}, {xs[2], xs[3]}, {}}, {make(gs, g)});
    });
    std::vector<double> want(static_cast<size_t>(numel(xs)), 0);
    const int64_t h = xs[2], w = xs[3];
    for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
      for (int64_t oy = 0; oy < size[0]; ++oy)
        for (int64_t ox = 0; ox < size[1]; ++ox) {
          const int64_t y0 = oy * h / size[0], y1 = ((oy + 1) * h + size[0] - 1) / size[0];
          const int64_t x0 = ox * w / size[1], x1 = ((ox + 1) * w + size[1] - 1) / size[1];
          const double share = g[static_cast<size_t>((p * size[0] + oy) * size[1] + ox)] /
                               static_cast<double>((y1 - y0) * (x1 - x0));
          for (int64_t iy = y0; iy < y1; ++iy)
            for (int64_t ix = x0; ix < x1; ++ix)
              want[static_cast<size_t>((p * h + iy) * w + ix)] += share;
        }
    const auto got = values<double>(gx);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << i;
  }
}

}  // namespace
}  // namespace tw::cpu
