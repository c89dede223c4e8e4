// What every backend shares, whatever holds its tensors: the table (id -> tensor, or the error
// that poisoned it), the checks every op passes before a kernel runs, and storage accounting.
//
// execute() refuses an op the backend does not support (naming op and backend), requires fresh
// and distinct output ids, propagates the error of a poisoned input to the outputs, validates
// the op with ir::infer, and only then calls the backend's run(). Whatever run() returns or
// throws, the op's outputs end up either set or poisoned, and no exception leaves execute().
//
// Graphs (register_graph, run_graph) are validated once with ir::validate_graph and run op by op
// through execute(), so a run computes exactly what the same ops submitted eagerly would.
//
// T is the backend's tensor handle; TableTraits<T> says how to read its meta and which storage
// it uses (views share a storage, which bytes_held() counts once while any entry uses it).
#pragma once
#include <exception>
#include <new>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "backend/backend.h"
#include "ir/infer.h"

namespace tw {

// A graph run's intermediates live under ids from here up: the API's ids count up from 1 and
// never get there. (A server that runs graphs for peers, which pick ids freely, must keep them
// below it; an id taken already only fails the run, as execute() refuses a used output id.)
inline constexpr ir::TensorId kGraphScratchIds = ir::TensorId{1} << 63;

template <class T>
struct TableTraits;  // static TensorMeta meta(const T&); static std::pair<const void*, size_t>
                     // storage(const T&): identity and bytes of the storage (null: none)

inline std::string tensor_id_str(ir::TensorId id) { return "%" + std::to_string(id); }

// The error for an op a backend has no kernel for.
inline Status unsupported_op(const std::string& op, const std::string& backend) {
  return unimplemented(op + ": not supported by the " + backend +
                       " backend; run it on a device whose backend supports it (such as cpu)");
}

template <class T>
class TableBackend : public Backend {
 public:
  Status execute(const ir::Op& op) final;
  void fail(const ir::Op& op, const Status& error) final {
    poison(ir::op_outputs(op), nullptr, error);
  }
  Status readable(ir::TensorId id) final { return tensor(id).status(); }
  Result<TensorMeta> meta(ir::TensorId id) const final {
    auto it = table_.find(id);
    if (it == table_.end()) return not_found("unknown tensor id " + tensor_id_str(id));
    if (auto* p = std::get_if<Poisoned>(&it->second)) return p->meta;
    return TableTraits<T>::meta(std::get<T>(it->second));
  }
  Status drop(ir::TensorId id) final {
    auto it = table_.find(id);
    if (it == table_.end()) return not_found("drop: unknown tensor id " + tensor_id_str(id));
    erase(it);
    return Status::OK();
  }
  size_t bytes_held() const final { return bytes_held_; }
  void set_memory_limit(uint64_t bytes, RefuseFn refuse) final {
    memory_limit_ = bytes;
    refuse_ = std::move(refuse);
  }
  Result<ir::GraphId> register_graph(ir::Graph graph) final;
  Status run_graph(ir::GraphId id, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) final;

  // A live tensor, or the error it was poisoned with.
  Result<const T*> tensor(ir::TensorId id) const {
    auto it = table_.find(id);
    if (it == table_.end()) return not_found("unknown tensor id " + tensor_id_str(id));
    if (auto* p = std::get_if<Poisoned>(&it->second)) return p->error;
    return &std::get<T>(it->second);
  }

 protected:
  // Runs an op that passed every check: its inputs exist and are live (tensor() finds them),
  // `metas` are its outputs' inferred metas in op_outputs order. Returns one tensor per output,
  // in that order.
  virtual Result<std::vector<T>> run(const ir::Op& op, const std::vector<TensorMeta>& metas) = 0;

 private:
  struct Poisoned {
    TensorMeta meta;
    Status error;
  };
  using Entry = std::variant<T, Poisoned>;
  using Table = std::unordered_map<ir::TensorId, Entry>;

  Result<std::vector<T>> run_guarded(const ir::Op& op, const std::vector<TensorMeta>& metas);
  void poison(const std::vector<ir::TensorId>& outs, const std::vector<TensorMeta>* metas,
              const Status& error) {
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i] == 0 || table_.count(outs[i])) continue;  // never overwrite a live tensor
      TensorMeta m = metas && i < metas->size() ? (*metas)[i] : TensorMeta{};
      table_[outs[i]] = Poisoned{m, error};
    }
  }
  void insert(ir::TensorId id, T t) {
    const auto [sid, bytes] = TableTraits<T>::storage(t);
    if (sid) {
      auto& [refs, held] = storages_[sid];
      if (refs++ == 0) {
        held = bytes;
        bytes_held_ += bytes;
      }
    }
    table_.insert_or_assign(id, Entry(std::move(t)));
  }
  void erase(typename Table::iterator it) {
    if (auto* t = std::get_if<T>(&it->second)) {
      const void* sid = TableTraits<T>::storage(*t).first;
      auto s = sid ? storages_.find(sid) : storages_.end();
      if (s != storages_.end() && --s->second.first == 0) {
        bytes_held_ -= s->second.second;
        storages_.erase(s);
      }
    }
    table_.erase(it);
  }

  struct RegisteredGraph {
    ir::Graph graph;
    ir::GraphPlan plan;
  };

  Table table_;
  std::unordered_map<const void*, std::pair<size_t, size_t>> storages_;  // id -> (refs, bytes)
  std::unordered_map<ir::GraphId, RegisteredGraph> graphs_;
  ir::GraphId next_graph_ = 1;
  ir::TensorId next_scratch_ = kGraphScratchIds;
  size_t bytes_held_ = 0;
  uint64_t memory_limit_ = UINT64_MAX;
  RefuseFn refuse_;
};

