// Unary kernels, and gelu's gradient. f32 exp, log, tanh, sigmoid, erf and gelu use the
// vectorised polynomials of vec_math.h; the other float functions come from libm (f64 always does).
#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/vec_math.h"

namespace tw::cpu {
namespace {

using ir::UnaryKind;

constexpr float kSqrtHalfF = 0.70710678118654752f;
constexpr double kSqrtHalf = 0.70710678118654752;
constexpr float kInvSqrt2PiF = 0.39894228040143268f;  // the normal density at 0
constexpr double kInvSqrt2Pi = 0.39894228040143268;

using ir::is_float_math;  // the kinds' math column (ir/ops.h)

template <class T>
T neg(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    return -x;  // not 0 - x, which gives +0 for +0
  } else {
    return wrap_sub(T(0), x);
  }
}

template <class T>
T sign(T x) {
  if constexpr (std::is_floating_point_v<T>) {
    if (x != x) return x;  // NaN propagates (as numpy; PyTorch gives 0)
  }
  if constexpr (std::is_signed_v<T>) {
    return static_cast<T>((T(0) < x) - (x < T(0)));
  } else {
    return static_cast<T>(x != T(0));
  }
}

template <class T, class F>
void apply(const T* in, T* out, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

// The kinds that keep a numeric dtype (integral inputs included).
template <class T>
void numeric_block(UnaryKind k, const T* in, T* out, int64_t n) {
  switch (k) {
    case UnaryKind::kNeg: return apply(in, out, n, [](T x) { return neg(x); });
    case UnaryKind::kAbs:
      if constexpr (std::is_floating_point_v<T>) {
        return apply(in, out, n, [](T x) { return std::fabs(x); });
      } else if constexpr (std::is_signed_v<T>) {
        return apply(in, out, n, [](T x) { return x < 0 ? neg(x) : x; });
      } else {
        return apply(in, out, n, [](T x) { return x; });
      }
    case UnaryKind::kSign: return apply(in, out, n, [](T x) { return sign(x); });
    case UnaryKind::kSquare: return apply(in, out, n, [](T x) { return wrap_mul(x, x); });
    case UnaryKind::kRelu:
      if constexpr (std::is_unsigned_v<T>) {
        return apply(in, out, n, [](T x) { return x; });
      } else {  // NaN < 0 is false: NaN propagates
        return apply(in, out, n, [](T x) { return x < T(0) ? T(0) : x; });
      }
    case UnaryKind::kFloor:
    case UnaryKind::kCeil:
    case UnaryKind::kRound:
      if constexpr (std::is_same_v<T, float>) {
        if (k == UnaryKind::kFloor) {
          return vm::map_f32(in, out, n, [](auto v) { return vm::round_down(v); });
        }
        if (k == UnaryKind::kCeil) {
          return vm::map_f32(in, out, n, [](auto v) { return vm::round_up(v); });
        }
        return vm::map_f32(in, out, n, [](auto v) { return vm::round_even(v); });
      } else if constexpr (std::is_same_v<T, double>) {
        if (k == UnaryKind::kFloor) return apply(in, out, n, [](T x) { return std::floor(x); });
        if (k == UnaryKind::kCeil) return apply(in, out, n, [](T x) { return std::ceil(x); });
        return apply(in, out, n, [](T x) { return std::nearbyint(x); });  // half to even
      } else {
        return apply(in, out, n, [](T x) { return x; });
      }
    default: return;
  }
}

void float_block(UnaryKind k, const float* in, float* out, int64_t n) {
  using namespace vm;
  switch (k) {
    case UnaryKind::kExp: return map_f32<true>(in, out, n, [](auto v) { return exp_f32(v); });
    case UnaryKind::kLog: return map_f32<true>(in, out, n, [](auto v) { return log_f32(v); });
    case UnaryKind::kTanh: return map_f32<true>(in, out, n, [](auto v) { return tanh_f32(v); });
    case UnaryKind::kSigmoid:
      return map_f32<true>(in, out, n, [](auto v) { return sigmoid_f32(v); });
    case UnaryKind::kErf: return map_f32<true>(in, out, n, [](auto v) { return erf_f32(v); });
    case UnaryKind::kGelu:
      return map_f32<true>(in, out, n, [](auto v) {
        auto half_x = mul(v, splat(v, 0.5f));
        return mul(half_x, add(splat(v, 1.0f), erf_f32(mul(v, splat(v, kSqrtHalfF)))));
      });
    case UnaryKind::kSqrt: return map_f32(in, out, n, [](auto v) { return vsqrt(v); });
    case UnaryKind::kRsqrt:
      return map_f32(in, out, n, [](auto v) { return div(splat(v, 1.0f), vsqrt(v)); });
    case UnaryKind::kRecip:
      return map_f32(in, out, n, [](auto v) { return div(splat(v, 1.0f), v); });
    case UnaryKind::kLog1p: return apply(in, out, n, [](float x) { return std::log1p(x); });
    case UnaryKind::kSin: return apply(in, out, n, [](float x) { return std::sin(x); });
    case UnaryKind::kCos: return apply(in, out, n, [](float x) { return std::cos(x); });
    default: return numeric_block(k, in, out, n);
  }
}

void float_block(UnaryKind k, const double* in, double* out, int64_t n) {
  using D = double;
  switch (k) {
    case UnaryKind::kExp: return apply(in, out, n, [](D x) { return std::exp(x); });
    case UnaryKind::kLog: return apply(in, out, n, [](D x) { return std::log(x); });
    case UnaryKind::kTanh: return apply(in, out, n, [](D x) { return std::tanh(x); });
    case UnaryKind::kSigmoid:
      return apply(in, out, n, [](D x) { return 1.0 / (1.0 + std::exp(-x)); });
    case UnaryKind::kErf: return apply(in, out, n, [](D x) { return std::erf(x); });
    case UnaryKind::kGelu:
      return apply(in, out, n, [](D x) { return x * 0.5 * (1.0 + std::erf(x * kSqrtHalf)); });
    case UnaryKind::kSqrt: return apply(in, out, n, [](D x) { return std::sqrt(x); });
    case UnaryKind::kRsqrt: return apply(in, out, n, [](D x) { return 1.0 / std::sqrt(x); });
    case UnaryKind::kRecip: return apply(in, out, n, [](D x) { return 1.0 / x; });
    case UnaryKind::kLog1p: return apply(in, out, n, [](D x) { return std::log1p(x); });
    case UnaryKind::kSin: return apply(in, out, n, [](D x) { return std::sin(x); });
    case UnaryKind::kCos: return apply(in, out, n, [](D x) { return std::cos(x); });
    default: return numeric_block(k, in, out, n);
  }
}

// Transcendental kinds cost tens of cycles per element: smaller tensors are worth splitting.
int64_t min_grain_for(UnaryKind k) {
  return is_float_math(k) ? kElementwiseGrain / 4 : kElementwiseGrain;
}

// g * d/dx gelu(x) = g * (Phi(x) + x phi(x)), Phi(x) = (1 + erf(x / sqrt 2)) / 2 and phi the
// normal density, for either lane type of vec_math.h (the same operations, so the same bits).
template <class V>
V gelu_grad_f32(V g, V x) {
  using namespace vm;
  const V cdf = fmadd(erf_f32(mul(x, splat(x, kSqrtHalfF))), splat(x, 0.5f), splat(x, 0.5f));
  const V pdf = mul(exp_f32(mul(mul(x, x), splat(x, -0.5f))), splat(x, kInvSqrt2PiF));
  return mul(g, fmadd(x, pdf, cdf));
}

void gelu_grad_block(const float* g, const float* x, float* out, int64_t n) {
  int64_t i = 0;
#ifdef TW_VEC_MATH_AVX2
  for (; i + 8 <= n; i += 8) {
    vm::prefetch_at(x + i, vm::kPrefetchAhead * int64_t{sizeof(float)});
    vm::prefetch_at(g + i, vm::kPrefetchAhead * int64_t{sizeof(float)});
    _mm256_storeu_ps(out + i, gelu_grad_f32(_mm256_loadu_ps(g + i), _mm256_loadu_ps(x + i)));
  }
#endif
  for (; i < n; ++i) out[i] = gelu_grad_f32(g[i], x[i]);
}

void gelu_grad_block(const double* g, const double* x, double* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double cdf = 0.5 * (1.0 + std::erf(x[i] * kSqrtHalf));
    const double pdf = std::exp(-0.5 * x[i] * x[i]) * kInvSqrt2Pi;
    out[i] = g[i] * (cdf + x[i] * pdf);
  }
}

}  // namespace

