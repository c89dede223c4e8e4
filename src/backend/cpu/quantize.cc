// Quantization kernels (docs/ops.md, "Quantization"): affine Quantize/Dequantize (per tensor,
// channel or block), the ggml block formats (PackBlocks/UnpackBlocks), the weight-only linear
// over packed blocks (LinearBlocks, an AVX2 kernel that dequantizes inside the dot product) and
// the int8 linear with activations quantized per call (LinearInt8, oneDNN's u8 x s8 matmul).
//
// Every output element is computed by one thread in a fixed order (parallel work is split over
// output rows or elements, never over a sum), so results do not depend on the thread count.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "core/half.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

// Where element i (row-major over x) finds its scale: per tensor, per channel along axis, or per
// block of `block` along axis (scale shaped as x with that dim in blocks).
struct ParamIndex {
  int64_t mode = 0;  // 0 per tensor, 1 per channel, 2 per block
  int64_t dim = 1, inner = 1, block = 1, blocks = 1;
  ParamIndex(const Shape& x, const Shape& scale, int64_t axis, int64_t block_size) {
    const bool per_tensor = numel(scale) == 1 && scale.size() <= 1 && block_size == 0;
    if (per_tensor || x.empty()) return;
    const int64_t rank = static_cast<int64_t>(x.size());
    const int64_t a = axis < 0 ? axis + rank : axis;
    dim = x[a];
    for (int64_t d = a + 1; d < rank; ++d) inner *= x[d];
    if (block_size == 0) {
      mode = 1;
    } else {
      mode = 2;
      block = block_size;
      blocks = dim == 0 ? 0 : (dim - 1) / block + 1;
    }
  }
  int64_t operator()(int64_t i) const {
    if (mode == 0) return 0;
    const int64_t c = (i / inner) % dim;
    if (mode == 1) return c;
    const int64_t outer = i / (inner * dim);
    return (outer * blocks + c / block) * inner + i % inner;
  }
};

// The zero point of parameter p as an integer (0 when absent).
template <class Q>
int64_t zero_point_at(const CpuTensor* zp, int64_t p) {
  return zp ? static_cast<int64_t>(zp->data<Q>()[p]) : 0;
}

template <class Q>
void quantize_into(const float* x, const float* scale, const CpuTensor* zp, const ParamIndex& pi,
                   int64_t n, Q* out) {
  constexpr double kLo = static_cast<double>(std::numeric_limits<Q>::min());
  constexpr double kHi = static_cast<double>(std::numeric_limits<Q>::max());
  parallel_chunks(n, chunk_grain(n), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t p = pi(i);
      // x / scale rounded half to even (the default rounding mode), NaN as 0; then the zero
      // point, saturated to Q's range.
      float r = std::nearbyint(x[i] / scale[p]);
      if (r != r) r = 0;
      const double v = std::clamp(
          static_cast<double>(r) + static_cast<double>(zero_point_at<Q>(zp, p)), kLo, kHi);
      out[i] = static_cast<Q>(v);
    }
  });
}

template <class Q>
void dequantize_into(const Q* x, const float* scale, const CpuTensor* zp, const ParamIndex& pi,
                     int64_t n, float* out) {
  parallel_chunks(n, chunk_grain(n), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t p = pi(i);
      out[i] = static_cast<float>(static_cast<int64_t>(x[i]) - zero_point_at<Q>(zp, p)) * scale[p];
    }
  });
}

// ---- the block formats (ggml's quantize_row_q8_0_ref / q4_0_ref, to the bit) ----

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
void store_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xff);
  p[1] = static_cast<uint8_t>(v >> 8);
}

