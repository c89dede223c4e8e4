// Conv2d: x [N, C, H, W], w [O, C/groups, kH, kW], bias [O] -> [N, O, Ho, Wo].
//
// f32 with few input channels, unit width stride and rows of at least 16 outputs (a network's
// first layer) runs on conv_first.h's direct AVX-512 kernel, which writes NCHW itself: 0.51-0.56
// ms against 0.73-0.83 ms for the oneDNN path below on bench/kernels_bench.cc's conv2d (3 -> 64
// channels, 32x32, batch 32), where the transpose of oneDNN's blocked result took as long as the
// convolution.
// f32 depthwise convolution (one input channel per group, as many groups as channels) runs on
// conv_depthwise.h's direct kernel: oneDNN has no fast kernel for it on plain NCHW.
// Other f32 runs on oneDNN's convolution. Its fast kernels want blocked layouts, so the weights
// are reordered and the source too unless the channel count is small (oneDNN's first-layer
// kernels read plain NCHW directly). A result in nChw16c is turned into NCHW by tile.h's AVX-512
// transpose (oneDNN's reorder took 3x as long), with streaming stores for large outputs. A large
// batch runs in chunks of images, each on one thread, so that the transpose reads a result still
// in that core's L2 (chunk_images). Other blocked results go through oneDNN's reorder.
// f64 runs on direct loops: each output plane is one task, so results do not depend on the
// thread count.
#include <algorithm>
#include <optional>

#include "backend/cpu/conv_depthwise.h"
#include "backend/cpu/conv_first.h"
#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
#include "backend/cpu/tile.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

using dnnl::memory;

struct ConvGeometry {
  int64_t n, c, h, w;     // input
  int64_t o, cg, kh, kw;  // weights (cg = channels per group)
  int64_t groups;
  int64_t ho, wo;  // output
  int64_t sh, sw, ph, pw, dh, dw;
};

ConvGeometry geometry(const ir::Conv2d& op, const CpuTensor& x, const CpuTensor& w,
                      const TensorMeta& out) {
  return {x.shape[0],   x.shape[1],    x.shape[2],    x.shape[3],     w.shape[0],    w.shape[1],
          w.shape[2],   w.shape[3],    op.groups,     out.shape[2],   out.shape[3],  op.stride[0],
          op.stride[1], op.padding[0], op.padding[1], op.dilation[0], op.dilation[1]};
}

// Every output element sees only padding (the input is empty): it equals the bias.
template <class T>
void fill_bias(const ConvGeometry& g, const T* bias, T* y) {
  const int64_t plane = g.ho * g.wo;
  for (int64_t i = 0; i < g.n * g.o; ++i) {
    std::fill(y + i * plane, y + (i + 1) * plane, bias ? bias[i % g.o] : T(0));
  }
}

// ---------------------------------------------------------------------------------------------
// oneDNN (f32)

// Input channels per group below which the source stays in plain NCHW (oneDNN's kernels for a
// network's first layer take it so; blocking 3 channels to 16 would waste most of the work).
constexpr int64_t kPlainSrcMaxChannels = 16;

struct ConvPrimitive {
  dnnl::primitive conv;
  memory::desc src_md, w_md, dst_md, bias_md, scratchpad;
  memory::desc src_plain, w_plain, dst_plain;
  std::optional<DnnlReorder> src_reorder, w_reorder, dst_reorder;
  // The convolution writes nChw16c, which tw turns into NCHW itself (untile16) rather than
  // with dst_reorder.
  bool dst_untile = false;
};

DnnlCache<ConvPrimitive>& conv_cache() {
  static DnnlCache<ConvPrimitive> cache;
  return cache;
}

