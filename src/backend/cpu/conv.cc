// Conv2d: x [N, C, H, W], w [O, C/groups, kH, kW], bias [O] -> [N, O, Ho, Wo].
//
// f32 runs on oneDNN's convolution. Its fast kernels want blocked layouts, so the weights are
// reordered and the source too unless the channel count is small (oneDNN's first-layer kernels
// read plain NCHW directly). A result in nChw16c is turned into NCHW by tile.h's AVX-512
// transpose on oneDNN's own OpenMP threads, which are awake right after the convolution (on tw's
// pool it competed with them), with streaming stores for large outputs: 0.11 ms against 0.36 ms
// for oneDNN's reorder on the 8 MiB output of bench/kernels_bench.cc's conv2d (both timed in a
// standalone oneDNN harness; the whole op went from 0.75 to 0.51 ms). Other blocked results go
// through oneDNN's reorder.
// f64 runs on direct loops: each output plane is one task, so results do not depend on the
// thread count.
#include <algorithm>
#include <optional>

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

ConvPrimitive make_conv(const ConvGeometry& g, bool has_bias) {
  using dt = memory::data_type;
  using tag = memory::format_tag;
  ConvPrimitive p;
  const memory::dims src_dims{g.n, g.c, g.h, g.w}, dst_dims{g.n, g.o, g.ho, g.wo};
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

Status conv_dnnl(const ConvGeometry& g, const CpuTensor& x, const CpuTensor& w,
                 const CpuTensor* bias, CpuTensor& out) {
  const DnnlThreadsFor dnnl_threads(g.n * g.o * g.ho * g.wo * g.cg * g.kh * g.kw);
  const int threads = dnnl_threads.threads();
  const std::vector<int64_t> key = {threads,        g.n,      g.c,  g.h,  g.w,  g.o,  g.cg, g.kh,
                                    g.kw,           g.groups, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw,
                                    bias != nullptr};
  TW_ASSIGN_OR_RETURN(
      auto prim, conv_cache().get(key, "conv2d", [&] { return make_conv(g, bias != nullptr); }));
  const ConvPrimitive& p = *prim;
  const dnnl::engine& eng = dnnl_engine();
  try {
    memory src(p.src_plain, eng, x.data<float>());
    memory wm(p.w_plain, eng, w.data<float>());
    memory dst(p.dst_plain, eng, out.data<float>());
    Buffer src_buf, w_buf, dst_buf;
    if (p.src_reorder) {
      src_buf = Buffer::allocate(p.src_md.get_size());
      memory blocked(p.src_md, eng, src_buf.data());
      TW_RETURN_NOT_OK(dnnl_run_reorder("conv2d", *p.src_reorder, src, blocked));
      src = blocked;
    }
    if (p.w_reorder) {
      w_buf = Buffer::allocate(p.w_md.get_size());
      memory blocked(p.w_md, eng, w_buf.data());
      TW_RETURN_NOT_OK(dnnl_run_reorder("conv2d", *p.w_reorder, wm, blocked));
      wm = blocked;
    }
    memory conv_dst = dst;
    if (p.dst_reorder || p.dst_untile) {
      dst_buf = Buffer::allocate(p.dst_md.get_size());
      conv_dst = memory(p.dst_md, eng, dst_buf.data());
    }
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, conv_dst}};
    if (bias) args.emplace(DNNL_ARG_BIAS, memory(p.bias_md, eng, bias->data<float>()));
    TW_RETURN_NOT_OK(dnnl_run("conv2d", p.conv, p.scratchpad, std::move(args)));
    if (p.dst_reorder) {
      TW_RETURN_NOT_OK(dnnl_run_reorder("conv2d", *p.dst_reorder, conv_dst, dst));
    } else if (p.dst_untile) {
      // One task per (image, block of 16 channels), on the threads that just ran the
      // convolution.
      const int64_t blocks = g.o / 16, hw = g.ho * g.wo;
      const bool streaming = streams_output(out.numel() * int64_t{sizeof(float)});
      const float* from = reinterpret_cast<const float*>(dst_buf.data());
      float* to = out.data<float>();
      dnnl_parallel_for(g.n * blocks, [&](int64_t t) {
        untile16(from + t * hw * 16, to + t * 16 * hw, hw, hw, streaming);
      });
    }
  } catch (const std::exception& e) {
    return dnnl_status("conv2d", e);
  }
  return Status::OK();
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
      st = conv_dnnl(g, x, w, bias ? &*bias : nullptr, out);
    } else {
      conv_direct<T>(g, x.data<T>(), w.data<T>(), b, out.data<T>());
    }
  });
  return st;
}

}  // namespace tw::cpu
