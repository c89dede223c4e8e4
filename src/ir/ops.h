// The op IR: every tensor operation is a plain struct declared here once. Each struct lists its
// fields with TW_FIELDS; from that list come the wire codec (codec.h), the printer (printer.h),
// equality and hashing (below), input/output enumeration, and every backend's dispatch (each
// backend declares a kernel per op of TW_OP_LIST and its dispatch calls them all, so a kernel
// defined nowhere fails the build at link time: the programs' link for the cpu backend, the
// module's for the torch one). Shape/dtype inference is one function per op in infer.cc.
//
// Ops are functional: outputs are new tensors; no op writes into an input. Tensor ids are chosen
// by the client. Wire op codes (TW_OP_LIST) and enum values are append-only: never renumber.
#pragma once
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "core/buffer.h"
#include "core/shape.h"
#include "tensorwire/dtype.h"
#include "tensorwire/export.h"
#include "tensorwire/op_kinds.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

using TensorId = uint64_t;  // 0 is "no tensor" (an absent optional input)

struct In {  // an input tensor
  TensorId id = 0;
  bool operator==(const In&) const = default;
};
struct Out {  // an output tensor, id chosen by the client
  TensorId id = 0;
  bool operator==(const Out&) const = default;
};

// A scalar attribute: exact for integers up to 64 bits, double for floats.
struct Scalar {
  bool is_float = true;
  double f = 0.0;
  int64_t i = 0;
  Scalar() = default;
  Scalar(double v) : is_float(true), f(v), i(saturate(v)) {}               // NOLINT
  Scalar(float v) : Scalar(static_cast<double>(v)) {}                      // NOLINT
  Scalar(int64_t v) : is_float(false), f(static_cast<double>(v)), i(v) {}  // NOLINT
  Scalar(int v) : Scalar(static_cast<int64_t>(v)) {}                       // NOLINT
  Scalar(bool v) : Scalar(static_cast<int64_t>(v)) {}                      // NOLINT
  double as_double() const { return is_float ? f : static_cast<double>(i); }
  // The integer view of a float, as Cast converts (float_to_int below).
  static constexpr int64_t saturate(double v);
  bool operator==(const Scalar& o) const {
    return is_float == o.is_float && (is_float ? (f == o.f || (f != f && o.f != o.f)) : i == o.i);
  }
};

// Raw bytes carried by an op (host data for FromHost).
struct Bytes {
  Buffer data;
  bool operator==(const Bytes& o) const;
};

// ---- enums carried by ops (serialised as u8; append only) ----
// The kind lists themselves are public (include/tensorwire/op_kinds.h): the Tensor API
// declares its methods from them.

#define TW_ENUM_ENTRY(Name, ...) k##Name,
enum class UnaryKind : uint8_t { TW_UNARY_KINDS(TW_ENUM_ENTRY) kCount };
enum class BinaryKind : uint8_t { TW_BINARY_KINDS(TW_ENUM_ENTRY) kCount };
enum class ReduceKind : uint8_t { TW_REDUCE_KINDS(TW_ENUM_ENTRY) kCount };
enum class PoolKind : uint8_t { TW_POOL_KINDS(TW_ENUM_ENTRY) kCount };
#undef TW_ENUM_ENTRY

const char* kind_name(UnaryKind k);
const char* kind_name(BinaryKind k);
const char* kind_name(ReduceKind k);
const char* kind_name(PoolKind k);
const char* kind_name(BlockFormat f);

// ---- the traits columns, as values ----
namespace kind_traits {
inline constexpr bool kGrad = true, kNoGrad = false;
inline constexpr bool kScalarApi = true, kNoScalarApi = false;
enum Math { kSameDType, kFloatMath, kToBool };
}  // namespace kind_traits

// Whether autograd differentiates ops of this kind (when their output is floating point).
#define TW_KIND_GRAD_ENTRY(Name, ir_name, api_name, grad, ...) kind_traits::grad,
constexpr bool differentiable(UnaryKind k) {
  constexpr bool kTable[] = {TW_UNARY_KINDS(TW_KIND_GRAD_ENTRY)};
  return k < UnaryKind::kCount && kTable[static_cast<int>(k)];
}
constexpr bool differentiable(BinaryKind k) {
  constexpr bool kTable[] = {TW_BINARY_KINDS(TW_KIND_GRAD_ENTRY)};
  return k < BinaryKind::kCount && kTable[static_cast<int>(k)];
}
constexpr bool differentiable(ReduceKind k) {
  constexpr bool kTable[] = {TW_REDUCE_KINDS(TW_KIND_GRAD_ENTRY)};
  return k < ReduceKind::kCount && kTable[static_cast<int>(k)];
}
#undef TW_KIND_GRAD_ENTRY

