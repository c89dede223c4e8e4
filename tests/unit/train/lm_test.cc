// The transformer modules (tensorwire/transformer.h): PyTorch-compatible parameter names,
// attention against the composed formula, cached generation against full recomputation (eager
// and as a replayed graph), remote against local, and a few training steps of a tiny GPT
// bit-identical on the local CPU device and on a remote device.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "support/remote_device.h"
#include "tensorwire/serialize.h"
#include "tensorwire/transformer.h"

namespace tw {
namespace {

nn::GPTConfig tiny(bool tied = false) {
  return {.vocab_size = 11,
          .context = 12,
          .n_layer = 2,
          .n_head = 2,
          .n_embd = 16,
          .dropout = 0.0,
          .bias = true,
          .tied = tied};
}

std::vector<std::string> names(const nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [n, p] : m.named_parameters()) out.push_back(n);
  return out;
}

TEST(Transformer, ParameterNamesMatchTheTorchModule) {
  manual_seed(1);
  nn::GPT gpt(tiny());
  std::vector<std::string> want = {"wte.weight", "wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* s : {"ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
                          "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
                          "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"})
      want.push_back(b + s);
  }
  want.insert(want.end(), {"ln_f.weight", "ln_f.bias", "head.weight"});
  EXPECT_EQ(names(gpt), want);
  EXPECT_EQ(gpt.named_parameters()[4].second->value().shape(), (Shape{48, 16}));  // qkv
  want.pop_back();
  nn::GPT tied(tiny(true));
  EXPECT_EQ(names(tied), want);
  // Initialisation: LayerNorms one and zero, biases zero, weights small.
  for (const auto& [n, p] : gpt.named_parameters()) {
    const std::vector<float> v = p->value().to_vector<float>();
    if (n.find("ln") != std::string::npos && n.find("weight") != std::string::npos) {
      for (float x : v) ASSERT_EQ(x, 1.0f) << n;
    } else if (n.find("bias") != std::string::npos) {
      for (float x : v) ASSERT_EQ(x, 0.0f) << n;
    } else {
      for (float x : v) ASSERT_LT(std::fabs(x), 0.2f) << n;
    }
  }
}

TEST(Transformer, SafetensorsRoundTrip) {
  manual_seed(2);
  nn::GPT a(tiny());
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tw_lm_" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  save_safetensors(path, a);
  manual_seed(3);
  nn::GPT b(tiny());
  load_safetensors(path, b, true);
  std::filesystem::remove(path);
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(pa[i].second->value().to_bytes(), pb[i].second->value().to_bytes()) << pa[i].first;
}

TEST(Transformer, AttentionEqualsTheComposedFormula) {
  manual_seed(4);
  nn::MultiheadAttention mha(8, 2);
  const Tensor x = randn({2, 5, 8});
  const Tensor y = mha(x);
  // softmax(q k^T / sqrt(d) + causal mask) v per head, from the same weights.
  const Tensor qkv = x.reshape({10, 8}).matmul(mha.named_parameters()[0].second->value().t()) +
                     mha.named_parameters()[1].second->value();
  auto heads = [&](int64_t i) {
    return qkv.slice(1, 8 * i, 8 * (i + 1)).reshape({2, 5, 2, 4}).transpose(1, 2);
  };
  const Tensor s = heads(0).matmul(heads(1).transpose(2, 3)) * (1 / std::sqrt(4.0));
  const Tensor upper =
      arange(0, 5, 1, kI64).reshape({5, 1}).lt(arange(0, 5, 1, kI64).reshape({1, 5}));
  const Tensor att = s.masked_fill(upper, -1e30).softmax(3).matmul(heads(2));
  const Tensor rows = att.transpose(1, 2).reshape({10, 8});
  const Tensor want = (rows.matmul(mha.named_parameters()[2].second->value().t()) +
                       mha.named_parameters()[3].second->value())
                          .reshape({2, 5, 8});
  const std::vector<float> a = y.to_vector<float>(), b = want.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5) << i;
}

// The logits of every position of `seq`, by the full forward: [T][V].
std::vector<std::vector<float>> full_logits(nn::GPT& gpt, const std::vector<int64_t>& seq,
                                            const Device& dev) {
  NoGradGuard no_grad;
  gpt.eval();
  const auto t = static_cast<int64_t>(seq.size());
  const std::vector<float> all = gpt(from_vector<int64_t>(seq, {1, t}, dev)).to_vector<float>();
  const int64_t v = gpt.config().vocab_size;
  std::vector<std::vector<float>> out;
  for (int64_t i = 0; i < t; ++i) out.emplace_back(all.begin() + i * v, all.begin() + (i + 1) * v);
  return out;
}

