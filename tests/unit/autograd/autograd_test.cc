// Autograd's behaviour (beyond the values the gradient checks cover): requires_grad propagation,
// accumulation, retain_graph, NoGradGuard, detach, error messages, and that backward on a remote
// device only sends ops (no round trip). Each test runs on the CPU and on a remote device over
// each transport (tcp, unix, tls: tests/support/remote_device.h).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "support/remote_device.h"
#include "tensorwire/remote.h"

namespace tw {
namespace {

class Autograd : public ::testing::TestWithParam<std::string> {
 protected:
  Device dev() const { return testing::test_device(GetParam()); }
  Tensor vec(std::vector<float> v) {
    return from_vector<float>(v, {static_cast<int64_t>(v.size())}, dev());
  }
};

void expect_throw_containing(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no exception; wanted one containing: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST_P(Autograd, RequiresGradPropagatesAndLeavesGetGrads) {
  Tensor w = vec({1, 2, 3}).set_requires_grad();
  Tensor c = vec({4, 5, 6});
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_FALSE(c.requires_grad());
  Tensor y = (w * c).sum();
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_FALSE((c * 2.0).requires_grad());
  EXPECT_FALSE(w.grad().defined());
  y.backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_FALSE(c.grad().defined());
  EXPECT_FALSE(y.grad().defined());  // only leaves keep gradients
}

TEST_P(Autograd, GradientsAccumulateUntilZeroGrad) {
  Tensor w = vec({1, 2}).set_requires_grad();
  (w * w).sum().backward();
  (w * 3.0).sum().backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{5, 7}));
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
  w.sum().backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST_P(Autograd, SharedSubexpressionsSumTheirGradients) {
  Tensor x = vec({2, 3}).set_requires_grad();
  Tensor y = x.exp();
  Tensor z = (y * y + y * x).sum();  // d/dx = 2 e^{2x} + e^x (x + 1)
  z.backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  for (int i = 0; i < 2; ++i) {
    const double xv = i == 0 ? 2 : 3;
    EXPECT_NEAR(g[i], 2 * std::exp(2 * xv) + std::exp(xv) * (xv + 1), 1e-3);
  }
}

TEST_P(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = vec({1, 2}).set_requires_grad();
  Tensor y = (x.exp() * 2.0).sum();
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  EXPECT_NEAR(g[0], 4 * std::exp(1.0), 1e-4);
  expect_throw_containing([&] { y.backward(); }, "retain_graph");
}

TEST_P(Autograd, NoGradGuardStopsRecording) {
  Tensor w = vec({1, 2}).set_requires_grad();
  EXPECT_TRUE(is_grad_enabled());
  {
    NoGradGuard g;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = w * 2.0;
    EXPECT_FALSE(y.requires_grad());
    {
      NoGradGuard inner;
      EXPECT_FALSE(is_grad_enabled());
    }
    EXPECT_FALSE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
  EXPECT_TRUE((w * 2.0).requires_grad());
}

TEST_P(Autograd, DetachCutsTheGraphWithoutAnOp) {
  Tensor w = vec({1, 2}).set_requires_grad();
  Tensor y = w * 3.0;
  const uint64_t ops = dev().kind() == Device::Kind::kRemote ? wire_counters(dev()).ops : 0;
  Tensor d = y.detach();
  if (dev().kind() == Device::Kind::kRemote) {
    EXPECT_EQ(wire_counters(dev()).ops, ops);
  }
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.id(), y.id());
  (d * w).sum().backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{3, 6}));
  y = Tensor();  // the alias keeps the values alive on its own
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{3, 6}));
}

TEST_P(Autograd, ExplicitGradForNonScalarRoots) {
  Tensor w = vec({1, 2, 3}).set_requires_grad();
  Tensor y = w * w;
  expect_throw_containing([&] { y.backward(); }, "only for a one-element tensor");
  y.backward(vec({1, 0, 2}));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2, 0, 12}));
  expect_throw_containing([&] { (w * 2.0).backward(vec({1, 2})); }, "differs from the tensor's");
}

TEST_P(Autograd, Errors) {
  expect_throw_containing(
      [&] {
        from_vector<int64_t>({1, 2}, {2}, dev()).set_requires_grad();
      },
      "only f32 and f64 tensors can require gradients, this one is i64");
  Tensor w = vec({1, 2}).set_requires_grad();
  expect_throw_containing([&] { (w * 2.0).set_requires_grad(false); }, "only leaf tensors");
  expect_throw_containing([&] { vec({1}).backward(); }, "does not require grad");
  expect_throw_containing([&] { w.set_grad(vec({1, 2, 3})); }, "must have the tensor's shape");
}

TEST_P(Autograd, MixedPrecisionGradientsTakeTheLeafDtype) {
  Tensor w = vec({1, 2}).set_requires_grad();
  Tensor c = from_vector<double>({0.5, 0.25}, {2}, dev());
  Tensor y = (w * c).sum();  // computed in f64
  EXPECT_EQ(y.dtype(), kF64);
  y.backward();
  EXPECT_EQ(w.grad().dtype(), kF32);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0.5f, 0.25f}));
}

TEST_P(Autograd, NonDifferentiableOutputsAreNotRecorded) {
  Tensor w = vec({3, 1, 2}).set_requires_grad();
  EXPECT_FALSE(w.argmax().requires_grad());
  EXPECT_FALSE((w > 1.5).requires_grad());
  EXPECT_FALSE(w.to(kI64).requires_grad());
  // A comparison used as a mask: the gradient flows only through w.
  Tensor y = w.masked_fill(w > 1.5, 0.0).sum();
  y.backward();
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0, 1, 0}));
}

// Over each transport.
class AutogradRemote : public ::testing::TestWithParam<testing::Transport> {
 protected:
  Device dev() const { return testing::remote_test_device(GetParam()); }
};

TEST_P(AutogradRemote, BackwardSendsOpsAndReadsNothing) {
  const Device dev = this->dev();
  manual_seed(3);
  Tensor w = randn({16, 8}, kF32, dev).set_requires_grad();
  Tensor x = randn({4, 8}, kF32, dev);
  Tensor loss = x.matmul(w.t()).relu().square().mean();
  dev.sync();
  const WireCounters before = wire_counters(dev);
  loss.backward();
  dev.sync();
  const WireCounters after = wire_counters(dev);
  EXPECT_GT(after.ops, before.ops);
  EXPECT_EQ(after.round_trips, before.round_trips + 1)
      << "only the sync() above may wait for the server";
  EXPECT_LT(after.bytes_out - before.bytes_out, 4096u) << "backward ships ops, not values";
  EXPECT_TRUE(w.grad().defined());
}

TEST_P(AutogradRemote, FreedGraphReleasesServerMemory) {
  const Device dev = this->dev();
  Tensor w = randn({256, 256}, kF32, dev).set_requires_grad();
  dev.sync();
  const uint64_t base = remote_stats(dev).session_bytes_held;
  {
    Tensor h = w;
    for (int i = 0; i < 4; ++i) h = h.tanh();
    h.sum().backward();
    w.zero_grad();
  }
  dev.sync();
  EXPECT_EQ(remote_stats(dev).session_bytes_held, base);
}

INSTANTIATE_TEST_SUITE_P(Devices, Autograd,
                         ::testing::Values("cpu", "remote", "remote_unix", "remote_tls"),
                         [](const auto& info) { return info.param; });
INSTANTIATE_TEST_SUITE_P(Transports, AutogradRemote, ::testing::ValuesIn(testing::kTransports),
                         [](const auto& info) { return testing::remote_name(info.param); });

}  // namespace
}  // namespace tw
