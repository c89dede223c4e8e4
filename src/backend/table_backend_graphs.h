// TableBackend's graph members (included by table_backend.h, which declares them): register a
// graph and run it. Graphs are validated once with ir::validate_graph, which is what lets a run
// skip execute()'s per-op checks: registration prepares the graph (graph_program.h: dense slots,
// each op's inferred output metas, the arena), and a run hands each op with those metas straight
// to the backend's run_into(), the kernels execute() would call, so it computes exactly what the
// same ops submitted eagerly would. Within a run the tensors live in the graph's slot array, not
// the table (tensor() looks there for the graph's ids), and a poisoned input poisons what is
// computed from it as in eager execution; the outputs move to the table under the caller's ids
// at the end.
#pragma once
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "backend/graph_program.h"
#include "backend/table_backend.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

template <class T>
Result<ir::GraphId> TableBackend<T>::register_graph(ir::Graph graph) {
  TW_ASSIGN_OR_RETURN(ir::GraphPlan plan, ir::validate_graph(graph));
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    if (!supports(ir::op_code(graph.ops[i]))) {
      return unsupported_op(ir::op_name(graph.ops[i]), this->name())
          .with_context("graph op " + std::to_string(i));
    }
  }
  RegisteredGraph g{prepare_graph(std::move(graph), plan, next_scratch_,
                                  [this](const ir::Op& op) { return writes_in_place(op); }),
                    {}};
  if (plans_graph_buffers()) {
    TW_RETURN_NOT_OK(plan_arena(g, bytes_held(), memory_limit_, name()));
  }
  next_scratch_ += g.slot_count;
  graph_bytes_ += g.arena_bytes;
  const ir::GraphId id = next_graph_++;
  graphs_.emplace(id, std::move(g));
  return id;
}

template <class T>
Result<Backend::GraphMemory> TableBackend<T>::graph_memory(ir::GraphId id) const {
  auto g = graphs_.find(id);
  if (g == graphs_.end()) return not_found("graph_memory: unknown graph " + std::to_string(id));
  GraphMemory m;
  m.planned_bytes = g->second.arena_bytes;
  if (g->second.arena) {
    const PoolStats s = g->second.arena->stats();
    // The reservation's own allocations are not a run's.
    m.allocations = s.allocations - g->second.reserved_blocks;
    m.fresh_allocations = s.fresh_allocations - g->second.reserved_blocks;
  }
  return m;
}

template <class T>
Status TableBackend<T>::check_run(const RegisteredGraph& g, std::span<const ir::TensorId> inputs,
                                  std::span<const ir::TensorId> outputs) const {
  if (inputs.size() != g.input_metas.size() || outputs.size() != g.output_slots.size()) {
    return invalid_argument("run_graph: the graph takes " + std::to_string(g.input_metas.size()) +
                            " inputs and gives " + std::to_string(g.output_slots.size()) +
                            " outputs; " + std::to_string(inputs.size()) + " and " +
                            std::to_string(outputs.size()) + " ids were given");
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    TW_ASSIGN_OR_RETURN(TensorMeta m, meta(inputs[i]));
    // A poisoned input passes: the run hands its error on to what the graph computes from it.
    if (tensor(inputs[i]).ok() && m != g.input_metas[i]) {
      return invalid_argument("run_graph: input " + std::to_string(i) + " is " + meta_str(m) +
                              ", the graph takes " + meta_str(g.input_metas[i]));
    }
  }
  std::unordered_set<ir::TensorId> fresh;
  for (ir::TensorId id : outputs) {
    if (id == 0 || table_.count(id) || !fresh.insert(id).second) {
      return invalid_argument("run_graph: output id " + tensor_id_str(id) +
                              " is 0, in use or given twice");
    }
  }
  return Status::OK();
}

