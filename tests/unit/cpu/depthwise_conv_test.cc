// conv_depthwise.h's kernels through the Conv2d ops: forward, d x and d w against a double
// reference, on shapes that take each block shape, the strided and dilated windows, the gathered
// and the scattered d x, and rows that end in a partial block; the same bytes at 1, 2 and 4
// intra-op threads; and an infinity in the input that only some taps reach leaves the others'
// weight gradients finite (the padding lanes of a block add no terms).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/conv_depthwise.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"
#include "unit/cpu/kernel_test_util.h"

namespace tw::cpu {
namespace {

using test::at_every_thread_count;
using test::filled;
using test::run_op;

struct Case {
  int64_t n, c, h, w, kh, kw;
  std::vector<int64_t> stride, padding, dilation;
};

DepthwiseConv geometry(const Case& k) {
  const int64_t ho = (k.h + 2 * k.padding[0] - k.dilation[0] * (k.kh - 1) - 1) / k.stride[0] + 1;
  const int64_t wo = (k.w + 2 * k.padding[1] - k.dilation[1] * (k.kw - 1) - 1) / k.stride[1] + 1;
  return {k.n, k.c,         k.h,         k.w,          k.kh,         k.kw,          ho,
          wo,  k.stride[0], k.stride[1], k.padding[0], k.padding[1], k.dilation[0], k.dilation[1]};
}

// y, d x and d w of sum(grad * conv2d(x, w, bias)) in double, over the taps inside the image.
struct Reference {
  std::vector<double> y, dx, dw;
};
Reference reference(const DepthwiseConv& g, const float* x, const float* w, const float* bias,
                    const float* grad) {
  Reference r;
  r.y.assign(static_cast<size_t>(g.n * g.c * g.ho * g.wo), 0);
  r.dx.assign(static_cast<size_t>(g.n * g.c * g.h * g.w), 0);
  r.dw.assign(static_cast<size_t>(g.c * g.kh * g.kw), 0);
  for (int64_t b = 0; b < g.n; ++b)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t oy = 0; oy < g.ho; ++oy)
        for (int64_t ox = 0; ox < g.wo; ++ox) {
          const int64_t yi = ((b * g.c + c) * g.ho + oy) * g.wo + ox;
          double acc = bias[c];
          for (int64_t ky = 0; ky < g.kh; ++ky)
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
              if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
              const int64_t xi = ((b * g.c + c) * g.h + iy) * g.w + ix;
              const int64_t wi = (c * g.kh + ky) * g.kw + kx;
              acc += double{x[xi]} * w[wi];
              r.dx[static_cast<size_t>(xi)] += double{grad[yi]} * w[wi];
              r.dw[static_cast<size_t>(wi)] += double{grad[yi]} * x[xi];
            }
          r.y[static_cast<size_t>(yi)] = acc;
        }
  return r;
}

void expect_near(const std::vector<float>& got, const std::vector<double>& want, double tol,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
}

const std::vector<Case> kCases = {
    {2, 144, 56, 56, 3, 3, {1, 1}, {1, 1}, {1, 1}},  // make bench's row (16-lane blocks)
    {2, 24, 14, 14, 3, 3, {1, 1}, {1, 1}, {1, 1}},   // a row of 14 in a 16-lane block
    {3, 8, 7, 7, 3, 3, {1, 1}, {1, 1}, {1, 1}},      // 8 x 8 blocks
    {2, 16, 17, 19, 5, 5, {2, 2}, {2, 2}, {1, 1}},   // strided: scattered d x
    {2, 8, 12, 13, 3, 3, {1, 1}, {2, 2}, {2, 2}},    // dilated
    {1, 4, 6, 6, 3, 3, {1, 1}, {0, 0}, {1, 1}},      // no padding
    {2, 8, 5, 40, 3, 5, {1, 2}, {1, 2}, {1, 1}},     // uneven kernel, stride and padding
    {2, 4, 9, 9, 3, 3, {1, 1}, {3, 3}, {1, 1}},      // padding past the kernel: scattered d x
};

