#include "backend/cpu/tile.h"

#include <immintrin.h>

// GCC 12 reports its own avx512fintrin.h (_mm512_undefined_ps inside the intrinsics) as
// "may be used uninitialized"; a known false positive (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <cstddef>

namespace tw::cpu {
namespace {

// Any tail (fewer than 16 pixels, or a whole block without AVX-512): element by element in
// 16x16 tiles, so both sides stay within a few cache lines.
void untile16_generic(const float* src, float* dst, int64_t p0, int64_t hw, int64_t dst_plane) {
  for (; p0 < hw; p0 += 16) {
    const int64_t pe = std::min<int64_t>(16, hw - p0);
    for (int64_t c = 0; c < 16; ++c) {
      float* d = dst + c * dst_plane + p0;
      const float* s = src + p0 * 16 + c;
      for (int64_t p = 0; p < pe; ++p) d[p] = s[p * 16];
    }
  }
}

// Pixels [0, hw - hw % 16) as 16x16 register transposes: 16 loads of one pixel's 16 channels,
// four shuffle stages, 16 stores of one channel's 16 pixels. Returns the first pixel left over.
__attribute__((target("avx512f"))) int64_t untile16_avx512(const float* src, float* dst, int64_t hw,
                                                           int64_t dst_plane, bool streaming) {
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % 64 == 0 && dst_plane % 16 == 0;
  streaming = streaming && aligned;
  int64_t p0 = 0;
  for (; p0 + 16 <= hw; p0 += 16) {
    __m512 r[16], t[16];
    for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + (p0 + i) * 16);
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
      const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
      const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
      r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
      t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
      t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
      t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
    }
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
      r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
      r[i + 4] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0x88);
      r[i + 12] = _mm512_shuffle_f32x4(t[i + 4], t[i + 12], 0xdd);
    }
    // r[c] now holds channel c of pixels p0 .. p0 + 15.
    if (streaming) {
      for (int c = 0; c < 16; ++c) _mm512_stream_ps(dst + c * dst_plane + p0, r[c]);
    } else {
      for (int c = 0; c < 16; ++c) _mm512_storeu_ps(dst + c * dst_plane + p0, r[c]);
    }
  }
  if (streaming) _mm_sfence();
  return p0;
}

}  // namespace

bool cpu_has_avx512() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
}

void untile16_portable(const float* src, float* dst, int64_t hw, int64_t dst_plane) {
  untile16_generic(src, dst, 0, hw, dst_plane);
}

void untile16(const float* src, float* dst, int64_t hw, int64_t dst_plane, bool streaming) {
  const int64_t done = cpu_has_avx512() ? untile16_avx512(src, dst, hw, dst_plane, streaming) : 0;
  untile16_generic(src, dst, done, hw, dst_plane);
}

}  // namespace tw::cpu
