// End to end: training on the handwritten digits (apps/digits) on a remote device reaches the
// example's accuracy target, and the same training from the same seed gives bit-identical
// parameters on the local CPU device and on a remote device.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "digits/digits.h"
#include "support/remote_device.h"
#include "support/server_process.h"
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
  for (int e = 1; e <= epochs; ++e) trainer.run_epoch(e, epochs, seed, 0);
  const std::optional<digits::Progress> last = trainer.finish();
  if (!last) throw Error("train: no report");
  t.last = *last;
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

// The reports of `epochs` epochs of MLP training on `dev`, reporting every `every` steps, as
// on_progress received them. wait_each: finish() after every step, so that each report is
// waited for at its step (what run_epoch did before its reports were asynchronous).
std::vector<digits::Progress> reports(const Device& dev, int epochs, int64_t every,
                                      bool wait_each) {
  const auto [train_set, test_set] = digits::split(all_digits(), 360, 7);
  manual_seed(7);
  auto model = digits::make_model(ModelKind::kMlp, {dev, kF32});
  optim::Adam opt(model->parameters(), {.lr = 3e-3});
  const digits::DeviceData data = digits::upload(train_set, ModelKind::kMlp, dev);
  digits::Trainer trainer(*model, opt, data, 64, true);
  std::vector<digits::Progress> got;
  auto keep = [&got](const digits::Progress& p) { got.push_back(p); };
  for (int e = 1; e <= epochs; ++e) {
    trainer.run_epoch(e, epochs, 7, every, keep, 0, [&](int64_t) {
      if (wait_each) (void)trainer.finish();
    });
  }
  const std::optional<digits::Progress> last = trainer.finish();
  EXPECT_TRUE(last.has_value());
  if (last && !got.empty()) {
    EXPECT_EQ(last->epoch, got.back().epoch);
    EXPECT_EQ(last->step, got.back().step);
  }
  return got;
}

uint64_t bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

// Asynchronous reports (run_epoch never waits for them; they arrive during later steps, the next
// epoch or finish()) are the reports waited for at their step, bit for bit, all of them, in
// order; and the same on the local CPU device.
TEST(Digits, AsynchronousReportsEqualWaitedOnesInOrder) {
  const Device dev = testing::remote_test_device();
  constexpr int kEpochs = 3;
  constexpr int64_t kEvery = 5;
  const std::vector<digits::Progress> waited = reports(dev, kEpochs, kEvery, true);
  const std::vector<digits::Progress> async = reports(dev, kEpochs, kEvery, false);
  const std::vector<digits::Progress> local = reports(Device::cpu(), kEpochs, kEvery, false);
  const int64_t steps = (1437 + 63) / 64;  // 23
  ASSERT_EQ(waited.size(), static_cast<size_t>(kEpochs * ((steps + kEvery - 1) / kEvery)));
  ASSERT_EQ(async.size(), waited.size());
  ASSERT_EQ(local.size(), waited.size());
  for (size_t i = 0; i < waited.size(); ++i) {
    SCOPED_TRACE("report " + std::to_string(i));
    for (const auto* got : {&async[i], &local[i]}) {
      EXPECT_EQ(got->epoch, waited[i].epoch);
      EXPECT_EQ(got->step, waited[i].step);
      EXPECT_EQ(got->steps, steps);
      EXPECT_EQ(bits(got->loss), bits(waited[i].loss));
      EXPECT_EQ(bits(got->accuracy), bits(waited[i].accuracy));
    }
    if (i > 0) {  // in order: epoch by epoch, step by step, each epoch ending on its last step
      const digits::Progress& prev = async[i - 1];
      EXPECT_TRUE(async[i].epoch == prev.epoch
                      ? async[i].step > prev.step
                      : async[i].epoch == prev.epoch + 1 && prev.step == steps);
    }
  }
  EXPECT_EQ(async.back().step, steps);
  EXPECT_EQ(async.back().epoch, kEpochs);
}

// run_epoch returns without waiting for its reports: against a server slowed to 1 ms per op, the
// epoch's steps are issued and run_epoch is back long before the server has run its first step
// (tens of ops), so no report has reached on_progress; finish() then delivers them all, in order.
TEST(Digits, RunEpochDoesNotWaitForItsReports) {
  ::setenv("TW_TEST_OP_DELAY_US", "1000", 1);
  testing::ServerProcess server;
  ::unsetenv("TW_TEST_OP_DELAY_US");
  const Device dev = Device::remote(server.url());
  const auto [train_set, test_set] = digits::split(all_digits(), 1797 - 256, 7);  // 4 batches
  manual_seed(7);
  auto model = digits::make_model(ModelKind::kMlp, {dev, kF32});
  optim::Adam opt(model->parameters(), {.lr = 3e-3});
  const digits::DeviceData data = digits::upload(train_set, ModelKind::kMlp, dev);
  digits::Trainer trainer(*model, opt, data, 64);
  ASSERT_EQ(trainer.steps_per_epoch(), 4);
  std::vector<int64_t> delivered;
  trainer.run_epoch(1, 1, 7, 2, [&](const digits::Progress& p) { delivered.push_back(p.step); });
  EXPECT_TRUE(delivered.empty()) << "run_epoch waited for a report";
  const std::optional<digits::Progress> last = trainer.finish();
  EXPECT_EQ(delivered, (std::vector<int64_t>{2, 4}));
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->step, 4);
  EXPECT_GT(last->loss, 0);
  EXPECT_FALSE(trainer.finish() == std::nullopt) << "finish() keeps the last report";
}

}  // namespace
}  // namespace tw
