// Gradients of Conv2d (autograd's backward kernels): Conv2dBackwardInput (d x) and
// Conv2dBackwardWeight (d w).
//
// f32 runs on oneDNN's convolution_backward_data and convolution_backward_weights, in the
// layouts they choose (reorders around them as in conv.cc). oneDNN's weight gradient splits the
// batch across its threads and adds their partial sums, so its bytes follow the thread count
// (checked: 1, 2, 3 and 4 threads give different d w on the digits CNN's shapes). So both
// gradients run per chunk of images whose size follows from the problem alone (chunk_images),
// each chunk on one thread with primitives created for one thread, the chunks spread over
// oneDNN's OpenMP threads; d w adds the chunks' partial gradients in chunk order. The bytes then
// depend neither on the thread count nor on whether the kernel runs in this process or in a
// server.
//
// f32 depthwise convolution runs on conv_depthwise.h's direct kernels (per plane and per channel,
// so neither depends on the thread count either).
// f64 runs on direct loops over unrolled patches: a patch row holds one window's (in channel,
// ky, kx) values, the layout of a weight slice w[o], so both gradients become long multiply-adds
// along rows. Every output element belongs to exactly one task (an image for d x, an out channel
// for d w), and each task adds its terms in an order fixed by the loops below.
#include <algorithm>
#include <optional>
#include <vector>

#include "backend/cpu/conv_depthwise.h"
#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
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

DepthwiseConv depthwise(const ConvGradGeometry& g) {
  return {g.n, g.c, g.h, g.w, g.kh, g.kw, g.ho, g.wo, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw};
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

// ---------------------------------------------------------------------------------------------
// oneDNN (f32)

using dnnl::memory;

// Multiply-adds per chunk of images, and the most chunks a problem is cut into: a chunk is
// worth a task, and a huge batch holds at most kMaxChunks partial weight gradients.
constexpr int64_t kChunkMacs = int64_t{1} << 22;
constexpr int64_t kMaxChunks = 64;

// Input channels per group below which x stays in plain NCHW (as in conv.cc).
constexpr int64_t kPlainSrcMaxChannels = 16;

// Images per chunk: from the problem size only, never the thread count. The batch is cut into
// as few chunks as kChunkMacs allows, all of one size but the last (64 images of at most 56 each
// are 2 chunks of 32, not 56 and 8: the threads get equal shares).
// A batch of fewer than kDnnlSerialMacs runs on the calling thread whatever the thread count
// (DnnlThreadsFor), so it is one chunk: one primitive call and one set of reorders.
int64_t chunk_images(const ConvGradGeometry& g) {
  const int64_t per_image = std::max<int64_t>(1, g.o * patch_cols(g) * g.ho * g.wo);
  if (g.n * per_image < kDnnlSerialMacs) return g.n;
  const int64_t by_work = std::max<int64_t>(1, kChunkMacs / per_image);
  const int64_t by_count = (g.n + kMaxChunks - 1) / kMaxChunks;
  const int64_t most = std::min(g.n, std::max(by_work, by_count));
  const int64_t count = (g.n + most - 1) / most;
  return (g.n + count - 1) / count;
}

enum class GradKind { kInput, kWeight };

// One gradient primitive for a chunk of `images` images. x is diff_src (kInput) or src
// (kWeight), w weights or diff_weights, dy diff_dst; each *_reorder goes between its plain
// layout and the one oneDNN chose, in the direction the data flows.
struct GradPrimitive {
  dnnl::primitive conv;
  memory::desc scratchpad;
  memory::desc x_md, w_md, dy_md;
  memory::desc x_plain, w_plain, dy_plain;
  std::optional<DnnlReorder> x_reorder, w_reorder, dy_reorder;
};

DnnlCache<GradPrimitive>& grad_cache() {
  static DnnlCache<GradPrimitive> cache;
  return cache;
}

GradPrimitive make_grad(const ConvGradGeometry& g, int64_t images, GradKind kind) {
  using dt = memory::data_type;
  using tag = memory::format_tag;
  const DnnlSingleThread one_thread;
  GradPrimitive p;
  const memory::dims x_dims{images, g.c, g.h, g.w}, dy_dims{images, g.o, g.ho, g.wo};
  const memory::dims w_dims = g.groups == 1 ? memory::dims{g.o, g.cg, g.kh, g.kw}
                                            : memory::dims{g.groups, g.og, g.cg, g.kh, g.kw};
  p.x_plain = memory::desc(x_dims, dt::f32, tag::nchw);
  p.dy_plain = memory::desc(dy_dims, dt::f32, tag::nchw);
  p.w_plain = memory::desc(w_dims, dt::f32, g.groups == 1 ? tag::oihw : tag::goihw);
  const memory::desc x_any =
      g.cg < kPlainSrcMaxChannels ? p.x_plain : memory::desc(x_dims, dt::f32, tag::any);
  const memory::desc w_any(w_dims, dt::f32, tag::any), dy_any(dy_dims, dt::f32, tag::any);
  const memory::dims strides{g.sh, g.sw}, dilates{g.dh - 1, g.dw - 1}, pad{g.ph, g.pw};
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc hint(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any, dy_any,
                                      strides, dilates, pad, pad),
      dnnl_attr(), dnnl_engine());
  // x flows out of the input gradient and into the weight gradient; w the other way.
  const bool input = kind == GradKind::kInput;
  auto adopt = [&](const auto& pd, const memory::desc& x_md, const memory::desc& w_md,
                   dnnl::primitive prim) {
    p.x_md = x_md;
    p.w_md = w_md;
    p.dy_md = pd.diff_dst_desc();
    p.scratchpad = pd.scratchpad_desc();
    p.conv = std::move(prim);
    if (p.x_md != p.x_plain)
      p.x_reorder = input ? dnnl_reorder(p.x_md, p.x_plain) : dnnl_reorder(p.x_plain, p.x_md);
    if (p.w_md != p.w_plain)
      p.w_reorder = input ? dnnl_reorder(p.w_plain, p.w_md) : dnnl_reorder(p.w_md, p.w_plain);
  };
  if (input) {
    const dnnl::convolution_backward_data::primitive_desc pd(
        dnnl::convolution_backward_data::desc(algo, x_any, w_any, dy_any, strides, dilates, pad,
                                              pad),
        dnnl_attr(), dnnl_engine(), hint);
    adopt(pd, pd.diff_src_desc(), pd.weights_desc(), dnnl::convolution_backward_data(pd));
  } else {
    const dnnl::convolution_backward_weights::primitive_desc pd(
        dnnl::convolution_backward_weights::desc(algo, x_any, w_any, dy_any, strides, dilates, pad,
                                                 pad),
        dnnl_attr(), dnnl_engine(), hint);
    adopt(pd, pd.src_desc(), pd.diff_weights_desc(), dnnl::convolution_backward_weights(pd));
  }
  if (p.dy_md != p.dy_plain) p.dy_reorder = dnnl_reorder(p.dy_plain, p.dy_md);
  return p;
}

