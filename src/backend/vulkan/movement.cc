// Movement ops as views of the input's buffer (shape, strides, offset), as the CPU backend makes
// them: no device work; kernels read the views through their strides. A reshape that no view
// can express copies (an elementwise bit copy) first.
#include "backend/vulkan/kernels.h"
#include "ir/infer.h"

namespace tw::vk {
namespace {
int64_t norm_dim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }
}  // namespace

Result<VkTensor> Kernels::run(const ir::Reshape& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  VkTensor v;
  if (x->contiguous()) {
    v = *x;
  } else {
    TW_ASSIGN_OR_RETURN(v, contiguous(*x));
  }
  v.shape = out_meta().shape;
  v.strides = contiguous_strides(v.shape);
  return v;
}

Result<VkTensor> Kernels::run(const ir::Permute& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  VkTensor v = *x;
  for (size_t i = 0; i < op.dims.size(); ++i) {
    const int64_t d = norm_dim(op.dims[i], x->shape.size());
    v.shape[i] = x->shape[d];
    v.strides[i] = x->strides[d];
  }
  return v;
}

Result<VkTensor> Kernels::run(const ir::Expand& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  VkTensor v = *x;
  v.shape = out_meta().shape;
  v.strides = broadcast_operand(*x, v.shape).strides;
  return v;
}

Result<VkTensor> Kernels::run(const ir::Slice& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  VkTensor v = *x;
  for (size_t d = 0; d < x->shape.size(); ++d) {
    TW_ASSIGN_OR_RETURN(ir::SliceDim b,
                        ir::normalize_slice(op.starts[d], op.ends[d], op.steps[d], x->shape[d]));
    v.shape[d] = b.size;
    v.offset += b.start * x->strides[d];
    v.strides[d] = x->strides[d] * op.steps[d];
  }
  if (v.numel() == 0) v.offset = x->offset;
  return v;
}

}  // namespace tw::vk
