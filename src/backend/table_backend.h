// What every backend shares, whatever holds its tensors: the table (id -> tensor, or the error
// that poisoned it), the checks every op passes before a kernel runs, and storage accounting.
//
// execute() refuses an op the backend does not support (naming op and backend), requires fresh
// and distinct output ids, propagates the error of a poisoned input to the outputs, validates
// the op with ir::infer, and only then calls the backend's run_into(). Whatever it returns or
// throws, the op's outputs end up either set or poisoned, and no exception leaves execute().
//
// Graphs (register_graph, run_graph) are planned at registration (graph_program.h: slots, each
// op's metas, an arena of buffers for a backend that plans them) and run without execute()'s
// per-op checks, bit-identical to the same ops run eagerly (table_backend_graphs.h, included at
// the end of this file); a backend may instead replay a graph in its device's own recorded form
// (run_graph_program: the cuda backend's CUDA Graphs), the values being the same.
//
// T is the backend's tensor handle; TableTraits<T> says how to read its meta and which storage
// it uses (views share a storage, which bytes_held() counts once while any entry uses it).
#pragma once
#include <exception>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "backend/backend.h"
#include "backend/graph_program.h"
#include "core/buffer.h"
#include "ir/infer.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

template <class T>
struct TableTraits;  // static TensorMeta meta(const T&); static uint64_t nbytes(const T&) (a
                     // read's bytes, numel x dtype size); static std::pair<const void*, size_t>
                     // storage(const T&): identity and bytes of the storage (null: none)

inline std::string tensor_id_str(ir::TensorId id) { return "%" + std::to_string(id); }

// The error for an op a backend has no kernel for.
inline Status unsupported_op(const std::string& op, const std::string& backend) {
  return unimplemented(op + ": not supported by the " + backend +
                       " backend; run it on a device whose backend supports it (such as cpu)");
}

// The error for a dtype (or a case of an op) a backend declares it does not run: names the op,
// the dtype, the backend and why, so that the refusal reads as one (the op table checks that).
inline Status unsupported_dtype(const std::string& op, DType dtype, const std::string& backend,
                                const std::string& why) {
  return unimplemented(op + " on " + std::string(dtype_name(dtype)) + ": not supported by the " +
                       backend + " backend (" + why +
                       "); cast it, or run it on a device whose backend supports it (such as cpu)");
}

template <class T>
class TableBackend : public Backend {
 public:
  Status execute(const ir::Op& op) final { return execute_with(op, nullptr); }
  Status execute_inferred(const ir::Op& op, std::vector<TensorMeta> metas) final {
    return execute_with(op, &metas);
  }
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
  Result<uint64_t> nbytes(ir::TensorId id) const final {
    auto it = table_.find(id);
    if (it == table_.end()) return not_found("unknown tensor id " + tensor_id_str(id));
    if (auto* p = std::get_if<Poisoned>(&it->second)) {
      return static_cast<uint64_t>(numel(p->meta.shape)) * dtype_size(p->meta.dtype);
    }
    return TableTraits<T>::nbytes(std::get<T>(it->second));
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
    if (slots_ && id - slot_base_ < slots_->size())
      return slot_tensor((*slots_)[id - slot_base_], id);
    auto it = table_.find(id);
    if (it == table_.end()) return not_found("unknown tensor id " + tensor_id_str(id));
    if (auto* p = std::get_if<Poisoned>(&it->second)) return p->error;
    return &std::get<T>(it->second);
  }

