// Gradients of Conv2d (autograd's backward kernels): Conv2dBackwardInput (d x) and
// Conv2dBackwardWeight (d w), f32 and f64, on direct loops.
//
// Determinism: every output element belongs to exactly one task (an input plane (image,
// channel) for d x, a weight slice (out channel, in channel) for d w), and each task adds its
// terms in an order fixed by the loops below, so the bytes do not depend on the thread count
// nor on whether the kernel runs in this process or in a server. No oneDNN here: its weight
// gradient reduces across threads in an order that follows the thread count.
#include <algorithm>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

struct ConvGradGeometry {
  int64_t n, c, h, w;     // x
  int64_t o, cg, kh, kw;  // w (cg: input channels per group)
  int64_t groups, og;     // og: output channels per group
  int64_t ho, wo;         // grad
  int64_t sh, sw, ph, pw, dh, dw;
};

template <class Op>
ConvGradGeometry geometry(const Op& op, const Shape& x, const Shape& w, const Shape& grad) {
  return {x[0],      x[1],        x[2],         x[3],         w[0],         w[1],
          w[2],      w[3],        op.groups,    w[0] / op.groups, grad[2],  grad[3],
          op.stride[0], op.stride[1], op.padding[0], op.padding[1], op.dilation[0], op.dilation[1]};
}

// Output columns ox whose input column ox * s + off lies in [0, size): [lo, hi).
inline void valid_range(int64_t off, int64_t s, int64_t size, int64_t out, int64_t& lo,
                        int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + s - 1) / s;
  hi = size - 1 - off < 0 ? 0 : std::min(out, (size - 1 - off) / s + 1);
  if (hi < lo) hi = lo;
}

// Tasks per chunk so that a chunk holds about 32 Ki multiply-adds: small problems run inline.
int64_t grain_for(int64_t task_cost) {
  constexpr int64_t kChunkWork = int64_t{1} << 15;
  return task_cost >= kChunkWork ? 1 : kChunkWork / std::max<int64_t>(task_cost, 1);
}

// d x for one input plane (image img, channel ch): every (out channel of ch's group, ky, kx)
// tap, in that order, scattered over the plane row by row.
template <class T>
void input_grad_plane(const ConvGradGeometry& g, const T* grad, const T* w, T* gx, int64_t img,
                      int64_t ch) {
  std::fill(gx, gx + g.h * g.w, T(0));
  const int64_t group = ch / g.cg, ci = ch % g.cg;
  for (int64_t o = group * g.og; o < (group + 1) * g.og; ++o) {
    const T* gp = grad + (img * g.o + o) * g.ho * g.wo;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const T wv = w[((o * g.cg + ci) * g.kh + ky) * g.kw + kx];
        const int64_t xoff = kx * g.dw - g.pw;
        int64_t lo, hi;
        valid_range(xoff, g.sw, g.w, g.wo, lo, hi);
        for (int64_t oy = 0; oy < g.ho; ++oy) {
          const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          T* row = gx + iy * g.w + xoff;
          const T* gr = gp + oy * g.wo;
          if (g.sw == 1) {
            for (int64_t ox = lo; ox < hi; ++ox) row[ox] += gr[ox] * wv;
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) row[ox * g.sw] += gr[ox] * wv;
          }
        }
      }
    }
  }
}

// d w for the slice w[o, ci, :, :]: for each tap, per-column partial sums over (image, output
// row) in that order, then the columns summed left to right.
template <class T>
void weight_grad_slice(const ConvGradGeometry& g, const T* grad, const T* x, T* gw, int64_t o,
                       int64_t ci, std::vector<T>& partial) {
  const int64_t group = o / g.og, ch = group * g.cg + ci;
  for (int64_t ky = 0; ky < g.kh; ++ky) {
    for (int64_t kx = 0; kx < g.kw; ++kx) {
      const int64_t xoff = kx * g.dw - g.pw;
      int64_t lo, hi;
      valid_range(xoff, g.sw, g.w, g.wo, lo, hi);
      std::fill(partial.begin(), partial.end(), T(0));
      T* acc = partial.data();
      for (int64_t img = 0; img < g.n; ++img) {
        const T* gp = grad + (img * g.o + o) * g.ho * g.wo;
        const T* xp = x + (img * g.c + ch) * g.h * g.w;
        for (int64_t oy = 0; oy < g.ho; ++oy) {
          const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          const T* gr = gp + oy * g.wo;
          const T* xr = xp + iy * g.w + xoff;
          if (g.sw == 1) {
            for (int64_t ox = lo; ox < hi; ++ox) acc[ox] += gr[ox] * xr[ox];
          } else {
            for (int64_t ox = lo; ox < hi; ++ox) acc[ox] += gr[ox] * xr[ox * g.sw];
          }
        }
      }
      T sum = 0;
      for (int64_t ox = 0; ox < g.wo; ++ox) sum += acc[ox];
      gw[ky * g.kw + kx] = sum;
    }
  }
}

template <class F>
void dispatch_real(DType d, F&& fn) {
  if (d == kF64) {
    fn.template operator()<double>();
  } else {
    fn.template operator()<float>();
  }
}

}  // namespace

Status run(const ir::Conv2dBackwardInput& op, KernelContext& ctx) {
  const CpuTensor grad = contiguous(ctx.in(op.grad));
  const CpuTensor w = contiguous(ctx.in(op.w));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const ConvGradGeometry g = geometry(op, op.x_shape, w.shape, grad.shape);
  const int64_t task_cost = std::max<int64_t>(g.og * g.kh * g.kw * g.ho * g.wo, g.h * g.w);
  dispatch_real(out.dtype, [&]<class T>() {
    const T* gd = grad.data<T>();
    const T* wd = w.data<T>();
    T* xd = out.data<T>();
    parallel_chunks(g.n * g.c, grain_for(task_cost), [&](int64_t, int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        input_grad_plane(g, gd, wd, xd + p * g.h * g.w, p / g.c, p % g.c);
      }
    });
  });
  return Status::OK();
}

Status run(const ir::Conv2dBackwardWeight& op, KernelContext& ctx) {
  const CpuTensor grad = contiguous(ctx.in(op.grad));
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const ConvGradGeometry g = geometry(op, x.shape, op.w_shape, grad.shape);
  const int64_t task_cost = std::max<int64_t>(g.n * g.kh * g.kw * g.ho * g.wo, 1);
  dispatch_real(out.dtype, [&]<class T>() {
    const T* gd = grad.data<T>();
    const T* xd = x.data<T>();
    T* wd = out.data<T>();
    parallel_chunks(g.o * g.cg, grain_for(task_cost), [&](int64_t, int64_t b, int64_t e) {
      std::vector<T> partial(static_cast<size_t>(g.wo));
      for (int64_t s = b; s < e; ++s) {
        weight_grad_slice(g, gd, xd, wd + s * g.kh * g.kw, s / g.cg, s % g.cg, partial);
      }
    });
  });
  return Status::OK();
}

}  // namespace tw::cpu
