// Ops a backend does not support are reported by Backend::supports and refused by execute()
// with an error naming the op and the backend (table_backend.h), never a crash; the refusal
// poisons the op's outputs like any other failure, so a read reports it and the device goes on.
//
// The cpu and torch backends support every op, so the refusal path is exercised with a small
// backend that supports only creating tensors.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <set>

#include "api/sink.h"
#include "backend/registry.h"
#include "backend/table_backend.h"
#include "support/forwarding_backend.h"
#include "support/local_backends.h"
#include "tensorwire/tensorwire.h"

namespace tw {

template <>
struct TableTraits<TensorData> {
  static TensorMeta meta(const TensorData& d) { return d.meta; }
  static uint64_t nbytes(const TensorData& d) { return d.bytes.size(); }
  static std::pair<const void*, size_t> storage(const TensorData& d) {
    return {d.bytes.storage_id(), d.bytes.storage_bytes()};
  }
};

namespace {

// Holds host tensors; executes FromHost and Full of f32 only.
class CreationOnlyBackend final : public TableBackend<TensorData> {
 public:
  std::string name() const override { return "creation-only"; }
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  bool supports(ir::OpCode code) override {
    return code == ir::OpCode::kFromHost || code == ir::OpCode::kFull;
  }
  Result<TensorData> read(ir::TensorId id) override {
    TW_ASSIGN_OR_RETURN(const TensorData* d, tensor(id));
    return *d;
  }

 protected:
  Result<std::vector<TensorData>> run(const ir::Op& op,
                                      const std::vector<TensorMeta>& metas) override {
    TensorData d;
    d.meta = metas.at(0);
    if (const auto* up = std::get_if<ir::FromHost>(&op)) {
      d.bytes = up->data.data;
    } else {
      const auto& full = std::get<ir::Full>(op);
      if (full.dtype != kF32) return unimplemented("full: creation-only makes f32 only");
      d.bytes = Buffer::allocate(static_cast<size_t>(d.numel()) * sizeof(float));
      for (int64_t i = 0; i < d.numel(); ++i)
        d.bytes.as<float>()[i] = static_cast<float>(full.value.as_double());
    }
    return std::vector<TensorData>{std::move(d)};
  }
};

TEST(Unsupported, ExecuteRefusesNamingOpAndBackend) {
  CreationOnlyBackend b;
  ir::Full full;
  full.out = {1};
  full.shape = {2};
  full.value = 1.5;
  ASSERT_TRUE(b.execute(full).ok());
  ir::Unary exp;
  exp.kind = ir::UnaryKind::kExp;
  exp.x = {1};
  exp.out = {2};
  const Status st = b.execute(exp);
  EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(st.message(),
            "exp: not supported by the creation-only backend; run it on a device whose backend "
            "supports it (such as cpu)");
  // The output is poisoned with that error; ops that depend on it fail the same way.
  EXPECT_EQ(b.read(2).status().message(), st.message());
  ir::Binary add;
  add.a = {1};
  add.b = {2};
  add.out = {3};
  EXPECT_EQ(b.execute(add).message(),
            "add: not supported by the creation-only backend; run it on a device whose "
            "backend supports it (such as cpu)");
  // Live tensors are untouched.
  ASSERT_TRUE(b.read(1).ok());
  EXPECT_EQ(b.read(1)->values<float>()[1], 1.5f);
}

TEST(Unsupported, DeviceReportsTheRefusalAtTheReadAndGoesOn) {
  Device d(std::make_shared<detail::Sink>(std::make_unique<CreationOnlyBackend>()));
  Tensor x = full({3}, 2.0, kF32, d);
  Tensor y = x.exp();  // refused, recorded in y
  try {
    (void)y.to_vector<float>();
    FAIL() << "reading a refused op did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exp: not supported by the creation-only backend"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{2.0f, 2.0f, 2.0f}));
}

// Forwards to a registry backend and records the code of every op it executed successfully:
// what the backend can actually run, found independently of what supports() says.
class RecordingBackend final : public testing::ForwardingBackend {
 public:
  explicit RecordingBackend(std::unique_ptr<Backend> inner) : ForwardingBackend(std::move(inner)) {}
  Status execute(const ir::Op& op) override {
    Status st = inner_->execute(op);
    if (st.ok()) executed_->insert(ir::op_code(op));
    return st;
  }
  // Every way an op comes in goes through execute() above (Backend's defaults), so it is recorded.
  Status execute_inferred(const ir::Op& op, std::vector<TensorMeta> metas) override {
    return Backend::execute_inferred(op, std::move(metas));
  }
  Status submit(const ir::Op& op) override { return Backend::submit(op); }
  Status submit_inferred(const ir::Op& op, std::vector<TensorMeta> metas) override {
    return Backend::submit_inferred(op, std::move(metas));
  }
  // Graphs run their ops inside the inner backend, unrecorded; run_every_op issues none.
  // Shared with the test: the device owns the backend.
  std::shared_ptr<std::set<ir::OpCode>> executed() const { return executed_; }