Result<std::shared_ptr<const GradPrimitive>> grad_primitive(const ConvGradGeometry& g,
                                                            int64_t images, GradKind kind) {
  const std::vector<int64_t> key = {static_cast<int64_t>(kind),
                                    images,
                                    g.c,
                                    g.h,
                                    g.w,
                                    g.o,
                                    g.cg,
                                    g.kh,
                                    g.kw,
                                    g.groups,
                                    g.sh,
                                    g.sw,
                                    g.ph,
                                    g.pw,
                                    g.dh,
                                    g.dw};
  return grad_cache().get(key, "conv2d backward", [&] { return make_grad(g, images, kind); });
}

// `data` (in layout `plain`) as the primitive reads it: in place, or reordered into `buf`.
memory input_in_layout(const memory::desc& plain, const memory::desc& md,
                       const std::optional<DnnlReorder>& r, const float* data, Buffer& buf,
                       Status& st) {
  memory m(plain, dnnl_engine(), const_cast<float*>(data));
  if (!r) return m;
  buf = Buffer::allocate(md.get_size());
  memory blocked(md, dnnl_engine(), buf.data());
  st = dnnl_run_reorder("conv2d backward", *r, m, blocked);
  return blocked;
}

ImageChunks chunks_of(const ConvGradGeometry& g) { return ImageChunks::of(g.n, chunk_images(g)); }

