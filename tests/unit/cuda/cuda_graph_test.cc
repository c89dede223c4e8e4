// Registered graphs as CUDA Graphs (capture_plan.h, cuda_backend.cc) and the table backend's hook
// they use (TableBackend::run_graph_program). On every machine: the steps a graph's runs take and
// why one goes op by op; the capture arena's planner (a recorded run's allocations served again
// with no miss, no two live allocations sharing a block); the hook itself on a small host backend
// that records a graph and replays it. With a CUDA device only (skipped here, with the reason):
// graphs on cuda:0 against the cpu backend bit for bit, run after run, with the replay counters.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "backend/cuda/capture_plan.h"
#include "backend/registry.h"
#include "backend/table_backend.h"
#include "backend/upload.h"

namespace tw {

// ---- a small host backend (f32 add and neg) to exercise the graph hook ----
struct TinyTensor {
  TensorMeta meta;
  std::shared_ptr<std::vector<float>> v;
};
template <>
struct TableTraits<TinyTensor> {
  static TensorMeta meta(const TinyTensor& t) { return t.meta; }
  static uint64_t nbytes(const TinyTensor& t) { return t.v->size() * sizeof(float); }
  static std::pair<const void*, size_t> storage(const TinyTensor& t) {
    return {t.v.get(), t.v->size() * sizeof(float)};
  }
};

namespace {

using cuda::BlockPlanner;
using cuda::EagerReason;
using cuda::GraphCaptureState;
using cuda::GraphStep;

// ---- the steps ----

TEST(CudaGraphSteps, RecordCaptureReplay) {
  GraphCaptureState s;
  EagerReason why;
  EXPECT_EQ(cuda::next_graph_step(s, true, false, &why), GraphStep::kRecord);
  cuda::after_graph_step(s, GraphStep::kRecord, EagerReason::kNone);
  EXPECT_EQ(cuda::next_graph_step(s, true, false, &why), GraphStep::kCapture);
  // A poisoned input runs op by op (the errors travel as in eager runs) but refuses nothing.
  EXPECT_EQ(cuda::next_graph_step(s, true, true, &why), GraphStep::kEager);
  EXPECT_EQ(why, EagerReason::kPoisonedInput);
  EXPECT_FALSE(cuda::is_sticky(why));
  cuda::after_graph_step(s, GraphStep::kCapture, EagerReason::kNone);
  EXPECT_EQ(cuda::next_graph_step(s, true, false, &why), GraphStep::kReplay);
  EXPECT_EQ(why, EagerReason::kNone);
  // Switched off: op by op, whatever was recorded.
  EXPECT_EQ(cuda::next_graph_step(s, false, false, &why), GraphStep::kEager);
  EXPECT_STREQ(cuda::eager_reason_name(why), "disabled");
}

TEST(CudaGraphSteps, FailuresRefuseTheGraphForGood) {
  for (EagerReason r :
       {EagerReason::kCaptureRefused, EagerReason::kArenaMiss, EagerReason::kInstantiate}) {
    GraphCaptureState s;
    cuda::after_graph_step(s, GraphStep::kRecord, EagerReason::kNone);
    cuda::after_graph_step(s, GraphStep::kCapture, r);
    EagerReason why;
    for (int run = 0; run < 3; ++run) {
      EXPECT_EQ(cuda::next_graph_step(s, true, false, &why), GraphStep::kEager);
      EXPECT_EQ(why, r);
    }
    EXPECT_TRUE(cuda::is_sticky(r));
  }
  // A recording run whose op failed (a refused dtype, say) is never captured.
  GraphCaptureState s;
  cuda::after_graph_step(s, GraphStep::kRecord, EagerReason::kOpFailed);
  EagerReason why;
  EXPECT_EQ(cuda::next_graph_step(s, true, false, &why), GraphStep::kEager);
  EXPECT_STREQ(cuda::eager_reason_name(why), "op_failed");
}

// ---- the capture arena's planner ----

// A random run: allocations and releases, as (size, or 0 for "release the k-th live one").
struct Event {
  uint64_t bytes;
  size_t release;
};
std::vector<Event> random_run(std::mt19937& rng, int n) {
  std::vector<Event> ev;
  size_t live = 0;
  for (int i = 0; i < n; ++i) {
    if (live > 0 && rng() % 3 == 0) {
      ev.push_back({0, rng() % live});
      --live;
    } else {
      ev.push_back({1 + rng() % 5000, 0});
      ++live;
    }
  }
  return ev;
}

// Plays `ev` on p (recording or serving); returns the block of each allocation (npos: a miss),
// checking that no two live allocations share a block and that each fits its block.
std::vector<size_t> play(BlockPlanner& p, const std::vector<Event>& ev, bool record) {
  std::vector<size_t> got, live;
  std::set<size_t> held;
  for (const Event& e : ev) {
    if (e.bytes == 0) {
      const size_t b = live[e.release];
      live.erase(live.begin() + static_cast<ptrdiff_t>(e.release));
      if (b != SIZE_MAX) {
        held.erase(b);
        p.release(b, p.generation());
      }
      continue;
    }
    size_t b = SIZE_MAX;
    if (record) {
      b = p.record(e.bytes);
    } else if (std::optional<size_t> s = p.serve(e.bytes)) {
      b = *s;
    }
    if (b != SIZE_MAX) {
      EXPECT_TRUE(held.insert(b).second) << "block " << b << " handed out twice";
      EXPECT_GE(p.sizes()[b], e.bytes);
      EXPECT_EQ(p.sizes()[b] % BlockPlanner::kAlign, 0u);
    }
    got.push_back(b);
    live.push_back(b);
  }
  return got;
}

TEST(CudaGraphArena, ServesTheRecordedRunWithNoMissAndReusesBlocks) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const std::vector<Event> ev = random_run(rng, 400);
    BlockPlanner p;
    const std::vector<size_t> recorded = play(p, ev, true);
    uint64_t asked = 0;
    for (const Event& e : ev) asked += e.bytes;
    // Liveness reuse: fewer bytes than one block per allocation.
    EXPECT_LT(p.total_bytes(), asked + BlockPlanner::kAlign * ev.size());
    EXPECT_LT(p.sizes().size(), p.allocations());
    for (int again = 0; again < 2; ++again) {  // a capture, and one retried
      p.start_serving();
      const std::vector<size_t> served = play(p, ev, false);
      EXPECT_EQ(served, recorded);
    }
  }
}

