// Indexing ops: Gather, ScatterAdd, IndexSelect, OneHot. Index values come from data, so each op
// first checks them all and fails with the first bad one in row-major order (the same message
// for any thread count), before anything is read through them. An index in [-size, 0) counts
// from the end, as in numpy and PyTorch's indexing (wrap()); OneHot's values do not.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

// Calls fn.template operator()<I>() with the C++ type of an index dtype (i32, i64 or u8).
template <class F>
void dispatch_index(DType d, F&& fn) {
  switch (d) {
    case kI32: fn.template operator()<int32_t>(); break;
    case kU8: fn.template operator()<uint8_t>(); break;
    default: fn.template operator()<int64_t>(); break;
  }
}

// The first element (row-major) of a contiguous index tensor outside [-limit, limit) (outside
// [0, limit) when !negatives), if any.
struct BadIndex {
  int64_t pos = -1;
  int64_t value = 0;
};
BadIndex find_bad_index(const CpuTensor& index, int64_t limit, bool negatives = true) {
  const int64_t lower = negatives ? -limit : 0;
  const int64_t n = index.numel();
  constexpr int64_t kGrain = int64_t{1} << 16;
  std::vector<BadIndex> first((n + kGrain - 1) / kGrain);
  dispatch_index(index.dtype, [&]<class I>() {
    const I* v = index.data<I>();
    parallel_chunks(n, kGrain, [&](int64_t chunk, int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t x = static_cast<int64_t>(v[i]);
        if (x < lower || x >= limit) {
          first[chunk] = {i, x};
          return;
        }
      }
    });
  });
  for (const BadIndex& f : first) {
    if (f.pos >= 0) return f;
  }
  return {};
}

Status index_error(const char* op, int64_t value, int64_t dim, int64_t size) {
  return out_of_range(std::string(op) + ": index " + std::to_string(value) +
                      " out of range for dim " + std::to_string(dim) + " of size " +
                      std::to_string(size) + " (expected " + std::to_string(-size) + ".." +
                      std::to_string(size - 1) + ")");
}

// An index checked by find_bad_index, counted from the end when negative.
template <class I>
int64_t wrap(I v, int64_t size) {
  const int64_t x = static_cast<int64_t>(v);
  return x < 0 ? x + size : x;
}

int64_t norm_dim(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

// ScatterAdd's addition: floats add; integers wrap, computed on the unsigned type of their width.
template <class T>
struct Accum {
  using type = T;
};
template <>
struct Accum<int32_t> {
  using type = uint32_t;
};
template <>
struct Accum<int64_t> {
  using type = uint64_t;
};

}  // namespace

Status run(const ir::Gather& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  const CpuTensor index = contiguous(ctx.in(op.index));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const int64_t dim = norm_dim(op.dim, x.rank());
  // A 0-d x is one element along its only "dim".
  const int64_t size = x.rank() == 0 ? 1 : x.shape[dim];
  const int64_t dim_stride = x.rank() == 0 ? 0 : x.strides[dim];
  const BadIndex bad = find_bad_index(index, size);
  if (bad.pos >= 0) return index_error("gather", bad.value, dim, size);
  // x's strides over the index's positions, with dim's contribution taken from the index value.
  Strides xs = x.strides;
  if (x.rank() > 0) xs[dim] = 0;
  const size_t es = dtype_size(x.dtype);
  dispatch_index(index.dtype, [&]<class I>() {
    dispatch_bits(es, [&]<class U>() {
      const I* iv = index.data<I>();
      const U* xd = reinterpret_cast<const U*>(x.bytes());
      U* od = reinterpret_cast<U*>(out.bytes());
      parallel_chunks(out.numel(), int64_t{1} << 15, [&](int64_t, int64_t b, int64_t e) {
        StridedIter<1> it(out.shape, {xs});
        it.seek(b);
        for (int64_t i = b; i < e; ++i, it.next()) {
          od[i] = xd[it.off[0] + wrap(iv[i], size) * dim_stride];
        }
      });
    });
  });
  return Status::OK();
}

Status run(const ir::ScatterAdd& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  const CpuTensor& src = ctx.in(op.src);
  const CpuTensor index = contiguous(ctx.in(op.index));
  CpuTensor& out = ctx.alloc(op.out);
  copy_to_contiguous(x, out.bytes());
  if (index.numel() == 0) return Status::OK();
  const int64_t rank = out.rank();
  const int64_t dim = norm_dim(op.dim, rank);
  const int64_t size = rank == 0 ? 1 : out.shape[dim];
  const BadIndex bad = find_bad_index(index, size);
  if (bad.pos >= 0) return index_error("scatter_add", bad.value, dim, size);
  // Index positions that differ outside `dim` update different outputs, so rows along `dim` run
  // in parallel; within a row, positions run in order: each output sees its additions in
  // row-major index order, whatever the thread count.
  Shape rows_shape;
  Strides is, ss, os;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == dim) continue;
    rows_shape.push_back(index.shape[d]);
    is.push_back(index.strides[d]);
    ss.push_back(src.strides[d]);
    os.push_back(out.strides[d]);
  }
  const int64_t len = rank == 0 ? 1 : index.shape[dim];
  const int64_t id = rank == 0 ? 0 : index.strides[dim];
  const int64_t sd = rank == 0 ? 0 : src.strides[dim];
  const int64_t od = rank == 0 ? 0 : out.strides[dim];
  const int64_t rows = numel(rows_shape);
  dispatch_index(index.dtype, [&]<class I>() {
    auto body = [&]<class T>() {
      using A = typename Accum<T>::type;
      const I* iv = index.data<I>();
      const A* sp = reinterpret_cast<const A*>(src.bytes());
      A* op_ = reinterpret_cast<A*>(out.bytes());
      parallel_chunks(rows, rows_per_chunk(len), [&](int64_t, int64_t b, int64_t e) {
        StridedIter<3> it(rows_shape, {is, ss, os});
        it.seek(b);
        for (int64_t r = b; r < e; ++r, it.next()) {
          for (int64_t l = 0; l < len; ++l) {
            const int64_t v = wrap(iv[it.off[0] + l * id], size);
            A& dst = op_[it.off[2] + v * od];
            dst = static_cast<A>(dst + sp[it.off[1] + l * sd]);
          }
        }
      });
    };
    switch (out.dtype) {
      case kF32: body.template operator()<float>(); break;
      case kF64: body.template operator()<double>(); break;
      case kI32: body.template operator()<int32_t>(); break;
      case kI64: body.template operator()<int64_t>(); break;
      default: body.template operator()<uint8_t>(); break;
    }
  });
  return Status::OK();
}