// A primitive for `images` images of g (g.n for the whole batch), made for the thread count
// set on the calling thread.
ConvPrimitive make_conv(const ConvGeometry& g, int64_t images, bool has_bias) {
  using dt = memory::data_type;
  using tag = memory::format_tag;
  ConvPrimitive p;
  const memory::dims src_dims{images, g.c, g.h, g.w}, dst_dims{images, g.o, g.ho, g.wo};
  const memory::dims w_dims = g.groups == 1
                                  ? memory::dims{g.o, g.cg, g.kh, g.kw}
                                  : memory::dims{g.groups, g.o / g.groups, g.cg, g.kh, g.kw};
  p.src_plain = memory::desc(src_dims, dt::f32, tag::nchw);
  p.dst_plain = memory::desc(dst_dims, dt::f32, tag::nchw);
  p.w_plain = memory::desc(w_dims, dt::f32, g.groups == 1 ? tag::oihw : tag::goihw);
  p.bias_md = memory::desc({g.o}, dt::f32, tag::x);
  const memory::desc src_any =
      g.cg < kPlainSrcMaxChannels ? p.src_plain : memory::desc(src_dims, dt::f32, tag::any);
  // Padding on the right is the same as on the left; oneDNN derives Ho from it exactly as
  // docs/ops.md does (floor division).
  const memory::dims strides{g.sh, g.sw}, dilates{g.dh - 1, g.dw - 1}, pad{g.ph, g.pw};
  const memory::desc w_any(w_dims, dt::f32, tag::any), dst_any(dst_dims, dt::f32, tag::any);
  auto desc = has_bias
                  ? dnnl::convolution_forward::desc(
                        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                        src_any, w_any, p.bias_md, dst_any, strides, dilates, pad, pad)
                  : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                                    dnnl::algorithm::convolution_direct, src_any,
                                                    w_any, dst_any, strides, dilates, pad, pad);
  dnnl::convolution_forward::primitive_desc pd(desc, dnnl_attr(), dnnl_engine());
  p.src_md = pd.src_desc();
  p.w_md = pd.weights_desc();
  p.dst_md = pd.dst_desc();
  p.scratchpad = pd.scratchpad_desc();
  p.conv = dnnl::convolution_forward(pd);
  if (p.src_md != p.src_plain) p.src_reorder = dnnl_reorder(p.src_plain, p.src_md);
  if (p.w_md != p.w_plain) p.w_reorder = dnnl_reorder(p.w_plain, p.w_md);
  p.dst_untile = g.o % 16 == 0 && p.dst_md == memory::desc(dst_dims, dt::f32, tag::nChw16c);
  if (p.dst_md != p.dst_plain && !p.dst_untile) p.dst_reorder = dnnl_reorder(p.dst_md, p.dst_plain);
  return p;
}

// A large batch runs in chunks of images, each chunk on one thread with a primitive made for one
// thread, the chunks spread over oneDNN's threads: a chunk's blocked result (at most
// kChunkDstBytes) is still in that core's L2 when it is turned into NCHW, where the whole
// batch's (8 MiB on bench/kernels_bench.cc's conv2d) came back from memory and the transpose
// took as long as the convolution. At least kMinChunks chunks keep the threads evenly loaded.
// The chunk size follows from the problem alone, and a forward convolution adds each output's
// terms in the same order however the batch is split, so the bytes do not depend on it.
constexpr int64_t kChunkDstBytes = int64_t{1} << 20;
constexpr int64_t kMinChunks = 8;

// Images per chunk; g.n (one call on all the threads) for a small problem or batch.
int64_t chunk_images(const ConvGeometry& g) {
  const int64_t macs = g.n * g.o * g.ho * g.wo * g.cg * g.kh * g.kw;
  if (macs < kDnnlSerialMacs || g.n < kMinChunks) return g.n;
  const int64_t per_image = std::max<int64_t>(1, g.o * g.ho * g.wo * int64_t{sizeof(float)});
  const int64_t most =
      std::clamp<int64_t>(kChunkDstBytes / per_image, 1, (g.n + kMinChunks - 1) / kMinChunks);
  const int64_t count = (g.n + most - 1) / most;
  return (g.n + count - 1) / count;
}

Result<std::shared_ptr<const ConvPrimitive>> conv_primitive(const ConvGeometry& g, int64_t images,
                                                            int threads, bool has_bias) {
  const std::vector<int64_t> key = {threads,  images, g.c,  g.h,  g.w,  g.o,  g.cg, g.kh,    g.kw,
                                    g.groups, g.sh,   g.sw, g.ph, g.pw, g.dh, g.dw, has_bias};
  return conv_cache().get(key, "conv2d", [&] {
    if (threads > 1) return make_conv(g, images, has_bias);
    const DnnlSingleThread one_thread;
    return make_conv(g, images, has_bias);
  });
}

// The weights in the layout `p` reads, reordered into `buf` when that is not the plain one.
Status weights_for(const ConvPrimitive& p, const CpuTensor& w, Buffer& buf, memory& wm) {
  wm = memory(p.w_plain, dnnl_engine(), const_cast<float*>(w.data<float>()));
  if (!p.w_reorder) return Status::OK();
  buf = Buffer::allocate(p.w_md.get_size());
  memory blocked(p.w_md, dnnl_engine(), buf.data());
  TW_RETURN_NOT_OK(dnnl_run_reorder("conv2d", *p.w_reorder, wm, blocked));
  wm = blocked;
  return Status::OK();
}

