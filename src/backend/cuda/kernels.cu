// The cuda backend's own kernels but attention's (attention.cu), in one translation unit (nvcc's
// time in CI is the budget: docs/cuda.md): every elementwise family (one kernel per compute
// class; family, kind and dtypes are uniform per launch and switched on at run time, so a kind
// added to the IR's lists needs an entry in backend/kind_math.h, no new kernel), Reduce (a block
// per output, cub::BlockReduce), the row kernels (softmax, log_softmax, layer_norm and its
// backward), the index kernels, Cumsum's scan and adaptive pooling (index_math.h), and Adam.
// Values load and store by the Cast rules of docs/ops.md (ir/convert.h on the host): float to
// integer truncates and saturates, NaN gives 0, f64 reaches f16/bf16 through f32, integers
// narrow by wrapping.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "backend/cuda/index_math.h"
#include "backend/cuda/launch.h"
#include "backend/kind_math.h"
#include "core/philox.h"
#include "tensorwire/dtype.h"

namespace tw::cuda {
namespace {

namespace km = tw::kind_math;
constexpr int32_t kF32 = 0, kF64 = 1, kI32 = 2, kI64 = 3, kU8 = 4, kBool = 5, kF16 = 6, kBF16 = 7;
static_assert(kF32 == int(DType::kF32) && kF64 == int(DType::kF64) && kI32 == int(DType::kI32) &&
              kI64 == int(DType::kI64) && kU8 == int(DType::kU8) && kBool == int(DType::kBool) &&
              kF16 == int(DType::kF16) && kBF16 == int(DType::kBF16));

// ---- loads: element i of a buffer of dtype dt, in a compute type ----
__device__ double load_d(const void* p, int32_t dt, int64_t i) {
  switch (dt) {
    case kF32: return static_cast<const float*>(p)[i];
    case kF64: return static_cast<const double*>(p)[i];
    case kI32: return static_cast<const int32_t*>(p)[i];
    case kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case kU8: return static_cast<const uint8_t*>(p)[i];
    case kBool: return static_cast<const uint8_t*>(p)[i] != 0 ? 1.0 : 0.0;
    case kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  return 0;
}
__device__ float load_f(const void* p, int32_t dt, int64_t i) {
  switch (dt) {
    case kF32: return static_cast<const float*>(p)[i];
    case kF16: return __half2float(static_cast<const __half*>(p)[i]);
    case kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case kI32: return static_cast<float>(static_cast<const int32_t*>(p)[i]);
    case kI64: return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case kU8: return static_cast<const uint8_t*>(p)[i];
    case kBool: return static_cast<const uint8_t*>(p)[i] != 0 ? 1.f : 0.f;
    case kF64: return static_cast<float>(static_cast<const double*>(p)[i]);
  }
  return 0;
}
// Float to integer by the Cast rule: NaN 0, truncation, saturation at the type's range.
template <class To>
__device__ To f2i(double v, double lo, double hi) {
  if (v != v) return 0;
  if (v <= lo) return static_cast<To>(lo);
  if (v >= hi) return To(hi >= 9.2e18 ? INT64_MAX : static_cast<To>(hi));
  return static_cast<To>(v);
}
__device__ int64_t load_i(const void* p, int32_t dt, int64_t i) {
  switch (dt) {
    case kI32: return static_cast<const int32_t*>(p)[i];
    case kI64: return static_cast<const int64_t*>(p)[i];
    case kU8: return static_cast<const uint8_t*>(p)[i];
    case kBool: return static_cast<const uint8_t*>(p)[i] != 0;
    default: return f2i<int64_t>(load_d(p, dt, i), -9223372036854775808.0, 9223372036854775808.0);
  }
}
__device__ bool load_bool(const void* p, int32_t dt, int64_t i) {
  switch (dt) {
    case kF32: return static_cast<const float*>(p)[i] != 0.f;  // NaN: true
    case kF64: return static_cast<const double*>(p)[i] != 0.0;
    case kI32: return static_cast<const int32_t*>(p)[i] != 0;
    case kI64: return static_cast<const int64_t*>(p)[i] != 0;
    case kF16: return __half2float(static_cast<const __half*>(p)[i]) != 0.f;
    case kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]) != 0.f;
    default: return static_cast<const uint8_t*>(p)[i] != 0;
  }
}

// ---- stores: a compute value into element i of dtype dt ----
__device__ void store_f(void* p, int32_t dt, int64_t i, float v) {
  switch (dt) {
    case kF32: static_cast<float*>(p)[i] = v; return;
    case kF64: static_cast<double*>(p)[i] = v; return;
    case kF16: static_cast<__half*>(p)[i] = __float2half_rn(v); return;
    case kBF16: static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v); return;
    case kBool: static_cast<uint8_t*>(p)[i] = v != 0.f; return;
    case kI32: static_cast<int32_t*>(p)[i] = f2i<int32_t>(v, -2147483648.0, 2147483647.0); return;
    case kI64:
      static_cast<int64_t*>(p)[i] = f2i<int64_t>(v, -9223372036854775808.0, 9223372036854775808.0);
      return;
    case kU8: static_cast<uint8_t*>(p)[i] = f2i<uint8_t>(v, 0.0, 255.0); return;
  }
}
__device__ void store_d(void* p, int32_t dt, int64_t i, double v) {
  switch (dt) {
    case kF64: static_cast<double*>(p)[i] = v; return;
    case kBool: static_cast<uint8_t*>(p)[i] = v != 0.0; return;
    case kI32: static_cast<int32_t*>(p)[i] = f2i<int32_t>(v, -2147483648.0, 2147483647.0); return;
    case kI64:
      static_cast<int64_t*>(p)[i] = f2i<int64_t>(v, -9223372036854775808.0, 9223372036854775808.0);
      return;
    case kU8: static_cast<uint8_t*>(p)[i] = f2i<uint8_t>(v, 0.0, 255.0); return;
    default: store_f(p, dt, i, static_cast<float>(v)); return;  // f32, and f16/bf16 through it
  }
}
__device__ void store_i(void* p, int32_t dt, int64_t i, int64_t v) {
  switch (dt) {
    case kI32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;  // wraps
    case kI64: static_cast<int64_t*>(p)[i] = v; return;
    case kU8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); return;
    case kBool: static_cast<uint8_t*>(p)[i] = v != 0; return;
    case kF64: static_cast<double*>(p)[i] = static_cast<double>(v); return;
    default: store_f(p, dt, i, static_cast<float>(v)); return;  // integers reach f16 through f32
  }
}

