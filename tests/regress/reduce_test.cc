// Regression tests for reduction bugs (tests/regress: one test per bug, named after what
// broke).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

// 381925b: the mean of an integral tensor summed in wrapping int64, so two INT64_MAX values
// summed to -2 and their mean came out -1. docs/ops.md says integral means are computed in
// double (result f32); now the sum is accumulated in double.
TEST(Regress, IntegralMeanWrappedIn64Bits) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  Tensor x = tensor<int64_t>({kMax, kMax});
  Tensor m = x.mean();
  EXPECT_EQ(m.dtype(), kF32);
  EXPECT_EQ(m.item<float>(), static_cast<float>(static_cast<double>(kMax)));
}

// 381925b: sum and mean over an explicit empty dim list returned the input unchanged; as in
// PyTorch (and docs/ops.md), an empty list reduces every dim.
TEST(Regress, SumAndMeanOverAnEmptyDimListReducedNothing) {
  Tensor x = arange(0, 6, 1, kF32).reshape({2, 3});
  Tensor s = x.sum(std::vector<int64_t>{});
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item<float>(), 15.0f);
  Tensor m = x.mean(std::vector<int64_t>{});
  EXPECT_EQ(m.shape(), Shape{});
  EXPECT_EQ(m.item<float>(), 2.5f);
  Tensor kept = x.sum(std::vector<int64_t>{}, /*keepdim=*/true);
  EXPECT_EQ(kept.shape(), (Shape{1, 1}));
  EXPECT_EQ(kept.item<float>(), 15.0f);
}

}  // namespace
}  // namespace tw
