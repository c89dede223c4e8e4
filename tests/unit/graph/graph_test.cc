// Capture, trace files and replay: a training step with Adam recorded once, saved, loaded and
// replayed for several steps gives the same bits as running every step eagerly, on the CPU, on
// torch (when built) and on a remote device (op by op while the server has no graph messages).
#include "tensorwire/graph.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "support/remote_device.h"
#include "tensorwire/server.h"

namespace tw {
namespace {

using graph::Capture;
using graph::Trace;

constexpr int kSteps = 5;

struct Rig {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Adam> opt;
  std::vector<Tensor> xs, ys;
};

Rig make_rig(const Device& dev) {
  manual_seed(11);
  Rig s;
  s.model = std::make_shared<nn::Sequential>(nn::Linear(6, 16, true, {dev}), nn::ReLU(),
                                             nn::Linear(16, 3, true, {dev}));
  s.opt = std::make_unique<optim::Adam>(s.model->parameters(), optim::AdamOptions{.lr = 0.01});
  for (int i = 0; i < kSteps; ++i) {
    s.xs.push_back(randn({8, 6}, kF32, dev));
    std::vector<int64_t> y(8);
    for (int k = 0; k < 8; ++k) y[static_cast<size_t>(k)] = (k * 7 + i) % 3;
    s.ys.push_back(from_vector<int64_t>(y, {8}, dev));
  }
  return s;
}

Tensor eager_step(Rig& s, const Tensor& x, const Tensor& y) {
  Tensor loss = nn::cross_entropy((*s.model)(x), y);
  s.opt->zero_grad();
  loss.backward();
  s.opt->step();
  s.opt->zero_grad();
  return loss.detach();
}

// The step's state: every parameter, then every optimizer state tensor in use (Adam leaves a
// parameter's own bias-correction pair undefined while it shares its device's).
std::vector<Tensor> state_of(Rig& s) {
  std::vector<Tensor> out;
  for (const auto& p : s.model->parameters()) out.push_back(p->value());
  for (Tensor* t : s.opt->state())
    if (t->defined()) out.push_back(*t);
  return out;
}

void set_state(Rig& s, const std::vector<Tensor>& values) {
  size_t i = 0;
  for (const auto& p : s.model->parameters()) p->set(values.at(i++));
  for (Tensor* t : s.opt->state())
    if (t->defined()) *t = values.at(i++);
}

std::vector<std::vector<uint8_t>> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<std::vector<uint8_t>> out;
  for (const Tensor& t : ts) out.push_back(t.to_bytes());
  return out;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/tw_graph_" + name + "_" + std::to_string(::getpid()) + ".twtrace";
}

class GraphReplay : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (const testing::LocalBackend* b = testing::local_backend_of(GetParam())) {
      TW_SKIP_IF_UNAVAILABLE(b->unavailable);
      // A training step uses most ops; a backend that declares some unsupported runs the op
      // table (which checks its refusals) instead.
      if (!b->complete) GTEST_SKIP() << b->spec << " declares ops unsupported that this suite uses";
    }
  }
  Device dev() const { return testing::test_device(GetParam()); }
};

TEST_P(GraphReplay, AdamTrainingStepEqualsEagerBitForBit) {
  const Device d = dev();
  Rig eager = make_rig(d);
  std::vector<std::vector<uint8_t>> eager_losses;
  for (int i = 0; i < kSteps; ++i)
    eager_losses.push_back(eager_step(eager, eager.xs[i], eager.ys[i]).to_bytes());

  Rig g = make_rig(d);
  std::vector<std::vector<uint8_t>> losses;
  // Step 0 eagerly (it makes Adam's state), step 1 recorded (and run), the rest replayed.
  losses.push_back(eager_step(g, g.xs[0], g.ys[0]).to_bytes());
  const std::string path = temp_path(GetParam());
  {
    Capture cap(d);
    const Tensor x = cap.input(g.xs[1]), y = cap.input(g.ys[1]);
    std::vector<Tensor> state;
    for (const Tensor& t : state_of(g)) state.push_back(cap.input(t));
    set_state(g, state);
    const Tensor loss = eager_step(g, x, y);
    std::vector<Tensor> outs = state_of(g);
    outs.push_back(loss);
    const Trace trace = cap.finish(outs);
    EXPECT_EQ(trace.inputs().size(), 2 + state.size());
    EXPECT_EQ(trace.outputs().size(), outs.size());
    std::vector<Tensor> released;
    for (const Tensor& t : outs) released.push_back(cap.release(t));
    losses.push_back(released.back().to_bytes());
    released.pop_back();
    set_state(g, released);
    trace.save(path);
  }
  const Trace trace = Trace::load(path);
  std::remove(path.c_str());
  for (int i = 2; i < kSteps; ++i) {
    std::vector<Tensor> in = {g.xs[i], g.ys[i]};
    for (const Tensor& t : state_of(g)) in.push_back(t);
    std::vector<Tensor> out = trace.replay(d, in);
    losses.push_back(out.back().to_bytes());
    out.pop_back();
    set_state(g, out);
  }
  EXPECT_EQ(losses, eager_losses);
  EXPECT_EQ(bytes_of(state_of(g)), bytes_of(state_of(eager)))
      << "parameters and Adam state after " << kSteps << " steps";
}