TEST(CudaGraphArena, MissesWhatTheRecordingDidNotAllocate) {
  BlockPlanner p;
  const size_t a = p.record(1000);
  p.release(a, p.generation());
  EXPECT_EQ(p.record(500), a);  // best fit: the freed block
  const size_t c = p.record(3000);
  EXPECT_NE(c, a);
  p.start_serving();
  // A larger first request than recorded: a miss.
  EXPECT_FALSE(p.serve(1100).has_value());
  p.start_serving();
  EXPECT_EQ(p.serve(1000), a);
  // The recording released block a before its second use; this run did not: a miss.
  EXPECT_FALSE(p.serve(500).has_value());
  p.start_serving();
  EXPECT_EQ(p.serve(1000), a);
  p.release(a, p.generation());
  EXPECT_EQ(p.serve(500), a);
  EXPECT_EQ(p.serve(3000), c);
  EXPECT_FALSE(p.serve(1).has_value());  // one more than recorded
  // A release from an earlier generation (a recording run's output dropped late) is ignored.
  const uint64_t old = p.generation();
  p.start_serving();
  EXPECT_EQ(p.serve(1000), a);
  p.release(a, old);
  EXPECT_FALSE(p.serve(500).has_value());
}

// ---- the hook: TableBackend::run_graph_program ----