 protected:
  // What execute() and run_graph() hand a backend with an op: its input ids (op_inputs order,
  // all live: tensor() finds them), output ids (op_outputs order) and the outputs' inferred metas.
  struct OpIo {
    std::span<const ir::TensorId> ins, outs;
    const std::vector<TensorMeta>& metas;
    // A graph run's offer (0: none): this input dies with the op and has the output's meta, so
    // a backend may compute the output in its storage (see writes_in_place).
    ir::TensorId donor = 0;
    // A graph run's note that only elementwise ops (writes_in_place kinds) read the op's one
    // output: a backend may hand over a contiguous copy instead of a strided view, which each
    // of them would otherwise read in strides (the values are the same).
    bool elementwise_readers = false;
    // An eager op's inputs as execute() found them in the table, in `ins` order (null: none
    // given, as for a graph run's; the backend looks them up).
    const T* const* in_tensors = nullptr;
  };
  // Runs an op that passed every check, moving one tensor per output into done[0, outs.size()).
  // A backend whose dispatch can work from `io` overrides this (the cpu backend: no per-op
  // vectors); the default runs run() and moves its results.
  virtual Status run_into(const ir::Op& op, const OpIo& io, T* done) {
    TW_ASSIGN_OR_RETURN(std::vector<T> made, run(op, io.metas));
    if (made.size() != io.outs.size()) {
      return internal_error("the " + this->name() + " backend produced " +
                            std::to_string(made.size()) + " outputs, expected " +
                            std::to_string(io.outs.size()));
    }
    for (size_t i = 0; i < made.size(); ++i) done[i] = std::move(made[i]);
    return Status::OK();
  }
  // The same, returning one tensor per output in op_outputs order (`metas` in that order too).
  virtual Result<std::vector<T>> run(const ir::Op& op, const std::vector<TensorMeta>& metas) {
    (void)metas;
    return internal_error(ir::op_name(op) + ": the " + name() + " backend dispatches no op");
  }

 private:
  struct Poisoned;  // (defined below)
  struct RegisteredGraph;

 protected:
  // A registered graph's run as run_graph hands it to run_graph_program (below), after checking
  // the call and binding the caller's inputs: the graph's program, its inputs and, once the ops
  // ran, its outputs.
  class GraphRun {
   public:
    ir::GraphId id() const { return id_; }
    const GraphProgram& program() const { return g_; }
    // Input i's tensor as bound now; null when the caller gave a poisoned one.
    const T* input(size_t i) const { return g_.slots[i] ? std::get_if<T>(&*g_.slots[i]) : nullptr; }
    // Binds input i to `t` in place of the caller's tensor (same meta and values: a copy the
    // backend keeps, say), for the ops run_ops() runs next.
    void bind_input(size_t i, T t) { g_.slots[i].emplace(std::in_place_type<T>, std::move(t)); }
    // Runs the graph's ops one by one, freeing each intermediate after its last reader: what
    // run_graph does by default. Returns the first op's error (its outputs, and what is computed
    // from them, are poisoned with it).
    Status run_ops() { return b_.run_graph_ops(g_); }
    // Output k (graph output order) once the ops ran or set_output set it; null when poisoned.
    T* output(size_t k) {
      std::optional<Entry>& e = g_.slots[g_.output_slots[k]];
      return e ? std::get_if<T>(&*e) : nullptr;
    }
    void set_output(size_t k, T t) {
      g_.slots[g_.output_slots[k]].emplace(std::in_place_type<T>, std::move(t));
    }
    void set_output_error(size_t k, const Status& error) {
      const uint32_t s = g_.output_slots[k];
      TensorMeta m = output(k) ? TableTraits<T>::meta(*output(k)) : output_meta(k);
      g_.slots[s] = Poisoned{std::move(m), error};
    }
    // Counts `delta` bytes (negative: releases them) of buffers the backend keeps for this
    // graph's recorded form in bytes_held(), beside the graph's arena.
    void count_bytes(int64_t delta) { b_.graph_bytes_ += static_cast<uint64_t>(delta); }
    // Forgets whatever run_ops() made and binds the caller's inputs again: the run as it was
    // handed over (a backend that recorded the ops instead of running them starts again here).
    void reset() {
      for (size_t s = 0; s < g_.slots.size(); ++s) b_.free_slot(g_.slots[s]);
      for (size_t i = 0; i < inputs_.size(); ++i) g_.slots[i] = b_.table_.at(inputs_[i]);
    }

