// Regression tests for attention bugs (tests/regress: one test per bug, named after what broke).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "regress/devices.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

bool all_nan(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isnan(x)) return false;
  return !v.empty();
}

// Issue 52: the CPU kernel's running max skipped a NaN score (std::max), and its final step
// turned a row whose sum was NaN into zeros: q [[1]], k [[nan], [.5]], v [[2], [3]] gave [[0]]
// where the formula (and the torch backend) gives NaN. NaN or +inf among the attended scores,
// or attended scores all -inf, now give NaN forward and backward; a row that attends no key
// (masked) still gives zeros, as docs/ops.md says.
TEST(Regress, AttentionTurnedNanScoresIntoZeros) {
  testing::RegressDevices devs;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const Device& d : devs.all) {
    SCOPED_TRACE(d.str());
    Tensor q = from_vector<float>({1}, {1, 1}, d);
    Tensor v = from_vector<float>({2, 3}, {2, 1}, d);
    for (float bad : {nan, inf, -inf}) {
      SCOPED_TRACE(bad);
      // One bad key; and every key bad (a whole tile skipped by the kernel before).
      for (std::vector<float> keys :
           {std::vector<float>{bad, 0.5f}, std::vector<float>{bad, bad}}) {
        Tensor k = from_vector<float>(keys, {2, 1}, d);
        Tensor out = scaled_dot_product_attention(q, k, v);
        const bool finite_softmax = bad == -inf && keys[1] == 0.5f;  // exp(-inf) = 0: fine
        if (finite_softmax) {
          EXPECT_EQ(out.to_vector<float>(), (std::vector<float>{3}));
        } else {
          EXPECT_TRUE(all_nan(out.to_vector<float>())) << out.to_vector<float>()[0];
        }
      }
    }
    // The gradient sees the same NaN.
    Tensor qg = from_vector<float>({1}, {1, 1}, d);
    qg.set_requires_grad();
    Tensor vg = from_vector<float>({2, 3}, {2, 1}, d);
    vg.set_requires_grad();
    scaled_dot_product_attention(qg, from_vector<float>({nan, 0.5f}, {2, 1}, d), vg)
        .sum()
        .backward();
    EXPECT_TRUE(all_nan(qg.grad().to_vector<float>()));
    EXPECT_TRUE(all_nan(vg.grad().to_vector<float>()));
    // A NaN score that is masked out does not count, and a row attending nothing gives zeros.
    Tensor k = from_vector<float>({nan, 0.5f}, {2, 1}, d);
    Tensor mask = from_vector<uint8_t>({0, 1}, {1, 2}, d).to(kBool);
    EXPECT_EQ(scaled_dot_product_attention(q, k, v, mask).to_vector<float>(),
              (std::vector<float>{3}));
    Tensor none = zeros({1, 2}, kBool, d);
    EXPECT_EQ(scaled_dot_product_attention(q, k, v, none).to_vector<float>(),
              (std::vector<float>{0}));
  }
}

}  // namespace
}  // namespace tw
