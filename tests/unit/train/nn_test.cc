// tw::nn: initialisation as PyTorch's, parameter naming and identity, train/eval, Dropout,
// moving between devices, and the same model from the same seed on every device.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "support/remote_device.h"
#include "tensorwire/graph.h"

namespace tw {
namespace {

TEST(Nn, LinearAndConvInitialisationBounds) {
  manual_seed(5);
  nn::Linear lin(100, 50);
  nn::Conv2d conv(8, 4, 3);
  struct Check {
    const nn::ParameterPtr& p;
    double bound;
  };
  for (const Check& c :
       {Check{lin.weight(), 0.1}, Check{lin.bias(), 0.1}, Check{conv.weight(), 1 / std::sqrt(72.0)},
        Check{conv.bias(), 1 / std::sqrt(72.0)}}) {
    const std::vector<float> v = c.p->value().to_vector<float>();
    float lo = 1e9f, hi = -1e9f;
    for (float x : v) {
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    EXPECT_GE(lo, -c.bound);
    EXPECT_LE(hi, c.bound);
    if (v.size() > 100) {  // uniform over the whole range
      EXPECT_LT(lo, -0.9 * c.bound);
      EXPECT_GT(hi, 0.9 * c.bound);
    }
  }
  EXPECT_EQ(lin.weight()->value().shape(), (Shape{50, 100}));
  EXPECT_EQ(conv.weight()->value().shape(), (Shape{4, 8, 3, 3}));
}

TEST(Nn, SameSeedSameModelOnEveryDevice) {
  manual_seed(9);
  nn::Sequential a(nn::Conv2d(1, 4, 3), nn::Flatten(), nn::Linear(36, 3), nn::LayerNorm({3}),
                   nn::Embedding(5, 2));
  manual_seed(9);
  const Device remote = testing::remote_test_device();
  nn::Sequential b(nn::Conv2d(1, 4, 3, 1, 0, true, {remote, kF32}), nn::Flatten(),
                   nn::Linear(36, 3, true, {remote, kF32}),
                   nn::LayerNorm({3}, 1e-5, true, {remote, kF32}),
                   nn::Embedding(5, 2, {remote, kF32}));
  const auto pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_EQ(pb[i].second->value().device(), remote);
    EXPECT_EQ(pa[i].second->value().to_bytes(), pb[i].second->value().to_bytes()) << pa[i].first;
  }
}

TEST(Nn, NamesIdentityAndPrinting) {
  manual_seed(1);
  nn::Sequential m(nn::Linear(4, 8), nn::ReLU(), nn::Dropout(0.25), nn::Linear(8, 2, false));
  std::vector<std::string> names;
  for (const auto& [name, p] : m.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight"}));
  // parameters() and named_parameters() hold the same parameters, in the same order: the same
  // objects, whose values are the same tensors (by id), and no two alike.
  const auto params = m.parameters();
  const auto named = m.named_parameters();
  ASSERT_EQ(params.size(), 3u);
  ASSERT_EQ(named.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].get(), named[i].second.get()) << named[i].first;
    EXPECT_EQ(params[i]->value().id(), named[i].second->value().id()) << named[i].first;
    for (size_t j = 0; j < i; ++j) EXPECT_NE(params[i]->value().id(), params[j]->value().id());
  }
  EXPECT_EQ(m.to_string(),
            "Sequential(\n"
            "  (0): Linear(in_features=4, out_features=8, bias=true)\n"
            "  (1): ReLU()\n"
            "  (2): Dropout(p=0.25)\n"
            "  (3): Linear(in_features=8, out_features=2, bias=false)\n"
            ")");
  // A parameter keeps its identity when an optimizer rebinds it.
  nn::ParameterPtr w = m.parameters()[0];
  const uint64_t id = w->value().id();
  w->set(w->value() * 2.0);
  EXPECT_NE(w->value().id(), id);
  EXPECT_EQ(m.parameters()[0].get(), w.get());
  EXPECT_TRUE(w->value().requires_grad());
  EXPECT_THROW(w->set(zeros({3})), Error);
}

TEST(Nn, DropoutTrainAndEval) {
  manual_seed(3);
  nn::Dropout d(0.25);
  const Tensor x = ones({10000});
  const std::vector<float> y = d(x).to_vector<float>();
  int kept = 0;
  for (float v : y) {
    if (v != 0) {
      EXPECT_FLOAT_EQ(v, 1 / 0.75f);
      ++kept;
    }
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
  // The mask comes from the global seeded generator: the same seed, the same mask.
  manual_seed(3);
  EXPECT_EQ(d(x).to_vector<float>(), y);
  d.eval();
  EXPECT_FALSE(d.is_training());
  EXPECT_EQ(d(x).to_vector<float>(), std::vector<float>(10000, 1.0f));
  nn::Sequential s(nn::Linear(2, 2), nn::Dropout(0.5));
  s.eval();
  EXPECT_FALSE(s[1].is_training());
  s.train();
  EXPECT_TRUE(s[1].is_training());
}

TEST(Nn, ToMovesParametersAndGradients) {
  manual_seed(2);
  nn::Linear lin(3, 2);
  const std::vector<uint8_t> w = lin.weight()->value().to_bytes();
  (lin(ones({1, 3})).sum()).backward();
  const std::vector<uint8_t> g = lin.weight()->grad().to_bytes();
  const Device remote = testing::remote_test_device();
  lin.to(remote);
  EXPECT_EQ(lin.weight()->value().device(), remote);
  EXPECT_EQ(lin.weight()->value().to_bytes(), w);
  EXPECT_EQ(lin.weight()->grad().device(), remote);
  EXPECT_EQ(lin.weight()->grad().to_bytes(), g);
  EXPECT_EQ(lin(ones({1, 3}, kF32, remote)).shape(), (Shape{1, 2}));
  EXPECT_THROW(lin(ones({1, 3})), Error);  // input on another device
}

// cross_entropy records one node: its backward is (softmax - one_hot(target)) * g / N, six ops
// (the forward's own rules chained took nine).
TEST(Nn, CrossEntropyBackwardIsOneCompositeOfSixOps) {
  const Tensor logits_cpu = from_vector<float>({2, 1, 0, 0, 0, 3}, {2, 3});
  const Tensor target_cpu = from_vector<int64_t>({0, 2}, {2});
  auto ops = [&](bool backward) {
    graph::Capture cap(Device::cpu());
    Tensor logits = cap.input(logits_cpu), target = cap.input(target_cpu);
    logits.set_requires_grad(true);
    Tensor loss = nn::cross_entropy(logits, target);
    if (!backward) return cap.finish({loss}).num_ops();
    loss.backward(ones({}, kF32, cap.device()));
    return cap.finish({logits.grad()}).num_ops() - 1;  // less the seed's op
  };
  EXPECT_EQ(ops(true) - ops(false), 6u);

  Tensor logits = from_vector<float>({2, 1, 0, 0, 0, 3}, {2, 3});
  logits.set_requires_grad(true);
  nn::cross_entropy(logits, target_cpu).backward();
  std::vector<float> g = logits.grad().to_vector<float>();
  const double e0 = std::exp(2.0) + std::exp(1.0) + 1.0, e1 = 2 + std::exp(3.0);
  const std::vector<double> want = {
      std::exp(2.0) / e0 - 1, std::exp(1.0) / e0, 1 / e0, 1 / e1, 1 / e1, std::exp(3.0) / e1 - 1};
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i] / 2, 1e-6) << i;
}

