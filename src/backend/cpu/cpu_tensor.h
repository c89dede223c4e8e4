// How the CPU backend holds a tensor: a (possibly shared) buffer viewed through shape, strides
// and an element offset. Movement ops (reshape of contiguous data, permute, expand, slice)
// produce views without copying; every op is functional, so views are never written through.
#pragma once
#include <deque>
#include <vector>

#include "core/buffer.h"
#include "core/shape.h"
#include "core/status.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

struct CpuTensor {
  Buffer buffer;
  Shape shape;
  Strides strides;     // in elements; 0 for broadcast (expanded) dims
  int64_t offset = 0;  // in elements
  DType dtype = kF32;

  int64_t numel() const { return tw::numel(shape); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  bool is_contiguous() const;
  template <class T>
  T* data() const {
    return reinterpret_cast<T*>(buffer.data()) + offset;
  }
  std::byte* bytes() const {
    return buffer.data() + offset * static_cast<int64_t>(dtype_size(dtype));
  }
  TensorMeta meta() const { return {shape, dtype}; }
};

// A new contiguous tensor (uninitialised) from `pool`, or from the global buffer pool.
CpuTensor alloc_tensor(const TensorMeta& meta, BufferPool* pool = nullptr);
// The same into `t`, reusing its shape and stride arrays (no allocation when they are large
// enough).
void alloc_into(CpuTensor& t, const TensorMeta& meta, BufferPool* pool = nullptr);
// Sets t to a contiguous layout of `meta` (shape, strides, dtype, offset 0) and returns its
// bytes; leaves its buffer alone.
size_t layout_into(CpuTensor& t, const TensorMeta& meta);

// What a kernel sees: its inputs, and the inferred metas of its outputs. Kernels either allocate
// an output (alloc) or set it to a view (set_view); the executor checks every output was set.
// The executor keeps one context and reset()s it per op: inputs are referenced, not copied, and
// the entries live in flat arrays whose capacity stays, so dispatching an op allocates nothing
// here (an op has a handful of inputs and outputs; lookups scan them).
class KernelContext {
 public:
  KernelContext() = default;
  KernelContext(const KernelContext&) = delete;
  KernelContext& operator=(const KernelContext&) = delete;
  // For kernel unit tests: the context keeps a copy of `t` / `meta`.
  void add_input(ir::TensorId id, CpuTensor t);
  void add_output(ir::TensorId id, TensorMeta meta);
  // For the executor: `t` and `meta` must outlive the op's run.
  void add_input_ref(ir::TensorId id, const CpuTensor* t) { inputs_.push_back({id, t}); }
  void add_output_ref(ir::TensorId id, const TensorMeta* meta) {
    outputs_.push_back({id, meta, {}, false, nullptr});
  }
  // Lets alloc(out) return a tensor over `donor`'s storage (an input of the op's meta that no
  // other tensor shares and that dies with the op): for kernels that compute each output
  // element from the inputs at its own index, so writing over the input is safe.
  void offer(ir::TensorId out, const CpuTensor* donor) { output(out).donor = donor; }
  // Forgets the last op's inputs and outputs (keeping the arrays' capacity) and sets where
  // alloc() takes outputs from.
  void reset(BufferPool* pool);
  // Keeps the shape and stride arrays of a tensor being destroyed (its storage is let go now)
  // for a later alloc(): outputs of the same rank then allocate nothing but their storage.
  void recycle(CpuTensor& t);

  bool has(ir::In in) const { return in.id != 0 && find_input(in.id) != nullptr; }
  const CpuTensor& in(ir::In in) const;
  const TensorMeta& meta(ir::Out out) const { return *output(out.id).meta; }
  // Allocates a contiguous output with the inferred meta (from the pool set, if any).
  CpuTensor& alloc(ir::Out out);
  // Where alloc() takes outputs from: a registered graph's arena while the executor runs one of
  // its ops whose outputs the graph frees again (null: the global pool).
  void set_pool(BufferPool* pool) { pool_ = pool; }
  // Makes the output a view; its shape and dtype must equal the inferred meta.
  Status set_view(ir::Out out, CpuTensor view);
  // The finished output (after alloc/set_view).
  Result<CpuTensor> take(ir::TensorId id);
  // The same, moved into `dst`; false when the kernel did not set it.
  bool take_into(ir::TensorId id, CpuTensor& dst);

 private:
  struct Input {
    ir::TensorId id;
    const CpuTensor* tensor;
  };
  struct Output {
    ir::TensorId id;
    const TensorMeta* meta;
    CpuTensor tensor;
    bool set = false;
    const CpuTensor* donor = nullptr;
  };
  const CpuTensor* find_input(ir::TensorId id) const {
    for (const Input& i : inputs_)
      if (i.id == id) return i.tensor;
    return nullptr;
  }
  Output* find_output(ir::TensorId id) {
    for (Output& o : outputs_)
      if (o.id == id) return &o;
    return nullptr;
  }
  // Kernels only name outputs of their own op (inference checked it); a miss is a bug, and
  // throws (the executor turns it into the op's error) rather than crashing.
  Output& output(ir::TensorId id);
  const Output& output(ir::TensorId id) const {
    return const_cast<KernelContext*>(this)->output(id);
  }

  std::vector<Input> inputs_;
  std::vector<Output> outputs_;
  // What add_input / add_output copied (deques: references stay valid as they grow).
  std::deque<CpuTensor> owned_inputs_;
  std::deque<TensorMeta> owned_metas_;
  std::vector<CpuTensor> spares_;  // recycled handles, storage-less
  BufferPool* pool_ = nullptr;
};

}  // namespace tw::cpu
TW_INTERNAL_END