void pack_q8_0(const float* x, uint8_t* blk) {
  float amax = 0;
  for (int64_t j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(blk, f32_to_f16(d));
  for (int64_t j = 0; j < kQuantBlock; ++j) {
    const float q = std::clamp(std::round(x[j] * id), -127.0f, 127.0f);
    blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
  }
}

void pack_q4_0(const float* x, uint8_t* blk) {
  float amax = 0, max = 0;  // the value of largest magnitude, with its sign
  for (int64_t j = 0; j < kQuantBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(blk, f32_to_f16(d));
  constexpr int64_t kHalf = kQuantBlock / 2;
  for (int64_t j = 0; j < kHalf; ++j) {
    // x * id lies in [-8, 8]: + 8.5 truncated is the nearest of 0..16, capped at 15.
    const auto q0 = static_cast<uint8_t>(
        std::min(15.0f, std::trunc(std::clamp(x[j] * id + 8.5f, 0.0f, 16.0f))));
    const auto q1 = static_cast<uint8_t>(
        std::min(15.0f, std::trunc(std::clamp(x[kHalf + j] * id + 8.5f, 0.0f, 16.0f))));
    blk[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

void unpack_block(BlockFormat f, const uint8_t* blk, float* out) {
  const float d = f16_to_f32(load_u16(blk));
  if (f == BlockFormat::kQ8_0) {
    for (int64_t j = 0; j < kQuantBlock; ++j)
      out[j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
    return;
  }
  constexpr int64_t kHalf = kQuantBlock / 2;
  for (int64_t j = 0; j < kHalf; ++j) {
    out[j] = d * static_cast<float>((blk[2 + j] & 0x0f) - 8);
    out[kHalf + j] = d * static_cast<float>((blk[2 + j] >> 4) - 8);
  }
}

// ---- LinearBlocks: rows of x against packed rows of w, dequantized in registers ----

// The 32 weights of a block as four vectors of 8 f32 (without the scale): exact small integers
// (-127..127 for Q8_0, -8..7 for Q4_0).
template <BlockFormat F>
inline void block_weights(const uint8_t* blk, __m256 w[4]) {
  if constexpr (F == BlockFormat::kQ8_0) {
    for (int v = 0; v < 4; ++v) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + 8 * v));
      w[v] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    }
  } else {
    // Elements 0..15 are the low nibbles, 16..31 the high ones. Each nibble q, widened to 32
    // bits and or-ed into the bits of 2^23, is the float 2^23 + q; less 2^23 + 8 that is q - 8,
    // exactly (an integer add and a float subtract instead of a conversion).
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(q, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    const __m256i magic = _mm256_set1_epi32(0x4b000000);
    const __m256 bias = _mm256_set1_ps(8388616.0f);  // 2^23 + 8
    auto lanes = [&](__m128i bytes) {
      return _mm256_sub_ps(_mm256_castsi256_ps(_mm256_or_si256(_mm256_cvtepu8_epi32(bytes), magic)),
                           bias);
    };
    w[0] = lanes(lo);
    w[1] = lanes(_mm_unpackhi_epi64(lo, lo));
    w[2] = lanes(hi);
    w[3] = lanes(_mm_unpackhi_epi64(hi, hi));
  }
}

// A block's scale d (f16) broadcast to 8 lanes, converted by F16C (exact, as f16_to_f32).
inline __m256 block_scale(const uint8_t* blk) { return _mm256_set1_ps(_cvtsh_ss(load_u16(blk))); }

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Rows of x handled together: each block's weights are converted once for all of them.
constexpr int64_t kRowGroup = 4;

// out[r][m] for the R rows of x from r0 and outputs [m0, m1): per block, the 32 products summed
// as 8 lanes (w0 x0, then w1 x1, w2 x2, w3 x3 fused in), scaled by the block's d into 8 running
// lanes; the lanes summed at the end. The format and the row count are compile-time constants so
// that every loop over them unrolls (batch-1 generation is R = 1).
template <BlockFormat F, int R>
void linear_blocks_tile(const float* x, int64_t k, const uint8_t* w, int64_t row_bytes,
                        const float* bias, int64_t m_total, int64_t r0, int64_t m0, int64_t m1,
                        float* out) {
  const int64_t nb = k / kQuantBlock;
  constexpr int64_t bb = block_bytes(F);
  const float* xr0 = x + r0 * k;
  for (int64_t m = m0; m < m1; ++m) {
    const uint8_t* wr = w + m * row_bytes;
    __m256 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = wr + b * bb;
      __m256 wv[4];
      block_weights<F>(blk, wv);
      const __m256 d = block_scale(blk);
      for (int r = 0; r < R; ++r) {
        const float* xr = xr0 + r * k + b * kQuantBlock;
        __m256 s = _mm256_mul_ps(wv[0], _mm256_loadu_ps(xr));
        s = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(xr + 8), s);
        s = _mm256_fmadd_ps(wv[2], _mm256_loadu_ps(xr + 16), s);
        s = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(xr + 24), s);
        acc[r] = _mm256_fmadd_ps(d, s, acc[r]);
      }
    }
    for (int r = 0; r < R; ++r) {
      out[(r0 + r) * m_total + m] = hsum(acc[r]) + (bias ? bias[m] : 0.0f);
    }
  }
}

template <BlockFormat F>
void linear_blocks_rows(const float* x, int64_t k, const uint8_t* w, int64_t row_bytes,
                        const float* bias, int64_t m_total, int64_t r0, int64_t rows, int64_t m0,
                        int64_t m1, float* out) {
  switch (rows) {
    case 1: linear_blocks_tile<F, 1>(x, k, w, row_bytes, bias, m_total, r0, m0, m1, out); break;
    case 2: linear_blocks_tile<F, 2>(x, k, w, row_bytes, bias, m_total, r0, m0, m1, out); break;
    case 3: linear_blocks_tile<F, 3>(x, k, w, row_bytes, bias, m_total, r0, m0, m1, out); break;
    default: linear_blocks_tile<F, 4>(x, k, w, row_bytes, bias, m_total, r0, m0, m1, out); break;
  }
}

// ---- LinearInt8 ----

// Activations are quantized to 7 bits (0..127, PyTorch's reduce_range on x86): a u8 x s8 pair
// sum then stays below 2^15, so the AVX2 kernels' 16-bit intermediate (vpmaddubsw) cannot
// saturate and the int32 sums are exact on every CPU and at every thread count.
constexpr float kActMax = 127.0f;

struct ActQuant {
  float scale = 1;
  int32_t zero_point = 0;
};

ActQuant act_params(const float* x, int64_t n) {
  float lo = 0, hi = 0;  // the range always includes 0 (zero is then exact)
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  ActQuant q;
  const float span = hi - lo;
  q.scale = span > 0 && std::isfinite(span) ? span / kActMax : 1.0f;
  q.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / q.scale), 0.0f, kActMax));
  return q;
}

