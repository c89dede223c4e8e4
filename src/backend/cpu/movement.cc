// Movement ops. Reshape (when the strides allow), Permute, Expand and Slice are views sharing the
// input's buffer; the others copy. Elements are moved as raw bits of their size, so every dtype
// (f16 and bf16 included) takes the same path. Copies are pure, so any partition of the work
// gives the same bytes.
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
#include "core/thread_pool.h"
#include "ir/infer.h"

namespace tw::cpu {
namespace {

// Dims a strided copy may see: Repeat views its output with two dims per input dim.
constexpr size_t kMaxCopyRank = 2 * static_cast<size_t>(kMaxRank);

// A copy problem: `shape` elements, element strides on each side.
struct CopyPlan {
  Shape shape;
  Strides dst, src;
};

// Drops size-1 dims and merges neighbours both sides walk with one stride.
CopyPlan coalesce(const Shape& shape, const Strides& dst, const Strides& src) {
  CopyPlan p;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!p.shape.empty() && p.dst.back() == dst[d] * shape[d] &&
        p.src.back() == src[d] * shape[d]) {
      p.shape.back() *= shape[d];
      p.dst.back() = dst[d];
      p.src.back() = src[d];
    } else {
      p.shape.push_back(shape[d]);
      p.dst.push_back(dst[d]);
      p.src.push_back(src[d]);
    }
  }
  return p;
}

// Copies `shape` elements of `es` bytes from src to dst (pointers at element (0, ..., 0)).
// Strides may be negative (Flip) or 0 on the source side (broadcast).
void strided_copy(std::byte* dst, const Strides& dst_strides, const std::byte* src,
                  const Strides& src_strides, const Shape& shape, size_t es) {
  if (numel(shape) == 0) return;
  const CopyPlan p = coalesce(shape, dst_strides, src_strides);
  if (p.shape.empty()) {
    std::memcpy(dst, src, es);
    return;
  }
  const size_t outer_rank = p.shape.size() - 1;
  const int64_t inner = p.shape.back();
  const int64_t di = p.dst.back(), si = p.src.back();
  const int64_t rows = numel(p.shape) / inner;
  const int64_t e = static_cast<int64_t>(es);
  parallel_chunks(rows, rows_per_chunk(inner), [&](int64_t, int64_t begin, int64_t end) {
    std::array<int64_t, kMaxCopyRank> idx{};
    int64_t doff = 0, soff = 0;
    for (size_t d = outer_rank, rest = static_cast<size_t>(begin); d-- > 0;) {
      idx[d] = static_cast<int64_t>(rest) % p.shape[d];
      rest /= static_cast<size_t>(p.shape[d]);
      doff += idx[d] * p.dst[d];
      soff += idx[d] * p.src[d];
    }
    for (int64_t r = begin; r < end; ++r) {
      std::byte* d = dst + doff * e;
      const std::byte* s = src + soff * e;
      if (di == 1 && si == 1) {
        std::memcpy(d, s, static_cast<size_t>(inner) * es);
      } else {
        dispatch_bits(es, [&]<class U>() {
          U* du = reinterpret_cast<U*>(d);
          const U* su = reinterpret_cast<const U*>(s);
          for (int64_t i = 0; i < inner; ++i) du[i * di] = su[i * si];
        });
      }
      for (size_t k = outer_rank; k-- > 0;) {
        doff += p.dst[k];
        soff += p.src[k];
        if (++idx[k] < p.shape[k]) break;
        doff -= p.dst[k] * p.shape[k];
        soff -= p.src[k] * p.shape[k];
        idx[k] = 0;
      }
    }
  });
}

// The slice of t as a view (shares t's buffer).
CpuTensor slice_view(const CpuTensor& t, const std::vector<int64_t>& starts,
                     const std::vector<int64_t>& ends, const std::vector<int64_t>& steps) {
  CpuTensor v = t;
  for (int64_t d = 0; d < t.rank(); ++d) {
    // Inference accepted these bounds, so normalising them again cannot fail.
    const ir::SliceDim b = *ir::normalize_slice(starts[d], ends[d], steps[d], t.shape[d]);
    v.shape[d] = b.size;
    v.offset += b.start * t.strides[d];
    v.strides[d] = t.strides[d] * steps[d];
  }
  if (v.numel() == 0) v.offset = t.offset;  // never points past the storage, even unread
  return v;
}

