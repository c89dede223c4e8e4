#include "backend/cpu/cpu_tensor.h"

#include <stdexcept>
#include <string>

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

void alloc_into(CpuTensor& t, const TensorMeta& meta, BufferPool* pool) {
  t.shape.assign(meta.shape.begin(), meta.shape.end());
  t.dtype = meta.dtype;
  t.offset = 0;
  t.strides.resize(meta.shape.size());
  int64_t n = 1;
  for (size_t i = meta.shape.size(); i-- > 0;) {
    t.strides[i] = n;
    n *= meta.shape[i];
  }
  const size_t bytes = static_cast<size_t>(n) * dtype_size(meta.dtype);
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
  alloc_into(o.tensor, *o.meta, pool_);
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