// The compute class's value type and its load, store and scalar.
template <int C>
struct Class;
template <>
struct Class<kClsF32> {
  using T = float;
  static __device__ T load(const void* p, int32_t dt, int64_t i) { return load_f(p, dt, i); }
  static __device__ void store(void* p, int32_t dt, int64_t i, T v) { store_f(p, dt, i, v); }
  static __device__ T scalar(const ScalarArg& s) { return s.f; }
  static __device__ T unary(int32_t k, T x) { return km::unary_float(k, x); }
  static __device__ T binary(int32_t k, T a, T b) { return km::binary_float(k, a, b); }
  static __device__ bool isnan(T x) { return x != x; }
};
template <>
struct Class<kClsF64> {
  using T = double;
  static __device__ T load(const void* p, int32_t dt, int64_t i) { return load_d(p, dt, i); }
  static __device__ void store(void* p, int32_t dt, int64_t i, T v) { store_d(p, dt, i, v); }
  static __device__ T scalar(const ScalarArg& s) { return s.d; }
  static __device__ T unary(int32_t k, T x) { return km::unary_float(k, x); }
  static __device__ T binary(int32_t k, T a, T b) { return km::binary_float(k, a, b); }
  static __device__ bool isnan(T x) { return x != x; }
};
template <>
struct Class<kClsI64> {
  using T = int64_t;
  static __device__ T load(const void* p, int32_t dt, int64_t i) { return load_i(p, dt, i); }
  static __device__ void store(void* p, int32_t dt, int64_t i, T v) { store_i(p, dt, i, v); }
  static __device__ T scalar(const ScalarArg& s) { return s.i; }
  static __device__ T unary(int32_t k, T x) { return km::unary_int(k, x); }
  static __device__ T binary(int32_t k, T a, T b) { return km::binary_int(k, a, b); }
  static __device__ bool isnan(T) { return false; }
};

