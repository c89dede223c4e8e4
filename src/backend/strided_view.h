// The index arithmetic of a GPU backend's tensors, which are views (shape, strides and offset in
// elements) of a device buffer, as a CpuTensor is of host memory: contiguity, broadcasting an
// operand against an output's shape, merging dims that walk one run of memory for every operand
// (fewer dims to decompose per element), and the movement ops' views. Pure functions of
// shapes and strides, shared by the device backends (the cuda backend uses them; the vulkan
// backend's tensor.cc has the same functions in its own namespace and can switch to these), and
// checked on the host against the cpu backend's strided iteration (tests/unit/cuda).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "ir/infer.h"

namespace tw::strided {

inline std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= shape[i];
  }
  return s;
}

// Row-major dense (size-1 dims may have any stride).
inline bool is_contiguous(const Shape& shape, const std::vector<int64_t>& strides) {
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != acc) return false;
    acc *= shape[i];
  }
  return true;
}

// An operand's strides against the output's shape `out` (trailing dims aligned; a broadcast
// dim, of size 1 or missing, gets stride 0).
inline std::vector<int64_t> broadcast_strides(const Shape& shape,
                                              const std::vector<int64_t>& strides,
                                              const Shape& out) {
  std::vector<int64_t> o(out.size(), 0);
  const size_t lead = out.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) o[lead + i] = shape[i] == 1 ? 0 : strides[i];
  return o;
}

// The per-dim sizes and each operand's strides with size-1 dims dropped and adjacent dims merged
// where every operand allows (operand k's strides[k] are against `out`, as broadcast_strides
// gives them). At most `max_rank` dims result; more is refused, naming `op` and `device`.
struct Indexing {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> strides;  // per operand
};
inline Result<Indexing> merge_dims(const Shape& out,
                                   const std::vector<std::vector<int64_t>>& operands, int max_rank,
                                   const std::string& op, const std::string& device) {
  Indexing ix;
  ix.strides.resize(operands.size());
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;  // a size-1 dim adds nothing to any index
    bool merge = !ix.shape.empty();
    for (size_t k = 0; merge && k < operands.size(); ++k) {
      merge = ix.strides[k].back() == operands[k][d] * out[d];
    }
    if (merge) {
      ix.shape.back() *= out[d];
      for (size_t k = 0; k < operands.size(); ++k) ix.strides[k].back() = operands[k][d];
    } else {
      ix.shape.push_back(out[d]);
      for (size_t k = 0; k < operands.size(); ++k) ix.strides[k].push_back(operands[k][d]);
    }
  }
  if (ix.shape.size() > static_cast<size_t>(max_rank)) {
    return unimplemented(op + ": a view of " + std::to_string(ix.shape.size()) +
                         " dims that cannot be merged is not supported by the " + device +
                         " backend (at most " + std::to_string(max_rank) +
                         "); make the input contiguous first");
  }
  return ix;
}

// The element offset (from the view's own offset) of the i-th element in row-major order of
// `ix`'s shape, for operand k: what a kernel computes per element.
inline int64_t element_offset(const Indexing& ix, size_t k, int64_t i) {
  int64_t off = 0;
  for (size_t d = ix.shape.size(); d-- > 0;) {
    off += (i % ix.shape[d]) * ix.strides[k][d];
    i /= ix.shape[d];
  }
  return off;
}

// ---- the movement ops' views, for any tensor type V with shape, strides (elements) and offset:
// no data moves; kernels read the view through its strides ----
template <class V>
V permute_view(const V& x, const std::vector<int64_t>& dims) {
  V v = x;
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = dims[i] < 0 ? dims[i] + rank : dims[i];
    v.shape[i] = x.shape[d];
    v.strides[i] = x.strides[d];
  }
  return v;
}
template <class V>
V expand_view(const V& x, const Shape& out) {
  V v = x;
  v.shape = out;
  v.strides = broadcast_strides(x.shape, x.strides, out);
  return v;
}
// A contiguous x under another shape of the same size (a reshape that is a view).
template <class V>
V reshape_view(const V& x, const Shape& out) {
  V v = x;
  v.shape = out;
  v.strides = contiguous_strides(out);
  return v;
}
template <class V>
Result<V> slice_view(const V& x, const std::vector<int64_t>& starts,
                     const std::vector<int64_t>& ends, const std::vector<int64_t>& steps) {
  V v = x;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    TW_ASSIGN_OR_RETURN(ir::SliceDim b,
                        ir::normalize_slice(starts[d], ends[d], steps[d], x.shape[d]));
    v.shape[d] = b.size;
    v.offset += b.start * x.strides[d];
    v.strides[d] = x.strides[d] * steps[d];
  }
  if (numel(v.shape) == 0) v.offset = x.offset;
  return v;
}

}  // namespace tw::strided
