// ScaledDotProductAttention and its backward in f32 (launch.h, AttnArgs): fused kernels of this
// backend's own, without the [Tq, Tk] scores. Deterministic: every sum runs in a fixed order
// (block reductions of a fixed shape, keys or queries in tiles in order), no atomics.
//
// Semantics as the cpu backend's (docs/ops.md): a pair not attended (mask false, or key after
// query when causal) has probability 0 and no score gradient; a row attending nothing gives
// zeros; a NaN or +inf score, or only -inf ones, among the attended gives a NaN row.
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "backend/cuda/launch.h"

namespace tw::cuda {
namespace {

constexpr int kBlock = 128;
using BR = cub::BlockReduce<float, kBlock>;

struct MaxOp {  // NaN wins
  __device__ float operator()(float a, float b) const { return (a > b || a != a) ? a : b; }
};
struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// The mask's offset of batch-head bh (its strides over the scores' batch dims).
__device__ int64_t mask_base(const AttnArgs& a, int64_t bh) {
  int64_t off = 0, rem = bh;
  for (int d = a.batch_rank - 1; d >= 0; --d) {
    off += (rem % a.batch_shape[d]) * a.batch_stride[d];
    rem /= a.batch_shape[d];
  }
  return off;
}

__device__ bool attended(const AttnArgs& a, int64_t base, int64_t i, int64_t j) {
  if (a.causal && j > i) return false;
  return !a.mask || a.mask[base + i * a.mask_si + j * a.mask_sj] != 0;
}

__device__ float dot(const float* x, const float* y, int64_t n) {
  float s = 0;
  for (int64_t c = 0; c < n; ++c) s = fmaf(x[c], y[c], s);
  return s;
}

// One query row per block (grid-stride). Shared: the q row [d], the output accumulator [dv],
// the tile's probabilities [kBlock].
__global__ void __launch_bounds__(kBlock) attention_kernel(AttnArgs a) {
  extern __shared__ float sm[];
  float* qs = sm;
  float* acc = qs + a.d;
  float* ps = acc + a.dv;
  __shared__ typename BR::TempStorage tmp;
  __shared__ float s_val;
  __shared__ int s_any;
  const float inf = __int_as_float(0x7f800000);
  for (int64_t row = blockIdx.x; row < a.bh * a.tq; row += gridDim.x) {
    const int64_t bh = row / a.tq, i = row % a.tq;
    const float* q = a.q + row * a.d;
    const float* k = a.k + bh * a.tk * a.d;
    const float* v = a.v + bh * a.tk * a.dv;
    const int64_t mb = a.mask ? mask_base(a, bh) : 0;
    for (int64_t c = threadIdx.x; c < a.d; c += kBlock) qs[c] = q[c];
    for (int64_t c = threadIdx.x; c < a.dv; c += kBlock) acc[c] = 0;
    if (threadIdx.x == 0) s_any = 0;
    __syncthreads();
    float m = -inf, l = 0;
    bool nan_row = false;
    for (int64_t j0 = 0; j0 < a.tk; j0 += kBlock) {
      const int64_t j = j0 + threadIdx.x;
      const bool key = j < a.tk;
      const bool att = key && attended(a, mb, i, j);
      const float s = att ? a.scale * dot(qs, k + j * a.d, a.d) : -inf;
      if (att) s_any = 1;  // (a benign race: every writer writes 1)
      const float mx = BR(tmp).Reduce(s, MaxOp{});
      if (threadIdx.x == 0) s_val = mx;
      __syncthreads();
      const float tile_max = s_val;
      __syncthreads();
      if (!(tile_max < inf)) nan_row = true;
      float p = 0, corr = 1;
      const bool finite = tile_max > -inf && tile_max < inf;
      float m_new = m;
      if (finite) {
        m_new = fmaxf(m, tile_max);
        corr = m == -inf ? 0.f : expf(m - m_new);
        p = att ? expf(s - m_new) : 0.f;
      }
      ps[threadIdx.x] = p;
      const float sum = BR(tmp).Reduce(p, SumOp{});
      if (threadIdx.x == 0) s_val = sum;
      __syncthreads();
      if (finite) {
        l = l * corr + s_val;
        m = m_new;
      }
      // Every key of the tile, attended or not (p = 0), in order.
      const int64_t cols = a.tk - j0 < kBlock ? a.tk - j0 : kBlock;
      for (int64_t c = threadIdx.x; c < a.dv; c += kBlock) {
        float o = finite ? acc[c] * corr : acc[c];
        for (int64_t t = 0; t < cols; ++t) o = fmaf(ps[t], v[(j0 + t) * a.dv + c], o);
        acc[c] = o;
      }
      __syncthreads();
    }
    const bool any = s_any != 0;
    if (nan_row) l = __int_as_float(0x7fc00000);
    float* out = a.out + row * a.dv;
    for (int64_t c = threadIdx.x; c < a.dv; c += kBlock) {
      out[c] = l > 0 ? acc[c] * (1.f / l) : (any ? __int_as_float(0x7fc00000) : 0.f);
    }
    __syncthreads();
  }
}

// P_ij from row i's statistics: linv 0 (nothing attended): 0; linv NaN (a NaN row): NaN for
// every key; else exp(s - m) / sum for an attended pair, 0 for another.
__device__ float prob(float s, bool att, float m, float linv) {
  if (linv == 0.f) return 0.f;
  if (linv != linv) return linv;
  return att ? expf(s - m) * linv : 0.f;
}

// Backward, part 1: one query row per block. Its softmax statistics (two passes over the keys:
// max, then sum), delta = sum_j P_ij (g_i . v_j), and dq_i = sum_j dS_ij k_j with dS_ij =
// P_ij (dP_ij - delta) scale for an attended pair (0 for another). Shared: q row [d], g row [dv],
// dq accumulator [d], the tile's dS [kBlock].
__global__ void __launch_bounds__(kBlock) attention_rows_kernel(AttnArgs a) {
  extern __shared__ float sm[];
  float* qs = sm;
  float* gs = qs + a.d;
  float* dqs = gs + a.dv;
  float* ds = dqs + a.d;
  __shared__ typename BR::TempStorage tmp;
  __shared__ float s_val;
  __shared__ int s_any;
  const float inf = __int_as_float(0x7f800000);
  const float nan = __int_as_float(0x7fc00000);
  const int64_t rows = a.bh * a.tq;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t bh = row / a.tq, i = row % a.tq;
    const float* k = a.k + bh * a.tk * a.d;
    const float* v = a.v + bh * a.tk * a.dv;
    const int64_t mb = a.mask ? mask_base(a, bh) : 0;
    for (int64_t c = threadIdx.x; c < a.d; c += kBlock) {
      qs[c] = a.q[row * a.d + c];
      dqs[c] = 0;
    }
    for (int64_t c = threadIdx.x; c < a.dv; c += kBlock) gs[c] = a.g[row * a.dv + c];
    if (threadIdx.x == 0) s_any = 0;
    __syncthreads();
    // Pass 1: the row's max over attended scores (NaN wins).
    float m = -inf;
    for (int64_t j0 = 0; j0 < a.tk; j0 += kBlock) {
      const int64_t j = j0 + threadIdx.x;
      const bool att = j < a.tk && attended(a, mb, i, j);
      if (att) s_any = 1;
      const float s = att ? a.scale * dot(qs, k + j * a.d, a.d) : -inf;
      const float mx = BR(tmp).Reduce(s, MaxOp{});
      if (threadIdx.x == 0) s_val = MaxOp{}(m, mx);
      __syncthreads();
      m = s_val;
      __syncthreads();
    }
    const bool any = s_any != 0;
    float linv;
    if (!(m > -inf && m < inf)) {
      linv = any ? nan : 0.f;
    } else {
      float l = 0;
      for (int64_t j0 = 0; j0 < a.tk; j0 += kBlock) {
        const int64_t j = j0 + threadIdx.x;
        const bool att = j < a.tk && attended(a, mb, i, j);
        const float p = att ? expf(a.scale * dot(qs, k + j * a.d, a.d) - m) : 0.f;
        const float sum = BR(tmp).Reduce(p, SumOp{});
        if (threadIdx.x == 0) s_val = l + sum;
        __syncthreads();
        l = s_val;
        __syncthreads();
      }
      linv = 1.f / l;
    }
    // Pass 2: delta over every key.
    float delta = 0;
    for (int64_t j0 = 0; j0 < a.tk; j0 += kBlock) {
      const int64_t j = j0 + threadIdx.x;
      float t = 0;
      if (j < a.tk) {
        const bool att = attended(a, mb, i, j);
        const float s = att ? a.scale * dot(qs, k + j * a.d, a.d) : -inf;
        t = prob(s, att, m, linv) * dot(gs, v + j * a.dv, a.dv);
      }
      const float sum = BR(tmp).Reduce(t, SumOp{});
      if (threadIdx.x == 0) s_val = delta + sum;
      __syncthreads();
      delta = s_val;
      __syncthreads();
    }
    // Pass 3: dq, the keys in order.
    for (int64_t j0 = 0; j0 < a.tk; j0 += kBlock) {
      const int64_t j = j0 + threadIdx.x;
      float d_s = 0;
      if (j < a.tk) {
        const bool att = attended(a, mb, i, j);
        if (att) {
          const float s = a.scale * dot(qs, k + j * a.d, a.d);
          const float p = prob(s, true, m, linv);
          d_s = p * (dot(gs, v + j * a.dv, a.dv) - delta) * a.scale;
        }
      }
      ds[threadIdx.x] = d_s;
      __syncthreads();
      const int64_t cols = a.tk - j0 < kBlock ? a.tk - j0 : kBlock;
      for (int64_t c = threadIdx.x; c < a.d; c += kBlock) {
        float o = dqs[c];
        for (int64_t t = 0; t < cols; ++t) o = fmaf(ds[t], k[(j0 + t) * a.d + c], o);
        dqs[c] = o;
      }
      __syncthreads();
    }
    for (int64_t c = threadIdx.x; c < a.d; c += kBlock) a.dq[row * a.d + c] = dqs[c];
    if (threadIdx.x == 0) {
      a.stats[row] = m;
      a.stats[rows + row] = linv;
      a.stats[2 * rows + row] = delta;
    }
    __syncthreads();
  }
}

// Backward, part 2: one key row per block: dv_j = sum_i P_ij g_i and dk_j = sum_i dS_ij q_i,
// the queries in tiles in order. Shared: k row [d], v row [dv], dk [d], dv [dv], the tile's P
// and dS [kBlock] each.
__global__ void __launch_bounds__(kBlock) attention_cols_kernel(AttnArgs a) {
  extern __shared__ float sm[];
  float* ks = sm;
  float* vs = ks + a.d;
  float* dks = vs + a.dv;
  float* dvs = dks + a.d;
  float* ps = dvs + a.dv;
  float* ds = ps + kBlock;
  const int64_t rows = a.bh * a.tq;
  for (int64_t col = blockIdx.x; col < a.bh * a.tk; col += gridDim.x) {
    const int64_t bh = col / a.tk, j = col % a.tk;
    const float* q = a.q + bh * a.tq * a.d;
    const float* g = a.g + bh * a.tq * a.dv;
    const float* st = a.stats + bh * a.tq;
    const int64_t mb = a.mask ? mask_base(a, bh) : 0;
    for (int64_t c = threadIdx.x; c < a.d; c += kBlock) {
      ks[c] = a.k[col * a.d + c];
      dks[c] = 0;
    }
    for (int64_t c = threadIdx.x; c < a.dv; c += kBlock) {
      vs[c] = a.v[col * a.dv + c];
      dvs[c] = 0;
    }
    __syncthreads();
    for (int64_t i0 = 0; i0 < a.tq; i0 += kBlock) {
      const int64_t i = i0 + threadIdx.x;
      float p = 0, d_s = 0;
      if (i < a.tq) {
        const bool att = attended(a, mb, i, j);
        const float s = att ? a.scale * dot(q + i * a.d, ks, a.d) : 0.f;
        p = prob(s, att, st[i], st[rows + i]);
        if (att) d_s = p * (dot(g + i * a.dv, vs, a.dv) - st[2 * rows + i]) * a.scale;
      }
      ps[threadIdx.x] = p;
      ds[threadIdx.x] = d_s;
      __syncthreads();
      const int64_t n = a.tq - i0 < kBlock ? a.tq - i0 : kBlock;
      for (int64_t c = threadIdx.x; c < a.dv; c += kBlock) {
        float o = dvs[c];
        for (int64_t t = 0; t < n; ++t) o = fmaf(ps[t], g[(i0 + t) * a.dv + c], o);
        dvs[c] = o;
      }
      for (int64_t c = threadIdx.x; c < a.d; c += kBlock) {
        float o = dks[c];
        for (int64_t t = 0; t < n; ++t) o = fmaf(ds[t], q[(i0 + t) * a.d + c], o);
        dks[c] = o;
      }
      __syncthreads();
    }
    for (int64_t c = threadIdx.x; c < a.d; c += kBlock) a.dk[col * a.d + c] = dks[c];
    for (int64_t c = threadIdx.x; c < a.dv; c += kBlock) a.dv_out[col * a.dv + c] = dvs[c];
    __syncthreads();
  }
}

int grid_for(int64_t n) { return static_cast<int>(n < 1 ? 1 : (n > 65535 * 4 ? 65535 * 4 : n)); }

}  // namespace

int launch_attention(const AttnArgs& a, void* stream) {
  const size_t smem = static_cast<size_t>(a.d + a.dv + kBlock) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  attention_kernel<<<grid_for(a.bh * a.tq), kBlock, smem, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_attention_backward(const AttnArgs& a, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const size_t smem1 = static_cast<size_t>(2 * a.d + a.dv + kBlock) * sizeof(float);
  const size_t smem2 = static_cast<size_t>(2 * a.d + 2 * a.dv + 2 * kBlock) * sizeof(float);
  if (smem1 > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(attention_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem1));
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  if (smem2 > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(attention_cols_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem2));
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  if (a.tq > 0) attention_rows_kernel<<<grid_for(a.bh * a.tq), kBlock, smem1, s>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return static_cast<int>(e);
  if (a.tk > 0) attention_cols_kernel<<<grid_for(a.bh * a.tk), kBlock, smem2, s>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace tw::cuda