__device__ void copy_bits(void* out, int32_t dt, int64_t i, const void* in, int64_t j) {
  switch (dt) {
    case kU8:
    case kBool: static_cast<uint8_t*>(out)[i] = static_cast<const uint8_t*>(in)[j]; return;
    case kF16:
    case kBF16: static_cast<uint16_t*>(out)[i] = static_cast<const uint16_t*>(in)[j]; return;
    case kF64:
    case kI64: static_cast<uint64_t*>(out)[i] = static_cast<const uint64_t*>(in)[j]; return;
    default: static_cast<uint32_t*>(out)[i] = static_cast<const uint32_t*>(in)[j]; return;
  }
}

// g * d/dx gelu(x) (the erf form), as the cpu backend writes it: f32 with FMAs where it has
// them (its vec_math erf and exp are its own, so f32 results agree to a few ulps, not bits);
// f64 as its scalar formula.
__device__ float gelu_grad(float g, float x) {
  const float cdf = fmaf(erff(x * 0.70710678118654752f), 0.5f, 0.5f);
  const float pdf = expf(x * x * -0.5f) * 0.39894228040143268f;
  return g * fmaf(x, pdf, cdf);
}
__device__ double gelu_grad(double g, double x) {
  const double cdf = 0.5 * (1.0 + erf(x * 0.70710678118654752440));
  const double pdf = exp(-0.5 * x * x) * 0.39894228040143267794;
  return g * (cdf + x * pdf);
}
__device__ int64_t gelu_grad(int64_t, int64_t) { return 0; }  // never launched (floats only)

// The random ops: element i (row-major) draws with counter i, as the cpu backend
// (core/philox.h, the same functions). s0.i is the seed. Uniform: low + range * u, s0/s1 the
// low and range in the dtype (the cpu backend's expression, which its build contracts into an
// FMA: so is it here, explicitly); normal: mean + std * n in f64 (s0.d, s1.d), the same FMA;
// bernoulli: u (f64) < p, p read through in[0] at `off`.
__device__ void random_element(const EwArgs& a, int64_t i, int64_t off) {
  const auto seed = static_cast<uint64_t>(a.s0.i);
  const auto k = static_cast<uint64_t>(i);
  if (a.kind == kIotaUniform) {
    if (a.out_dtype == kF64) {
      store_d(a.out, kF64, i, __fma_rn(a.s1.d, philox_uniform_f64(seed, k), a.s0.d));
    } else {
      store_f(a.out, a.out_dtype, i, __fmaf_rn(a.s1.f, philox_uniform_f32(seed, k), a.s0.f));
    }
  } else if (a.kind == kIotaNormal) {
    store_d(a.out, a.out_dtype, i, __fma_rn(a.s1.d, philox_normal(seed, k), a.s0.d));
  } else {
    const double u = philox_uniform_f64(seed, k);
    store_d(a.out, a.out_dtype, i, u < load_d(a.in[0], a.in_dtype[0], off) ? 1.0 : 0.0);
  }
}