Status run(const ir::IndexSelect& op, KernelContext& ctx) {
  const CpuTensor x = contiguous(ctx.in(op.x));
  const CpuTensor index = contiguous(ctx.in(op.index));
  CpuTensor& out = ctx.alloc(op.out);
  const int64_t dim = norm_dim(op.dim, x.rank());
  const int64_t size = x.rank() == 0 ? 1 : x.shape[dim];
  const BadIndex bad = find_bad_index(index, size);
  if (bad.pos >= 0) return index_error("index_select", bad.value, dim, size);
  if (out.numel() == 0) return Status::OK();
  // x as [outer, size, inner], out as [outer, len, inner]: each (outer, j) copies one inner run.
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x.shape[d];
  for (int64_t d = dim + 1; d < x.rank(); ++d) inner *= x.shape[d];
  const int64_t len = index.numel();
  const size_t run_bytes = static_cast<size_t>(inner) * dtype_size(x.dtype);
  dispatch_index(index.dtype, [&]<class I>() {
    const I* iv = index.data<I>();
    parallel_chunks(outer * len, rows_per_chunk(inner), [&](int64_t, int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t o = r / len, j = r % len;
        const int64_t from = o * size + wrap(iv[j], size);
        std::memcpy(out.bytes() + static_cast<size_t>(r) * run_bytes,
                    x.bytes() + static_cast<size_t>(from) * run_bytes, run_bytes);
      }
    });
  });
  return Status::OK();
}

// out = zeros(x_shape); out[o, index[j], c] += grad[o, j, c]. Tasks own ranges of destination
// rows (o, v) and scan the index in order, adding the rows that land in their range: each output
// element sums its terms in index order, whatever the thread count, with no index tensor the size
// of grad (as scatter_add of the broadcast index would need) and contiguous row adds.
Status run(const ir::IndexSelectBackward& op, KernelContext& ctx) {
  const CpuTensor grad = contiguous(ctx.in(op.grad));
  const CpuTensor index = contiguous(ctx.in(op.index));
  CpuTensor& out = ctx.alloc(op.out);
  const int64_t rank = out.rank();
  const int64_t dim = norm_dim(op.dim, rank);
  const int64_t size = rank == 0 ? 1 : out.shape[dim];
  const BadIndex bad = find_bad_index(index, size);
  if (bad.pos >= 0) return index_error("index_select_backward", bad.value, dim, size);
  std::memset(out.bytes(), 0, static_cast<size_t>(out.numel()) * dtype_size(out.dtype));
  if (out.numel() == 0 || grad.numel() == 0) return Status::OK();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= out.shape[d];
  for (int64_t d = dim + 1; d < rank; ++d) inner *= out.shape[d];
  const int64_t len = index.numel();
  dispatch_index(index.dtype, [&]<class I>() {
    dispatch_float(out.dtype, [&]<class T>() {
      const I* iv = index.data<I>();
      const T* g = grad.data<T>();
      T* o = out.data<T>();
      parallel_chunks(outer * size, rows_per_chunk(inner), [&](int64_t, int64_t b, int64_t e) {
        for (int64_t ob = b / size; ob <= (e - 1) / size; ++ob) {
          for (int64_t j = 0; j < len; ++j) {
            const int64_t row = ob * size + wrap(iv[j], size);
            if (row < b || row >= e) continue;
            T* dst = o + row * inner;
            const T* src = g + (ob * len + j) * inner;
            for (int64_t c = 0; c < inner; ++c) dst[c] += src[c];
          }
        }
      });
    });
  });
  return Status::OK();
}

Status run(const ir::OneHot& op, KernelContext& ctx) {
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  const BadIndex bad = find_bad_index(x, op.num_classes, /*negatives=*/false);
  if (bad.pos >= 0) {
    return out_of_range("one_hot: value " + std::to_string(bad.value) +
                        " out of range for num_classes " + std::to_string(op.num_classes));
  }
  const int64_t n = x.numel(), classes = op.num_classes;
  int64_t* od = out.data<int64_t>();
  dispatch_index(x.dtype, [&]<class I>() {
    const I* xv = x.data<I>();
    parallel_chunks(n, rows_per_chunk(classes), [&](int64_t, int64_t b, int64_t e) {
      std::fill(od + b * classes, od + e * classes, int64_t{0});
      for (int64_t i = b; i < e; ++i) od[i * classes + static_cast<int64_t>(xv[i])] = 1;
    });
  });
  return Status::OK();
}

}  // namespace tw::cpu