// Runs chunk(i, primitive for its size) for every chunk on oneDNN's threads, one thread each.
Status for_each_chunk(const ConvGradGeometry& g, GradKind kind, const ImageChunks& c,
                      const std::function<Status(int64_t, const GradPrimitive&)>& chunk) {
  TW_ASSIGN_OR_RETURN(auto full, grad_primitive(g, c.images, kind));
  std::shared_ptr<const GradPrimitive> tail = full;
  if (c.last != c.images) {
    TW_ASSIGN_OR_RETURN(tail, grad_primitive(g, c.last, kind));
  }
  return dnnl_parallel_chunks("conv2d backward", c.count, [&](int64_t i) {
    return chunk(i, i + 1 == c.count ? *tail : *full);
  });
}

Status input_grad_dnnl(const ConvGradGeometry& g, const float* dy, const float* w, float* dx) {
  const DnnlThreadsFor dnnl_threads(g.n * g.o * patch_cols(g) * g.ho * g.wo);
  const ImageChunks c = chunks_of(g);
  return for_each_chunk(g, GradKind::kInput, c, [&](int64_t i, const GradPrimitive& p) {
    const int64_t n0 = i * c.images;
    Status st;
    Buffer w_buf, dy_buf, dx_buf;
    memory wm = input_in_layout(p.w_plain, p.w_md, p.w_reorder, w, w_buf, st);
    TW_RETURN_NOT_OK(st);
    memory dym =
        input_in_layout(p.dy_plain, p.dy_md, p.dy_reorder, dy + n0 * g.o * g.ho * g.wo, dy_buf, st);
    TW_RETURN_NOT_OK(st);
    memory dx_plain(p.x_plain, dnnl_engine(), dx + n0 * g.c * g.h * g.w);
    memory dxm = dx_plain;
    if (p.x_reorder) {
      dx_buf = Buffer::allocate(p.x_md.get_size());
      dxm = memory(p.x_md, dnnl_engine(), dx_buf.data());
    }
    TW_RETURN_NOT_OK(
        dnnl_run("conv2d backward", p.conv, p.scratchpad,
                 {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DIFF_SRC, dxm}}));
    if (p.x_reorder) return dnnl_run_reorder("conv2d backward", *p.x_reorder, dxm, dx_plain);
    return Status::OK();
  });
}

// Each chunk's d w lands in its own slice of `partial` (in plain layout; straight into dw when
// there is one chunk), then dw[k] = partial[0][k] + partial[1][k] + ... in chunk order.
Status weight_grad_dnnl(const ConvGradGeometry& g, const float* x, const float* dy, float* dw,
                        int64_t w_numel) {
  const DnnlThreadsFor dnnl_threads(g.n * g.o * patch_cols(g) * g.ho * g.wo);
  const ImageChunks c = chunks_of(g);
  Buffer partial;
  if (c.count > 1)
    partial = Buffer::allocate(static_cast<size_t>(c.count * w_numel) * sizeof(float));
  float* slices = c.count > 1 ? reinterpret_cast<float*>(partial.data()) : dw;
  TW_RETURN_NOT_OK(for_each_chunk(g, GradKind::kWeight, c, [&](int64_t i, const GradPrimitive& p) {
    const int64_t n0 = i * c.images;
    Status st;
    Buffer x_buf, dy_buf, dw_buf;
    memory xm =
        input_in_layout(p.x_plain, p.x_md, p.x_reorder, x + n0 * g.c * g.h * g.w, x_buf, st);
    TW_RETURN_NOT_OK(st);
    memory dym =
        input_in_layout(p.dy_plain, p.dy_md, p.dy_reorder, dy + n0 * g.o * g.ho * g.wo, dy_buf, st);
    TW_RETURN_NOT_OK(st);
    memory dw_plain(p.w_plain, dnnl_engine(), slices + i * w_numel);
    memory dwm = dw_plain;
    if (p.w_reorder) {
      dw_buf = Buffer::allocate(p.w_md.get_size());
      dwm = memory(p.w_md, dnnl_engine(), dw_buf.data());
    }
    TW_RETURN_NOT_OK(
        dnnl_run("conv2d backward", p.conv, p.scratchpad,
                 {{DNNL_ARG_DIFF_DST, dym}, {DNNL_ARG_SRC, xm}, {DNNL_ARG_DIFF_WEIGHTS, dwm}}));
    if (p.w_reorder) return dnnl_run_reorder("conv2d backward", *p.w_reorder, dwm, dw_plain);
    return Status::OK();
  }));
  if (c.count == 1) return Status::OK();
  // Blocks of weights, each summed over the chunks in order: the split does not touch the order.
  constexpr int64_t kSumBlock = 4096;
  dnnl_parallel_for((w_numel + kSumBlock - 1) / kSumBlock, [&](int64_t b) {
    const int64_t k0 = b * kSumBlock, k1 = std::min(w_numel, k0 + kSumBlock);
    std::copy(slices + k0, slices + k1, dw + k0);
    for (int64_t i = 1; i < c.count; ++i) {
      const float* s = slices + i * w_numel;
      for (int64_t k = k0; k < k1; ++k) dw[k] += s[k];
    }
  });
  return Status::OK();
}

}  // namespace

