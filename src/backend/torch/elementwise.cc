// Creation, elementwise ops and Cast through ATen, adapted to docs/ops.md where ATen differs:
// float -> integer conversion (ATen: undefined for NaN and out-of-range values; ours truncates,
// saturates and maps NaN to 0), sign of NaN (ATen: 0; ours: NaN), the sign of a zero float
// remainder (ours: the divisor's), integer remainder by -1 (ATen traps on INT_MIN % -1), NaN
// clamp bounds (ATen ignores them; ours propagate), scalar conversion (ATen checks for overflow;
// ours wraps or saturates as Cast does) and random numbers (tensorwire's Philox generator, run
// on the host, as is arange).
#include <cmath>
#include <limits>
#include <stdexcept>

#include "backend/torch/torch_ops.h"
#include "backend/upload.h"
#include "ir/convert.h"
#include "ir/infer.h"

namespace tw::torch {
namespace {

using ir::BinaryKind;
using ir::UnaryKind;

// Calls f(T{}) with the C++ type of a compute dtype (not f16/bf16).
template <class F>
auto visit_compute(DType d, F&& f) {
  switch (d) {
    case kF64: return f(double{});
    case kI32: return f(int32_t{});
    case kI64: return f(int64_t{});
    case kU8: return f(uint8_t{});
    case kI8: return f(int8_t{});
    case kBool: return f(bool{});
    default: return f(float{});
  }
}

// float -> integral by the Cast rule (ir::float_to_int), through f64 (exact for every float
// dtype).
at::Tensor float_to_integral(const at::Tensor& x, DType to) {
  double lo = 0, hi = 0;
  int64_t min = 0, max = 0;
  visit_compute(to, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_integral_v<T>) {
      using L = std::numeric_limits<T>;
      lo = ir::kCastLow<T>;  // the thresholds of ir::float_to_int, as a vector op
      hi = ir::kCastHigh<T>;
      min = static_cast<int64_t>(L::min());
      max = static_cast<int64_t>(L::max());
    }
  });
  const at::Tensor d = x.to(at::kDouble);
  const at::Tensor below = d <= lo;
  const at::Tensor above = d >= hi;
  const at::Tensor in_range = d.masked_fill(below.logical_or(above).logical_or_(d.isnan()), 0.0);
  at::Tensor r = in_range.to(scalar_type(to));  // truncation toward zero
  r.masked_fill_(below, min);
  r.masked_fill_(above, max);
  return r;
}

// A 0-d tensor holding the given value, written directly (no conversion checks by ATen).
template <class T>
at::Tensor zero_dim(T v, at::ScalarType st) {
  at::Tensor t = at::empty({}, at::TensorOptions().dtype(st));
  *static_cast<T*>(t.data_ptr()) = v;
  return t;
}

// Checks that an integral divisor holds no zero (data-dependent, so only the kernel can).
Status check_divisor(const at::Tensor& divisor, const std::string& name, const TensorMeta& meta) {
  if (divisor.numel() > 0 && divisor.eq(0).any().item<bool>()) {
    return invalid_argument(name + ": integer remainder by zero (the divisor " + meta_str(meta) +
                            " holds a 0); use a float dtype for NaN");
  }
  return Status::OK();
}

// Python's remainder: the result has the divisor's sign (zeros included).
at::Tensor py_remainder(const at::Tensor& a, const at::Tensor& b) {
  if (a.is_floating_point()) return at::copysign(at::remainder(a, b), b);
  if (a.scalar_type() == at::kByte) return at::remainder(a, b);
  // x % -1 is 0; ATen computes it with a division that traps for the most negative x.
  const at::Tensor minus_one = b.eq(-1);
  return at::remainder(a, b.masked_fill(minus_one, 1)).masked_fill_(minus_one, 0);
}

