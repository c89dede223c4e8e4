// The op IR: every tensor operation is a plain struct declared here once. Each struct lists its
// fields with TW_FIELDS; from that list come the wire codec (codec.h), the printer (printer.h),
// equality and hashing (below), input/output enumeration, and every backend's dispatch (a
// backend that lacks a kernel for an op does not compile). Shape/dtype inference is one
// function per op in infer.cc.
//
// Ops are functional: outputs are new tensors; no op writes into an input. Tensor ids are chosen
// by the client. Wire op codes (TW_OP_LIST) and enum values are append-only: never renumber.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "core/buffer.h"
#include "core/shape.h"
#include "tensorwire/dtype.h"

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
  Scalar(double v) : is_float(true), f(v), i(saturate(v)) {}  // NOLINT
  Scalar(float v) : Scalar(static_cast<double>(v)) {}                    // NOLINT
  Scalar(int64_t v) : is_float(false), f(static_cast<double>(v)), i(v) {}  // NOLINT
  Scalar(int v) : Scalar(static_cast<int64_t>(v)) {}                     // NOLINT
  Scalar(bool v) : Scalar(static_cast<int64_t>(v)) {}                    // NOLINT
  double as_double() const { return is_float ? f : static_cast<double>(i); }
  // The integer view of a float, as Cast converts: truncation toward zero, NaN -> 0, out of
  // range saturates. A plain static_cast of NaN or 1e300 would be undefined behaviour, and the
  // decoder builds Scalars from whatever bytes a peer sends.
  static constexpr int64_t saturate(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775808.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return static_cast<int64_t>(v);
  }
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
#define TW_UNARY_KINDS(X)                                                                  \
  X(Neg, neg) X(Abs, abs) X(Exp, exp) X(Log, log) X(Log1p, log1p) X(Sqrt, sqrt)            \
  X(Rsqrt, rsqrt) X(Sin, sin) X(Cos, cos) X(Tanh, tanh) X(Sigmoid, sigmoid) X(Relu, relu)  \
  X(Gelu, gelu) X(Erf, erf) X(Recip, recip) X(Floor, floor) X(Ceil, ceil) X(Round, round)  \
  X(Sign, sign) X(Square, square) X(LogicalNot, logical_not)
#define TW_BINARY_KINDS(X)                                                                  \
  X(Add, add) X(Sub, sub) X(Mul, mul) X(Div, div) X(Pow, pow) X(Maximum, maximum)           \
  X(Minimum, minimum) X(Remainder, remainder) X(Eq, eq) X(Ne, ne) X(Lt, lt) X(Le, le)       \
  X(Gt, gt) X(Ge, ge) X(LogicalAnd, logical_and) X(LogicalOr, logical_or)                   \
  X(LogicalXor, logical_xor)
#define TW_REDUCE_KINDS(X) \
  X(Sum, sum) X(Mean, mean) X(Prod, prod) X(Max, max) X(Min, min) X(Argmax, argmax) X(Argmin, argmin)
#define TW_POOL_KINDS(X) X(Max, max_pool2d) X(Avg, avg_pool2d)

#define TW_ENUM_ENTRY(Name, str) k##Name,
enum class UnaryKind : uint8_t { TW_UNARY_KINDS(TW_ENUM_ENTRY) kCount };
enum class BinaryKind : uint8_t { TW_BINARY_KINDS(TW_ENUM_ENTRY) kCount };
enum class ReduceKind : uint8_t { TW_REDUCE_KINDS(TW_ENUM_ENTRY) kCount };
enum class PoolKind : uint8_t { TW_POOL_KINDS(TW_ENUM_ENTRY) kCount };
#undef TW_ENUM_ENTRY

const char* kind_name(UnaryKind k);
const char* kind_name(BinaryKind k);
const char* kind_name(ReduceKind k);
const char* kind_name(PoolKind k);

