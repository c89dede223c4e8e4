#include "backend/cpu/cpu_backend.h"

#include <unordered_set>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "ir/infer.h"

namespace tw::cpu {

std::string id_str(ir::TensorId id) { return "%" + std::to_string(id); }

Result<TensorMeta> CpuBackend::meta(ir::TensorId id) const {
  auto it = table_.find(id);
  if (it == table_.end()) return not_found("unknown tensor id " + id_str(id));
  if (auto* p = std::get_if<Poisoned>(&it->second)) return p->meta;
  return std::get<CpuTensor>(it->second).meta();
}

Result<const CpuTensor*> CpuBackend::tensor(ir::TensorId id) const {
  auto it = table_.find(id);
  if (it == table_.end()) return not_found("unknown tensor id " + id_str(id));
  if (auto* p = std::get_if<Poisoned>(&it->second)) return p->error;
  return &std::get<CpuTensor>(it->second);
}

void CpuBackend::poison(const std::vector<ir::TensorId>& outs,
                        const std::vector<TensorMeta>* metas, const Status& error) {
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i] == 0 || table_.count(outs[i])) continue;  // never overwrite a live tensor
    TensorMeta m = metas && i < metas->size() ? (*metas)[i] : TensorMeta{};
    table_[outs[i]] = Poisoned{m, error};
  }
}

Status CpuBackend::execute(const ir::Op& op) {
  if (std::holds_alternative<std::monostate>(op)) return invalid_argument("empty op");
  const std::vector<ir::TensorId> outs = ir::op_outputs(op);
  const std::string name = ir::op_name(op);
  // Output ids must be fresh and distinct; an op may not overwrite a live tensor.
  std::unordered_set<ir::TensorId> seen;
  for (ir::TensorId id : outs) {
    if (id == 0) return invalid_argument(name + ": output id 0 is reserved for 'no tensor'");
    if (table_.count(id)) {
      return invalid_argument(name + ": output id " + id_str(id) + " is already in use");
    }
    if (!seen.insert(id).second) {
      return invalid_argument(name + ": output id " + id_str(id) + " appears twice");
    }
  }
  // An input poisoned by an earlier failure poisons the outputs with the same error.
  for (ir::TensorId id : ir::op_inputs(op)) {
    auto it = table_.find(id);
    if (it == table_.end()) continue;  // inference reports unknown ids
    if (auto* p = std::get_if<Poisoned>(&it->second)) {
      Status err = p->error;
      poison(outs, nullptr, err);
      return err;
    }
  }
  auto lookup = [this](ir::TensorId id) { return meta(id); };
  auto metas = ir::infer(op, lookup);
  if (!metas.ok()) {
    poison(outs, nullptr, metas.status());
    return metas.status();
  }
  KernelContext ctx;
  for (ir::TensorId id : ir::op_inputs(op)) {
    ctx.add_input(id, std::get<CpuTensor>(table_.at(id)));
  }
  for (size_t i = 0; i < outs.size(); ++i) ctx.add_output(outs[i], (*metas)[i]);
  Status st = std::visit(
      [&](const auto& o) -> Status {
        if constexpr (std::is_same_v<std::decay_t<decltype(o)>, std::monostate>) {
          return invalid_argument("empty op");
        } else {
          return run(o, ctx);
        }
      },
      op);
  if (st.ok()) {
    std::vector<std::pair<ir::TensorId, CpuTensor>> done;
    for (ir::TensorId id : outs) {
      auto t = ctx.take(id);
      if (!t.ok()) {
        st = t.status();
        break;
      }
      done.emplace_back(id, std::move(t).value());
    }
    if (st.ok()) {
      for (auto& [id, t] : done) insert(id, std::move(t));
      return Status::OK();
    }
  }
  if (st.message().rfind(name + ":", 0) != 0) st = st.with_context(name);
  poison(outs, &*metas, st);
  return st;
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

Status CpuBackend::drop(ir::TensorId id) {
  auto it = table_.find(id);
  if (it == table_.end()) return not_found("drop: unknown tensor id " + id_str(id));
  erase(it);
  return Status::OK();
}

void CpuBackend::fail(const ir::Op& op, const Status& error) {
  poison(ir::op_outputs(op), nullptr, error);
}

void CpuBackend::insert(ir::TensorId id, CpuTensor t) {
  if (const void* sid = t.buffer.storage_id()) {
    auto& [refs, bytes] = storages_[sid];
    if (refs++ == 0) {
      bytes = t.buffer.storage_bytes();
      bytes_held_ += bytes;
    }
  }
  table_[id] = std::move(t);
}

void CpuBackend::erase(std::unordered_map<ir::TensorId, Entry>::iterator it) {
  if (auto* t = std::get_if<CpuTensor>(&it->second)) {
    if (const void* sid = t->buffer.storage_id()) {
      auto s = storages_.find(sid);
      if (s != storages_.end() && --s->second.first == 0) {
        bytes_held_ -= s->second.second;
        storages_.erase(s);
      }
    }
  }
  table_.erase(it);
}

}  // namespace tw::cpu

namespace tw {
std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }
}  // namespace tw