// Unary kinds that compute a real function: integral and bool inputs are first cast to f32.
constexpr bool is_float_math(UnaryKind k) {
#define TW_KIND_MATH_ENTRY(Name, ir_name, api_name, grad, math) kind_traits::math,
  constexpr kind_traits::Math kTable[] = {TW_UNARY_KINDS(TW_KIND_MATH_ENTRY)};
#undef TW_KIND_MATH_ENTRY
  return k < UnaryKind::kCount && kTable[static_cast<int>(k)] == kind_traits::kFloatMath;
}

// Comparison and logical kinds produce bool.
constexpr bool is_comparison(BinaryKind k) {
  return k >= BinaryKind::kEq && k <= BinaryKind::kLogicalXor;
}

// ---- the Cast rule for float -> integral (docs/ops.md), shared by Scalar, every backend ----
// Truncation toward zero, NaN -> 0, out of range saturates. kCastLow/kCastHigh are the
// thresholds in double: at or below kCastLow gives min, at or above kCastHigh gives max
// ((double)max may round up, to 2^63 for i64: at or above it saturates either way). A plain
// static_cast of NaN or 1e300 would be undefined behaviour, and decoders build values from
// whatever bytes a peer sends.
template <class To>
inline constexpr double kCastLow = static_cast<double>(std::numeric_limits<To>::min());
template <class To>
inline constexpr double kCastHigh = static_cast<double>(std::numeric_limits<To>::max());
template <class To>
constexpr To float_to_int(double d) {
  if (d != d) return 0;
  if (d <= kCastLow<To>) return std::numeric_limits<To>::min();
  if (d >= kCastHigh<To>) return std::numeric_limits<To>::max();
  return static_cast<To>(d);
}

constexpr int64_t Scalar::saturate(double v) { return float_to_int<int64_t>(v); }

// ---- field declaration helper: TW_FIELDS(a, b, out) ----
#define TW_FE_1(M, x) M(x)
#define TW_FE_2(M, x, ...) M(x) TW_FE_1(M, __VA_ARGS__)
#define TW_FE_3(M, x, ...) M(x) TW_FE_2(M, __VA_ARGS__)
#define TW_FE_4(M, x, ...) M(x) TW_FE_3(M, __VA_ARGS__)
#define TW_FE_5(M, x, ...) M(x) TW_FE_4(M, __VA_ARGS__)
#define TW_FE_6(M, x, ...) M(x) TW_FE_5(M, __VA_ARGS__)
#define TW_FE_7(M, x, ...) M(x) TW_FE_6(M, __VA_ARGS__)
#define TW_FE_8(M, x, ...) M(x) TW_FE_7(M, __VA_ARGS__)
#define TW_FE_9(M, x, ...) M(x) TW_FE_8(M, __VA_ARGS__)
#define TW_FE_10(M, x, ...) M(x) TW_FE_9(M, __VA_ARGS__)
#define TW_FE_11(M, x, ...) M(x) TW_FE_10(M, __VA_ARGS__)
#define TW_FE_12(M, x, ...) M(x) TW_FE_11(M, __VA_ARGS__)
#define TW_FE_13(M, x, ...) M(x) TW_FE_12(M, __VA_ARGS__)
#define TW_FE_14(M, x, ...) M(x) TW_FE_13(M, __VA_ARGS__)
#define TW_FE_15(M, x, ...) M(x) TW_FE_14(M, __VA_ARGS__)
#define TW_FE_16(M, x, ...) M(x) TW_FE_15(M, __VA_ARGS__)
#define TW_FE_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, N, ...) N
#define TW_FOR_EACH(M, ...)                                                                     \
  TW_FE_PICK(__VA_ARGS__, TW_FE_16, TW_FE_15, TW_FE_14, TW_FE_13, TW_FE_12, TW_FE_11, TW_FE_10, \
             TW_FE_9, TW_FE_8, TW_FE_7, TW_FE_6, TW_FE_5, TW_FE_4, TW_FE_3, TW_FE_2, TW_FE_1)   \
  (M, __VA_ARGS__)
