// bf16 compute (docs/lowp.md): MatMul of bf16 operands against the exact sum of the rounded
// operands' products (f32 accumulation: within k * 2^-24 * sum |a_i b_i|) and against the f32
// product of the unrounded operands (rounding each operand to bf16 adds 2^-8 * sum |a_i b_i| at
// most); the same bytes on a local and a remote device; and tw::autocast(kBF16): a training step
// of a small MLP whose parameters stay f32, whose gradients are within bf16 rounding of f32
// training's, which learns, and which gives local and remote devices the same bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "tensorwire/autograd.h"
#include "tensorwire/nn.h"
#include "tensorwire/optim.h"
#include "tensorwire/server.h"
#include "tensorwire/tensor.h"

namespace {

// |got - want| <= bound(i) for every entry of an [n, m] result of a [n, k] x [k, m] product.
void expect_within(const std::vector<float>& got, const std::vector<float>& a,
                   const std::vector<float>& b, const std::vector<float>& a_exact,
                   const std::vector<float>& b_exact, int64_t n, int64_t k, int64_t m,
                   double rel_of_mag, const char* what) {
  ASSERT_EQ(got.size(), static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < m; ++j) {
      double want = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        want += double{a_exact[i * k + p]} * b_exact[p * m + j];
        mag += std::abs(double{a[i * k + p]} * b[p * m + j]);
      }
      ASSERT_LE(std::abs(got[i * m + j] - want), rel_of_mag * mag + 1e-30)
          << what << " at [" << i << ", " << j << "]";
    }
  }
}

TEST(Bf16MatMul, WithinTheStatedBounds) {
  constexpr int64_t kN = 37, kK = 300, kM = 41;
  tw::manual_seed(5);
  const tw::Tensor a = tw::randn({kN, kK}), b = tw::randn({kK, kM});
  const tw::Tensor a16 = a.to(tw::kBF16), b16 = b.to(tw::kBF16);
  const tw::Tensor c = a16.matmul(b16);
  EXPECT_EQ(c.dtype(), tw::kF32);
  ASSERT_EQ(c.shape(), (tw::Shape{kN, kM}));
  const std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
  const std::vector<float> ar = a16.to(tw::kF32).to_vector<float>();
  const std::vector<float> br = b16.to(tw::kF32).to_vector<float>();
  const std::vector<float> got = c.to_vector<float>();
  // The rounded operands' products (exact in f32) summed in f32, in any order.
  expect_within(got, ar, br, ar, br, kN, kK, kM, 1.01 * kK * 0x1p-24, "vs rounded operands");
  // Against the unrounded f32 product: each operand moves by at most 2^-9 relative.
  expect_within(got, av, bv, av, bv, kN, kK, kM, 0x1p-8 + 0x1p-18 + 2.1 * kK * 0x1p-24, "vs f32");
  // A transposed (strided) bf16 operand and a batched product, within the same bound.
  const tw::Tensor bt16 = b.t().to(tw::kBF16).t();
  expect_within(a16.matmul(bt16).to_vector<float>(), ar, br, ar, br, kN, kK, kM,
                1.01 * kK * 0x1p-24, "strided b");
  const tw::Tensor batched = a16.unsqueeze(0).expand({3, kN, kK}).matmul(b16);
  ASSERT_EQ(batched.shape(), (tw::Shape{3, kN, kM}));
  expect_within(batched.slice(0, 2, 3).reshape({kN, kM}).to_vector<float>(), ar, br, ar, br, kN, kK,
                kM, 1.01 * kK * 0x1p-24, "batched");
}

TEST(Bf16MatMul, MixedOrStorageDtypesAreRefused) {
  const tw::Tensor a = tw::randn({4, 4});
  EXPECT_THROW((void)a.matmul(a.to(tw::kBF16)), tw::Error);
  EXPECT_THROW((void)a.to(tw::kF16).matmul(a.to(tw::kF16)), tw::Error);
  EXPECT_THROW((void)tw::autocast(tw::kF16), tw::Error);
}

TEST(Bf16MatMul, LocalAndRemoteGiveTheSameBytes) {
  auto server = tw::serve(tw::Device::cpu());
  const tw::Device remote = tw::Device::remote(server->url());
  tw::manual_seed(9);
  const tw::Tensor a = tw::randn({64, 200}).to(tw::kBF16), b = tw::randn({200, 96}).to(tw::kBF16);
  const std::vector<uint8_t> local = a.matmul(b).to_bytes();
  EXPECT_EQ(a.to(remote).matmul(b.to(remote)).to_bytes(), local);
}

struct Trained {
  std::vector<float> losses;
  std::vector<std::vector<uint8_t>> params;
  std::vector<std::vector<float>> first_grads;
};