TEST(Nn, LossesAndModulesForward) {
  const Tensor logits = from_vector<float>({2, 1, 0, 0, 0, 3}, {2, 3});
  const Tensor target = from_vector<int64_t>({0, 2}, {2});
  const double l0 = -std::log(std::exp(2.0) / (std::exp(2.0) + std::exp(1.0) + 1.0));
  const double l1 = -std::log(std::exp(3.0) / (2 + std::exp(3.0)));
  EXPECT_NEAR(nn::cross_entropy(logits, target).item<float>(), (l0 + l1) / 2, 1e-6);
  EXPECT_THROW(nn::cross_entropy(logits, from_vector<float>({0, 2}, {2})), Error);
  EXPECT_THROW(nn::cross_entropy(logits, from_vector<int64_t>({0}, {1})), Error);
  EXPECT_NEAR(nn::mse_loss(tensor<float>({1, 2}), tensor<float>({0, 4})).item<float>(), 2.5, 1e-6);

  manual_seed(4);
  nn::Embedding emb(10, 4);
  EXPECT_EQ(emb(from_vector<int64_t>({1, 2, 3, 9, 0, 1}, {2, 3})).shape(), (Shape{2, 3, 4}));
  nn::LayerNorm ln({4});
  const std::vector<float> y = ln(tensor<float>({1, 2, 3, 4}).reshape({1, 4})).to_vector<float>();
  EXPECT_NEAR(y[0] + y[1] + y[2] + y[3], 0, 1e-5);
  EXPECT_EQ(nn::MaxPool2d(2)(zeros({1, 1, 4, 4})).shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(nn::AvgPool2d(3, 1, 1)(zeros({1, 1, 4, 4})).shape(), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(nn::GELU()(zeros({2})).to_vector<float>(), (std::vector<float>{0, 0}));
  EXPECT_EQ(nn::Flatten()(zeros({2, 3, 4})).shape(), (Shape{2, 12}));
}

// Linear records one node for a batch of rows (d x = g w, d w = g^T x, d bias = g's row sums):
// its gradients equal those of the same forward written with tensor ops (whose own rules give
// them), with and without a bias and with an input that does not require grad, locally and
// remotely; nothing is computed for an input that needs no gradient.
TEST(Nn, LinearBackwardEqualsTheOpsRules) {
  for (const Device& dev : {Device::cpu(), testing::remote_test_device()}) {
    for (const bool bias : {true, false}) {
      for (const bool x_grad : {true, false}) {
        SCOPED_TRACE(dev.str() + (bias ? " bias" : " no bias") + (x_grad ? " x grad" : ""));
        manual_seed(11);
        nn::Linear lin(5, 3, bias, {dev, kF64});
        Tensor x = randn({4, 5}, kF64, dev);
        if (x_grad) x.set_requires_grad();
        const Tensor up = randn({4, 3}, kF64, dev);
        (lin(x) * up).sum().backward();
        // The same forward from tensor ops, on copies of the parameters.
        Tensor w = lin.weight()->value().detach(), b;
        w.set_requires_grad();
        Tensor x2 = x.detach();
        if (x_grad) x2.set_requires_grad();
        Tensor y = x2.matmul(w.t());
        if (bias) {
          b = lin.bias()->value().detach();
          b.set_requires_grad();
          y = y + b;
        }
        (y * up).sum().backward();
        auto near = [](const Tensor& got, const Tensor& want) {
          const std::vector<double> g = got.to_vector<double>(), e = want.to_vector<double>();
          ASSERT_EQ(got.shape(), want.shape());
          for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-12) << i;
        };
        near(lin.weight()->grad(), w.grad());
        if (bias) near(lin.bias()->grad(), b.grad());
        if (x_grad) near(x.grad(), x2.grad());
      }
    }
  }
}

// Op Linear (f32 rows: Sequential's Linear + ReLU, Linear::forward_relu): values and gradients
// within a float tolerance of the same layer written with tensor ops, on the cpu, torch and
// remote devices; a ReLU that keeps NaN as NaN; Sequential of Linear, ReLU gives forward_relu.
TEST(Nn, FusedLinearReluMatchesTheOps) {
  std::vector<Device> devices = {Device::cpu(), testing::remote_test_device()};
  if (Device::torch_available()) devices.push_back(Device::torch());
  for (const Device& dev : devices) {
    SCOPED_TRACE(dev.str());
    manual_seed(12);
    auto lin = std::make_shared<nn::Linear>(6, 4, true, nn::Placement{dev, kF32});
    nn::Sequential seq(lin, nn::ReLU());
    Tensor x = randn({5, 6}, kF32, dev);
    x.set_requires_grad();
    const Tensor up = randn({5, 4}, kF32, dev);
    const Tensor y = seq(x);
    (y * up).sum().backward();
    Tensor w = lin->weight()->value().detach(), b = lin->bias()->value().detach();
    w.set_requires_grad();
    b.set_requires_grad();
    Tensor x2 = x.detach();
    x2.set_requires_grad();
    const Tensor y2 = (x2.matmul(w.t()) + b).relu();
    (y2 * up).sum().backward();
    auto near = [](const Tensor& got, const Tensor& want) {
      ASSERT_EQ(got.shape(), want.shape());
      const std::vector<float> g = got.to_vector<float>(), e = want.to_vector<float>();
      for (size_t i = 0; i < g.size(); ++i)
        EXPECT_NEAR(g[i], e[i], 1e-5 * (1 + std::abs(e[i]))) << i;
    };
    near(y, y2);
    EXPECT_EQ(y.to_vector<float>(), lin->forward_relu(x).to_vector<float>());
    near(lin->weight()->grad(), w.grad());
    near(lin->bias()->grad(), b.grad());
    near(x.grad(), x2.grad());
    // NaN through the fused ReLU stays NaN; negatives become +0.
    NoGradGuard no_grad;
    nn::Linear id(2, 2, false, {dev, kF32});
    id.weight()->set(from_vector<float>({1, 0, 0, 1}, {2, 2}, dev));
    const std::vector<float> out =
        id.forward_relu(from_vector<float>({std::nanf(""), 0.0f, -3.0f, 2.0f}, {2, 2}, dev))
            .to_vector<float>();
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[2], 0.0f);
    EXPECT_FALSE(std::signbit(out[2]));
    EXPECT_EQ(out[3], 2.0f);
  }
}

