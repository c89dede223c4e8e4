#include "backend/cpu/cpu_backend.h"

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/registry.h"

namespace tw::cpu {

Status CpuBackend::run_into(const ir::Op& op, const OpIo& io, CpuTensor* done) {
  ctx_.reset(arena_);
  for (size_t i = 0; i < io.ins.size(); ++i) {
    const ir::TensorId id = io.ins[i];
    const CpuTensor* t = io.in_tensors ? io.in_tensors[i] : nullptr;
    if (!t) {
      TW_ASSIGN_OR_RETURN(t, tensor(id));
    }
    ctx_.add_input_ref(id, t);
  }
  for (size_t i = 0; i < io.outs.size(); ++i) ctx_.add_output_ref(io.outs[i], &io.metas[i]);
  if (io.donor != 0 && arena_) {
    // Taken only when the output would look exactly like it: the arena's, contiguous from its
    // start, and referenced by nothing else (a view of it elsewhere would see the writes).
    Result<const CpuTensor*> d = tensor(io.donor);
    const TensorMeta& m = io.metas[0];
    if (d.ok() && (*d)->buffer.pool() == arena_ && (*d)->buffer.sole_owner() && (*d)->offset == 0 &&
        (*d)->dtype == m.dtype && (*d)->shape == m.shape && (*d)->is_contiguous()) {
      ctx_.offer(io.outs[0], *d);
    }
  }
  Status st = std::visit(
      [&](const auto& o) -> Status {
        if constexpr (std::is_same_v<std::decay_t<decltype(o)>, std::monostate>) {
          return invalid_argument("empty op");
        } else {
          return cpu::run(o, ctx_);
        }
      },
      op);
  for (size_t i = 0; st.ok() && i < io.outs.size(); ++i) {
    if (!ctx_.take_into(io.outs[i], done[i])) {
      st = internal_error("kernel did not produce output " + tensor_id_str(io.outs[i]));
    }
  }
  // A transposed matrix (typically a weight's gradient, permuted to the weight's layout) that only
  // elementwise ops read is copied once here, in tiles, rather than by each of them (a broadcast
  // view stays: they read it cheaply as it is).
  if (st.ok() && io.elementwise_readers && arena_ && worth_a_tiled_copy(done[0])) {
    CpuTensor dense;
    alloc_into(dense, io.metas[0], arena_);
    copy_to_contiguous(done[0], dense.buffer.data());
    done[0] = std::move(dense);
  }
  // The inputs are referenced only while the op runs.
  ctx_.reset(nullptr);
  return st;
}

Result<CpuTensor> CpuBackend::copy_out_of_arena(const CpuTensor& t) {
  CpuTensor out = alloc_tensor(t.meta());
  copy_to_contiguous(t, out.buffer.data());
  return out;
}

Result<TensorData> CpuBackend::read(ir::TensorId id) {
  TW_ASSIGN_OR_RETURN(const CpuTensor* t, tensor(id));
  TensorData d;
  d.meta = t->meta();
  if (t->is_contiguous()) {
    size_t nbytes = static_cast<size_t>(t->numel()) * dtype_size(t->dtype);
    // Share the storage when the tensor covers it exactly; copy otherwise.
    d.bytes = t->buffer.slice(static_cast<size_t>(t->offset) * dtype_size(t->dtype), nbytes);
  } else {
    d.bytes = Buffer::allocate(static_cast<size_t>(t->numel()) * dtype_size(t->dtype));
    copy_to_contiguous(*t, d.bytes.data());
  }
  return d;
}

}  // namespace tw::cpu

namespace tw {
std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

namespace {
[[maybe_unused]] const bool kCpuRegistered = register_backend(
    "cpu", []() -> Result<std::unique_ptr<Backend>> { return make_cpu_backend(); });
}  // namespace
}  // namespace tw
