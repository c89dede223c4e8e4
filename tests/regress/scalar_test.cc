// Regression tests for ir::Scalar (tests/regress: one test per bug, named after what broke).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "ir/ops.h"

namespace tw {
namespace {

// 4678460: Scalar(double) set its integer view `i` with a plain static_cast, undefined behaviour
// for NaN and out-of-range values, and the op decoder builds Scalars from whatever bytes a peer
// sends. On x86-64 the old cast gives INT64_MIN for all three of 1e300, -1e300 and NaN (checked
// with a volatile double under g++ 12 -O2), so the first and third lines fail on it. The view now
// converts as Cast does: NaN to 0, out of range saturating, otherwise truncation toward zero.
TEST(Regress, ScalarOfNaNOrAHugeDoubleHadAnUndefinedIntegerView) {
  volatile double huge = 1e300, nan = std::nan(""), frac = -7.9;  // not folded at compile time
  EXPECT_EQ(ir::Scalar(huge).i, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ir::Scalar(-huge).i, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ir::Scalar(nan).i, 0);
  EXPECT_EQ(ir::Scalar(frac).i, -7);
  EXPECT_TRUE(ir::Scalar(huge).is_float);
}

}  // namespace
}  // namespace tw