// Comparison and logical kinds produce bool.
constexpr bool is_comparison(BinaryKind k) {
  return k >= BinaryKind::kEq && k <= BinaryKind::kLogicalXor;
}

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
#define TW_FE_PICK(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, N, ...) N
#define TW_FOR_EACH(M, ...)                                                                  \
  TW_FE_PICK(__VA_ARGS__, TW_FE_12, TW_FE_11, TW_FE_10, TW_FE_9, TW_FE_8, TW_FE_7, TW_FE_6, \
             TW_FE_5, TW_FE_4, TW_FE_3, TW_FE_2, TW_FE_1)(M, __VA_ARGS__)
#define TW_VISIT_FIELD(f) v(#f, f);
#define TW_FIELDS(...)                                                          \
  template <class V>                                                            \
  void fields(V&& v) {                                                          \
    TW_FOR_EACH(TW_VISIT_FIELD, __VA_ARGS__)                                    \
  }                                                                             \
  template <class V>                                                            \
  void fields(V&& v) const {                                                    \
    TW_FOR_EACH(TW_VISIT_FIELD, __VA_ARGS__)                                    \
  }                                                                             \
  auto tie() const { return std::tie(__VA_ARGS__); }

// ================================ the ops ================================
// Field types allowed: In, Out, std::vector<In>, int64_t, std::vector<int64_t>, double, bool,
// DType, Scalar, Bytes and the kind enums above.

// -- creation --
struct Full {  // zeros, ones, full
  Out out; Shape shape; DType dtype = kF32; Scalar value;
  TW_FIELDS(out, shape, dtype, value)
};
struct Arange {  // [start, end) by step, 1-D
  Out out; Scalar start, end, step; DType dtype = kI64;
  TW_FIELDS(out, start, end, step, dtype)
};
struct Eye {  // n x m identity
  Out out; int64_t n = 0, m = 0; DType dtype = kF32;
  TW_FIELDS(out, n, m, dtype)
};
struct FromHost {  // host bytes, little-endian, contiguous row-major
  Out out; Shape shape; DType dtype = kF32; Bytes data;
  TW_FIELDS(out, shape, dtype, data)
};
struct RandUniform {  // element i = low + (high - low) * U(seed, i)
  Out out; Shape shape; DType dtype = kF32; uint64_t seed = 0; double low = 0, high = 1;
  TW_FIELDS(out, shape, dtype, seed, low, high)
};
struct RandNormal {  // element i = mean + std * N(seed, i)
  Out out; Shape shape; DType dtype = kF32; uint64_t seed = 0; double mean = 0, std = 1;
  TW_FIELDS(out, shape, dtype, seed, mean, std)
};
struct Bernoulli {  // element i = U(seed, i) < p[i], in p's dtype
  In p; Out out; uint64_t seed = 0;
  TW_FIELDS(p, out, seed)
};

// -- elementwise --
struct Unary {
  UnaryKind kind = UnaryKind::kNeg; In x; Out out;
  TW_FIELDS(kind, x, out)
};
struct Binary {  // broadcasting
  BinaryKind kind = BinaryKind::kAdd; In a, b; Out out;
  TW_FIELDS(kind, a, b, out)
};
struct BinaryScalar {  // a (op) s, or s (op) a when reverse
  BinaryKind kind = BinaryKind::kAdd; In a; Scalar s; bool reverse = false; Out out;
  TW_FIELDS(kind, a, s, reverse, out)
};
struct Where {  // cond ? a : b, broadcasting all three
  In cond, a, b; Out out;
  TW_FIELDS(cond, a, b, out)
};
struct Clamp {  // clamp(x, lo, hi); an absent bound is not applied
  In x; bool has_lo = false; Scalar lo; bool has_hi = false; Scalar hi; Out out;
  TW_FIELDS(x, has_lo, lo, has_hi, hi, out)
};
struct MaskedFill {  // mask ? value : x, mask broadcast to x
  In x, mask; Scalar value; Out out;
  TW_FIELDS(x, mask, value, out)
};
struct Cast {
  In x; DType dtype = kF32; Out out;
  TW_FIELDS(x, dtype, out)
};

// -- reductions --
struct Reduce {  // over `dims` (empty: all); argmax/argmin take exactly one dim or all
  ReduceKind kind = ReduceKind::kSum; In x; std::vector<int64_t> dims; bool keepdim = false; Out out;
  TW_FIELDS(kind, x, dims, keepdim, out)
};
struct Cumsum {
  In x; int64_t dim = 0; Out out;
  TW_FIELDS(x, dim, out)
};

