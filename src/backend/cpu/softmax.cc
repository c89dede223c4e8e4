// Softmax and log_softmax over one dim: y = exp(x - max) / sum(exp(x - max)), or
// (x - max) - log(sum(exp(x - max))).
//
// The tensor is seen as [outer, len, inner] with `dim` the middle. When inner is 1 (the common
// last-dim case) lanes run along the row; otherwise lanes run across `inner`, each lane its own
// row. Algorithms are written once over a lane type: Lanes8 (AVX2, f32, fast exp) and Lane1 (one
// element, the same operations), so a row's tail matches what a full vector would give. Every
// row is reduced by one task in a fixed order: results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
#include "backend/cpu/vec_math.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

template <class T>
struct Lane1 {
  static constexpr int kWidth = 1;
  T v;
  static Lane1 load(const T* p) { return {*p}; }
  static Lane1 splat(T x) { return {x}; }
  void store(T* p) const { *p = v; }
  friend Lane1 operator+(Lane1 a, Lane1 b) { return {a.v + b.v}; }
  friend Lane1 operator-(Lane1 a, Lane1 b) { return {a.v - b.v}; }
  friend Lane1 operator/(Lane1 a, Lane1 b) { return {a.v / b.v}; }
  friend Lane1 max(Lane1 a, Lane1 b) { return {b.v > a.v ? b.v : a.v}; }
  friend Lane1 exp(Lane1 a) {
    if constexpr (std::is_same_v<T, float>) {
      return {vm::exp_f32(a.v)};
    } else {
      return {std::exp(a.v)};
    }
  }
  friend Lane1 log(Lane1 a) { return {std::log(a.v)}; }
  T hmax() const { return v; }
  T hsum() const { return v; }
};

#ifdef __AVX2__
struct Lanes8 {
  static constexpr int kWidth = 8;
  __m256 v;
  static Lanes8 load(const float* p) { return {_mm256_loadu_ps(p)}; }
  static Lanes8 splat(float x) { return {_mm256_set1_ps(x)}; }
  void store(float* p) const { _mm256_storeu_ps(p, v); }
  friend Lanes8 operator+(Lanes8 a, Lanes8 b) { return {_mm256_add_ps(a.v, b.v)}; }
  friend Lanes8 operator-(Lanes8 a, Lanes8 b) { return {_mm256_sub_ps(a.v, b.v)}; }
  friend Lanes8 operator/(Lanes8 a, Lanes8 b) { return {_mm256_div_ps(a.v, b.v)}; }
  friend Lanes8 max(Lanes8 a, Lanes8 b) { return {_mm256_max_ps(a.v, b.v)}; }
  friend Lanes8 exp(Lanes8 a) { return {vm::exp_f32(a.v)}; }
  friend Lanes8 log(Lanes8 a) {
    alignas(32) float t[8];
    _mm256_store_ps(t, a.v);
    for (float& x : t) x = std::log(x);
    return {_mm256_load_ps(t)};
  }
  float hmax() const {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    float m = t[0];
    for (int i = 1; i < 8; ++i) m = t[i] > m ? t[i] : m;
    return m;
  }
  float hsum() const {  // fixed pairwise order
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
    return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
  }
};
template <class T>
using Wide = std::conditional_t<std::is_same_v<T, float>, Lanes8, Lane1<T>>;
#else
template <class T>
using Wide = Lane1<T>;
#endif

