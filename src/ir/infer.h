// Shape and dtype inference: one function per op (infer.cc), the single source of truth for what
// an op accepts. The client calls it when the user calls the op, so mistakes fail at the call
// site; every executor (CPU backend, server) calls it again before running anything.
// Semantics of every op are specified in docs/ops.md.
#pragma once
#include <functional>
#include <vector>

#include "core/shape.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

// Looks up the meta of an existing tensor; returns kNotFound for an unknown id.
using MetaLookup = std::function<Result<TensorMeta>(TensorId)>;

// Validates `op` (attributes, input shapes and dtypes) and returns the metas of its outputs in
// the order of its Out fields. Errors name the op and the values involved, e.g.
//   "matmul: inner dimensions differ: [2, 3] x [4, 5]".
Result<std::vector<TensorMeta>> infer(const Op& op, const MetaLookup& lookup);

// Normalised slice bounds of one dim (Python semantics, see docs/ops.md): the output size and
// the first index. Shared by inference and every backend so they cannot disagree.
struct SliceDim {
  int64_t start = 0;
  int64_t size = 0;
  int64_t step = 1;
};
Result<SliceDim> normalize_slice(int64_t start, int64_t end, int64_t step, int64_t dim_size);

// The dtype Binary computes in: the promoted dtype, except that div of integral or bool operands
// computes in f32 (docs/ops.md). Comparison and logical kinds then give bool.
DType binary_compute_dtype(BinaryKind kind, DType a, DType b);
// The dtype BinaryScalar computes in (docs/ops.md, tensor-scalar rule): the tensor's, except
// that a float scalar with an integral or bool tensor computes in f32, and an integer scalar
// with a bool tensor in i64 (arithmetic and comparison kinds: `mask == 2` compares numbers, as
// in PyTorch); div of an integral dtype computes in f32.
DType binary_scalar_compute_dtype(BinaryKind kind, DType tensor, bool scalar_is_float);

// Output spatial size of a conv/pool window: floor((in + 2p - d(k-1) - 1) / s) + 1.
int64_t window_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding,
                        int64_t dilation);

}  // namespace tw::ir
TW_INTERNAL_END
