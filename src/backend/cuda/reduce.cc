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

namespace tw::cuda {

// dx from the row kernel (f32 statistics, as layer_norm's), which also leaves g * xhat per
// element in an f32 scratch; dweight and dbias are the reduce kernel's sums over rows of that
// scratch and of g (a fixed tree per column: deterministic, no atomics).
Result<std::vector<CuTensor>> Kernels::run(const ir::LayerNormBackward& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* g0, in(op.grad));
  TW_ASSIGN_OR_RETURN(const CuTensor* x0, in(op.x));
  TW_RETURN_NOT_OK(rows_dtype(x0->dtype, "layer_norm_backward", device_));
  if (g0->dtype != x0->dtype) {
    return unsupported_dtype("layer_norm_backward", g0->dtype, device_,
                             "the gradient must have the input's dtype here");
  }
  CuTensor kx, kg, kw;
  TW_ASSIGN_OR_RETURN(const CuTensor* x, dense(*x0, kx));
  TW_ASSIGN_OR_RETURN(const CuTensor* g, dense(*g0, kg));
  RowsArgs a;
  if (op.weight.id != 0) {
    TW_ASSIGN_OR_RETURN(const CuTensor* w0, in(op.weight));
    if (w0->dtype != x->dtype) {
      return unsupported_dtype("layer_norm_backward", w0->dtype, device_,
                               "the weight must have the input's dtype here");
    }
    TW_ASSIGN_OR_RETURN(const CuTensor* w, dense(*w0, kw));
    a.w = w->data();
  }
  const std::vector<TensorMeta>& m = *metas_;
  int64_t len = 1;
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  for (int64_t d = rank - op.normalized_dims; d < rank; ++d) len *= x->shape[d];
  const int64_t nrows = len == 0 ? 0 : x->numel() / len;
  TW_ASSIGN_OR_RETURN(CuTensor dx, fresh(m[0]));
  TW_ASSIGN_OR_RETURN(CuTensor aux, fresh(TensorMeta{Shape{nrows, len}, kF32}));
  std::vector<CuTensor> outs;
  if (nrows > 0 && len > 0) {
    a.op = kLayerNormBackward;
    a.len = len;
    a.rows = nrows;
    a.inner = 1;
    a.eps = static_cast<float>(op.eps);
    a.dtype = static_cast<int32_t>(x->dtype);
    a.x = x->data();
    a.g = g->data();
    a.out = dx.storage->ptr;
    a.aux = static_cast<float*>(aux.storage->ptr);
    a.grid = static_cast<int32_t>(std::clamp<int64_t>(a.rows, 1, kMaxBlocks));
    TW_RETURN_NOT_OK(launched(launch_rows(a, ex_->stream->s), "layer_norm_backward"));
  }
  outs.push_back(std::move(dx));
  // dweight and dbias: [rows, len] summed over rows, into the outputs' dtype.
  for (size_t k = 1; k < 3; ++k) {
    View v;
    v.shape = Shape{nrows, len};
    v.strides = strided::contiguous_strides(v.shape);
    v.dtype = k == 1 ? kF32 : g->dtype;
    TW_ASSIGN_OR_RETURN(ReduceArgs r, reduce_args(v, {0}, "layer_norm_backward", device_));
    TW_ASSIGN_OR_RETURN(CuTensor o, fresh(m[k]));
    if (r.n_out > 0) {
      r.kind = static_cast<int32_t>(ir::ReduceKind::kSum);
      r.cls = kClsF32;
      r.in = k == 1 ? aux.data() : g->data();
      r.out = o.storage->ptr;
      r.out_dtype = static_cast<int32_t>(m[k].dtype);
      TW_RETURN_NOT_OK(launched(launch_reduce(r, ex_->stream->s), "layer_norm_backward"));
    }
    outs.push_back(std::move(o));
  }
  return outs;
}

}  // namespace tw::cuda