   private:
    friend class TableBackend;
    GraphRun(TableBackend& b, RegisteredGraph& g, ir::GraphId id,
             std::span<const ir::TensorId> inputs)
        : b_(b), g_(g), id_(id), inputs_(inputs) {}
    TensorMeta output_meta(size_t k) const {
      const uint32_t s = g_.output_slots[k];
      if (s < g_.input_metas.size()) return g_.input_metas[s];
      for (const GraphOp& op : g_.ops) {
        for (uint32_t j = op.out_begin; j < op.out_end; ++j) {
          if (g_.out_slots[j] == s) return op.metas[j - op.out_begin];
        }
      }
      return TensorMeta{};
    }
    TableBackend& b_;
    RegisteredGraph& g_;
    ir::GraphId id_;
    std::span<const ir::TensorId> inputs_;
  };
  // Runs a registered graph (run_graph checked the call and bound its inputs). The default runs
  // the ops one by one (run.run_ops()). A backend that replays a graph in its device's own
  // recorded form (a CUDA Graph, a recorded Vulkan command buffer) overrides it: it may bind its
  // own copies of the inputs, run the ops while it records them, or run none and set every
  // output itself. Either way it leaves each output set or poisoned, with the values the ops
  // run one by one would give, and returns what run_ops() would.
  virtual Status run_graph_program(GraphRun& run) { return run.run_ops(); }

  // Graph buffer planning hooks (graph_program.h); a backend without them runs graphs
  // from its usual allocator. use_arena(pool) asks run_into() to take outputs from `pool` until
  // use_arena(nullptr); in_arena says whether a tensor's storage is the arena's;
  // copy_out_of_arena makes a copy of it in ordinary storage.
  virtual bool plans_graph_buffers() const { return false; }
  // Whether the backend's kernel for `op` may write its one output over an input of the same
  // meta (each output element computed from the input elements at its own index only): a graph
  // run then offers it an input that dies with the op (OpIo::donor), whose storage the backend
  // takes when no other tensor shares it. Saves the write to fresh memory and halves what the
  // op touches; the values are the same.
  virtual bool writes_in_place(const ir::Op&) const { return false; }
  virtual void use_arena(BufferPool*) {}
  virtual bool in_arena(const T&, const BufferPool&) const { return false; }
  virtual Result<T> copy_out_of_arena(const T& t) { return t; }
  // Called with a tensor the table or a graph run is about to destroy: a backend may keep what
  // is left of its handle (the cpu backend keeps the shape and stride arrays for the next
  // output) once it lets go of the storage.
  virtual void recycle(T&) {}

 private:
  // execute(), with the outputs' metas given (execute_inferred) or inferred here (null).
  Status execute_with(const ir::Op& op, std::vector<TensorMeta>* inferred);
  struct Poisoned {
    TensorMeta meta;
    Status error;
  };
  using Entry = std::variant<T, Poisoned>;
  using Table = std::unordered_map<ir::TensorId, Entry>;

  Status run_guarded(const ir::Op& op, const OpIo& io, T* done);
  void poison(const std::vector<ir::TensorId>& outs, const std::vector<TensorMeta>* metas,
              const Status& error) {
    for (size_t i = 0; i < outs.size(); ++i) {
      if (outs[i] == 0 || table_.count(outs[i])) continue;  // never overwrite a live tensor
      TensorMeta m = metas && i < metas->size() ? (*metas)[i] : TensorMeta{};
      table_[outs[i]] = Poisoned{m, error};
    }
  }
  // An eager op typically adds a tensor and a storage and a drop removes them again: the map
  // nodes are kept (a few) and reused, so that this bookkeeping allocates nothing per op.
  static constexpr size_t kSpareNodes = 32;
  void insert(ir::TensorId id, T t) {
    const auto [sid, bytes] = TableTraits<T>::storage(t);
    if (sid) {
      auto s = storages_.find(sid);
      if (s == storages_.end()) {
        if (spare_storage_nodes_.empty()) {
          s = storages_.emplace(sid, std::pair<size_t, size_t>{0, 0}).first;
        } else {
          auto node = std::move(spare_storage_nodes_.back());
          spare_storage_nodes_.pop_back();
          node.key() = sid;
          node.mapped() = {0, 0};
          s = storages_.insert(std::move(node)).position;
        }
      }
      auto& [refs, held] = s->second;
      if (refs++ == 0) {
        held = bytes;
        bytes_held_ += bytes;
      }
    }
    auto it = table_.find(id);
    if (it != table_.end()) {
      it->second = Entry(std::move(t));
    } else if (spare_table_nodes_.empty()) {
      table_.emplace(id, Entry(std::move(t)));
    } else {
      auto node = std::move(spare_table_nodes_.back());
      spare_table_nodes_.pop_back();
      node.key() = id;
      node.mapped() = Entry(std::move(t));
      table_.insert(std::move(node));
    }
  }
  void erase(typename Table::iterator it) {
    if (auto* t = std::get_if<T>(&it->second)) {
      const void* sid = TableTraits<T>::storage(*t).first;
      auto s = sid ? storages_.find(sid) : storages_.end();
      if (s != storages_.end() && --s->second.first == 0) {
        bytes_held_ -= s->second.second;
        auto node = storages_.extract(s);
        if (spare_storage_nodes_.size() < kSpareNodes) {
          spare_storage_nodes_.push_back(std::move(node));
        }
      }
      recycle(*t);
    }
    auto node = table_.extract(it);
    // The tensor goes now (its storage may be freed); only the node is kept.
    node.mapped().template emplace<Poisoned>();
    if (spare_table_nodes_.size() < kSpareNodes) spare_table_nodes_.push_back(std::move(node));
  }
  void free_slot(std::optional<Entry>& e) {
    if (e && std::holds_alternative<T>(*e)) recycle(std::get<T>(*e));
    e.reset();
  }

