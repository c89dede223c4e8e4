// Movement ops as views of the input's buffer (shape, strides, offset), as the CPU backend makes
// them (backend/strided_view.h, shared with the cuda backend): no device work; kernels read the
// views through their strides. A reshape that no view can express copies (a bit copy) first.
#include "backend/vulkan/kernels.h"
#include "ir/infer.h"

namespace tw::vk {

Result<VkTensor> Kernels::run(const ir::Reshape& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  if (x->contiguous()) return strided::reshape_view(*x, out_meta().shape);
  TW_ASSIGN_OR_RETURN(VkTensor v, contiguous(*x));
  return strided::reshape_view(v, out_meta().shape);
}

Result<VkTensor> Kernels::run(const ir::Permute& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  return strided::permute_view(*x, op.dims);
}

Result<VkTensor> Kernels::run(const ir::Expand& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  return strided::expand_view(*x, out_meta().shape);
}

Result<VkTensor> Kernels::run(const ir::Slice& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  return strided::slice_view(*x, op.starts, op.ends, op.steps);
}

}  // namespace tw::vk
