// How the CPU backend holds a tensor: a (possibly shared) buffer viewed through shape, strides
// and an element offset. Movement ops (reshape of contiguous data, permute, expand, slice)
// produce views without copying; every op is functional, so views are never written through.
#pragma once
#include <unordered_map>

#include "core/buffer.h"
#include "core/shape.h"
#include "core/status.h"
#include "ir/ops.h"

namespace tw::cpu {

struct CpuTensor {
  Buffer buffer;
  Shape shape;
  Strides strides;      // in elements; 0 for broadcast (expanded) dims
  int64_t offset = 0;   // in elements
  DType dtype = kF32;

  int64_t numel() const { return tw::numel(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool is_contiguous() const;
  template <class T>
  T* data() const {
    return reinterpret_cast<T*>(buffer.data()) + offset;
  }
  std::byte* bytes() const { return buffer.data() + offset * static_cast<int64_t>(dtype_size(dtype)); }
  TensorMeta meta() const { return {shape, dtype}; }
};

// A new contiguous tensor (uninitialised) from `pool`, or from the global buffer pool.
CpuTensor alloc_tensor(const TensorMeta& meta, BufferPool* pool = nullptr);

// What a kernel sees: its inputs, and the inferred metas of its outputs. Kernels either allocate
// an output (alloc) or set it to a view (set_view); the executor checks every output was set.
class KernelContext {
 public:
  KernelContext() = default;
  // For the executor and for kernel unit tests.
  void add_input(ir::TensorId id, CpuTensor t) { inputs_[id] = std::move(t); }
  void add_output(ir::TensorId id, TensorMeta meta) { outputs_[id] = Output{std::move(meta), {}, false}; }

  bool has(ir::In in) const { return in.id != 0 && inputs_.count(in.id) != 0; }
  const CpuTensor& in(ir::In in) const { return inputs_.at(in.id); }
  const TensorMeta& meta(ir::Out out) const { return outputs_.at(out.id).meta; }
  // Allocates a contiguous output with the inferred meta (from the pool set, if any).
  CpuTensor& alloc(ir::Out out);
  // Where alloc() takes outputs from: a registered graph's arena while the executor runs one of
  // its ops whose outputs the graph frees again (null: the global pool).
  void set_pool(BufferPool* pool) { pool_ = pool; }
  // Makes the output a view; its shape and dtype must equal the inferred meta.
  Status set_view(ir::Out out, CpuTensor view);
  // The finished output (after alloc/set_view).
  Result<CpuTensor> take(ir::TensorId id);

 private:
  struct Output {
    TensorMeta meta;
    CpuTensor tensor;
    bool set = false;
  };
  std::unordered_map<ir::TensorId, CpuTensor> inputs_;
  std::unordered_map<ir::TensorId, Output> outputs_;
  BufferPool* pool_ = nullptr;
};

}  // namespace tw::cpu