// -- linear algebra --
struct MatMul {  // 2-D, or batched with broadcast batch dims
  In a, b; Out out;
  TW_FIELDS(a, b, out)
};

// -- movement --
struct Reshape {  // one -1 allowed
  In x; Shape shape; Out out;
  TW_FIELDS(x, shape, out)
};
struct Permute {
  In x; std::vector<int64_t> dims; Out out;
  TW_FIELDS(x, dims, out)
};
struct Expand {  // -1 keeps a dim; new leading dims allowed
  In x; Shape shape; Out out;
  TW_FIELDS(x, shape, out)
};
struct Slice {  // per dim: [start, end) by step > 0; starts/ends clamped as in Python
  In x; std::vector<int64_t> starts, ends, steps; Out out;
  TW_FIELDS(x, starts, ends, steps, out)
};
struct SliceAssign {  // out = copy of x with x[slice] = src (src broadcast to the slice)
  In x, src; std::vector<int64_t> starts, ends, steps; Out out;
  TW_FIELDS(x, src, starts, ends, steps, out)
};
struct Cat {
  std::vector<In> xs; int64_t dim = 0; Out out;
  TW_FIELDS(xs, dim, out)
};
struct Flip {
  In x; std::vector<int64_t> dims; Out out;
  TW_FIELDS(x, dims, out)
};
struct Repeat {  // tiles x; repeats.size() >= rank (leading new dims)
  In x; std::vector<int64_t> repeats; Out out;
  TW_FIELDS(x, repeats, out)
};

// -- indexing --
struct Gather {  // out[i][j] = x[index[i][j]][j] (dim 0), index i64 same rank as x
  In x; int64_t dim = 0; In index; Out out;
  TW_FIELDS(x, dim, index, out)
};
struct ScatterAdd {  // out = x; out[index[i][j]][j] += src[i][j] (dim 0)
  In x; int64_t dim = 0; In index, src; Out out;
  TW_FIELDS(x, dim, index, src, out)
};
struct IndexSelect {  // index 1-D i64
  In x; int64_t dim = 0; In index; Out out;
  TW_FIELDS(x, dim, index, out)
};
struct OneHot {  // x integral; out i64 of shape x.shape + [num_classes]
  In x; int64_t num_classes = 0; Out out;
  TW_FIELDS(x, num_classes, out)
};

// -- neural --
struct Softmax {  // softmax or log_softmax over dim
  In x; int64_t dim = -1; bool log = false; Out out;
  TW_FIELDS(x, dim, log, out)
};
struct Conv2d {  // x [N, C, H, W], w [O, C/groups, kH, kW], bias [O] or absent
  In x, w, bias; std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1; Out out;
  TW_FIELDS(x, w, bias, stride, padding, dilation, groups, out)
};
struct Pool2d {  // avg excludes nothing: padding counts as zeros (count_include_pad = true)
  PoolKind kind = PoolKind::kMax; In x; std::vector<int64_t> kernel{2, 2}, stride{2, 2},
      padding{0, 0};
  Out out;
  TW_FIELDS(kind, x, kernel, stride, padding, out)
};
struct AdaptiveAvgPool2d {
  In x; std::vector<int64_t> output_size{1, 1}; Out out;
  TW_FIELDS(x, output_size, out)
};
struct LayerNorm {  // over the last `normalized_dims` dims; weight, bias optional
  In x, weight, bias; int64_t normalized_dims = 1; double eps = 1e-5; Out out;
  TW_FIELDS(x, weight, bias, normalized_dims, eps, out)
};

