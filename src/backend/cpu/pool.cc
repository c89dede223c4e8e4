// Pool2d (max, avg) and AdaptiveAvgPool2d over x [N, C, H, W]. One (image, channel) plane per
// task: results do not depend on the thread count.
//
// Pool2d walks, for each output row, the kernel taps (ky, kx) in row-major order and applies
// each to the whole output row, which vectorises when the stride is 1. Max ignores padding and
// propagates NaN (a NaN stays once seen); avg sums the in-range taps in that order and divides by
// kH * kW (padding counts as zeros, docs/ops.md).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

struct PoolGeometry {
  int64_t planes, h, w, ho, wo;
  int64_t kh, kw, sh, sw, ph, pw;
};

// One kernel tap over output row y, reading x[ox * step + off] for ox in [lo, hi): y[ox] takes
// the max (NaN sticks) or the sum.
template <class T, bool kMax>
inline void tap_row(const T* x, int64_t step, int64_t off, T* y, int64_t lo, int64_t hi) {
  for (int64_t ox = lo; ox < hi; ++ox) {
    const T v = x[ox * step + off];
    if constexpr (kMax) {
      y[ox] = max_pool_takes(v, y[ox]) ? v : y[ox];
    } else {
      y[ox] += v;
    }
  }
}

template <class T, bool kMax>
void pool_plane(const PoolGeometry& g, const T* x, T* y) {
  for (int64_t oy = 0; oy < g.ho; ++oy) {
    T* yr = y + oy * g.wo;
    std::fill(yr, yr + g.wo, kMax ? -std::numeric_limits<T>::infinity() : T(0));
    const TapRange ys = tap_range(oy * g.sh - g.ph, g.kh, g.h);
    // Column taps that reach the input for some output column: ix = ox * sw - pw + kx in
    // [0, w) for an ox in [0, wo).
    const int64_t kx_lo = std::max<int64_t>(0, g.pw - (g.wo - 1) * g.sw);
    const int64_t kx_hi = std::min(g.kw, g.pw + g.w);
    for (int64_t ky = ys.lo; ky < ys.hi; ++ky) {
      const int64_t iy = oy * g.sh - g.ph + ky;
      const T* xr = x + iy * g.w;
      for (int64_t kx = kx_lo; kx < kx_hi; ++kx) {
        const int64_t xoff = kx - g.pw;  // ix = ox * sw + xoff
        const int64_t lo = ceil_div_nonneg(-xoff, g.sw);
        const int64_t hi = std::min(g.wo, g.w - 1 - xoff < 0 ? 0 : (g.w - 1 - xoff) / g.sw + 1);
        // Stride 1 gets its own loop so the compiler sees unit-stride loads and vectorises it.
        if (g.sw == 1) {
          tap_row<T, kMax>(xr, 1, xoff, yr, lo, hi);
        } else {
          tap_row<T, kMax>(xr, g.sw, xoff, yr, lo, hi);
        }
      }
    }
    if constexpr (!kMax) {
      const T count = static_cast<T>(g.kh) * static_cast<T>(g.kw);
      for (int64_t ox = 0; ox < g.wo; ++ox) yr[ox] /= count;
    }
  }
}

// Output rows [r0, r1) of the whole batch when tiles_2x2 holds: the taps of each window in
// pool_plane's order with its rule and sums, so the same bytes.
template <class T, bool kMax>
void pool_2x2_rows(const PoolGeometry& g, const T* x, T* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* top = x + r * 2 * g.w;
    const T* bottom = top + g.w;
    T* out = y + r * g.wo;
    int64_t ox = 0;
#ifdef __AVX2__
    if constexpr (kMax && std::is_same_v<T, float>) {
      for (; ox + 2 <= g.wo; ox += 2) {  // two windows at a time: lanes 0 and 2 hold them
        __m128 best;
        __m128i at;
        max_pool_2x2_pair(_mm_loadu_ps(top + 2 * ox), _mm_loadu_ps(bottom + 2 * ox), best, at);
        _mm_storel_pi(reinterpret_cast<__m64*>(out + ox),
                      _mm_shuffle_ps(best, best, _MM_SHUFFLE(2, 0, 2, 0)));
      }
    }
#endif
    for (; ox < g.wo; ++ox) {
      const T taps[4] = {top[2 * ox], top[2 * ox + 1], bottom[2 * ox], bottom[2 * ox + 1]};
      if constexpr (kMax) {
        T best = -std::numeric_limits<T>::infinity();
        for (const T v : taps) best = max_pool_takes(v, best) ? v : best;
        out[ox] = best;
      } else {
        out[ox] = (((T(0) + taps[0]) + taps[1]) + taps[2]) + taps[3];
        out[ox] /= T(4);
      }
    }
  }
}

