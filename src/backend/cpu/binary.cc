// Binary, BinaryScalar, Where, Clamp and MaskedFill. Operands are brought to the compute dtype
// first (a copy only when dtypes differ), then every kind runs one of three loops that GCC
// vectorises: tensor-tensor, tensor-scalar and scalar-tensor over contiguous runs. A broadcast
// operand whose run has stride 0 takes the scalar loop; other strides are gathered into a stack
// buffer a block at a time.
#include <immintrin.h>

#include <atomic>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/tile.h"
#include "ir/infer.h"

namespace tw::cpu {
namespace {

using ir::BinaryKind;

template <BinaryKind K>
using KindC = std::integral_constant<BinaryKind, K>;

template <class F>
Status visit_kind(BinaryKind k, F&& f) {
  switch (k) {
#define TW_KIND_CASE(Name, ...) \
  case BinaryKind::k##Name: return f(KindC<BinaryKind::k##Name>{});
    TW_BINARY_KINDS(TW_KIND_CASE)
#undef TW_KIND_CASE
    default: break;
  }
  return internal_error("binary: unknown kind " + std::to_string(static_cast<int>(k)));
}

constexpr bool is_arithmetic(BinaryKind k) { return !ir::is_comparison(k); }

// Integers: exact by repeated squaring, wrapping; negative exponents per docs/ops.md.
template <class T>
T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  T result = 1;
  while (exp != 0) {
    if (exp & 1) result = wrap_mul(result, base);
    exp = static_cast<T>(exp >> 1);
    if (exp != 0) base = wrap_mul(base, base);
  }
  return result;
}

// Python's remainder: the result takes the divisor's sign. Integer divisors are checked for
// zero before any kernel runs.
template <class T>
T py_remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T m = std::fmod(a, b);
    if (m == 0) return std::copysign(T(0), b);
    return (b < 0) != (m < 0) ? m + b : m;
  } else if constexpr (std::is_signed_v<T>) {
    if (b == -1) return 0;  // min % -1 overflows in C++; the true remainder is 0
    T m = static_cast<T>(a % b);
    return m != 0 && ((m < 0) != (b < 0)) ? static_cast<T>(m + b) : m;
  } else {
    return static_cast<T>(a % b);
  }
}

template <BinaryKind K, class T>
inline auto bin(T a, T b) {
  if constexpr (K == BinaryKind::kAdd) {
    return wrap_add(a, b);
  } else if constexpr (K == BinaryKind::kSub) {
    return wrap_sub(a, b);
  } else if constexpr (K == BinaryKind::kMul) {
    return wrap_mul(a, b);
  } else if constexpr (K == BinaryKind::kDiv) {
    return a / b;
  } else if constexpr (K == BinaryKind::kPow) {
    if constexpr (std::is_floating_point_v<T>) {
      return std::pow(a, b);
    } else {
      return int_pow(a, b);
    }
  } else if constexpr (K == BinaryKind::kMaximum) {
    return max_nan(a, b);
  } else if constexpr (K == BinaryKind::kMinimum) {
    return min_nan(a, b);
  } else if constexpr (K == BinaryKind::kRemainder) {
    return py_remainder(a, b);
  } else if constexpr (K == BinaryKind::kEq) {
    return a == b;
  } else if constexpr (K == BinaryKind::kNe) {
    return a != b;
  } else if constexpr (K == BinaryKind::kLt) {
    return a < b;
  } else if constexpr (K == BinaryKind::kLe) {
    return a <= b;
  } else if constexpr (K == BinaryKind::kGt) {
    return a > b;
  } else if constexpr (K == BinaryKind::kGe) {
    return a >= b;
  } else if constexpr (K == BinaryKind::kLogicalAnd) {
    return (a != T(0)) && (b != T(0));
  } else if constexpr (K == BinaryKind::kLogicalOr) {
    return (a != T(0)) || (b != T(0));
  } else {
    static_assert(K == BinaryKind::kLogicalXor);
    return (a != T(0)) != (b != T(0));
  }
}

template <BinaryKind K, class T>
using OutT = std::conditional_t<ir::is_comparison(K), bool, T>;

template <BinaryKind K, class T>
void loop_vv(const T* __restrict a, const T* __restrict b, OutT<K, T>* __restrict o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = bin<K>(a[i], b[i]);
}
template <BinaryKind K, class T>
void loop_vs(const T* __restrict a, T s, OutT<K, T>* __restrict o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = bin<K>(a[i], s);
}
template <BinaryKind K, class T>
void loop_sv(T s, const T* __restrict b, OutT<K, T>* __restrict o, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = bin<K>(s, b[i]);
}

