// Error cases: what must throw tw::Error, where, and with which words in the message.
//
// Shape, dtype and attribute mistakes are caught by inference when the op is called, so they
// throw at the call site. Data-dependent errors (an index out of range, integer remainder by
// zero) cannot be known until the kernel runs: the call returns, and reading the result (or
// anything computed from it) throws, naming the op and the offending value. Remote devices can
// only behave that way, so every device must.
#include <cmath>
#include <functional>

#include "unit/ops/devices.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

enum class When : uint8_t {
  kCall,  // the op call throws
  kRead,  // the op call returns; reading its result throws
};

struct ErrorCase {
  std::string name;
  std::function<Tensor(const Device&)> fn;
  // Every string must occur in the message. Docs/ops.md: messages start with "<op name>: ".
  std::vector<std::string> message_has;
  When when = When::kCall;
};

Tensor z(const Shape& s, DType d, const Device& dev) { return zeros(s, d, dev); }
Tensor i64s(std::vector<int64_t> v, const Device& dev) {
  Shape s{static_cast<int64_t>(v.size())};
  return from_vector<int64_t>(v, s, dev);
}

std::vector<ErrorCase> error_cases() {
  using D = const Device&;
  // One case to a line or two (name, call, messages, when) (clang-format would break it up):
  // clang-format off
  std::vector<ErrorCase> c = {
      // ---- messages spelled out in docs/ops.md ----
      {"matmul_inner", [](D d) { return z({2, 3}, kF32, d).matmul(z({4, 5}, kF32, d)); },
       {"matmul: inner dimensions differ: [2, 3] x [4, 5]"}},
      {"reshape_numel", [](D d) { return z({2, 3}, kF32, d).reshape({4, 2}); },
       {"reshape: cannot reshape [2, 3] (6 elements) into [4, 2] (8 elements)"}},
      {"storage_only_exp", [](D d) { return z({2}, kF16, d).exp(); },
       {"exp: dtype f16 is storage-only; cast to f32 first"}},
      {"both_bool_add", [](D d) { return z({2}, kBool, d).add(z({2}, kBool, d)); },
       {"add: both operands are bool; cast one to an integer or float dtype"}},
      {"arange_wrong_direction", [](D d) { return arange(5, 0, 1, std::nullopt, d); },
       {"arange: step 1 does not move from 5 towards 0"}},
      {"numeric_rejects_bool", [](D d) { return z({2}, kBool, d).neg(); },
       {"neg: dtype bool is not supported (expected a numeric dtype)"}},
      {"max_empty_dim", [](D d) { return z({2, 0}, kF32, d).max(1); },
       {"max: cannot reduce over dim 1 of size 0 in [2, 0]"}},

      {"attention_shapes", [](D d) { return scaled_dot_product_attention(z({2, 5, 4}, kF32, d), z({2, 6, 3}, kF32, d), z({2, 6, 3}, kF32, d)); },
       {"scaled_dot_product_attention: ", "[2, 5, 4]", "[2, 6, 3]"}},
      {"attention_mask_dtype", [](D d) { return scaled_dot_product_attention(z({5, 4}, kF32, d), z({6, 4}, kF32, d), z({6, 3}, kF32, d), z({5, 6}, kF32, d)); },
       {"scaled_dot_product_attention: mask dtype f32 is not supported (expected bool)"}},
      {"attention_mask_shape", [](D d) { return scaled_dot_product_attention(z({5, 4}, kF32, d), z({6, 4}, kF32, d), z({6, 3}, kF32, d), z({6, 5}, kBool, d)); },
       {"scaled_dot_product_attention: mask [6, 5] does not broadcast to the scores [5, 6]"}},
      {"attention_int", [](D d) { return scaled_dot_product_attention(z({5, 4}, kI32, d), z({6, 4}, kI32, d), z({6, 3}, kI32, d)); },
       {"scaled_dot_product_attention: dtype i32 is not supported (expected f32 or f64)"}},

      // ---- broadcasting ----
      {"broadcast_add", [](D d) { return z({2, 3}, kF32, d) + z({4}, kF32, d); }, {"add: ", "[2, 3]", "[4]"}},
      {"broadcast_eq", [](D d) { return z({2, 3}, kI32, d).eq(z({2, 2}, kI32, d)); }, {"eq: ", "[2, 3]", "[2, 2]"}},
      {"broadcast_where", [](D d) { return where(z({3}, kBool, d), z({2}, kF32, d), z({3}, kF32, d)); }, {"where: "}},
      {"masked_fill_mask_grows_x",
       [](D d) { return z({2, 4}, kF32, d).masked_fill(z({2, 1, 4}, kBool, d), 1); }, {"masked_fill: "}},
      {"matmul_batch", [](D d) { return z({2, 3, 4}, kF32, d).matmul(z({3, 4, 5}, kF32, d)); }, {"matmul: "}},

      // ---- storage-only dtypes outside movement and indexing ----
      {"storage_only_add", [](D d) { return z({2}, kBF16, d).add(z({2}, kBF16, d)); }, {"add: ", "bf16", "storage-only"}},
      {"storage_only_add_scalar", [](D d) { return z({2}, kF16, d).add(1); }, {"add_scalar: ", "f16", "storage-only"}},
      {"storage_only_lt", [](D d) { return z({2}, kF16, d).lt(z({2}, kF16, d)); }, {"lt: ", "storage-only"}},
      {"storage_only_logical_not", [](D d) { return z({2}, kF16, d).logical_not(); }, {"logical_not: ", "storage-only"}},
      {"storage_only_where", [](D d) { return where(z({2}, kBool, d), z({2}, kF16, d), z({2}, kF16, d)); }, {"where: ", "storage-only"}},
      {"storage_only_clamp", [](D d) { return z({2}, kBF16, d).clamp(0, 1); }, {"clamp: ", "storage-only"}},
      {"storage_only_masked_fill", [](D d) { return z({2}, kF16, d).masked_fill(z({2}, kBool, d), 1); }, {"masked_fill: ", "storage-only"}},
      {"storage_only_sum", [](D d) { return z({2}, kF16, d).sum(); }, {"sum: ", "storage-only"}},
      {"storage_only_argmax", [](D d) { return z({2}, kBF16, d).argmax(); }, {"argmax: ", "storage-only"}},
      {"storage_only_cumsum", [](D d) { return z({2}, kF16, d).cumsum(0); }, {"cumsum: ", "storage-only"}},
      {"storage_only_matmul", [](D d) { return z({2, 2}, kF16, d).matmul(z({2, 2}, kF16, d)); }, {"matmul: ", "storage-only"}},
      {"storage_only_softmax", [](D d) { return z({2}, kF16, d).softmax(0); }, {"softmax: ", "storage-only"}},
      {"storage_only_conv2d", [](D d) { return conv2d(z({1, 1, 3, 3}, kF16, d), z({1, 1, 1, 1}, kF16, d)); }, {"conv2d: ", "storage-only"}},
      {"storage_only_max_pool2d", [](D d) { return max_pool2d(z({1, 1, 4, 4}, kBF16, d), {2, 2}); }, {"max_pool2d: ", "storage-only"}},
      {"storage_only_layer_norm", [](D d) { return layer_norm(z({2, 4}, kF16, d), {4}); }, {"layer_norm: ", "storage-only"}},
      {"storage_only_scatter_add",
       [](D d) { return z({3}, kF16, d).scatter_add(0, z({2}, kI64, d), z({2}, kF16, d)); }, {"scatter_add: ", "storage-only"}},
      {"storage_only_bernoulli", [](D d) { return bernoulli(z({2}, kF16, d)); }, {"bernoulli: "}},

      // ---- dtypes ----
      {"matmul_dtypes_differ", [](D d) { return z({2, 2}, kF32, d).matmul(z({2, 2}, kF64, d)); }, {"matmul: ", "f32", "f64"}},
      {"matmul_u8", [](D d) { return z({2, 2}, kU8, d).matmul(z({2, 2}, kU8, d)); }, {"matmul: ", "u8"}},
      {"both_bool_sub", [](D d) { return z({2}, kBool, d) - z({2}, kBool, d); }, {"sub: both operands are bool"}},
      {"both_bool_pow", [](D d) { return z({2}, kBool, d).pow(z({2}, kBool, d)); }, {"pow: both operands are bool"}},
      {"both_bool_maximum", [](D d) { return z({2}, kBool, d).maximum(z({2}, kBool, d)); }, {"maximum: both operands are bool"}},
      {"both_bool_remainder", [](D d) { return z({2}, kBool, d).remainder(z({2}, kBool, d)); }, {"remainder: both operands are bool"}},
      {"clamp_bool", [](D d) { return z({2}, kBool, d).clamp(0, 1); }, {"clamp: ", "bool"}},
      {"abs_bool", [](D d) { return z({2}, kBool, d).abs(); }, {"abs: dtype bool is not supported"}},
      {"where_cond_not_bool", [](D d) { return where(z({2}, kU8, d), z({2}, kF32, d), z({2}, kF32, d)); }, {"where: ", "u8"}},
      {"masked_fill_mask_not_bool", [](D d) { return z({2}, kF32, d).masked_fill(z({2}, kI32, d), 1); }, {"masked_fill: ", "i32"}},
      {"scatter_add_bool", [](D d) { return z({3}, kBool, d).scatter_add(0, z({2}, kI64, d), z({2}, kBool, d)); }, {"scatter_add: ", "bool"}},
      {"scatter_add_src_dtype", [](D d) { return z({3}, kF32, d).scatter_add(0, z({2}, kI64, d), z({2}, kF64, d)); }, {"scatter_add: "}},
      {"gather_index_f32", [](D d) { return z({3}, kF32, d).gather(0, z({2}, kF32, d)); }, {"gather: ", "f32"}},
      {"index_select_index_u8", [](D d) { return z({3}, kF32, d).index_select(0, z({2}, kU8, d)); }, {"index_select: ", "u8"}},
      {"one_hot_f32", [](D d) { return one_hot(z({3}, kF32, d), 4); }, {"one_hot: ", "f32"}},
      {"softmax_i32", [](D d) { return z({3}, kI32, d).softmax(0); }, {"softmax: ", "i32"}},
      {"log_softmax_i64", [](D d) { return z({3}, kI64, d).log_softmax(0); }, {"log_softmax: ", "i64"}},
      {"conv2d_dtypes_differ", [](D d) { return conv2d(z({1, 1, 3, 3}, kF32, d), z({1, 1, 1, 1}, kF64, d)); }, {"conv2d: "}},
      {"conv2d_i32", [](D d) { return conv2d(z({1, 1, 3, 3}, kI32, d), z({1, 1, 1, 1}, kI32, d)); }, {"conv2d: ", "i32"}},
      {"avg_pool2d_i64", [](D d) { return avg_pool2d(z({1, 1, 4, 4}, kI64, d), {2, 2}); }, {"avg_pool2d: ", "i64"}},
      {"layer_norm_i32", [](D d) { return layer_norm(z({2, 4}, kI32, d), {4}); }, {"layer_norm: ", "i32"}},
      {"cat_dtypes_differ", [](D d) { return cat({z({2}, kF32, d), z({2}, kI32, d)}); }, {"cat: "}},
      {"slice_assign_dtype", [](D d) { return z({4}, kF32, d).slice_assign(0, 0, 2, 1, z({2}, kF64, d)); }, {"slice_assign: "}},
      {"arange_bool", [](D d) { return arange(0, 3, 1, kBool, d); }, {"arange: ", "bool"}},
      {"arange_f16", [](D d) { return arange(0, 3, 1, kF16, d); }, {"arange: ", "f16"}},
      {"rand_i32", [](D d) { return rand({2}, kI32, d); }, {"i32"}},
      {"randn_f16", [](D d) { return randn({2}, kF16, d); }, {"f16"}},
      {"bernoulli_i32", [](D d) { return bernoulli(z({2}, kI32, d)); }, {"bernoulli: ", "i32"}},

      // ---- dims ----
      {"sum_bad_dim", [](D d) { return z({2, 3}, kF32, d).sum(2); }, {"sum: ", "2"}},
      {"sum_bad_negative_dim", [](D d) { return z({2, 3}, kF32, d).sum(-3); }, {"sum: ", "-3"}},
      {"sum_repeated_dims", [](D d) { return z({2, 3}, kF32, d).sum(std::vector<int64_t>{1, -1}); }, {"sum: "}},
      {"mean_0d_dim_1", [](D d) { return z({}, kF32, d).mean(1); }, {"mean: "}},
      {"cumsum_bad_dim", [](D d) { return z({2, 3}, kF32, d).cumsum(2); }, {"cumsum: "}},
      {"softmax_bad_dim", [](D d) { return z({2, 3}, kF32, d).softmax(5); }, {"softmax: "}},
      {"argmax_bad_dim", [](D d) { return z({2, 3}, kF32, d).argmax(-3); }, {"argmax: "}},
      {"permute_repeated", [](D d) { return z({2, 3}, kF32, d).permute({0, 0}); }, {"permute: "}},
      {"permute_length", [](D d) { return z({2, 3}, kF32, d).permute({0}); }, {"permute: "}},
      {"flip_repeated", [](D d) { return z({2, 3}, kF32, d).flip({1, -1}); }, {"flip: "}},
      {"gather_bad_dim", [](D d) { return z({2, 3}, kF32, d).gather(2, z({2, 3}, kI64, d)); }, {"gather: "}},
      {"index_select_bad_dim", [](D d) { return z({2, 3}, kF32, d).index_select(-3, z({1}, kI64, d)); }, {"index_select: "}},
      {"cat_bad_dim", [](D d) { return cat({z({2}, kF32, d), z({2}, kF32, d)}, 1); }, {"cat: "}},
      {"unsqueeze_bad_dim", [](D d) { return z({2, 3}, kF32, d).unsqueeze(4); }, {}},
      {"transpose_bad_dim", [](D d) { return z({2, 3}, kF32, d).transpose(0, 2); }, {}},

      // ---- shapes and attributes ----
      {"reshape_two_inferred", [](D d) { return z({2, 3}, kF32, d).reshape({-1, -1}); }, {"reshape: "}},
      {"reshape_infer_with_zero", [](D d) { return z({0, 3}, kF32, d).reshape({0, -1}); }, {"reshape: "}},
      {"reshape_negative", [](D d) { return z({2, 3}, kF32, d).reshape({-2, -3}); }, {"reshape: "}},
      {"expand_non_one", [](D d) { return z({3, 2}, kF32, d).expand({3, 4}); }, {"expand: "}},
      {"expand_fewer_dims", [](D d) { return z({2, 3}, kF32, d).expand({3}); }, {"expand: "}},
      {"expand_minus_one_leading", [](D d) { return z({3}, kF32, d).expand({-1, 3}); }, {"expand: "}},
      {"slice_step_zero", [](D d) { return z({4}, kF32, d).slice(0, 0, 4, 0); }, {"slice: "}},
      {"slice_step_negative", [](D d) { return z({4}, kF32, d).slice(0, 3, 0, -1); }, {"slice: "}},
      {"slice_assign_src_shape", [](D d) { return z({4, 5}, kF32, d).slice_assign(1, 0, 2, 1, z({4, 3}, kF32, d)); }, {"slice_assign: "}},
      {"cat_empty_list", [](D) { return cat({}); }, {"cat: "}},
      {"cat_sizes_differ", [](D d) { return cat({z({2, 3}, kF32, d), z({2, 4}, kF32, d)}, 0); }, {"cat: "}},
      {"cat_ranks_differ", [](D d) { return cat({z({2, 3}, kF32, d), z({3}, kF32, d)}, 0); }, {"cat: "}},
      {"cat_0d", [](D d) { return cat({z({}, kF32, d), z({}, kF32, d)}, 0); }, {"cat: "}},
      {"stack_shapes_differ", [](D d) { return stack({z({2}, kF32, d), z({3}, kF32, d)}); }, {"stack: "}},
      {"repeat_too_few", [](D d) { return z({2, 3}, kF32, d).repeat({2}); }, {"repeat: "}},
      {"repeat_negative", [](D d) { return z({2, 3}, kF32, d).repeat({2, -1}); }, {"repeat: "}},
      {"gather_rank", [](D d) { return z({2, 3}, kF32, d).gather(0, z({2}, kI64, d)); }, {"gather: "}},
      {"gather_index_too_wide", [](D d) { return z({2, 3}, kF32, d).gather(0, z({2, 4}, kI64, d)); }, {"gather: "}},
      {"scatter_add_index_beyond_src",
       [](D d) { return z({4, 3}, kF32, d).scatter_add(0, z({3, 3}, kI64, d), z({2, 3}, kF32, d)); }, {"scatter_add: "}},
      {"index_select_2d_index", [](D d) { return z({4}, kF32, d).index_select(0, z({2, 2}, kI64, d)); }, {"index_select: "}},
      {"one_hot_zero_classes", [](D d) { return one_hot(z({3}, kI64, d), 0); }, {"one_hot: "}},
      {"matmul_0d", [](D d) { return z({}, kF32, d).matmul(z({3}, kF32, d)); }, {"matmul: "}},
      {"conv2d_groups", [](D d) { return conv2d(z({1, 4, 5, 5}, kF32, d), z({3, 2, 3, 3}, kF32, d), {}, {1, 1}, {0, 0}, {1, 1}, 2); }, {"conv2d: "}},
      {"conv2d_channels", [](D d) { return conv2d(z({1, 3, 5, 5}, kF32, d), z({2, 2, 3, 3}, kF32, d)); }, {"conv2d: "}},
      {"conv2d_output_empty", [](D d) { return conv2d(z({1, 1, 2, 2}, kF32, d), z({1, 1, 3, 3}, kF32, d)); }, {"conv2d: "}},
      {"conv2d_rank", [](D d) { return conv2d(z({1, 5, 5}, kF32, d), z({1, 1, 3, 3}, kF32, d)); }, {"conv2d: "}},
      {"conv2d_stride_zero", [](D d) { return conv2d(z({1, 1, 5, 5}, kF32, d), z({1, 1, 3, 3}, kF32, d), {}, {0, 1}); }, {"conv2d: "}},
      {"conv2d_bias_shape", [](D d) { return conv2d(z({1, 1, 5, 5}, kF32, d), z({2, 1, 3, 3}, kF32, d), z({3}, kF32, d)); }, {"conv2d: "}},
      {"max_pool2d_padding", [](D d) { return max_pool2d(z({1, 1, 6, 6}, kF32, d), {2, 2}, {1, 1}, {2, 2}); }, {"max_pool2d: "}},
      {"avg_pool2d_kernel_zero", [](D d) { return avg_pool2d(z({1, 1, 6, 6}, kF32, d), {0, 2}); }, {"avg_pool2d: "}},
      {"max_pool2d_too_small", [](D d) { return max_pool2d(z({1, 1, 2, 2}, kF32, d), {3, 3}); }, {"max_pool2d: "}},
      {"adaptive_zero_output", [](D d) { return adaptive_avg_pool2d(z({1, 1, 4, 4}, kF32, d), {0, 2}); }, {"adaptive_avg_pool2d: "}},
      {"adaptive_empty_input", [](D d) { return adaptive_avg_pool2d(z({1, 1, 0, 4}, kF32, d), {2, 2}); }, {"adaptive_avg_pool2d: "}},
      {"layer_norm_shape", [](D d) { return layer_norm(z({2, 4}, kF32, d), {3}); }, {"layer_norm: "}},
      {"layer_norm_weight_shape", [](D d) { return layer_norm(z({2, 4}, kF32, d), {4}, z({3}, kF32, d)); }, {"layer_norm: "}},
      {"layer_norm_negative_eps", [](D d) { return layer_norm(z({2, 4}, kF32, d), {4}, {}, {}, -1.0); }, {"layer_norm: "}},
      {"arange_step_zero", [](D d) { return arange(0, 3, 0, std::nullopt, d); }, {"arange: "}},
      {"arange_nan", [](D d) { return arange(0.0, NAN, 1.0, std::nullopt, d); }, {"arange: "}},
      {"eye_negative", [](D d) { return eye(-1, std::nullopt, kF32, d); }, {"eye: "}},
      {"full_negative_shape", [](D d) { return full({2, -1}, 1, kF32, d); }, {"full: "}},
      {"uniform_low_above_high", [](D d) { return uniform({2}, 1.0, 0.0, kF32, d); }, {}},
      {"normal_negative_std", [](D d) { return normal({2}, 0.0, -1.0, kF32, d); }, {}},
      {"argmax_empty", [](D d) { return z({0}, kF32, d).argmax(); }, {"argmax: "}},
      {"min_empty_all", [](D d) { return z({3, 0}, kI32, d).min(); }, {"min: "}},
      {"argmin_empty_dim", [](D d) { return z({0, 3}, kF32, d).argmin(0); }, {"argmin: "}},
      {"from_bytes_size", [](D d) {
         std::vector<uint8_t> b(5);
         return from_bytes(std::span<const uint8_t>(b), {2}, kF32, d);
       }, {"5", "8"}},
      {"undefined_tensor", [](D) { return Tensor().exp(); }, {"undefined"}},

      // ---- data-dependent: the call returns, the read throws naming the op and the value ----
      {"gather_index_out_of_range", [](D d) { return z({3}, kF32, d).gather(0, i64s({0, 5}, d)); },
       {"gather: ", "5"}, When::kRead},
      {"gather_negative_index", [](D d) { return z({3}, kF32, d).gather(0, i64s({-1, -4}, d)); },
       {"gather: ", "-4"}, When::kRead},
      {"index_select_out_of_range", [](D d) { return z({3, 2}, kF32, d).index_select(0, i64s({7}, d)); },
       {"index_select: ", "7"}, When::kRead},
      {"scatter_add_out_of_range",
       [](D d) { return z({3}, kF32, d).scatter_add(0, i64s({1, 4}, d), z({2}, kF32, d)); },
       {"scatter_add: ", "4"}, When::kRead},
      {"one_hot_out_of_range", [](D d) { return one_hot(i64s({0, 3}, d), 3); }, {"one_hot: ", "3"}, When::kRead},
      {"one_hot_negative", [](D d) { return one_hot(i64s({-2}, d), 3); }, {"one_hot: ", "-2"}, When::kRead},
      {"embedding_out_of_range", [](D d) { return embedding(z({4, 2}, kF32, d), i64s({1, 10}, d)); },
       {"10"}, When::kRead},
      {"remainder_by_zero",
       [](D d) { return i64s({5, 3}, d).remainder(i64s({2, 0}, d)); }, {"remainder: "}, When::kRead},
      {"remainder_by_zero_i32",
       [](D d) { return i64s({5, 3}, d).to(kI32).remainder(i64s({0, 1}, d).to(kI32)); }, {"remainder: "}, When::kRead},
      // An op that reads a failed tensor fails too, with the original message.
      {"gather_error_poisons_dependents",
       [](D d) { return z({3}, kF32, d).gather(0, i64s({0, 9}, d)).add(1).exp(); }, {"gather: ", "9"}, When::kRead},
  };
  // clang-format on
  return c;
}