// `a kind b` for operands already in the compute dtype (broadcasting).
at::Tensor binary(BinaryKind k, const at::Tensor& a, const at::Tensor& b) {
  switch (k) {
    case BinaryKind::kAdd: return at::add(a, b);
    case BinaryKind::kSub: return at::sub(a, b);
    case BinaryKind::kMul: return at::mul(a, b);
    case BinaryKind::kDiv: return at::div(a, b);
    case BinaryKind::kPow: return at::pow(a, b);  // integers: exact, wrapping; see docs/ops.md
    case BinaryKind::kMaximum: return at::maximum(a, b);
    case BinaryKind::kMinimum: return at::minimum(a, b);
    case BinaryKind::kRemainder: return py_remainder(a, b);
    case BinaryKind::kEq: return at::eq(a, b);
    case BinaryKind::kNe: return at::ne(a, b);
    case BinaryKind::kLt: return at::lt(a, b);
    case BinaryKind::kLe: return at::le(a, b);
    case BinaryKind::kGt: return at::gt(a, b);
    case BinaryKind::kGe: return at::ge(a, b);
    case BinaryKind::kLogicalAnd: return at::logical_and(a, b);
    case BinaryKind::kLogicalOr: return at::logical_or(a, b);
    case BinaryKind::kLogicalXor: return at::logical_xor(a, b);
    case BinaryKind::kCount: break;
  }
  throw std::invalid_argument("unknown binary kind");  // inference rejects unknown kinds
}

at::Tensor unary(UnaryKind k, const at::Tensor& x) {
  const bool integral = !x.is_floating_point();
  switch (k) {
    case UnaryKind::kNeg: return at::neg(x);
    case UnaryKind::kAbs: return at::abs(x);
    case UnaryKind::kExp: return at::exp(x);
    case UnaryKind::kLog: return at::log(x);
    case UnaryKind::kLog1p: return at::log1p(x);
    case UnaryKind::kSqrt: return at::sqrt(x);
    case UnaryKind::kRsqrt: return at::rsqrt(x);
    case UnaryKind::kSin: return at::sin(x);
    case UnaryKind::kCos: return at::cos(x);
    case UnaryKind::kTanh: return at::tanh(x);
    case UnaryKind::kSigmoid: return at::sigmoid(x);
    case UnaryKind::kRelu: return at::relu(x);
    case UnaryKind::kGelu: return at::gelu(x);  // the erf form (approximate = "none")
    case UnaryKind::kErf: return at::erf(x);
    case UnaryKind::kRecip: return at::reciprocal(x);
    case UnaryKind::kFloor: return integral ? x : at::floor(x);
    case UnaryKind::kCeil: return integral ? x : at::ceil(x);
    case UnaryKind::kRound: return integral ? x : at::round(x);  // half to even
    case UnaryKind::kSign: return integral ? at::sign(x) : at::where(x.isnan(), x, at::sign(x));
    case UnaryKind::kSquare: return at::mul(x, x);
    case UnaryKind::kLogicalNot: return at::logical_not(x);
    case UnaryKind::kCount: break;
  }
  throw std::invalid_argument("unknown unary kind");  // inference rejects unknown kinds
}

// Every tensor of `shape` holding `value` in dtype d (storage-only dtypes included).
at::Tensor full(const Shape& shape, const ir::Scalar& value, DType d) {
  if (is_storage_only(d)) {
    // The 16-bit pattern by tensorwire's own conversion, filled as i16 and viewed as d.
    const uint16_t bits =
        d == kF16 ? ir::scalar_to<ir::Half>(value).bits : ir::scalar_to<ir::BFloat16>(value).bits;
    return at::full(sizes(shape), static_cast<int16_t>(bits), at::TensorOptions().dtype(at::kShort))
        .view(scalar_type(d));
  }
  return at::full(sizes(shape), scalar_in(value, d), options(d));
}

}  // namespace

// ---- helpers (torch_ops.h) ----

at::Tensor cast(const at::Tensor& x, DType to) {
  if (x.scalar_type() == scalar_type(to)) return x;
  if (x.is_floating_point() && is_integral(to)) return float_to_integral(x, to);
  if (x.scalar_type() == at::kDouble && is_storage_only(to)) {
    return x.to(at::kFloat).to(scalar_type(to));  // f64 -> f16/bf16 rounds through f32
  }
  return x.to(scalar_type(to));
}

at::Scalar scalar_in(const ir::Scalar& s, DType d) {
  return visit_compute(d, [&](auto t) { return at::Scalar(ir::scalar_to<decltype(t)>(s)); });
}

at::Scalar clamp_bound_in(const ir::Scalar& s, DType d) {
  return visit_compute(d, [&](auto t) { return at::Scalar(ir::clamp_bound<decltype(t)>(s)); });
}

at::Tensor scalar_tensor(const ir::Scalar& s, DType d) {
  return visit_compute(d, [&](auto t) {
    using T = decltype(t);
    return zero_dim<T>(ir::scalar_to<T>(s), scalar_type(d));
  });
}

