// Depthwise convolution kernels (conv_depthwise.h). Every loop below works on a zero-padded copy
// of one plane, so no output needs a bounds check: an output is init + sum over the window's taps
// in (ky, kx) order, each term a multiply-add (contracted to an FMA as the build does everywhere;
// the same in every lane and for every thread count). A block of rows x lanes outputs keeps its
// accumulators in registers; a row narrower than a block computes the whole block into the
// padding and stores only its outputs.
#include "backend/cpu/conv_depthwise.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/structured_util.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

// Largest padded plane (floats) a task's scratch may hold: 4 MiB. A plane padded beyond that
// (a padding far larger than the image, valid if odd) stays on oneDNN.
constexpr int64_t kMaxScratch = int64_t{1} << 20;

// GCC/Clang vector of 8 f32 (one AVX2 register). Accumulators are arrays of these indexed only
// by constants once the loops are unrolled, so they stay in registers (float arrays with a
// runtime-length store went to the stack, one store per multiply-add).
using Vec [[gnu::vector_size(32)]] = float;
using Mask [[gnu::vector_size(32)]] = int32_t;
constexpr int kVecLanes = 8;

template <bool kUnitStride>
inline Vec load(const float* p, int64_t stride) {
  Vec v;
  if constexpr (kUnitStride) {
    std::memcpy(&v, p, sizeof v);
  } else {
    for (int j = 0; j < kVecLanes; ++j) v[j] = p[j * stride];
  }
  return v;
}

// Output block shapes: rows x vectors of 8 lanes = 8 accumulators, enough independent chains to
// hide the FMA latency. Rows of at most 8 outputs take 8 x 1 (a 16-lane block would be mostly
// padding).
struct Block {
  int64_t rows, lanes;
};
constexpr Block kWide{4, 16};
constexpr Block kNarrow{8, 8};
Block block_for(int64_t out_w) { return out_w <= kNarrow.lanes ? kNarrow : kWide; }

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// The window that slides over a padded plane.
struct Window {
  int64_t kh, kw, sh, sw, dh, dw;
};

// Rows and columns of the padded plane that a block-rounded output of out_h x out_w reads.
struct Extent {
  int64_t rows, cols;
};
Extent extent(const Window& k, int64_t out_h, int64_t out_w, Block b) {
  return {(round_up(out_h, b.rows) - 1) * k.sh + (k.kh - 1) * k.dh + 1,
          (round_up(out_w, b.lanes) - 1) * k.sw + (k.kw - 1) * k.dw + 1};
}

// dst (e.rows x e.cols, zeroed) = src (h x w) placed at (top, left), clipped to dst.
void pad_plane(const float* src, int64_t h, int64_t w, int64_t top, int64_t left, float* dst,
               Extent e) {
  std::fill(dst, dst + e.rows * e.cols, 0.0f);
  const int64_t copy = std::min(w, e.cols - left);
  if (copy <= 0) return;
  for (int64_t iy = 0; iy < h && top + iy < e.rows; ++iy) {
    std::memcpy(dst + (top + iy) * e.cols + left, src + iy * w, copy * sizeof(float));
  }
}

// out (out_h x out_w) = init + sum over taps (ky, kx) in order of wk[ky * kw + kx] * p[window].
template <int kRows, int kLanes, bool kUnitStride>
void correlate(const float* p, int64_t cols, const Window& k, const float* wk, float init,
               float* out, int64_t out_h, int64_t out_w) {
  constexpr int kVecs = kLanes / kVecLanes;
  const Vec init_v = Vec{} + init;
  for (int64_t oy0 = 0; oy0 < out_h; oy0 += kRows) {
    for (int64_t ox0 = 0; ox0 < out_w; ox0 += kLanes) {
      Vec acc[kRows][kVecs];
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 2
        for (int v = 0; v < kVecs; ++v) acc[r][v] = init_v;
      const float* wt = wk;
      for (int64_t ky = 0; ky < k.kh; ++ky) {
        for (int64_t kx = 0; kx < k.kw; ++kx, ++wt) {
          const Vec wv = Vec{} + *wt;
          const float* q = p + (oy0 * k.sh + ky * k.dh) * cols + ox0 * k.sw + kx * k.dw;
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 2
            for (int v = 0; v < kVecs; ++v)
              acc[r][v] += wv * load<kUnitStride>(q + r * k.sh * cols + v * kVecLanes * k.sw, k.sw);
        }
      }
      const int64_t rows = std::min<int64_t>(kRows, out_h - oy0);
      const int64_t lanes = std::min<int64_t>(kLanes, out_w - ox0);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        if (r >= rows) break;
        float* o = out + (oy0 + r) * out_w + ox0;
        if (lanes == kLanes) {
#pragma GCC unroll 2
          for (int v = 0; v < kVecs; ++v) std::memcpy(o + v * kVecLanes, &acc[r][v], sizeof(Vec));
        } else {
          float row[kLanes];
#pragma GCC unroll 2
          for (int v = 0; v < kVecs; ++v) std::memcpy(row + v * kVecLanes, &acc[r][v], sizeof(Vec));
          std::memcpy(o, row, static_cast<size_t>(lanes) * sizeof(float));
        }
      }
    }
  }
}

