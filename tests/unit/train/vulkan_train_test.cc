// Training on the vulkan device (lavapipe in CI; skipped with the reason where there is no
// Vulkan device, failed under CI=true): the digits CNN reaches its accuracy target (conv, pool
// and their gradients, Adam, cross entropy, all as device kernels), and a tiny GPT (1 layer,
// d = 32, context 16: embeddings, attention and its gradient, layer norm and its gradient, gelu)
// follows the cpu device's loss to 50 steps within 1e-3 relative.
#include <gtest/gtest.h>

#include <cmath>

#include "digits/digits.h"
#include "support/local_backends.h"
#include "tensorwire/optim.h"
#include "tensorwire/transformer.h"

namespace tw {
namespace {

std::string vulkan_unavailable() {
  const testing::LocalBackend* b = testing::local_backend_named("vulkan");
  if (!b) return "this build has no vulkan backend (libvulkan-dev and glslc were not found)";
  return b->unavailable;
}

TEST(VulkanTraining, DigitsCnnReachesItsAccuracyTarget) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  const Device dev = Device::local("vulkan:0");
  const digits::Dataset all = digits::load(digits::default_path());
  const auto [train_set, test_set] = digits::split(all, 360, 7);
  manual_seed(7);
  auto model = digits::make_model(digits::ModelKind::kCnn, {dev, kF32});
  optim::Adam opt(model->parameters(), {.lr = 1e-2});  // 96.1% on cpu after 3 epochs
  const digits::DeviceData data = digits::upload(train_set, digits::ModelKind::kCnn, dev);
  digits::Trainer trainer(*model, opt, data, 64);
  const int epochs = 3;
  for (int e = 1; e <= epochs; ++e) trainer.run_epoch(e, epochs, 7, 0);
  ASSERT_TRUE(trainer.finish().has_value());
  const double acc =
      digits::accuracy(*model, digits::upload(test_set, digits::ModelKind::kCnn, dev));
  EXPECT_GE(acc, 0.95) << "test accuracy of the digits CNN on vulkan after " << epochs << " epochs";
  for (const auto& p : model->parameters()) EXPECT_EQ(p->value().device(), dev);
}

// The loss of 50 AdamW steps of a 1-layer GPT (d = 32, context 16) on fixed batches.
std::vector<double> lm_losses(const Device& dev) {
  manual_seed(11);
  const nn::GPTConfig cfg{.vocab_size = 13,
                          .context = 16,
                          .n_layer = 1,
                          .n_head = 2,
                          .n_embd = 32,
                          .dropout = 0.0,
                          .bias = true,
                          .tied = false};
  nn::GPT gpt(cfg, {dev, kF32});
  optim::AdamW opt(gpt.parameters(), {.lr = 1e-2});
  std::vector<int64_t> data(4 * 17);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int64_t>((i * 7 + i / 5) % 13);
  const Tensor all = from_vector<int64_t>(data, {4, 17}, dev);
  std::vector<double> out;
  for (int s = 0; s < 50; ++s) {
    const Tensor loss = gpt.loss(all.slice(1, 0, 16), all.slice(1, 1, 17));
    opt.zero_grad();
    loss.backward();
    opt.step();
    out.push_back(loss.item<float>());
  }
  return out;
}

TEST(VulkanTraining, TinyLmLossFollowsTheCpuDevice) {
  TW_SKIP_IF_UNAVAILABLE(vulkan_unavailable());
  const std::vector<double> cpu = lm_losses(Device::cpu());
  const std::vector<double> vk = lm_losses(Device::local("vulkan:0"));
  ASSERT_EQ(cpu.size(), vk.size());
  EXPECT_LT(cpu.back(), 0.5 * cpu.front()) << "the model did not learn: nothing to compare";
  EXPECT_NEAR(vk.back(), cpu.back(), 1e-3 * std::abs(cpu.back()))
      << "loss after 50 steps: vulkan " << vk.back() << ", cpu " << cpu.back();
  for (size_t i = 0; i < cpu.size(); ++i) {
    EXPECT_NEAR(vk[i], cpu[i], 1e-3 * std::abs(cpu[i])) << "step " << i;
  }
}

}  // namespace
}  // namespace tw
