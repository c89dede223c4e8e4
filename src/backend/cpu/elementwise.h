// Shared machinery of the CPU elementwise, creation, cast and reduction kernels: element types
// and dtype dispatch, and the run driver that walks broadcast or strided operands in the output's
// row-major order. The conversion rules of docs/ops.md (Cast) on single values are ir/convert.h's.
//
// Kernels are templates on the element type; a dtype is turned into a type once, by a switch in
// one of the visit_* functions, so the inner loops see plain C++ types that GCC vectorises.
#pragma once
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "backend/cpu/strided.h"
#include "core/thread_pool.h"
#include "ir/convert.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

// The Cast rules on single values (ir/convert.h, shared with the torch backend), named here
// unqualified as the kernels use them.
using ir::BFloat16;
using ir::clamp_bound;
using ir::convert;
using ir::Half;
using ir::scalar_to;

template <class T>
struct Tag {
  using type = T;
};

// Elements per parallel chunk: about 32 chunks, so that threads stay balanced, each of at least
// a minimum grain (32K elements by default: the pool's per-chunk cost stays negligible) and at
// most 1M. Long chunks matter for memory-bound loops, where each thread's prefetcher streams a
// whole chunk: a plain 16M-element f32 sum on 2 threads took 0.98 ms with 32K-element chunks,
// 0.82 ms with 256K and 0.65 ms with 512K. The partition depends on the size only; elementwise
// results do not depend on it at all, nor do reductions (see reduce.cc).
inline constexpr int64_t kElementwiseGrain = int64_t{1} << 15;
inline constexpr int64_t kMaxGrain = int64_t{1} << 20;
inline int64_t chunk_grain(int64_t n, int64_t min_grain = kElementwiseGrain) {
  return std::clamp(n / 32, min_grain, std::max(min_grain, kMaxGrain));
}

// Elements gathered at a time from a strided operand into a stack buffer (8 KiB of f64).
inline constexpr int64_t kRunBlock = 1024;

// ---- dtype dispatch: f(Tag<T>{}) -> Status ----
template <class F>
Status visit_dtype(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::kF32: return f(Tag<float>{});
    case DType::kF64: return f(Tag<double>{});
    case DType::kI32: return f(Tag<int32_t>{});
    case DType::kI64: return f(Tag<int64_t>{});
    case DType::kU8: return f(Tag<uint8_t>{});
    case DType::kI8: return f(Tag<int8_t>{});
    case DType::kBool: return f(Tag<bool>{});
    case DType::kF16: return f(Tag<Half>{});
    case DType::kBF16: return f(Tag<BFloat16>{});
  }
  return internal_error(std::string(op) + ": unknown dtype " + std::to_string(static_cast<int>(d)));
}

inline Status unsupported_dtype(const char* op, DType d) {
  return internal_error(std::string(op) + ": the cpu kernel has no " + std::string(dtype_name(d)) +
                        " variant (inference should reject it)");
}

// Every dtype that takes part in arithmetic or comparison (not f16/bf16).
template <class F>
Status visit_compute(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::kF32: return f(Tag<float>{});
    case DType::kF64: return f(Tag<double>{});
    case DType::kI32: return f(Tag<int32_t>{});
    case DType::kI64: return f(Tag<int64_t>{});
    case DType::kU8: return f(Tag<uint8_t>{});
    case DType::kI8: return f(Tag<int8_t>{});
    case DType::kBool: return f(Tag<bool>{});
    default: return unsupported_dtype(op, d);
  }
}

// Numeric dtypes: f32, f64, i32, i64, u8.
template <class F>
Status visit_numeric(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::kF32: return f(Tag<float>{});
    case DType::kF64: return f(Tag<double>{});
    case DType::kI32: return f(Tag<int32_t>{});
    case DType::kI64: return f(Tag<int64_t>{});
    case DType::kU8: return f(Tag<uint8_t>{});
    case DType::kI8: return f(Tag<int8_t>{});
    default: return unsupported_dtype(op, d);
  }
}

template <class F>
Status visit_float(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::kF32: return f(Tag<float>{});
    case DType::kF64: return f(Tag<double>{});
    default: return unsupported_dtype(op, d);
  }
}

