// Regression tests for ir::Scalar (tests/regress: one test per bug, named after what broke).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

// 4678460: Scalar(double) set its integer view with a plain static_cast, undefined behaviour
// for NaN and out-of-range values (x86 gives INT64_MIN for all of them), and the decoder builds
// Scalars from whatever bytes a peer sends. The view now converts as Cast does: NaN to 0, out of
// range saturating. full() of an integral dtype takes that view, so the old code filled
// INT64_MIN where these expect INT64_MAX and 0.
TEST(Regress, ScalarOfNaNOrAHugeDoubleHadAnUndefinedIntegerView) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(full({2}, 1e300, kI64).to_vector<int64_t>(), (std::vector<int64_t>{kMax, kMax}));
  EXPECT_EQ(full({1}, -1e300, kI64).to_vector<int64_t>(), (std::vector<int64_t>{kMin}));
  EXPECT_EQ(full({1}, std::nan(""), kI64).to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_EQ(full({1}, -7.9, kI64).to_vector<int64_t>(), (std::vector<int64_t>{-7}));
}

}  // namespace
}  // namespace tw
