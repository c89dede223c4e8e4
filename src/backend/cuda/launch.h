// What the host side of the cuda backend (the .cc files, compiled by the C++ compiler) and its
// kernels (kernels.cu, compiled by nvcc) agree on: plain argument blocks passed by value to each
// kernel, and one launcher per kernel family. No CUDA or project types here beyond the kind
// numbers: a launcher takes the stream as a void* (a cudaStream_t) and returns the launch's
// cudaError_t as an int (0: launched). Launch configurations come from plan.h.
#pragma once
#include <cstdint>

namespace tw::cuda {

inline constexpr int kMaxRank = 6;  // dims after merging (strided::merge_dims); more is refused
inline constexpr int kMaxOperands = 3;

// The elementwise families (one kernel runs all of them; the family and kind are uniform per
// launch) and the compute classes the values are computed in.
enum Family : int32_t { kEwUnary, kEwBinary, kEwWhere, kEwFill, kEwClamp, kEwMaskedFill, kEwIota };
enum Cls : int32_t { kClsF32, kClsF64, kClsI64 };
inline constexpr int32_t kCastKind = -1;  // the unary family's cast (values converted)
inline constexpr int32_t kCopyKind = -2;  // the unary family's bit copy

// A scalar attribute converted on the host (ir/convert.h's rules) for each class.
struct ScalarArg {
  float f = 0;
  double d = 0;
  int64_t i = 0;
};

struct EwArgs {
  int64_t n = 0;  // output elements (the output is contiguous)
  int32_t rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxOperands][kMaxRank] = {};
  const void* in[kMaxOperands] = {};  // each at its view's offset already
  int32_t in_dtype[kMaxOperands] = {};
  void* out = nullptr;
  int32_t out_dtype = 0;
  int32_t family = kEwUnary, kind = 0, cls = kClsF32;
  int32_t scalar = 0;  // binary: 0 two tensors; 1 b is s0; 2 a is s0
  ScalarArg s0, s1;    // fill value / scalar operand / clamp lo; clamp hi
  // Where element i is stored: at i (the output contiguous), or, when out_at is 1, at the offset
  // operand kMaxOperands - 1's strides give (a strided output view: Cat, SliceAssign).
  int32_t out_at = 0;
  int32_t grid = 1, block = 256;
};
// The iota family's kinds: arange, eye, and the random ops (Philox, core/philox.h: element i of
// the output, row-major, draws with counter i, as on the cpu backend).
enum IotaKind : int32_t { kIotaArange, kIotaEye, kIotaUniform, kIotaNormal, kIotaBernoulli };
// The gelu gradient (GeluBackward: in[0] the gradient, in[1] x) is the unary family's kind -3.
inline constexpr int32_t kGeluGradKind = -3;
int launch_elementwise(const EwArgs& a, void* stream);

// Reduce: one block per output element (kept index), a fixed tree over its reduced elements
// (cub::BlockReduce), so the result does not depend on timing: deterministic.
struct ReduceArgs {
  int64_t n_out = 0, n_red = 0;
  int32_t kept_rank = 0, red_rank = 0;
  int64_t kshape[kMaxRank] = {}, kstride[kMaxRank] = {};
  int64_t rshape[kMaxRank] = {}, rstride[kMaxRank] = {};
  const void* in = nullptr;  // at the view's offset
  int32_t in_dtype = 0;
  void* out = nullptr;
  int32_t out_dtype = 0;
  int32_t kind = 0;  // ir::ReduceKind's number
  int32_t cls = kClsF32;
  int32_t grid = 1, block = 256;
};
int launch_reduce(const ReduceArgs& a, void* stream);

// Softmax, log_softmax (a row is `len` elements `inner` apart) and layer_norm (contiguous rows),
// f32 compute: one block per row (grid-stride over rows), fixed-order block reductions.
// LayerNormBackward (kLayerNormBackward): g the gradient, w the weight (or null), out dx, and
// aux (f32, [rows, len]) g * xhat per element, which the reduce kernel then sums over rows for
// dweight (db: g summed the same way).
enum RowsOp : int32_t { kSoftmax, kLogSoftmax, kLayerNorm, kLayerNormBackward };
struct RowsArgs {
  int32_t op = kSoftmax;
  int64_t rows = 0, len = 0, inner = 1;
  const void* x = nullptr;
  const void* w = nullptr;  // layer_norm's weight and bias (null: absent), contiguous [len]
  const void* b = nullptr;
  void* out = nullptr;
  const void* g = nullptr;  // layer_norm_backward
  float* aux = nullptr;
  int32_t dtype = 0;  // of x, w, b, g and out (f32, f16 or bf16)
  float eps = 0;
  int32_t grid = 1, block = 256;
};
int launch_rows(const RowsArgs& a, void* stream);

