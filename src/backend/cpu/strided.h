// Helpers for strided (non-contiguous) tensors shared by all CPU kernels.
#pragma once
#include <cstring>

#include "backend/cpu/cpu_tensor.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

// Contiguous copy of t (returns t itself, sharing storage, when it is already contiguous).
CpuTensor contiguous(const CpuTensor& t);
// Copies t's elements, in row-major order of t's shape, into dst (numel * dtype_size bytes).
void copy_to_contiguous(const CpuTensor& t, std::byte* dst);
// Whether t is a matrix stored column by column (a transposed view): row-major reads of it
// touch a new cache line per element, and copy_to_contiguous copies it in tiles instead.
bool is_transposed_matrix(const CpuTensor& t);
// Whether reading t through a contiguous copy beats reading it as it is: a transposed matrix
// large enough for the tiled copy to pay (several times over for 512x512 f32).
inline bool worth_a_tiled_copy(const CpuTensor& t) {
  constexpr int64_t kMinElements = 4096;
  return t.numel() >= kMinElements && is_transposed_matrix(t);
}

// Whether a [rows, cols] matrix with these strides is row-major or column-major with a leading
// dimension gemm kernels accept; normalises the strides of size-1 dims (MatMul, Linear).
inline bool gemm_layout(int64_t rows, int64_t cols, int64_t& rs, int64_t& cs) {
  if ((cols == 1 || cs == 1) && (rows == 1 || rs >= cols)) {
    rs = rows == 1 ? cols : rs;
    cs = 1;
    return true;
  }
  if ((rows == 1 || rs == 1) && (cols == 1 || cs >= rows)) {
    cs = cols == 1 ? rows : cs;
    rs = 1;
    return true;
  }
  return false;
}

// Strides of `t` viewed as broadcast to `shape` (leading new dims and size-1 dims get stride 0).
Strides broadcast_strides(const CpuTensor& t, const Shape& shape);

// Iterates a multi-index over `shape` in row-major order keeping up to 3 element offsets in
// step, e.g. the two inputs and the output of a binary op. Used by the generic strided paths.
template <int N>
struct StridedIter {
  const Shape& shape;
  Strides strides[N];
  int64_t idx[kMaxRank] = {};
  int64_t off[N] = {};
  StridedIter(const Shape& s, std::initializer_list<Strides> st) : shape(s) {
    int i = 0;
    for (auto& x : st) strides[i++] = x;
  }
  // Advances to the next element; offsets follow.
  void next() {
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        for (int k = 0; k < N; ++k) off[k] += strides[k][d];
        return;
      }
      for (int k = 0; k < N; ++k) off[k] -= strides[k][d] * (shape[d] - 1);
      idx[d] = 0;
    }
  }
  // Positions the iterator at linear row-major element `linear`.
  void seek(int64_t linear) {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      int64_t s = shape[d] ? shape[d] : 1;
      idx[d] = linear % s;
      linear /= s;
      for (int k = 0; k < N; ++k) off[k] += idx[d] * strides[k][d];
    }
  }
};

}  // namespace tw::cpu
TW_INTERNAL_END