TEST_P(GraphReplay, WrongInputsFailNamingTheMismatch) {
  const Device d = dev();
  Capture cap(d);
  const Tensor a = cap.input(ones({2, 3}, kF32, d));
  const Tensor b = (a * 2.0).sum(1);
  const Trace trace = cap.finish();
  ASSERT_EQ(trace.outputs().size(), 1u);
  EXPECT_EQ(trace.outputs()[0].str(), "f32[2]");
  try {
    trace.replay(d, {ones({3, 2}, kF32, d)});
    FAIL() << "a wrong shape replayed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input 0 is f32[3, 2], the trace takes f32[2, 3]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(trace.replay(d, {ones({2, 3}, kF64, d)}), Error);
  EXPECT_THROW(trace.replay(d, {}), Error);
  const std::vector<Tensor> out = trace.replay(d, {full({2, 3}, 1.5, kF32, d)});
  EXPECT_EQ(out.at(0).to_vector<float>(), (std::vector<float>{9, 9}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{6, 6})) << "the recorded run's values";
}

TEST_P(GraphReplay, StepCachesTheTrainingStepAndEqualsEager) {
  const Device d = dev();
  Rig eager = make_rig(d);
  std::vector<std::vector<uint8_t>> eager_losses;
  for (int i = 0; i < kSteps; ++i)
    eager_losses.push_back(eager_step(eager, eager.xs[i], eager.ys[i]).to_bytes());

  Rig g = make_rig(d);
  graph::Step step(
      [&](const std::vector<Tensor>& a) { return std::vector<Tensor>{eager_step(g, a[0], a[1])}; },
      graph::state_slots(*g.opt));
  std::vector<std::vector<uint8_t>> losses;
  for (int i = 0; i < kSteps; ++i) losses.push_back(step({g.xs[i], g.ys[i]}).at(0).to_bytes());
  EXPECT_EQ(step.eager_calls(), 2) << "the first call makes Adam's state: a new key";
  EXPECT_EQ(step.recordings(), 1);
  EXPECT_EQ(step.replays(), kSteps - 3);
  EXPECT_EQ(losses, eager_losses);
  EXPECT_EQ(bytes_of(state_of(g)), bytes_of(state_of(eager)));
  // A new batch shape records again; the old shape still replays.
  const Tensor x3 = randn({3, 6}, kF32, d), y3 = from_vector<int64_t>({0, 1, 2}, {3}, d);
  (void)step({x3, y3});
  (void)step({x3, y3});
  EXPECT_EQ(step.recordings(), 2);
  (void)step({g.xs[0], g.ys[0]});
  EXPECT_EQ(step.recordings(), 2);
  EXPECT_EQ(step.replays(), kSteps - 2);
}

std::vector<std::string> graph_devices() {
  std::vector<std::string> v = {"cpu", "remote"};
  for (const std::string& name : testing::backend_test_names()) v.push_back(name);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Devices, GraphReplay, ::testing::ValuesIn(graph_devices()));

TEST(Capture, ReadsWhileRecordingFailNamingTheOp) {
  Capture cap(Device::cpu());
  const Tensor x = cap.input(ones({4}));
  const Tensor s = (x * 3.0).sum();
  try {
    (void)s.item<float>();
    FAIL() << "a read inside a recording succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("read of tensor"), std::string::npos) << m;
    EXPECT_NE(m.find("(sum)"), std::string::npos) << m;
    EXPECT_NE(m.find("inside a recording on capture(cpu)"), std::string::npos) << m;
  }
  EXPECT_THROW((void)x.to_vector<float>(), Error);
  EXPECT_THROW((void)s.to(Device::cpu()), Error);
  EXPECT_THROW(cap.input(ones({2}) + 1.0).to_string(), Error);
  const Trace t = cap.finish();
  EXPECT_EQ(s.item<float>(), 12.0f) << "after finish() the recorded values are readable";
  EXPECT_THROW((void)(s + 1.0), Error) << "no recording after finish()";
}

TEST(Capture, OutputsAreTheTensorsStillHeld) {
  Capture cap(Device::cpu());
  const Tensor x = cap.input(ones({3}));
  Tensor kept;
  {
    const Tensor tmp = x + 1.0;
    kept = tmp * tmp;
  }
  const Trace t = cap.finish();
  EXPECT_EQ(t.num_ops(), 2u);
  ASSERT_EQ(t.outputs().size(), 1u) << t.str();
  EXPECT_NE(t.str().find("mul"), std::string::npos) << t.str();
  EXPECT_EQ(cap.release(kept).to_vector<float>(), (std::vector<float>{4, 4, 4}));
}

TEST(Capture, InputsComeFromTheInnerDevice) {
  Capture cap(Device::cpu());
  EXPECT_THROW(cap.input(Tensor()), Error);
  const Tensor x = cap.input(ones({2}));
  EXPECT_EQ(x.device().kind(), Device::Kind::kCapture);
  EXPECT_THROW(cap.input(x), Error);
  EXPECT_THROW((void)(x + ones({2})), Error) << "a cpu tensor is not on the capture device";
  EXPECT_THROW(Device::capture(x.device()), Error);
}

TEST(Capture, ServerRefusesToHostACaptureDevice) {
  try {
    (void)serve(Device::capture(Device::cpu()));
    FAIL() << "served a capture device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot serve capture(cpu)"), std::string::npos)
        << e.what();
  }
}

