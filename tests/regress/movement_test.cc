// Regression tests for movement-op bugs (tests/regress: one test per bug, named after what
// broke).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

// bc3f168: the CPU slice view computed its length as (end - start + step - 1) / step, which
// overflows int64 for a step near INT64_MAX (undefined behaviour; in practice a negative
// length, so the view's shape disagreed with inference's [1] and the read failed or returned
// garbage). It now uses ir::normalize_slice, the function inference uses.
TEST(Regress, SliceWithAHugeStepOverflowedItsLength) {
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  Tensor x = arange(0, 10, 1, kI64);
  Tensor first = x.slice(0, 0, 10, kHuge);
  ASSERT_EQ(first.shape(), (Shape{1}));
  EXPECT_EQ(first.to_vector<int64_t>(), (std::vector<int64_t>{0}));
  Tensor from3 = x.slice(0, 3, 10, kHuge - 1);
  ASSERT_EQ(from3.shape(), (Shape{1}));
  EXPECT_EQ(from3.to_vector<int64_t>(), (std::vector<int64_t>{3}));
}

// 381925b: flip of a 0-d tensor (dim 0 and -1 are valid for it, as in PyTorch) indexed
// shape[0] and strides[0] of a rank-0 tensor, reading past the end of empty vectors: a wrong
// offset (garbage value) or a crash. It now returns the value unchanged.
TEST(Regress, FlipOfAZeroDimTensorReadOutOfBounds) {
  Tensor s = full({}, 3.5, kF32);
  Tensor f = s.flip({0});
  EXPECT_EQ(f.shape(), Shape{});
  EXPECT_EQ(f.item<float>(), 3.5f);
  EXPECT_EQ(s.flip({-1}).item<float>(), 3.5f);
}

}  // namespace
}  // namespace tw