template <class T>
Status TableBackend<T>::run_graph(ir::GraphId id, std::span<const ir::TensorId> inputs,
                                  std::span<const ir::TensorId> outputs) {
  auto it = graphs_.find(id);
  Status bad = it == graphs_.end() ? not_found("run_graph: unknown graph " + std::to_string(id))
                                   : check_run(it->second, inputs, outputs);
  if (!bad.ok()) {
    // Nothing runs; the outputs carry the reason (poison() leaves live ids alone).
    poison(std::vector<ir::TensorId>(outputs.begin(), outputs.end()), nullptr, bad);
    return bad;
  }
  RegisteredGraph& g = it->second;
  // Every slot is empty between runs (the intermediates are freed after their last readers, the
  // inputs and outputs at the end), so the array is sized by the first run and then kept: a run
  // neither fills nor clears it.
  if (g.slots.size() != g.slot_count) g.slots.assign(g.slot_count, std::nullopt);
  for (size_t i = 0; i < inputs.size(); ++i) g.slots[i] = table_.at(inputs[i]);
  GraphRun run(*this, g, id, inputs);
  const Status first_error = run_graph_program(run);
  for (size_t k = 0; k < outputs.size(); ++k) {
    std::optional<Entry>& e = g.slots[g.output_slots[k]];
    if (!e) {  // (a backend's run_graph_program must set each output: table_backend.h)
      e = Poisoned{TensorMeta{},
                   internal_error("run_graph: the " + name() + " backend left graph output " +
                                  std::to_string(k) + " unset")};
    }
    if (T* t = std::get_if<T>(&*e)) {
      // An output that views an intermediate's arena block gets storage of its own, so every
      // block is free again once the run is over.
      if (g.arena && in_arena(*t, *g.arena)) {
        Result<T> copy = copy_out_of_arena(*t);
        if (!copy.ok()) {
          table_[outputs[k]] = Poisoned{TableTraits<T>::meta(*t), copy.status()};
          continue;
        }
        *t = std::move(copy).value();
      }
      insert(outputs[k], std::move(*t));
    } else {
      table_[outputs[k]] = std::get<Poisoned>(*e);
    }
  }
  // The inputs' references, and the outputs moved out.
  for (size_t i = 0; i < inputs.size(); ++i) g.slots[i].reset();
  for (uint32_t s : g.output_slots) g.slots[s].reset();
  return first_error;
}

template <class T>
Status TableBackend<T>::run_graph_ops(RegisteredGraph& g) {
  slots_ = &g.slots;
  slot_base_ = g.base;
  Status first_error;
  for (const GraphOp& op : g.ops) {
    Status st = run_graph_op(g, op);
    if (first_error.ok()) first_error = st;
    for (uint32_t k = op.free_begin; k < op.free_end; ++k) free_slot(g.slots[g.free_slots[k]]);
  }
  slots_ = nullptr;
  return first_error;
}

template <class T>
Status TableBackend<T>::run_graph_op(RegisteredGraph& g, const GraphOp& op) {
  auto set_outputs_poisoned = [&](const Status& err) {
    for (uint32_t k = op.out_begin; k < op.out_end; ++k) {
      g.slots[g.out_slots[k]] = Poisoned{op.metas[k - op.out_begin], err};
    }
    return err;
  };
  // An input poisoned by an earlier failure (or given poisoned) poisons the outputs with the
  // same error, as in eager execution.
  for (uint32_t k = op.in_begin; k < op.in_end; ++k) {
    const std::optional<Entry>& e = g.slots[g.in_slots[k]];
    if (auto* p = std::get_if<Poisoned>(&*e)) return set_outputs_poisoned(p->error);
  }
  if (refuse_ && !op.from_arena) {  // an arena's tensors were counted at registration
    uint64_t need = 0;
    for (const TensorMeta& m : op.metas)
      need += static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
    if (bytes_held() + need > memory_limit_) {
      Status err = refuse_(op.op, bytes_held(), need);
      if (!err.ok()) return set_outputs_poisoned(err);
    }
  }
  arena_ = op.from_arena ? g.arena.get() : nullptr;
  use_arena(arena_);
  const std::span<const ir::TensorId> ins(g.in_ids.data() + op.in_begin, op.in_end - op.in_begin);
  const std::span<const ir::TensorId> outs(g.out_ids.data() + op.out_begin,
                                           op.out_end - op.out_begin);
  done_.resize(outs.size());
  const ir::TensorId donor = op.donor == UINT32_MAX ? 0 : g.base + op.donor;
  Status st =
      run_guarded(op.op, OpIo{ins, outs, op.metas, donor, op.elementwise_readers}, done_.data());
  use_arena(nullptr);
  arena_ = nullptr;
  if (st.ok()) {
    for (uint32_t k = op.out_begin; k < op.out_end; ++k) {
      g.slots[g.out_slots[k]].emplace(std::in_place_type<T>, std::move(done_[k - op.out_begin]));
    }
    done_.clear();
    return Status::OK();
  }
  done_.clear();
  const std::string name = ir::op_name(op.op);
  if (st.message().rfind(name + ":", 0) != 0) st = st.with_context(name);
  return set_outputs_poisoned(st);
}

}  // namespace tw
TW_INTERNAL_END