template <class T>
void adaptive_plane(const T* x, T* y, int64_t h, int64_t w, int64_t ho, int64_t wo) {
  for (int64_t oy = 0; oy < ho; ++oy) {
    const int64_t y0 = oy * h / ho, y1 = ((oy + 1) * h + ho - 1) / ho;
    for (int64_t ox = 0; ox < wo; ++ox) {
      const int64_t x0 = ox * w / wo, x1 = ((ox + 1) * w + wo - 1) / wo;
      T sum = 0;
      for (int64_t iy = y0; iy < y1; ++iy) {
        for (int64_t ix = x0; ix < x1; ++ix) sum += x[iy * w + ix];
      }
      y[oy * wo + ox] = sum / static_cast<T>((y1 - y0) * (x1 - x0));
    }
  }
}

}  // namespace

Status run(const ir::Pool2d& op, KernelContext& ctx) {
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const PoolGeometry g{x.shape[0] * x.shape[1],
                       x.shape[2],
                       x.shape[3],
                       out.shape[2],
                       out.shape[3],
                       op.kernel[0],
                       op.kernel[1],
                       op.stride[0],
                       op.stride[1],
                       op.padding[0],
                       op.padding[1]};
  const int64_t plane_cost = pool_plane_cost(g.ho, g.wo, g.kh, g.kw, g.h, g.w);
  dispatch_float(x.dtype, [&]<class T>() {
    const T* xd = x.data<T>();
    T* yd = out.data<T>();
    if (tiles_2x2(g.h, g.w, g.ho, g.wo, op.kernel, op.stride, op.padding)) {
      const bool max = op.kind == ir::PoolKind::kMax;
      // A row costs wo (its windows, vectorised in pairs), not its 4 * wo taps: the digits
      // CNN's pools (64 x 16 x 8 x 8 and smaller) run inline, where two chunks on the pool
      // took longer to hand out and wait for than to compute on a loaded machine.
      parallel_chunks(g.planes * g.ho, rows_per_chunk(g.wo), [&](int64_t, int64_t b, int64_t e) {
        if (max) {
          pool_2x2_rows<T, true>(g, xd, yd, b, e);
        } else {
          pool_2x2_rows<T, false>(g, xd, yd, b, e);
        }
      });
      return;
    }
    parallel_chunks(g.planes, rows_per_chunk(plane_cost), [&](int64_t, int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        if (op.kind == ir::PoolKind::kMax) {
          pool_plane<T, true>(g, xd + p * g.h * g.w, yd + p * g.ho * g.wo);
        } else {
          pool_plane<T, false>(g, xd + p * g.h * g.w, yd + p * g.ho * g.wo);
        }
      }
    });
  });
  return Status::OK();
}

Status run(const ir::AdaptiveAvgPool2d& op, KernelContext& ctx) {
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const int64_t planes = x.shape[0] * x.shape[1], h = x.shape[2], w = x.shape[3];
  const int64_t ho = out.shape[2], wo = out.shape[3];
  dispatch_float(x.dtype, [&]<class T>() {
    const T* xd = x.data<T>();
    T* yd = out.data<T>();
    if (h == 0 || w == 0) {  // every bin is empty: 0 / 0
      std::fill(yd, yd + out.numel(), std::numeric_limits<T>::quiet_NaN());
      return;
    }
    parallel_chunks(planes, rows_per_chunk(h * w), [&](int64_t, int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p)
        adaptive_plane(xd + p * h * w, yd + p * ho * wo, h, w, ho, wo);
    });
  });
  return Status::OK();
}

}  // namespace tw::cpu