 private:
  std::shared_ptr<std::set<ir::OpCode>> executed_ = std::make_shared<std::set<ir::OpCode>>();
};

// Calls one op of every family of the IR through the Tensor API on `d` (the backward kernels
// through backward passes) and reads every result, so each op reaches the backend.
void run_every_op(const Device& d) {
  std::vector<Tensor> r;
  // Each step on its own: a backend that declines an op (it says so in supports()) still runs
  // the ones after it. A step's refusal is not recorded as run; the comparison names it.
  auto step = [&](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error&) {
    }
  };
  step([&] { r.push_back(arange(0, 12, 1, kF32, d)); });
  const std::vector<float> twelve = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  Tensor x = from_vector<float>(twelve, {3, 4}, d) * 0.25;  // FromHost, BinaryScalar
  Tensor idx = tensor<int64_t>({2, 0, 1}, d);
  step([&] { r.push_back(full({2}, 1.5, kF32, d)); });
  step([&] { r.push_back(eye(3, std::nullopt, kF32, d)); });
  step([&] { r.push_back(rand({4}, kF32, d)); });
  step([&] { r.push_back(randn({4}, kF32, d)); });
  step([&] { r.push_back(bernoulli(full({4}, 0.5, kF32, d))); });
  step([&] { r.push_back(x.exp()); });
  step([&] { r.push_back(x + x); });
  step([&] { r.push_back(where(x > 1.0, x, x.neg())); });
  step([&] { r.push_back(x.clamp(0.5, 2.0)); });
  step([&] { r.push_back(x.masked_fill(x < 1.0, 0.0)); });
  step([&] { r.push_back(x.to(kF64)); });
  step([&] { r.push_back(x.sum(1)); });
  step([&] { r.push_back(x.cumsum(0)); });
  step([&] { r.push_back(x.matmul(x.t())); });
  step([&] { r.push_back(x.t().reshape({12})); });
  step([&] { r.push_back(x.permute({1, 0}).exp()); });
  step([&] { r.push_back(x.slice(1, 0, 4, 2).exp()); });
  step([&] { r.push_back(x.sum(0, true).expand({3, 4}).exp()); });
  step([&] { r.push_back(x.slice_assign(1, 0, 2, 1, zeros({3, 2}, kF32, d))); });
  step([&] { r.push_back(cat({x, x}, 0)); });
  step([&] { r.push_back(x.flip({0})); });
  step([&] { r.push_back(x.repeat({2, 1})); });
  step([&] { r.push_back(x.gather(0, idx.reshape({3, 1}).expand({3, 4}))); });
  step([&] {
    r.push_back(zeros({3, 4}, kF32, d).scatter_add(0, idx.reshape({3, 1}).expand({3, 4}), x));
  });
  step([&] { r.push_back(x.index_select(0, idx)); });
  step([&] { r.push_back(one_hot(idx, 4)); });
  step([&] { r.push_back(x.softmax(1)); });
  step([&] { r.push_back(layer_norm(x, {4})); });
  step([&] {
    std::vector<float> pixels(2 * 3 * 6 * 6);
    for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = 0.01f * static_cast<float>(i);
    Tensor img = from_vector<float>(pixels, {2, 3, 6, 6}, d).detach();
    img.set_requires_grad();
    Tensor w = ones({4, 3, 3, 3}, kF32, d);
    w.set_requires_grad();
    Tensor loss = conv2d(img, w, Tensor{}, {1, 1}, {1, 1}).sum() +
                  max_pool2d(img, {2, 2}, {2, 2}, {0, 0}).sum() +
                  avg_pool2d(img, {2, 2}, {2, 2}, {0, 0}).sum() +
                  adaptive_avg_pool2d(img, {4, 4}).sum();
    loss.backward();
    r.push_back(img.grad());
    r.push_back(w.grad());
  });
  // IndexSelectBackward, through index_select's gradient.
  step([&] {
    Tensor leaf = x.detach();
    leaf.set_requires_grad();
    leaf.index_select(0, idx).sum().backward();
    r.push_back(leaf.grad());
  });
  // LayerNormBackward and GeluBackward, through layer_norm's and gelu's gradients.
  step([&] {
    Tensor leaf = x.detach();
    leaf.set_requires_grad();
    Tensor lw = ones({4}, kF32, d);
    lw.set_requires_grad();
    (layer_norm(leaf, {4}, lw).gelu() * x).sum().backward();
    r.push_back(leaf.grad());
    r.push_back(lw.grad());
  });
  // ScaledDotProductAttention and its backward.
  step([&] {
    Tensor q = (x.reshape({1, 3, 4}) * 0.1).detach();
    q.set_requires_grad();
    Tensor a = scaled_dot_product_attention(q, q, q, {}, true);
    a.sum().backward();
    r.push_back(a);
    r.push_back(q.grad());
  });
  // Linear, through nn::Linear (which issues it for f32 rows where the device supports it).
  step([&] {
    // Its parameters made on the CPU and set on `d`: a device without the random ops still
    // gets the Linear op.
    nn::Linear layer(4, 2, true, {Device::cpu(), kF32});
    layer.weight()->set(ones({2, 4}, kF32, d) * 0.5);
    layer.bias()->set(ones({2}, kF32, d));
    r.push_back(layer.forward_relu(x));
  });
  // AdamStep, through the optimizer (which issues it where the device supports it).
  step([&] {
    auto param = std::make_shared<nn::Parameter>(ones({3, 4}, kF32, d));
    {
      Tensor pv = param->value();
      pv.set_grad(x.detach());
    }
    optim::Adam adam({param});
    adam.step();
    r.push_back(param->value());
  });
  // The quantization ops (protocol 14), each step apart.
  const Tensor rows = ones({3, 64}, kF32, d) * 0.25;
  const Tensor w = ones({2, 64}, kF32, d) * 0.5;
  const Tensor scale = ones({}, kF32, d) * 0.125;
  step([&] { r.push_back(quantize(rows, scale, {}, kI8)); });
  step([&] { r.push_back(dequantize(quantize(rows, scale, {}, kU8), scale)); });
  step([&] { r.push_back(pack_blocks(w, BlockFormat::kQ4_0)); });
  step([&] { r.push_back(unpack_blocks(pack_blocks(w, BlockFormat::kQ8_0), BlockFormat::kQ8_0)); });
  step([&] {
    r.push_back(linear_blocks(rows, pack_blocks(w, BlockFormat::kQ8_0), BlockFormat::kQ8_0));
  });
  step([&] {
    auto [wq, ws] = quantize_weight_int8(w);
    r.push_back(linear_int8(rows, wq, ws));
  });
  for (const Tensor& t : r) step([&] { (void)t.to_bytes(); });
}