// Op Linear (forward and its backward) and a whole training step with it and AdamStep give the
// same bytes at one and two intra-op threads, for shapes split across threads and a tall-skinny
// one (oneDNN's GEMM would be free to split a long k).
TEST(Nn, LinearAndAdamSameBitsAtOneAndTwoThreads) {
  const int before = get_num_threads();
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{before};
  const std::vector<std::array<int64_t, 3>> shapes = {{256, 512, 512}, {4, 8192, 8}, {3, 5, 7}};
  for (const auto& [rows, in, out] : shapes) {
    std::vector<std::vector<uint8_t>> runs;
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      manual_seed(21);
      auto lin = std::make_shared<nn::Linear>(in, out, true, nn::Placement{Device::cpu(), kF32});
      optim::Adam opt(lin->parameters(), optim::AdamOptions{.lr = 0.01});
      Tensor x = randn({rows, in});
      x.set_requires_grad();
      std::vector<uint8_t> bytes;
      for (int step = 0; step < 2; ++step) {
        opt.zero_grad();
        const Tensor y = lin->forward_relu(x);
        (y * y).sum().backward();
        opt.step();
        for (const Tensor& t : {y, x.grad(), lin->weight()->value(), lin->bias()->value()}) {
          const std::vector<uint8_t> b = t.to_bytes();
          bytes.insert(bytes.end(), b.begin(), b.end());
        }
      }
      runs.push_back(std::move(bytes));
    }
    EXPECT_TRUE(runs[0] == runs[1]) << rows << " x " << in << " -> " << out;
  }
}

}  // namespace
}  // namespace tw
