// Movement ops as views of the input's buffer (backend/strided_view.h): no device work; kernels
// read the views through their strides. A reshape that no view can express copies first.
#include "backend/cuda/kernels.h"

namespace tw::cuda {

Result<CuTensor> Kernels::run(const ir::Reshape& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  if (x->contiguous()) return strided::reshape_view(*x, out_meta().shape);
  TW_ASSIGN_OR_RETURN(CuTensor dense, contiguous(*x));
  return strided::reshape_view(dense, out_meta().shape);
}

Result<CuTensor> Kernels::run(const ir::Permute& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  return strided::permute_view(*x, op.dims);
}

Result<CuTensor> Kernels::run(const ir::Expand& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  return strided::expand_view(*x, out_meta().shape);
}

Result<CuTensor> Kernels::run(const ir::Slice& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  return strided::slice_view(*x, op.starts, op.ends, op.steps);
}

}  // namespace tw::cuda