void correlate(Block b, const float* p, int64_t cols, const Window& k, const float* wk, float init,
               float* out, int64_t out_h, int64_t out_w) {
  const bool unit = k.sw == 1;
  if (b.lanes == kNarrow.lanes) {
    (unit ? correlate<kNarrow.rows, kNarrow.lanes, true>
          : correlate<kNarrow.rows, kNarrow.lanes, false>)(p, cols, k, wk, init, out, out_h, out_w);
  } else {
    (unit ? correlate<kWide.rows, kWide.lanes, true>
          : correlate<kWide.rows, kWide.lanes, false>)(p, cols, k, wk, init, out, out_h, out_w);
  }
}

Window forward_window(const DepthwiseConv& g) { return {g.kh, g.kw, g.sh, g.sw, g.dh, g.dw}; }

// d x by gathering (stride 1, padding at most the dilated kernel's reach): the forward correlation
// of grad, padded by (k - 1) * d - p, with the kernel turned by 180 degrees.
bool gathers_input_grad(const DepthwiseConv& g) {
  return g.sh == 1 && g.sw == 1 && g.ph <= (g.kh - 1) * g.dh && g.pw <= (g.kw - 1) * g.dw;
}
Window gather_window(const DepthwiseConv& g) { return {g.kh, g.kw, 1, 1, g.dh, g.dw}; }

// The scatter form of d x (any stride): rows and columns of the padded input plane it writes.
Extent scatter_extent(const DepthwiseConv& g) {
  return {std::max(g.ph + g.h, (g.ho - 1) * g.sh + (g.kh - 1) * g.dh + 1),
          std::max(g.pw + g.w, (g.wo - 1) * g.sw + (g.kw - 1) * g.dw + 1)};
}

