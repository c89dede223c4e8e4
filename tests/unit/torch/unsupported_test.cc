// Ops a backend does not support are reported by Backend::supports and refused by execute()
// with an error naming the op and the backend (table_backend.h), never a crash; the refusal
// poisons the op's outputs like any other failure, so a read reports it and the device goes on.
//
// The cpu and torch backends support every op, so the refusal path is exercised with a small
// backend that supports only creating tensors.
#include <gtest/gtest.h>

#include <cstring>

#include "api/sink.h"
#include "backend/registry.h"
#include "backend/table_backend.h"
#include "tensorwire/tensorwire.h"

namespace tw {

template <>
struct TableTraits<TensorData> {
  static TensorMeta meta(const TensorData& d) { return d.meta; }
  static std::pair<const void*, size_t> storage(const TensorData& d) {
    return {d.bytes.storage_id(), d.bytes.storage_bytes()};
  }
};

namespace {

// Holds host tensors; executes FromHost and Full of f32 only.
class CreationOnlyBackend final : public TableBackend<TensorData> {
 public:
  std::string name() const override { return "creation-only"; }
  bool supports(ir::OpCode code) const override {
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
  Device d(std::make_shared<detail::BackendSink>(std::make_unique<CreationOnlyBackend>(),
                                                 Device::Kind::kCpu));
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

// The registry's backends answer the query for every op of the IR.
TEST(Unsupported, CpuAndTorchSupportEveryOp) {
  for (const std::string& name : backend_names()) {
    Result<std::unique_ptr<Backend>> b = make_backend(name);
    ASSERT_TRUE(b.ok()) << name << ": " << b.status().message();
#define TW_CHECK_SUPPORTED(Name, code) \
  EXPECT_TRUE((*b)->supports(ir::OpCode::k##Name)) << name << " lacks " << #Name;
    TW_OP_LIST(TW_CHECK_SUPPORTED)
#undef TW_CHECK_SUPPORTED
  }
}

}  // namespace
}  // namespace tw
