#include "backend/vulkan/tensor.h"

namespace tw::vk {

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

bool VkTensor::contiguous() const {
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != acc) return false;
    acc *= shape[i];
  }
  return true;
}

Operand broadcast_operand(const VkTensor& t, const Shape& out) {
  Operand o{&t, std::vector<int64_t>(out.size(), 0)};
  const size_t lead = out.size() - t.shape.size();
  for (size_t i = 0; i < t.shape.size(); ++i) {
    o.strides[lead + i] = t.shape[i] == 1 ? 0 : t.strides[i];
  }
  return o;
}

Result<Indexing> merge_dims(const Shape& out, const std::vector<Operand>& operands,
                            const std::string& op) {
  Indexing ix;
  ix.strides.resize(operands.size());
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;  // a size-1 dim adds nothing to any index
    bool merge = !ix.shape.empty();
    for (size_t k = 0; merge && k < operands.size(); ++k) {
      // The previous kept dim and this one walk one run of memory for operand k.
      merge = ix.strides[k].back() == operands[k].strides[d] * out[d];
    }
    if (merge) {
      ix.shape.back() *= out[d];
      for (size_t k = 0; k < operands.size(); ++k) ix.strides[k].back() = operands[k].strides[d];
    } else {
      ix.shape.push_back(out[d]);
      for (size_t k = 0; k < operands.size(); ++k) ix.strides[k].push_back(operands[k].strides[d]);
    }
  }
  if (ix.shape.size() > static_cast<size_t>(kMaxRank)) {
    return unimplemented(op + ": a view of " + std::to_string(ix.shape.size()) +
                         " dims that cannot be merged is not supported by the vulkan backend "
                         "(at most " +
                         std::to_string(kMaxRank) + "); make the input contiguous first");
  }
  return ix;
}

}  // namespace tw::vk
