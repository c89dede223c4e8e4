// Small helpers shared by the structured CPU kernels (matmul, conv, pooling, normalisation,
// movement, indexing).
#pragma once
#include <algorithm>
#include <cstdint>

#include "tensorwire/export.h"
#ifdef __AVX2__
#include <immintrin.h>
#endif
#include <vector>

#include "backend/cpu/cpu_tensor.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

// Calls fn.template operator()<U>() with U the unsigned integer type of `size` bytes (1, 2, 4 or
// 8). Movement and indexing ops copy elements as raw bits of their size, so every dtype
// (f16 and bf16 included) shares one instantiation per element size.
template <class F>
void dispatch_bits(size_t size, F&& fn) {
  switch (size) {
    case 1: fn.template operator()<uint8_t>(); break;
    case 2: fn.template operator()<uint16_t>(); break;
    case 4: fn.template operator()<uint32_t>(); break;
    default: fn.template operator()<uint64_t>(); break;
  }
}

// Calls fn.template operator()<T>() with T float or double for an f32 or f64 tensor.
template <class F>
void dispatch_float(DType d, F&& fn) {
  if (d == kF64) {
    fn.template operator()<double>();
  } else {
    fn.template operator()<float>();
  }
}

// Rows per parallel_chunks chunk for independent rows of `row_cost` elements each: about 32 Ki
// elements per chunk, so small problems run inline and big ones spread across the pool. Depends
// on the problem size only, never on the thread count (see thread_pool.h).
inline int64_t rows_per_chunk(int64_t row_cost) {
  constexpr int64_t kChunkElements = int64_t{1} << 15;
  return row_cost >= kChunkElements ? 1 : kChunkElements / (row_cost < 1 ? 1 : row_cost);
}

// The elements one plane of a pooling op visits, for rows_per_chunk: a window visits only its
// taps inside the input (a kernel may be far larger, tests/regress/pooling_test.cc), and the
// product is taken in floating point and capped, since ho * wo * kh * kw can pass int64's range.
inline int64_t pool_plane_cost(int64_t ho, int64_t wo, int64_t kh, int64_t kw, int64_t h,
                               int64_t w) {
  const double taps = static_cast<double>(ho) * static_cast<double>(wo) *
                      static_cast<double>(std::min(kh, h)) * static_cast<double>(std::min(kw, w));
  return taps >= 0x1p62 ? int64_t{1} << 62 : static_cast<int64_t>(taps);
}

// ceil(a / b) for b > 0, and 0 for a <= 0: the first output column a window tap at offset -a
// reaches.
inline int64_t ceil_div_nonneg(int64_t a, int64_t b) { return a <= 0 ? 0 : (a + b - 1) / b; }

// The kernel taps k in [lo, hi) of a window that starts at `start` (= out * stride - pad) and
// land inside [0, n): only these are visited, so a kernel or padding far larger than the input
// (valid, if odd) costs nothing per output instead of a loop over every tap.
struct TapRange {
  int64_t lo, hi;
};
inline TapRange tap_range(int64_t start, int64_t kernel, int64_t n) {
  const int64_t lo = start < 0 ? -start : 0;
  const int64_t hi = n - start < kernel ? n - start : kernel;
  return {lo, hi > lo ? hi : lo};
}

// Max pooling's rule, shared by Pool2d and its gradient: tap value v replaces the window's
// current choice `best` when larger or NaN (so ties keep the first tap, and a NaN sticks).
template <class T>
inline bool max_pool_takes(T v, T best) {
  return v > best || v != v;
}

// Pooling windows of 2x2 at stride 2 without padding that tile the plane exactly (MaxPool2d(2)
// on even sizes): pool.cc and pool_backward.cc then run one loop over output rows, each reading
// two whole input rows, instead of the per-row tap setup that dominates small planes.
inline bool tiles_2x2(int64_t h, int64_t w, int64_t ho, int64_t wo, const std::vector<int64_t>& k,
                      const std::vector<int64_t>& s, const std::vector<int64_t>& p) {
  return k[0] == 2 && k[1] == 2 && s[0] == 2 && s[1] == 2 && p[0] == 0 && p[1] == 0 &&
         h == 2 * ho && w == 2 * wo;
}

#ifdef __AVX2__
// Two 2x2 windows side by side, f32: `top` and `bottom` hold input columns [2ox, 2ox + 4) of a
// window row pair, i.e. taps a0 b0 a1 b1 and c0 d0 c1 d1. Applies max_pool_takes to the taps in
// row-major order (a, b, c, d) as the scalar kernels do, each lane of a window pair holding that
// window's result: `best` the value, `at` the chosen tap (0..3), [w0 w0 w1 w1].
inline void max_pool_2x2_pair(__m128 top, __m128 bottom, __m128& best, __m128i& at) {
  auto takes = [](__m128 v, __m128 b) {
    return _mm_or_ps(_mm_cmpgt_ps(v, b), _mm_cmpunord_ps(v, v));
  };
  const __m128 taps[4] = {_mm_moveldup_ps(top), _mm_movehdup_ps(top), _mm_moveldup_ps(bottom),
                          _mm_movehdup_ps(bottom)};
  // The first tap always becomes the choice (-inf stays -inf), so start from it.
  best = taps[0];
  at = _mm_setzero_si128();
  for (int i = 1; i < 4; ++i) {
    const __m128 take = takes(taps[i], best);
    best = _mm_blendv_ps(best, taps[i], take);
    at = _mm_castps_si128(
        _mm_blendv_ps(_mm_castsi128_ps(at), _mm_castsi128_ps(_mm_set1_epi32(i)), take));
  }
}
#endif

}  // namespace tw::cpu
TW_INTERNAL_END
