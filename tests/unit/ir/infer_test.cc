// Shape/dtype inference (src/ir/infer.cc) against docs/ops.md: for every op, accepted cases with
// their exact output meta (0-d, zero-size, negative dims, broadcasting, promotion, keepdim) and
// rejected cases with the message a user would see.
#include "ir/infer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "ir/printer.h"

namespace tw::ir {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
const Out kOut{999};

std::string metas_str(const std::vector<TensorMeta>& ms) {
  std::string s;
  for (const TensorMeta& m : ms) s += (s.empty() ? "" : ", ") + meta_str(m);
  return "{" + s + "}";
}

Bytes bytes_of_size(size_t n) { return Bytes{Buffer::zeros(n)}; }

class InferTest : public ::testing::Test {
 protected:
  static Op adam_step(In p, In g, In m, In v, In step_size, In bias2_sqrt) {
    return AdamStep{.param = p,
                    .grad = g,
                    .exp_avg = m,
                    .exp_avg_sq = v,
                    .step_size = step_size,
                    .bias2_sqrt = bias2_sqrt,
                    .param_out = {996},
                    .exp_avg_out = {997},
                    .exp_avg_sq_out = kOut};
  }
  // Registers a tensor and returns it as an input.
  In t(Shape shape, DType dtype = kF32) {
    const TensorId id = next_id_++;
    metas_[id] = TensorMeta{std::move(shape), dtype};
    return In{id};
  }

  MetaLookup lookup() const {
    return [this](TensorId id) -> Result<TensorMeta> {
      auto it = metas_.find(id);
      if (it == metas_.end()) return not_found("unknown tensor %" + std::to_string(id));
      return it->second;
    };
  }

  // `op` is accepted and its one output (or each of its `outputs` outputs) is dtype[shape].
  ::testing::AssertionResult gives(const Op& op, const Shape& shape, DType dtype,
                                   size_t outputs = 1) const {
    auto r = infer(op, lookup());
    if (!r.ok()) {
      return ::testing::AssertionFailure()
             << to_string(op) << " failed: " << r.status().to_string();
    }
    const TensorMeta want{shape, dtype};
    bool all = r->size() == outputs;
    for (const TensorMeta& m : *r) all = all && m == want;
    if (!all) {
      return ::testing::AssertionFailure()
             << to_string(op) << " gave " << metas_str(*r) << ", want " << meta_str(want);
    }
    return ::testing::AssertionSuccess();
  }

  // `op` is rejected with exactly `message` and `code`.
  ::testing::AssertionResult fails_with(const Op& op, const std::string& message,
                                        StatusCode code = StatusCode::kInvalidArgument) const {
    auto r = infer(op, lookup());
    if (r.ok()) {
      return ::testing::AssertionFailure()
             << to_string(op) << " was accepted (" << metas_str(*r) << "), want: " << message;
    }
    if (r.status().message() != message || r.status().code() != code) {
      return ::testing::AssertionFailure()
             << to_string(op) << " failed with \"" << r.status().to_string() << "\", want \""
             << message << "\" (" << status_code_name(code) << ")";
    }
    return ::testing::AssertionSuccess();
  }

  // `op` is rejected with an invalid-argument message that starts with the op's name and
  // contains `part`.
  ::testing::AssertionResult fails_containing(const Op& op, const std::string& part) const {
    auto r = infer(op, lookup());
    if (r.ok()) {
      return ::testing::AssertionFailure()
             << to_string(op) << " was accepted (" << metas_str(*r) << "), want: " << part;
    }
    const std::string& m = r.status().message();
    const std::string prefix = op_name(op) + ": ";
    if (r.status().code() != StatusCode::kInvalidArgument || m.rfind(prefix, 0) != 0 ||
        m.find(part) == std::string::npos) {
      return ::testing::AssertionFailure()
             << to_string(op) << " failed with \"" << r.status().to_string() << "\", want \""
             << prefix << "...\" containing \"" << part << "\"";
    }
    return ::testing::AssertionSuccess();
  }