BadIndex find_bad_index(const at::Tensor& index, int64_t limit, bool negatives) {
  if (index.numel() == 0) return {};
  const at::Tensor flat = index.reshape({-1}).to(at::kLong);
  const at::Tensor bad = flat.lt(negatives ? -limit : 0).logical_or_(flat.ge(limit));
  if (!bad.any().item<bool>()) return {};
  const int64_t pos = bad.to(at::kByte).argmax().item<int64_t>();  // the first one
  return {pos, flat[pos].item<int64_t>()};
}

at::Tensor wrap_index(const at::Tensor& index, int64_t size) {
  const at::Tensor i = index.to(at::kLong);
  return at::where(i.lt(0), i.add(size), i);
}

// ---- creation ----

Result<at::Tensor> run(const ir::Full& op, const Ctx&) {
  return full(op.shape, op.value, op.dtype);
}

// On the host: docs/ops.md computes start + i * step with one rounding (a fused multiply-add),
// which no ATen op does; the CPU kernel gives exactly those values.
Result<at::Tensor> run(const ir::Arange& op, const Ctx& ctx) {
  ir::Arange host = op;
  host.out = ctx.host().fresh();
  return ctx.host().run(host);
}

Result<at::Tensor> run(const ir::Eye& op, const Ctx&) {
  // ATen has no bf16 eye; 0 and 1 convert exactly.
  if (op.dtype == kBF16) return at::eye(op.n, op.m, options(kF32)).to(at::kBFloat16);
  return at::eye(op.n, op.m, options(op.dtype));
}

Result<at::Tensor> run(const ir::FromHost& op, const Ctx& ctx) {
  TW_ASSIGN_OR_RETURN(Buffer bytes, from_host_storage(op, ctx.out()));
  return tensor_over(std::move(bytes), ctx.out());
}

// The random ops: tensorwire's generator on the host (ATen's differs), so a seed gives the
// same values on every backend.
Result<at::Tensor> run(const ir::RandUniform& op, const Ctx& ctx) {
  ir::RandUniform host = op;
  host.out = ctx.host().fresh();
  return ctx.host().run(host);
}

Result<at::Tensor> run(const ir::RandNormal& op, const Ctx& ctx) {
  ir::RandNormal host = op;
  host.out = ctx.host().fresh();
  return ctx.host().run(host);
}

Result<at::Tensor> run(const ir::Bernoulli& op, const Ctx& ctx) {
  ir::Bernoulli host = op;
  host.p = ctx.host().put(ctx.in(op.p));
  host.out = ctx.host().fresh();
  return ctx.host().run(host);
}

// ---- elementwise ----

Result<at::Tensor> run(const ir::GeluBackward& op, const Ctx& ctx) {
  return at::gelu_backward(ctx.in(op.grad), ctx.in(op.x));  // the erf form, as gelu above
}

Result<at::Tensor> run(const ir::Unary& op, const Ctx& ctx) {
  if (op.kind == UnaryKind::kLogicalNot) return at::logical_not(ctx.in(op.x));
  // Real functions of integral or bool inputs compute in f32: the output dtype says which.
  return unary(op.kind, cast(ctx.in(op.x), ctx.out().dtype));
}

Result<at::Tensor> run(const ir::Binary& op, const Ctx& ctx) {
  const at::Tensor& a0 = ctx.in(op.a);
  const at::Tensor& b0 = ctx.in(op.b);
  TW_ASSIGN_OR_RETURN(DType da, dtype_of(a0.scalar_type()));
  TW_ASSIGN_OR_RETURN(DType db, dtype_of(b0.scalar_type()));
  const DType dtype = ir::binary_compute_dtype(op.kind, da, db);
  const at::Tensor a = cast(a0, dtype), b = cast(b0, dtype);
  if (op.kind == BinaryKind::kRemainder && is_integral(dtype) && numel(ctx.out().shape) > 0) {
    TW_RETURN_NOT_OK(check_divisor(b, ir::kind_name(op.kind), meta_of(b0)));
  }
  return binary(op.kind, a, b);
}