template <int C>
__global__ void elementwise_kernel(EwArgs a) {
  using K = Class<C>;
  using T = typename K::T;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += step) {
    int64_t off[kMaxOperands] = {0, 0, 0};
    int64_t rem = i;
    for (int d = a.rank - 1; d >= 0; --d) {
      const int64_t idx = rem % a.shape[d];
      rem /= a.shape[d];
#pragma unroll
      for (int k = 0; k < kMaxOperands; ++k) off[k] += idx * a.strides[k][d];
    }
    const int64_t o = a.out_at ? off[kMaxOperands - 1] : i;  // where element i is stored
    switch (a.family) {
      case kEwUnary:
        if (a.kind == kCopyKind) {
          copy_bits(a.out, a.out_dtype, o, a.in[0], off[0]);
        } else if (a.kind == kGeluGradKind) {
          K::store(a.out, a.out_dtype, o,
                   gelu_grad(K::load(a.in[0], a.in_dtype[0], off[0]),
                             K::load(a.in[1], a.in_dtype[1], off[1])));
        } else {
          const T x = K::load(a.in[0], a.in_dtype[0], off[0]);
          K::store(a.out, a.out_dtype, o, a.kind == kCastKind ? x : K::unary(a.kind, x));
        }
        break;
      case kEwBinary: {
        const T s = K::scalar(a.s0);
        const T x = a.scalar == 2 ? s : K::load(a.in[0], a.in_dtype[0], off[0]);
        const T y = a.scalar == 1 ? s : K::load(a.in[1], a.in_dtype[1], off[1]);
        const T r = K::binary(a.kind, x, y);
        if (km::is_comparison(a.kind)) {
          store_i(a.out, a.out_dtype, o, r != T(0) ? 1 : 0);
        } else {
          K::store(a.out, a.out_dtype, o, r);
        }
        break;
      }
      case kEwWhere: {  // in[0] ? in[1] : in[2]
        const bool c = load_bool(a.in[0], a.in_dtype[0], off[0]);
        K::store(
            a.out, a.out_dtype, o,
            c ? K::load(a.in[1], a.in_dtype[1], off[1]) : K::load(a.in[2], a.in_dtype[2], off[2]));
        break;
      }
      case kEwFill: K::store(a.out, a.out_dtype, o, K::scalar(a.s0)); break;
      case kEwIota: {  // arange (s0 + i * s1), eye (rank 2, shape[1] = m), the random ops
        if (a.kind >= kIotaUniform) {
          random_element(a, i, off[0]);
        } else if (a.kind == kIotaArange) {
          if constexpr (C == kClsI64) {
            K::store(
                a.out, a.out_dtype, i,
                static_cast<int64_t>(static_cast<uint64_t>(a.s0.i) +
                                     static_cast<uint64_t>(i) * static_cast<uint64_t>(a.s1.i)));
          } else {
            K::store(a.out, a.out_dtype, i, T(::fma(double(i), a.s1.d, a.s0.d)));
          }
        } else {
          const int64_t m = a.shape[1];
          K::store(a.out, a.out_dtype, i, i / m == i % m ? T(1) : T(0));
        }
        break;
      }
      case kEwClamp: {  // kind bit 0: lo given; bit 1: hi given; NaN propagates
        T x = K::load(a.in[0], a.in_dtype[0], off[0]);
        const T lo = K::scalar(a.s0), hi = K::scalar(a.s1);
        if ((a.kind & 1) && (x < lo || K::isnan(lo))) x = lo;
        if ((a.kind & 2) && (x > hi || K::isnan(hi))) x = hi;
        K::store(a.out, a.out_dtype, o, x);
        break;
      }
      case kEwMaskedFill: {  // in[1] (mask) ? s0 : in[0]
        const bool m = load_bool(a.in[1], a.in_dtype[1], off[1]);
        K::store(a.out, a.out_dtype, o,
                 m ? K::scalar(a.s0) : K::load(a.in[0], a.in_dtype[0], off[0]));
        break;
      }
    }
  }
}

// ---- Reduce ----
constexpr int kReduceBlock = 256;
constexpr int32_t kRkSum = 0, kRkMean = 1, kRkProd = 2, kRkMax = 3, kRkArgmax = 5, kRkArgmin = 6;
constexpr int64_t kNoIndex = -1;

// A partial: value and the index it came from (extremes), combined by a rule that is
// associative and commutative (ties and NaNs go to the lower index), so any tree gives the
// first occurrence.
template <class T>
struct Part {
  T v;
  int64_t idx;
};
template <class T>
struct Combine {
  int32_t kind;
  __device__ Part<T> operator()(const Part<T>& a, const Part<T>& b) const {
    if (kind == kRkSum || kind == kRkMean) return {a.v + b.v, 0};
    if (kind == kRkProd) return {a.v * b.v, 0};
    if (b.idx == kNoIndex) return a;
    if (a.idx == kNoIndex) return b;
    const bool want_max = kind == kRkMax || kind == kRkArgmax;
    const bool an = a.v != a.v, bn = b.v != b.v;
    bool takes_b;
    if (an || bn) {
      takes_b = bn && (!an || b.idx < a.idx);
    } else if (b.v == a.v) {
      takes_b = b.idx < a.idx;
    } else {
      takes_b = want_max ? b.v > a.v : b.v < a.v;
    }
    return takes_b ? b : a;
  }
};

