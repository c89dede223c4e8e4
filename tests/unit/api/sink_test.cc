// The device interface's entry points beyond single ops (api/sink.h, backend/backend.h): copying
// a tensor to another sink (Tensor::to goes through it) and registering and running graphs; and
// the backend registry (backend/registry.h).
#include "api/sink.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "backend/table_backend.h"
#include "tensorwire/tensorwire.h"

namespace tw {
namespace {

#define ASSERT_OK(expr)                     \
  do {                                      \
    const Status st_ = (expr);              \
    ASSERT_TRUE(st_.ok()) << st_.message(); \
  } while (0)

std::shared_ptr<detail::Sink> cpu_sink() {
  Result<std::unique_ptr<Backend>> b = make_backend("cpu");
  EXPECT_TRUE(b.ok()) << b.status().message();
  return std::make_shared<detail::Sink>(std::move(b).value());
}

// f32 host bytes 0, 0.5, 1, ... as a FromHost op.
ir::Op from_host(ir::TensorId id, const Shape& shape) {
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5f * static_cast<float>(i) - 3.0f;
  return ir::FromHost{ir::Out{id}, shape, kF32, ir::Bytes{Buffer::copy_of(v.data(), v.size() * 4)}};
}

std::vector<uint8_t> bytes_of(detail::Sink& sink, ir::TensorId id) {
  Result<TensorData> d = sink.read(id);
  EXPECT_TRUE(d.ok()) << d.status().message();
  if (!d.ok()) return {};
  const auto* p = reinterpret_cast<const uint8_t*>(d->bytes.data());
  return std::vector<uint8_t>(p, p + d->bytes.size());
}

// A backend that only forwards to another device and has no copy of its own, so a copy from it
// takes Backend's default (read, then upload).
class ForwardingBackend final : public Backend {
 public:
  explicit ForwardingBackend(std::shared_ptr<detail::Sink> to) : to_(std::move(to)) {}
  std::string name() const override { return "forwarding(" + to_->str() + ")"; }
  DeviceKind kind() const override { return to_->kind(); }
  bool supports(ir::OpCode code) override { return to_->supports(code); }
  Status execute(const ir::Op& op) override { return to_->submit(op); }
  void set_memory_limit(uint64_t bytes, RefuseFn refuse) override {
    to_->backend().set_memory_limit(bytes, std::move(refuse));
  }
  void fail(const ir::Op& op, const Status& error) override { to_->backend().fail(op, error); }
  Result<TensorData> read(ir::TensorId id) override { return to_->read(id); }
  Result<TensorMeta> meta(ir::TensorId id) const override { return to_->backend().meta(id); }
  Status drop(ir::TensorId id) override {
    to_->drop(id);
    return Status::OK();
  }
  size_t bytes_held() const override { return to_->backend().bytes_held(); }
  Result<ir::GraphId> register_graph(ir::Graph g) override {
    return to_->register_graph(std::move(g));
  }
  Status run_graph(ir::GraphId g, std::span<const ir::TensorId> in,
                   std::span<const ir::TensorId> out) override {
    return to_->run_graph(g, in, out);
  }