// Adds and negates f32 tensors on the host. Graph runs: the first runs the ops and keeps the
// outputs' values with the inputs it saw ("recording"); a later run whose inputs hold the same
// values sets the outputs itself without running an op ("replay"); otherwise it runs the ops on
// copies of its inputs bound in their place.
class TinyBackend final : public TableBackend<TinyTensor> {
 public:
  std::string name() const override { return "tiny"; }
  DeviceKind kind() const override { return DeviceKind::kLocal; }
  bool supports(ir::OpCode code) override {
    return code == ir::op_code(ir::Op{ir::Binary{}}) || code == ir::op_code(ir::Op{ir::Unary{}}) ||
           code == ir::op_code(ir::Op{ir::FromHost{}});
  }
  Result<TensorData> read(ir::TensorId id) override {
    TW_ASSIGN_OR_RETURN(const TinyTensor* t, tensor(id));
    TensorData d;
    d.meta = t->meta;
    d.bytes = Buffer::copy_of(t->v->data(), t->v->size() * sizeof(float));
    return d;
  }
  static constexpr int64_t kRecordingBytes = 1000;
  int kernels = 0, replays = 0, bound = 0;
  bool replaying = true;

 protected:
  Result<std::vector<TinyTensor>> run(const ir::Op& op,
                                      const std::vector<TensorMeta>& metas) override {
    if (!std::holds_alternative<ir::FromHost>(op)) ++kernels;  // (uploads are not counted)
    auto out = std::make_shared<std::vector<float>>(static_cast<size_t>(numel(metas[0].shape)));
    if (const auto* up = std::get_if<ir::FromHost>(&op)) {
      std::memcpy(out->data(), up->data.data.data(), out->size() * sizeof(float));
    } else if (const auto* b = std::get_if<ir::Binary>(&op)) {
      TW_ASSIGN_OR_RETURN(const TinyTensor* x, tensor(b->a.id));
      TW_ASSIGN_OR_RETURN(const TinyTensor* y, tensor(b->b.id));
      for (size_t i = 0; i < out->size(); ++i) (*out)[i] = (*x->v)[i] + (*y->v)[i];
    } else if (const auto* u = std::get_if<ir::Unary>(&op)) {
      TW_ASSIGN_OR_RETURN(const TinyTensor* x, tensor(u->x.id));
      for (size_t i = 0; i < out->size(); ++i) (*out)[i] = -(*x->v)[i];
    }
    return std::vector<TinyTensor>{TinyTensor{metas[0], out}};
  }
  Status run_graph_program(GraphRun& run) override {
    if (!replaying) return run.run_ops();
    const size_t n = run.program().input_metas.size();
    std::vector<std::vector<float>> in;
    for (size_t i = 0; i < n; ++i) {
      if (!run.input(i)) return run.run_ops();  // poisoned: op by op
      in.push_back(*run.input(i)->v);
    }
    Recording& r = recorded_[run.id()];
    if (!r.outputs.empty() && r.inputs == in) {
      ++replays;
      for (size_t k = 0; k < r.outputs.size(); ++k) run.set_output(k, r.outputs[k]);
      return Status::OK();
    }
    // Bind copies (same values) in place of the caller's inputs, then run the ops on them.
    for (size_t i = 0; i < n; ++i) {
      run.bind_input(i,
                     TinyTensor{run.input(i)->meta, std::make_shared<std::vector<float>>(in[i])});
      ++bound;
    }
    Status st = run.run_ops();
    if (!st.ok()) return st;
    if (r.outputs.empty()) run.count_bytes(kRecordingBytes);  // what a recording would hold
    r.inputs = in;
    r.outputs.clear();
    for (size_t k = 0; k < run.program().output_slots.size(); ++k) {
      r.outputs.push_back(*run.output(k));
    }
    return st;
  }

 private:
  struct Recording {
    std::vector<std::vector<float>> inputs;
    std::vector<TinyTensor> outputs;
  };
  std::map<ir::GraphId, Recording> recorded_;
};