Result<at::Tensor> run(const ir::BinaryScalar& op, const Ctx& ctx) {
  const std::string name = std::string(ir::kind_name(op.kind)) + "_scalar";
  const at::Tensor& a0 = ctx.in(op.a);
  TW_ASSIGN_OR_RETURN(DType da, dtype_of(a0.scalar_type()));
  const DType dtype = ir::binary_scalar_compute_dtype(op.kind, da, op.s.is_float);
  const at::Tensor a = cast(a0, dtype);
  const at::Tensor s = scalar_tensor(op.s, dtype);
  if (op.kind == BinaryKind::kRemainder && is_integral(dtype) && a.numel() > 0) {
    if (!op.reverse && s.eq(0).item<bool>()) {
      return invalid_argument(name + ": integer remainder by zero (the scalar is 0)");
    }
    if (op.reverse) TW_RETURN_NOT_OK(check_divisor(a, name, meta_of(a0)));
  }
  return op.reverse ? binary(op.kind, s, a) : binary(op.kind, a, s);
}

Result<at::Tensor> run(const ir::Where& op, const Ctx& ctx) {
  const DType dtype = ctx.out().dtype;
  return at::where(ctx.in(op.cond), cast(ctx.in(op.a), dtype), cast(ctx.in(op.b), dtype));
}

// The update of docs/ops.md in the dtype, one ATen op per step as tw::optim::Adam's unfused ops.
Result<std::vector<at::Tensor>> run(const ir::AdamStep& op, const Ctx& ctx) {
  const DType d = ctx.out().dtype;
  auto s = [&](double v) { return scalar_in(ir::Scalar(v), d); };
  at::Tensor value = ctx.in(op.param);
  at::Tensor g = ctx.in(op.grad);
  if (op.weight_decay != 0) {
    if (op.decoupled) {
      value = at::mul(value, s(1.0 - op.lr * op.weight_decay));
    } else {
      g = at::add(g, at::mul(value, s(op.weight_decay)));
    }
  }
  const at::Tensor& m = ctx.in(op.exp_avg);
  at::Tensor m_new = at::add(m, at::mul(at::sub(g, m), s(1.0 - op.beta1)));
  at::Tensor v_new = at::add(at::mul(ctx.in(op.exp_avg_sq), s(op.beta2)),
                             at::mul(at::mul(g, g), s(1.0 - op.beta2)));
  const at::Tensor denom = at::add(at::div(at::sqrt(v_new), ctx.in(op.bias2_sqrt)), s(op.eps));
  at::Tensor p_new = at::sub(value, at::mul(at::div(m_new, denom), ctx.in(op.step_size)));
  return std::vector<at::Tensor>{p_new.contiguous(), m_new.contiguous(), v_new.contiguous()};
}

Result<at::Tensor> run(const ir::Linear& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const at::Tensor wt = ctx.in(op.w).t();
  at::Tensor y = ctx.has(op.bias) ? at::addmm(ctx.in(op.bias), x, wt) : at::mm(x, wt);
  if (op.relu) y.relu_();  // NaN stays NaN, as in the Unary op
  return y;
}

Result<at::Tensor> run(const ir::Clamp& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const DType d = ctx.out().dtype;
  const c10::optional<at::Scalar> lo =
      op.has_lo ? c10::optional<at::Scalar>(clamp_bound_in(op.lo, d)) : c10::nullopt;
  const c10::optional<at::Scalar> hi =
      op.has_hi ? c10::optional<at::Scalar>(clamp_bound_in(op.hi, d)) : c10::nullopt;
  if (!lo && !hi) return x;
  const bool nan_bound = (lo && lo->isFloatingPoint() && std::isnan(lo->toDouble())) ||
                         (hi && hi->isFloatingPoint() && std::isnan(hi->toDouble()));
  if (!nan_bound) return at::clamp(x, lo, hi);
  // ATen's clamp ignores a NaN bound; ours is min(max(x, lo), hi) with NaN propagating.
  at::Tensor r = x;
  if (lo) r = at::maximum(r, at::full({}, *lo, options(d)));
  if (hi) r = at::minimum(r, at::full({}, *hi, options(d)));
  return r;
}

Result<at::Tensor> run(const ir::MaskedFill& op, const Ctx& ctx) {
  const DType d = ctx.out().dtype;
  return at::masked_fill(ctx.in(op.x), ctx.in(op.mask), scalar_in(op.value, d));
}

Result<at::Tensor> run(const ir::Cast& op, const Ctx& ctx) { return cast(ctx.in(op.x), op.dtype); }

}  // namespace tw::torch
