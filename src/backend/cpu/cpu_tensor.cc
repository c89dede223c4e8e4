#include "backend/cpu/cpu_tensor.h"

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

CpuTensor alloc_tensor(const TensorMeta& meta, BufferPool* pool) {
  CpuTensor t;
  t.shape = meta.shape;
  t.dtype = meta.dtype;
  t.strides = contiguous_strides(meta.shape);
  const size_t bytes = static_cast<size_t>(numel(meta.shape)) * dtype_size(meta.dtype);
  t.buffer = pool ? pool->allocate(bytes) : Buffer::allocate(bytes);
  return t;
}

CpuTensor& KernelContext::alloc(ir::Out out) {
  Output& o = outputs_.at(out.id);
  o.tensor = alloc_tensor(o.meta, pool_);
  o.set = true;
  return o.tensor;
}

Status KernelContext::set_view(ir::Out out, CpuTensor view) {
  Output& o = outputs_.at(out.id);
  if (view.shape != o.meta.shape || view.dtype != o.meta.dtype) {
    return internal_error("kernel produced " + meta_str(view.meta()) + " but inference said " +
                          meta_str(o.meta));
  }
  o.tensor = std::move(view);
  o.set = true;
  return Status::OK();
}

Result<CpuTensor> KernelContext::take(ir::TensorId id) {
  auto it = outputs_.find(id);
  if (it == outputs_.end() || !it->second.set) {
    return internal_error("kernel did not produce output %" + std::to_string(id));
  }
  return std::move(it->second.tensor);
}

Strides broadcast_strides(const CpuTensor& t, const Shape& shape) {
  Strides s(shape.size(), 0);
  size_t lead = shape.size() - t.shape.size();
  for (size_t i = 0; i < t.shape.size(); ++i) {
    s[lead + i] = t.shape[i] == 1 ? 0 : t.strides[i];
  }
  return s;
}

void copy_to_contiguous(const CpuTensor& t, std::byte* dst) {
  const int64_t n = t.numel();
  if (n == 0) return;
  const size_t es = dtype_size(t.dtype);
  if (t.is_contiguous()) {
    std::memcpy(dst, t.bytes(), static_cast<size_t>(n) * es);
    return;
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
          std::memcpy(d + i * static_cast<int64_t>(es), s + i * inner_stride * static_cast<int64_t>(es), es);
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