template <class T>
Status TableBackend<T>::execute(const ir::Op& op) {
  if (std::holds_alternative<std::monostate>(op)) return invalid_argument("empty op");
  const std::vector<ir::TensorId> outs = ir::op_outputs(op);
  const std::string name = ir::op_name(op);
  // Output ids must be fresh and distinct; an op may not overwrite a live tensor.
  std::unordered_set<ir::TensorId> seen;
  for (ir::TensorId id : outs) {
    if (id == 0) return invalid_argument(name + ": output id 0 is reserved for 'no tensor'");
    if (table_.count(id)) {
      return invalid_argument(name + ": output id " + tensor_id_str(id) + " is already in use");
    }
    if (!seen.insert(id).second) {
      return invalid_argument(name + ": output id " + tensor_id_str(id) + " appears twice");
    }
  }
  if (!supports(ir::op_code(op))) {
    Status err = unsupported_op(name, this->name());
    poison(outs, nullptr, err);
    return err;
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
  auto metas = ir::infer(op, [this](ir::TensorId id) { return meta(id); });
  if (!metas.ok()) {
    poison(outs, nullptr, metas.status());
    return metas.status();
  }
  if (refuse_) {
    uint64_t need = 0;
    for (const TensorMeta& m : *metas)
      need += static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
    if (bytes_held_ + need > memory_limit_) {
      Status err = refuse_(op, bytes_held_, need);
      if (!err.ok()) {
        poison(outs, &*metas, err);
        return err;
      }
    }
  }
  auto done = run_guarded(op, *metas);
  Status st = done.status();
  if (done.ok() && done->size() != outs.size()) {
    st =
        internal_error("the " + this->name() + " backend produced " + std::to_string(done->size()) +
                       " outputs, expected " + std::to_string(outs.size()));
  }
  if (st.ok()) {
    for (size_t i = 0; i < outs.size(); ++i) insert(outs[i], std::move((*done)[i]));
    return Status::OK();
  }
  if (st.message().rfind(name + ":", 0) != 0) st = st.with_context(name);
  poison(outs, &*metas, st);
  return st;
}

template <class T>
Result<ir::GraphId> TableBackend<T>::register_graph(ir::Graph graph) {
  TW_ASSIGN_OR_RETURN(ir::GraphPlan plan, ir::validate_graph(graph));
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    if (!supports(ir::op_code(graph.ops[i]))) {
      return unsupported_op(ir::op_name(graph.ops[i]), this->name())
          .with_context("graph op " + std::to_string(i));
    }
  }
  const ir::GraphId id = next_graph_++;
  graphs_.emplace(id, RegisteredGraph{std::move(graph), std::move(plan)});
  return id;
}

template <class T>
Status TableBackend<T>::run_graph(ir::GraphId id, std::span<const ir::TensorId> inputs,
                                  std::span<const ir::TensorId> outputs) {
  auto g = graphs_.find(id);
  if (g == graphs_.end()) return not_found("run_graph: unknown graph " + std::to_string(id));
  const ir::Graph& graph = g->second.graph;
  const ir::GraphPlan& plan = g->second.plan;
  if (inputs.size() != graph.inputs.size() || outputs.size() != graph.output_ids.size()) {
    return invalid_argument("run_graph: the graph takes " + std::to_string(graph.inputs.size()) +
                            " inputs and gives " + std::to_string(graph.output_ids.size()) +
                            " outputs; " + std::to_string(inputs.size()) + " and " +
                            std::to_string(outputs.size()) + " ids were given");
  }
  std::unordered_map<ir::TensorId, ir::TensorId> ids;  // graph-local -> table id
  for (size_t i = 0; i < inputs.size(); ++i) {
    TW_ASSIGN_OR_RETURN(TensorMeta m, meta(inputs[i]));
    // A poisoned input passes: execute() hands its error on to what the graph computes from it.
    if (tensor(inputs[i]).ok() && m != graph.inputs[i]) {
      return invalid_argument("run_graph: input " + std::to_string(i) + " is " + meta_str(m) +
                              ", the graph takes " + meta_str(graph.inputs[i]));
    }
    ids[graph.input_ids[i]] = inputs[i];
  }
  std::unordered_set<ir::TensorId> fresh;
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k] == 0 || table_.count(outputs[k]) || !fresh.insert(outputs[k]).second) {
      return invalid_argument("run_graph: output id " + tensor_id_str(outputs[k]) +
                              " is 0, in use or given twice");
    }
    ids[graph.output_ids[k]] = outputs[k];
  }
  for (const ir::Op& op : graph.ops) {
    for (ir::TensorId local : ir::op_outputs(op)) ids.emplace(local, next_scratch_++);
  }
  // Validation saw every id the ops name, so each is in the map.
  const std::function<ir::TensorId(ir::TensorId)> to_table = [&](ir::TensorId local) {
    return ids.at(local);
  };
  Status first_error;
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    ir::Op op = graph.ops[i];
    ir::remap_op(op, to_table);
    if (first_error.ok()) {
      first_error = execute(op);
    } else {
      fail(op, first_error);  // what execute() would do with a poisoned input, without looking
    }
    for (ir::TensorId local : plan.free_after[i]) {
      auto it = table_.find(ids.at(local));
      if (it != table_.end()) erase(it);
    }
  }
  return first_error;
}

// A kernel that throws (out of memory, or a library's exception) fails its op, never the
// process.
template <class T>
Result<std::vector<T>> TableBackend<T>::run_guarded(const ir::Op& op,
                                                    const std::vector<TensorMeta>& metas) {
  try {
    return run(op, metas);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory in the " + name() + " backend");
  } catch (const std::exception& e) {
    return internal_error("the " + name() + " backend failed: " + e.what());
  }
}

}  // namespace tw