// What each registry backend says it supports is what it runs: run_every_op sends an op of every
// code through the backend, and a code counts as run when one of its ops executed without error.
// A supports() that said true for an op whose kernel is missing or refuses, or false for one
// that runs, fails here; so does a new op that run_every_op does not call yet (add it there).
TEST(Unsupported, BackendsSupportExactlyTheOpsTheyRun) {
  for (const std::string& name : backend_names()) {
    Result<std::unique_ptr<Backend>> made = make_backend(name);
    // A backend whose device no machine of this kind has (cuda without a GPU) is skipped, as
    // every suite skips it (support/local_backends.h).
    if (!made.ok() && testing::ci_has_no_such_device(made.status().message())) continue;
    ASSERT_TRUE(made.ok()) << name << ": " << made.status().message();
    auto recording = std::make_unique<RecordingBackend>(std::move(made).value());
    RecordingBackend& backend = *recording;
    const std::shared_ptr<std::set<ir::OpCode>> executed = backend.executed();
    Device d(std::make_shared<detail::Sink>(std::move(recording)));
    try {
      run_every_op(d);
    } catch (const Error&) {
      // The failing op is not recorded as run; the comparison below names it.
    }
    // The CPU backend has a kernel for every op (docs/ops.md, CONTRIBUTING.md); another backend
    // may decline some, as long as it says so.
    const bool must_run_all = name == "cpu";
#define TW_CHECK_SUPPORTED(Name, code, since)                                             \
  {                                                                                       \
    const bool ran = executed->count(ir::OpCode::k##Name) > 0;                            \
    EXPECT_EQ(backend.supports(ir::OpCode::k##Name), ran)                                 \
        << name << " backend, op " << #Name << ": supports() disagrees with what it ran"; \
    EXPECT_TRUE(ran || !must_run_all) << "the cpu backend did not run " << #Name;         \
  }
    TW_OP_LIST(TW_CHECK_SUPPORTED)
#undef TW_CHECK_SUPPORTED
  }
}

}  // namespace
}  // namespace tw
