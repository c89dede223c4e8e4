// Gradients of Conv2d (autograd's backward kernels): Conv2dBackwardInput (d x) and
// Conv2dBackwardWeight (d w), f32 and f64, on direct loops over unrolled patches: a patch row
// holds one window's (in channel, ky, kx) values, the layout of a weight slice w[o], so both
// gradients become long multiply-adds along rows (which vectorise) instead of short ones along
// output rows.
//
// Determinism: every output element belongs to exactly one task (an image for d x, an out
// channel for d w), and each task adds its terms in an order fixed by the loops below, so the
// bytes depend neither on the thread count nor on whether the kernel runs in this process or in
// a server. No oneDNN here: its weight gradient reduces across threads in an order that follows
// the thread count.
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
  return {x[0],          x[1],           x[2],          x[3],         w[0],
          w[1],          w[2],           w[3],          op.groups,    w[0] / op.groups,
          grad[2],       grad[3],        op.stride[0],  op.stride[1], op.padding[0],
          op.padding[1], op.dilation[0], op.dilation[1]};
}

// Tasks per chunk so that a chunk holds about 32 Ki multiply-adds: small problems run inline.
int64_t grain_for(int64_t task_cost) {
  constexpr int64_t kChunkWork = int64_t{1} << 15;
  return task_cost >= kChunkWork ? 1 : kChunkWork / std::max<int64_t>(task_cost, 1);
}

// Columns of the unrolled patch: (ci, ky, kx) of one group, row-major, so a weight slice
// w[o, :, :, :] is one contiguous row of them.
inline int64_t patch_cols(const ConvGradGeometry& g) { return g.cg * g.kh * g.kw; }

// Output positions per block of the input-gradient kernel: bounds its scratch to
// kPositionBlock * patch_cols elements however large the image.
constexpr int64_t kPositionBlock = 64;

// The patch x[img, group's channels, window at output position p] for p in [p0, p1), one row
// per position (zeros where the window leaves the image).
template <class T>
void im2row(const ConvGradGeometry& g, const T* x, int64_t img, int64_t group, int64_t p0,
            int64_t p1, T* rows) {
  const int64_t cols = patch_cols(g);
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t oy = p / g.wo, ox = p % g.wo;
    T* row = rows + (p - p0) * cols;
    for (int64_t ci = 0; ci < g.cg; ++ci) {
      const T* plane = x + (img * g.c + group * g.cg + ci) * g.h * g.w;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        for (int64_t kx = 0; kx < g.kw; ++kx) {
          const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
          *row++ = (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) ? plane[iy * g.w + ix] : T(0);
        }
      }
    }
  }
}

// d x for image img: per block of output positions, the patch gradients
// rows[p] = sum over the group's out channels o (in order) of grad[img, o, p] * w[o], then each
// row added back onto the image (col2im), positions in order. Every element of the image
// belongs to this task alone.
template <class T>
void input_grad_image(const ConvGradGeometry& g, const T* grad, const T* w, T* gx, int64_t img,
                      std::vector<T>& scratch) {
  const int64_t cols = patch_cols(g), positions = g.ho * g.wo;
  std::fill(gx + img * g.c * g.h * g.w, gx + (img + 1) * g.c * g.h * g.w, T(0));
  scratch.resize(static_cast<size_t>(kPositionBlock * cols));
  for (int64_t group = 0; group < g.groups; ++group) {
    for (int64_t p0 = 0; p0 < positions; p0 += kPositionBlock) {
      const int64_t p1 = std::min(positions, p0 + kPositionBlock);
      T* rows = scratch.data();
      std::fill(rows, rows + (p1 - p0) * cols, T(0));
      for (int64_t o = group * g.og; o < (group + 1) * g.og; ++o) {
        const T* gp = grad + (img * g.o + o) * positions;
        const T* wr = w + o * cols;
        for (int64_t p = p0; p < p1; ++p) {
          const T s = gp[p];
          T* row = rows + (p - p0) * cols;
          for (int64_t k = 0; k < cols; ++k) row[k] += s * wr[k];
        }
      }
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t oy = p / g.wo, ox = p % g.wo;
        const T* row = rows + (p - p0) * cols;
        for (int64_t ci = 0; ci < g.cg; ++ci) {
          T* plane = gx + (img * g.c + group * g.cg + ci) * g.h * g.w;
          for (int64_t ky = 0; ky < g.kh; ++ky) {
            const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
            for (int64_t kx = 0; kx < g.kw; ++kx, ++row) {
              const int64_t ix = ox * g.sw - g.pw + kx * g.dw;
              if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) plane[iy * g.w + ix] += *row;
            }
          }
        }
      }
    }
  }
}