// Weight gradient of one image: the forward window over the padded plane p against grad (out_h
// rows of out_w, gstride apart; gstride >= out_w rounded up to kLanes, the rest zero). Lane (r, j)
// of a tap adds the products at the outputs of rows r mod kRows and columns j mod kLanes, images
// and rows in order; the tap's gradient then adds its lanes in order. In a row's last partial
// block the products of lanes past the row are masked to zero, so only real outputs add terms
// (an infinity in the padding reaches no tap that its outputs do not).
template <int kRows, int kLanes, bool kUnitStride>
void weight_grad_image(const float* p, int64_t cols, const Window& k, const float* grad,
                       int64_t gstride, int64_t out_h, int64_t out_w,
                       float* acc /* [taps][kRows][kLanes] */) {
  constexpr int kVecs = kLanes / kVecLanes;
  const int64_t full = out_w / kLanes * kLanes;
  Mask keep[kVecs];
  for (int v = 0; v < kVecs; ++v)
    for (int j = 0; j < kVecLanes; ++j) keep[v][j] = full + v * kVecLanes + j < out_w ? -1 : 0;
  for (int64_t ky = 0; ky < k.kh; ++ky) {
    for (int64_t kx = 0; kx < k.kw; ++kx, acc += kRows * kLanes) {
      Vec a[kRows][kVecs];
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 2
        for (int v = 0; v < kVecs; ++v)
          std::memcpy(&a[r][v], acc + (r * kVecs + v) * kVecLanes, sizeof(Vec));
      for (int64_t oy0 = 0; oy0 < out_h; oy0 += kRows) {
        const int64_t rows = std::min<int64_t>(kRows, out_h - oy0);
        const float* q0 = p + (oy0 * k.sh + ky * k.dh) * cols + kx * k.dw;
        const float* g0 = grad + oy0 * gstride;
        // The block's rows side by side: kRows x kVecs independent chains.
        for (int64_t ox0 = 0; ox0 < full; ox0 += kLanes) {
#pragma GCC unroll 8
          for (int r = 0; r < kRows; ++r) {
            if (r >= rows) break;
#pragma GCC unroll 2
            for (int v = 0; v < kVecs; ++v) {
              const int64_t ox = ox0 + v * kVecLanes;
              a[r][v] += load<true>(g0 + r * gstride + ox, 1) *
                         load<kUnitStride>(q0 + r * k.sh * cols + ox * k.sw, k.sw);
            }
          }
        }
        if (full == out_w) continue;
#pragma GCC unroll 8
        for (int r = 0; r < kRows; ++r) {
          if (r >= rows) break;
#pragma GCC unroll 2
          for (int v = 0; v < kVecs; ++v) {
            const int64_t ox = full + v * kVecLanes;
            const Vec prod = load<true>(g0 + r * gstride + ox, 1) *
                             load<kUnitStride>(q0 + r * k.sh * cols + ox * k.sw, k.sw);
            a[r][v] += reinterpret_cast<Vec>(reinterpret_cast<Mask>(prod) & keep[v]);
          }
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 2
        for (int v = 0; v < kVecs; ++v)
          std::memcpy(acc + (r * kVecs + v) * kVecLanes, &a[r][v], sizeof(Vec));
    }
  }
}

void weight_grad_image(Block b, const float* p, int64_t cols, const Window& k, const float* grad,
                       int64_t gstride, int64_t out_h, int64_t out_w, float* acc) {
  const bool unit = k.sw == 1;
  if (b.lanes == kNarrow.lanes) {
    (unit ? weight_grad_image<kNarrow.rows, kNarrow.lanes, true>
          : weight_grad_image<kNarrow.rows, kNarrow.lanes, false>)(p, cols, k, grad, gstride, out_h,
                                                                   out_w, acc);
  } else {
    (unit ? weight_grad_image<kWide.rows, kWide.lanes, true>
          : weight_grad_image<kWide.rows, kWide.lanes, false>)(p, cols, k, grad, gstride, out_h,
                                                               out_w, acc);
  }
}

// Elements of one plane's work, for rows_per_chunk.
int64_t plane_cost(const DepthwiseConv& g) {
  return std::max<int64_t>(1, std::max(g.ho * g.wo, g.h * g.w) * g.kh * g.kw);
}

}  // namespace

bool depthwise_fits(const DepthwiseConv& g, int64_t o, int64_t cg, int64_t groups) {
  if (!(cg == 1 && groups == g.c && o == g.c)) return false;
  const Block fb = block_for(g.wo), ib = block_for(g.w);
  const Extent f = extent(forward_window(g), g.ho, g.wo, fb);
  const Extent s = scatter_extent(g);
  const Extent i = extent(gather_window(g), g.h, g.w, ib);
  return f.rows * f.cols <= kMaxScratch && s.rows * s.cols <= kMaxScratch &&
         i.rows * i.cols <= kMaxScratch;
}

void depthwise_forward(const DepthwiseConv& g, const float* x, const float* w, const float* bias,
                       float* y) {
  const Window k = forward_window(g);
  const Block b = block_for(g.wo);
  const Extent e = extent(k, g.ho, g.wo, b);
  parallel_chunks(g.n * g.c, rows_per_chunk(plane_cost(g)),
                  [&](int64_t, int64_t begin, int64_t end) {
                    std::vector<float> scratch(static_cast<size_t>(e.rows * e.cols));
                    for (int64_t t = begin; t < end; ++t) {
                      const int64_t ch = t % g.c;
                      pad_plane(x + t * g.h * g.w, g.h, g.w, g.ph, g.pw, scratch.data(), e);
                      correlate(b, scratch.data(), e.cols, k, w + ch * g.kh * g.kw,
                                bias ? bias[ch] : 0.0f, y + t * g.ho * g.wo, g.ho, g.wo);
                    }
                  });
}

void depthwise_input_grad(const DepthwiseConv& g, const float* grad, const float* w, float* dx) {
  const int64_t taps = g.kh * g.kw;
  if (gathers_input_grad(g)) {
    const Window k = gather_window(g);
    const Block b = block_for(g.w);
    const Extent e = extent(k, g.h, g.w, b);
    const int64_t top = (g.kh - 1) * g.dh - g.ph, left = (g.kw - 1) * g.dw - g.pw;
    parallel_chunks(g.n * g.c, rows_per_chunk(plane_cost(g)),
                    [&](int64_t, int64_t begin, int64_t end) {
                      std::vector<float> scratch(static_cast<size_t>(e.rows * e.cols));
                      std::vector<float> turned(static_cast<size_t>(taps));
                      for (int64_t t = begin; t < end; ++t) {
                        const float* wc = w + (t % g.c) * taps;
                        std::reverse_copy(wc, wc + taps, turned.begin());
                        pad_plane(grad + t * g.ho * g.wo, g.ho, g.wo, top, left, scratch.data(), e);
                        correlate(b, scratch.data(), e.cols, k, turned.data(), 0.0f,
                                  dx + t * g.h * g.w, g.h, g.w);
                      }
                    });
    return;
  }
  // Any stride: each tap in (ky, kx) order adds w * grad onto the padded plane; for one tap the
  // outputs reach distinct positions, so every element's terms come in tap order.
  const Extent e = scatter_extent(g);
  parallel_chunks(
      g.n * g.c, rows_per_chunk(plane_cost(g)), [&](int64_t, int64_t begin, int64_t end) {
        std::vector<float> scratch(static_cast<size_t>(e.rows * e.cols));
        for (int64_t t = begin; t < end; ++t) {
          std::fill(scratch.begin(), scratch.end(), 0.0f);
          const float* wc = w + (t % g.c) * taps;
          const float* gp = grad + t * g.ho * g.wo;
          for (int64_t ky = 0; ky < g.kh; ++ky) {
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              const float wv = wc[ky * g.kw + kx];
              for (int64_t oy = 0; oy < g.ho; ++oy) {
                float* d = scratch.data() + (oy * g.sh + ky * g.dh) * e.cols + kx * g.dw;
                const float* gr = gp + oy * g.wo;
                for (int64_t ox = 0; ox < g.wo; ++ox) d[ox * g.sw] += wv * gr[ox];
              }
            }
          }
          float* out = dx + t * g.h * g.w;
          for (int64_t iy = 0; iy < g.h; ++iy) {
            std::memcpy(out + iy * g.w, scratch.data() + (iy + g.ph) * e.cols + g.pw,
                        g.w * sizeof(float));
          }
        }
      });
}

