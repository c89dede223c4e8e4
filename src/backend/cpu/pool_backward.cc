// Gradients of the pooling ops (autograd's backward kernels): Pool2dBackward (max, avg) and
// AdaptiveAvgPool2dBackward. One (image, channel) plane per task, terms added in a fixed order
// within it: the bytes do not depend on the thread count.
//
// Max pooling sends each output's gradient to the input position that Pool2d's kernel (pool.cc)
// chose: taps walked in row-major order, a larger value or a NaN replaces the current choice,
// so ties go to the first position. A window that saw only -inf sends it to its first in-range
// tap. Avg pooling spreads grad / (kH * kW) over the window's in-range taps (padding took its
// share, count_include_pad); adaptive pooling spreads grad / bin size over its bin.
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
  int64_t h, w, ho, wo, kh, kw, sh, sw, ph, pw;
};

template <class T>
void max_pool_grad_plane(const PoolGeometry& g, const T* x, const T* grad, T* gx) {
  std::fill(gx, gx + g.h * g.w, T(0));
  for (int64_t oy = 0; oy < g.ho; ++oy) {
    for (int64_t ox = 0; ox < g.wo; ++ox) {
      T best = -std::numeric_limits<T>::infinity();
      int64_t at = -1, first = -1;
      const TapRange ys = tap_range(oy * g.sh - g.ph, g.kh, g.h);
      const TapRange xs = tap_range(ox * g.sw - g.pw, g.kw, g.w);
      for (int64_t ky = ys.lo; ky < ys.hi; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky;
        for (int64_t kx = xs.lo; kx < xs.hi; ++kx) {
          const int64_t ix = ox * g.sw - g.pw + kx;
          const int64_t i = iy * g.w + ix;
          if (first < 0) first = i;
          const T v = x[i];
          if (max_pool_takes(v, best)) {
            best = v;
            at = i;
          }
        }
      }
      if (at < 0) at = first;
      if (at >= 0) gx[at] += grad[oy * g.wo + ox];
    }
  }
}

template <class T>
void avg_pool_grad_plane(const PoolGeometry& g, const T* grad, T* gx) {
  std::fill(gx, gx + g.h * g.w, T(0));
  const T count = static_cast<T>(g.kh) * static_cast<T>(g.kw);
  for (int64_t oy = 0; oy < g.ho; ++oy) {
    for (int64_t ox = 0; ox < g.wo; ++ox) {
      const T share = grad[oy * g.wo + ox] / count;
      const TapRange ys = tap_range(oy * g.sh - g.ph, g.kh, g.h);
      const TapRange xs = tap_range(ox * g.sw - g.pw, g.kw, g.w);
      for (int64_t ky = ys.lo; ky < ys.hi; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky;
        for (int64_t kx = xs.lo; kx < xs.hi; ++kx) gx[iy * g.w + (ox * g.sw - g.pw + kx)] += share;
      }
    }
  }
}

// Output rows [r0, r1) of the whole batch when tiles_2x2 holds. Each input element is in one
// window, so it gets 0 + that window's share or 0, exactly what the plane kernels add onto
// zeros; the max tap is chosen as there (a window of only -inf picks its first tap).
template <class T, bool kMax>
void pool_grad_2x2_rows(const PoolGeometry& g, const T* x, const T* grad, T* gx, int64_t r0,
                        int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const T* top = x + r * 2 * g.w;
    const T* bottom = top + g.w;
    T* gtop = gx + r * 2 * g.w;
    T* gbottom = gtop + g.w;
    int64_t ox = 0;
#ifdef __AVX2__
    if constexpr (kMax && std::is_same_v<T, float>) {
      // Two windows at a time; lanes (2ox, 2ox + 1) of each row get the window's share or 0.
      const __m128i top_tap = _mm_setr_epi32(0, 1, 0, 1), bottom_tap = _mm_setr_epi32(2, 3, 2, 3);
      for (; ox + 2 <= g.wo; ox += 2) {
        __m128 best;
        __m128i at;
        max_pool_2x2_pair(_mm_loadu_ps(top + 2 * ox), _mm_loadu_ps(bottom + 2 * ox), best, at);
        const __m128 two = _mm_castsi128_ps(
            _mm_loadl_epi64(reinterpret_cast<const __m128i*>(grad + r * g.wo + ox)));
        const __m128 share = _mm_add_ps(_mm_setzero_ps(), _mm_unpacklo_ps(two, two));
        _mm_storeu_ps(gtop + 2 * ox,
                      _mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(at, top_tap)), share));
        _mm_storeu_ps(gbottom + 2 * ox,
                      _mm_and_ps(_mm_castsi128_ps(_mm_cmpeq_epi32(at, bottom_tap)), share));
      }
    }