TensorData data_of(const Shape& shape, DType dt, const void* p, size_t bytes) {
  TensorData d;
  d.meta = {shape, dt};
  d.bytes = Buffer::copy_of(p, bytes);
  return d;
}

void put(Backend& b, ir::TensorId id, const std::vector<float>& v) {
  TensorData d;
  d.meta = {Shape{static_cast<int64_t>(v.size())}, kF32};
  d.bytes = Buffer::copy_of(v.data(), v.size() * sizeof(float));
  ASSERT_TRUE(b.execute(from_host_of(std::move(d), id)).ok());
}
std::vector<float> get(Backend& b, ir::TensorId id) {
  Result<TensorData> d = b.read(id);
  EXPECT_TRUE(d.ok()) << d.status().message();
  if (!d.ok()) return {};
  std::vector<float> v(d->bytes.size() / sizeof(float));
  std::memcpy(v.data(), d->bytes.data(), d->bytes.size());
  return v;
}

// (x + y), -(x + y): two outputs, one intermediate.
ir::Graph add_neg_graph() {
  ir::Graph g;
  g.input_ids = {1, 2};
  g.inputs = {TensorMeta{Shape{3}, kF32}, TensorMeta{Shape{3}, kF32}};
  g.ops.push_back(ir::Binary{ir::BinaryKind::kAdd, {1}, {2}, {3}});
  g.ops.push_back(ir::Unary{ir::UnaryKind::kNeg, {3}, {4}});
  g.ops.push_back(ir::Binary{ir::BinaryKind::kAdd, {3}, {3}, {5}});
  g.output_ids = {4, 5};
  return g;
}

TEST(GraphRunHook, ABackendMayBindInputsReplayOrRunTheOps) {
  TinyBackend b;
  Result<ir::GraphId> g = b.register_graph(add_neg_graph());
  ASSERT_TRUE(g.ok()) << g.status().message();
  put(b, 10, {1, 2, 3});
  put(b, 11, {10, 20, 30});
  const int before = b.kernels;
  const size_t held = b.bytes_held();
  const ir::TensorId in[] = {10, 11};
  const ir::TensorId out1[] = {20, 21};
  ASSERT_TRUE(b.run_graph(*g, in, out1).ok());
  // The recording's bytes, and the two outputs' (3 floats each), are held.
  EXPECT_EQ(static_cast<int64_t>(b.bytes_held() - held), TinyBackend::kRecordingBytes + 2 * 12);
  EXPECT_EQ(b.kernels - before, 3);  // ran the ops, on the bound copies
  EXPECT_EQ(b.bound, 2);
  EXPECT_EQ(get(b, 20), (std::vector<float>{-11, -22, -33}));
  EXPECT_EQ(get(b, 21), (std::vector<float>{22, 44, 66}));
  // The same values again: the backend replays, no op runs, the outputs are its.
  const ir::TensorId out2[] = {22, 23};
  ASSERT_TRUE(b.run_graph(*g, in, out2).ok());
  EXPECT_EQ(b.kernels - before, 3);
  EXPECT_EQ(b.replays, 1);
  EXPECT_EQ(get(b, 22), (std::vector<float>{-11, -22, -33}));
  EXPECT_EQ(get(b, 23), (std::vector<float>{22, 44, 66}));
  // The caller's inputs are untouched, and the run's intermediates are gone.
  EXPECT_EQ(get(b, 10), (std::vector<float>{1, 2, 3}));
  // Other values: the ops run again.
  put(b, 12, {0, 0, 1});
  const ir::TensorId in3[] = {10, 12};
  const ir::TensorId out3[] = {24, 25};
  ASSERT_TRUE(b.run_graph(*g, in3, out3).ok());
  EXPECT_EQ(b.kernels - before, 6);
  EXPECT_EQ(get(b, 24), (std::vector<float>{-1, -2, -4}));
  // The default (no replay) runs the ops one by one: the same values.
  b.replaying = false;
  const ir::TensorId out4[] = {26, 27};
  ASSERT_TRUE(b.run_graph(*g, in, out4).ok());
  EXPECT_EQ(get(b, 26), (std::vector<float>{-11, -22, -33}));
  EXPECT_EQ(get(b, 27), (std::vector<float>{22, 44, 66}));
}