#define TW_VISIT_FIELD(f) v(#f, f);
#define TW_FIELDS(...)                       \
  template <class V>                         \
  void fields(V&& v) {                       \
    TW_FOR_EACH(TW_VISIT_FIELD, __VA_ARGS__) \
  }                                          \
  template <class V>                         \
  void fields(V&& v) const {                 \
    TW_FOR_EACH(TW_VISIT_FIELD, __VA_ARGS__) \
  }                                          \
  auto tie() const { return std::tie(__VA_ARGS__); }

// The ops and their list read as tables, a few fields or entries to a line (clang-format would
// break them up):
// clang-format off
// ================================ the ops ================================
// Field types allowed: In, Out, std::vector<In>, int64_t, std::vector<int64_t>, double, bool,
// DType, Scalar, Bytes and the kind enums above.
//
// Each op also declares kAutograd, whether autograd differentiates it: kRule (a rule in
// api/grad_rules.cc, which fails to compile without one), kByKind (a rule whose kinds are
// differentiable as the kind lists above say) or kNone (no gradient flows through it). Cast's
// rule covers floating-point inputs only.
enum class Autograd : uint8_t { kNone, kRule, kByKind };

// -- creation --
struct Full {  // zeros, ones, full
  static constexpr Autograd kAutograd = Autograd::kNone;
  Out out; Shape shape; DType dtype = kF32; Scalar value;
  TW_FIELDS(out, shape, dtype, value)
};
struct Arange {  // [start, end) by step, 1-D
  static constexpr Autograd kAutograd = Autograd::kNone;
  Out out; Scalar start, end, step; DType dtype = kI64;
  TW_FIELDS(out, start, end, step, dtype)
};
struct Eye {  // n x m identity
  static constexpr Autograd kAutograd = Autograd::kNone;
  Out out; int64_t n = 0, m = 0; DType dtype = kF32;
  TW_FIELDS(out, n, m, dtype)
};
struct FromHost {  // host bytes, little-endian, contiguous row-major
  static constexpr Autograd kAutograd = Autograd::kNone;
  Out out; Shape shape; DType dtype = kF32; Bytes data;
  TW_FIELDS(out, shape, dtype, data)
};
struct RandUniform {  // element i = low + (high - low) * U(seed, i)
  static constexpr Autograd kAutograd = Autograd::kNone;
  Out out; Shape shape; DType dtype = kF32; uint64_t seed = 0; double low = 0, high = 1;
  TW_FIELDS(out, shape, dtype, seed, low, high)
};
struct RandNormal {  // element i = mean + std * N(seed, i)
  static constexpr Autograd kAutograd = Autograd::kNone;
  Out out; Shape shape; DType dtype = kF32; uint64_t seed = 0; double mean = 0, std = 1;
  TW_FIELDS(out, shape, dtype, seed, mean, std)
};
struct Bernoulli {  // element i = U(seed, i) < p[i], in p's dtype
  static constexpr Autograd kAutograd = Autograd::kNone;
  In p; Out out; uint64_t seed = 0;
  TW_FIELDS(p, out, seed)
};

// -- elementwise --
struct Unary {
  static constexpr Autograd kAutograd = Autograd::kByKind;
  UnaryKind kind = UnaryKind::kNeg; In x; Out out;
  TW_FIELDS(kind, x, out)
};
struct Binary {  // broadcasting
  static constexpr Autograd kAutograd = Autograd::kByKind;
  BinaryKind kind = BinaryKind::kAdd; In a, b; Out out;
  TW_FIELDS(kind, a, b, out)
};
struct BinaryScalar {  // a (op) s, or s (op) a when reverse
  static constexpr Autograd kAutograd = Autograd::kByKind;
  BinaryKind kind = BinaryKind::kAdd; In a; Scalar s; bool reverse = false; Out out;
  TW_FIELDS(kind, a, s, reverse, out)
};
struct Where {  // cond ? a : b, broadcasting all three
  static constexpr Autograd kAutograd = Autograd::kRule;
  In cond, a, b; Out out;
  TW_FIELDS(cond, a, b, out)
};
struct Clamp {  // clamp(x, lo, hi); an absent bound is not applied
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; bool has_lo = false; Scalar lo; bool has_hi = false; Scalar hi; Out out;
  TW_FIELDS(x, has_lo, lo, has_hi, hi, out)
};
struct MaskedFill {  // mask ? value : x, mask broadcast to x
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x, mask; Scalar value; Out out;
  TW_FIELDS(x, mask, value, out)
};
struct Cast {
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; DType dtype = kF32; Out out;
  TW_FIELDS(x, dtype, out)
};

