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

// Issue 52 §4 (found by the differential fuzzer): the backward's dS = P (dP - rowsum(P dP))
// gave 0 x NaN = NaN for keys a query does not attend when that query's upstream gradient was
// NaN, so the NaN reached their key gradients: q = k = [[1], [2]], v = [[-1], [2]], causal,
// sqrt(sdpa(q, k, v)).sum() gave k.grad [nan, nan], where PyTorch's masked_fill composition
// gives [nan, 0.2458] (query 0 attends key 0 only, and its output -1 has a NaN sqrt gradient).
TEST(Regress, AttentionBackwardSpreadNanToKeysNotAttended) {
  testing::RegressDevices devs;
  for (const Device& d : devs.all) {
    SCOPED_TRACE(d.str());
    for (bool causal : {true, false}) {
      SCOPED_TRACE(causal ? "causal" : "mask");
      Tensor q = from_vector<float>({1, 2}, {2, 1}, d);
      Tensor k = from_vector<float>({1, 2}, {2, 1}, d);
      k.set_requires_grad();
      q.set_requires_grad();
      Tensor v = from_vector<float>({-1, 2}, {2, 1}, d);
      Tensor mask;  // the causal pattern as an explicit mask
      if (!causal) mask = from_vector<uint8_t>({1, 0, 1, 1}, {2, 2}, d).to(kBool);
      Tensor out = causal ? scaled_dot_product_attention(q, k, v, Tensor(), true)
                          : scaled_dot_product_attention(q, k, v, mask);
      out.sqrt().sum().backward();
      const std::vector<float> dk = k.grad().to_vector<float>();
      ASSERT_EQ(dk.size(), 2u);
      EXPECT_TRUE(std::isnan(dk[0]));
      // Row 1 alone: p = softmax([2, 4]), out_1 = p . v, g = 1 / (2 sqrt(out_1));
      // dk_1 = q_1 dS_11 = 2 p_1 (1 - p_1) (v_1 - v_0) g.
      const double p1 = 1 / (1 + std::exp(-2.0)), o1 = -(1 - p1) + 2 * p1;
      const double want = 2 * p1 * (1 - p1) * 3 * (0.5 / std::sqrt(o1));
      EXPECT_NEAR(dk[1], want, 1e-5) << "key 1 is attended only by query 1";
      EXPECT_NEAR(want, 0.2458, 1e-4);
      // Query 1's gradient is finite; query 0's is NaN (its own output's sqrt).
      const std::vector<float> dq = q.grad().to_vector<float>();
      EXPECT_TRUE(std::isnan(dq[0]));
      EXPECT_TRUE(std::isfinite(dq[1]));
    }
    // Every pair enters the formula, a pair not attended as 0 x its values (docs/ops.md): an
    // inf value of a key the causal rule leaves out makes the output NaN, on a backend that
    // skips such keys (cpu) as on one that does not (torch); a NaN in a query reaches the
    // key gradient of a key it does not attend.
    const float inf = std::numeric_limits<float>::infinity();
    Tensor q1 = from_vector<float>({1}, {1, 1}, d);
    Tensor k2 = from_vector<float>({1, 2}, {2, 1}, d);
    EXPECT_TRUE(all_nan(
        scaled_dot_product_attention(q1, k2, from_vector<float>({3, inf}, {2, 1}, d), {}, true)
            .to_vector<float>()));
    EXPECT_EQ(scaled_dot_product_attention(q1, k2, from_vector<float>({3, 4}, {2, 1}, d), {}, true)
                  .to_vector<float>(),
              (std::vector<float>{3}));
    Tensor qn = from_vector<float>({1, std::numeric_limits<float>::quiet_NaN()}, {2, 1}, d);
    Tensor kk = from_vector<float>({1, 2, 3}, {3, 1}, d);
    kk.set_requires_grad();
    scaled_dot_product_attention(qn, kk, from_vector<float>({1, 2, 3}, {3, 1}, d), {}, true)
        .sum()
        .backward();
    const std::vector<float> dk = kk.grad().to_vector<float>();
    EXPECT_TRUE(std::isnan(dk[2])) << "key 2 is attended by no query, but q_1 is NaN";
    // Values of width 0: the gradient is empty, dS = P (0 - 0) is still NaN where P is (the
    // torch backend returned zeros for an empty gradient).
    Tensor qz = from_vector<float>({std::numeric_limits<float>::quiet_NaN()}, {1, 1}, d);
    Tensor kz = from_vector<float>({1}, {1, 1}, d);
    kz.set_requires_grad();
    scaled_dot_product_attention(qz, kz, zeros({1, 0}, kF32, d)).sum().backward();
    EXPECT_TRUE(all_nan(kz.grad().to_vector<float>()));
  }
}

}  // namespace
}  // namespace tw
