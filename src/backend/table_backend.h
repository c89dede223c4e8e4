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
// A backend that can take kernel outputs from a given pool (plans_graph_buffers: the cpu backend)
// gets an arena per graph, planned at registration: walking the ops with the plan's liveness,
// each op whose outputs are all intermediates takes a block of its output's size class and the
// block goes back after the tensor's last reader, so the most blocks of each class live at once
// is what the arena reserves. Intermediates of equal size class then share storage across ops
// and across runs, and a steady-state run takes no fresh memory (fresh pages cost ~10 us per
// 4 KiB on our hosts). The reservation counts in bytes_held() and against the memory limit from
// registration on; tensors in the arena are not counted again while a run holds them. A graph
// output never stays in the arena (one that views an intermediate is copied out), so once a run
// ends every arena block is free again and the arena can go with its graph.
//
// T is the backend's tensor handle; TableTraits<T> says how to read its meta and which storage
// it uses (views share a storage, which bytes_held() counts once while any entry uses it).
#pragma once
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <variant>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
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
  size_t bytes_held() const final { return bytes_held_ + graph_bytes_; }
  void set_memory_limit(uint64_t bytes, RefuseFn refuse) final {
    memory_limit_ = bytes;
    refuse_ = std::move(refuse);
  }
  Result<ir::GraphId> register_graph(ir::Graph graph) final;
  Status run_graph(ir::GraphId id, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) final;
  Result<GraphMemory> graph_memory(ir::GraphId id) const final;

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

  // Graph buffer planning hooks (see the top of this file); a backend without them runs graphs
  // from its usual allocator. use_arena(pool) asks run() to take outputs from `pool` until
  // use_arena(nullptr); in_arena says whether a tensor's storage is the arena's;
  // copy_out_of_arena makes a copy of it in ordinary storage.
  virtual bool plans_graph_buffers() const { return false; }
  virtual void use_arena(BufferPool*) {}
  virtual bool in_arena(const T&, const BufferPool&) const { return false; }
  virtual Result<T> copy_out_of_arena(const T& t) { return t; }

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
        // An arena block was counted when its graph was registered.
        held = arena_ && in_arena(t, *arena_) ? 0 : bytes;
        bytes_held_ += held;
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
    // Per op: whether its outputs are all intermediates, so it allocates from the arena.
    std::vector<bool> from_arena;
    std::unique_ptr<BufferPool> arena;  // null: the backend plans no buffers
    uint64_t arena_bytes = 0;
    uint64_t reserved_blocks = 0;
  };
  // The arena a graph needs (see the top of this file); an over-limit one is refused before any
  // of it is allocated.
  Status plan_arena(RegisteredGraph& g);
  // run_graph without the poisoning of a bad call's outputs; sets ran_ once the ops start.
  Status run_graph_checked(ir::GraphId id, std::span<const ir::TensorId> inputs,
                           std::span<const ir::TensorId> outputs);
  // A run's end: graph outputs that view arena storage get storage of their own.
  void copy_outputs_out_of_arena(std::span<const ir::TensorId> outputs);

  // Declared before the table, so the table (whose tensors may use arena storage) goes first.
  std::unordered_map<ir::GraphId, RegisteredGraph> graphs_;
  Table table_;
  std::unordered_map<const void*, std::pair<size_t, size_t>> storages_;  // id -> (refs, bytes)
  uint64_t graph_bytes_ = 0;   // every graph's arena
  BufferPool* arena_ = nullptr;  // the arena of the graph op running now
  bool ran_ = false;             // the last run_graph call got past its checks
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
  if (refuse_ && !arena_) {  // an arena's tensors were counted when the graph was registered
    uint64_t need = 0;
    for (const TensorMeta& m : *metas)
      need += static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
    if (bytes_held() + need > memory_limit_) {
      Status err = refuse_(op, bytes_held(), need);
      poison(outs, &*metas, err);
      return err;
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
  RegisteredGraph g{std::move(graph), std::move(plan), {}, nullptr, 0, 0};
  if (plans_graph_buffers()) TW_RETURN_NOT_OK(plan_arena(g));
  graph_bytes_ += g.arena_bytes;
  const ir::GraphId id = next_graph_++;
  graphs_.emplace(id, std::move(g));
  return id;
}

template <class T>
Status TableBackend<T>::plan_arena(RegisteredGraph& g) {
  const ir::Graph& graph = g.graph;
  std::unordered_set<ir::TensorId> outputs(graph.output_ids.begin(), graph.output_ids.end());
  std::unordered_map<ir::TensorId, TensorMeta> metas;
  for (size_t i = 0; i < graph.inputs.size(); ++i) metas.emplace(graph.input_ids[i], graph.inputs[i]);
  const ir::MetaLookup lookup = [&](ir::TensorId id) -> Result<TensorMeta> {
    auto it = metas.find(id);
    if (it == metas.end()) return not_found("tensor " + tensor_id_str(id));
    return it->second;
  };
  std::unordered_map<ir::TensorId, size_t> block_of;  // intermediate -> its block's size class
  std::map<size_t, std::pair<uint64_t, uint64_t>> blocks;  // size class -> (live, most live)
  g.from_arena.assign(graph.ops.size(), false);
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const ir::Op& op = graph.ops[i];
    // validate_graph inferred every op already; this repeats it to learn the output sizes.
    TW_ASSIGN_OR_RETURN(std::vector<TensorMeta> out_metas, ir::infer(op, lookup));
    const std::vector<ir::TensorId> outs = ir::op_outputs(op);
    bool intermediates = true;
    for (size_t k = 0; k < outs.size(); ++k) {
      metas.emplace(outs[k], out_metas[k]);
      if (outputs.count(outs[k])) intermediates = false;
    }
    g.from_arena[i] = intermediates;
    if (intermediates) {
      for (size_t k = 0; k < outs.size(); ++k) {
        const uint64_t bytes = static_cast<uint64_t>(numel(out_metas[k].shape)) *
                               dtype_size(out_metas[k].dtype);
        const size_t cls = BufferPool::size_class(std::max<uint64_t>(bytes, 1));
        auto& [live, most] = blocks[cls];
        most = std::max(most, ++live);
        block_of[outs[k]] = cls;
      }
    }
    for (ir::TensorId id : g.plan.free_after[i]) {
      auto b = block_of.find(id);
      if (b != block_of.end()) --blocks[b->second].first;
    }
  }
  uint64_t need = 0;
  for (const auto& [cls, counts] : blocks) need += cls * counts.second;
  if (bytes_held() + need > memory_limit_) {
    return resource_exhausted("register_graph: the graph's planned buffers take " +
                              std::to_string(need) + " bytes beside the " +
                              std::to_string(bytes_held()) + " held, over the limit of " +
                              std::to_string(memory_limit_) + " bytes");
  }
  // Reserve the blocks now: the first run takes no fresh memory either. The arena keeps
  // whatever a run hands back (views can keep a block a little longer than planned, and a
  // later run then finds the extra block cached).
  g.arena = std::make_unique<BufferPool>(SIZE_MAX);
  {
    std::vector<Buffer> reserve;
    for (const auto& [cls, counts] : blocks) {
      for (uint64_t k = 0; k < counts.second; ++k) reserve.push_back(g.arena->allocate(cls));
    }
  }
  g.arena_bytes = need;
  g.reserved_blocks = g.arena->stats().allocations;
  return Status::OK();
}