// -- reductions --
struct Reduce {  // over `dims` (empty: all); argmax/argmin take exactly one dim or all
  static constexpr Autograd kAutograd = Autograd::kByKind;
  ReduceKind kind = ReduceKind::kSum; In x; std::vector<int64_t> dims; bool keepdim = false; Out out;
  TW_FIELDS(kind, x, dims, keepdim, out)
};
struct Cumsum {
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; int64_t dim = 0; Out out;
  TW_FIELDS(x, dim, out)
};

// -- linear algebra --
struct MatMul {  // 2-D, or batched with broadcast batch dims
  static constexpr Autograd kAutograd = Autograd::kRule;
  In a, b; Out out;
  TW_FIELDS(a, b, out)
};

// -- movement --
struct Reshape {  // one -1 allowed
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; Shape shape; Out out;
  TW_FIELDS(x, shape, out)
};
struct Permute {
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; std::vector<int64_t> dims; Out out;
  TW_FIELDS(x, dims, out)
};
struct Expand {  // -1 keeps a dim; new leading dims allowed
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; Shape shape; Out out;
  TW_FIELDS(x, shape, out)
};
struct Slice {  // per dim: [start, end) by step > 0; starts/ends clamped as in Python
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; std::vector<int64_t> starts, ends, steps; Out out;
  TW_FIELDS(x, starts, ends, steps, out)
};
struct SliceAssign {  // out = copy of x with x[slice] = src (src broadcast to the slice)
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x, src; std::vector<int64_t> starts, ends, steps; Out out;
  TW_FIELDS(x, src, starts, ends, steps, out)
};
struct Cat {
  static constexpr Autograd kAutograd = Autograd::kRule;
  std::vector<In> xs; int64_t dim = 0; Out out;
  TW_FIELDS(xs, dim, out)
};
struct Flip {
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; std::vector<int64_t> dims; Out out;
  TW_FIELDS(x, dims, out)
};
struct Repeat {  // tiles x; repeats.size() >= rank (leading new dims)
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; std::vector<int64_t> repeats; Out out;
  TW_FIELDS(x, repeats, out)
};

// -- indexing --
struct Gather {  // out[i][j] = x[index[i][j]][j] (dim 0), index i64 same rank as x
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; int64_t dim = 0; In index; Out out;
  TW_FIELDS(x, dim, index, out)
};
struct ScatterAdd {  // out = x; out[index[i][j]][j] += src[i][j] (dim 0)
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; int64_t dim = 0; In index, src; Out out;
  TW_FIELDS(x, dim, index, src, out)
};
struct IndexSelect {  // index 1-D i64
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; int64_t dim = 0; In index; Out out;
  TW_FIELDS(x, dim, index, out)
};
struct OneHot {  // x integral; out i64 of shape x.shape + [num_classes]
  static constexpr Autograd kAutograd = Autograd::kNone;
  In x; int64_t num_classes = 0; Out out;
  TW_FIELDS(x, num_classes, out)
};

// -- neural --
struct Softmax {  // softmax or log_softmax over dim
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; int64_t dim = -1; bool log = false; Out out;
  TW_FIELDS(x, dim, log, out)
};
struct Conv2d {  // x [N, C, H, W], w [O, C/groups, kH, kW], bias [O] or absent
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x, w, bias; std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1; Out out;
  TW_FIELDS(x, w, bias, stride, padding, dilation, groups, out)
};
struct Pool2d {  // avg excludes nothing: padding counts as zeros (count_include_pad = true)
  static constexpr Autograd kAutograd = Autograd::kRule;
  PoolKind kind = PoolKind::kMax; In x; std::vector<int64_t> kernel{2, 2}, stride{2, 2},
      padding{0, 0};
  Out out;
  TW_FIELDS(kind, x, kernel, stride, padding, out)
};
struct AdaptiveAvgPool2d {
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x; std::vector<int64_t> output_size{1, 1}; Out out;
  TW_FIELDS(x, output_size, out)
};
struct LayerNorm {  // over the last `normalized_dims` dims; weight, bias optional
  static constexpr Autograd kAutograd = Autograd::kRule;
  In x, weight, bias; int64_t normalized_dims = 1; double eps = 1e-5; Out out;
  TW_FIELDS(x, weight, bias, normalized_dims, eps, out)
};