// f32 add, sub, mul and div of two contiguous operands into an output too large for the caches
// (past kStreamingStoreBytes): streaming stores straight from the registers skip the
// read-for-ownership of every output line. The same IEEE operations as loop_vv, so the same
// values. Fenced at the end, before the chunk is reported done.
template <BinaryKind K>
constexpr bool kStreamsF32 = K == BinaryKind::kAdd || K == BinaryKind::kSub ||
                             K == BinaryKind::kMul || K == BinaryKind::kDiv;

template <BinaryKind K>
void loop_vv_stream(const float* __restrict a, const float* __restrict b, float* __restrict o,
                    int64_t n) {
  int64_t i = 0;
  for (; i < n && reinterpret_cast<uintptr_t>(o + i) % 32 != 0; ++i) o[i] = bin<K>(a[i], b[i]);
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i), y = _mm256_loadu_ps(b + i);
    __m256 r;
    if constexpr (K == BinaryKind::kAdd) {
      r = _mm256_add_ps(x, y);
    } else if constexpr (K == BinaryKind::kSub) {
      r = _mm256_sub_ps(x, y);
    } else if constexpr (K == BinaryKind::kMul) {
      r = _mm256_mul_ps(x, y);
    } else {
      r = _mm256_div_ps(x, y);
    }
    _mm256_stream_ps(o + i, r);
  }
  for (; i < n; ++i) o[i] = bin<K>(a[i], b[i]);
  _mm_sfence();
}

// Which element types a kind is defined on (inference rejects the rest; the kernel does not
// instantiate them).
template <BinaryKind K, class T>
constexpr bool kind_accepts() {
  if constexpr (K == BinaryKind::kDiv) return std::is_floating_point_v<T>;
  if constexpr (is_arithmetic(K)) return !std::is_same_v<T, bool>;
  return true;
}

template <BinaryKind K>
Status visit_kind_dtype(DType d, const char* name, auto&& f) {
  return visit_compute(d, name, [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    if constexpr (kind_accepts<K, T>()) {
      return f(tag);
    } else {
      return unsupported_dtype(name, d);
    }
  });
}

// Whether any element of t is zero (the integer remainder check).
template <class T>
bool has_zero(const CpuTensor& t) {
  std::atomic<bool> found{false};
  const T* base = t.data<T>();
  auto seg = [&](int64_t, const Run<1>& off, const Run<1>& st, int64_t len) {
    bool z = false;
    for (int64_t i = 0; i < len; ++i) z |= base[off[0] + i * st[0]] == T(0);
    if (z) found.store(true, std::memory_order_relaxed);
  };
  for_each_run<1>(t.shape, {t.strides}, kElementwiseGrain, seg);
  return found.load();
}

Status remainder_by_zero(const std::string& name, const CpuTensor& divisor) {
  return invalid_argument(name + ": integer remainder by zero (the divisor " +
                          meta_str(divisor.meta()) + " holds a 0); use a float dtype for NaN");
}

template <BinaryKind K, class T>
void binary_map(const CpuTensor& a, const CpuTensor& b, OutT<K, T>* out, const Shape& shape) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  const bool streaming = streams_output(numel(shape) * static_cast<int64_t>(sizeof(OutT<K, T>)));
  auto seg = [&](int64_t pos, const Run<2>& off, const Run<2>& st, int64_t len) {
    const T* ra = pa + off[0];
    const T* rb = pb + off[1];
    OutT<K, T>* ro = out + pos;
    if constexpr (std::is_same_v<T, float> && kStreamsF32<K>) {
      if (streaming && st[0] == 1 && st[1] == 1) return loop_vv_stream<K>(ra, rb, ro, len);
    }
    if (st[0] == 1 && st[1] == 1) return loop_vv<K>(ra, rb, ro, len);
    if (st[0] == 1 && st[1] == 0) return loop_vs<K>(ra, *rb, ro, len);
    if (st[0] == 0 && st[1] == 1) return loop_sv<K>(*ra, rb, ro, len);
    alignas(64) T ba[kRunBlock];
    alignas(64) T bb[kRunBlock];
    for (int64_t i = 0; i < len; i += kRunBlock) {
      const int64_t m = std::min(kRunBlock, len - i);
      loop_vv<K>(contiguous_run(ra + i * st[0], st[0], m, ba),
                 contiguous_run(rb + i * st[1], st[1], m, bb), ro + i, m);
    }
  };
  Run<2> steps;
  if (flat_operand(a, shape, steps[0]) && flat_operand(b, shape, steps[1])) {
    return for_each_flat<2>(numel(shape), steps, kElementwiseGrain, seg);
  }
  for_each_run<2>(shape, {broadcast_strides(a, shape), broadcast_strides(b, shape)},
                  kElementwiseGrain, seg);
}

}  // namespace