// Strides that view t's elements, in row-major order, as `shape`, or nothing when no strides
// can (the elements are not evenly spaced within each group of merged dims). After PyTorch's
// computeStride.
std::optional<Strides> view_strides(const CpuTensor& t, const Shape& shape) {
  if (t.rank() == 0 || t.numel() == 0) return contiguous_strides(shape);
  Strides out(shape.size());
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_stride = t.strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = t.rank() - 1; d >= 0; --d) {
    tensor_numel *= t.shape[d];
    if (d == 0 || (t.shape[d - 1] != 1 && t.strides[d - 1] != tensor_numel * chunk_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_stride = t.strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

int64_t norm_dim(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

}  // namespace

Status run(const ir::Reshape& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  const Shape& shape = ctx.meta(op.out).shape;
  CpuTensor v = x;
  if (auto strides = view_strides(x, shape)) {
    v.strides = std::move(*strides);
  } else {
    v = contiguous(x);
    v.strides = contiguous_strides(shape);
  }
  v.shape = shape;
  return ctx.set_view(op.out, std::move(v));
}

Status run(const ir::Permute& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  CpuTensor v = x;
  for (size_t i = 0; i < op.dims.size(); ++i) {
    const int64_t d = norm_dim(op.dims[i], x.rank());
    v.shape[i] = x.shape[d];
    v.strides[i] = x.strides[d];
  }
  return ctx.set_view(op.out, std::move(v));
}

Status run(const ir::Expand& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  CpuTensor v = x;
  v.shape = ctx.meta(op.out).shape;
  v.strides = broadcast_strides(x, v.shape);
  for (size_t i = 0; i < v.shape.size(); ++i) {
    if (v.shape[i] == 1) v.strides[i] = 1;  // stride 0 only where elements repeat
  }
  if (v.numel() == 0) v.strides = contiguous_strides(v.shape);
  return ctx.set_view(op.out, std::move(v));
}

Status run(const ir::Slice& op, KernelContext& ctx) {
  return ctx.set_view(op.out, slice_view(ctx.in(op.x), op.starts, op.ends, op.steps));
}

Status run(const ir::SliceAssign& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  const CpuTensor& src = ctx.in(op.src);
  CpuTensor& out = ctx.alloc(op.out);
  copy_to_contiguous(x, out.bytes());
  const CpuTensor region = slice_view(out, op.starts, op.ends, op.steps);
  if (region.numel() == 0) return Status::OK();
  strided_copy(region.bytes(), region.strides, src.bytes(), broadcast_strides(src, region.shape),
               region.shape, dtype_size(x.dtype));
  return Status::OK();
}

Status run(const ir::Cat& op, KernelContext& ctx) {
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const int64_t dim = norm_dim(op.dim, out.rank());
  const size_t es = dtype_size(out.dtype);
  int64_t at = 0;
  for (const ir::In& in : op.xs) {
    const CpuTensor& t = ctx.in(in);
    strided_copy(out.bytes() + at * out.strides[dim] * static_cast<int64_t>(es), out.strides,
                 t.bytes(), t.strides, t.shape, es);
    at += t.shape[dim];
  }
  return Status::OK();
}

Status run(const ir::Flip& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  // Read through negative strides from the last element of each flipped dim.
  CpuTensor v = x;
  for (int64_t d : op.dims) {
    if (x.rank() == 0) break;  // a 0-d tensor accepts dim 0/-1 and has nothing to flip
    d = norm_dim(d, x.rank());
    v.offset += (x.shape[d] - 1) * x.strides[d];
    v.strides[d] = -x.strides[d];
  }
  strided_copy(out.bytes(), out.strides, v.bytes(), v.strides, v.shape, dtype_size(x.dtype));
  return Status::OK();
}

Status run(const ir::Repeat& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  // The output seen as [r0, s0, r1, s1, ...]: the source has stride 0 over each repeat dim.
  const size_t rank = op.repeats.size(), lead = rank - static_cast<size_t>(x.rank());
  Shape shape;
  Strides dst, src;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t size = i < lead ? 1 : x.shape[i - lead];
    const int64_t stride = i < lead ? 0 : x.strides[i - lead];
    shape.insert(shape.end(), {op.repeats[i], size});
    dst.insert(dst.end(), {size * out.strides[i], out.strides[i]});
    src.insert(src.end(), {0, stride});
  }
  strided_copy(out.bytes(), dst, x.bytes(), src, shape, dtype_size(x.dtype));
  return Status::OK();
}

}  // namespace tw::cpu