Status run(const ir::GeluBackward& op, KernelContext& ctx) {
  const CpuTensor g = contiguous(ctx.in(op.grad));
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  const int64_t n = out.numel();
  return visit_float(x.dtype, "gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* gp = g.data<T>();
    const T* xp = x.data<T>();
    T* o = out.data<T>();
    parallel_chunks(n, chunk_grain(n, kElementwiseGrain / 4), [&](int64_t, int64_t b, int64_t e) {
      gelu_grad_block(gp + b, xp + b, o + b, e - b);
    });
    return Status::OK();
  });
}

Status run(const ir::Unary& op, KernelContext& ctx) {
  const char* name = ir::kind_name(op.kind);
  const CpuTensor& x0 = ctx.in(op.x);
  if (op.kind == UnaryKind::kLogicalNot) {
    TW_RETURN_NOT_OK(check_out_dtype(name, ctx.meta(op.out), kBool));
    CpuTensor& out = ctx.alloc(op.out);
    return visit_compute(x0.dtype, name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      map_unary<T, bool>(x0, out.data<bool>(), kElementwiseGrain,
                         [](const T* in, bool* o, int64_t n) {
                           for (int64_t i = 0; i < n; ++i) o[i] = in[i] == T(0);
                         });
      return Status::OK();
    });
  }
  const bool float_math = is_float_math(op.kind);
  const DType dtype = float_math && !is_float(x0.dtype) ? kF32 : x0.dtype;
  TW_RETURN_NOT_OK(check_out_dtype(name, ctx.meta(op.out), dtype));
  CpuTensor x_cast, x_copy;
  const CpuTensor& x = row_major_operand(as_dtype(x0, dtype, x_cast), x_copy);
  CpuTensor& out = ctx.alloc(op.out);
  const int64_t grain = min_grain_for(op.kind);
  if (float_math) {
    return visit_float(dtype, name, [&](auto tag) {
      using T = typename decltype(tag)::type;
      map_unary<T, T>(x, out.data<T>(), grain,
                      [&](const T* in, T* o, int64_t n) { float_block(op.kind, in, o, n); });
      return Status::OK();
    });
  }
  return visit_numeric(dtype, name, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T>) {
      map_unary<T, T>(x, out.data<T>(), grain,
                      [&](const T* in, T* o, int64_t n) { float_block(op.kind, in, o, n); });
    } else {
      map_unary<T, T>(x, out.data<T>(), grain,
                      [&](const T* in, T* o, int64_t n) { numeric_block(op.kind, in, o, n); });
    }
    return Status::OK();
  });
}

}  // namespace tw::cpu