// A backend that records a run instead of running it and then changes its mind (a capture that
// failed) resets the run: the caller's inputs are bound again and the ops run as usual.
class ResettingBackend final : public TableBackend<TinyTensor> {
 public:
  std::string name() const override { return "resetting"; }
  DeviceKind kind() const override { return DeviceKind::kLocal; }
  bool supports(ir::OpCode) override { return true; }
  Result<TensorData> read(ir::TensorId id) override {
    TW_ASSIGN_OR_RETURN(const TinyTensor* t, tensor(id));
    TensorData d;
    d.meta = t->meta;
    d.bytes = Buffer::copy_of(t->v->data(), t->v->size() * sizeof(float));
    return d;
  }
  bool poisoned_seen = false;

 protected:
  Result<std::vector<TinyTensor>> run(const ir::Op& op,
                                      const std::vector<TensorMeta>& metas) override {
    auto out = std::make_shared<std::vector<float>>(static_cast<size_t>(numel(metas[0].shape)));
    if (const auto* up = std::get_if<ir::FromHost>(&op)) {
      std::memcpy(out->data(), up->data.data.data(), out->size() * sizeof(float));
    } else if (const auto* b = std::get_if<ir::Binary>(&op)) {
      TW_ASSIGN_OR_RETURN(const TinyTensor* x, tensor(b->a.id));
      TW_ASSIGN_OR_RETURN(const TinyTensor* y, tensor(b->b.id));
      for (size_t i = 0; i < out->size(); ++i) (*out)[i] = (*x->v)[i] + (*y->v)[i];
    } else if (const auto* u = std::get_if<ir::Unary>(&op)) {
      TW_ASSIGN_OR_RETURN(const TinyTensor* x, tensor(u->x.id));
      for (size_t i = 0; i < out->size(); ++i) (*out)[i] = -(*x->v)[i];
    } else {
      return unimplemented("resetting: no kernel");
    }
    return std::vector<TinyTensor>{TinyTensor{metas[0], out}};
  }
  Status run_graph_program(GraphRun& run) override {
    for (size_t i = 0; i < run.program().input_metas.size(); ++i) {
      poisoned_seen = poisoned_seen || !run.input(i);
    }
    if (poisoned_seen) return run.run_ops();
    // "Record" on zeros bound in place of the inputs, then throw that away.
    for (size_t i = 0; i < run.program().input_metas.size(); ++i) {
      const TinyTensor* x = run.input(i);
      run.bind_input(i, TinyTensor{x->meta, std::make_shared<std::vector<float>>(x->v->size())});
    }
    EXPECT_TRUE(run.run_ops().ok());
    EXPECT_EQ((*run.output(1)->v)[0], 0.f);
    run.reset();
    return run.run_ops();
  }
};

TEST(GraphRunHook, ResetRunsTheOpsOnTheCallersInputsAndPoisonedInputsShow) {
  ResettingBackend b;
  Result<ir::GraphId> g = b.register_graph(add_neg_graph());
  ASSERT_TRUE(g.ok()) << g.status().message();
  put(b, 10, {1, 2, 3});
  put(b, 11, {10, 20, 30});
  const ir::TensorId in[] = {10, 11};
  const ir::TensorId out[] = {20, 21};
  ASSERT_TRUE(b.run_graph(*g, in, out).ok());
  EXPECT_EQ(get(b, 21), (std::vector<float>{22, 44, 66}));
  // A poisoned input: run_graph_program sees it as null, and the outputs carry its error.
  b.fail(ir::Unary{ir::UnaryKind::kNeg, {10}, {30}}, invalid_argument("broken on purpose"));
  const ir::TensorId bad[] = {30, 11};
  const ir::TensorId out2[] = {22, 23};
  EXPECT_FALSE(b.run_graph(*g, bad, out2).ok());
  EXPECT_TRUE(b.poisoned_seen);
  Result<TensorData> r = b.read(22);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("broken on purpose"), std::string::npos);
}