using ErrorParam = std::tuple<DeviceFactory, size_t>;

class ErrorTable : public ::testing::TestWithParam<ErrorParam> {};

TEST_P(ErrorTable, Throws) {
  const auto& [factory, index] = GetParam();
  const ErrorCase ec = error_cases()[index];
  const Device device = factory.make();
  auto check_message = [&](const std::string& what) {
    for (const std::string& s : ec.message_has)
      EXPECT_NE(what.find(s), std::string::npos)
          << "message \"" << what << "\" lacks \"" << s << "\"";
  };
  Tensor out;
  if (ec.when == When::kCall) {
    try {
      out = ec.fn(device);
    } catch (const Error& e) {
      check_message(e.what());
      return;
    }
    ADD_FAILURE() << "the call did not throw (result " << out.to_string() << ")";
    return;
  }
  try {
    out = ec.fn(device);
  } catch (const Error& e) {
    FAIL() << "a data-dependent error must surface at the read, not at the call: " << e.what();
  }
  for (int read = 0; read < 2; ++read) {  // the error sticks: a second read fails the same way
    try {
      std::vector<uint8_t> bytes = out.to_bytes();
      ADD_FAILURE() << "reading did not throw (read " << read << ")";
    } catch (const Error& e) {
      check_message(e.what());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Table, ErrorTable,
                         ::testing::Combine(::testing::ValuesIn(complete_test_devices()),
                                            ::testing::Range(size_t{0}, error_cases().size())),
                         [](const ::testing::TestParamInfo<ErrorParam>& info) {
                           return std::get<0>(info.param).name + "_" +
                                  error_cases()[std::get<1>(info.param)].name;
                         });

// item() and to_vector() check what they read.
TEST(ErrorReads, ItemNeedsOneElement) {
  try {
    (void)zeros({2, 3}).item<float>();
    FAIL() << "item on 6 elements did not throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "item: tensor has 6 elements, not 1");
  }
}

TEST(ErrorReads, ToVectorChecksDtype) {
  EXPECT_THROW((void)zeros({2}, kF64).to_vector<float>(), Error);
  EXPECT_THROW((void)zeros({2}, kI32).to_vector<int64_t>(), Error);
}

// After a failed op the device keeps working.
TEST(ErrorReads, DeviceUsableAfterError) {
  for (const DeviceFactory& f : complete_test_devices()) {
    Device d = f.make();
    Tensor bad = zeros({3}, kF32, d).gather(0, i64s({3}, d));
    EXPECT_THROW((void)bad.to_bytes(), Error);
    EXPECT_EQ(full({2}, 2.0, kF32, d).add(1.0).to_vector<float>(),
              (std::vector<float>{3.0f, 3.0f}));
  }
}

}  // namespace
}  // namespace tw::optest