// The kernel writes the dtype it computes; a disagreeing inference would make it overrun the
// output, so kernels check before they allocate.
inline Status check_out_dtype(const char* op, const TensorMeta& meta, DType expect) {
  if (meta.dtype == expect) return Status::OK();
  return internal_error(std::string(op) + ": inference gave " + meta_str(meta) +
                        " but the cpu kernel computes " + std::string(dtype_name(expect)));
}

// ---- operands in a compute dtype ----

// t itself when it already has dtype `to`; otherwise a contiguous copy converted to `to` (same
// shape). Used to bring operands to an op's compute dtype. Defined in cast.cc.
CpuTensor cast_tensor(const CpuTensor& t, DType to);
// The same without copying t's handle when no conversion is needed: t itself, else the
// conversion, kept in `tmp`.
inline const CpuTensor& as_dtype(const CpuTensor& t, DType to, CpuTensor& tmp) {
  if (t.dtype == to) return t;
  tmp = cast_tensor(t, to);
  return tmp;
}

// ---- the run driver ----

// Dims merged so that each run of the innermost dim is as long as possible: size-1 dims are
// dropped and dim d folds into d + 1 when every operand steps through them as one. The output
// is contiguous in the original shape, so merging never changes its row-major order.
template <size_t N>
struct Coalesced {
  Shape shape;
  std::array<Strides, N> strides;
};

template <size_t N>
Coalesced<N> coalesce(const Shape& shape, const std::array<Strides, N>& strides) {
  Coalesced<N> c;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !c.shape.empty();
    for (size_t k = 0; merge && k < N; ++k) {
      merge = c.strides[k].back() == strides[k][d] * shape[d];
    }
    if (merge) {
      c.shape.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) c.strides[k].back() = strides[k][d];
    } else {
      c.shape.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) c.strides[k].push_back(strides[k][d]);
    }
  }
  if (c.shape.empty()) {  // a single element
    c.shape.push_back(1);
    for (size_t k = 0; k < N; ++k) c.strides[k].push_back(1);
  }
  return c;
}

// Per-operand values of a run: element offsets or steps.
template <size_t N>
using Run = std::array<int64_t, N>;

// t, or a contiguous copy of it when t is a transposed matrix large enough for the tiled copy to
// beat reading it in row-major order (several times over, for a 512x512 f32 operand). The values
// are the same, so the results are too.
inline const CpuTensor& row_major_operand(const CpuTensor& t, CpuTensor& tmp) {
  if (!worth_a_tiled_copy(t)) return t;
  tmp = contiguous(t);
  return tmp;
}

// The run driver for operands that each step through the output's row-major order as one flat
// array (step 1) or repeat one element (step 0): the whole output is one run, split only into
// the parallel chunks, which is what for_each_run gives such operands after coalescing (so the
// same calls, with no shape or stride arrays built).
template <size_t N, class Seg>
void for_each_flat(int64_t n, const Run<N>& steps, int64_t min_grain, Seg&& seg) {
  parallel_chunks(n, chunk_grain(n, min_grain), [&](int64_t, int64_t begin, int64_t end) {
    Run<N> off;
    for (size_t k = 0; k < N; ++k) off[k] = begin * steps[k];
    seg(begin, off, steps, end - begin);
  });
}

// Whether `strides` step through `shape` as a flat array (size-1 dims ignored): step 1 when
// contiguous, 0 when every dim broadcasts.
inline bool flat_step(const Shape& shape, const Strides& strides, int64_t& step) {
  bool contiguous = true, broadcast = true;
  int64_t expect = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    contiguous = contiguous && strides[d] == expect;
    broadcast = broadcast && strides[d] == 0;
    expect *= shape[d];
  }
  if (contiguous) {
    step = 1;
  } else if (broadcast) {
    step = 0;
  }
  return contiguous || broadcast;
}

// The step of operand t read in `shape` (t broadcasts to it) when flat_step would find one for
// its broadcast strides, decided without building them: t covers `shape` contiguously, or t is
// one element (step 0, or 1 for a one-element output, as coalescing gives it).
inline bool flat_operand(const CpuTensor& t, const Shape& shape, int64_t& step) {
  if (t.numel() == 1) {
    step = numel(shape) == 1 ? 1 : 0;
    return true;
  }
  step = 1;
  return t.shape == shape && t.is_contiguous();
}

