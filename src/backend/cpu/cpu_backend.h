// The CPU backend: a tensor table (id -> CpuTensor or the error that poisoned it) and the
// dispatch of each op to its kernel in kernels.h.
#pragma once
#include <unordered_map>
#include <variant>

#include "backend/backend.h"
#include "backend/cpu/cpu_tensor.h"

namespace tw::cpu {

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool supports(ir::OpCode) const override { return true; }  // a kernel per op, checked at build
  Status execute(const ir::Op& op) override;
  void fail(const ir::Op& op, const Status& error) override;
  Result<TensorData> read(ir::TensorId id) override;
  Result<TensorMeta> meta(ir::TensorId id) const override;
  Status drop(ir::TensorId id) override;
  size_t bytes_held() const override { return bytes_held_; }
  size_t tensor_count() const override { return table_.size(); }

  // Direct access for kernels' tests and for zero-copy paths of the server.
  Result<const CpuTensor*> tensor(ir::TensorId id) const;

 private:
  struct Poisoned {
    TensorMeta meta;
    Status error;
  };
  using Entry = std::variant<CpuTensor, Poisoned>;
  void poison(const std::vector<ir::TensorId>& outs, const std::vector<TensorMeta>* metas,
              const Status& error);
  void insert(ir::TensorId id, CpuTensor t);
  void erase(std::unordered_map<ir::TensorId, Entry>::iterator it);
  std::unordered_map<ir::TensorId, Entry> table_;
  // Storage accounting: views share a storage, which is counted once while any entry uses it.
  std::unordered_map<const void*, std::pair<size_t, size_t>> storages_;  // id -> (refs, bytes)
  size_t bytes_held_ = 0;
};

}  // namespace tw::cpu
