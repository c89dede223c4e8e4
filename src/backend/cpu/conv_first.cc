#include "backend/cpu/conv_first.h"

#include <immintrin.h>

// GCC 12 reports its own avx512fintrin.h as "may be used uninitialized" (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
#include <vector>

#include "backend/cpu/structured_util.h"
#include "backend/cpu/tile.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

// Output channels per register tile; each tile covers 32 outputs of a row (two 16-lane vectors),
// so a tap's two input loads feed 2 * kChannelTile multiply-adds.
constexpr int kChannelTile = 8;
// The most taps (in channel, ky, kx) per output conv_first_layer_fits lets through.
constexpr int64_t kMaxTaps = 64;

// Lanes [lo, hi) of a 16-lane vector, clipped to [0, 16).
inline uint32_t lanes(int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, 16);
  if (hi <= lo) return 0;
  const uint32_t upto = hi == 16 ? 0xffffu : (1u << hi) - 1;
  return upto & ~((1u << lo) - 1);
}

// The taps of one output row segment that fall inside the input, in (in channel, ky, kx) order:
// where each reads from (relative to the image's first element and the segment's first output),
// which packed weight column it multiplies, and the lanes of its two vectors that read.
struct Taps {
  int64_t count = 0;
  int64_t offset[kMaxTaps];
  int64_t weight[kMaxTaps];
  uint16_t mask[kMaxTaps][2];
};

// Channels [oc, oc + NB) of 32 outputs of one row; `wp` holds the tile's packed weights
// ([tap][kChannelTile]), `in` the image's input shifted to the segment's first output.
template <int NB>
__attribute__((target("avx512f"))) void tile(const Taps& taps, const float* in, const float* wp,
                                             const float* bias, float* out, int64_t plane,
                                             uint16_t store0, uint16_t store1, bool stream) {
  __m512 a0[NB], a1[NB];
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) a0[j] = a1[j] = _mm512_set1_ps(bias ? bias[j] : 0.0f);
  for (int64_t k = 0; k < taps.count; ++k) {
    const float* at = in + taps.offset[k];
    const __m512 v0 = _mm512_maskz_loadu_ps(taps.mask[k][0], at);
    const __m512 v1 = _mm512_maskz_loadu_ps(taps.mask[k][1], at + 16);
    const float* wk = wp + taps.weight[k] * kChannelTile;
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      const __m512 wv = _mm512_set1_ps(wk[j]);
      a0[j] = _mm512_fmadd_ps(wv, v0, a0[j]);
      a1[j] = _mm512_fmadd_ps(wv, v1, a1[j]);
    }
  }
  if (store0 == 0xffff && store1 == 0xffff && stream) {
#pragma GCC unroll 16
    for (int j = 0; j < NB; ++j) {
      _mm512_stream_ps(out + j * plane, a0[j]);
      _mm512_stream_ps(out + j * plane + 16, a1[j]);
    }
    return;
  }
#pragma GCC unroll 16
  for (int j = 0; j < NB; ++j) {
    _mm512_mask_storeu_ps(out + j * plane, store0, a0[j]);
    if (store1) _mm512_mask_storeu_ps(out + j * plane + 16, store1, a1[j]);
  }
}

template <int NB>
void tile_rest(int64_t nb, const Taps& taps, const float* in, const float* wp, const float* bias,
               float* out, int64_t plane, uint16_t store0, uint16_t store1, bool stream) {
  if constexpr (NB > 1) {
    if (nb < NB)
      return tile_rest<NB - 1>(nb, taps, in, wp, bias, out, plane, store0, store1, stream);
  }
  tile<NB>(taps, in, wp, bias, out, plane, store0, store1, stream);
}

void row(const FirstLayerConv& g, const float* x, const float* packed, const float* bias, float* y,
         int64_t img, int64_t oy, bool stream) {
  const int64_t plane = g.ho * g.wo;
  const int64_t ntaps = g.c * g.kh * g.kw;
  const float* image = x + img * g.c * g.h * g.w;
  for (int64_t ox = 0; ox < g.wo; ox += 32) {
    Taps taps;
    for (int64_t ic = 0; ic < g.c; ++ic) {
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.h) continue;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          // Output lane ox + l reads input column ix + l; lanes over the padding or past the
          // output row read nothing and add 0.
          const int64_t ix = ox + kx * g.dw - g.pw;
          const int64_t k = taps.count++;
          taps.offset[k] = (ic * g.h + iy) * g.w + ix;
          taps.weight[k] = (ic * g.kh + ky) * g.kw + kx;
          for (int t = 0; t < 2; ++t) {
            const int64_t base = ix + 16 * t;
            taps.mask[k][t] =
                static_cast<uint16_t>(lanes(-base, g.w - base) & lanes(0, g.wo - (ox + 16 * t)));
          }
        }
      }
    }
    const auto store0 = static_cast<uint16_t>(lanes(0, g.wo - ox));
    const auto store1 = static_cast<uint16_t>(lanes(0, g.wo - ox - 16));
    for (int64_t oc = 0; oc < g.o; oc += kChannelTile) {
      const int64_t nb = std::min<int64_t>(kChannelTile, g.o - oc);
      float* out = y + (img * g.o + oc) * plane + oy * g.wo + ox;
      tile_rest<kChannelTile>(nb, taps, image, packed + oc * ntaps, bias ? bias + oc : nullptr, out,
                              plane, store0, store1, stream);
    }
  }
}

}  // namespace

bool conv_first_layer_fits(int64_t c, int64_t kh, int64_t kw, int64_t wo, int64_t groups,
                           int64_t sw) {
  // Up to 8 input channels and 64 taps per output: beyond that oneDNN's blocked kernels reuse
  // their loads better than a broadcast per (channel, tap) does. Rows narrower than a vector
  // would leave most lanes idle.
  return cpu_has_avx512() && groups == 1 && sw == 1 && c <= 8 && c * kh * kw <= kMaxTaps &&
         wo >= 16;
}

void conv_first_layer(const FirstLayerConv& g, const float* x, const float* w, const float* bias,
                      float* y) {
  // Weights packed per tile of kChannelTile output channels as [tap][channel], so a tap's
  // broadcasts read one run of floats (the last tile zero-padded).
  const int64_t ntaps = g.c * g.kh * g.kw;
  const int64_t tiles = (g.o + kChannelTile - 1) / kChannelTile;
  std::vector<float> packed(static_cast<size_t>(tiles * kChannelTile * ntaps), 0.0f);
  for (int64_t oc = 0; oc < g.o; ++oc) {
    float* tile = packed.data() + (oc / kChannelTile) * kChannelTile * ntaps + oc % kChannelTile;
    for (int64_t k = 0; k < ntaps; ++k) tile[k * kChannelTile] = w[oc * ntaps + k];
  }
  const int64_t rows = g.n * g.ho;
  // Streaming stores need whole aligned 64-byte lines: every row segment starts on one.
  const bool stream = streams_output(g.n * g.o * g.ho * g.wo * int64_t{sizeof(float)}) &&
                      reinterpret_cast<uintptr_t>(y) % 64 == 0 && g.wo % 16 == 0;
  const int64_t row_cost = g.o * g.wo * ntaps;
  parallel_chunks(rows, std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, row_cost)),
                  [&](int64_t, int64_t b, int64_t e) {
                    for (int64_t r = b; r < e; ++r)
                      row(g, x, packed.data(), bias, y, r / g.ho, r % g.ho, stream);
                  });
}

}  // namespace tw::cpu
