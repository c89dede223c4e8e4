// Optimizers against PyTorch: three steps of SGD / Adam / AdamW on a 3-element f64 parameter
// with given gradients, compared with the values torch.optim gives (computed with
// /usr/bin/python3, torch 1.13, script in the comment below), on the CPU and a remote device.
//
//   p = torch.nn.Parameter(torch.tensor([0.5, -1.25, 2.0], dtype=torch.float64))
//   opt = torch.optim.<Optimizer>([p], ...)
//   for g in ([0.1, -0.2, 0.3], [-0.4, 0.5, 0.25], [0.05, 0.0, -0.6]):
//       p.grad = torch.tensor(g, dtype=torch.float64); opt.step()
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "support/remote_device.h"
#include "tensorwire/remote.h"

namespace tw {
namespace {

const std::vector<std::vector<double>> kGrads = {
    {0.1, -0.2, 0.3}, {-0.4, 0.5, 0.25}, {0.05, 0.0, -0.6}};

class Optim : public ::testing::TestWithParam<std::string> {
 protected:
  Device dev() const { return testing::test_device(GetParam()); }

  std::vector<double> run(
      const std::function<std::unique_ptr<optim::Optimizer>(std::vector<nn::ParameterPtr>)>& make) {
    auto p = std::make_shared<nn::Parameter>(from_vector<double>({0.5, -1.25, 2.0}, {3}, dev()));
    auto opt = make({p});
    const nn::Parameter* identity = p.get();
    for (const auto& g : kGrads) {
      Tensor v = p->value();
      v.set_grad(from_vector<double>(g, {3}, dev()));
      const uint64_t before = v.id();
      opt->step();
      EXPECT_NE(p->value().id(), before) << "the update rebinds the parameter to a new tensor";
      EXPECT_EQ(opt->params()[0].get(), identity);
      EXPECT_TRUE(p->value().requires_grad());
    }
    return p->value().to_vector<double>();
  }
};

void expect_close(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << i;
}

TEST_P(Optim, SgdPlain) {
  expect_close(
      run([](auto ps) { return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1}); }),
      {0.52500000000000002, -1.28, 2.0049999999999999});
}

TEST_P(Optim, SgdMomentumDampeningWeightDecay) {
  expect_close(run([](auto ps) {
                 return std::make_unique<optim::SGD>(
                     ps, optim::SGDOptions{
                             .lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
               }),
               {0.53414390649499999, -1.2746831702874999, 1.9194412840799999});
}

TEST_P(Optim, SgdNesterov) {
  expect_close(run([](auto ps) {
                 return std::make_unique<optim::SGD>(
                     ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .nesterov = true});
               }),
               {0.52954000000000001, -1.28148, 1.97922});
}

TEST_P(Optim, Adam) {
  expect_close(run([](auto ps) {
                 return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.01});
               }),
               {0.49911908331461868, -1.2478404897175932, 1.9812664308584897});
}

TEST_P(Optim, AdamL2WeightDecay) {
  expect_close(
      run([](auto ps) {
        return std::make_unique<optim::Adam>(
            ps, optim::AdamOptions{
                    .lr = 0.02, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1});
      }),
      {0.49262511293085359, -1.2328666785848759, 1.9551705425786774});
}

TEST_P(Optim, AdamWDefault) {
  expect_close(run([](auto ps) {
                 return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 0.01});
               }),
               {0.49897053871044389, -1.247467084900991, 1.9806694819292618});
}

TEST_P(Optim, AdamWDecoupledWeightDecay) {
  expect_close(
      run([](auto ps) {
        return std::make_unique<optim::AdamW>(
            ps, optim::AdamWOptions{
                    .lr = 0.02, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.5});
      }),
      {0.48463772694641705, -1.2102516213546941, 1.9055818062711447});
}