void depthwise_weight_grad(const DepthwiseConv& g, const float* x, const float* grad, float* dw) {
  const Window k = forward_window(g);
  const Block b = block_for(g.wo);
  const Extent e = extent(k, g.ho, g.wo, b);
  const int64_t taps = g.kh * g.kw, lanes = b.rows * b.lanes;
  // grad's rows padded with zeros to whole blocks (read in place when they are whole already).
  const int64_t gstride = round_up(g.wo, b.lanes);
  const bool pad_grad = gstride != g.wo;
  auto channels = [&](int64_t, int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<size_t>(e.rows * e.cols));
    std::vector<float> acc(static_cast<size_t>(taps * lanes));
    std::vector<float> grad_pad(pad_grad ? static_cast<size_t>(g.ho * gstride) : 0);
    for (int64_t ch = begin; ch < end; ++ch) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t img = 0; img < g.n; ++img) {
        const int64_t plane = img * g.c + ch;
        pad_plane(x + plane * g.h * g.w, g.h, g.w, g.ph, g.pw, scratch.data(), e);
        const float* gp = grad + plane * g.ho * g.wo;
        if (pad_grad) {
          pad_plane(gp, g.ho, g.wo, 0, 0, grad_pad.data(), {g.ho, gstride});
          gp = grad_pad.data();
        }
        weight_grad_image(b, scratch.data(), e.cols, k, gp, gstride, g.ho, g.wo, acc.data());
      }
      for (int64_t t = 0; t < taps; ++t) {
        float s = 0.0f;
        for (int64_t l = 0; l < lanes; ++l) s += acc[t * lanes + l];
        dw[ch * taps + t] = s;
      }
    }
  };
  parallel_chunks(g.c, rows_per_chunk(g.n * plane_cost(g)), channels);
}

}  // namespace tw::cpu