 private:
  std::shared_ptr<detail::Sink> to_;
};

// First in the file, before any test makes a torch device: the torch entry is registered, but
// libtorch is loaded only when a torch backend is made.
TEST(Registry, TorchLoadsOnFirstUseOnly) {
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no torch backend";
  auto loaded = [] {
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      if (line.find("libtorch_cpu") != std::string::npos) return true;
    }
    return false;
  };
  EXPECT_TRUE(has_backend("torch"));
  EXPECT_FALSE(loaded());
  Result<std::unique_ptr<Backend>> b = make_backend("torch");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ((*b)->name(), "torch");
  EXPECT_TRUE(loaded());
}

// ---- copy_to ----

TEST(CopyTo, CpuToCpuPreservesValues) {
  Tensor a = tw::arange(0, 12, 1, kF32).reshape({3, 4}) * 0.25;
  Tensor b = a.to(Device::cpu());
  EXPECT_NE(a.id(), b.id());
  EXPECT_EQ(b.shape(), (Shape{3, 4}));
  EXPECT_EQ(b.dtype(), kF32);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

TEST(CopyTo, NonContiguousSourceIsCopiedInLogicalOrder) {
  Tensor a = tw::arange(0, 6, 1, kI64).reshape({2, 3}).permute({1, 0});
  Tensor b = a.to(Device::cpu());
  EXPECT_EQ(b.shape(), (Shape{3, 2}));
  EXPECT_EQ(b.to_vector<int64_t>(), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
}

TEST(CopyTo, BetweenTwoCpuBackendsSharesTheStorage) {
  auto src = cpu_sink();
  auto dst = cpu_sink();
  ASSERT_OK(src->submit(from_host(7, {64})));
  ASSERT_OK(src->copy_to(7, *dst, 9));
  Result<TensorData> a = src->read(7);
  Result<TensorData> b = dst->read(9);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->meta, a->meta);
  EXPECT_EQ(a->bytes.storage_id(), b->bytes.storage_id());  // no byte moved
  EXPECT_EQ(bytes_of(*src, 7), bytes_of(*dst, 9));
  // The copy holds the same storage, and outlives its source.
  const size_t held = src->backend().bytes_held();
  EXPECT_EQ(dst->backend().bytes_held(), held);
  src->drop(7);
  EXPECT_EQ(src->backend().bytes_held(), 0u);
  EXPECT_EQ(dst->backend().bytes_held(), held);
  EXPECT_EQ(bytes_of(*dst, 9).size(), 64u * 4u);
}

TEST(CopyTo, WithinOneSink) {
  auto s = cpu_sink();
  ASSERT_OK(s->submit(from_host(1, {2, 5})));
  ASSERT_OK(s->copy_to(1, *s, 2));
  EXPECT_EQ(bytes_of(*s, 1), bytes_of(*s, 2));
}

TEST(CopyTo, DefaultGoesThroughTheHost) {
  auto inner = cpu_sink();
  detail::Sink src(std::make_unique<ForwardingBackend>(inner));
  auto dst = cpu_sink();
  ASSERT_OK(src.submit(from_host(3, {4, 4})));
  ASSERT_OK(src.copy_to(3, *dst, 5));
  EXPECT_EQ(bytes_of(*inner, 3), bytes_of(*dst, 5));
}

TEST(CopyTo, PoisonedOrUnknownSourceFailsAndCreatesNothing) {
  auto src = cpu_sink();
  auto dst = cpu_sink();
  ASSERT_OK(src->submit(from_host(1, {2, 3})));
  ASSERT_OK(src->submit(from_host(2, {4, 5})));
  ASSERT_OK(src->submit(ir::MatMul{ir::In{1}, ir::In{2}, ir::Out{3}}));  // poisons %3
  Status st = src->copy_to(3, *dst, 4);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("matmul"), std::string::npos) << st.message();
  EXPECT_FALSE(src->copy_to(99, *dst, 4).ok());
  EXPECT_FALSE(dst->backend().meta(4).ok());
  EXPECT_THROW((void)Tensor().to(Device::cpu()), Error);
}

TEST(CopyTo, CpuToTorchAndBack) {
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no torch backend";
  Tensor a = tw::randn({5, 7});
  Tensor t = a.to(Device::torch());
  EXPECT_EQ(t.device(), Device::torch());
  EXPECT_EQ(t.shape(), a.shape());
  EXPECT_EQ(t.to_vector<float>(), a.to_vector<float>());
  Tensor back = (t * 2.0).to(Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_EQ(back.to_vector<float>(), (a * 2.0).to_vector<float>());
  Tensor i = tw::arange(0, 10, 1, kI64).to(Device::torch());
  EXPECT_EQ(i.dtype(), kI64);
  EXPECT_EQ(i.to_vector<int64_t>(), tw::arange(0, 10, 1, kI64).to_vector<int64_t>());
}

// ---- graphs ----

// x f32[4, 3], w f32[3, 5]: h = relu(x @ w); out0 = softmax(h), out1 = sum(h * h) over dim 1.
ir::Graph mlp_graph() {
  ir::Graph g;
  g.input_ids = {10, 11};
  g.inputs = {TensorMeta{{4, 3}, kF32}, TensorMeta{{3, 5}, kF32}};
  g.ops.push_back(ir::MatMul{ir::In{10}, ir::In{11}, ir::Out{12}});
  g.ops.push_back(ir::Unary{ir::UnaryKind::kRelu, ir::In{12}, ir::Out{13}});
  g.ops.push_back(ir::Softmax{ir::In{13}, 1, false, ir::Out{14}});
  g.ops.push_back(ir::Binary{ir::BinaryKind::kMul, ir::In{13}, ir::In{13}, ir::Out{15}});
  g.ops.push_back(ir::Reduce{ir::ReduceKind::kSum, ir::In{15}, {1}, false, ir::Out{16}});
  g.output_ids = {14, 16};
  return g;
}

TEST(Graph, RunIsBitIdenticalToEagerOps) {
  auto graph_sink = cpu_sink();
  auto eager_sink = cpu_sink();
  for (auto* s : {graph_sink.get(), eager_sink.get()}) {
    ASSERT_OK(s->submit(ir::RandNormal{ir::Out{1}, {4, 3}, kF32, 42, 0.0, 1.0}));
    ASSERT_OK(s->submit(ir::RandNormal{ir::Out{2}, {3, 5}, kF32, 43, 0.0, 1.0}));
  }
  Result<ir::GraphId> g = graph_sink->register_graph(mlp_graph());
  ASSERT_TRUE(g.ok()) << g.status().message();
  const ir::TensorId ins[] = {1, 2};
  const ir::TensorId outs[] = {100, 101};
  ASSERT_OK(graph_sink->run_graph(*g, ins, outs));

  // The same ops, submitted one by one with the session's ids.
  for (ir::Op op : mlp_graph().ops) {
    ir::remap_op(op, [](ir::TensorId local) -> ir::TensorId { return local - 9; });
    ASSERT_OK(eager_sink->submit(op));
  }
  EXPECT_EQ(bytes_of(*graph_sink, 100), bytes_of(*eager_sink, 5));
  EXPECT_EQ(bytes_of(*graph_sink, 101), bytes_of(*eager_sink, 7));
  EXPECT_EQ(graph_sink->backend().meta(101)->shape, (Shape{4}));

  // The intermediates are gone (the run gave them ids from kGraphScratchIds up).
  for (ir::TensorId id = kGraphScratchIds; id < kGraphScratchIds + 8; ++id) {
    EXPECT_FALSE(graph_sink->backend().meta(id).ok()) << id;
  }
  EXPECT_TRUE(graph_sink->backend().meta(1).ok());  // the inputs are the caller's

  // A second run with other inputs, by id again.
  ASSERT_OK(graph_sink->submit(from_host(3, {4, 3})));
  const ir::TensorId ins2[] = {3, 2};
  const ir::TensorId outs2[] = {102, 103};
  ASSERT_OK(graph_sink->run_graph(*g, ins2, outs2));
  ASSERT_OK(eager_sink->submit(from_host(30, {4, 3})));
  for (ir::Op op : mlp_graph().ops) {
    ir::remap_op(op, [](ir::TensorId local) -> ir::TensorId {
      return local == 10 ? 30 : local == 11 ? 2 : local + 40;
    });
    ASSERT_OK(eager_sink->submit(op));
  }
  EXPECT_EQ(bytes_of(*graph_sink, 102), bytes_of(*eager_sink, 54));
  EXPECT_EQ(bytes_of(*graph_sink, 103), bytes_of(*eager_sink, 56));
}

TEST(Graph, BadShapeFailsAtRegistrationNamingTheOp) {
  auto s = cpu_sink();
  ir::Graph g = mlp_graph();
  g.inputs[1] = TensorMeta{{4, 5}, kF32};  // x is [4, 3]: matmul's inner dims differ
  Result<ir::GraphId> r = s->register_graph(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("graph op 0 (matmul): matmul:"), std::string::npos)
      << r.status().message();

  g = mlp_graph();
  g.ops[3] = ir::Binary{ir::BinaryKind::kAdd, ir::In{13}, ir::In{10}, ir::Out{15}};  // [4,5]+[4,3]
  r = s->register_graph(g);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("graph op 3 (add)"), std::string::npos)
      << r.status().message();
}

TEST(Graph, MalformedGraphsAreRefused) {
  auto s = cpu_sink();
  auto refused = [&](ir::Graph g, const std::string& want) {
    Result<ir::GraphId> r = s->register_graph(std::move(g));
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  };
  ir::Graph g = mlp_graph();
  g.ops[1] = ir::Unary{ir::UnaryKind::kRelu, ir::In{99}, ir::Out{13}};
  refused(g, "graph op 1 (relu)");  // reads an id nothing made
  g = mlp_graph();
  g.ops[2] = ir::Softmax{ir::In{13}, 1, false, ir::Out{12}};
  refused(g, "graph op 2 (softmax): output id %12 is already assigned");
  g = mlp_graph();
  g.output_ids = {14, 77};
  refused(g, "output %77 is not made by any op");
  g = mlp_graph();
  g.output_ids = {10};
  refused(g, "output %10 is a graph input");
  g = mlp_graph();
  g.output_ids = {14, 14};
  refused(g, "appears twice");
  g = mlp_graph();
  g.input_ids = {10, 10};
  refused(g, "input id %10 appears twice");
  g = mlp_graph();
  g.inputs.pop_back();
  refused(g, "2 input ids but 1 input metas");
}

TEST(Graph, BadRunsFailBeforeAnythingRunsAndPoisonTheirOutputs) {
  auto s = cpu_sink();
  ASSERT_OK(s->submit(from_host(1, {4, 3})));
  ASSERT_OK(s->submit(from_host(2, {3, 5})));
  ASSERT_OK(s->submit(from_host(3, {3, 4})));
  Result<ir::GraphId> g = s->register_graph(mlp_graph());
  ASSERT_TRUE(g.ok()) << g.status().message();
  const ir::TensorId outs[] = {100, 101};
  const size_t held = s->backend().bytes_held();
  ir::TensorId next = 200;
  auto fails = [&](ir::GraphId id, std::vector<ir::TensorId> in, std::vector<ir::TensorId> out,
                   const std::string& want) {
    for (ir::TensorId& o : out) o = o ? o : next++;  // 0: a fresh id
    Status st = s->run_graph(id, in, out);
    ASSERT_FALSE(st.ok()) << want;
    EXPECT_NE(st.message().find(want), std::string::npos) << st.message();
    // The free output ids carry the reason (a peer that sent the run reads it there).
    for (ir::TensorId o : out) {
      if (o == 1) continue;
      Result<TensorData> r = s->read(o);
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().message(), st.message());
    }
  };
  fails(*g + 1, {1, 2}, {0, 0}, "unknown graph");
  fails(*g, {1}, {0, 0}, "the graph takes 2 inputs and gives 2 outputs; 1 and 2");
  fails(*g, {3, 2}, {0, 0}, "input 0 is f32[3, 4], the graph takes f32[4, 3]");
  fails(*g, {1, 99}, {0, 0}, "unknown tensor id %99");
  fails(*g, {1, 2}, {0, 1}, "output id %1 is 0, in use or given twice");
  EXPECT_TRUE(s->read(1).ok());  // a live tensor named as an output is left alone
  fails(*g, {1, 2}, {150, 150}, "given twice");
  EXPECT_EQ(s->backend().bytes_held(), held);  // nothing ran
  ASSERT_OK(s->run_graph(*g, std::vector<ir::TensorId>{1, 2}, outs));
}

