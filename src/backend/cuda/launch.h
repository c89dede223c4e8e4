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
  int32_t grid = 1, block = 256;
};
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
enum RowsOp : int32_t { kSoftmax, kLogSoftmax, kLayerNorm };
struct RowsArgs {
  int32_t op = kSoftmax;
  int64_t rows = 0, len = 0, inner = 1;
  const void* x = nullptr;
  const void* w = nullptr;  // layer_norm's weight and bias (null: absent), contiguous [len]
  const void* b = nullptr;
  void* out = nullptr;
  int32_t dtype = 0;  // of x, w, b and out (f32, f16 or bf16)
  float eps = 0;
  int32_t grid = 1, block = 256;
};
int launch_rows(const RowsArgs& a, void* stream);

// Linear's bias and relu after a GEMM that could not take them as an epilogue, and cuBLASLt's
// own epilogue otherwise (matmul.cc); nothing else of the matmul path runs as a kernel here.

}  // namespace tw::cuda