Status run(const ir::Conv2dBackwardInput& op, KernelContext& ctx) {
  const CpuTensor grad = contiguous(ctx.in(op.grad));
  const CpuTensor w = contiguous(ctx.in(op.w));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const ConvGradGeometry g = geometry(op, op.x_shape, w.shape, grad.shape);
  if (grad.numel() == 0 || w.numel() == 0) {  // no output sees x: its gradient is zero
    std::fill(out.bytes(), out.bytes() + out.numel() * dtype_size(out.dtype), std::byte{0});
    return Status::OK();
  }
  if (out.dtype == kF32) {
    const DepthwiseConv d = depthwise(g);
    if (depthwise_fits(d, g.o, g.cg, g.groups)) {
      depthwise_input_grad(d, grad.data<float>(), w.data<float>(), out.data<float>());
      return Status::OK();
    }
    return input_grad_dnnl(g, grad.data<float>(), w.data<float>(), out.data<float>());
  }
  const int64_t image_cost = std::max<int64_t>(g.o * patch_cols(g) * g.ho * g.wo, g.c * g.h * g.w);
  const double* gd = grad.data<double>();
  const double* wd = w.data<double>();
  double* xd = out.data<double>();
  parallel_chunks(g.n, rows_per_chunk(image_cost), [&](int64_t, int64_t b, int64_t e) {
    std::vector<double> scratch;
    for (int64_t img = b; img < e; ++img) input_grad_image(g, gd, wd, xd, img, scratch);
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
  if (grad.numel() == 0 || x.numel() == 0) {  // nothing is summed: the gradient is zero
    std::fill(out.bytes(), out.bytes() + out.numel() * dtype_size(out.dtype), std::byte{0});
    return Status::OK();
  }
  if (out.dtype == kF32) {
    const DepthwiseConv d = depthwise(g);
    if (depthwise_fits(d, g.o, g.cg, g.groups)) {
      depthwise_weight_grad(d, x.data<float>(), grad.data<float>(), out.data<float>());
      return Status::OK();
    }
    return weight_grad_dnnl(g, x.data<float>(), grad.data<float>(), out.data<float>(), out.numel());
  }
  const int64_t cols = patch_cols(g), positions = g.ho * g.wo;
  const int64_t image_rows = positions * cols;
  const int64_t block = std::max<int64_t>(1, kRowsElements / std::max<int64_t>(image_rows, 1));
  const double* gd = grad.data<double>();
  const double* xd = x.data<double>();
  double* wd = out.data<double>();
  std::fill(wd, wd + out.numel(), 0.0);
  std::vector<double> rows(static_cast<size_t>(std::min(block, g.n) * image_rows));
  for (int64_t group = 0; group < g.groups; ++group) {
    for (int64_t n0 = 0; n0 < g.n; n0 += block) {
      const int64_t n1 = std::min(g.n, n0 + block);
      parallel_chunks(n1 - n0, rows_per_chunk(image_rows), [&](int64_t, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          im2row(g, xd, n0 + i, group, 0, positions, rows.data() + i * image_rows);
      });
      const int64_t row_cost = (n1 - n0) * image_rows;
      parallel_chunks(g.og, rows_per_chunk(row_cost), [&](int64_t, int64_t b, int64_t e) {
        for (int64_t oi = b; oi < e; ++oi) {
          const int64_t o = group * g.og + oi;
          double* acc = wd + o * cols;
          for (int64_t img = n0; img < n1; ++img) {
            const double* gp = gd + (img * g.o + o) * positions;
            const double* r = rows.data() + (img - n0) * image_rows;
            for (int64_t p = 0; p < positions; ++p, r += cols) {
              const double s = gp[p];
              for (int64_t k = 0; k < cols; ++k) acc[k] += s * r[k];
            }
          }
        }
      });
    }
  }
  return Status::OK();
}

}  // namespace tw::cpu