template <int C>
__global__ void __launch_bounds__(kReduceBlock) reduce_kernel(ReduceArgs a) {
  using K = Class<C>;
  using T = typename K::T;
  using BR = cub::BlockReduce<Part<T>, kReduceBlock>;
  __shared__ typename BR::TempStorage tmp;
  const Combine<T> combine{a.kind};
  const bool sum_like = a.kind == kRkSum || a.kind == kRkMean;
  for (int64_t o = blockIdx.x; o < a.n_out; o += gridDim.x) {
    int64_t base = 0, rem = o;
    for (int d = a.kept_rank - 1; d >= 0; --d) {
      base += (rem % a.kshape[d]) * a.kstride[d];
      rem /= a.kshape[d];
    }
    Part<T> acc{sum_like ? T(0) : (a.kind == kRkProd ? T(1) : T(0)),
                sum_like || a.kind == kRkProd ? 0 : kNoIndex};
    for (int64_t r = threadIdx.x; r < a.n_red; r += kReduceBlock) {
      int64_t e = base, rr = r;
      for (int d = a.red_rank - 1; d >= 0; --d) {
        e += (rr % a.rshape[d]) * a.rstride[d];
        rr /= a.rshape[d];
      }
      acc = combine(acc, Part<T>{K::load(a.in, a.in_dtype, e), r});
    }
    const Part<T> total = BR(tmp).Reduce(acc, combine);
    if (threadIdx.x == 0) {
      if (a.kind == kRkArgmax || a.kind == kRkArgmin) {
        store_i(a.out, a.out_dtype, o, total.idx < 0 ? 0 : total.idx);
      } else if (a.kind == kRkMean) {
        K::store(a.out, a.out_dtype, o, total.v / T(a.n_red));
      } else {
        K::store(a.out, a.out_dtype, o, total.v);
      }
    }
    __syncthreads();  // tmp is reused by the next output
  }
}

// ---- Rows: softmax, log_softmax, layer_norm (f32 compute) ----
constexpr int kRowsBlock = 256;
struct MaxOp {
  __device__ float operator()(float a, float b) const { return (a > b || a != a) ? a : b; }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__global__ void __launch_bounds__(kRowsBlock) rows_kernel(RowsArgs a) {
  using BR = cub::BlockReduce<float, kRowsBlock>;
  __shared__ typename BR::TempStorage tmp;
  __shared__ float s_a, s_b;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    // Softmax's row runs along `len` elements `inner` apart, from (row / inner) * len * inner
    // + row % inner; a layer_norm row is contiguous (inner = 1).
    const int64_t base = (row / a.inner) * a.len * a.inner + row % a.inner;
    auto at = [&](int64_t j) { return base + j * a.inner; };
    if (a.op == kLayerNorm || a.op == kLayerNormBackward) {
      float s = 0;
      for (int64_t j = threadIdx.x; j < a.len; j += kRowsBlock) s += load_f(a.x, a.dtype, at(j));
      const float total = BR(tmp).Reduce(s, SumOp{});
      if (threadIdx.x == 0) s_a = total / static_cast<float>(a.len);
      __syncthreads();
      const float mean = s_a;
      float q = 0;
      for (int64_t j = threadIdx.x; j < a.len; j += kRowsBlock) {
        const float d = load_f(a.x, a.dtype, at(j)) - mean;
        q += d * d;
      }
      const float var = BR(tmp).Reduce(q, SumOp{});
      if (threadIdx.x == 0) s_b = rsqrtf(var / static_cast<float>(a.len) + a.eps);
      __syncthreads();
      const float rstd = s_b;
      if (a.op == kLayerNormBackward) {
        // dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), gh = g * w
        float sg = 0, sgx = 0;
        for (int64_t j = threadIdx.x; j < a.len; j += kRowsBlock) {
          const float xh = (load_f(a.x, a.dtype, at(j)) - mean) * rstd;
          const float gv = load_f(a.g, a.dtype, at(j));
          const float gh = a.w ? gv * load_f(a.w, a.dtype, j) : gv;
          sg += gh;
          sgx += gh * xh;
          a.aux[at(j)] = gv * xh;
        }
        const float tg = BR(tmp).Reduce(sg, SumOp{});
        __syncthreads();
        const float tgx = BR(tmp).Reduce(sgx, SumOp{});
        if (threadIdx.x == 0) {
          s_a = tg / static_cast<float>(a.len);
          s_b = tgx / static_cast<float>(a.len);
        }
        __syncthreads();
        const float ma = s_a, mb = s_b;
        for (int64_t j = threadIdx.x; j < a.len; j += kRowsBlock) {
          const float xh = (load_f(a.x, a.dtype, at(j)) - mean) * rstd;
          const float gv = load_f(a.g, a.dtype, at(j));
          const float gh = a.w ? gv * load_f(a.w, a.dtype, j) : gv;
          store_f(a.out, a.dtype, at(j), rstd * (gh - ma - xh * mb));
        }
        __syncthreads();
        continue;
      }
      for (int64_t j = threadIdx.x; j < a.len; j += kRowsBlock) {
        float y = (load_f(a.x, a.dtype, at(j)) - mean) * rstd;
        if (a.w) y *= load_f(a.w, a.dtype, j);
        if (a.b) y += load_f(a.b, a.dtype, j);
        store_f(a.out, a.dtype, at(j), y);
      }
    } else {
      float m = -INFINITY;
      for (int64_t j = threadIdx.x; j < a.len; j += kRowsBlock) {
        m = MaxOp{}(m, load_f(a.x, a.dtype, at(j)));
      }
      const float mx = BR(tmp).Reduce(m, MaxOp{});
      if (threadIdx.x == 0) s_a = mx;
      __syncthreads();
      const float rmax = s_a;
      float s = 0;
      for (int64_t j = threadIdx.x; j < a.len; j += kRowsBlock) {
        s += expf(load_f(a.x, a.dtype, at(j)) - rmax);
      }
      const float total = BR(tmp).Reduce(s, SumOp{});
      if (threadIdx.x == 0) s_b = total;
      __syncthreads();
      const float sum = s_b, lsum = logf(s_b);
      for (int64_t j = threadIdx.x; j < a.len; j += kRowsBlock) {
        const float d = load_f(a.x, a.dtype, at(j)) - rmax;
        store_f(a.out, a.dtype, at(j), a.op == kLogSoftmax ? d - lsum : expf(d) / sum);
      }
    }
    __syncthreads();
  }
}