TEST(DepthwiseConv, MatchesReferenceAndThreadCounts) {
  for (const Case& k : kCases) {
    const DepthwiseConv g = geometry(k);
    SCOPED_TRACE("x [" + std::to_string(k.n) + "," + std::to_string(k.c) + "," +
                 std::to_string(k.h) + "," + std::to_string(k.w) + "] k " + std::to_string(k.kh) +
                 "x" + std::to_string(k.kw) + " stride " + std::to_string(k.stride[1]));
    ASSERT_TRUE(depthwise_fits(g, k.c, 1, k.c));
    const Shape xs{k.n, k.c, k.h, k.w}, ws{k.c, 1, k.kh, k.kw}, ys{k.n, k.c, g.ho, g.wo};
    const CpuTensor x = filled(xs, 1), w = filled(ws, 2), b = filled({k.c}, 3), gr = filled(ys, 4);
    const auto y = at_every_thread_count([&] {
      return run_op(ir::Conv2d{{1}, {2}, {3}, k.stride, k.padding, k.dilation, k.c, {}}, {x, w, b},
                    ys);
    });
    const auto dx = at_every_thread_count([&] {
      return run_op(ir::Conv2dBackwardInput{{1}, {2}, xs, k.stride, k.padding, k.dilation, k.c, {}},
                    {gr, w}, xs);
    });
    const auto dw = at_every_thread_count([&] {
      return run_op(
          ir::Conv2dBackwardWeight{{1}, {2}, ws, k.stride, k.padding, k.dilation, k.c, {}}, {gr, x},
          ws);
    });
    const Reference want =
        reference(g, x.data<float>(), w.data<float>(), b.data<float>(), gr.data<float>());
    expect_near(y, want.y, 1e-5, "y");
    expect_near(dx, want.dx, 1e-5, "dx");
    expect_near(dw, want.dw, 1e-4, "dw");
  }
}

TEST(DepthwiseConv, InfinityReachesOnlyItsTaps) {
  // 12 columns, no padding: 10 outputs per row (a 16-lane block with 6 padding lanes). Column
  // 11 is reached only by tap kx = 2 (at ox = 9); taps kx = 0 and 1 must stay finite.
  const Case k{1, 2, 4, 12, 3, 3, {1, 1}, {0, 0}, {1, 1}};
  const DepthwiseConv g = geometry(k);
  const Shape xs{k.n, k.c, k.h, k.w}, ws{k.c, 1, k.kh, k.kw}, ys{k.n, k.c, g.ho, g.wo};
  CpuTensor x = filled(xs, 5);
  const CpuTensor gr = filled(ys, 6);
  for (int64_t plane = 0; plane < k.c; ++plane)
    x.data<float>()[plane * k.h * k.w + k.w - 1] = std::numeric_limits<float>::infinity();
  const auto dw =
      run_op(ir::Conv2dBackwardWeight{{1}, {2}, ws, k.stride, k.padding, k.dilation, k.c, {}},
             {gr, x}, ws);
  ASSERT_EQ(dw.size(), static_cast<size_t>(k.c * 9));
  for (int64_t c = 0; c < k.c; ++c)
    for (int64_t ky = 0; ky < 3; ++ky)
      for (int64_t kx = 0; kx < 3; ++kx) {
        const float v = dw[static_cast<size_t>((c * 3 + ky) * 3 + kx)];
        if (kx < 2) {
          EXPECT_TRUE(std::isfinite(v)) << "c " << c << " ky " << ky << " kx " << kx;
        } else if (ky == 0) {  // row 0 of the image is reached by ky = 0 only
          EXPECT_FALSE(std::isfinite(v)) << "c " << c << " kx " << kx;
        }
      }
}

}  // namespace
}  // namespace tw::cpu