// `steps` Adam steps of a 16-64-64-4 MLP (cross-entropy) from seed 3, with or without autocast.
Trained train(const tw::Device& dev, bool bf16, int steps) {
  tw::manual_seed(3);
  tw::nn::Sequential model(tw::nn::Linear(16, 64, true, {dev}), tw::nn::ReLU(),
                           tw::nn::Linear(64, 64, true, {dev}), tw::nn::ReLU(),
                           tw::nn::Linear(64, 4, true, {dev}));
  tw::optim::Adam opt(model.parameters(), {.lr = 1e-2});
  const tw::Tensor x = tw::randn({128, 16}).to(dev);
  // Labels from a fixed linear rule, so that the MLP can learn them.
  const tw::Tensor target = x.matmul(tw::randn({16, 4}).to(dev)).argmax(1);
  Trained r;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    tw::Tensor loss;
    {
      auto amp = tw::autocast(bf16 ? tw::kBF16 : tw::kF32);
      loss = tw::nn::cross_entropy(model.forward(x), target);
      loss.backward();
    }
    if (s == 0) {
      for (const auto& p : model.parameters())
        r.first_grads.push_back(p->value().grad().to_vector<float>());
    }
    opt.step();
    r.losses.push_back(loss.item<float>());
  }
  for (const auto& p : model.parameters()) {
    EXPECT_EQ(p->value().dtype(), tw::kF32);
    r.params.push_back(p->value().to_bytes());
  }
  return r;
}

TEST(Autocast, TrainingStepInBf16WithF32MasterWeights) {
  constexpr int kSteps = 40;
  const Trained f32 = train(tw::Device::cpu(), false, kSteps);
  const Trained amp = train(tw::Device::cpu(), true, kSteps);
  // The same start; bf16 moves the loss by bf16 rounding, not more, and it is not f32's.
  EXPECT_NEAR(amp.losses[0], f32.losses[0], 2e-2 * f32.losses[0]);
  EXPECT_NE(amp.losses[0], f32.losses[0]);
  // The first step's gradients: close to f32's in the L2 sense. An entry is a sum over the batch
  // whose terms largely cancel, so bf16's per-term 2^-8 is amplified: measured 1.5-7% for the
  // five parameters (the deeper, the more); a transposed or misplaced operand gives ~100%.
  ASSERT_EQ(amp.first_grads.size(), f32.first_grads.size());
  for (size_t i = 0; i < f32.first_grads.size(); ++i) {
    double diff = 0, norm = 0;
    for (size_t j = 0; j < f32.first_grads[i].size(); ++j) {
      const double d = double{amp.first_grads[i][j]} - f32.first_grads[i][j];
      diff += d * d;
      norm += double{f32.first_grads[i][j]} * f32.first_grads[i][j];
    }
    EXPECT_LE(std::sqrt(diff), 0.1 * std::sqrt(norm)) << "parameter " << i;
    EXPECT_GT(diff, 0.0) << "parameter " << i << ": bf16 gave f32's gradient bit for bit";
  }
  // It learns as f32 training does.
  EXPECT_LT(amp.losses.back(), 0.5f * amp.losses[0]);
  EXPECT_NEAR(amp.losses.back(), f32.losses.back(), 0.1 * f32.losses.back() + 0.02);

  // A remote device gives the same bytes.
  auto server = tw::serve(tw::Device::cpu());
  const tw::Device remote = tw::Device::remote(server->url());
  const Trained far = train(remote, true, 5);
  const Trained near = train(tw::Device::cpu(), true, 5);
  EXPECT_EQ(far.losses, near.losses);
  EXPECT_EQ(far.params, near.params);
}

TEST(Autocast, ScopesNestAndEnd) {
  EXPECT_EQ(tw::autocast_dtype(), tw::kF32);
  tw::manual_seed(4);
  const tw::Tensor a = tw::randn({8, 8});
  const std::vector<uint8_t> f32 = a.matmul(a).to_bytes();
  {
    auto amp = tw::autocast(tw::kBF16);
    EXPECT_EQ(tw::autocast_dtype(), tw::kBF16);
    {
      auto off = tw::autocast(tw::kF32);
      EXPECT_EQ(tw::autocast_dtype(), tw::kF32);
      EXPECT_EQ(a.matmul(a).to_bytes(), f32);  // off inside: f32 bit for bit
    }
    EXPECT_EQ(tw::autocast_dtype(), tw::kBF16);
    const tw::Tensor got = a.matmul(a);
    EXPECT_NE(got.to_bytes(), f32);
    EXPECT_EQ(got.dtype(), tw::kF32);
    EXPECT_EQ(got.to_bytes(), a.to(tw::kBF16).matmul(a.to(tw::kBF16)).to_bytes());
  }
  EXPECT_EQ(tw::autocast_dtype(), tw::kF32);
}

}  // namespace