// ---- index ops, cumsum (index_math.h) and AdamStep ----
template <class I>
__global__ void gather_kernel(IxArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += step) {
    if (a.mode == kIxOneHot) {
      ix::gather_element<int64_t, I>(a, i);
      continue;
    }
    switch (a.out_dtype) {
      case kU8:
      case kBool: ix::gather_element<uint8_t, I>(a, i); break;
      case kF16:
      case kBF16: ix::gather_element<uint16_t, I>(a, i); break;
      case kF64:
      case kI64: ix::gather_element<uint64_t, I>(a, i); break;
      default: ix::gather_element<uint32_t, I>(a, i); break;
    }
  }
}

template <class I>
__global__ void scatter_kernel(IxArgs a) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += step) {
    switch (a.out_dtype) {
      case kF64: ix::scatter_element<double, double, I>(a, i); break;
      case kI32: ix::scatter_element<int32_t, uint32_t, I>(a, i); break;
      case kI64: ix::scatter_element<int64_t, uint64_t, I>(a, i); break;
      case kU8:
      case kBool: ix::scatter_element<uint8_t, uint8_t, I>(a, i); break;
      default: ix::scatter_element<float, float, I>(a, i); break;
    }
  }
}

template <class I>
int launch_index_typed(const IxArgs& a, cudaStream_t s) {
  if (a.mode == kIxScatter) {
    scatter_kernel<I><<<a.grid, a.block, 0, s>>>(a);
  } else {
    gather_kernel<I><<<a.grid, a.block, 0, s>>>(a);
  }
  return static_cast<int>(cudaGetLastError());
}

template <class T, class A, class O>
__global__ void scan_kernel(ScanArgs a) {
  const int64_t lines = a.outer * a.inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t l = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; l < lines;
       l += step) {
    ix::scan_line<T, A, O>(a, l);
  }
}

template <class T>
__global__ void adaptive_kernel(AdaptArgs a) {
  const int64_t n = a.planes * (a.backward ? a.h * a.w : a.ho * a.wo);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    ix::adaptive_element<T>(a, i);
  }
}

// One rounded operation at a time, as the cpu backend's optim.cc (built without contraction).
__device__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }
__device__ float sqrt_rn(float a) { return __fsqrt_rn(a); }
__device__ double sqrt_rn(double a) { return __dsqrt_rn(a); }
__device__ float scalar_of(const ScalarArg& s, float) { return s.f; }
__device__ double scalar_of(const ScalarArg& s, double) { return s.d; }