// -- gradients (the backward kernels autograd needs beyond composing the ops above) --
struct Conv2dBackwardInput {  // d loss / d x of Conv2d: grad [N, O, Ho, Wo], w -> x_shape
  static constexpr Autograd kAutograd = Autograd::kNone;
  In grad, w; Shape x_shape; std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1; Out out;
  TW_FIELDS(grad, w, x_shape, stride, padding, dilation, groups, out)
};
struct Conv2dBackwardWeight {  // d loss / d w of Conv2d: grad [N, O, Ho, Wo], x -> w_shape
  static constexpr Autograd kAutograd = Autograd::kNone;
  In grad, x; Shape w_shape; std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1; Out out;
  TW_FIELDS(grad, x, w_shape, stride, padding, dilation, groups, out)
};
struct Pool2dBackward {  // d loss / d x of Pool2d: grad has the pool's output shape; out x's
  static constexpr Autograd kAutograd = Autograd::kNone;
  PoolKind kind = PoolKind::kMax; In grad, x; std::vector<int64_t> kernel{2, 2}, stride{2, 2},
      padding{0, 0};
  Out out;
  TW_FIELDS(kind, grad, x, kernel, stride, padding, out)
};
struct IndexSelectBackward {  // d loss / d x of IndexSelect: grad's slices added at index
  static constexpr Autograd kAutograd = Autograd::kNone;
  In grad, index; int64_t dim = 0; Shape x_shape; Out out;
  TW_FIELDS(grad, index, dim, x_shape, out)
};
struct LayerNormBackward {  // d loss / d x, weight, bias of LayerNorm: grad and x alike
  static constexpr Autograd kAutograd = Autograd::kNone;
  In grad, x, weight; int64_t normalized_dims = 1; double eps = 1e-5;
  Out grad_x, grad_weight, grad_bias;
  TW_FIELDS(grad, x, weight, normalized_dims, eps, grad_x, grad_weight, grad_bias)
};
struct GeluBackward {  // d loss / d x of gelu (the erf form): grad * (Phi(x) + x phi(x))
  static constexpr Autograd kAutograd = Autograd::kNone;
  In grad, x; Out out;
  TW_FIELDS(grad, x, out)
};
struct AdaptiveAvgPool2dBackward {  // grad [N, C, Ho, Wo] -> [N, C, input_size[0], input_size[1]]
  static constexpr Autograd kAutograd = Autograd::kNone;
  In grad; std::vector<int64_t> input_size; Out out;
  TW_FIELDS(grad, input_size, out)
};

// -- fused --
struct Linear {  // relu?(x w^T + bias): x [N, in], w [out, in], bias [out] or absent (docs/ops.md)
  static constexpr Autograd kAutograd = Autograd::kNone;  // nn::Linear records its own node
  In x, w, bias; bool relu = false; Out out;
  TW_FIELDS(x, w, bias, relu, out)
};

// -- attention --
struct ScaledDotProductAttention {  // softmax(scale q k^T, masked) v without the [Tq, Tk] scores
  static constexpr Autograd kAutograd = Autograd::kRule;
  In query, key, value, mask; bool causal = false; double scale = 1; Out out;
  TW_FIELDS(query, key, value, mask, causal, scale, out)
};
struct ScaledDotProductAttentionBackward {  // d loss / d q, k, v of ScaledDotProductAttention
  static constexpr Autograd kAutograd = Autograd::kNone;
  In grad, query, key, value, mask; bool causal = false; double scale = 1;
  Out grad_query, grad_key, grad_value;
  TW_FIELDS(grad, query, key, value, mask, causal, scale, grad_query, grad_key, grad_value)
};