// Convolves `images` images from x into y (both plain NCHW) with p, whose weights are `wm`.
// `untile_on_threads` spreads the transpose of a blocked result over oneDNN's threads (the whole
// batch in one call); a chunk transposes on the thread that ran it.
Status conv_images(const ConvGeometry& g, const ConvPrimitive& p, int64_t images, const float* x,
                   const memory& wm, const float* bias, float* y, bool streaming,
                   bool untile_on_threads) {
  const dnnl::engine& eng = dnnl_engine();
  memory src(p.src_plain, eng, const_cast<float*>(x));
  memory dst(p.dst_plain, eng, y);
  Buffer src_buf, dst_buf;
  if (p.src_reorder) {
    src_buf = Buffer::allocate(p.src_md.get_size());
    memory blocked(p.src_md, eng, src_buf.data());
    TW_RETURN_NOT_OK(dnnl_run_reorder("conv2d", *p.src_reorder, src, blocked));
    src = blocked;
  }
  memory conv_dst = dst;
  if (p.dst_reorder || p.dst_untile) {
    dst_buf = Buffer::allocate(p.dst_md.get_size());
    conv_dst = memory(p.dst_md, eng, dst_buf.data());
  }
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, conv_dst}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias_md, eng, const_cast<float*>(bias)));
  TW_RETURN_NOT_OK(dnnl_run("conv2d", p.conv, p.scratchpad, std::move(args)));
  if (p.dst_reorder) return dnnl_run_reorder("conv2d", *p.dst_reorder, conv_dst, dst);
  if (!p.dst_untile) return Status::OK();
  // One transpose per (image, block of 16 channels).
  const int64_t blocks = g.o / 16, hw = g.ho * g.wo;
  const float* from = reinterpret_cast<const float*>(dst_buf.data());
  auto untile = [&](int64_t t) {
    untile16(from + t * hw * 16, y + t * 16 * hw, hw, hw, streaming);
  };
  if (untile_on_threads) {
    dnnl_parallel_for(images * blocks, untile);
  } else {
    for (int64_t t = 0; t < images * blocks; ++t) untile(t);
  }
  return Status::OK();
}

Status conv_dnnl(const ConvGeometry& g, const CpuTensor& x, const CpuTensor& w,
                 const CpuTensor* bias, CpuTensor& out) {
  const DnnlThreadsFor dnnl_threads(g.n * g.o * g.ho * g.wo * g.cg * g.kh * g.kw);
  const bool has_bias = bias != nullptr;
  const float* b = has_bias ? bias->data<float>() : nullptr;
  const bool streaming = streams_output(out.numel() * int64_t{sizeof(float)});
  const int64_t images = chunk_images(g);
  try {
    if (images == g.n) {
      // The whole batch in one call on all the threads.
      TW_ASSIGN_OR_RETURN(auto prim, conv_primitive(g, g.n, dnnl_threads.threads(), has_bias));
      Buffer w_buf;
      memory wm;
      TW_RETURN_NOT_OK(weights_for(*prim, w, w_buf, wm));
      return conv_images(g, *prim, g.n, x.data<float>(), wm, b, out.data<float>(), streaming,
                         /*untile_on_threads=*/true);
    }
    const ImageChunks c = ImageChunks::of(g.n, images);
    TW_ASSIGN_OR_RETURN(auto full, conv_primitive(g, c.images, 1, has_bias));
    std::shared_ptr<const ConvPrimitive> tail = full;
    if (c.last != c.images) {
      TW_ASSIGN_OR_RETURN(tail, conv_primitive(g, c.last, 1, has_bias));
    }
    // The weights are reordered once for all the chunks (twice if the tail's layout differs).
    Buffer w_buf, tail_w_buf;
    memory wm, tail_wm;
    TW_RETURN_NOT_OK(weights_for(*full, w, w_buf, wm));
    tail_wm = wm;
    if (tail->w_md != full->w_md) TW_RETURN_NOT_OK(weights_for(*tail, w, tail_w_buf, tail_wm));
    const int64_t x_image = g.c * g.h * g.w, y_image = g.o * g.ho * g.wo;
    return dnnl_parallel_chunks("conv2d", c.count, [&](int64_t i) {
      const bool is_tail = i + 1 == c.count;
      const int64_t n0 = i * c.images;
      return conv_images(g, is_tail ? *tail : *full, c.size(i), x.data<float>() + n0 * x_image,
                         is_tail ? tail_wm : wm, b, out.data<float>() + n0 * y_image, streaming,
                         /*untile_on_threads=*/false);
    });
  } catch (const std::exception& e) {
    return dnnl_status("conv2d", e);
  }
}