#endif
    for (; ox < g.wo; ++ox) {
      if constexpr (kMax) {
        const T taps[4] = {top[2 * ox], top[2 * ox + 1], bottom[2 * ox], bottom[2 * ox + 1]};
        T best = -std::numeric_limits<T>::infinity();
        int at = 0;
        for (int i = 0; i < 4; ++i) {
          if (max_pool_takes(taps[i], best)) {
            best = taps[i];
            at = i;
          }
        }
        const T share = T(0) + grad[r * g.wo + ox];
        gtop[2 * ox] = at == 0 ? share : T(0);
        gtop[2 * ox + 1] = at == 1 ? share : T(0);
        gbottom[2 * ox] = at == 2 ? share : T(0);
        gbottom[2 * ox + 1] = at == 3 ? share : T(0);
      } else {
        const T share = T(0) + grad[r * g.wo + ox] / T(4);
        gtop[2 * ox] = gtop[2 * ox + 1] = gbottom[2 * ox] = gbottom[2 * ox + 1] = share;
      }
    }
  }
}

template <class T>
void adaptive_grad_plane(const T* grad, T* gx, int64_t h, int64_t w, int64_t ho, int64_t wo) {
  std::fill(gx, gx + h * w, T(0));
  for (int64_t oy = 0; oy < ho; ++oy) {
    const int64_t y0 = oy * h / ho, y1 = ((oy + 1) * h + ho - 1) / ho;
    for (int64_t ox = 0; ox < wo; ++ox) {
      const int64_t x0 = ox * w / wo, x1 = ((ox + 1) * w + wo - 1) / wo;
      const T share = grad[oy * wo + ox] / static_cast<T>((y1 - y0) * (x1 - x0));
      for (int64_t iy = y0; iy < y1; ++iy) {
        for (int64_t ix = x0; ix < x1; ++ix) gx[iy * w + ix] += share;
      }
    }
  }
}

}  // namespace

Status run(const ir::Pool2dBackward& op, KernelContext& ctx) {
  const CpuTensor grad = contiguous(ctx.in(op.grad));
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const int64_t planes = x.shape[0] * x.shape[1];
  const PoolGeometry g{x.shape[2],   x.shape[3],   grad.shape[2], grad.shape[3], op.kernel[0],
                       op.kernel[1], op.stride[0], op.stride[1],  op.padding[0], op.padding[1]};
  const int64_t cost = std::max(pool_plane_cost(g.ho, g.wo, g.kh, g.kw, g.h, g.w), g.h * g.w);
  dispatch_float(out.dtype, [&]<class T>() {
    const T* xd = x.data<T>();
    const T* gd = grad.data<T>();
    T* od = out.data<T>();
    if (tiles_2x2(g.h, g.w, g.ho, g.wo, op.kernel, op.stride, op.padding)) {
      const bool max = op.kind == ir::PoolKind::kMax;
      // A row costs wo, as in pool.cc's 2x2 path.
      parallel_chunks(planes * g.ho, rows_per_chunk(g.wo), [&](int64_t, int64_t b, int64_t e) {
        if (max) {
          pool_grad_2x2_rows<T, true>(g, xd, gd, od, b, e);
        } else {
          pool_grad_2x2_rows<T, false>(g, xd, gd, od, b, e);
        }
      });
      return;
    }
    parallel_chunks(planes, rows_per_chunk(cost), [&](int64_t, int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        if (op.kind == ir::PoolKind::kMax) {
          max_pool_grad_plane(g, xd + p * g.h * g.w, gd + p * g.ho * g.wo, od + p * g.h * g.w);
        } else {
          avg_pool_grad_plane(g, gd + p * g.ho * g.wo, od + p * g.h * g.w);
        }
      }
    });
  });
  return Status::OK();
}

Status run(const ir::AdaptiveAvgPool2dBackward& op, KernelContext& ctx) {
  const CpuTensor grad = contiguous(ctx.in(op.grad));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const int64_t planes = out.shape[0] * out.shape[1], h = out.shape[2], w = out.shape[3];
  const int64_t ho = grad.shape[2], wo = grad.shape[3];
  dispatch_float(out.dtype, [&]<class T>() {
    const T* gd = grad.data<T>();
    T* od = out.data<T>();
    parallel_chunks(planes, rows_per_chunk(std::max(h * w, ho * wo)),
                    [&](int64_t, int64_t b, int64_t e) {
                      for (int64_t p = b; p < e; ++p) {
                        adaptive_grad_plane(gd + p * ho * wo, od + p * h * w, h, w, ho, wo);
                      }
                    });
  });
  return Status::OK();
}

}  // namespace tw::cpu
