// The cuda backend's own kernels, in one translation unit (nvcc's time in CI is the budget:
// docs/cuda.md): every elementwise family (one kernel per compute class; family, kind and dtypes
// are uniform per launch and switched on at run time, so a kind added to the IR's lists needs an
// entry in backend/kind_math.h, no new kernel), Reduce (a block per output, cub::BlockReduce),
// and the row kernels (softmax, log_softmax, layer_norm). Values load and store by the Cast rules
// of docs/ops.md (ir/convert.h on the host): float to integer truncates and saturates, NaN gives
// 0, f64 reaches f16/bf16 through f32, integers narrow by wrapping.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "backend/cuda/launch.h"
#include "backend/kind_math.h"
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
    switch (a.family) {
      case kEwUnary:
        if (a.kind == kCopyKind) {
          copy_bits(a.out, a.out_dtype, i, a.in[0], off[0]);
        } else {
          const T x = K::load(a.in[0], a.in_dtype[0], off[0]);
          K::store(a.out, a.out_dtype, i, a.kind == kCastKind ? x : K::unary(a.kind, x));
        }
        break;
      case kEwBinary: {
        const T s = K::scalar(a.s0);
        const T x = a.scalar == 2 ? s : K::load(a.in[0], a.in_dtype[0], off[0]);
        const T y = a.scalar == 1 ? s : K::load(a.in[1], a.in_dtype[1], off[1]);
        const T r = K::binary(a.kind, x, y);
        if (km::is_comparison(a.kind)) {
          store_i(a.out, a.out_dtype, i, r != T(0) ? 1 : 0);
        } else {
          K::store(a.out, a.out_dtype, i, r);
        }
        break;
      }
      case kEwWhere: {  // in[0] ? in[1] : in[2]
        const bool c = load_bool(a.in[0], a.in_dtype[0], off[0]);
        K::store(
            a.out, a.out_dtype, i,
            c ? K::load(a.in[1], a.in_dtype[1], off[1]) : K::load(a.in[2], a.in_dtype[2], off[2]));
        break;
      }
      case kEwFill: K::store(a.out, a.out_dtype, i, K::scalar(a.s0)); break;
      case kEwIota: {  // arange (kind 0: s0 + i * s1) and eye (kind 1: rank 2, shape[1] = m)
        if (a.kind == 0) {
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
        K::store(a.out, a.out_dtype, i, x);
        break;
      }
      case kEwMaskedFill: {  // in[1] (mask) ? s0 : in[0]
        const bool m = load_bool(a.in[1], a.in_dtype[1], off[1]);
        K::store(a.out, a.out_dtype, i,
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
    if (a.op == kLayerNorm) {
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

}  // namespace

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