// ---- on a CUDA device (skipped without one) ----

struct CudaOrWhy {
  std::unique_ptr<Backend> gpu;
  std::string why;
  CudaOrWhy() {
    if (!has_backend("cuda")) {
      why = "this build has no cuda backend (nvcc not found)";
      return;
    }
    Result<std::unique_ptr<Backend>> b = make_backend("cuda:0");
    if (b.ok())
      gpu = std::move(*b);
    else
      why = b.status().message();
  }
};

// x @ w + c, relu and a row sum, c a constant (from_host): run 4 times on fresh inputs as a CUDA
// Graph, and on a second cuda backend op by op (TW_CUDA_GRAPHS=0): the two give the same bits run
// after run (the same kernels run), within f32 rounding of the cpu backend's; the graph was
// recorded once and replayed after.
TEST(CudaDeviceGraph, CapturedOnceReplayedAndEqualToOpByOp) {
  CudaOrWhy on;
  if (!on.gpu) GTEST_SKIP() << "no cuda device: " << on.why;
  setenv("TW_CUDA_GRAPHS", "0", 1);
  Result<std::unique_ptr<Backend>> eager = make_backend("cuda:0");
  unsetenv("TW_CUDA_GRAPHS");
  ASSERT_TRUE(eager.ok()) << eager.status().message();
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  ir::Graph g;
  g.input_ids = {1, 2};
  g.inputs = {TensorMeta{Shape{16, 32}, kF32}, TensorMeta{Shape{32, 8}, kF32}};
  TensorData c;
  c.meta = {Shape{8}, kF32};
  std::vector<float> cv(8);
  for (int i = 0; i < 8; ++i) cv[static_cast<size_t>(i)] = 0.25f * static_cast<float>(i) - 1;
  c.bytes = Buffer::copy_of(cv.data(), 32);
  g.ops.push_back(from_host_of(std::move(c), 3));
  g.ops.push_back(ir::MatMul{{1}, {2}, {4}});
  g.ops.push_back(ir::Binary{ir::BinaryKind::kAdd, {4}, {3}, {5}});
  g.ops.push_back(ir::Unary{ir::UnaryKind::kRelu, {5}, {6}});
  g.ops.push_back(ir::Reduce{ir::ReduceKind::kSum, {6}, {1}, false, {7}});
  g.output_ids = {6, 7};
  std::vector<Backend*> all{on.gpu.get(), eager->get(), cpu.get()};
  std::vector<ir::GraphId> ids;
  for (Backend* b : all) {
    Result<ir::GraphId> id = b->register_graph(g);
    ASSERT_TRUE(id.ok()) << b->name() << ": " << id.status().message();
    ids.push_back(*id);
  }
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  ir::TensorId next = 100;
  std::vector<std::pair<ir::TensorId, std::vector<std::byte>>>
      first;  // run 0's outputs, as read then
  for (int run = 0; run < 4; ++run) {
    std::vector<float> x(16 * 32), w(32 * 8);
    for (float& f : x) f = u(rng);
    for (float& f : w) f = u(rng);
    const ir::TensorId xi = next++, wi = next++, o1 = next++, o2 = next++;
    for (size_t i = 0; i < all.size(); ++i) {
      TensorData dx = data_of(Shape{16, 32}, kF32, x.data(), x.size() * 4);
      TensorData dw = data_of(Shape{32, 8}, kF32, w.data(), w.size() * 4);
      ASSERT_TRUE(all[i]->execute(from_host_of(std::move(dx), xi)).ok());
      ASSERT_TRUE(all[i]->execute(from_host_of(std::move(dw), wi)).ok());
      const ir::TensorId in[] = {xi, wi};
      const ir::TensorId out[] = {o1, o2};
      const Status st = all[i]->run_graph(ids[i], in, out);
      ASSERT_TRUE(st.ok()) << all[i]->name() << " run " << run << ": " << st.message();
    }
    for (ir::TensorId o : {o1, o2}) {
      Result<TensorData> a = on.gpu->read(o), e = (*eager)->read(o), h = cpu->read(o);
      ASSERT_TRUE(a.ok() && e.ok() && h.ok());
      ASSERT_EQ(a->bytes.size(), e->bytes.size());
      EXPECT_EQ(std::memcmp(a->bytes.data(), e->bytes.data(), a->bytes.size()), 0)
          << "run " << run << " output %" << o << ": CUDA Graph and op by op differ";
      for (size_t i = 0; i < a->bytes.size() / 4; ++i) {
        float gv, hv;
        std::memcpy(&gv, a->bytes.data() + 4 * i, 4);
        std::memcpy(&hv, h->bytes.data() + 4 * i, 4);
        ASSERT_LE(std::fabs(gv - hv), 1e-4f * (1 + std::fabs(hv)))
            << "output %" << o << " [" << i << "]";
      }
      if (run == 0)
        first.emplace_back(
            o, std::vector<std::byte>(a->bytes.data(), a->bytes.data() + a->bytes.size()));
    }
  }
  // The first run's outputs are the caller's: later launches did not write them.
  for (const auto& [o, bytes] : first) {
    Result<TensorData> a = on.gpu->read(o);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(std::memcmp(a->bytes.data(), bytes.data(), bytes.size()), 0) << "output %" << o;
  }
  Result<Backend::GraphReplay> r = on.gpu->graph_replay(ids[0]);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->recorded, 1u) << "eager reason: " << r->eager_reason;
  EXPECT_EQ(r->replays, 3u);  // the capture's own launch and two more
  EXPECT_EQ(r->eager, 1u);    // the recording run
  Result<Backend::GraphReplay> off = (*eager)->graph_replay(ids[1]);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->eager, 4u);
  EXPECT_EQ(off->eager_reason, "disabled");
}

