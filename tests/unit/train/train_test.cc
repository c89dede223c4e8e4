// End to end: training on the handwritten digits (apps/digits) on a remote device reaches the
// example's accuracy target, and the same training from the same seed gives bit-identical
// parameters on the local CPU device and on a remote device.
#include <gtest/gtest.h>

#include <chrono>

#include "digits/digits.h"
#include "support/remote_device.h"
#include "tensorwire/remote.h"

namespace tw {
namespace {

using digits::ModelKind;

const digits::Dataset& all_digits() {
  static const digits::Dataset d = digits::load(digits::default_path());
  return d;
}

struct Trained {
  std::shared_ptr<nn::Sequential> model;
  digits::Progress last;
};

Trained train(ModelKind kind, const Device& dev, int epochs, double lr, uint64_t seed = 7) {
  const auto [train_set, test_set] = digits::split(all_digits(), 360, seed);
  manual_seed(seed);
  Trained t;
  t.model = digits::make_model(kind, {dev, kF32});
  optim::Adam opt(t.model->parameters(), {.lr = lr});
  const digits::DeviceData data = digits::upload(train_set, kind, dev);
  digits::Trainer trainer(*t.model, opt, data, 64);
  for (int e = 1; e <= epochs; ++e) t.last = trainer.run_epoch(e, epochs, seed, 0);
  return t;
}

double test_accuracy(nn::Module& model, ModelKind kind, const Device& dev, uint64_t seed = 7) {
  const auto [train_set, test_set] = digits::split(all_digits(), 360, seed);
  return digits::accuracy(model, digits::upload(test_set, kind, dev));
}

TEST(Digits, DataSetAndSplit) {
  const digits::Dataset& d = all_digits();
  ASSERT_EQ(d.n, 1797);
  ASSERT_EQ(d.pixels.size(), 1797u * 64);
  const auto [a, b] = digits::split(d, 360, 7);
  EXPECT_EQ(a.n, 1437);
  EXPECT_EQ(b.n, 360);
  for (float p : a.pixels) ASSERT_TRUE(p >= 0 && p <= 1);
  // Fixed seed, fixed split.
  const auto [a2, b2] = digits::split(d, 360, 7);
  EXPECT_EQ(a.labels, a2.labels);
  EXPECT_EQ(b.pixels, b2.pixels);
}

TEST(Digits, MlpReachesTargetOnRemoteDevice) {
  const Device dev = testing::remote_test_device();
  const auto start = std::chrono::steady_clock::now();
  Trained t = train(ModelKind::kMlp, dev, 10, 2e-3);
  const double acc = test_accuracy(*t.model, ModelKind::kMlp, dev);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(acc, 0.95) << "test accuracy after 10 epochs";
  EXPECT_GT(t.last.accuracy, 0.95) << "training accuracy of the last epoch";
  EXPECT_LT(seconds, 60);
  for (const auto& p : t.model->parameters()) EXPECT_EQ(p->value().device(), dev);
}

// Bytes of every parameter, in named_parameters order.
std::vector<std::vector<uint8_t>> parameter_bytes(const nn::Module& m) {
  std::vector<std::vector<uint8_t>> out;
  for (const auto& [name, p] : m.named_parameters()) out.push_back(p->value().to_bytes());
  return out;
}

TEST(Digits, RemoteAndLocalTrainingAreBitIdentical) {
  for (ModelKind kind : {ModelKind::kMlp, ModelKind::kCnn}) {
    SCOPED_TRACE(digits::model_name(kind));
    Trained local = train(kind, Device::cpu(), 1, 3e-3);
    Trained remote = train(kind, testing::remote_test_device(), 1, 3e-3);
    const auto a = parameter_bytes(*local.model), b = parameter_bytes(*remote.model);
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(a[i] == b[i]) << "parameter " << i << " differs";
    EXPECT_EQ(local.last.loss, remote.last.loss);
    // And training changed them: not trivially identical.
    manual_seed(7);
    auto fresh = digits::make_model(kind);
    EXPECT_NE(parameter_bytes(*fresh)[0], a[0]);
  }
}

TEST(Digits, TrainingStepOnRemoteSendsOnlyOps) {
  const Device dev = testing::remote_test_device();
  const auto [train_set, test_set] = digits::split(all_digits(), 360, 7);
  manual_seed(1);
  auto model = digits::make_model(ModelKind::kMlp, {dev, kF32});
  optim::Adam opt(model->parameters());
  const digits::DeviceData data = digits::upload(train_set, ModelKind::kMlp, dev);
  dev.sync();
  const WireCounters before = wire_counters(dev);
  for (int step = 0; step < 5; ++step) {
    const Tensor idx = arange(step * 64, (step + 1) * 64, 1, std::nullopt, dev);
    const Tensor loss =
        nn::cross_entropy((*model)(data.x.index_select(0, idx)), data.y.index_select(0, idx));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  dev.sync();
  const WireCounters after = wire_counters(dev);
  EXPECT_EQ(after.round_trips - before.round_trips, 1u) << "only the final sync waits";
  EXPECT_LT(after.bytes_out - before.bytes_out, 5 * 16384u) << "steps ship ops, not data";
  EXPECT_LT(after.bytes_in - before.bytes_in, 1024u);
}

}  // namespace
}  // namespace tw