// A float tensor times a bool mask of its shape, both contiguous (ReLU's backward, g * (y > 0)):
// one pass, the mask read as 0 or 1 where it stands, instead of first casting the whole mask to
// the float dtype. The same products, so the same bits.
template <class T>
void mul_by_mask(const T* x, const bool* mask, T* out, int64_t n) {
  parallel_chunks(n, chunk_grain(n), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = x[i] * static_cast<T>(mask[i]);
  });
}

Status run(const ir::Binary& op, KernelContext& ctx) {
  const std::string name = ir::kind_name(op.kind);
  const CpuTensor& a0 = ctx.in(op.a);
  const CpuTensor& b0 = ctx.in(op.b);
  const DType dtype = ir::binary_compute_dtype(op.kind, a0.dtype, b0.dtype);
  TW_RETURN_NOT_OK(
      check_out_dtype(name.c_str(), ctx.meta(op.out), ir::is_comparison(op.kind) ? kBool : dtype));
  const bool a_mask = a0.dtype == kBool;
  const CpuTensor& x = a_mask ? b0 : a0;
  const CpuTensor& mask = a_mask ? a0 : b0;
  if (op.kind == BinaryKind::kMul && mask.dtype == kBool && x.dtype == dtype &&
      (dtype == kF32 || dtype == kF64) && x.shape == mask.shape && x.is_contiguous() &&
      mask.is_contiguous()) {
    return visit_float(dtype, name.c_str(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      mul_by_mask<T>(x.data<T>(), mask.data<bool>(), ctx.alloc(op.out).template data<T>(),
                     x.numel());
      return Status::OK();
    });
  }
  CpuTensor a_cast, a_copy;
  const CpuTensor& a = row_major_operand(as_dtype(a0, dtype, a_cast), a_copy);
  CpuTensor b_cast, b_copy;
  const CpuTensor& b = row_major_operand(as_dtype(b0, dtype, b_cast), b_copy);
  const Shape& shape = ctx.meta(op.out).shape;
  return visit_kind(op.kind, [&](auto kc) {
    constexpr BinaryKind K = decltype(kc)::value;
    return visit_kind_dtype<K>(dtype, name.c_str(), [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      if constexpr (K == BinaryKind::kRemainder && std::is_integral_v<T>) {
        if (numel(shape) > 0 && has_zero<T>(b)) return remainder_by_zero(name, b0);
      }
      binary_map<K, T>(a, b, ctx.alloc(op.out).template data<OutT<K, T>>(), shape);
      return Status::OK();
    });
  });
}

Status run(const ir::BinaryScalar& op, KernelContext& ctx) {
  const std::string name = std::string(ir::kind_name(op.kind)) + "_scalar";
  const CpuTensor& a0 = ctx.in(op.a);
  const DType dtype = ir::binary_scalar_compute_dtype(op.kind, a0.dtype, op.s.is_float);
  TW_RETURN_NOT_OK(
      check_out_dtype(name.c_str(), ctx.meta(op.out), ir::is_comparison(op.kind) ? kBool : dtype));
  CpuTensor a_cast, a_copy;
  const CpuTensor& a = row_major_operand(as_dtype(a0, dtype, a_cast), a_copy);
  return visit_kind(op.kind, [&](auto kc) {
    constexpr BinaryKind K = decltype(kc)::value;
    return visit_kind_dtype<K>(dtype, name.c_str(), [&](auto tag) -> Status {
      using T = typename decltype(tag)::type;
      const T s = scalar_to<T>(op.s);
      if constexpr (K == BinaryKind::kRemainder && std::is_integral_v<T>) {
        if (a.numel() > 0) {
          if (!op.reverse && s == T(0)) {
            return invalid_argument(name + ": integer remainder by zero (the scalar is 0)");
          }
          if (op.reverse && has_zero<T>(a)) return remainder_by_zero(name, a0);
        }
      }
      using O = OutT<K, T>;
      O* out = ctx.alloc(op.out).template data<O>();
      if (op.reverse) {
        map_unary<T, O>(a, out, kElementwiseGrain,
                        [=](const T* in, O* o, int64_t n) { loop_sv<K>(s, in, o, n); });
      } else {
        map_unary<T, O>(a, out, kElementwiseGrain,
                        [=](const T* in, O* o, int64_t n) { loop_vs<K>(in, s, o, n); });
      }
      return Status::OK();
    });
  });
}