TEST(Transformer, CachedStepsEqualFullRecomputation) {
  manual_seed(5);
  nn::GPT gpt(tiny());
  const std::vector<int64_t> seq = {1, 4, 2, 9, 0, 3, 3, 7, 10, 5};
  const auto want = full_logits(gpt, seq, Device::cpu());
  nn::Generator eager(gpt, false), graphed(gpt, true);
  for (size_t i = 0; i < seq.size(); ++i) {
    const std::vector<float> a = eager.step(seq[i]), b = graphed.step(seq[i]);
    ASSERT_EQ(a, b) << "position " << i << ": the replayed graph differs from eager";
    for (size_t j = 0; j < a.size(); ++j) ASSERT_NEAR(a[j], want[i][j], 1e-5) << i << "," << j;
  }
  ASSERT_NE(graphed.graph_step(), nullptr);
  EXPECT_EQ(graphed.graph_step()->recordings(), 1);
  EXPECT_EQ(graphed.graph_step()->replays(), static_cast<int64_t>(seq.size()) - 2);
  // Greedy generation equals the argmax of the full recomputation, token by token.
  const std::vector<int64_t> gen = graphed.generate({1, 4}, 6, {.temperature = 0});
  std::vector<int64_t> ctx = {1, 4};
  for (int64_t tok : gen) {
    const auto l = full_logits(gpt, ctx, Device::cpu()).back();
    ASSERT_EQ(tok, std::max_element(l.begin(), l.end()) - l.begin());
    ctx.push_back(tok);
  }
  // Sampling is seeded: the same seed, the same tokens.
  const nn::SampleOptions s{.temperature = 0.9, .top_k = 5, .seed = 42};
  EXPECT_EQ(graphed.generate({2}, 8, s), eager.generate({2}, 8, s));
  ASSERT_NE(graphed.sample_step(), nullptr);
  EXPECT_GT(graphed.sample_step()->replays(), 0);
  // Top-1 sampling is the argmax, whatever the noise.
  EXPECT_EQ(graphed.generate({2}, 8, {.temperature = 1.0, .top_k = 1, .seed = 3}),
            graphed.generate({2}, 8, {.temperature = 0}));
  // The host sampler (for step() users): top-1 is the argmax too.
  uint64_t st = 1;
  EXPECT_EQ(nn::sample_token({0.1f, 2.0f, -1.0f}, {.temperature = 1.0, .top_k = 1}, st), 1);
  EXPECT_THROW(graphed.generate({1}, 12), Error);  // past the context
}

TEST(Transformer, RemoteGenerationEqualsLocal) {
  const Device remote = testing::remote_test_device();
  manual_seed(6);
  nn::GPT local(tiny());
  manual_seed(6);
  nn::GPT far(tiny(), {remote, kF32});
  nn::Generator gl(local), gr(far);
  const nn::SampleOptions s{.temperature = 1.0, .top_k = 0, .seed = 9};
  EXPECT_EQ(gl.generate({3, 1}, 9, s), gr.generate({3, 1}, 9, s));
  gl.reset();
  gr.reset();
  for (int64_t t : {5, 6, 7}) ASSERT_EQ(gl.step(t), gr.step(t));
  EXPECT_TRUE(gr.graph_step()->replays() > 0);
}

// Three Adam steps of a tiny GPT (tied and untied) through a graph::Step: parameters as bytes.
std::vector<std::vector<uint8_t>> train_bytes(const Device& dev, bool tied) {
  manual_seed(8);
  nn::GPT gpt(tiny(tied), {dev, kF32});
  optim::AdamW opt(gpt.parameters(), {.lr = 1e-2});
  graph::Step step(
      [&](const std::vector<Tensor>& a) {
        const Tensor loss = gpt.loss(a[0], a[1]);
        opt.zero_grad();
        loss.backward();
        opt.step();
        return std::vector<Tensor>{loss.detach()};
      },
      graph::state_slots(opt));
  std::vector<int64_t> data(3 * 13);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int64_t>((i * 7 + i / 5) % 11);
  const Tensor all = from_vector<int64_t>(data, {3, 13}, dev);
  double first = 0, last = 0;
  for (int s = 0; s < 5; ++s) {
    const double l = step({all.slice(1, 0, 12), all.slice(1, 1, 13)})[0].item<float>();
    (s == 0 ? first : last) = l;
  }
  EXPECT_LT(last, first);
  EXPECT_EQ(step.replays(), 2);  // eager twice (Adam state appears), recorded, replayed
  std::vector<std::vector<uint8_t>> out;
  for (const auto& p : gpt.parameters()) out.push_back(p->value().to_bytes());
  return out;
}

TEST(Transformer, TrainingIsBitIdenticalLocalAndRemote) {
  const Device remote = testing::remote_test_device();
  for (bool tied : {false, true}) {
    EXPECT_EQ(train_bytes(Device::cpu(), tied), train_bytes(remote, tied)) << "tied " << tied;
  }
}

// The same tiny GPT trained on the LibTorch device (every op through ATen, attention composed from
// torch ops) follows the CPU device's losses within float tolerance: the model is a workload of
// every backend, not only of tensorwire's own kernels.
TEST(Transformer, TrainsOnTheTorchDeviceLikeOnTheCpu) {
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no LibTorch backend";
  auto losses = [](const Device& dev) {
    manual_seed(8);
    nn::GPT gpt(tiny(false), {dev, kF32});
    optim::AdamW opt(gpt.parameters(), {.lr = 1e-2});
    std::vector<int64_t> data(3 * 13);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int64_t>((i * 5 + i / 3) % 11);
    const Tensor all = from_vector<int64_t>(data, {3, 13}, dev);
    std::vector<double> out;
    for (int s = 0; s < 4; ++s) {
      const Tensor loss = gpt.loss(all.slice(1, 0, 12), all.slice(1, 1, 13));
      opt.zero_grad();
      loss.backward();
      opt.step();
      out.push_back(loss.item<float>());
    }
    return out;
  };
  const auto cpu = losses(Device::cpu());
  const auto torch = losses(Device::torch());
  ASSERT_EQ(cpu.size(), torch.size());
  for (size_t i = 0; i < cpu.size(); ++i)
    EXPECT_NEAR(torch[i], cpu[i], 1e-4 * cpu[i]) << "step " << i;
  EXPECT_LT(cpu.back(), cpu.front());
}

}  // namespace
}  // namespace tw
