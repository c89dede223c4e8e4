// The importer's own behaviour on models built here: names, initializers as constants, shapes
// fixed at load, and refusals that name the node, op type and attribute.
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include "tensorwire/onnx.h"
#include "tensorwire/tensorwire.h"

namespace tw::testing {
namespace {

::onnx::ValueInfoProto value_info(const std::string& name, std::vector<int64_t> dims,
                                  const std::string& symbolic = "") {
  ::onnx::ValueInfoProto v;
  v.set_name(name);
  auto* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(::onnx::TensorProto::FLOAT);
  auto* s = t->mutable_shape();
  if (!symbolic.empty()) s->add_dim()->set_dim_param(symbolic);
  for (int64_t d : dims) s->add_dim()->set_dim_value(d);
  return v;
}

// y = Relu(x @ w + b) with w, b initializers; x [N?, 3] (symbolic N when asked).
::onnx::ModelProto linear_relu(bool symbolic_batch) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("import_test");
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  *g->add_input() = symbolic_batch ? value_info("x", {3}, "N") : value_info("x", {2, 3});
  *g->add_output() = value_info("y", {2, 2});
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->add_dims(3);
  w->add_dims(2);
  for (float v : {1.f, 0.f, 0.f, 1.f, 1.f, -1.f}) w->add_float_data(v);
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(::onnx::TensorProto::FLOAT);
  b->add_dims(2);
  for (float v : {0.5f, -10.f}) b->add_float_data(v);
  auto node = [&](const char* op, std::vector<std::string> in, std::string out, const char* name) {
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  node("MatMul", {"x", "w"}, "xw", "mm");
  node("Add", {"xw", "b"}, "z", "add");
  node("Relu", {"z"}, "y", "relu");
  return m;
}

TEST(OnnxImport, NamesInitializersAndValues) {
  onnx::Model model = onnx::load_bytes(linear_relu(false).SerializeAsString());
  EXPECT_EQ(model.input_names, std::vector<std::string>{"x"});
  EXPECT_EQ(model.output_names, std::vector<std::string>{"y"});
  EXPECT_EQ(model.initializer_names, (std::vector<std::string>{"w", "b"}));
  ASSERT_EQ(model.trace.inputs().size(), 1u);
  EXPECT_EQ(model.trace.outputs()[0].shape, (Shape{2, 2}));
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  std::vector<float> y = model.run(Device::cpu(), {x})[0].to_vector<float>();
  // rows: [1 + 3, 2 + 3 - 3] + b = [4.5, -8] -> relu [4.5, 0]; [4 + 6, 5 + 6 - 6]: [10.5, 0]
  EXPECT_EQ(y, (std::vector<float>{4.5f, 0.f, 10.5f, 0.f}));
}

TEST(OnnxImport, SymbolicDimsNeedAShape) {
  const std::string bytes = linear_relu(true).SerializeAsString();
  try {
    onnx::load_bytes(bytes);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("symbolic dim 'N'"), std::string::npos) << e.what();
  }
  onnx::LoadOptions options;
  options.input_shapes["x"] = {5, 3};
  EXPECT_EQ(onnx::load_bytes(bytes, options).trace.outputs()[0].shape, (Shape{5, 2}));
}

TEST(OnnxImport, RefusalsNameNodeOpAndAttribute) {
  ::onnx::ModelProto m = linear_relu(false);
  auto* a = m.mutable_graph()->mutable_node(2)->add_attribute();
  a->set_name("bogus");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(1);
  try {
    onnx::load_bytes(m.SerializeAsString());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'relu' (Relu): attribute 'bogus' is not supported"),
              std::string::npos)
        << e.what();
  }
  m = linear_relu(false);
  m.mutable_graph()->mutable_node(1)->set_op_type("NonMaxSuppression");
  try {
    onnx::load_bytes(m.SerializeAsString());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("node 'add' (NonMaxSuppression): op type "
                                         "NonMaxSuppression is not supported"),
              std::string::npos)
        << e.what();
  }
}

// If folds only with its condition known at load; otherwise the error names the node and the
// input. With the condition given by value, the taken branch's value is the output.
TEST(OnnxImport, IfFoldsAKnownConditionAndRefusesAnUnknownOne) {
  const std::string path = std::string(TW_ONNX_TESTDATA) + "/node/test_if/model.onnx";
  try {
    onnx::load(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(If): input 0 ('cond', cond) must be known at load"),
              std::string::npos)
        << e.what();
  }
  for (bool cond : {true, false}) {
    onnx::LoadOptions o;
    o.input_values["cond"] = from_vector<uint8_t>({cond}, {}).to(kBool);
    const onnx::Model m = onnx::load(path, o);
    EXPECT_TRUE(m.input_names.empty());  // the condition was only a constant
    const std::vector<float> y = m.run(Device::cpu(), {})[0].to_vector<float>();
    ASSERT_EQ(y.size(), 5u);
    // test_if: then_branch gives [1, 2, 3, 4, 5], else_branch [5, 4, 3, 2, 1].
    EXPECT_EQ(y[0], cond ? 1.0f : 5.0f);
  }
}

}  // namespace
}  // namespace tw::testing