// One contiguous row of `len` elements.
template <class T>
void softmax_row(const T* x, T* y, int64_t len, bool log_out) {
  using V = Wide<T>;
  using S = Lane1<T>;
  constexpr int W = V::kWidth;
  const int64_t body = len / W * W;
  V vm = V::splat(-std::numeric_limits<T>::infinity());
  for (int64_t i = 0; i < body; i += W) vm = max(vm, V::load(x + i));
  S m = S::splat(vm.hmax());
  for (int64_t i = body; i < len; ++i) m = max(m, S::load(x + i));
  const V mv = V::splat(m.v);
  V vs = V::splat(0);
  // The exp pass is slow enough that the next row (x + len, read first by the max pass) is
  // asked for meanwhile, a cache line per 64 bytes: 4096 x 4096 f32 on 2 threads 7.7 -> 6.5 ms.
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(T));
  for (int64_t i = 0; i < body; i += W) {
    if (i % kLine == 0) vm::prefetch_at(x + i, len * int64_t{sizeof(T)});
    const V e = exp(V::load(x + i) - mv);
    if (!log_out) e.store(y + i);
    vs = vs + e;
  }
  S s = S::splat(vs.hsum());
  for (int64_t i = body; i < len; ++i) {
    const S e = exp(S::load(x + i) - m);
    if (!log_out) e.store(y + i);
    s = s + e;
  }
  if (log_out) {
    const S ls = log(s);
    const V lv = V::splat(ls.v);
    for (int64_t i = 0; i < body; i += W) ((V::load(x + i) - mv) - lv).store(y + i);
    for (int64_t i = body; i < len; ++i) ((S::load(x + i) - m) - ls).store(y + i);
  } else {
    const V sv = V::splat(s.v);
    for (int64_t i = 0; i < body; i += W) (V::load(y + i) / sv).store(y + i);
    for (int64_t i = body; i < len; ++i) (S::load(y + i) / s).store(y + i);
  }
}

// V::kWidth independent rows laid across lanes: element l of lane j at x[l * stride + j].
template <class V, class T>
void softmax_lanes(const T* x, T* y, int64_t len, int64_t stride, bool log_out) {
  V m = V::splat(-std::numeric_limits<T>::infinity());
  for (int64_t l = 0; l < len; ++l) m = max(m, V::load(x + l * stride));
  V s = V::splat(0);
  for (int64_t l = 0; l < len; ++l) {
    const V e = exp(V::load(x + l * stride) - m);
    if (!log_out) e.store(y + l * stride);
    s = s + e;
  }
  if (log_out) {
    const V ls = log(s);
    for (int64_t l = 0; l < len; ++l) ((V::load(x + l * stride) - m) - ls).store(y + l * stride);
  } else {
    for (int64_t l = 0; l < len; ++l) (V::load(y + l * stride) / s).store(y + l * stride);
  }
}

// Lanes of the strided case handled by one task.
constexpr int64_t kInnerBlock = 64;

template <class T>
void softmax(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool log_out) {
  if (inner == 1) {
    parallel_chunks(outer, rows_per_chunk(len), [&](int64_t, int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) softmax_row(x + r * len, y + r * len, len, log_out);
    });
    return;
  }
  using V = Wide<T>;
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  parallel_chunks(outer * blocks, rows_per_chunk(len * kInnerBlock),
                  [&](int64_t, int64_t b, int64_t e) {
                    for (int64_t t = b; t < e; ++t) {
                      const int64_t o = t / blocks;
                      const int64_t i0 = (t % blocks) * kInnerBlock;
                      const int64_t i1 = std::min(inner, i0 + kInnerBlock);
                      const T* xo = x + o * len * inner;
                      T* yo = y + o * len * inner;
                      int64_t i = i0;
                      for (; i + V::kWidth <= i1; i += V::kWidth) {
                        softmax_lanes<V>(xo + i, yo + i, len, inner, log_out);
                      }
                      for (; i < i1; ++i)
                        softmax_lanes<Lane1<T>>(xo + i, yo + i, len, inner, log_out);
                    }
                  });
}

}  // namespace

Status run(const ir::Softmax& op, KernelContext& ctx) {
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const int64_t rank = x.rank();
  const int64_t dim = rank == 0 ? 0 : (op.dim < 0 ? op.dim + rank : op.dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape[d];
  for (int64_t d = dim + 1; d < rank; ++d) inner *= x.shape[d];
  const int64_t len = rank == 0 ? 1 : x.shape[dim];
  dispatch_float(x.dtype, [&]<class T>() {
    softmax<T>(x.data<T>(), out.data<T>(), outer, len, inner, op.log);
  });
  return Status::OK();
}

}  // namespace tw::cpu
