// Shapes and strides (in elements). A Shape is a plain vector so that it reads like PyTorch's
// sizes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tensorwire/dtype.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

// Largest element count and rank a tensor may have. Bounds what a peer can make us allocate or
// iterate; 2^48 elements is far beyond any single host's memory.
inline constexpr int64_t kMaxNumel = int64_t{1} << 48;
inline constexpr int64_t kMaxRank = 16;

int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"

// Checks rank, non-negative dims and that the element count stays below kMaxNumel.
Status validate_shape(const Shape& shape);

// Maps a possibly negative dim into [0, rank); names op and rank in the error.
Result<int64_t> normalize_dim(int64_t dim, int64_t rank, const char* op);

// numpy broadcasting of two shapes.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b, const char* op);

struct TensorMeta {
  Shape shape;
  DType dtype = DType::kF32;
  bool operator==(const TensorMeta&) const = default;
};
std::string meta_str(const TensorMeta& m);  // "f32[2, 3]"

}  // namespace tw
TW_INTERNAL_END