  std::map<TensorId, TensorMeta> metas_;
  TensorId next_id_ = 1;
};

// ---------------------------------------------------------------- every op, one accepted case

TEST_F(InferTest, AcceptsOneInstanceOfEveryOp) {
  struct Case {
    Op op;
    TensorMeta want;
  };
  const std::vector<Case> cases = {
      {Full{.out = kOut, .shape = {2, 3}, .dtype = kI32, .value = 7}, {{2, 3}, kI32}},
      {Arange{.out = kOut, .start = 0, .end = 5, .step = 1, .dtype = kI64}, {{5}, kI64}},
      {Eye{.out = kOut, .n = 3, .m = 4, .dtype = kF64}, {{3, 4}, kF64}},
      {FromHost{.out = kOut, .shape = {2, 3}, .dtype = kF32, .data = bytes_of_size(24)},
       {{2, 3}, kF32}},
      {RandUniform{.out = kOut, .shape = {4}, .dtype = kF64, .seed = 1, .low = -1, .high = 1},
       {{4}, kF64}},
      {RandNormal{.out = kOut, .shape = {2, 2}, .dtype = kF32, .seed = 1, .mean = 0, .std = 2},
       {{2, 2}, kF32}},
      {Bernoulli{.p = t({3}, kF64), .out = kOut, .seed = 5}, {{3}, kF64}},
      {Unary{.kind = UnaryKind::kExp, .x = t({2}, kI32), .out = kOut}, {{2}, kF32}},
      {Binary{.kind = BinaryKind::kAdd, .a = t({2, 3}), .b = t({3}), .out = kOut}, {{2, 3}, kF32}},
      {BinaryScalar{.kind = BinaryKind::kMul, .a = t({2}, kI32), .s = 2, .out = kOut}, {{2}, kI32}},
      {Where{.cond = t({2, 1}, kBool), .a = t({3}, kI32), .b = t({1}, kF32), .out = kOut},
       {{2, 3}, kF32}},
      {Clamp{.x = t({4}, kI64), .has_lo = true, .lo = 0, .hi = {}, .out = kOut}, {{4}, kI64}},
      {MaskedFill{.x = t({2, 3}), .mask = t({3}, kBool), .value = 0.0, .out = kOut},
       {{2, 3}, kF32}},
      {Cast{.x = t({2}), .dtype = kBF16, .out = kOut}, {{2}, kBF16}},
      {Reduce{.kind = ReduceKind::kSum, .x = t({2, 3, 4}), .dims = {1}, .out = kOut},
       {{2, 4}, kF32}},
      {Cumsum{.x = t({3}, kI32), .dim = 0, .out = kOut}, {{3}, kI64}},
      {MatMul{.a = t({2, 3}), .b = t({3, 4}), .out = kOut}, {{2, 4}, kF32}},
      {Reshape{.x = t({2, 3}), .shape = {3, -1}, .out = kOut}, {{3, 2}, kF32}},
      {Permute{.x = t({2, 3, 4}), .dims = {2, 0, 1}, .out = kOut}, {{4, 2, 3}, kF32}},
      {Expand{.x = t({3, 1}), .shape = {2, 3, 4}, .out = kOut}, {{2, 3, 4}, kF32}},
      {Slice{.x = t({10}), .starts = {2}, .ends = {8}, .steps = {3}, .out = kOut}, {{2}, kF32}},
      {SliceAssign{.x = t({4, 4}),
                   .src = t({4}),
                   .starts = {0, 0},
                   .ends = {2, 4},
                   .steps = {1, 1},
                   .out = kOut},
       {{4, 4}, kF32}},
      {Cat{.xs = {t({2, 3}), t({4, 3})}, .dim = 0, .out = kOut}, {{6, 3}, kF32}},
      {Flip{.x = t({2, 3}), .dims = {0, -1}, .out = kOut}, {{2, 3}, kF32}},
      {Repeat{.x = t({2, 3}), .repeats = {2, 1, 2}, .out = kOut}, {{2, 2, 6}, kF32}},
      {Gather{.x = t({3, 4}), .dim = 0, .index = t({2, 4}, kI64), .out = kOut}, {{2, 4}, kF32}},
      {ScatterAdd{
           .x = t({3, 4}), .dim = 0, .index = t({2, 4}, kI64), .src = t({2, 5}), .out = kOut},
       {{3, 4}, kF32}},
      {IndexSelect{.x = t({3, 4}), .dim = 1, .index = t({5}, kI64), .out = kOut}, {{3, 5}, kF32}},
      {OneHot{.x = t({3}, kI64), .num_classes = 5, .out = kOut}, {{3, 5}, kI64}},
      {Softmax{.x = t({2, 3}), .dim = -1, .out = kOut}, {{2, 3}, kF32}},
      {Conv2d{.x = t({1, 3, 5, 5}), .w = t({8, 3, 3, 3}), .bias = t({8}), .out = kOut},
       {{1, 8, 3, 3}, kF32}},
      {Pool2d{.kind = PoolKind::kMax, .x = t({1, 3, 4, 4}), .out = kOut}, {{1, 3, 2, 2}, kF32}},
      {AdaptiveAvgPool2d{.x = t({2, 3, 7, 5}), .output_size = {3, 2}, .out = kOut},
       {{2, 3, 3, 2}, kF32}},
      {LayerNorm{.x = t({2, 3}), .weight = t({3}), .bias = t({3}), .out = kOut}, {{2, 3}, kF32}},
      {Conv2dBackwardInput{
           .grad = t({1, 8, 3, 3}), .w = t({8, 3, 3, 3}), .x_shape = {1, 3, 5, 5}, .out = kOut},
       {{1, 3, 5, 5}, kF32}},
      {Conv2dBackwardWeight{
           .grad = t({1, 8, 3, 3}), .x = t({1, 3, 5, 5}), .w_shape = {8, 3, 3, 3}, .out = kOut},
       {{8, 3, 3, 3}, kF32}},
      {Pool2dBackward{
           .kind = PoolKind::kMax, .grad = t({1, 3, 2, 2}), .x = t({1, 3, 4, 4}), .out = kOut},
       {{1, 3, 4, 4}, kF32}},
      {AdaptiveAvgPool2dBackward{.grad = t({2, 3, 3, 2}), .input_size = {7, 5}, .out = kOut},
       {{2, 3, 7, 5}, kF32}},
  };
  std::set<OpCode> covered;
  for (const Case& c : cases) {
    EXPECT_TRUE(gives(c.op, c.want.shape, c.want.dtype));
    covered.insert(op_code(c.op));
  }
  covered.insert(OpCode::kLinear);
  EXPECT_TRUE(
      gives(Linear{.x = t({4, 3}), .w = t({5, 3}), .bias = t({5}), .relu = true, .out = kOut},
            {4, 5}, kF32));
  // Ops with several outputs.
  const Op adam = adam_step(t({4, 3}), t({4, 3}), t({4, 3}), t({4, 3}), t({}), t({}));
  EXPECT_TRUE(gives(adam, {4, 3}, kF32, 3));
  covered.insert(op_code(adam));
  const Op attention_grad = ScaledDotProductAttentionBackward{.grad = t({2, 4, 3}),
                                                              .query = t({2, 4, 3}),
                                                              .key = t({2, 4, 3}),
                                                              .value = t({2, 4, 3}),
                                                              .mask = {},
                                                              .causal = true,
                                                              .scale = 0.5,
                                                              .grad_query = {997},
                                                              .grad_key = {998},
                                                              .grad_value = kOut};
  EXPECT_TRUE(gives(attention_grad, {2, 4, 3}, kF32, 3));
  covered.insert(op_code(attention_grad));
  const Op attention = ScaledDotProductAttention{
      .query = t({2, 4, 3}), .key = t({2, 5, 3}), .value = t({2, 5, 6}), .mask = {}, .out = kOut};
  EXPECT_TRUE(gives(attention, {2, 4, 6}, kF32));
  covered.insert(op_code(attention));
  const Op index_grad = IndexSelectBackward{
      .grad = t({2, 6}), .index = t({6}, kI32), .dim = 1, .x_shape = {2, 3}, .out = kOut};
  EXPECT_TRUE(gives(index_grad, {2, 3}, kF32));
  covered.insert(op_code(index_grad));
  EXPECT_TRUE(fails_containing(
      IndexSelectBackward{
          .grad = t({2, 5}), .index = t({6}, kI64), .dim = 1, .x_shape = {2, 3}, .out = kOut},
      "index_select_backward: grad [2, 5] is not the index_select output [2, 6] of x [2, 3] and "
      "index [6]"));
  const Op layer_norm_grad = LayerNormBackward{.grad = t({3}),
                                               .x = t({3}),
                                               .weight = t({3}),
                                               .grad_x = {997},
                                               .grad_weight = {998},
                                               .grad_bias = kOut};
  EXPECT_TRUE(gives(layer_norm_grad, {3}, kF32, 3));
  covered.insert(op_code(layer_norm_grad));
  const Op gelu_grad = GeluBackward{.grad = t({2, 3}, kF64), .x = t({2, 3}, kF64), .out = kOut};
  EXPECT_TRUE(gives(gelu_grad, {2, 3}, kF64));
  covered.insert(op_code(gelu_grad));
  // Quantization (docs/ops.md, "Quantization").
  const Op quant = Quantize{.x = t({2, 70}),
                            .scale = t({2, 3}),
                            .zero_point = t({2, 3}, kU8),
                            .axis = -1,
                            .block = 32,
                            .dtype = kU8,
                            .out = kOut};
  EXPECT_TRUE(gives(quant, {2, 70}, kU8));
  const Op dequant = Dequantize{
      .x = t({4, 6}, kI8), .scale = t({6}), .zero_point = {}, .axis = 1, .block = 0, .out = kOut};
  EXPECT_TRUE(gives(dequant, {4, 6}, kF32));
  const Op pack = PackBlocks{.x = t({3, 64}), .format = BlockFormat::kQ4_0, .out = kOut};
  EXPECT_TRUE(gives(pack, {3, 36}, kU8));
  const Op unpack = UnpackBlocks{.x = t({3, 68}, kU8), .format = BlockFormat::kQ8_0, .out = kOut};
  EXPECT_TRUE(gives(unpack, {3, 64}, kF32));
  const Op lin_blocks = LinearBlocks{.x = t({5, 64}),
                                     .w = t({7, 36}, kU8),
                                     .bias = t({7}),
                                     .format = BlockFormat::kQ4_0,
                                     .out = kOut};
  EXPECT_TRUE(gives(lin_blocks, {5, 7}, kF32));
  const Op lin8 =
      LinearInt8{.x = t({5, 40}), .w = t({3, 40}, kI8), .w_scale = t({3}), .bias = {}, .out = kOut};
  EXPECT_TRUE(gives(lin8, {5, 3}, kF32));
  for (const Op& op : {quant, dequant, pack, unpack, lin_blocks, lin8}) covered.insert(op_code(op));
  EXPECT_TRUE(fails_containing(
      Quantize{.x = t({2, 70}),
               .scale = t({2, 2}),
               .zero_point = {},
               .axis = 1,
               .block = 32,
               .dtype = kI8,
               .out = kOut},
      "quantize: per-block scale [2, 2] must be [2, 3] (x [2, 70] in blocks of 32 along dim 1)"));
  EXPECT_TRUE(fails_containing(Quantize{.x = t({2}),
                                        .scale = t({}),
                                        .zero_point = {},
                                        .axis = 1,
                                        .block = 0,
                                        .dtype = kI32,
                                        .out = kOut},
                               "quantize: dtype i32 is not supported (expected i8 or u8)"));
  EXPECT_TRUE(fails_containing(Quantize{.x = t({}),
                                        .scale = t({3}),
                                        .zero_point = {},
                                        .axis = 0,
                                        .block = 0,
                                        .dtype = kI8,
                                        .out = kOut},
                               "a 0-d x takes one scale"));
  EXPECT_TRUE(fails_containing(Quantize{.x = t({4}),
                                        .scale = t({2}),
                                        .zero_point = {},
                                        .axis = 0,
                                        .block = std::numeric_limits<int64_t>::max(),
                                        .dtype = kI8,
                                        .out = kOut},
                               "per-block scale [2] must be [1]"));
  EXPECT_TRUE(
      fails_containing(PackBlocks{.x = t({2, 33}), .format = BlockFormat::kQ8_0, .out = kOut},
                       "the last dim 33 must be a multiple of 32"));
  EXPECT_TRUE(fails_containing(
      PackBlocks{.x = t({2, 32}), .format = static_cast<BlockFormat>(7), .out = kOut},
      "unknown block format 7"));
  EXPECT_TRUE(fails_containing(
      UnpackBlocks{.x = t({2, 35}, kU8), .format = BlockFormat::kQ8_0, .out = kOut},
      "is not whole q8_0 blocks of 34 bytes"));
  EXPECT_TRUE(fails_containing(LinearBlocks{.x = t({5, 32}),
                                            .w = t({7, 36}, kU8),
                                            .bias = {},
                                            .format = BlockFormat::kQ4_0,
                                            .out = kOut},
                               "x [5, 32] has 32 features but w [7, 36] takes 64"));
  EXPECT_TRUE(fails_containing(
      LinearInt8{.x = t({5, 40}), .w = t({3, 40}, kI8), .w_scale = t({4}), .bias = {}, .out = kOut},
      "w_scale f32[4] must be f32[3]"));
  // A new op added to TW_OP_LIST must get a case here.
  EXPECT_EQ(static_cast<int>(covered.size()), kNumOps);
}

TEST_F(InferTest, EmptyOpAndUnknownInputs) {
  EXPECT_TRUE(fails_with(Op{std::monostate{}}, "empty op"));
  EXPECT_TRUE(fails_with(MatMul{.a = t({2, 2}), .b = In{4242}, .out = kOut},
                         "matmul: input b: unknown tensor %4242", StatusCode::kNotFound));
  EXPECT_TRUE(fails_with(Unary{.kind = UnaryKind::kExp, .x = In{0}, .out = kOut},
                         "exp: input x is missing (id 0)"));
  EXPECT_TRUE(fails_with(Cat{.xs = {t({2}), In{777}}, .out = kOut},
                         "cat: input xs[1]: unknown tensor %777", StatusCode::kNotFound));
  EXPECT_TRUE(fails_with(LayerNorm{.x = t({2, 3}), .weight = In{555}, .bias = {}, .out = kOut},
                         "layer_norm: input weight: unknown tensor %555", StatusCode::kNotFound));
}

// ---------------------------------------------------------------- creation

TEST_F(InferTest, Full) {
  EXPECT_TRUE(gives(Full{.out = kOut, .shape = {}, .dtype = kF32, .value = 1.5}, {}, kF32));
  EXPECT_TRUE(
      gives(Full{.out = kOut, .shape = {2, 0, 3}, .dtype = kF16, .value = {}}, {2, 0, 3}, kF16));
  EXPECT_TRUE(gives(Full{.out = kOut, .shape = {3}, .dtype = kBool, .value = 1}, {3}, kBool));
  EXPECT_TRUE(fails_with(Full{.out = kOut, .shape = {2, -1}, .value = {}},
                         "full: negative dimension in shape [2, -1]"));
  EXPECT_TRUE(fails_with(Full{.out = kOut, .shape = {1 << 30, 1 << 30}, .value = {}},
                         "full: shape [1073741824, 1073741824] has more than 2^48 elements"));
  EXPECT_TRUE(fails_with(Full{.out = kOut, .shape = {kI64Max, kI64Max, 2}, .value = {}},
                         "full: shape [9223372036854775807, 9223372036854775807, 2] has more "
                         "than 2^48 elements"));
  EXPECT_TRUE(fails_with(Full{.out = kOut, .shape = Shape(17, 1), .value = {}},
                         "full: rank 17 exceeds the maximum of 16"));
  EXPECT_TRUE(
      fails_with(Full{.out = kOut, .shape = {2}, .dtype = static_cast<DType>(9), .value = {}},
                 "full: unknown dtype code 9"));
}

TEST_F(InferTest, Arange) {
  auto ar = [](Scalar start, Scalar end, Scalar step, DType d = kI64) {
    return Arange{.out = kOut, .start = start, .end = end, .step = step, .dtype = d};
  };
  EXPECT_TRUE(gives(ar(0, 5, 1), {5}, kI64));
  EXPECT_TRUE(gives(ar(0, 1, 0.3, kF32), {4}, kF32));  // 0, 0.3, 0.6, 0.9
  EXPECT_TRUE(gives(ar(5, 0, -2, kI32), {3}, kI32));   // 5, 3, 1
  EXPECT_TRUE(gives(ar(-1.5, 1.5, 1, kF64), {3}, kF64));
  EXPECT_TRUE(gives(ar(3, 3, 1), {0}, kI64));
  EXPECT_TRUE(gives(ar(3, 3, -1, kU8), {0}, kU8));
  EXPECT_TRUE(fails_with(ar(5, 0, 1), "arange: step 1 does not move from 5 towards 0"));
  EXPECT_TRUE(
      fails_with(ar(0, 2.5, -0.5, kF32), "arange: step -0.5 does not move from 0 towards 2.5"));
  EXPECT_TRUE(fails_with(ar(0, 5, 0), "arange: step must not be 0"));
  EXPECT_TRUE(fails_with(ar(NAN, 5, 1), "arange: start nan is not finite"));
  EXPECT_TRUE(fails_with(ar(0, INFINITY, 1), "arange: end inf is not finite"));
  EXPECT_TRUE(
      fails_with(ar(0, 1e300, 1), "arange: [0, 1e+300) by 1 has 1e+300 elements, more than 2^48"));
  // The span overflows to inf in double: still an error, not a huge allocation.
  EXPECT_TRUE(fails_containing(ar(-1.7e308, 1.7e308, 1.0, kF64), "more than 2^48"));
  EXPECT_TRUE(fails_containing(ar(0, 1, 1e-300, kF64), "more than 2^48"));
  EXPECT_TRUE(
      fails_with(ar(0, 3, 1, kBool),
                 "arange: dtype bool is not supported (expected f32, f64, i32, i64 or u8)"));
  EXPECT_TRUE(
      fails_with(ar(0, 3, 1, kF16), "arange: dtype f16 is storage-only; create f32 and cast it"));
}

TEST_F(InferTest, Eye) {
  EXPECT_TRUE(gives(Eye{.out = kOut, .n = 0, .m = 2, .dtype = kBF16}, {0, 2}, kBF16));
  EXPECT_TRUE(fails_with(Eye{.out = kOut, .n = -1, .m = 2}, "eye: n -1 and m 2 must be >= 0"));
  EXPECT_TRUE(fails_with(Eye{.out = kOut, .n = 2, .m = -5}, "eye: n 2 and m -5 must be >= 0"));
  EXPECT_TRUE(fails_with(Eye{.out = kOut, .n = 1 << 30, .m = 1 << 30},
                         "eye: output shape [1073741824, 1073741824] has more than 2^48 elements"));
  EXPECT_TRUE(fails_with(Eye{.out = kOut, .n = kI64Max, .m = kI64Max},
                         "eye: output shape [9223372036854775807, 9223372036854775807] has more "
                         "than 2^48 elements"));
}

TEST_F(InferTest, FromHost) {
  EXPECT_TRUE(gives(FromHost{.out = kOut, .shape = {3}, .dtype = kBF16, .data = bytes_of_size(6)},
                    {3}, kBF16));
  EXPECT_TRUE(
      gives(FromHost{.out = kOut, .shape = {}, .dtype = kF64, .data = bytes_of_size(8)}, {}, kF64));
  EXPECT_TRUE(
      gives(FromHost{.out = kOut, .shape = {0, 5}, .dtype = kI64, .data = {}}, {0, 5}, kI64));
  EXPECT_TRUE(
      fails_with(FromHost{.out = kOut, .shape = {2, 3}, .dtype = kF32, .data = bytes_of_size(23)},
                 "from_host: data has 23 bytes but f32[2, 3] needs 24"));
  EXPECT_TRUE(fails_with(FromHost{.out = kOut, .shape = {-2}, .dtype = kU8, .data = {}},
                         "from_host: negative dimension in shape [-2]"));
  // The product would overflow 64 bits if it were not checked before multiplying.
  EXPECT_TRUE(
      fails_containing(FromHost{.out = kOut, .shape = {1LL << 62, 4}, .dtype = kF64, .data = {}},
                       "has more than 2^48 elements"));
}

TEST_F(InferTest, RandUniformAndNormal) {
  EXPECT_TRUE(
      gives(RandUniform{.out = kOut, .shape = {0}, .dtype = kF32, .low = 2, .high = 2}, {0}, kF32));
  EXPECT_TRUE(fails_with(RandUniform{.out = kOut, .shape = {2}, .dtype = kI32},
                         "rand_uniform: dtype i32 is not supported (expected f32 or f64)"));
  EXPECT_TRUE(fails_with(RandUniform{.out = kOut, .shape = {2}, .dtype = kBF16},
                         "rand_uniform: dtype bf16 is storage-only; create f32 and cast it"));
  EXPECT_TRUE(fails_with(RandUniform{.out = kOut, .shape = {2}, .low = 1, .high = 0},
                         "rand_uniform: low 1 and high 0 must be finite with low <= high"));
  EXPECT_TRUE(fails_with(RandUniform{.out = kOut, .shape = {2}, .low = NAN, .high = 0},
                         "rand_uniform: low nan and high 0 must be finite with low <= high"));
  EXPECT_TRUE(fails_with(RandUniform{.out = kOut, .shape = {-1}},
                         "rand_uniform: negative dimension in shape [-1]"));

  EXPECT_TRUE(gives(RandNormal{.out = kOut, .shape = {}, .dtype = kF64, .std = 0}, {}, kF64));
  EXPECT_TRUE(fails_with(RandNormal{.out = kOut, .shape = {2}, .std = -1},
                         "rand_normal: mean 0 and std -1 must be finite with std >= 0"));
  EXPECT_TRUE(fails_with(RandNormal{.out = kOut, .shape = {2}, .mean = INFINITY},
                         "rand_normal: mean inf and std 1 must be finite with std >= 0"));
  EXPECT_TRUE(fails_with(RandNormal{.out = kOut, .shape = {2}, .dtype = kBool},
                         "rand_normal: dtype bool is not supported (expected f32 or f64)"));
}

TEST_F(InferTest, Bernoulli) {
  EXPECT_TRUE(gives(Bernoulli{.p = t({}, kF32), .out = kOut}, {}, kF32));
  EXPECT_TRUE(fails_with(Bernoulli{.p = t({2}, kI64), .out = kOut},
                         "bernoulli: dtype i64 is not supported (expected f32 or f64)"));
  EXPECT_TRUE(fails_with(Bernoulli{.p = t({2}, kF16), .out = kOut},
                         "bernoulli: dtype f16 is storage-only; cast to f32 first"));
}

// ---------------------------------------------------------------- elementwise

TEST_F(InferTest, UnaryEveryKindOnF32) {
  for (int k = 0; k < static_cast<int>(UnaryKind::kCount); ++k) {
    const auto kind = static_cast<UnaryKind>(k);
    const DType want = kind == UnaryKind::kLogicalNot ? kBool : kF32;
    EXPECT_TRUE(gives(Unary{.kind = kind, .x = t({2, 3}), .out = kOut}, {2, 3}, want));
  }
}

TEST_F(InferTest, Unary) {
  auto un = [](UnaryKind k, In x) { return Unary{.kind = k, .x = x, .out = kOut}; };
  EXPECT_TRUE(gives(un(UnaryKind::kExp, t({}, kI32)), {}, kF32));
  EXPECT_TRUE(gives(un(UnaryKind::kSqrt, t({4}, kF64)), {4}, kF64));
  EXPECT_TRUE(gives(un(UnaryKind::kSigmoid, t({0, 2}, kBool)), {0, 2}, kF32));
  EXPECT_TRUE(gives(un(UnaryKind::kNeg, t({3}, kU8)), {3}, kU8));
  EXPECT_TRUE(gives(un(UnaryKind::kFloor, t({3}, kI64)), {3}, kI64));
  EXPECT_TRUE(gives(un(UnaryKind::kLogicalNot, t({3}, kI32)), {3}, kBool));
  EXPECT_TRUE(gives(un(UnaryKind::kLogicalNot, t({3}, kBool)), {3}, kBool));
  EXPECT_TRUE(fails_with(un(UnaryKind::kExp, t({3}, kF16)),
                         "exp: dtype f16 is storage-only; cast to f32 first"));
  EXPECT_TRUE(fails_with(un(UnaryKind::kLogicalNot, t({3}, kBF16)),
                         "logical_not: dtype bf16 is storage-only; cast to f32 first"));
  EXPECT_TRUE(fails_with(un(UnaryKind::kNeg, t({3}, kBool)),
                         "neg: dtype bool is not supported (expected a numeric dtype)"));
  EXPECT_TRUE(fails_with(un(UnaryKind::kRound, t({3}, kBool)),
                         "round: dtype bool is not supported (expected a numeric dtype)"));
  EXPECT_TRUE(fails_with(un(static_cast<UnaryKind>(200), t({3})), "unary: unknown kind code 200"));
}

TEST_F(InferTest, Binary) {
  auto bin = [](BinaryKind k, In a, In b) {
    return Binary{.kind = k, .a = a, .b = b, .out = kOut};
  };
  using K = BinaryKind;
  EXPECT_TRUE(gives(bin(K::kAdd, t({2, 1, 4}), t({3, 1})), {2, 3, 4}, kF32));
  EXPECT_TRUE(gives(bin(K::kSub, t({}), t({3})), {3}, kF32));
  EXPECT_TRUE(gives(bin(K::kMul, t({}, kI32), t({}, kI32)), {}, kI32));
  EXPECT_TRUE(gives(bin(K::kMul, t({0, 3}), t({1, 3})), {0, 3}, kF32));
  EXPECT_TRUE(gives(bin(K::kAdd, t({2}, kI32), t({2}, kF32)), {2}, kF32));
  EXPECT_TRUE(gives(bin(K::kAdd, t({2}, kU8), t({2}, kI64)), {2}, kI64));
  EXPECT_TRUE(gives(bin(K::kAdd, t({2}, kBool), t({2}, kU8)), {2}, kU8));
  EXPECT_TRUE(gives(bin(K::kPow, t({2}, kF32), t({2}, kF64)), {2}, kF64));
  EXPECT_TRUE(gives(bin(K::kRemainder, t({2}, kI32), t({2}, kI32)), {2}, kI32));
  EXPECT_TRUE(gives(bin(K::kDiv, t({2}, kI32), t({2}, kI32)), {2}, kF32));
  EXPECT_TRUE(gives(bin(K::kDiv, t({2}, kF64), t({2}, kI32)), {2}, kF64));
  EXPECT_TRUE(gives(bin(K::kDiv, t({2}, kBool), t({2}, kBool)), {2}, kF32));
  EXPECT_TRUE(gives(bin(K::kEq, t({2, 1}), t({3}, kI64)), {2, 3}, kBool));
  EXPECT_TRUE(gives(bin(K::kLt, t({2}, kBool), t({2}, kBool)), {2}, kBool));
  EXPECT_TRUE(gives(bin(K::kLogicalXor, t({2}, kF32), t({2}, kU8)), {2}, kBool));
  EXPECT_TRUE(fails_with(bin(K::kAdd, t({2, 3}), t({4})),
                         "add: shapes [2, 3] and [4] cannot be broadcast (dim 1: 3 vs 4)"));
  EXPECT_TRUE(fails_with(bin(K::kAdd, t({2}, kBool), t({2}, kBool)),
                         "add: both operands are bool; cast one to an integer or float dtype"));
  EXPECT_TRUE(fails_with(bin(K::kMaximum, t({2}, kBool), t({}, kBool)),
                         "maximum: both operands are bool; cast one to an integer or float dtype"));
  EXPECT_TRUE(fails_with(bin(K::kMul, t({2}), t({2}, kBF16)),
                         "mul: dtype bf16 is storage-only; cast to f32 first"));
  EXPECT_TRUE(fails_with(bin(static_cast<K>(17), t({2}), t({2})), "binary: unknown kind code 17"));
}

TEST_F(InferTest, BinaryScalar) {
  auto bs = [](BinaryKind k, In a, Scalar s, bool reverse = false) {
    return BinaryScalar{.kind = k, .a = a, .s = s, .reverse = reverse, .out = kOut};
  };
  using K = BinaryKind;
  EXPECT_TRUE(gives(bs(K::kAdd, t({2}, kF64), 1), {2}, kF64));
  EXPECT_TRUE(gives(bs(K::kAdd, t({2}, kF32), 1.5), {2}, kF32));
  EXPECT_TRUE(gives(bs(K::kAdd, t({2}, kI32), 1), {2}, kI32));
  EXPECT_TRUE(gives(bs(K::kSub, t({2}, kU8), 300, true), {2}, kU8));
  EXPECT_TRUE(gives(bs(K::kMul, t({2}, kI64), 0.5), {2}, kF32));
  EXPECT_TRUE(gives(bs(K::kAdd, t({2}, kBool), 2), {2}, kI64));
  EXPECT_TRUE(gives(bs(K::kAdd, t({2}, kBool), 2.0), {2}, kF32));
  EXPECT_TRUE(gives(bs(K::kDiv, t({2}, kU8), 2), {2}, kF32));
  EXPECT_TRUE(gives(bs(K::kDiv, t({2}, kBool), 2, true), {2}, kF32));
  EXPECT_TRUE(gives(bs(K::kDiv, t({}, kF64), 2), {}, kF64));
  EXPECT_TRUE(gives(bs(K::kLt, t({2}, kI32), 2.5), {2}, kBool));
  EXPECT_TRUE(gives(bs(K::kLogicalOr, t({2}, kBool), 0), {2}, kBool));
  EXPECT_TRUE(fails_with(bs(K::kMul, t({2}, kF16), 2),
                         "mul_scalar: dtype f16 is storage-only; cast to f32 first"));
  EXPECT_TRUE(fails_with(bs(static_cast<K>(99), t({2}), 2), "binary_scalar: unknown kind code 99"));
}

TEST_F(InferTest, Where) {
  EXPECT_TRUE(
      gives(Where{.cond = t({}, kBool), .a = t({2}, kBool), .b = t({2}, kBool), .out = kOut}, {2},
            kBool));
  EXPECT_TRUE(
      gives(Where{.cond = t({3, 1, 1}, kBool), .a = t({2, 1}, kU8), .b = t({4}, kI32), .out = kOut},
            {3, 2, 4}, kI32));
  EXPECT_TRUE(fails_with(Where{.cond = t({2}), .a = t({2}), .b = t({2}), .out = kOut},
                         "where: cond dtype f32 must be bool"));
  EXPECT_TRUE(fails_with(Where{.cond = t({3}, kBool), .a = t({2}), .b = t({2}), .out = kOut},
                         "where: shapes [3] and [2] cannot be broadcast (dim 0: 3 vs 2)"));
  EXPECT_TRUE(fails_with(Where{.cond = t({2}, kBool), .a = t({2}, kF16), .b = t({2}), .out = kOut},
                         "where: dtype f16 is storage-only; cast to f32 first"));
}

TEST_F(InferTest, Clamp) {
  EXPECT_TRUE(
      gives(Clamp{.x = t({2}, kU8), .lo = {}, .has_hi = true, .hi = 2.5, .out = kOut}, {2}, kU8));
  EXPECT_TRUE(gives(Clamp{.x = t({}, kF64), .lo = {}, .hi = {}, .out = kOut}, {}, kF64));
  EXPECT_TRUE(fails_with(Clamp{.x = t({2}, kBool), .lo = {}, .hi = {}, .out = kOut},
                         "clamp: dtype bool is not supported (expected a numeric dtype)"));
  EXPECT_TRUE(fails_with(Clamp{.x = t({2}, kBF16), .lo = {}, .hi = {}, .out = kOut},
                         "clamp: dtype bf16 is storage-only; cast to f32 first"));
}

TEST_F(InferTest, MaskedFill) {
  // The value never changes the dtype: it is converted to x's.
  EXPECT_TRUE(
      gives(MaskedFill{.x = t({2, 3}, kI32), .mask = t({2, 1}, kBool), .value = 1.5, .out = kOut},
            {2, 3}, kI32));
  EXPECT_TRUE(gives(MaskedFill{.x = t({2}, kBool), .mask = t({}, kBool), .value = {}, .out = kOut},
                    {2}, kBool));
  EXPECT_TRUE(
      fails_with(MaskedFill{.x = t({3}), .mask = t({2, 3}, kBool), .value = {}, .out = kOut},
                 "masked_fill: mask shape [2, 3] cannot be broadcast to x shape [3]"));
  EXPECT_TRUE(fails_with(MaskedFill{.x = t({3}), .mask = t({4}, kBool), .value = {}, .out = kOut},
                         "masked_fill: mask shape [4] cannot be broadcast to x shape [3]"));
  EXPECT_TRUE(fails_with(MaskedFill{.x = t({3}), .mask = t({3}, kU8), .value = {}, .out = kOut},
                         "masked_fill: mask dtype u8 must be bool"));
}

TEST_F(InferTest, Cast) {
  EXPECT_TRUE(gives(Cast{.x = t({2, 0}, kBF16), .dtype = kI64, .out = kOut}, {2, 0}, kI64));
  EXPECT_TRUE(gives(Cast{.x = t({}, kBool), .dtype = kF16, .out = kOut}, {}, kF16));
  EXPECT_TRUE(fails_with(Cast{.x = t({2}), .dtype = static_cast<DType>(200), .out = kOut},
                         "cast: unknown dtype code 200"));
}

// ---------------------------------------------------------------- reductions

TEST_F(InferTest, Reduce) {
  auto red = [](ReduceKind k, In x, std::vector<int64_t> dims, bool keepdim = false) {
    return Reduce{.kind = k, .x = x, .dims = std::move(dims), .keepdim = keepdim, .out = kOut};
  };
  using K = ReduceKind;
  EXPECT_TRUE(gives(red(K::kSum, t({2, 3, 4}), {1}, true), {2, 1, 4}, kF32));
  EXPECT_TRUE(gives(red(K::kSum, t({2, 3, 4}), {}), {}, kF32));
  EXPECT_TRUE(gives(red(K::kSum, t({2, 3, 4}), {}, true), {1, 1, 1}, kF32));
  EXPECT_TRUE(gives(red(K::kSum, t({2, 3, 4}), {-1, 0}), {3}, kF32));
  EXPECT_TRUE(gives(red(K::kSum, t({2, 3}, kI32), {0}), {3}, kI64));
  EXPECT_TRUE(gives(red(K::kProd, t({2, 3}, kBool), {}), {}, kI64));
  EXPECT_TRUE(gives(red(K::kMean, t({2, 3}, kI32), {1}), {2}, kF32));
  EXPECT_TRUE(gives(red(K::kMean, t({2, 3}, kF64), {1}), {2}, kF64));
  EXPECT_TRUE(gives(red(K::kMax, t({2, 3}, kU8), {0}), {3}, kU8));
  EXPECT_TRUE(gives(red(K::kMin, t({2, 3}, kBool), {}), {}, kBool));
  EXPECT_TRUE(gives(red(K::kArgmax, t({2, 3, 4}), {1}), {2, 4}, kI64));
  EXPECT_TRUE(gives(red(K::kArgmin, t({2, 3}, kI32), {}), {}, kI64));
  EXPECT_TRUE(gives(red(K::kArgmax, t({2, 3}), {}, true), {1, 1}, kI64));
  // 0-d input: dims may be empty, 0 or -1; keepdim keeps it 0-d.
  EXPECT_TRUE(gives(red(K::kSum, t({}), {}), {}, kF32));
  EXPECT_TRUE(gives(red(K::kSum, t({}, kI32), {0}), {}, kI64));
  EXPECT_TRUE(gives(red(K::kMax, t({}), {-1}, true), {}, kF32));
  // Zero-size: sums are fine; max over a non-empty dim of an empty tensor is too.
  EXPECT_TRUE(gives(red(K::kSum, t({2, 0}), {1}), {2}, kF32));
  EXPECT_TRUE(gives(red(K::kMax, t({0, 3}), {1}), {0}, kF32));

  EXPECT_TRUE(fails_with(red(K::kMax, t({2, 0}), {1}),
                         "max: cannot reduce over dim 1 of size 0 in [2, 0]"));
  EXPECT_TRUE(
      fails_with(red(K::kArgmin, t({0}), {}), "argmin: cannot reduce over dim 0 of size 0 in [0]"));
  EXPECT_TRUE(fails_with(red(K::kArgmax, t({2, 3}), {0, 1}),
                         "argmax: expects at most one dim, got [0, 1]"));
  EXPECT_TRUE(fails_with(red(K::kSum, t({2, 3, 4}), {1, -2}),
                         "sum: dims [1, -2] name dim 1 more than once"));
  EXPECT_TRUE(
      fails_with(red(K::kSum, t({}), {0, -1}), "sum: dims [0, -1] name dim 0 more than once"));
  EXPECT_TRUE(fails_with(red(K::kMean, t({2, 3}), {2}),
                         "mean: dim 2 out of range for a tensor of rank 2 (expected -2..1)"));
  EXPECT_TRUE(fails_with(red(K::kSum, t({}), {1}),
                         "sum: dim 1 out of range for a tensor of rank 0 (expected -1..0)"));
  EXPECT_TRUE(fails_with(red(K::kSum, t({2}, kF16), {}),
                         "sum: dtype f16 is storage-only; cast to f32 first"));
  EXPECT_TRUE(fails_with(red(static_cast<K>(7), t({2}), {}), "reduce: unknown kind code 7"));
}

TEST_F(InferTest, Cumsum) {
  EXPECT_TRUE(gives(Cumsum{.x = t({2, 3}), .dim = -1, .out = kOut}, {2, 3}, kF32));
  EXPECT_TRUE(gives(Cumsum{.x = t({2, 3}, kBool), .dim = 0, .out = kOut}, {2, 3}, kI64));
  EXPECT_TRUE(gives(Cumsum{.x = t({}, kU8), .dim = 0, .out = kOut}, {}, kI64));
  EXPECT_TRUE(fails_with(Cumsum{.x = t({2, 3}), .dim = 2, .out = kOut},
                         "cumsum: dim 2 out of range for a tensor of rank 2 (expected -2..1)"));
  EXPECT_TRUE(fails_with(Cumsum{.x = t({2}, kBF16), .out = kOut},
                         "cumsum: dtype bf16 is storage-only; cast to f32 first"));
}

// ---------------------------------------------------------------- linear algebra

TEST_F(InferTest, MatMul) {
  auto mm = [](In a, In b) { return MatMul{.a = a, .b = b, .out = kOut}; };
  EXPECT_TRUE(gives(mm(t({5, 1, 2, 3}), t({4, 3, 6})), {5, 4, 2, 6}, kF32));
  EXPECT_TRUE(gives(mm(t({2, 3}, kI64), t({7, 3, 1}, kI64)), {7, 2, 1}, kI64));
  EXPECT_TRUE(gives(mm(t({2, 0}, kF64), t({0, 3}, kF64)), {2, 3}, kF64));
  EXPECT_TRUE(gives(mm(t({0, 2, 3}, kI32), t({3, 4}, kI32)), {0, 2, 4}, kI32));
  EXPECT_TRUE(
      fails_with(mm(t({2, 3}), t({4, 5})), "matmul: inner dimensions differ: [2, 3] x [4, 5]"));
  EXPECT_TRUE(
      fails_with(mm(t({3}), t({3, 4})), "matmul: expects tensors of rank >= 2, got [3] x [3, 4]"));
  EXPECT_TRUE(fails_with(mm(t({2, 3}), t({3, 4}, kF64)), "matmul: dtypes differ: f32 x f64"));
  EXPECT_TRUE(fails_with(
      mm(t({2, 3}, kU8), t({3, 4}, kU8)),
      "matmul: dtype u8 is not supported (expected f32, f64, i32, i64, or bf16 with an f32 "
      "result)"));
  EXPECT_TRUE(fails_with(mm(t({2, 3}, kF16), t({3, 4}, kF16)),
                         "matmul: dtype f16 is storage-only; cast to f32 first"));
  EXPECT_TRUE(fails_with(mm(t({2, 2, 3}), t({3, 3, 4})),
                         "matmul: batch dimensions [2] and [3] of [2, 2, 3] x [3, 3, 4] cannot be "
                         "broadcast"));
}

// ---------------------------------------------------------------- movement

TEST_F(InferTest, Reshape) {
  auto rs = [](In x, Shape s) { return Reshape{.x = x, .shape = std::move(s), .out = kOut}; };
  EXPECT_TRUE(gives(rs(t({2, 3}), {-1}), {6}, kF32));
  EXPECT_TRUE(gives(rs(t({2, 3}, kBF16), {1, 3, 2}), {1, 3, 2}, kBF16));
  EXPECT_TRUE(gives(rs(t({1, 1}), {}), {}, kF32));
  EXPECT_TRUE(gives(rs(t({}), {-1}), {1}, kF32));
  EXPECT_TRUE(gives(rs(t({0, 3}), {3, 0}), {3, 0}, kF32));
  EXPECT_TRUE(gives(rs(t({0, 3}), {-1, 3}), {0, 3}, kF32));
  EXPECT_TRUE(fails_with(rs(t({2, 3}), {4, 2}),
                         "reshape: cannot reshape [2, 3] (6 elements) into [4, 2] (8 elements)"));
  EXPECT_TRUE(fails_with(rs(t({2, 3}), {4, -1}),
                         "reshape: cannot reshape [2, 3] (6 elements) into [4, -1]"));
  EXPECT_TRUE(fails_with(rs(t({0, 3}), {0, -1}),
                         "reshape: cannot reshape [0, 3] (0 elements) into [0, -1]: the -1 could "
                         "be any size"));
  EXPECT_TRUE(
      fails_with(rs(t({2, 3}), {-1, -1}), "reshape: at most one -1 is allowed in [-1, -1]"));
  EXPECT_TRUE(fails_with(rs(t({2, 3}), {-2, -3}), "reshape: invalid size -2 in [-2, -3]"));
  EXPECT_TRUE(fails_with(rs(t({2}), {1 << 30, 1 << 30, -1}),
                         "reshape: shape [1073741824, 1073741824, 1] has more than 2^48 elements"));
}

TEST_F(InferTest, Permute) {
  EXPECT_TRUE(gives(Permute{.x = t({2, 3, 4}), .dims = {-1, 0, 1}, .out = kOut}, {4, 2, 3}, kF32));
  EXPECT_TRUE(gives(Permute{.x = t({}, kI32), .dims = {}, .out = kOut}, {}, kI32));
  EXPECT_TRUE(fails_with(Permute{.x = t({2, 3, 4}), .dims = {0, 1}, .out = kOut},
                         "permute: dims [0, 1] must name each of the 3 dims of [2, 3, 4] once"));
  EXPECT_TRUE(fails_with(Permute{.x = t({2, 3}), .dims = {1, -1}, .out = kOut},
                         "permute: dims [1, -1] name dim 1 more than once"));
  EXPECT_TRUE(fails_with(Permute{.x = t({2, 3}), .dims = {0, 5}, .out = kOut},
                         "permute: dim 5 out of range for a tensor of rank 2 (expected -2..1)"));
}

TEST_F(InferTest, Expand) {
  auto ex = [](In x, Shape s) { return Expand{.x = x, .shape = std::move(s), .out = kOut}; };
  EXPECT_TRUE(gives(ex(t({3, 1}), {2, -1, 4}), {2, 3, 4}, kF32));
  EXPECT_TRUE(gives(ex(t({3, 1}, kF16), {3, 0}), {3, 0}, kF16));
  EXPECT_TRUE(gives(ex(t({}), {2, 2}), {2, 2}, kF32));
  EXPECT_TRUE(gives(ex(t({2}), {0, 2}), {0, 2}, kF32));
  EXPECT_TRUE(fails_with(ex(t({2, 3}), {4, 3}),
                         "expand: cannot expand [2, 3] to [4, 3]: dim 0 has size 2, and only a "
                         "size-1 dim can change"));
  EXPECT_TRUE(fails_with(ex(t({3}), {-1, 3}),
                         "expand: invalid size -1 at dim 0 of [-1, 3] (a new leading dim)"));
  EXPECT_TRUE(fails_with(ex(t({1}), {-3}), "expand: invalid size -3 at dim 0 of [-3]"));
  EXPECT_TRUE(fails_with(ex(t({2, 3}), {3}), "expand: cannot expand [2, 3] to fewer dims [3]"));
  EXPECT_TRUE(fails_with(ex(t({1}), {1 << 30, 1 << 30}),
                         "expand: output shape [1073741824, 1073741824] has more than 2^48 "
                         "elements"));
}

TEST_F(InferTest, Slice) {
  auto sl = [](In x, std::vector<int64_t> s, std::vector<int64_t> e, std::vector<int64_t> st) {
    return Slice{
        .x = x, .starts = std::move(s), .ends = std::move(e), .steps = std::move(st), .out = kOut};
  };
  EXPECT_TRUE(gives(sl(t({10, 4}, kBF16), {-3, 0}, {100, 4}, {1, 3}), {3, 2}, kBF16));
  EXPECT_TRUE(gives(sl(t({10}), {8}, {2}, {1}), {0}, kF32));
  EXPECT_TRUE(gives(sl(t({0}), {0}, {5}, {1}), {0}, kF32));
  EXPECT_TRUE(gives(sl(t({}), {}, {}, {}), {}, kF32));
  EXPECT_TRUE(gives(sl(t({5}), {kI64Min}, {kI64Max}, {kI64Max}), {1}, kF32));
  EXPECT_TRUE(fails_with(sl(t({10}), {0}, {5}, {0}), "slice: dim 0: step 0 must be >= 1"));
  EXPECT_TRUE(
      fails_with(sl(t({10, 2}), {0, 0}, {5, 2}, {1, -1}), "slice: dim 1: step -1 must be >= 1"));
  EXPECT_TRUE(fails_with(sl(t({10, 2}), {0}, {5, 2}, {1, 1}),
                         "slice: expects one start, end and step per dim of [10, 2], got [0], "
                         "[5, 2], [1, 1]"));
}

TEST(NormalizeSlice, PythonSemantics) {
  auto ns = [](int64_t s, int64_t e, int64_t st, int64_t n) {
    Result<SliceDim> r = normalize_slice(s, e, st, n);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? std::vector<int64_t>{r->start, r->size, r->step} : std::vector<int64_t>{};
  };
  using V = std::vector<int64_t>;
  EXPECT_EQ(ns(0, 10, 3, 10), (V{0, 4, 3}));      // 0 3 6 9
  EXPECT_EQ(ns(-3, 100, 1, 10), (V{7, 3, 1}));    // x[-3:100]
  EXPECT_EQ(ns(-100, -50, 1, 10), (V{0, 0, 1}));  // both clamp to 0
  EXPECT_EQ(ns(5, 2, 1, 10), (V{5, 0, 1}));
  EXPECT_EQ(ns(3, 3, 2, 10), (V{3, 0, 2}));
  EXPECT_EQ(ns(12, 20, 1, 10), (V{10, 0, 1}));
  EXPECT_EQ(ns(1, -1, 2, 10), (V{1, 4, 2}));  // 1 3 5 7
  EXPECT_EQ(ns(kI64Min, kI64Max, kI64Max, 5), (V{0, 1, kI64Max}));
  EXPECT_EQ(ns(0, 0, 1, 0), (V{0, 0, 1}));
  const Result<SliceDim> bad = normalize_slice(0, 5, 0, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "step 0 must be >= 1");
  EXPECT_FALSE(normalize_slice(0, 5, kI64Min, 10).ok());
}

TEST_F(InferTest, SliceAssign) {
  auto sa = [](In x, In src, std::vector<int64_t> s, std::vector<int64_t> e,
               std::vector<int64_t> st) {
    return SliceAssign{.x = x,
                       .src = src,
                       .starts = std::move(s),
                       .ends = std::move(e),
                       .steps = std::move(st),
                       .out = kOut};
  };
  EXPECT_TRUE(gives(sa(t({4, 4}, kI32), t({2, 4}, kI32), {0, 0}, {2, 4}, {1, 1}), {4, 4}, kI32));
  EXPECT_TRUE(gives(sa(t({4, 4}, kF16), t({}, kF16), {1, 0}, {4, 4}, {2, 2}), {4, 4}, kF16));
  EXPECT_TRUE(gives(sa(t({4}), t({1}), {4}, {4}, {1}), {4}, kF32));  // empty slice
  EXPECT_TRUE(fails_with(sa(t({4, 4}), t({3, 4}), {0, 0}, {2, 4}, {1, 1}),
                         "slice_assign: src shape [3, 4] cannot be broadcast to the slice [2, 4] "
                         "of [4, 4]"));
  EXPECT_TRUE(fails_with(sa(t({4}), t({4}, kF64), {0}, {4}, {1}),
                         "slice_assign: src dtype f64 differs from x dtype f32"));
  EXPECT_TRUE(
      fails_with(sa(t({4}), t({4}), {0}, {4}, {0}), "slice_assign: dim 0: step 0 must be >= 1"));
}

TEST_F(InferTest, Cat) {
  EXPECT_TRUE(
      gives(Cat{.xs = {t({2, 3}), t({2, 1}), t({2, 0})}, .dim = -1, .out = kOut}, {2, 4}, kF32));
  EXPECT_TRUE(gives(Cat{.xs = {t({3}, kBF16)}, .dim = 0, .out = kOut}, {3}, kBF16));
  EXPECT_TRUE(fails_with(Cat{.xs = {}, .out = kOut}, "cat: expects at least one tensor"));
  EXPECT_TRUE(
      fails_with(Cat{.xs = {t({}), t({})}, .out = kOut}, "cat: cannot concatenate 0-d tensors"));
  EXPECT_TRUE(fails_with(Cat{.xs = {t({2, 3}), t({2, 4})}, .dim = 0, .out = kOut},
                         "cat: xs[1] has shape [2, 4] but xs[0] has [2, 3] (sizes must match "
                         "except in dim 0)"));
  EXPECT_TRUE(fails_with(Cat{.xs = {t({2, 3}), t({2, 3, 1})}, .dim = 1, .out = kOut},
                         "cat: xs[1] has shape [2, 3, 1] but xs[0] has [2, 3] (sizes must match "
                         "except in dim 1)"));
  EXPECT_TRUE(fails_with(Cat{.xs = {t({2}), t({2}, kI32)}, .out = kOut},
                         "cat: xs[1] has dtype i32 but xs[0] has f32"));
  EXPECT_TRUE(fails_with(Cat{.xs = {t({2})}, .dim = 1, .out = kOut},
                         "cat: dim 1 out of range for a tensor of rank 1 (expected -1..0)"));
  // Many large inputs: the total is checked as it grows, never overflowing.
  const In big = t({1LL << 47});
  EXPECT_TRUE(fails_with(Cat{.xs = std::vector<In>(5, big), .out = kOut},
                         "cat: concatenated size along dim 0 exceeds 2^48"));
}

TEST_F(InferTest, Flip) {
  EXPECT_TRUE(gives(Flip{.x = t({2, 3}, kF16), .dims = {}, .out = kOut}, {2, 3}, kF16));
  EXPECT_TRUE(gives(Flip{.x = t({}), .dims = {0}, .out = kOut}, {}, kF32));
  EXPECT_TRUE(fails_with(Flip{.x = t({2, 3}), .dims = {1, -1}, .out = kOut},
                         "flip: dims [1, -1] name dim 1 more than once"));
  EXPECT_TRUE(fails_with(Flip{.x = t({2, 3}), .dims = {-3}, .out = kOut},
                         "flip: dim -3 out of range for a tensor of rank 2 (expected -2..1)"));
}

TEST_F(InferTest, Repeat) {
  EXPECT_TRUE(gives(Repeat{.x = t({2, 3}), .repeats = {0, 1}, .out = kOut}, {0, 3}, kF32));
  EXPECT_TRUE(gives(Repeat{.x = t({}, kI32), .repeats = {3}, .out = kOut}, {3}, kI32));
  EXPECT_TRUE(gives(Repeat{.x = t({}), .repeats = {}, .out = kOut}, {}, kF32));
  EXPECT_TRUE(fails_with(Repeat{.x = t({2, 3, 4}), .repeats = {2, 2}, .out = kOut},
                         "repeat: repeats [2, 2] must have at least one entry per dim of "
                         "[2, 3, 4]"));
  EXPECT_TRUE(fails_with(Repeat{.x = t({2}), .repeats = {2, -1}, .out = kOut},
                         "repeat: repeats [2, -1] must be >= 0"));
  EXPECT_TRUE(fails_with(Repeat{.x = t({1LL << 40}), .repeats = {1LL << 40}, .out = kOut},
                         "repeat: repeating [1099511627776] by [1099511627776] gives more than "
                         "2^48 elements"));
  EXPECT_TRUE(fails_with(Repeat{.x = t({2}), .repeats = std::vector<int64_t>(17, 1), .out = kOut},
                         "repeat: repeats [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1] "
                         "exceed the maximum rank of 16"));
  EXPECT_TRUE(fails_with(Repeat{.x = t({1 << 20}), .repeats = {1 << 20, 1 << 20}, .out = kOut},
                         "repeat: output shape [1048576, 1099511627776] has more than 2^48 "
                         "elements"));
}

// ---------------------------------------------------------------- indexing

TEST_F(InferTest, Gather) {
  EXPECT_TRUE(gives(Gather{.x = t({3, 4}, kBF16), .dim = 1, .index = t({3, 7}, kI32), .out = kOut},
                    {3, 7}, kBF16));
  EXPECT_TRUE(gives(Gather{.x = t({}), .dim = 0, .index = t({}, kI64), .out = kOut}, {}, kF32));
  EXPECT_TRUE(fails_with(Gather{.x = t({3, 4}), .index = t({2, 4}, kF32), .out = kOut},
                         "gather: index dtype f32 is not supported (expected i32 or i64)"));
  EXPECT_TRUE(fails_with(Gather{.x = t({3, 4}), .index = t({2}, kI64), .out = kOut},
                         "gather: index [2] must have the rank of x [3, 4]"));
  EXPECT_TRUE(fails_with(Gather{.x = t({3, 4}), .dim = 0, .index = t({2, 5}, kI64), .out = kOut},
                         "gather: index [2, 5] is larger than x [3, 4] in dim 1"));
  EXPECT_TRUE(fails_with(Gather{.x = t({3, 4}), .dim = 2, .index = t({2, 4}, kI64), .out = kOut},
                         "gather: dim 2 out of range for a tensor of rank 2 (expected -2..1)"));
}

TEST_F(InferTest, ScatterAdd) {
  auto sc = [](In x, int64_t dim, In index, In src) {
    return ScatterAdd{.x = x, .dim = dim, .index = index, .src = src, .out = kOut};
  };
  EXPECT_TRUE(gives(sc(t({3, 4}, kI32), -1, t({3, 9}, kI32), t({3, 9}, kI32)), {3, 4}, kI32));
  EXPECT_TRUE(gives(sc(t({}), 0, t({}, kI64), t({})), {}, kF32));
  EXPECT_TRUE(fails_with(sc(t({3}, kBool), 0, t({3}, kI64), t({3}, kBool)),
                         "scatter_add: dtype bool is not supported (expected a numeric dtype)"));
  EXPECT_TRUE(fails_with(sc(t({3}), 0, t({3}, kI64), t({3}, kF64)),
                         "scatter_add: src dtype f64 differs from x dtype f32"));
  EXPECT_TRUE(fails_with(sc(t({3}), 0, t({3}, kU8), t({3})),
                         "scatter_add: index dtype u8 is not supported (expected i32 or i64)"));
  EXPECT_TRUE(
      fails_with(sc(t({3, 4}), 0, t({3}, kI64), t({3, 4})),
                 "scatter_add: x [3, 4], index [3] and src [3, 4] must have the same rank"));
  EXPECT_TRUE(
      fails_with(sc(t({3, 4}), 0, t({5, 4}, kI64), t({4, 4})),
                 "scatter_add: index [5, 4] is larger than src [4, 4] or x [3, 4] in dim 0"));
  EXPECT_TRUE(
      fails_with(sc(t({3, 4}), 0, t({2, 5}, kI64), t({2, 5})),
                 "scatter_add: index [2, 5] is larger than src [2, 5] or x [3, 4] in dim 1"));
}

TEST_F(InferTest, IndexSelect) {
  auto is = [](In x, int64_t dim, In index) {
    return IndexSelect{.x = x, .dim = dim, .index = index, .out = kOut};
  };
  EXPECT_TRUE(gives(is(t({3, 4}, kF16), -2, t({0}, kI32)), {0, 4}, kF16));
  EXPECT_TRUE(gives(is(t({}, kI64), 0, t({1}, kI64)), {}, kI64));
  EXPECT_TRUE(fails_with(is(t({}), 0, t({2}, kI64)),
                         "index_select: a 0-d x takes an index of exactly one element, got [2]"));
  EXPECT_TRUE(
      fails_with(is(t({3}), 0, t({2, 1}, kI64)), "index_select: index must be 1-D, got [2, 1]"));
  EXPECT_TRUE(fails_with(is(t({3}), 0, t({2}, kBool)),
                         "index_select: index dtype bool is not supported (expected i32 or i64)"));
  EXPECT_TRUE(
      fails_with(is(t({3}), 1, t({2}, kI64)),
                 "index_select: dim 1 out of range for a tensor of rank 1 (expected -1..0)"));
}

TEST_F(InferTest, OneHot) {
  EXPECT_TRUE(gives(OneHot{.x = t({}, kU8), .num_classes = 5, .out = kOut}, {5}, kI64));
  EXPECT_TRUE(gives(OneHot{.x = t({0, 2}, kI32), .num_classes = 1, .out = kOut}, {0, 2, 1}, kI64));
  EXPECT_TRUE(fails_with(OneHot{.x = t({3}), .num_classes = 5, .out = kOut},
                         "one_hot: dtype f32 is not supported (expected i32, i64 or u8)"));
  EXPECT_TRUE(fails_with(OneHot{.x = t({3}, kI64), .num_classes = 0, .out = kOut},
                         "one_hot: num_classes 0 must be >= 1"));
  EXPECT_TRUE(fails_with(OneHot{.x = t(Shape(16, 1), kI64), .num_classes = 2, .out = kOut},
                         "one_hot: output rank 17 exceeds the maximum of 16"));
  EXPECT_TRUE(fails_with(OneHot{.x = t({1 << 20}, kI64), .num_classes = 1LL << 40, .out = kOut},
                         "one_hot: output shape [1048576, 1099511627776] has more than 2^48 "
                         "elements"));
}

// ---------------------------------------------------------------- neural

TEST_F(InferTest, Softmax) {
  EXPECT_TRUE(
      gives(Softmax{.x = t({2, 3}, kF64), .dim = 0, .log = true, .out = kOut}, {2, 3}, kF64));
  EXPECT_TRUE(gives(Softmax{.x = t({}), .dim = -1, .out = kOut}, {}, kF32));
  EXPECT_TRUE(fails_with(Softmax{.x = t({2}, kI32), .log = true, .out = kOut},
                         "log_softmax: dtype i32 is not supported (expected f32 or f64)"));
  EXPECT_TRUE(fails_with(Softmax{.x = t({2}, kF16), .out = kOut},
                         "softmax: dtype f16 is storage-only; cast to f32 first"));
  EXPECT_TRUE(fails_with(Softmax{.x = t({2, 3}), .dim = 2, .out = kOut},
                         "softmax: dim 2 out of range for a tensor of rank 2 (expected -2..1)"));
}

TEST(WindowOutSize, FloorDivisionAndSaturation) {
  EXPECT_EQ(window_out_size(5, 3, 1, 0, 1), 3);
  EXPECT_EQ(window_out_size(5, 3, 2, 1, 1), 3);
  EXPECT_EQ(window_out_size(7, 3, 1, 0, 2), 3);
  EXPECT_EQ(window_out_size(1, 3, 1, 0, 1), -1);
  // span -1 with stride 2: floor gives 0 outputs where truncation toward zero would give 1.
  EXPECT_EQ(window_out_size(0, 1, 2, 0, 1), 0);
  EXPECT_EQ(window_out_size(1, 1, 1, kI64Max, 1), kI64Max);
  EXPECT_EQ(window_out_size(1, kI64Max, 1, 0, kI64Max), kI64Min);
  EXPECT_EQ(window_out_size(5, 3, 0, 0, 1), 0);
}

TEST_F(InferTest, Conv2d) {
  auto conv = [](In x, In w, In bias, std::vector<int64_t> stride, std::vector<int64_t> padding,
                 std::vector<int64_t> dilation, int64_t groups) {
    return Conv2d{.x = x,
                  .w = w,
                  .bias = bias,
                  .stride = std::move(stride),
                  .padding = std::move(padding),
                  .dilation = std::move(dilation),
                  .groups = groups,
                  .out = kOut};
  };
  // groups 2, padding 1, stride 2: Ho = (5 + 2 - 2 - 1) / 2 + 1 = 3.
  EXPECT_TRUE(gives(conv(t({1, 4, 5, 5}), t({8, 2, 3, 3}), In{}, {2, 2}, {1, 1}, {1, 1}, 2),
                    {1, 8, 3, 3}, kF32));
  // Dilation 2 on 7x9: Ho = 7 - 4 = 3, Wo = 9 - 4 = 5; stride (1, 2) gives Wo = 3.
  EXPECT_TRUE(gives(
      conv(t({2, 3, 7, 9}, kF64), t({6, 3, 3, 3}, kF64), t({6}, kF64), {1, 2}, {0, 0}, {2, 2}, 1),
      {2, 6, 3, 3}, kF64));
  EXPECT_TRUE(gives(conv(t({0, 3, 5, 5}), t({2, 3, 5, 5}), In{}, {1, 1}, {0, 0}, {1, 1}, 1),
                    {0, 2, 1, 1}, kF32));

  const In x = t({1, 4, 5, 5}), w = t({8, 4, 3, 3});
  EXPECT_TRUE(fails_with(conv(x, w, In{}, {1}, {0, 0}, {1, 1}, 1),
                         "conv2d: stride must have 2 entries, got [1]"));
  EXPECT_TRUE(fails_with(conv(x, w, In{}, {1, 1}, {0, 0, 0}, {1, 1}, 1),
                         "conv2d: padding must have 2 entries, got [0, 0, 0]"));
  EXPECT_TRUE(fails_with(conv(x, w, In{}, {0, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: stride [0, 1] must be >= 1"));
  EXPECT_TRUE(fails_with(conv(x, w, In{}, {1, 1}, {0, -1}, {1, 1}, 1),
                         "conv2d: padding [0, -1] must be >= 0"));
  EXPECT_TRUE(fails_with(conv(x, w, In{}, {1, 1}, {0, 0}, {1, 0}, 1),
                         "conv2d: dilation [1, 0] must be >= 1"));
  EXPECT_TRUE(
      fails_with(conv(x, w, In{}, {1, 1}, {0, 0}, {1, 1}, 0), "conv2d: groups 0 must be >= 1"));
  EXPECT_TRUE(fails_with(conv(x, t({8, 1, 3, 3}), In{}, {1, 1}, {0, 0}, {1, 1}, 3),
                         "conv2d: groups 3 must divide the input channels 4 and the output "
                         "channels 8"));
  EXPECT_TRUE(fails_with(conv(x, t({6, 1, 3, 3}), In{}, {1, 1}, {0, 0}, {1, 1}, 4),
                         "conv2d: groups 4 must divide the input channels 4 and the output "
                         "channels 6"));
  EXPECT_TRUE(fails_with(conv(x, t({8, 3, 3, 3}), In{}, {1, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: w [8, 3, 3, 3] must have 4 input channels per group for x "
                         "[1, 4, 5, 5] and groups 1"));
  EXPECT_TRUE(fails_with(conv(x, t({8, 4, 0, 3}), In{}, {1, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: kernel size of w [8, 4, 0, 3] must be >= 1"));
  EXPECT_TRUE(fails_with(conv(x, w, t({4}), {1, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: bias must have shape [8], got [4]"));
  EXPECT_TRUE(fails_with(conv(x, w, t({8}, kF64), {1, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: bias dtype f64 differs from x dtype f32"));
  EXPECT_TRUE(fails_with(conv(x, t({8, 4, 3, 3}, kF64), In{}, {1, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: w dtype f64 differs from x dtype f32"));
  EXPECT_TRUE(fails_with(conv(t({4, 5, 5}), w, In{}, {1, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: x must be 4-D [N, C, H, W], got [4, 5, 5]"));
  EXPECT_TRUE(fails_with(conv(x, t({8, 4, 3}), In{}, {1, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: w must be 4-D [O, C/groups, kH, kW], got [8, 4, 3]"));
  EXPECT_TRUE(fails_with(
      conv(t({1, 4, 5, 5}, kI32), t({8, 4, 3, 3}, kI32), In{}, {1, 1}, {0, 0}, {1, 1}, 1),
      "conv2d: dtype i32 is not supported (expected f32 or f64)"));
  EXPECT_TRUE(fails_with(conv(t({1, 4, 2, 9}), w, In{}, {1, 1}, {0, 0}, {1, 1}, 1),
                         "conv2d: output size [0, 7] must be >= 1 (x [1, 4, 2, 9], w [8, 4, 3, 3], "
                         "stride [1, 1], padding [0, 0], dilation [1, 1])"));
  // Attributes that would overflow 64-bit arithmetic are errors, not wrapped sizes.
  EXPECT_TRUE(fails_containing(conv(x, w, In{}, {1, 1}, {kI64Max, 0}, {1, 1}, 1),
                               "has more than 2^48 elements"));
  EXPECT_TRUE(fails_containing(conv(x, w, In{}, {1, 1}, {0, 0}, {kI64Max, 1}, 1), "must be >= 1"));
}

TEST_F(InferTest, Pool2d) {
  auto pool = [](PoolKind k, In x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                 std::vector<int64_t> padding) {
    return Pool2d{.kind = k,
                  .x = x,
                  .kernel = std::move(kernel),
                  .stride = std::move(stride),
                  .padding = std::move(padding),
                  .out = kOut};
  };
  using K = PoolKind;
  EXPECT_TRUE(
      gives(pool(K::kAvg, t({1, 3, 4, 4}, kF64), {3, 3}, {1, 1}, {1, 1}), {1, 3, 4, 4}, kF64));
  EXPECT_TRUE(gives(pool(K::kMax, t({2, 1, 5, 7}), {2, 3}, {2, 2}, {0, 1}), {2, 1, 2, 4}, kF32));
  EXPECT_TRUE(gives(pool(K::kMax, t({0, 0, 2, 2}), {2, 2}, {2, 2}, {0, 0}), {0, 0, 1, 1}, kF32));
  EXPECT_TRUE(fails_with(pool(K::kMax, t({1, 1, 8, 8}), {3, 3}, {1, 1}, {2, 0}),
                         "max_pool2d: padding [2, 0] must be at most half the kernel [3, 3]"));
  EXPECT_TRUE(fails_with(pool(K::kAvg, t({1, 1, 8, 8}), {0, 3}, {1, 1}, {0, 0}),
                         "avg_pool2d: kernel [0, 3] must be >= 1"));
  EXPECT_TRUE(fails_with(pool(K::kAvg, t({1, 1, 8, 8}), {2, 2}, {2}, {0, 0}),
                         "avg_pool2d: stride must have 2 entries, got [2]"));
  EXPECT_TRUE(fails_with(pool(K::kAvg, t({1, 1, 8, 8}), {2, 2}, {2, -2}, {0, 0}),
                         "avg_pool2d: stride [2, -2] must be >= 1"));
  EXPECT_TRUE(fails_with(pool(K::kMax, t({1, 8, 8}), {2, 2}, {2, 2}, {0, 0}),
                         "max_pool2d: x must be 4-D [N, C, H, W], got [1, 8, 8]"));
  EXPECT_TRUE(fails_with(pool(K::kMax, t({1, 1, 8, 8}, kI32), {2, 2}, {2, 2}, {0, 0}),
                         "max_pool2d: dtype i32 is not supported (expected f32 or f64)"));
  EXPECT_TRUE(fails_with(pool(K::kMax, t({1, 1, 1, 8}), {2, 2}, {2, 2}, {0, 0}),
                         "max_pool2d: output size [0, 4] must be >= 1 (x [1, 1, 1, 8], kernel "
                         "[2, 2], stride [2, 2], padding [0, 0])"));
  EXPECT_TRUE(fails_with(pool(static_cast<K>(7), t({1, 1, 8, 8}), {2, 2}, {2, 2}, {0, 0}),
                         "pool2d: unknown kind code 7"));
}

TEST_F(InferTest, AdaptiveAvgPool2d) {
  auto ap = [](In x, std::vector<int64_t> size) {
    return AdaptiveAvgPool2d{.x = x, .output_size = std::move(size), .out = kOut};
  };
  EXPECT_TRUE(gives(ap(t({0, 3, 2, 2}, kF64), {5, 1}), {0, 3, 5, 1}, kF64));
  EXPECT_TRUE(fails_with(ap(t({1, 3, 4, 4}), {2}),
                         "adaptive_avg_pool2d: output_size must have 2 entries, got [2]"));
  EXPECT_TRUE(fails_with(ap(t({1, 3, 4, 4}), {0, 2}),
                         "adaptive_avg_pool2d: output_size [0, 2] must be >= 1"));
  EXPECT_TRUE(fails_with(ap(t({1, 3, 0, 4}), {1, 1}),
                         "adaptive_avg_pool2d: x [1, 3, 0, 4] must have H and W >= 1"));
  EXPECT_TRUE(fails_with(ap(t({3, 4, 4}), {1, 1}),
                         "adaptive_avg_pool2d: x must be 4-D [N, C, H, W], got [3, 4, 4]"));
  EXPECT_TRUE(fails_with(ap(t({1, 3, 4, 4}, kU8), {1, 1}),
                         "adaptive_avg_pool2d: dtype u8 is not supported (expected f32 or f64)"));
}

TEST_F(InferTest, LayerNorm) {
  auto ln = [](In x, In weight, In bias, int64_t nd, double eps = 1e-5) {
    return LayerNorm{
        .x = x, .weight = weight, .bias = bias, .normalized_dims = nd, .eps = eps, .out = kOut};
  };
  EXPECT_TRUE(gives(ln(t({2, 3, 4}), t({3, 4}), t({3, 4}), 2), {2, 3, 4}, kF32));
  EXPECT_TRUE(gives(ln(t({2, 3}, kF64), In{}, In{}, 2, 0.0), {2, 3}, kF64));
  EXPECT_TRUE(gives(ln(t({2, 0}), In{}, t({0}), 1), {2, 0}, kF32));
  EXPECT_TRUE(
      fails_with(ln(t({2, 3}), In{}, In{}, 0),
                 "layer_norm: normalized_dims 0 out of range for x [2, 3] (expected 1..2)"));
  EXPECT_TRUE(
      fails_with(ln(t({2, 3}), In{}, In{}, 3),
                 "layer_norm: normalized_dims 3 out of range for x [2, 3] (expected 1..2)"));
  EXPECT_TRUE(fails_with(ln(t({}), In{}, In{}, 1),
                         "layer_norm: normalized_dims 1 out of range for x [] (expected 1..0)"));
  EXPECT_TRUE(fails_with(ln(t({2, 3, 4}), t({4}), In{}, 2),
                         "layer_norm: weight shape [4] must equal the normalized shape [3, 4] of "
                         "x [2, 3, 4]"));
  EXPECT_TRUE(fails_with(ln(t({2, 3}), In{}, t({3}, kF64), 1),
                         "layer_norm: bias dtype f64 differs from x dtype f32"));
  EXPECT_TRUE(
      fails_with(ln(t({2, 3}), In{}, In{}, 1, -1.0), "layer_norm: eps -1 must be finite and >= 0"));
  EXPECT_TRUE(
      fails_with(ln(t({2, 3}), In{}, In{}, 1, NAN), "layer_norm: eps nan must be finite and >= 0"));
  EXPECT_TRUE(fails_with(ln(t({2, 3}, kI64), In{}, In{}, 1),
                         "layer_norm: dtype i64 is not supported (expected f32 or f64)"));
}

// ---------------------------------------------------------------- gradient ops (autograd)

TEST_F(InferTest, LayerNormBackward) {
  auto op = [](In grad, In x, In weight, int64_t nd, double eps = 1e-5) {
    return LayerNormBackward{.grad = grad,
                             .x = x,
                             .weight = weight,
                             .normalized_dims = nd,
                             .eps = eps,
                             .grad_x = {997},
                             .grad_weight = {998},
                             .grad_bias = kOut};
  };
  // x's meta, then the normalized shape twice (also without a weight).
  auto r = infer(op(t({2, 3, 4}, kF64), t({2, 3, 4}, kF64), t({3, 4}, kF64), 2), lookup());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, (std::vector<TensorMeta>{{{2, 3, 4}, kF64}, {{3, 4}, kF64}, {{3, 4}, kF64}}));
  r = infer(op(t({0, 5}), t({0, 5}), In{}, 1), lookup());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, (std::vector<TensorMeta>{{{0, 5}, kF32}, {{5}, kF32}, {{5}, kF32}}));
  // LayerNorm's rules, and grad must be x's meta.
  EXPECT_TRUE(fails_with(op(t({2, 3}), t({2, 3}), t({2}), 1),
                         "layer_norm_backward: weight shape [2] must equal the normalized shape "
                         "[3] of x [2, 3]"));
  EXPECT_TRUE(fails_with(op(t({2, 3}), t({2, 3}), In{}, 3),
                         "layer_norm_backward: normalized_dims 3 out of range for x [2, 3] "
                         "(expected 1..2)"));
  EXPECT_TRUE(fails_with(op(t({2, 3}), t({2, 3}), In{}, 1, -1.0),
                         "layer_norm_backward: eps -1 must be finite and >= 0"));
  EXPECT_TRUE(fails_with(op(t({2, 3}, kI32), t({2, 3}, kI32), In{}, 1),
                         "layer_norm_backward: dtype i32 is not supported (expected f32 or f64)"));
  EXPECT_TRUE(fails_with(op(t({2, 4}), t({2, 3}), In{}, 1),
                         "layer_norm_backward: grad f32[2, 4] must match x f32[2, 3]"));
  EXPECT_TRUE(fails_with(op(t({2, 3}, kF64), t({2, 3}), In{}, 1),
                         "layer_norm_backward: grad f64[2, 3] must match x f32[2, 3]"));
}

TEST_F(InferTest, GeluBackward) {
  auto op = [](In grad, In x) { return GeluBackward{.grad = grad, .x = x, .out = kOut}; };
  EXPECT_TRUE(gives(op(t({4, 5}), t({4, 5})), {4, 5}, kF32));
  EXPECT_TRUE(gives(op(t({}, kF64), t({}, kF64)), {}, kF64));
  EXPECT_TRUE(fails_with(op(t({4}), t({5})), "gelu_backward: grad f32[4] must match x f32[5]"));
  EXPECT_TRUE(fails_with(op(t({4}, kI32), t({4}, kI32)),
                         "gelu_backward: dtype i32 is not supported (expected f32 or f64)"));
}

TEST_F(InferTest, Conv2dBackwardInput) {
  // x [2, 4, 7, 7], w [6, 2, 3, 3], groups 2, stride 2, padding 1 -> grad [2, 6, 4, 4]
  auto op = [](In grad, In w, Shape xs, int64_t groups) {
    return Conv2dBackwardInput{.grad = grad,
                               .w = w,
                               .x_shape = std::move(xs),
                               .stride = {2, 2},
                               .padding = {1, 1},
                               .dilation = {1, 1},
                               .groups = groups,
                               .out = kOut};
  };
  EXPECT_TRUE(
      gives(op(t({2, 6, 4, 4}, kF64), t({6, 2, 3, 3}, kF64), {2, 4, 7, 7}, 2), {2, 4, 7, 7}, kF64));
  // x of 8 columns gives the same output width: both input sizes are valid.
  EXPECT_TRUE(gives(op(t({2, 6, 4, 4}), t({6, 2, 3, 3}), {2, 4, 8, 8}, 2), {2, 4, 8, 8}, kF32));
  EXPECT_TRUE(fails_containing(op(t({2, 6, 4, 4}), t({6, 2, 3, 3}), {2, 4, 9, 9}, 2),
                               "is not the conv2d output [2, 6, 5, 5]"));
  EXPECT_TRUE(fails_containing(op(t({2, 6, 4, 4}), t({6, 2, 3, 3}), {2, 4, 7, 7}, 3),
                               "groups 3 does not fit"));
  EXPECT_TRUE(fails_containing(op(t({2, 6, 4, 4}), t({6, 2, 3, 3}, kF64), {2, 4, 7, 7}, 2),
                               "w dtype f64 differs from grad dtype f32"));
  EXPECT_TRUE(
      fails_containing(op(t({2, 6, 4, 4}), t({6, 2, 3, 3}), {2, 4, 7}, 2), "x shape must be 4-D"));
  EXPECT_TRUE(fails_containing(op(t({2, 6, 4, 4}, kI32), t({6, 2, 3, 3}, kI32), {2, 4, 7, 7}, 2),
                               "dtype i32 is not supported"));
}

TEST_F(InferTest, Conv2dBackwardWeight) {
  auto op = [](In grad, In x, Shape ws) {
    return Conv2dBackwardWeight{.grad = grad,
                                .x = x,
                                .w_shape = std::move(ws),
                                .stride = {1, 1},
                                .padding = {0, 0},
                                .dilation = {2, 2},
                                .groups = 1,
                                .out = kOut};
  };
  EXPECT_TRUE(gives(op(t({1, 5, 2, 2}), t({1, 3, 6, 6}), {5, 3, 3, 3}), {5, 3, 3, 3}, kF32));
  EXPECT_TRUE(fails_containing(op(t({1, 5, 2, 2}), t({1, 3, 6, 6}), {5, 3, 2, 2}),
                               "is not the conv2d output [1, 5, 4, 4]"));
  EXPECT_TRUE(
      fails_containing(op(t({1, 5, 2, 2}), t({1, 3, 6, 6}), {5, 3, 3, -3}), "negative dimension"));
  EXPECT_TRUE(fails_containing(op(t({1, 5, 2, 2}), t({1, 3, 6, 6}, kF64), {5, 3, 3, 3}),
                               "x dtype f64 differs from grad dtype f32"));
}

TEST_F(InferTest, Pool2dBackward) {
  auto op = [](PoolKind kind, In grad, In x) {
    return Pool2dBackward{.kind = kind,
                          .grad = grad,
                          .x = x,
                          .kernel = {3, 3},
                          .stride = {2, 2},
                          .padding = {1, 1},
                          .out = kOut};
  };
  EXPECT_TRUE(
      gives(op(PoolKind::kAvg, t({2, 3, 3, 3}, kF64), t({2, 3, 5, 6}, kF64)), {2, 3, 5, 6}, kF64));
  EXPECT_TRUE(fails_with(op(PoolKind::kMax, t({2, 3, 2, 2}), t({2, 3, 5, 6})),
                         "pool2d_backward: grad f32[2, 3, 2, 2] is not the pool's output "
                         "f32[2, 3, 3, 3]"));
  EXPECT_TRUE(fails_containing(op(PoolKind::kMax, t({2, 3, 3, 3}), t({2, 3, 5, 6}, kF64)),
                               "is not the pool's output"));
  EXPECT_TRUE(fails_with(op(static_cast<PoolKind>(7), t({2, 3, 3, 3}), t({2, 3, 5, 6})),
                         "pool2d: unknown kind code 7"));
}

TEST_F(InferTest, Linear) {
  auto op = [](In x, In w, In b) {
    return Linear{.x = x, .w = w, .bias = b, .relu = false, .out = kOut};
  };
  EXPECT_TRUE(gives(op(t({4, 3}), t({5, 3}), In{}), {4, 5}, kF32));
  EXPECT_TRUE(gives(op(t({0, 3}), t({5, 3}), t({5})), {0, 5}, kF32));
  EXPECT_TRUE(fails_containing(op(t({4, 3}), t({5, 2}), In{}),
                               "linear: x [4, 3] has 3 features but w [5, 2] takes 2"));
  EXPECT_TRUE(fails_containing(op(t({4, 3}), t({5, 3}), t({4})), "bias [4] must be [5]"));
  EXPECT_TRUE(fails_containing(op(t({2, 4, 3}), t({5, 3}), In{}), "x must be [N, in]"));
  EXPECT_TRUE(fails_containing(op(t({4, 3}, kF64), t({5, 3}, kF64), In{}), "all must be f32"));
}

TEST_F(InferTest, ScaledDotProductAttention) {
  auto op = [](In q, In k, In v, In mask) {
    return ScaledDotProductAttention{
        .query = q, .key = k, .value = v, .mask = mask, .causal = false, .scale = 1, .out = kOut};
  };
  EXPECT_TRUE(
      gives(op(t({3, 4}, kF64), t({5, 4}, kF64), t({5, 2}, kF64), t({1, 5}, kBool)), {3, 2}, kF64));
  EXPECT_TRUE(gives(op(t({2, 0, 4}), t({2, 5, 4}), t({2, 5, 2}), In{}), {2, 0, 2}, kF32));
  EXPECT_TRUE(fails_containing(op(t({4}), t({4}), t({4}), In{}), "one rank >= 2"));
  EXPECT_TRUE(
      fails_containing(op(t({2, 3, 4}), t({3, 5, 4}), t({3, 5, 4}), In{}), "equal batch dims"));
  EXPECT_TRUE(fails_containing(op(t({3, 4}), t({5, 4}), t({6, 4}), In{}), "[5, 4] and v [6, 4]"));
  EXPECT_TRUE(fails_containing(op(t({3, 4}), t({5, 4}, kF64), t({5, 4}), In{}), "one dtype"));
  EXPECT_TRUE(fails_containing(op(t({3, 4}), t({5, 4}), t({5, 4}), t({2, 3, 5}, kBool)),
                               "mask [2, 3, 5] does not broadcast to the scores [3, 5]"));
  ScaledDotProductAttention bad = op(t({3, 4}), t({5, 4}), t({5, 4}), In{});
  bad.scale = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(fails_containing(bad, "scale inf must be finite"));
  EXPECT_TRUE(fails_containing(ScaledDotProductAttentionBackward{.grad = t({3, 3}),
                                                                 .query = t({3, 4}),
                                                                 .key = t({5, 4}),
                                                                 .value = t({5, 2}),
                                                                 .mask = {},
                                                                 .grad_query = {997},
                                                                 .grad_key = {998},
                                                                 .grad_value = kOut},
                               "grad f32[3, 3] must match the attention output f32[3, 2]"));
}

TEST_F(InferTest, AdamStep) {
  EXPECT_TRUE(gives(
      adam_step(t({5}, kF64), t({5}, kF64), t({5}, kF64), t({5}, kF64), t({}, kF64), t({}, kF64)),
      {5}, kF64, 3));
  EXPECT_TRUE(fails_containing(adam_step(t({5}), t({4}), t({5}), t({5}), t({}), t({})),
                               "adam_step: grad f32[4] must match param f32[5]"));
  EXPECT_TRUE(fails_containing(adam_step(t({5}), t({5}), t({5}, kF64), t({5}), t({}), t({})),
                               "exp_avg f64[5] must match param f32[5]"));
  EXPECT_TRUE(fails_containing(adam_step(t({5}), t({5}), t({5}), t({5}), t({1}), t({})),
                               "step_size must be a 0-d f32 tensor, got f32[1]"));
  EXPECT_TRUE(fails_containing(
      adam_step(t({5}, kI32), t({5}, kI32), t({5}, kI32), t({5}, kI32), t({}, kI32), t({}, kI32)),
      "dtype i32 is not supported (expected f32 or f64)"));
  AdamStep bad = std::get<AdamStep>(adam_step(t({5}), t({5}), t({5}), t({5}), t({}), t({})));
  bad.beta2 = 1.0;
  EXPECT_TRUE(fails_containing(bad, "betas must lie in [0, 1)"));
  bad.beta2 = 0.9;
  bad.eps = std::numeric_limits<double>::infinity();
  EXPECT_TRUE(fails_containing(bad, "eps inf must be finite"));
}

TEST_F(InferTest, AdaptiveAvgPool2dBackward) {
  auto op = [](In grad, std::vector<int64_t> size) {
    return AdaptiveAvgPool2dBackward{.grad = grad, .input_size = std::move(size), .out = kOut};
  };
  EXPECT_TRUE(gives(op(t({2, 3, 2, 2}), {5, 4}), {2, 3, 5, 4}, kF32));
  EXPECT_TRUE(fails_containing(op(t({2, 3, 2, 2}), {5}), "input_size must have 2 entries"));
  EXPECT_TRUE(fails_containing(op(t({2, 3, 2, 2}), {5, 0}), "input_size [5, 0] must be >= 1"));
  EXPECT_TRUE(fails_containing(op(t({2, 3, 2}), {5, 4}), "grad must be 4-D"));
}

}  // namespace
}  // namespace tw::ir