// Images per block of the weight-gradient kernel: bounds the unrolled patches it holds to about
// kRowsElements elements.
constexpr int64_t kRowsElements = int64_t{1} << 22;

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
  const int64_t image_cost = std::max<int64_t>(g.o * patch_cols(g) * g.ho * g.wo, g.c * g.h * g.w);
  dispatch_real(out.dtype, [&]<class T>() {
    const T* gd = grad.data<T>();
    const T* wd = w.data<T>();
    T* xd = out.data<T>();
    parallel_chunks(g.n, grain_for(image_cost), [&](int64_t, int64_t b, int64_t e) {
      std::vector<T> scratch;
      for (int64_t img = b; img < e; ++img) input_grad_image(g, gd, wd, xd, img, scratch);
    });
  });
  return Status::OK();
}

// d w: the patches of a block of images unrolled into rows (in parallel over images), then each
// out channel's weight row accumulates grad[n, o, p] * row(n, p) over the block's (n, p) in
// order, blocks in order. Each out channel is one task's, whatever the chunking.
Status run(const ir::Conv2dBackwardWeight& op, KernelContext& ctx) {
  const CpuTensor grad = contiguous(ctx.in(op.grad));
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const ConvGradGeometry g = geometry(op, x.shape, op.w_shape, grad.shape);
  const int64_t cols = patch_cols(g), positions = g.ho * g.wo;
  const int64_t image_rows = positions * cols;
  const int64_t block = std::max<int64_t>(1, kRowsElements / std::max<int64_t>(image_rows, 1));
  dispatch_real(out.dtype, [&]<class T>() {
    const T* gd = grad.data<T>();
    const T* xd = x.data<T>();
    T* wd = out.data<T>();
    std::fill(wd, wd + out.numel(), T(0));
    std::vector<T> rows(
        static_cast<size_t>(std::min(block, std::max<int64_t>(g.n, 1)) * image_rows));
    for (int64_t group = 0; group < g.groups; ++group) {
      for (int64_t n0 = 0; n0 < g.n; n0 += block) {
        const int64_t n1 = std::min(g.n, n0 + block);
        parallel_chunks(n1 - n0, grain_for(image_rows), [&](int64_t, int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i)
            im2row(g, xd, n0 + i, group, 0, positions, rows.data() + i * image_rows);
        });
        const int64_t row_cost = (n1 - n0) * image_rows;
        parallel_chunks(g.og, grain_for(row_cost), [&](int64_t, int64_t b, int64_t e) {
          for (int64_t oi = b; oi < e; ++oi) {
            const int64_t o = group * g.og + oi;
            T* acc = wd + o * cols;
            for (int64_t img = n0; img < n1; ++img) {
              const T* gp = gd + (img * g.o + o) * positions;
              const T* r = rows.data() + (img - n0) * image_rows;
              for (int64_t p = 0; p < positions; ++p, r += cols) {
                const T s = gp[p];
                for (int64_t k = 0; k < cols; ++k) acc[k] += s * r[k];
              }
            }
          }
        });
      }
    }
  });
  return Status::OK();
}

}  // namespace tw::cpu