TEST(Graph, AFailingOpPoisonsWhatItReaches) {
  auto s = cpu_sink();
  ASSERT_OK(s->submit(from_host(1, {4, 3})));
  ASSERT_OK(s->submit(from_host(2, {3, 5})));
  Result<ir::GraphId> g = s->register_graph(mlp_graph());
  ASSERT_TRUE(g.ok()) << g.status().message();
  // The intermediates' planned buffers were counted at registration (bytes_held includes them);
  // past them there is room for the sum's 16 bytes, not for the softmax's 80.
  const uint64_t held = s->backend().bytes_held();
  s->backend().set_memory_limit(held + 79, [](const ir::Op& op, uint64_t, uint64_t) {
    return resource_exhausted(ir::op_name(op) + ": over the test's limit");
  });
  const ir::TensorId ins[] = {1, 2};
  const ir::TensorId outs[] = {100, 101};
  Status st = s->run_graph(*g, ins, outs);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("softmax: over the test's limit"), std::string::npos) << st.message();
  Result<TensorData> r = s->read(100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), st.message());
  EXPECT_TRUE(s->read(101).ok());  // the sum does not depend on the softmax
  // The intermediates went; the sum's storage is all the run added.
  EXPECT_EQ(s->backend().bytes_held(), held + BufferPool::size_class(16));
  // A poisoned input poisons the outputs of a later run.
  s->backend().set_memory_limit(UINT64_MAX, nullptr);
  ASSERT_OK(s->submit(ir::MatMul{ir::In{1}, ir::In{1}, ir::Out{5}}));  // [4,3]@[4,3]: poisoned
  const ir::TensorId ins2[] = {5, 2};
  const ir::TensorId outs2[] = {102, 103};
  st = s->run_graph(*g, ins2, outs2);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(s->read(102).ok());
}

