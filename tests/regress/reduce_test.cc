// Regression tests for reduction bugs (tests/regress: one test per bug, named after what
// broke).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "regress/devices.h"
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

// Issue 52: a reduction of a 0-d tensor over dim 0 (accepted, as PyTorch does) crashed autograd:
// the rule normalised the dims against rank 0 and read x.shape()[0] of an empty shape (SIGSEGV
// in Rules::operator()(ir::Reduce)). A 0-d input now reduces no dim and passes the gradient on.
TEST(Regress, ReduceOfAZeroDimTensorOverDim0CrashedAutograd) {
  testing::RegressDevices devs;
  for (const Device& d : devs.all) {
    SCOPED_TRACE(d.str());
    for (int64_t dim : {0, -1}) {
      Tensor x = full({}, 3.0, kF32, d);
      x.set_requires_grad();
      Tensor m = x.mean(dim);
      EXPECT_EQ(m.shape(), Shape{});
      EXPECT_EQ(m.item<float>(), 3.0f);
      Tensor kept = x.sum(dim, /*keepdim=*/true);  // a 0-d input stays 0-d
      EXPECT_EQ(kept.shape(), Shape{});
      (m + kept + x.prod(dim) + x.max(dim) + x.min(dim)).backward();
      EXPECT_EQ(x.grad().shape(), Shape{});
      // mean 1, sum 1, prod 1 (the derivative of x itself), max 1, min 1.
      EXPECT_EQ(x.grad().item<float>(), 5.0f);
      EXPECT_EQ(x.argmax(dim).item<int64_t>(), 0);
    }
  }
}

// Issue 52: keepdim was dropped when no dim was given (Python's dim=None): zeros(2, 3).argmax(
// None, True) had shape () where docs/ops.md says every dim of x as size 1. The API now has a
// std::optional dim (the binding passes None as std::nullopt) for every reduce kind.
TEST(Regress, KeepdimWithoutADimWasIgnored) {
  testing::RegressDevices devs;
  for (const Device& d : devs.all) {
    SCOPED_TRACE(d.str());
    Tensor x = arange(0, 6, 1, kF32, d).reshape({2, 3});
    const Shape kept{1, 1};
    EXPECT_EQ(x.sum(std::nullopt, true).shape(), kept);
    EXPECT_EQ(x.mean(std::nullopt, true).shape(), kept);
    EXPECT_EQ(x.prod(std::nullopt, true).shape(), kept);
    EXPECT_EQ(x.max(std::nullopt, true).shape(), kept);
    EXPECT_EQ(x.min(std::nullopt, true).shape(), kept);
    EXPECT_EQ(x.argmax(std::nullopt, true).shape(), kept);
    EXPECT_EQ(x.argmin(std::nullopt, true).shape(), kept);
    EXPECT_EQ(x.sum(std::nullopt, true).item<float>(), 15.0f);
    EXPECT_EQ(x.max(std::nullopt, true).item<float>(), 5.0f);
    EXPECT_EQ(x.argmax(std::nullopt, true).item<int64_t>(), 5);
    EXPECT_EQ(x.argmin(std::nullopt, false).shape(), Shape{});
    // Gradients flow through the kept dims.
    Tensor p = x + 1.0;
    Tensor leaf = p.detach();
    leaf.set_requires_grad();
    leaf.max(std::nullopt, true).sum().backward();
    EXPECT_EQ(leaf.grad().to_vector<float>(), (std::vector<float>{0, 0, 0, 0, 0, 1}));
  }
}

// Issue 52: prod's gradient was (g * prod) / x, NaN at a zero element: [0, 2, 3] gave
// [nan, 0, 0] where torch gives [6, 0, 0]. With one zero in a slice that element gets the
// product of the others and the rest 0; with two or more, all get 0.
TEST(Regress, ProdGradientWasNanAtAZero) {
  testing::RegressDevices devs;
  for (const Device& d : devs.all) {
    SCOPED_TRACE(d.str());
    auto grad_of = [&](std::vector<float> v, const Shape& shape, std::optional<int64_t> dim) {
      Tensor x = from_vector<float>(v, shape, d);
      x.set_requires_grad();
      (dim ? x.prod(*dim) : x.prod()).sum().backward();
      return x.grad().to_vector<float>();
    };
    EXPECT_EQ(grad_of({0, 2, 3}, {3}, std::nullopt), (std::vector<float>{6, 0, 0}));
    EXPECT_EQ(grad_of({0, 2, 0}, {3}, std::nullopt), (std::vector<float>{0, 0, 0}));
    EXPECT_EQ(grad_of({4, 2, 3}, {3}, std::nullopt), (std::vector<float>{6, 12, 8}));
    // Per row: no zero, one zero, two zeros.
    EXPECT_EQ(grad_of({1, 2, 3, 0, 5, 7, 0, 0, 2}, {3, 3}, 1),
              (std::vector<float>{6, 3, 2, 35, 0, 0, 0, 0, 0}));
    // Along dim 0 (columns), and a 0-d one.
    EXPECT_EQ(grad_of({0, 2, 3, 5}, {2, 2}, 0), (std::vector<float>{3, 5, 0, 2}));
    EXPECT_EQ(grad_of({0}, {}, std::nullopt), (std::vector<float>{1}));
  }
}

// Issue 52: max/min's gradient was hit * (g / count), so a NaN or inf upstream gradient reached
// the elements not selected (0 * nan): min of [1, 2, -3] then sqrt gave [nan, nan, nan] where
// torch gives [0, 0, nan]. Elements not selected now get exactly 0.
TEST(Regress, MaxMinGradientSpreadANanUpstreamGradient) {
  testing::RegressDevices devs;
  for (const Device& d : devs.all) {
    SCOPED_TRACE(d.str());
    Tensor x = tensor<float>({1, 2, -3}, d);
    x.set_requires_grad();
    x.min().sqrt().backward();
    const std::vector<float> g = x.grad().to_vector<float>();
    EXPECT_EQ(g[0], 0.0f);
    EXPECT_EQ(g[1], 0.0f);
    EXPECT_TRUE(std::isnan(g[2]));
    // Along a dim, with a tie (split evenly) and an infinite upstream gradient.
    Tensor y = from_vector<float>({5, 5, 1, 0, 2, 2}, {2, 3}, d);
    y.set_requires_grad();
    (y.max(1) * std::numeric_limits<double>::infinity()).sum().backward();
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{inf, inf, 0, 0, inf, inf}));
    // A NaN maximum takes the whole gradient (the NaNs are the selected elements).
    Tensor z = tensor<float>({1, std::nanf(""), 3}, d);
    z.set_requires_grad();
    z.max().backward();
    EXPECT_EQ(z.grad().to_vector<float>(), (std::vector<float>{0, 1, 0}));
  }
}

}  // namespace
}  // namespace tw
