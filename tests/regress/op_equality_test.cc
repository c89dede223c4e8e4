// Regression test for ir::Op equality (tests/regress: one test per bug, named after what broke).
#include <gtest/gtest.h>

#include <cmath>

#include "ir/ops.h"

namespace tw {
namespace {

// Found by the op fuzzer (tests/fuzz/regress/op/nan_double_attribute): operator== compared the
// fields' tuples with a plain ==, so an op whose double attribute is NaN (RandUniform low/high,
// RandNormal mean/std, LayerNorm eps: any bytes a peer sends decode) was unequal to itself. On
// the old code the first expectation fails. Doubles now compare by their bits.
TEST(Regress, OpWithANaNAttributeWasUnequalToItself) {
  ir::LayerNorm ln;
  ln.x = {1};
  ln.out = {2};
  ln.eps = std::nan("");
  const ir::Op op = ln;
  EXPECT_TRUE(op == op);
  EXPECT_EQ(ir::op_hash(op), ir::op_hash(ir::Op(ln)));
  ir::LayerNorm other = ln;
  other.eps = 1e-5;
  EXPECT_FALSE(op == ir::Op(other));
  other.eps = -std::nan("");  // another NaN's bits: a different attribute
  EXPECT_FALSE(op == ir::Op(other));
}

}  // namespace
}  // namespace tw