TEST_P(Optim, ParametersWithoutGradientsAreSkippedAndZeroGradClears) {
  auto a = std::make_shared<nn::Parameter>(from_vector<float>({1, 2}, {2}, dev()));
  auto b = std::make_shared<nn::Parameter>(from_vector<float>({3, 4}, {2}, dev()));
  optim::SGD opt({a, b}, {.lr = 0.5});
  (a->value() * 2.0).sum().backward();
  opt.step();
  EXPECT_EQ(a->value().to_vector<float>(), (std::vector<float>{0, 1}));
  EXPECT_EQ(b->value().to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_TRUE(a->grad().defined()) << "the gradient survives step() until zero_grad()";
  opt.zero_grad();
  EXPECT_FALSE(a->grad().defined());
}

// Adam shares beta^t and its bias corrections among the parameters that step together; a
// parameter that misses a step (no gradient) goes on with its own. Either way each parameter
// must end exactly where an Adam of its own would take it.
TEST_P(Optim, AdamSharedBiasCorrectionsEqualOneAdamPerParameter) {
  auto make = [&](double v0, DType dtype) {
    return std::make_shared<nn::Parameter>(full({3}, v0, dtype, dev()));
  };
  std::vector<nn::ParameterPtr> joint = {make(0.5, kF64), make(-1.0, kF32), make(2.0, kF64)};
  std::vector<nn::ParameterPtr> alone = {make(0.5, kF64), make(-1.0, kF32), make(2.0, kF64)};
  const optim::AdamOptions o{.lr = 0.05, .beta1 = 0.8, .beta2 = 0.9};
  optim::Adam shared(joint, o);
  std::vector<std::unique_ptr<optim::Adam>> own;
  for (const auto& p : alone) own.push_back(std::make_unique<optim::Adam>(std::vector{p}, o));
  // Parameter 1 has no gradient in steps 0 and 3; parameter 2 none in step 2.
  const std::vector<std::vector<bool>> has_grad = {{true, false, true},
                                                   {true, true, true},
                                                   {true, true, false},
                                                   {true, false, true},
                                                   {true, true, true}};
  for (size_t step = 0; step < has_grad.size(); ++step) {
    for (size_t i = 0; i < joint.size(); ++i) {
      if (!has_grad[step][i]) continue;
      const double g = 0.1 * static_cast<double>(step + 1) - 0.07 * static_cast<double>(i);
      const DType dt = joint[i]->value().dtype();
      Tensor a = joint[i]->value(), b = alone[i]->value();
      a.set_grad(full({3}, g, dt, dev()));
      b.set_grad(full({3}, g, dt, dev()));
      own[i]->step();
    }
    shared.step();
    shared.zero_grad();
    for (auto& a : own) a->zero_grad();
  }
  for (size_t i = 0; i < joint.size(); ++i)
    EXPECT_EQ(joint[i]->value().to_bytes(), alone[i]->value().to_bytes()) << "parameter " << i;
}

// What a step costs on the device: one op per parameter (AdamStep: the parameter and both
// moments in one pass), and the bias corrections once per step and dtype (2 multiplies for
// beta^t, 3 ops for each correction), not once per parameter.
TEST(OptimRemote, AdamStepOpsPerParameter) {
  const Device dev = testing::remote_test_device();
  auto ops_of_second_step = [&](int n) {
    std::vector<nn::ParameterPtr> ps;
    for (int i = 0; i < n; ++i)
      ps.push_back(std::make_shared<nn::Parameter>(randn({4}, kF32, dev)));
    optim::Adam opt(ps);
    uint64_t ops = 0;
    for (int step = 0; step < 2; ++step) {
      for (const auto& p : ps) {
        Tensor v = p->value();
        v.set_grad(ones({4}, kF32, dev));
      }
      dev.sync();
      const uint64_t before = wire_counters(dev).ops;
      opt.step();
      dev.flush();
      ops = wire_counters(dev).ops - before;
    }
    return ops;
  };
  const uint64_t four = ops_of_second_step(4), eight = ops_of_second_step(8);
  EXPECT_EQ(eight - four, 4u * 1u);
  EXPECT_EQ(four - 4u * 1u, 2u + 6u);
}

// The fused update (op AdamStep) gives the bits of the same update composed from the ops Adam
// issues where the op is missing (an older server, a dtype the op does not take): for Adam and
// AdamW, with and without weight decay, f32 and f64, a transposed gradient, on the CPU and a
// remote device.
TEST(OptimFused, AdamStepEqualsTheComposedOpsBitForBit) {
  for (const Device& dev : {Device::cpu(), testing::remote_test_device()}) {
    for (DType dtype : {kF32, kF64}) {
      for (const bool decoupled : {false, true}) {
        for (const double wd : {0.0, 0.05}) {
          SCOPED_TRACE(dev.str() + " " + std::string(dtype_name(dtype)) +
                       (decoupled ? " AdamW" : " Adam") + " wd " + std::to_string(wd));
          manual_seed(7);
          const Tensor start = (randn({48, 40}, kF32, dev) * 3.0).to(dtype);
          auto p = std::make_shared<nn::Parameter>(start);
          const optim::AdamOptions o{
              .lr = 0.02, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = wd};
          std::unique_ptr<optim::Optimizer> opt =
              decoupled ? std::unique_ptr<optim::Optimizer>(std::make_unique<optim::AdamW>(
                              std::vector<nn::ParameterPtr>{p},
                              optim::AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay}))
                        : std::make_unique<optim::Adam>(std::vector<nn::ParameterPtr>{p}, o);
          // The composed update, as tw::optim::Adam writes it with tensor ops.
          NoGradGuard no_grad;
          Tensor value = start, m = zeros_like(start), v = zeros_like(start);
          Tensor b1 = ones({}, kF64, dev), b2 = ones({}, kF64, dev);
          for (int step = 0; step < 4; ++step) {
            // A transposed gradient, as Linear's weight gradient is.
            Tensor g = (randn({40, 48}, kF32, dev) * 0.5).to(dtype).t();
            Tensor pv = p->value();
            pv.set_grad(g);
            opt->step();
            b1 = b1 * o.beta1;
            b2 = b2 * o.beta2;
            const Tensor step_size = (o.lr / (1.0 - b1)).to(dtype);
            const Tensor bias2_sqrt = (1.0 - b2).sqrt().to(dtype);
            Tensor gg = g;
            if (wd != 0) {
              if (decoupled) {
                value = value * (1.0 - o.lr * wd);
              } else {
                gg = gg + value * wd;
              }
            }
            m = m + (gg - m) * (1.0 - o.beta1);
            v = v * o.beta2 + gg.square() * (1.0 - o.beta2);
            const Tensor denom = v.sqrt() / bias2_sqrt + o.eps;
            value = value - (m / denom) * step_size;
            ASSERT_EQ(p->value().to_bytes(), value.to_bytes()) << "step " << step;
          }
          const std::vector<Tensor*> state = opt->state();
          EXPECT_EQ(state[0]->to_bytes(), m.to_bytes());
          EXPECT_EQ(state[1]->to_bytes(), v.to_bytes());
        }
      }
    }
  }
}

TEST(OptimRemote, StepReadsNothing) {
  const Device dev = testing::remote_test_device();
  auto p = std::make_shared<nn::Parameter>(randn({32, 32}, kF32, dev));
  optim::Adam opt({p});
  (p->value() * p->value()).sum().backward();
  dev.sync();
  const WireCounters before = wire_counters(dev);
  opt.step();
  opt.step();
  dev.flush();
  const WireCounters after = wire_counters(dev);
  EXPECT_EQ(after.round_trips, before.round_trips);
  EXPECT_GT(after.ops, before.ops);
}

TEST(Optim, InvalidOptions) {
  auto p = std::make_shared<nn::Parameter>(zeros({2}));
  EXPECT_THROW(optim::SGD({p}, {.lr = -1}), Error);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), Error);
  EXPECT_THROW(optim::Adam({p}, {.beta1 = 1.0}), Error);
  EXPECT_THROW(optim::SGD({nullptr}), Error);
}

INSTANTIATE_TEST_SUITE_P(Devices, Optim, ::testing::Values("cpu", "remote"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tw