// -- gradients (the backward kernels autograd needs beyond composing the ops above) --
struct Conv2dBackwardInput {  // d loss / d x of Conv2d: grad [N, O, Ho, Wo], w -> x_shape
  In grad, w; Shape x_shape; std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1; Out out;
  TW_FIELDS(grad, w, x_shape, stride, padding, dilation, groups, out)
};
struct Conv2dBackwardWeight {  // d loss / d w of Conv2d: grad [N, O, Ho, Wo], x -> w_shape
  In grad, x; Shape w_shape; std::vector<int64_t> stride{1, 1}, padding{0, 0}, dilation{1, 1};
  int64_t groups = 1; Out out;
  TW_FIELDS(grad, x, w_shape, stride, padding, dilation, groups, out)
};
struct Pool2dBackward {  // d loss / d x of Pool2d: grad has the pool's output shape; out x's
  PoolKind kind = PoolKind::kMax; In grad, x; std::vector<int64_t> kernel{2, 2}, stride{2, 2},
      padding{0, 0};
  Out out;
  TW_FIELDS(kind, grad, x, kernel, stride, padding, out)
};
struct AdaptiveAvgPool2dBackward {  // grad [N, C, Ho, Wo] -> [N, C, input_size[0], input_size[1]]
  In grad; std::vector<int64_t> input_size; Out out;
  TW_FIELDS(grad, input_size, out)
};

// ================================ the list ================================
// (struct, wire code). Append only; never renumber or reuse a code.
#define TW_OP_LIST(X)                                                                          \
  X(Full, 1) X(Arange, 2) X(Eye, 3) X(FromHost, 4) X(RandUniform, 5) X(RandNormal, 6)           \
  X(Bernoulli, 7) X(Unary, 8) X(Binary, 9) X(BinaryScalar, 10) X(Where, 11) X(Clamp, 12)        \
  X(MaskedFill, 13) X(Cast, 14) X(Reduce, 15) X(Cumsum, 16) X(MatMul, 17) X(Reshape, 18)        \
  X(Permute, 19) X(Expand, 20) X(Slice, 21) X(SliceAssign, 22) X(Cat, 23) X(Flip, 24)          \
  X(Repeat, 25) X(Gather, 26) X(ScatterAdd, 27) X(IndexSelect, 28) X(OneHot, 29)                \
  X(Softmax, 30) X(Conv2d, 31) X(Pool2d, 32) X(AdaptiveAvgPool2d, 33) X(LayerNorm, 34)        \
  X(Conv2dBackwardInput, 35) X(Conv2dBackwardWeight, 36) X(Pool2dBackward, 37)                 \
  X(AdaptiveAvgPool2dBackward, 38)

#define TW_OP_VARIANT_ENTRY(Name, code) Name,
using Op = std::variant<TW_OP_LIST(TW_OP_VARIANT_ENTRY) std::monostate>;
#undef TW_OP_VARIANT_ENTRY

enum class OpCode : uint16_t {
#define TW_OP_CODE_ENTRY(Name, code) k##Name = code,
  TW_OP_LIST(TW_OP_CODE_ENTRY)
#undef TW_OP_CODE_ENTRY
};

#define TW_OP_COUNT_ENTRY(Name, code) +1
inline constexpr int kNumOps = 0 TW_OP_LIST(TW_OP_COUNT_ENTRY);
#undef TW_OP_COUNT_ENTRY
static_assert(std::variant_size_v<Op> == kNumOps + 1, "Op variant out of step with TW_OP_LIST");

template <class T>
struct OpTraits;
#define TW_OP_TRAITS_ENTRY(Name, code)                       \
  template <>                                                \
  struct OpTraits<Name> {                                    \
    static constexpr OpCode kCode = OpCode::k##Name;         \
    static constexpr const char* kStructName = #Name;        \
  };
TW_OP_LIST(TW_OP_TRAITS_ENTRY)
#undef TW_OP_TRAITS_ENTRY

OpCode op_code(const Op& op);
const char* op_code_name(OpCode code);  // struct name, e.g. "MatMul"
// The name users know the op by: "exp" for Unary{kExp}, "matmul", "max_pool2d".
std::string op_name(const Op& op);

// Inputs (absent optional inputs skipped) and outputs of an op, in field order.
std::vector<TensorId> op_inputs(const Op& op);
std::vector<TensorId> op_outputs(const Op& op);

bool operator==(const Op& a, const Op& b);
size_t op_hash(const Op& op);

}  // namespace tw::ir
