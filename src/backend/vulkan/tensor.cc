#include "backend/vulkan/tensor.h"

namespace tw::vk {

bool VkTensor::contiguous() const { return strided::is_contiguous(shape, strides); }

Operand broadcast_operand(const VkTensor& t, const Shape& out) {
  return Operand{&t, strided::broadcast_strides(t.shape, t.strides, out)};
}

Result<Indexing> merge_dims(const Shape& out, const std::vector<Operand>& operands,
                            const std::string& op) {
  std::vector<std::vector<int64_t>> strides;
  strides.reserve(operands.size());
  for (const Operand& o : operands) strides.push_back(o.strides);
  return strided::merge_dims(out, strides, kMaxRank, op, "vulkan");
}

}  // namespace tw::vk
