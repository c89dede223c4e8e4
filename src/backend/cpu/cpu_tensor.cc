#include "backend/cpu/cpu_tensor.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#ifdef __AVX2__
#include <immintrin.h>
#endif

#include "backend/cpu/strided.h"
#include "core/thread_pool.h"

namespace tw::cpu {

bool CpuTensor::is_contiguous() const {
  int64_t expect = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

size_t layout_into(CpuTensor& t, const TensorMeta& meta) {
  t.shape.assign(meta.shape.begin(), meta.shape.end());
  t.dtype = meta.dtype;
  t.offset = 0;
  t.strides.resize(meta.shape.size());
  int64_t n = 1;
  for (size_t i = meta.shape.size(); i-- > 0;) {
    t.strides[i] = n;
    n *= meta.shape[i];
  }
  return static_cast<size_t>(n) * dtype_size(meta.dtype);
}

void alloc_into(CpuTensor& t, const TensorMeta& meta, BufferPool* pool) {
  const size_t bytes = layout_into(t, meta);
  t.buffer = pool ? pool->allocate(bytes) : Buffer::allocate(bytes);
}

CpuTensor alloc_tensor(const TensorMeta& meta, BufferPool* pool) {
  CpuTensor t;
  alloc_into(t, meta, pool);
  return t;
}

void KernelContext::add_input(ir::TensorId id, CpuTensor t) {
  owned_inputs_.push_back(std::move(t));
  add_input_ref(id, &owned_inputs_.back());
}

void KernelContext::add_output(ir::TensorId id, TensorMeta meta) {
  owned_metas_.push_back(std::move(meta));
  add_output_ref(id, &owned_metas_.back());
}

void KernelContext::reset(BufferPool* pool) {
  inputs_.clear();
  // Outputs taken were moved out; one left behind (a failed op's) gives its handle back.
  for (Output& o : outputs_) recycle(o.tensor);
  outputs_.clear();
  if (!owned_inputs_.empty()) owned_inputs_.clear();
  if (!owned_metas_.empty()) owned_metas_.clear();
  pool_ = pool;
}

void KernelContext::recycle(CpuTensor& t) {
  // A handful covers what one op allocates; beyond that the arrays are simply freed.
  constexpr size_t kMaxSpares = 16;
  if (spares_.size() >= kMaxSpares || t.shape.capacity() == 0) return;
  t.buffer = Buffer();
  spares_.push_back(std::move(t));
}

const CpuTensor& KernelContext::in(ir::In in) const {
  const CpuTensor* t = find_input(in.id);
  if (!t) throw std::out_of_range("kernel read unknown input %" + std::to_string(in.id));
  return *t;
}

KernelContext::Output& KernelContext::output(ir::TensorId id) {
  Output* o = find_output(id);
  if (!o) throw std::out_of_range("kernel wrote unknown output %" + std::to_string(id));
  return *o;
}

CpuTensor& KernelContext::alloc(ir::Out out) {
  Output& o = output(out.id);
  if (!spares_.empty() && o.tensor.shape.capacity() == 0) {
    o.tensor = std::move(spares_.back());
    spares_.pop_back();
  }
  if (o.donor) {
    layout_into(o.tensor, *o.meta);
    o.tensor.buffer = o.donor->buffer;
  } else {
    alloc_into(o.tensor, *o.meta, pool_);
  }
  o.set = true;
  return o.tensor;
}

Status KernelContext::set_view(ir::Out out, CpuTensor view) {
  Output& o = output(out.id);
  if (view.shape != o.meta->shape || view.dtype != o.meta->dtype) {
    return internal_error("kernel produced " + meta_str(view.meta()) + " but inference said " +
                          meta_str(*o.meta));
  }
  o.tensor = std::move(view);
  o.set = true;
  return Status::OK();
}

Result<CpuTensor> KernelContext::take(ir::TensorId id) {
  Output* o = find_output(id);
  if (!o || !o->set) return internal_error("kernel did not produce output %" + std::to_string(id));
  return std::move(o->tensor);
}

bool KernelContext::take_into(ir::TensorId id, CpuTensor& dst) {
  Output* o = find_output(id);
  if (!o || !o->set) return false;
  dst = std::move(o->tensor);
  return true;
}

Strides broadcast_strides(const CpuTensor& t, const Shape& shape) {
  Strides s(shape.size(), 0);
  size_t lead = shape.size() - t.shape.size();
  for (size_t i = 0; i < t.shape.size(); ++i) {
    s[lead + i] = t.shape[i] == 1 ? 0 : t.strides[i];
  }
  return s;
}

namespace {

// dst (rows x cols, row-major) = the matrix whose element (r, c) is src[r + c * col_stride]: a
// transposed matrix. Read row by row it would touch a new cache line per element, so it goes in
// square tiles through a buffer: each source line is read whole into the buffer and each
// destination line written whole from it, once (with power-of-two strides the lines of a tile
// share a few cache sets, and a line touched again later would have been evicted). Row tiles in
// parallel: a pure copy, any partition gives the same bytes.
template <class E>
void transpose_tiles(const E* src, int64_t col_stride, E* dst, int64_t rows, int64_t cols) {
  constexpr int64_t kTile = 16;
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (kTile * cols));
  parallel_chunks(row_tiles, grain, [&](int64_t, int64_t b, int64_t e) {
    E buf[kTile][kTile];
    for (int64_t rt = b; rt < e; ++rt) {
      const int64_t r0 = rt * kTile, nr = std::min(kTile, rows - r0);
      for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
        const int64_t nc = std::min(kTile, cols - c0);
        for (int64_t c = 0; c < nc; ++c) {
          const E* col = src + (c0 + c) * col_stride + r0;
          for (int64_t r = 0; r < nr; ++r) buf[r][c] = col[r];
        }
        for (int64_t r = 0; r < nr; ++r) {
          std::memcpy(dst + (r0 + r) * cols + c0, buf[r], static_cast<size_t>(nc) * sizeof(E));
        }
      }
    }
  });
}

template <class E>
void transpose_as(const CpuTensor& t, std::byte* dst) {
  transpose_tiles(reinterpret_cast<const E*>(t.bytes()), t.strides[1], reinterpret_cast<E*>(dst),
                  t.shape[0], t.shape[1]);
}

#ifdef __AVX2__
// 8x8 4-byte elements: dst row k (stride ds) = element k of the 8 source runs (stride cs). Only
// lane moves, which carry the bits unchanged (NaN payloads included).
inline void transpose_8x8(const float* src, int64_t cs, float* dst, int64_t ds) {
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * cs);
  __m256 t[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  __m256 u[8];
  for (int h = 0; h < 2; ++h) {
    const int o = 4 * h;
    u[o + 0] = _mm256_shuffle_ps(t[o], t[o + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[o + 1] = _mm256_shuffle_ps(t[o], t[o + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[o + 2] = _mm256_shuffle_ps(t[o + 1], t[o + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[o + 3] = _mm256_shuffle_ps(t[o + 1], t[o + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    _mm256_storeu_ps(dst + k * ds, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
    _mm256_storeu_ps(dst + (k + 4) * ds, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
  }
}

// The dim of t, other than the last, whose elements lie next to each other (stride 1) while the
// last dim's do not: t is then, for every index of its other dims, a matrix [that dim, last dim]
// stored column by column (a transposed matrix, a permuted batch of matrices: [b, s, d] viewed
// as [b, d, s], NCHW as NHWC). -1 when there is none.
int unit_stride_dim(const CpuTensor& t) {
  const int64_t r = t.rank();
  if (r < 2 || t.shape[r - 1] < 2 || t.strides[r - 1] == 1) return -1;
  for (int64_t d = 0; d + 1 < r; ++d) {
    if (t.strides[d] == 1 && t.shape[d] > 1) return static_cast<int>(d);
  }
  return -1;
}

// copy_to_contiguous for 4-byte elements when dim p has stride 1 (unit_stride_dim): for every
// index of the other dims, the [P, L] matrix (P = dim p, L = the last dim) in 8x8 register
// blocks, each task a block of 8 source columns (8 runs of P elements read front to back, 8
// elements written into each of P output rows). [64, 256, 1024] read as [64, 1024, 256]: 25 ms
// element by element, 4.7-5.2 ms this way (2 threads; bench row permute_copy_f32_64x256x1024);
// a 4096 x 4096 transpose 14-17 ms as 2-D row blocks, 10-12 ms this way.
void transpose_slabs(const CpuTensor& t, int p, std::byte* out) {
  const int64_t r = t.rank();
  const int64_t rows = t.shape[p], cols = t.shape[r - 1], cs = t.strides[r - 1];
  const Strides out_strides = contiguous_strides(t.shape);
  const int64_t ds = out_strides[p];
  Shape other;
  Strides in_other, out_other;
  for (int64_t d = 0; d + 1 < r; ++d) {
    if (d == p) continue;
    other.push_back(t.shape[d]);
    in_other.push_back(t.strides[d]);
    out_other.push_back(out_strides[d]);
  }
  const float* src = reinterpret_cast<const float*>(t.bytes());
  float* dst = reinterpret_cast<float*>(out);
  const int64_t col_blocks = (cols + 7) / 8;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (8 * rows));
  parallel_chunks(numel(other) * col_blocks, grain, [&](int64_t, int64_t b, int64_t e) {
    StridedIter<2> it(other, {in_other, out_other});
    int64_t slab = -1;
    for (int64_t task = b; task < e; ++task) {
      if (task / col_blocks != slab) {
        slab = task / col_blocks;
        it.seek(slab);
      }
      const float* s = src + it.off[0];
      float* d = dst + it.off[1];
      const int64_t c0 = (task % col_blocks) * 8, nc = std::min<int64_t>(8, cols - c0);
      int64_t r0 = 0;
      if (nc == 8) {
        for (; r0 + 8 <= rows; r0 += 8) transpose_8x8(s + c0 * cs + r0, cs, d + r0 * ds + c0, ds);
      }
      for (int64_t i = r0; i < rows; ++i) {
        for (int64_t j = c0; j < c0 + nc; ++j) std::memcpy(d + i * ds + j, s + i + j * cs, 4);
      }
    }
  });
}
#endif

}  // namespace

bool is_transposed_matrix(const CpuTensor& t) {
  return t.shape.size() == 2 && t.shape[0] > 1 && t.shape[1] > 1 && t.strides[0] == 1;
}

void copy_to_contiguous(const CpuTensor& t, std::byte* dst) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const size_t es = dtype_size(t.dtype);
  if (t.is_contiguous()) {
    std::memcpy(dst, t.bytes(), static_cast<size_t>(n) * es);
    return;
  }
#ifdef __AVX2__
  if (es == 4) {
    if (const int p = unit_stride_dim(t); p >= 0) return transpose_slabs(t, p, dst);
  }
#endif
  if (is_transposed_matrix(t)) {
    switch (es) {
      case 1: return transpose_as<uint8_t>(t, dst);
      case 2: return transpose_as<uint16_t>(t, dst);
      case 4: return transpose_as<uint32_t>(t, dst);
      case 8: return transpose_as<uint64_t>(t, dst);
      default: break;
    }
  }
  // Copy rows of the innermost dim; chunks of rows in parallel (pure copies: any partition
  // gives the same bytes).
  const int64_t inner = t.shape.back();
  const int64_t inner_stride = t.strides.back();
  const int64_t rows = n / inner;
  Shape outer(t.shape.begin(), t.shape.end() - 1);
  Strides outer_strides(t.strides.begin(), t.strides.end() - 1);
  const std::byte* src = t.buffer.data();
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(inner, 1));
  parallel_chunks(rows, grain, [&](int64_t, int64_t b, int64_t e) {
    StridedIter<1> it(outer, {outer_strides});
    it.seek(b);
    for (int64_t r = b; r < e; ++r, it.next()) {
      const std::byte* s = src + (t.offset + it.off[0]) * static_cast<int64_t>(es);
      std::byte* d = dst + r * inner * static_cast<int64_t>(es);
      if (inner_stride == 1) {
        std::memcpy(d, s, static_cast<size_t>(inner) * es);
      } else {
        for (int64_t i = 0; i < inner; ++i) {
          std::memcpy(d + i * static_cast<int64_t>(es),
                      s + i * inner_stride * static_cast<int64_t>(es), es);
        }
      }
    }
  });
}

CpuTensor contiguous(const CpuTensor& t) {
  if (t.is_contiguous()) return t;
  CpuTensor out = alloc_tensor(t.meta());
  copy_to_contiguous(t, out.buffer.data());
  return out;
}

}  // namespace tw::cpu
