// A tensor of the vulkan backend: a view (shape, strides and offset in elements) of a device
// buffer, as a CpuTensor is of host memory. Movement ops (reshape, permute, expand, slice) make
// views without touching the device; kernels read any view through its strides.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/strided_view.h"
#include "backend/table_backend.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/shader_abi.h"
#include "core/shape.h"
#include "tensorwire/dtype.h"

namespace tw::vk {

struct VkTensor {
  Storage storage;  // null for an empty tensor
  Shape shape;
  std::vector<int64_t> strides;  // in elements
  int64_t offset = 0;            // in elements
  DType dtype = kF32;

  int64_t numel() const { return tw::numel(shape); }
  bool contiguous() const;
  TensorMeta meta() const { return TensorMeta{shape, dtype}; }
};

// The index arithmetic is the shared one of the device backends (backend/strided_view.h).
using strided::contiguous_strides;
using strided::Indexing;

// The shaders' view of a tensor against an output's shape (broadcast: stride 0).
struct Operand {
  const VkTensor* t = nullptr;
  std::vector<int64_t> strides;  // one per output dim
};
Operand broadcast_operand(const VkTensor& t, const Shape& out);

// The per-dim sizes and operand strides with adjacent dims merged where every operand allows,
// for kernels that index by strides (at most kMaxRank dims; more fails naming the op).
Result<Indexing> merge_dims(const Shape& out, const std::vector<Operand>& operands,
                            const std::string& op);

}  // namespace tw::vk

namespace tw {
template <>
struct TableTraits<vk::VkTensor> {
  static TensorMeta meta(const vk::VkTensor& t) { return t.meta(); }
  static uint64_t nbytes(const vk::VkTensor& t) {
    return static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
  }
  static std::pair<const void*, size_t> storage(const vk::VkTensor& t) {
    if (!t.storage) return {nullptr, 0};
    return {t.storage.get(), t.storage->size};
  }
};
}  // namespace tw