// A graph whose op the device refuses is never captured; the counter says why.
TEST(CudaDeviceGraph, AGraphWithAFailingOpRunsOpByOpAndSaysWhy) {
  CudaOrWhy on;
  if (!on.gpu) GTEST_SKIP() << "no cuda device: " << on.why;
  ir::Graph g;
  g.input_ids = {1, 2};
  g.inputs = {TensorMeta{Shape{4}, kI64}, TensorMeta{Shape{4}, kI64}};
  g.ops.push_back(ir::Binary{ir::BinaryKind::kRemainder, {1}, {2}, {3}});  // refused on cuda
  g.output_ids = {3};
  Result<ir::GraphId> id = on.gpu->register_graph(g);
  ASSERT_TRUE(id.ok()) << id.status().message();
  std::vector<int64_t> v{1, 2, 3, 4};
  for (ir::TensorId t : {10, 11}) {
    TensorData d = data_of(Shape{4}, kI64, v.data(), 32);
    ASSERT_TRUE(on.gpu->execute(from_host_of(std::move(d), t)).ok());
  }
  for (ir::TensorId o : {20, 21, 22}) {
    const ir::TensorId in[] = {10, 11};
    const ir::TensorId out[] = {o};
    EXPECT_FALSE(on.gpu->run_graph(*id, in, out).ok());
  }
  Result<Backend::GraphReplay> r = on.gpu->graph_replay(*id);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->recorded, 0u);
  EXPECT_EQ(r->eager, 3u);
  EXPECT_EQ(r->eager_reason, "op_failed");
}

}  // namespace
}  // namespace tw