// Walks the row-major order of `shape` in parallel chunks (chunk_grain(numel, min_grain)) and calls
// seg(out_pos, offsets, inner_strides, len) for each run of consecutive output elements that
// lies within one row of the innermost (coalesced) dim. offsets[k] is operand k's element offset
// of the run's first element; inner_strides[k] its step along the run (0 when broadcast).
template <size_t N, class Seg>
void for_each_run(const Shape& shape, const std::array<Strides, N>& strides, int64_t min_grain,
                  Seg&& seg) {
  const int64_t n = numel(shape);
  if (n == 0) return;
  Run<N> steps;
  bool flat = true;
  for (size_t k = 0; flat && k < N; ++k) flat = flat_step(shape, strides[k], steps[k]);
  if (flat) return for_each_flat<N>(n, steps, min_grain, seg);
  const Coalesced<N> c = coalesce<N>(shape, strides);
  const int64_t inner = c.shape.back();
  Run<N> inner_strides;
  for (size_t k = 0; k < N; ++k) inner_strides[k] = c.strides[k].back();
  const Shape outer(c.shape.begin(), c.shape.end() - 1);
  parallel_chunks(n, chunk_grain(n, min_grain), [&](int64_t, int64_t begin, int64_t end) {
    StridedIter<static_cast<int>(N)> it(outer, {});
    for (size_t k = 0; k < N; ++k) {
      it.strides[k].assign(c.strides[k].begin(), c.strides[k].end() - 1);
    }
    it.seek(begin / inner);
    int64_t col = begin % inner;
    for (int64_t pos = begin; pos < end;) {
      const int64_t len = std::min(inner - col, end - pos);
      Run<N> off;
      for (size_t k = 0; k < N; ++k) off[k] = it.off[k] + col * inner_strides[k];
      seg(pos, off, inner_strides, len);
      pos += len;
      col = 0;
      it.next();
    }
  });
}

// The n elements at p with step `stride` as a contiguous array: p itself when stride is 1,
// else copied into buf (which holds at least n elements).
template <class T>
inline const T* contiguous_run(const T* p, int64_t stride, int64_t n, T* buf) {
  if (stride == 1) return p;
  if (stride == 0) {
    std::fill(buf, buf + n, *p);
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = p[i * stride];
  }
  return buf;
}

// out[i] = block(in)[i] over a unary op whose output (contiguous, x's shape) has element type
// TO: block(const TI* in, TO* out, int64_t n) sees contiguous runs, strided inputs gathered.
template <class TI, class TO, class Block>
void map_unary(const CpuTensor& x, TO* out, int64_t min_grain, Block&& block) {
  const TI* base = x.data<TI>();
  auto seg = [&](int64_t pos, const Run<1>& off, const Run<1>& st, int64_t len) {
    const TI* p = base + off[0];
    if (st[0] == 1) {
      block(p, out + pos, len);
      return;
    }
    alignas(64) TI buf[kRunBlock];
    for (int64_t i = 0; i < len; i += kRunBlock) {
      const int64_t m = std::min(kRunBlock, len - i);
      block(contiguous_run(p + i * st[0], st[0], m, buf), out + pos + i, m);
    }
  };
  if (x.is_contiguous()) return for_each_flat<1>(x.numel(), {1}, min_grain, seg);
  for_each_run<1>(x.shape, {x.strides}, min_grain, seg);
}

// ---- NaN-propagating max / min (maximum, minimum, clamp and the max/min reductions) ----
template <class T>
inline T max_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (a > b || a != a) ? a : b;
  } else {
    return a > b ? a : b;
  }
}
template <class T>
inline T min_nan(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return (a < b || a != a) ? a : b;
  } else {
    return a < b ? a : b;
  }
}

// Two's-complement arithmetic for integers (signed overflow is undefined in C++).
template <class T>
inline T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class T>
inline T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) - static_cast<U>(b)));
  } else {
    return a - b;
  }
}
template <class T>
inline T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // u8 and narrower promote to int, where 255 * 255 fits; wider types multiply unsigned.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

}  // namespace tw::cpu
TW_INTERNAL_END