// -- optimizer steps --
struct AdamStep {  // one Adam/AdamW update of a parameter and its two moments (docs/ops.md)
  static constexpr Autograd kAutograd = Autograd::kNone;
  In param, grad, exp_avg, exp_avg_sq, step_size, bias2_sqrt; double beta1 = 0.9,
      beta2 = 0.999, eps = 1e-8, weight_decay = 0, lr = 1e-3; bool decoupled = false;
  Out param_out, exp_avg_out, exp_avg_sq_out;
  TW_FIELDS(param, grad, exp_avg, exp_avg_sq, step_size, bias2_sqrt, beta1, beta2, eps,
            weight_decay, lr, decoupled, param_out, exp_avg_out, exp_avg_sq_out)
};

// -- quantization (docs/ops.md, "Quantization") --
// Affine quantization as ONNX's QuantizeLinear: out = saturate(round_half_even(x / scale) + zp)
// in i8 or u8. Per tensor (scale 0-d or [1]), per channel (block 0, scale [x.shape[axis]]) or per
// block (block > 0, scale as x but dim axis ceil(size / block)); zero_point absent or scale's
// shape in `dtype`.
struct Quantize {  // i8/u8 = saturate(round_half_even(x / scale) + zero_point) (docs/ops.md)
  static constexpr Autograd kAutograd = Autograd::kNone;
  In x, scale, zero_point; int64_t axis = 1; int64_t block = 0; DType dtype = kI8; Out out;
  TW_FIELDS(x, scale, zero_point, axis, block, dtype, out)
};
struct Dequantize {  // out f32 = (x - zero_point) * scale, x i8, u8 or i32; scale as Quantize's
  static constexpr Autograd kAutograd = Autograd::kNone;
  In x, scale, zero_point; int64_t axis = 1; int64_t block = 0; Out out;
  TW_FIELDS(x, scale, zero_point, axis, block, out)
};
struct PackBlocks {  // f32 [..., K] -> u8 [..., K / 32 * block_bytes(format)], K % 32 == 0
  static constexpr Autograd kAutograd = Autograd::kNone;
  In x; BlockFormat format = BlockFormat::kQ8_0; Out out;
  TW_FIELDS(x, format, out)
};
struct UnpackBlocks {  // u8 packed [..., B * block_bytes(format)] -> f32 [..., B * 32]
  static constexpr Autograd kAutograd = Autograd::kNone;
  In x; BlockFormat format = BlockFormat::kQ8_0; Out out;
  TW_FIELDS(x, format, out)
};
struct LinearBlocks {  // x [N, K] f32, w packed u8 [M, K / 32 * bytes], bias [M] or absent
  static constexpr Autograd kAutograd = Autograd::kNone;
  In x, w, bias; BlockFormat format = BlockFormat::kQ8_0; Out out;
  TW_FIELDS(x, w, bias, format, out)
};
struct LinearInt8 {  // x [N, K] f32 quantized per call to u8; w i8 [M, K], w_scale f32 [M]
  static constexpr Autograd kAutograd = Autograd::kNone;
  In x, w, w_scale, bias; Out out;
  TW_FIELDS(x, w, w_scale, bias, out)
};

// ================================ the list ================================
// (struct, wire code, since): `since` is the first protocol version whose servers know the op
// (docs/protocol.md's version history): a client never sends an op to a server older than that
// (client/remote_backend.cc, supports()). Append only; never renumber or reuse a code.
#define TW_OP_LIST(X) \
  X(Full, 1, 1) X(Arange, 2, 1) X(Eye, 3, 1) X(FromHost, 4, 1) X(RandUniform, 5, 1) \
  X(RandNormal, 6, 1) X(Bernoulli, 7, 1) X(Unary, 8, 1) X(Binary, 9, 1) X(BinaryScalar, 10, 1) \
  X(Where, 11, 1) X(Clamp, 12, 1) X(MaskedFill, 13, 1) X(Cast, 14, 1) X(Reduce, 15, 1) \
  X(Cumsum, 16, 1) X(MatMul, 17, 1) X(Reshape, 18, 1) X(Permute, 19, 1) X(Expand, 20, 1) \
  X(Slice, 21, 1) X(SliceAssign, 22, 1) X(Cat, 23, 1) X(Flip, 24, 1) X(Repeat, 25, 1) \
  X(Gather, 26, 1) X(ScatterAdd, 27, 1) X(IndexSelect, 28, 1) X(OneHot, 29, 1) \
  X(Softmax, 30, 1) X(Conv2d, 31, 1) X(Pool2d, 32, 1) X(AdaptiveAvgPool2d, 33, 1) \
  X(LayerNorm, 34, 1) X(Conv2dBackwardInput, 35, 1) X(Conv2dBackwardWeight, 36, 1) \
  X(Pool2dBackward, 37, 1) X(AdaptiveAvgPool2dBackward, 38, 1) X(AdamStep, 39, 6) \
  X(Linear, 40, 7) X(ScaledDotProductAttention, 41, 8) X(ScaledDotProductAttentionBackward, 42, 8) \
  X(IndexSelectBackward, 43, 8) X(LayerNormBackward, 44, 9) X(GeluBackward, 45, 9) \
  X(Quantize, 46, 15) X(Dequantize, 47, 15) X(PackBlocks, 48, 15) X(UnpackBlocks, 49, 15) \
  X(LinearBlocks, 50, 15) X(LinearInt8, 51, 15)