  // A registered graph: its program (graph_program.h) and the slots a run fills.
  struct RegisteredGraph : GraphProgram {
    std::vector<std::optional<Entry>> slots;  // a run's tensors; all empty between runs
  };
  Result<const T*> slot_tensor(const std::optional<Entry>& e, ir::TensorId id) const {
    if (!e) return not_found("unknown tensor id " + tensor_id_str(id));
    if (auto* p = std::get_if<Poisoned>(&*e)) return p->error;
    return &std::get<T>(*e);
  }
  // The checks of a run's arguments, before anything runs.
  Status check_run(const RegisteredGraph& g, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) const;
  // Runs graph op `op` on the slots; returns its error (already recorded in its outputs).
  Status run_graph_op(RegisteredGraph& g, const GraphOp& op);
  // Runs every op of g on its slots (inputs bound), freeing intermediates; the first error.
  Status run_graph_ops(RegisteredGraph& g);

  // Where run_into() puts an op's results (capacity kept across ops: no per-op allocation).
  std::vector<T> done_;
  std::vector<ir::TensorId> ins_scratch_, outs_scratch_;  // execute_with's, reused
  // execute_with's look-up of each input, in ins_scratch_'s order (null: unknown id), so that
  // inference and the kernel find the inputs without hashing their ids again.
  std::vector<const T*> in_tensors_;
  // Declared before the table, so the table (whose tensors may use arena storage) goes first.
  std::unordered_map<ir::GraphId, RegisteredGraph> graphs_;
  Table table_;
  using Storages = std::unordered_map<const void*, std::pair<size_t, size_t>>;
  Storages storages_;  // id -> (refs, bytes)
  std::vector<typename Table::node_type> spare_table_nodes_;
  std::vector<typename Storages::node_type> spare_storage_nodes_;
  uint64_t graph_bytes_ = 0;     // every graph's arena
  BufferPool* arena_ = nullptr;  // the arena of the graph op running now
  // The slots of the graph running now (null: none), and the id of slot 0.
  std::vector<std::optional<Entry>>* slots_ = nullptr;
  ir::TensorId slot_base_ = 0;
  ir::GraphId next_graph_ = 1;
  ir::TensorId next_scratch_ = kGraphScratchIds;
  size_t bytes_held_ = 0;
  uint64_t memory_limit_ = UINT64_MAX;
  RefuseFn refuse_;
};

