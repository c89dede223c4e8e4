// The CPU backend: a tensor table of CpuTensors (table_backend.h does the bookkeeping every
// backend shares) and the dispatch of each op to its kernel in kernels.h.
#pragma once
#include "backend/cpu/cpu_tensor.h"
#include "backend/table_backend.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {
template <>
struct TableTraits<cpu::CpuTensor> {
  static TensorMeta meta(const cpu::CpuTensor& t) { return t.meta(); }
  static uint64_t nbytes(const cpu::CpuTensor& t) {
    return static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
  }
  static std::pair<const void*, size_t> storage(const cpu::CpuTensor& t) {
    return {t.buffer.storage_id(), t.buffer.storage_bytes()};
  }
};
}  // namespace tw

namespace tw::cpu {

class CpuBackend final : public TableBackend<CpuTensor> {
 public:
  std::string name() const override { return "cpu"; }
  DeviceKind kind() const override { return DeviceKind::kCpu; }
  bool supports(ir::OpCode) override { return true; }  // a kernel per op, checked at build
  Result<TensorData> read(ir::TensorId id) override;

 protected:
  Status run_into(const ir::Op& op, const OpIo& io, CpuTensor* done) override;
  // Graph buffer planning: kernels' outputs come from the arena while one is set.
  bool plans_graph_buffers() const override { return true; }
  bool writes_in_place(const ir::Op& op) const override {
    return std::holds_alternative<ir::Binary>(op) || std::holds_alternative<ir::BinaryScalar>(op) ||
           std::holds_alternative<ir::Unary>(op);
  }
  void use_arena(BufferPool* arena) override { arena_ = arena; }
  bool in_arena(const CpuTensor& t, const BufferPool& arena) const override {
    return t.buffer.pool() == &arena;
  }
  Result<CpuTensor> copy_out_of_arena(const CpuTensor& t) override;
  void recycle(CpuTensor& t) override { ctx_.recycle(t); }

 private:
  BufferPool* arena_ = nullptr;
  KernelContext ctx_;  // reset for every op (kept for its capacity)
};

}  // namespace tw::cpu
TW_INTERNAL_END
