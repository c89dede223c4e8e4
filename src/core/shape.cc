#include "core/shape.h"

#include <string>

namespace tw {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i] > 0 ? shape[i] : 1;
  }
  return s;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string meta_str(const TensorMeta& m) {
  return std::string(dtype_name(m.dtype)) + shape_str(m.shape);
}

Status validate_shape(const Shape& shape) {
  if (static_cast<int64_t>(shape.size()) > kMaxRank) {
    return invalid_argument("rank " + std::to_string(shape.size()) + " exceeds the maximum of " +
                            std::to_string(kMaxRank));
  }
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return invalid_argument("negative dimension in shape " + shape_str(shape));
    if (d != 0 && n > kMaxNumel / d) {
      return invalid_argument("shape " + shape_str(shape) + " has more than 2^48 elements");
    }
    n *= d;
  }
  return Status::OK();
}

Result<int64_t> normalize_dim(int64_t dim, int64_t rank, const char* op) {
  int64_t r = rank == 0 ? 1 : rank;  // a 0-d tensor accepts dim 0 and -1, as in PyTorch
  if (dim < -r || dim >= r) {
    return invalid_argument(std::string(op) + ": dim " + std::to_string(dim) +
                            " out of range for a tensor of rank " + std::to_string(rank) +
                            " (expected " + std::to_string(-r) + ".." + std::to_string(r - 1) +
                            ")");
  }
  return dim < 0 ? dim + r : dim;
}

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      return invalid_argument(std::string(op) + ": shapes " + shape_str(a) + " and " +
                              shape_str(b) + " cannot be broadcast (dim " + std::to_string(i) +
                              ": " + std::to_string(da) + " vs " + std::to_string(db) + ")");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace tw