template <class T>
Status TableBackend<T>::execute_with(const ir::Op& op, std::vector<TensorMeta>* inferred) {
  if (std::holds_alternative<std::monostate>(op)) return invalid_argument("empty op");
  // (Into vectors kept for every op: execute() is not re-entered while it runs one.)
  ir::op_outputs(op, outs_scratch_);
  const std::vector<ir::TensorId>& outs = outs_scratch_;
  // The op's name only for errors: building it for every op costs more than small ops do.
  auto name = [&op] { return ir::op_name(op); };
  // Output ids must be fresh and distinct; an op may not overwrite a live tensor. A refusal
  // poisons the op's fresh ids (a repeated one once) with it, as any failed op's (§8.2 of
  // docs/protocol.md), so that a read of them reports it. (An op has a few outputs: comparing
  // pairs beats a set.)
  for (size_t i = 0; i < outs.size(); ++i) {
    const ir::TensorId id = outs[i];
    Status bad;
    if (id == 0) {
      bad = invalid_argument(name() + ": output id 0 is reserved for 'no tensor'");
    } else if (table_.count(id)) {
      bad = invalid_argument(name() + ": output id " + tensor_id_str(id) + " is already in use");
    }
    for (size_t j = 0; bad.ok() && j < i; ++j) {
      if (outs[j] == id) {
        bad = invalid_argument(name() + ": output id " + tensor_id_str(id) + " appears twice");
      }
    }
    if (!bad.ok()) {
      poison(outs, nullptr, bad);
      return bad;
    }
  }
  if (!supports(ir::op_code(op))) {
    Status err = unsupported_op(name(), this->name());
    poison(outs, nullptr, err);
    return err;
  }
  // An input poisoned by an earlier failure poisons the outputs with the same error.
  ir::op_inputs(op, ins_scratch_);
  const std::vector<ir::TensorId>& ins = ins_scratch_;
  in_tensors_.clear();
  for (ir::TensorId id : ins) {
    auto it = table_.find(id);
    if (it == table_.end()) {  // inference reports unknown ids
      in_tensors_.push_back(nullptr);
      continue;
    }
    if (auto* p = std::get_if<Poisoned>(&it->second)) {
      Status err = p->error;
      poison(outs, nullptr, err);
      return err;
    }
    in_tensors_.push_back(&std::get<T>(it->second));
  }
  // The inputs' metas from the tensors just found.
  auto input_meta = [this](ir::TensorId id) -> Result<TensorMeta> {
    for (size_t i = 0; i < ins_scratch_.size(); ++i) {
      if (ins_scratch_[i] == id && in_tensors_[i]) return TableTraits<T>::meta(*in_tensors_[i]);
    }
    return meta(id);  // (unknown: meta() says so)
  };
  Result<std::vector<TensorMeta>> metas =
      inferred ? Result<std::vector<TensorMeta>>(std::move(*inferred)) : ir::infer(op, input_meta);
  if (!metas.ok()) {
    poison(outs, nullptr, metas.status());
    return metas.status();
  }
  if (refuse_) {
    uint64_t need = 0;
    for (const TensorMeta& m : *metas)
      need += static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
    if (bytes_held() + need > memory_limit_) {
      Status err = refuse_(op, bytes_held(), need);
      if (!err.ok()) {
        poison(outs, &*metas, err);
        return err;
      }
    }
  }
  done_.resize(outs.size());
  OpIo io{ins, outs, *metas};
  io.in_tensors = in_tensors_.data();
  Status st = run_guarded(op, io, done_.data());
  if (st.ok()) {
    for (size_t i = 0; i < outs.size(); ++i) insert(outs[i], std::move(done_[i]));
    done_.clear();
    return Status::OK();
  }
  done_.clear();
  const std::string n = name();
  if (st.message().rfind(n + ":", 0) != 0) st = st.with_context(n);
  poison(outs, &*metas, st);
  return st;
}

// A kernel that throws (out of memory, or a library's exception) fails its op, never the
// process.
template <class T>
Status TableBackend<T>::run_guarded(const ir::Op& op, const OpIo& io, T* done) {
  try {
    return run_into(op, io, done);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("out of memory in the " + name() + " backend");
  } catch (const std::exception& e) {
    return internal_error("the " + name() + " backend failed: " + e.what());
  }
}

}  // namespace tw

#include "backend/table_backend_graphs.h"  // the graph members' definitions
TW_INTERNAL_END