Trace sample_trace() {
  Capture cap(Device::cpu());
  const Tensor x = cap.input(ones({2, 3}));
  const Tensor w = cap.input(ones({3, 4}, kF32));
  const Tensor y =
      (x.matmul(w) + from_vector<float>({1, 2, 3, 4}, {4}, cap.device())).relu().sum(0);
  return cap.finish({y});
}

TEST(TraceFile, RoundTripsAndHasAVersionedHeader) {
  const Trace t = sample_trace();
  const std::vector<uint8_t> bytes = t.to_bytes();
  ASSERT_GT(bytes.size(), 10u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()), 7), "TWTRACE");
  EXPECT_EQ(bytes[8] | (bytes[9] << 8), 1) << "format version 1";
  const Trace back = Trace::from_bytes(bytes);
  EXPECT_EQ(back.to_bytes(), bytes);
  EXPECT_EQ(back.str(), t.str());
  const std::vector<Tensor> out = back.replay(Device::cpu(), {ones({2, 3}), ones({3, 4})});
  EXPECT_EQ(out.at(0).to_vector<float>(), (std::vector<float>{8, 10, 12, 14}));
}

TEST(TraceFile, BadFilesFailCleanly) {
  EXPECT_THROW(Trace::load("/nonexistent/x.twtrace"), Error);
  const std::vector<uint8_t> bytes = sample_trace().to_bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(Trace::from_bytes(std::span<const uint8_t>(bytes.data(), n)), Error) << n;
  }
  std::vector<uint8_t> v = bytes;
  v[8] = 2;
  try {
    Trace::from_bytes(v);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("version 2 is not supported"), std::string::npos)
        << e.what();
  }
  v = bytes;
  v.push_back(0);
  EXPECT_THROW(Trace::from_bytes(v), Error) << "trailing bytes";
  // Corruptions: any byte flipped either still decodes to a valid trace or fails with an error.
  std::mt19937 rng(5);
  for (int i = 0; i < 3000; ++i) {
    v = bytes;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) v[rng() % v.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    try {
      (void)Trace::from_bytes(v);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace tw