template <class T>
__global__ void adam_kernel(AdamArgs a) {
  const T* p = static_cast<const T*>(a.p);
  const T* g = static_cast<const T*>(a.g);
  const T* m = static_cast<const T*>(a.m);
  const T* v = static_cast<const T*>(a.v);
  const T step_size = *static_cast<const T*>(a.step_size);
  const T bias2_sqrt = *static_cast<const T*>(a.bias2_sqrt);
  const T b1c = scalar_of(a.one_minus_beta1, T()), beta2 = scalar_of(a.beta2, T());
  const T b2c = scalar_of(a.one_minus_beta2, T()), eps = scalar_of(a.eps, T());
  const T decay = scalar_of(a.decay, T()), shrink = scalar_of(a.shrink, T());
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += stride) {
    T value = p[i];
    T grad = g[i];
    if (a.decoupled) value = mul_rn(value, shrink);
    if (a.coupled) grad = add_rn(grad, mul_rn(value, decay));
    const T m_new = add_rn(m[i], mul_rn(sub_rn(grad, m[i]), b1c));
    const T v_new = add_rn(mul_rn(v[i], beta2), mul_rn(mul_rn(grad, grad), b2c));
    const T denom = add_rn(div_rn(sqrt_rn(v_new), bias2_sqrt), eps);
    static_cast<T*>(a.p_out)[i] = sub_rn(value, mul_rn(div_rn(m_new, denom), step_size));
    static_cast<T*>(a.m_out)[i] = m_new;
    static_cast<T*>(a.v_out)[i] = v_new;
  }
}

}  // namespace

int launch_index(const IxArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.index_dtype) {
    case kI32: return launch_index_typed<int32_t>(a, s);
    case kU8: return launch_index_typed<uint8_t>(a, s);
    case kBool: return launch_index_typed<bool>(a, s);
    default: return launch_index_typed<int64_t>(a, s);
  }
}

int launch_scan(const ScanArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.x_dtype) {
    case kF32: scan_kernel<float, double, float><<<a.grid, a.block, 0, s>>>(a); break;
    case kF64: scan_kernel<double, double, double><<<a.grid, a.block, 0, s>>>(a); break;
    case kI32: scan_kernel<int32_t, uint64_t, int64_t><<<a.grid, a.block, 0, s>>>(a); break;
    case kU8: scan_kernel<uint8_t, uint64_t, int64_t><<<a.grid, a.block, 0, s>>>(a); break;
    case kBool: scan_kernel<bool, uint64_t, int64_t><<<a.grid, a.block, 0, s>>>(a); break;
    default: scan_kernel<int64_t, uint64_t, int64_t><<<a.grid, a.block, 0, s>>>(a); break;
  }
  return static_cast<int>(cudaGetLastError());
}

int launch_adaptive(const AdaptArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (a.dtype == kF64) {
    adaptive_kernel<double><<<a.grid, a.block, 0, s>>>(a);
  } else {
    adaptive_kernel<float><<<a.grid, a.block, 0, s>>>(a);
  }
  return static_cast<int>(cudaGetLastError());
}

int launch_adam(const AdamArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (a.dtype == kF64) {
    adam_kernel<double><<<a.grid, a.block, 0, s>>>(a);
  } else {
    adam_kernel<float><<<a.grid, a.block, 0, s>>>(a);
  }
  return static_cast<int>(cudaGetLastError());
}

int launch_elementwise(const EwArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.cls) {
    case kClsF64: elementwise_kernel<kClsF64><<<a.grid, a.block, 0, s>>>(a); break;
    case kClsI64: elementwise_kernel<kClsI64><<<a.grid, a.block, 0, s>>>(a); break;
    default: elementwise_kernel<kClsF32><<<a.grid, a.block, 0, s>>>(a); break;
  }
  return static_cast<int>(cudaGetLastError());
}

int launch_reduce(const ReduceArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (a.cls) {
    case kClsF64: reduce_kernel<kClsF64><<<a.grid, kReduceBlock, 0, s>>>(a); break;
    case kClsI64: reduce_kernel<kClsI64><<<a.grid, kReduceBlock, 0, s>>>(a); break;
    default: reduce_kernel<kClsF32><<<a.grid, kReduceBlock, 0, s>>>(a); break;
  }
  return static_cast<int>(cudaGetLastError());
}

int launch_rows(const RowsArgs& a, void* stream) {
  rows_kernel<<<a.grid, kRowsBlock, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tw::cuda
