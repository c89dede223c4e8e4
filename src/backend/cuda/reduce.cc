// Reduce (sum, mean, prod, max, min, argmax, argmin: a block per output, cub::BlockReduce in
// kernels.cu) and the row ops (softmax, log_softmax, layer_norm: a block per row). Both reduce in
// a fixed order, so results are identical run to run.
#include <algorithm>

#include "backend/cuda/kernels.h"

namespace tw::cuda {

Result<CuTensor> Kernels::run(const ir::Reduce& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  const std::string name = std::string("reduce ") + ir::kind_name(op.kind);
  TW_ASSIGN_OR_RETURN(ReduceArgs a, reduce_args(*x, op.dims, name, device_));
  const TensorMeta& m = out_meta();
  a.kind = static_cast<int32_t>(op.kind);
  // An integral mean accumulates in double, as the cpu backend's; other kinds in x's class.
  a.cls = op.kind == ir::ReduceKind::kMean && !is_float(x->dtype) ? kClsF64 : cls_of(x->dtype);
  a.in = x->data();
  a.out_dtype = static_cast<int32_t>(m.dtype);
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(m));
  if (a.n_out == 0) return out;
  a.out = out.storage->ptr;
  TW_RETURN_NOT_OK(launched(launch_reduce(a, ex_->stream->s), name));
  return out;
}

namespace {
// f32 compute for every float dtype but f64 (the row kernels keep their statistics in f32).
Status rows_dtype(DType d, const std::string& op, const std::string& device) {
  if (d == kF32 || d == kF16 || d == kBF16) return Status::OK();
  return unsupported_dtype(op, d, device,
                           "the row kernels compute in f32 (f16 and bf16 as "
                           "storage)");
}
}  // namespace

Result<CuTensor> Kernels::rows(RowsArgs a, const CuTensor& x, const std::string& op) {
  a.dtype = static_cast<int32_t>(x.dtype);
  a.x = x.data();
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  a.out = out.storage->ptr;
  a.grid = static_cast<int32_t>(std::clamp<int64_t>(a.rows, 1, kMaxBlocks));
  TW_RETURN_NOT_OK(launched(launch_rows(a, ex_->stream->s), op));
  return out;
}

Result<CuTensor> Kernels::run(const ir::Softmax& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x0, in(op.x));
  const std::string name = op.log ? "log_softmax" : "softmax";
  TW_RETURN_NOT_OK(rows_dtype(x0->dtype, name, device_));
  CuTensor keep;
  TW_ASSIGN_OR_RETURN(const CuTensor* x, dense(*x0, keep));
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  const int64_t dim = rank == 0 ? 0 : (op.dim < 0 ? op.dim + rank : op.dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x->shape[d];
  for (int64_t d = dim + 1; d < rank; ++d) inner *= x->shape[d];
  RowsArgs a;
  a.op = op.log ? kLogSoftmax : kSoftmax;
  a.rows = outer * inner;
  a.len = rank == 0 ? 1 : x->shape[dim];
  a.inner = inner;
  return rows(a, *x, name);
}

Result<CuTensor> Kernels::run(const ir::LayerNorm& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x0, in(op.x));
  TW_RETURN_NOT_OK(rows_dtype(x0->dtype, "layer_norm", device_));
  CuTensor kx, kw, kb;
  TW_ASSIGN_OR_RETURN(const CuTensor* x, dense(*x0, kx));
  RowsArgs a;
  // Weight and bias are read at [0, len): contiguous from their buffers' start.
  auto flat = [&](const ir::In& id, CuTensor& keep) -> Result<const void*> {
    if (id.id == 0) return static_cast<const void*>(nullptr);
    TW_ASSIGN_OR_RETURN(const CuTensor* t, in(id));
    if (t->dtype != x->dtype) {
      return unsupported_dtype("layer_norm", t->dtype, device_,
                               "weight and bias must have the input's dtype here");
    }
    TW_ASSIGN_OR_RETURN(const CuTensor* d, dense(*t, keep));
    return d->data();
  };
  TW_ASSIGN_OR_RETURN(a.w, flat(op.weight, kw));
  TW_ASSIGN_OR_RETURN(a.b, flat(op.bias, kb));
  int64_t len = 1;
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  for (int64_t d = rank - op.normalized_dims; d < rank; ++d) len *= x->shape[d];
  a.op = kLayerNorm;
  a.len = len;
  a.rows = len == 0 ? 0 : x->numel() / len;
  a.inner = 1;
  a.eps = static_cast<float>(op.eps);
  return rows(a, *x, "layer_norm");
}

}  // namespace tw::cuda