// Gather, IndexSelect, OneHot, ScatterAdd, IndexSelectBackward (index_math.h): one thread per
// output element of a contiguous output. Index values are checked on the device: a bad one is
// written to `bad` (host memory mapped for the device) with the launch's sequence number, and
// the backend fails the next sync or read with it (cuda_backend.cc).
inline constexpr int kMaxIxRank = 8;
enum IxMode : int32_t { kIxGather, kIxOneHot, kIxScatter };
struct IxArgs {
  int32_t mode = kIxGather;
  int64_t n = 0;  // output elements
  int32_t rank = 0;
  int64_t shape[kMaxIxRank] = {};  // the output's
  // x's, the index's and src's strides over the output's coordinates (0 along `dim` where the
  // dim's position comes from an index value or a loop).
  int64_t xs[kMaxIxRank] = {}, is[kMaxIxRank] = {}, ss[kMaxIxRank] = {};
  int32_t dim = 0;
  int64_t size = 1;          // valid index values: [-size, size) ([0, size) for one_hot)
  int64_t x_dim_stride = 0;  // gather: x's stride along dim
  // scatter: the positions along dim added into each output element, in order, and the index
  // shape (coordinates beyond it, outside dim, receive nothing)
  int64_t len = 0, i_dim_stride = 0, s_dim_stride = 0;
  int64_t ishape[kMaxIxRank] = {};
  const void* x = nullptr;  // scatter: null adds into zeros
  const void* index = nullptr;
  const void* src = nullptr;
  void* out = nullptr;
  int32_t x_dtype = 0, index_dtype = 0, out_dtype = 0;
  int64_t* bad = nullptr;  // [value, sequence number]
  int64_t seq = 0;
  int32_t grid = 1, block = 256;
};
int launch_index(const IxArgs& a, void* stream);

// Cumsum over contiguous x ([outer, len, inner]): one thread per line (outer * inner lines),
// in the cpu backend's order: floats accumulate in f64, integers in 64-bit wrapping; lines of
// inner 1 and len >= 2 * kScanBlock sum blocks of kScanBlock first, as the cpu backend does.
inline constexpr int64_t kScanBlock = int64_t{1} << 15;
struct ScanArgs {
  int64_t outer = 0, len = 0, inner = 1;
  const void* x = nullptr;
  void* out = nullptr;
  int32_t x_dtype = 0, out_dtype = 0;
  int32_t grid = 1, block = 256;
};
int launch_scan(const ScanArgs& a, void* stream);

// AdamStep over contiguous operands (f32 or f64): the cpu backend's operations in its order,
// each rounded (no contraction into FMAs), so the bits are the cpu backend's.
struct AdamArgs {
  int64_t n = 0;
  int32_t dtype = 0;
  const void *p = nullptr, *g = nullptr, *m = nullptr, *v = nullptr;
  const void *step_size = nullptr, *bias2_sqrt = nullptr;  // one element each, on the device
  void *p_out = nullptr, *m_out = nullptr, *v_out = nullptr;
  // 1 - beta1, beta2, 1 - beta2, eps, weight decay, 1 - lr * weight decay, in the dtype
  ScalarArg one_minus_beta1, beta2, one_minus_beta2, eps, decay, shrink;
  int32_t coupled = 0, decoupled = 0;
  int32_t grid = 1, block = 256;
};
int launch_adam(const AdamArgs& a, void* stream);

// AdaptiveAvgPool2d (forward: out [planes, ho, wo] from x [planes, h, w]) and its backward (out
// [planes, h, w] from grad [planes, ho, wo]), contiguous, f32 or f64: one thread per output
// element, in the cpu backend's order (index_math.h).
struct AdaptArgs {
  int64_t planes = 0, h = 0, w = 0, ho = 0, wo = 0;
  const void* in = nullptr;
  void* out = nullptr;
  int32_t dtype = 0;
  int32_t backward = 0;
  int32_t grid = 1, block = 256;
};
int launch_adaptive(const AdaptArgs& a, void* stream);

// ScaledDotProductAttention (f32 compute, f32 storage) and its backward, without the [Tq, Tk]
// scores (attention.cc): q [bh, tq, d], k [bh, tk, d], v [bh, tk, dv], g [bh, tq, dv], all
// contiguous. Forward: a block per query row, keys in tiles of the block's size, an online
// softmax (running max and sum, the accumulated output rescaled as the max grows). Backward,
// deterministic with no atomics: a block per query row finds its softmax statistics, delta =
// sum_j P_ij dP_ij and dq; then a block per key row sums dk and dv over the queries in order.
// Every pair (i, j) takes part, a masked one with P = 0 (so a NaN or inf value of v, k, q or g
// reaches the result through 0 x inf, as the cpu backend's formula over all pairs).
inline constexpr int kMaxMaskRank = 6;
struct AttnArgs {
  int64_t bh = 0, tq = 0, tk = 0, d = 0, dv = 0;
  const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr;
  float* out = nullptr;  // forward
  float *dq = nullptr, *dk = nullptr, *dv_out = nullptr;
  float* stats = nullptr;  // backward scratch: [bh * tq] x 3 (max, 1 / sum, delta)
  float scale = 1;
  int32_t causal = 0;
  // The mask (bool, broadcast to the scores [..., tq, tk]): its strides along queries and keys,
  // and over the batch dims (shape and strides of the scores' batch dims, outermost first).
  const uint8_t* mask = nullptr;
  int64_t mask_si = 0, mask_sj = 0;
  int32_t batch_rank = 0;
  int64_t batch_shape[kMaxMaskRank] = {}, batch_stride[kMaxMaskRank] = {};
  int32_t grid = 1, block = 128;
};
int launch_attention(const AttnArgs& a, void* stream);
int launch_attention_backward(const AttnArgs& a, void* stream);

// Linear's bias and relu after a GEMM that could not take them as an epilogue, and cuBLASLt's
// own epilogue otherwise (matmul.cc); nothing else of the matmul path runs as a kernel here.

}  // namespace tw::cuda