void quantize_acts(const float* x, int64_t n, const ActQuant& q, uint8_t* out) {
  const float zp = static_cast<float>(q.zero_point);
  parallel_chunks(n, chunk_grain(n), [&](int64_t, int64_t begin, int64_t end) {
    const __m256 s = _mm256_set1_ps(q.scale), z = _mm256_set1_ps(zp);
    const __m256 lo = _mm256_setzero_ps(), hi = _mm256_set1_ps(kActMax);
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      __m256 v = _mm256_round_ps(_mm256_div_ps(_mm256_loadu_ps(x + i), s),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v = _mm256_min_ps(_mm256_max_ps(_mm256_add_ps(v, z), lo), hi);
      const __m256i iv = _mm256_cvtps_epi32(v);
      alignas(32) int32_t tmp[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), iv);
      for (int j = 0; j < 8; ++j) out[i + j] = static_cast<uint8_t>(tmp[j]);
    }
    for (; i < end; ++i) {  // as the vector loop: NaN gives 0 (maxps returns its second operand)
      const float v = std::nearbyint(x[i] / q.scale) + zp;
      out[i] = v != v ? 0 : static_cast<uint8_t>(std::clamp(v, 0.0f, kActMax));
    }
  });
}

struct Int8Primitive {
  dnnl::primitive prim;
  dnnl::memory::desc x_md, w_md, y_md, scale_md, zp_md, scratchpad;
};

DnnlCache<Int8Primitive>& int8_cache() {
  static DnnlCache<Int8Primitive> cache;
  return cache;
}

}  // namespace

Status run(const ir::Quantize& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("quantize", ctx.meta(op.out), op.dtype));
  const CpuTensor x = contiguous(ctx.in(op.x));
  const CpuTensor scale = contiguous(ctx.in(op.scale));
  CpuTensor zp;
  if (ctx.has(op.zero_point)) zp = contiguous(ctx.in(op.zero_point));
  const CpuTensor* zpp = ctx.has(op.zero_point) ? &zp : nullptr;
  const ParamIndex pi(x.shape, scale.shape, op.axis, op.block);
  CpuTensor& y = ctx.alloc(op.out);
  if (op.dtype == kI8) {
    quantize_into<int8_t>(x.data<float>(), scale.data<float>(), zpp, pi, x.numel(),
                          y.data<int8_t>());
  } else {
    quantize_into<uint8_t>(x.data<float>(), scale.data<float>(), zpp, pi, x.numel(),
                           y.data<uint8_t>());
  }
  return Status::OK();
}