// ---------------------------------------------------------------------------------------------
// Direct loops (f64)

// One output plane (image, out channel): bias, then every (in channel, kh, kw) tap added in that
// order over the outputs it reaches, vectorised along the output row.
template <class T>
void conv_plane(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y, int64_t img,
                int64_t oc) {
  T* yp = y + (img * g.o + oc) * g.ho * g.wo;
  std::fill(yp, yp + g.ho * g.wo, bias ? bias[oc] : T(0));
  const int64_t group = oc / (g.o / g.groups);
  for (int64_t ic = 0; ic < g.cg; ++ic) {
    const T* xp = x + (img * g.c + group * g.cg + ic) * g.h * g.w;
    for (int64_t ky = 0; ky < g.kh; ++ky) {
      for (int64_t kx = 0; kx < g.kw; ++kx) {
        const T wv = w[((oc * g.cg + ic) * g.kh + ky) * g.kw + kx];
        const int64_t xoff = kx * g.dw - g.pw;  // iw = ow * sw + xoff
        const int64_t ow_lo = ceil_div_nonneg(-xoff, g.sw);
        const int64_t ow_hi = std::min(g.wo, g.w - 1 - xoff < 0 ? 0 : (g.w - 1 - xoff) / g.sw + 1);
        for (int64_t oy = 0; oy < g.ho; ++oy) {
          const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
          if (iy < 0 || iy >= g.h) continue;
          const T* row = xp + iy * g.w;
          T* yrow = yp + oy * g.wo;
          if (g.sw == 1) {
            for (int64_t ox = ow_lo; ox < ow_hi; ++ox) yrow[ox] += wv * row[ox + xoff];
          } else {
            for (int64_t ox = ow_lo; ox < ow_hi; ++ox) yrow[ox] += wv * row[ox * g.sw + xoff];
          }
        }
      }
    }
  }
}

template <class T>
void conv_direct(const ConvGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t plane_cost = g.ho * g.wo * g.cg * g.kh * g.kw;
  parallel_chunks(g.n * g.o, rows_per_chunk(plane_cost), [&](int64_t, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) conv_plane(g, x, w, bias, y, t / g.o, t % g.o);
  });
}

}  // namespace

Status run(const ir::Conv2d& op, KernelContext& ctx) {
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const CpuTensor x = contiguous(ctx.in(op.x));
  const CpuTensor w = contiguous(ctx.in(op.w));
  std::optional<CpuTensor> bias;
  if (ctx.has(op.bias)) bias = contiguous(ctx.in(op.bias));
  const ConvGeometry g = geometry(op, x, w, out.meta());
  Status st;
  dispatch_float(out.dtype, [&]<class T>() {
    const T* b = bias ? bias->data<T>() : nullptr;
    if (x.numel() == 0 || w.numel() == 0) {
      fill_bias<T>(g, b, out.data<T>());
    } else if constexpr (std::is_same_v<T, float>) {
      const DepthwiseConv d{g.n,  g.c,  g.h,  g.w,  g.kh, g.kw, g.ho,
                            g.wo, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw};
      if (depthwise_fits(d, g.o, g.cg, g.groups)) {
        depthwise_forward(d, x.data<float>(), w.data<float>(), b, out.data<float>());
      } else if (conv_first_layer_fits(g.cg, g.kh, g.kw, g.wo, g.groups, g.sw)) {
        conv_first_layer(
            {g.n, g.c, g.h, g.w, g.o, g.kh, g.kw, g.ho, g.wo, g.sh, g.ph, g.dh, g.pw, g.dw},
            x.data<float>(), w.data<float>(), b, out.data<float>());
      } else {
        st = conv_dnnl(g, x, w, bias ? &*bias : nullptr, out);
      }
    } else {
      conv_direct<T>(g, x.data<T>(), w.data<T>(), b, out.data<T>());
    }
  });
  return st;
}

}  // namespace tw::cpu