// clang-format on

#define TW_OP_VARIANT_ENTRY(Name, code, since) Name,
using Op = std::variant<TW_OP_LIST(TW_OP_VARIANT_ENTRY) std::monostate>;
#undef TW_OP_VARIANT_ENTRY

enum class OpCode : uint16_t {
#define TW_OP_CODE_ENTRY(Name, code, since) k##Name = code,
  TW_OP_LIST(TW_OP_CODE_ENTRY)
#undef TW_OP_CODE_ENTRY
};

#define TW_OP_COUNT_ENTRY(Name, code, since) +1
inline constexpr int kNumOps = 0 TW_OP_LIST(TW_OP_COUNT_ENTRY);
#undef TW_OP_COUNT_ENTRY
// Wire codes are dense and in list order (1, 2, ... kNumOps): an entry appended with a skipped,
// reused or out-of-order code fails here (codes index tables such as the decoder's).
namespace detail {
#define TW_OP_CODE_VALUE(Name, code, since) code,
inline constexpr int kOpCodes[] = {TW_OP_LIST(TW_OP_CODE_VALUE)};
#undef TW_OP_CODE_VALUE
constexpr bool op_codes_dense() {
  for (int i = 0; i < kNumOps; ++i)
    if (kOpCodes[i] != i + 1) return false;
  return true;
}
}  // namespace detail
static_assert(detail::op_codes_dense(), "TW_OP_LIST: wire codes must be 1, 2, ... in list order");

template <class T>
struct OpTraits;
#define TW_OP_TRAITS_ENTRY(Name, code, since)              \
  template <>                                              \
  struct OpTraits<Name> {                                  \
    static constexpr OpCode kCode = OpCode::k##Name;       \
    static constexpr const char* kStructName = #Name;      \
    static constexpr Autograd kAutograd = Name::kAutograd; \
  };
TW_OP_LIST(TW_OP_TRAITS_ENTRY)
#undef TW_OP_TRAITS_ENTRY

// The first protocol version whose servers know ops of this code (the list's `since` column);
// 0 for a code that is not an op's.
constexpr uint16_t op_since_protocol(OpCode code) {
  switch (code) {
#define TW_OP_SINCE_CASE(Name, code, since) \
  case OpCode::k##Name: return since;
    TW_OP_LIST(TW_OP_SINCE_CASE)
#undef TW_OP_SINCE_CASE
  }
  return 0;
}

OpCode op_code(const Op& op);
const char* op_code_name(OpCode code);  // struct name, e.g. "MatMul"
// The name users know the op by: "exp" for Unary{kExp}, "matmul", "max_pool2d".
std::string op_name(const Op& op);

// Inputs (absent optional inputs skipped) and outputs of an op, in field order.
std::vector<TensorId> op_inputs(const Op& op);
std::vector<TensorId> op_outputs(const Op& op);
// The same into `into` (cleared first), for a caller that reuses one vector for every op.
void op_inputs(const Op& op, std::vector<TensorId>& into);
void op_outputs(const Op& op, std::vector<TensorId>& into);

bool operator==(const Op& a, const Op& b);
size_t op_hash(const Op& op);

}  // namespace tw::ir
TW_INTERNAL_END