Status run(const ir::Dequantize& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("dequantize", ctx.meta(op.out), kF32));
  const CpuTensor x = contiguous(ctx.in(op.x));
  const CpuTensor scale = contiguous(ctx.in(op.scale));
  CpuTensor zp;
  if (ctx.has(op.zero_point)) zp = contiguous(ctx.in(op.zero_point));
  const CpuTensor* zpp = ctx.has(op.zero_point) ? &zp : nullptr;
  const ParamIndex pi(x.shape, scale.shape, op.axis, op.block);
  CpuTensor& y = ctx.alloc(op.out);
  const float* s = scale.data<float>();
  float* out = y.data<float>();
  switch (x.dtype) {
    case kI8: dequantize_into(x.data<int8_t>(), s, zpp, pi, x.numel(), out); break;
    case kU8: dequantize_into(x.data<uint8_t>(), s, zpp, pi, x.numel(), out); break;
    case kI32: dequantize_into(x.data<int32_t>(), s, zpp, pi, x.numel(), out); break;
    default: return unsupported_dtype("dequantize", x.dtype);
  }
  return Status::OK();
}

Status run(const ir::PackBlocks& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("pack_blocks", ctx.meta(op.out), kU8));
  const CpuTensor x = contiguous(ctx.in(op.x));
  const float* in = x.data<float>();
  const int64_t n = x.numel(), blocks = n / kQuantBlock, bb = block_bytes(op.format);
  // A non-finite value has no scale that represents its block: refused, naming where it is.
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(in[i])) {
      return invalid_argument(
          "pack_blocks: element " + std::to_string(i) + " is " + std::to_string(in[i]) + "; " +
          std::string(block_format_name(op.format)) + " blocks hold finite values only");
    }
  }
  CpuTensor& y = ctx.alloc(op.out);
  uint8_t* out = y.data<uint8_t>();
  parallel_chunks(blocks, std::max<int64_t>(1, kElementwiseGrain / kQuantBlock),
                  [&](int64_t, int64_t begin, int64_t end) {
                    for (int64_t b = begin; b < end; ++b) {
                      if (op.format == BlockFormat::kQ8_0) {
                        pack_q8_0(in + b * kQuantBlock, out + b * bb);
                      } else {
                        pack_q4_0(in + b * kQuantBlock, out + b * bb);
                      }
                    }
                  });
  return Status::OK();
}

Status run(const ir::UnpackBlocks& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("unpack_blocks", ctx.meta(op.out), kF32));
  const CpuTensor x = contiguous(ctx.in(op.x));
  const int64_t bb = block_bytes(op.format), blocks = x.numel() / bb;
  const uint8_t* in = x.data<uint8_t>();
  CpuTensor& y = ctx.alloc(op.out);
  float* out = y.data<float>();
  parallel_chunks(blocks, std::max<int64_t>(1, kElementwiseGrain / kQuantBlock),
                  [&](int64_t, int64_t begin, int64_t end) {
                    for (int64_t b = begin; b < end; ++b)
                      unpack_block(op.format, in + b * bb, out + b * kQuantBlock);
                  });
  return Status::OK();
}

Status run(const ir::LinearBlocks& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("linear_blocks", ctx.meta(op.out), kF32));
  const CpuTensor x = contiguous(ctx.in(op.x));
  const CpuTensor w = contiguous(ctx.in(op.w));
  CpuTensor bias;
  if (ctx.has(op.bias)) bias = contiguous(ctx.in(op.bias));
  const float* b = ctx.has(op.bias) ? bias.data<float>() : nullptr;
  const int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0], row_bytes = w.shape[1];
  CpuTensor& y = ctx.alloc(op.out);
  float* out = y.data<float>();
  if (n == 0 || m == 0) return Status::OK();
  // Outputs split in chunks of about 64K multiply-adds per row of x; each output element is one
  // thread's, summed in one order.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(k, 1));
  parallel_chunks(m, grain, [&](int64_t, int64_t m0, int64_t m1) {
    for (int64_t r0 = 0; r0 < n; r0 += kRowGroup) {
      const int64_t rows = std::min(kRowGroup, n - r0);
      if (op.format == BlockFormat::kQ8_0) {
        linear_blocks_rows<BlockFormat::kQ8_0>(x.data<float>(), k, w.data<uint8_t>(), row_bytes, b,
                                               m, r0, rows, m0, m1, out);
      } else {
        linear_blocks_rows<BlockFormat::kQ4_0>(x.data<float>(), k, w.data<uint8_t>(), row_bytes, b,
                                               m, r0, rows, m0, m1, out);
      }
    }
  });
  return Status::OK();
}