TEST(Graph, RunsOnTorchAndCopiesToCpu) {
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no torch backend";
  Result<std::unique_ptr<Backend>> b = make_backend("torch");
  ASSERT_TRUE(b.ok()) << b.status().message();
  detail::Sink torch_sink(std::move(b).value());
  auto cpu = cpu_sink();
  ASSERT_OK(torch_sink.submit(from_host(1, {4, 3})));
  ASSERT_OK(torch_sink.submit(from_host(2, {3, 5})));
  Result<ir::GraphId> g = torch_sink.register_graph(mlp_graph());
  ASSERT_TRUE(g.ok()) << g.status().message();
  const ir::TensorId ins[] = {1, 2};
  const ir::TensorId outs[] = {100, 101};
  ASSERT_OK(torch_sink.run_graph(*g, ins, outs));
  ASSERT_OK(torch_sink.copy_to(101, *cpu, 7));  // torch -> cpu through the host
  EXPECT_EQ(bytes_of(*cpu, 7), bytes_of(torch_sink, 101));
  EXPECT_EQ(cpu->backend().meta(7)->shape, (Shape{4}));
}

TEST(Graph, ARemoteDeviceWithNoServerFailsToRegisterClearly) {
  // Registration goes to the server (tests/integration/graph_remote_test.cc); with nothing
  // listening it fails as any remote call does, naming the address.
  Device d = Device::remote("tcp://127.0.0.1:1");
  Result<ir::GraphId> r = d.sink()->register_graph(mlp_graph());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().message();
  EXPECT_NE(r.status().message().find("127.0.0.1:1"), std::string::npos) << r.status().message();
  EXPECT_FALSE(d.sink()->run_graph(1, {}, {}).ok());
}

// ---- the registry ----

TEST(Registry, ListsWhatRegistered) {
  std::vector<std::string> names = backend_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "cpu");
  EXPECT_EQ(has_backend("torch"), Device::torch_available());
  Result<std::unique_ptr<Backend>> r = make_backend("tpu");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("unknown backend 'tpu' (this build has: cpu"),
            std::string::npos)
      << r.status().message();
}

TEST(Registry, ABackendRegistersItself) {
  EXPECT_FALSE(has_backend("test-cpu"));
  EXPECT_TRUE(register_backend(
      "test-cpu", []() -> Result<std::unique_ptr<Backend>> { return make_cpu_backend(); }));
  EXPECT_TRUE(has_backend("test-cpu"));
  Result<std::unique_ptr<Backend>> b = make_backend("test-cpu");
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ((*b)->name(), "cpu");
  Result<std::unique_ptr<Backend>> r = make_backend("tpu");
  EXPECT_NE(r.status().message().find("test-cpu"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tw