template <class T>
void TableBackend<T>::copy_outputs_out_of_arena(std::span<const ir::TensorId> outputs) {
  for (ir::TensorId id : outputs) {
    auto it = table_.find(id);
    if (it == table_.end()) continue;
    const T* t = std::get_if<T>(&it->second);
    if (!t || !in_arena(*t, *arena_)) continue;
    Result<T> copy = copy_out_of_arena(*t);
    const TensorMeta m = TableTraits<T>::meta(*t);
    erase(it);
    if (copy.ok()) {
      insert(id, std::move(copy).value());
    } else {
      table_[id] = Poisoned{m, copy.status()};
    }
  }
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
Status TableBackend<T>::run_graph(ir::GraphId id, std::span<const ir::TensorId> inputs,
                                  std::span<const ir::TensorId> outputs) {
  Status st = run_graph_checked(id, inputs, outputs);
  if (!st.ok() && !ran_) {
    // A bad call: nothing ran; the outputs carry the reason (poison() leaves live ids alone).
    poison(std::vector<ir::TensorId>(outputs.begin(), outputs.end()), nullptr, st);
  }
  return st;
}

template <class T>
Status TableBackend<T>::run_graph_checked(ir::GraphId id, std::span<const ir::TensorId> inputs,
                                          std::span<const ir::TensorId> outputs) {
  ran_ = false;
  auto g = graphs_.find(id);
  if (g == graphs_.end()) return not_found("run_graph: unknown graph " + std::to_string(id));
  const RegisteredGraph& rg = g->second;
  const ir::Graph& graph = rg.graph;
  const ir::GraphPlan& plan = rg.plan;
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
  ran_ = true;
  Status first_error;
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    ir::Op op = graph.ops[i];
    ir::remap_op(op, to_table);
    arena_ = rg.arena && rg.from_arena[i] ? rg.arena.get() : nullptr;
    use_arena(arena_);
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
  use_arena(nullptr);
  arena_ = nullptr;
  if (rg.arena) {
    arena_ = rg.arena.get();
    copy_outputs_out_of_arena(outputs);
    arena_ = nullptr;
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
