// Regression tests for pooling bugs (tests/regress: one test per bug, named after what broke).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

// c67400e: a window far larger than the input (valid: padding at most half the kernel) looped
// over every one of its 2^80 taps, so one such op from a client hung a server thread; the
// average's divisor was kh * kw in int64, which overflowed. The kernels now visit only the taps
// that land in the input and count in floating point. With the old loop this test never
// finishes (ctest's timeout fails it; reverting the loop bounds, it ran past 30 s); with the old
// count kh * kw = 2^80 wraps to 0 in int64 and the average is 120 / 0 = inf, not 120 / 2^80.
TEST(Regress, PoolingWithAHugeWindowHungAndItsAverageOverflowed) {
  const int64_t k = int64_t{1} << 40;
  Tensor x = arange(0, 16, 1, kF64).reshape({1, 1, 4, 4});
  Tensor m = max_pool2d(x, {k, k}, {k, k}, {k / 2, k / 2});
  ASSERT_EQ(m.shape(), (Shape{1, 1, 1, 1}));
  EXPECT_EQ(m.item<double>(), 15.0);
  const double count = std::ldexp(1.0, 80);
  Tensor xg = x.detach();
  xg.set_requires_grad();
  Tensor a = avg_pool2d(xg, {k, k}, {k, k}, {k / 2, k / 2});
  EXPECT_EQ(a.item<double>(), 120.0 / count);
  a.sum().backward();
  for (double g : xg.grad().to_vector<double>()) EXPECT_EQ(g, 1.0 / count);
  Tensor xm = x.detach();
  xm.set_requires_grad();
  max_pool2d(xm, {k, k}, {k, k}, {k / 2, k / 2}).sum().backward();
  std::vector<double> gm = xm.grad().to_vector<double>();
  EXPECT_EQ(gm[15], 1.0);
  EXPECT_EQ(std::accumulate(gm.begin(), gm.end(), 0.0), 1.0);
}

}  // namespace
}  // namespace tw