Status run(const ir::LinearInt8& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("linear_int8", ctx.meta(op.out), kF32));
  const CpuTensor x = contiguous(ctx.in(op.x));
  const CpuTensor w = contiguous(ctx.in(op.w));
  const CpuTensor ws = contiguous(ctx.in(op.w_scale));
  CpuTensor bias;
  if (ctx.has(op.bias)) bias = contiguous(ctx.in(op.bias));
  const int64_t n = x.shape[0], k = x.shape[1], m = w.shape[0];
  CpuTensor& y = ctx.alloc(op.out);
  float* out = y.data<float>();
  if (n == 0 || m == 0) return Status::OK();
  const float* bp = ctx.has(op.bias) ? bias.data<float>() : nullptr;
  if (k == 0) {
    for (int64_t i = 0; i < n * m; ++i) out[i] = bp ? bp[i % m] : 0.0f;
    return Status::OK();
  }
  const ActQuant aq = act_params(x.data<float>(), x.numel());
  CpuTensor xq = alloc_tensor({x.shape, kU8});
  quantize_acts(x.data<float>(), x.numel(), aq, xq.data<uint8_t>());
  CpuTensor scales = alloc_tensor({{m}, kF32});
  for (int64_t j = 0; j < m; ++j) scales.data<float>()[j] = aq.scale * ws.data<float>()[j];
  const DnnlThreadsFor dnnl_threads(n * k * m);
  const std::vector<int64_t> key = {dnnl_threads.threads(), n, k, m};
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  auto made = int8_cache().get(key, "linear_int8", [&] {
    Int8Primitive p;
    p.x_md = dnnl::memory::desc(dims{n, k}, dt::u8, dims{k, 1});
    p.w_md = dnnl::memory::desc(dims{k, m}, dt::s8, dims{1, k});  // w^T, read from w [m, k]
    p.y_md = dnnl::memory::desc(dims{n, m}, dt::f32, dims{m, 1});
    p.scale_md = dnnl::memory::desc(dims{m}, dt::f32, dims{1});
    p.zp_md = dnnl::memory::desc(dims{1}, dt::s32, dims{1});
    dnnl::primitive_attr attr = dnnl_attr();
    attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::matmul::desc d(p.x_md, p.w_md, p.y_md);
    dnnl::matmul::primitive_desc pd(d, attr, dnnl_engine());
    p.scratchpad = pd.scratchpad_desc();
    p.prim = dnnl::matmul(pd);
    return p;
  });
  TW_RETURN_NOT_OK(made.status());
  const Int8Primitive& p = **made;
  int32_t zp = aq.zero_point;
  try {
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(p.x_md, dnnl_engine(), xq.data<uint8_t>())},
        {DNNL_ARG_WEIGHTS, dnnl::memory(p.w_md, dnnl_engine(), w.data<int8_t>())},
        {DNNL_ARG_DST, dnnl::memory(p.y_md, dnnl_engine(), out)},
        {DNNL_ARG_ATTR_OUTPUT_SCALES,
         dnnl::memory(p.scale_md, dnnl_engine(), scales.data<float>())},
        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, dnnl::memory(p.zp_md, dnnl_engine(), &zp)}};
    TW_RETURN_NOT_OK(dnnl_run("linear_int8", p.prim, p.scratchpad, std::move(args)));
  } catch (const std::exception& e) {
    return dnnl_status("linear_int8", e);
  }
  if (bp) {
    parallel_chunks(n, std::max<int64_t>(1, kElementwiseGrain / m),
                    [&](int64_t, int64_t r0, int64_t r1) {
                      for (int64_t r = r0; r < r1; ++r)
                        for (int64_t j = 0; j < m; ++j) out[r * m + j] += bp[j];
                    });
  }
  return Status::OK();
}

}  // namespace tw::cpu