Status run(const ir::Where& op, KernelContext& ctx) {
  const CpuTensor& cond = ctx.in(op.cond);
  const CpuTensor& a0 = ctx.in(op.a);
  const CpuTensor& b0 = ctx.in(op.b);
  const DType dtype = promote(a0.dtype, b0.dtype);
  TW_RETURN_NOT_OK(check_out_dtype("where", ctx.meta(op.out), dtype));
  if (cond.dtype != kBool) return unsupported_dtype("where", cond.dtype);
  CpuTensor a_cast, a_copy;
  const CpuTensor& a = row_major_operand(as_dtype(a0, dtype, a_cast), a_copy);
  CpuTensor b_cast, b_copy;
  const CpuTensor& b = row_major_operand(as_dtype(b0, dtype, b_cast), b_copy);
  const Shape& shape = ctx.meta(op.out).shape;
  return visit_compute(dtype, "where", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = ctx.alloc(op.out).template data<T>();
    const bool* pc = cond.data<bool>();
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    auto seg = [&](int64_t pos, const Run<3>& off, const Run<3>& st, int64_t len) {
      alignas(64) bool bc[kRunBlock];
      alignas(64) T ba[kRunBlock];
      alignas(64) T bb[kRunBlock];
      for (int64_t i = 0; i < len; i += kRunBlock) {
        const int64_t m = std::min(kRunBlock, len - i);
        const bool* c = contiguous_run(pc + off[0] + i * st[0], st[0], m, bc);
        const T* x = contiguous_run(pa + off[1] + i * st[1], st[1], m, ba);
        const T* y = contiguous_run(pb + off[2] + i * st[2], st[2], m, bb);
        T* o = out + pos + i;
        for (int64_t j = 0; j < m; ++j) {
          const T xv = x[j], yv = y[j];  // both loaded: the select vectorises
          o[j] = c[j] ? xv : yv;
        }
      }
    };
    for_each_run<3>(
        shape,
        {broadcast_strides(cond, shape), broadcast_strides(a, shape), broadcast_strides(b, shape)},
        kElementwiseGrain, seg);
    return Status::OK();
  });
}

Status run(const ir::Clamp& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  TW_RETURN_NOT_OK(check_out_dtype("clamp", ctx.meta(op.out), x.dtype));
  CpuTensor& out = ctx.alloc(op.out);
  return visit_numeric(x.dtype, "clamp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T lo = clamp_bound<T>(op.lo);
    const T hi = clamp_bound<T>(op.hi);
    T* o = out.data<T>();
    if (op.has_lo && op.has_hi) {
      map_unary<T, T>(x, o, kElementwiseGrain, [=](const T* in, T* r, int64_t n) {
        for (int64_t i = 0; i < n; ++i) r[i] = min_nan(max_nan(in[i], lo), hi);
      });
    } else if (op.has_lo) {
      map_unary<T, T>(x, o, kElementwiseGrain, [=](const T* in, T* r, int64_t n) {
        for (int64_t i = 0; i < n; ++i) r[i] = max_nan(in[i], lo);
      });
    } else if (op.has_hi) {
      map_unary<T, T>(x, o, kElementwiseGrain, [=](const T* in, T* r, int64_t n) {
        for (int64_t i = 0; i < n; ++i) r[i] = min_nan(in[i], hi);
      });
    } else {
      map_unary<T, T>(x, o, kElementwiseGrain,
                      [](const T* in, T* r, int64_t n) { std::copy(in, in + n, r); });
    }
    return Status::OK();
  });
}

Status run(const ir::MaskedFill& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  const CpuTensor& mask = ctx.in(op.mask);
  TW_RETURN_NOT_OK(check_out_dtype("masked_fill", ctx.meta(op.out), x.dtype));
  if (mask.dtype != kBool) return unsupported_dtype("masked_fill", mask.dtype);
  return visit_compute(x.dtype, "masked_fill", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T value = scalar_to<T>(op.value);
    T* out = ctx.alloc(op.out).template data<T>();
    const T* px = x.data<T>();
    const bool* pm = mask.data<bool>();
    auto seg = [&](int64_t pos, const Run<2>& off, const Run<2>& st, int64_t len) {
      alignas(64) T bx[kRunBlock];
      alignas(64) bool bm[kRunBlock];
      for (int64_t i = 0; i < len; i += kRunBlock) {
        const int64_t m = std::min(kRunBlock, len - i);
        const T* xv = contiguous_run(px + off[0] + i * st[0], st[0], m, bx);
        const bool* mv = contiguous_run(pm + off[1] + i * st[1], st[1], m, bm);
        T* o = out + pos + i;
        for (int64_t j = 0; j < m; ++j) o[j] = mv[j] ? value : xv[j];
      }
    };
    for_each_run<2>(x.shape, {x.strides, broadcast_strides(mask, x.shape)}, kElementwiseGrain, seg);
    return Status::OK();
  });
}

}  // namespace tw::cpu
