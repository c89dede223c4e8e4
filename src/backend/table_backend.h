// What every backend shares, whatever holds its tensors: the table (id -> tensor, or the error
// that poisoned it), the checks every op passes before a kernel runs, and storage accounting.
//
// execute() refuses an op the backend does not support (naming op and backend), requires fresh
// and distinct output ids, propagates the error of a poisoned input to the outputs, validates
// the op with ir::infer, and only then calls the backend's run_into(). Whatever it returns or
// throws, the op's outputs end up either set or poisoned, and no exception leaves execute().
//
// Graphs (register_graph, run_graph) are validated once with ir::validate_graph, which is what
// lets a run skip execute()'s per-op checks: registration renumbers the graph's tensors to dense
// slots (ids from the graph's own range at kGraphScratchIds and up) and keeps each op's inferred
// output metas, and a run hands each op with those metas straight to the backend's run_into(), the
// kernels execute() would call, so it computes exactly what the same ops submitted eagerly would.
// Within a run the tensors live in the graph's slot array, not the table (tensor() looks there
// for the graph's ids), and a poisoned input poisons what is computed from it as in eager
// execution; the outputs move to the table under the caller's ids at the end.
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
// ends every arena block is free again and the arena can go with its graph. A backend whose
// kernel for an op computes each output element from the inputs at its index only
// (writes_in_place) is offered the op's input that dies with it and has the output's meta, and
// may write the output over it instead of taking a block (the plan still reserves one).
//
// T is the backend's tensor handle; TableTraits<T> says how to read its meta and which storage
// it uses (views share a storage, which bytes_held() counts once while any entry uses it).
#pragma once
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <optional>
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

// Within a graph run the graph's tensors have ids from here up (each registered graph has a range
// of its own). They live in the graph's slots, never in the table, and only the graph's ops name
// them, so no id a caller picks (the API's count up from 1; a peer's are anything) can clash.
inline constexpr ir::TensorId kGraphScratchIds = ir::TensorId{1} << 63;

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

  // Graph buffer planning hooks (see the top of this file); a backend without them runs graphs
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

  // A registered graph, as registration prepared it for runs. Slot j is the graph's tensor with
  // id base + j: first the inputs, then every op output in op order.
  struct GraphOp {
    ir::Op op;                      // its ids are slot ids (RegisteredGraph::base + slot)
    std::vector<TensorMeta> metas;  // its outputs' metas, inferred at registration
    uint32_t in_begin = 0, in_end = 0, out_begin = 0, out_end = 0, free_begin = 0, free_end = 0;
    bool from_arena = false;           // its outputs are all intermediates: allocate from the arena
    uint32_t donor = UINT32_MAX;       // the input slot offered to the output (writes_in_place)
    bool elementwise_readers = false;  // OpIo::elementwise_readers
  };
  struct RegisteredGraph {
    std::vector<TensorMeta> input_metas;
    std::vector<GraphOp> ops;
    // Slot indices, shared by the ops' ranges above: inputs read, outputs made, slots freed after.
    std::vector<uint32_t> in_slots, out_slots, free_slots;
    // The same inputs and outputs as slot ids, the form run_into() takes.
    std::vector<ir::TensorId> in_ids, out_ids;
    std::vector<uint32_t> output_slots;  // the graph's outputs, in run order
    ir::TensorId base = 0;
    uint32_t slot_count = 0;
    std::vector<std::optional<Entry>> slots;  // a run's tensors; all empty between runs
    std::unique_ptr<BufferPool> arena;        // null: the backend plans no buffers
    uint64_t arena_bytes = 0;
    uint64_t reserved_blocks = 0;
  };
  Result<const T*> slot_tensor(const std::optional<Entry>& e, ir::TensorId id) const {
    if (!e) return not_found("unknown tensor id " + tensor_id_str(id));
    if (auto* p = std::get_if<Poisoned>(&*e)) return p->error;
    return &std::get<T>(*e);
  }
  // Renumbers the validated graph to slots and infers each op's metas.
  RegisteredGraph prepare_graph(ir::Graph graph, const ir::GraphPlan& plan);
  // The arena a graph needs (see the top of this file); an over-limit one is refused before any
  // of it is allocated.
  Status plan_arena(RegisteredGraph& g);
  // The checks of a run's arguments, before anything runs.
  Status check_run(const RegisteredGraph& g, std::span<const ir::TensorId> inputs,
                   std::span<const ir::TensorId> outputs) const;
  // Runs graph op `op` on the slots; returns its error (already recorded in its outputs).
  Status run_graph_op(RegisteredGraph& g, const GraphOp& op);

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
  // Output ids must be fresh and distinct; an op may not overwrite a live tensor. (An op has a
  // few outputs: comparing pairs beats a set.)
  for (size_t i = 0; i < outs.size(); ++i) {
    const ir::TensorId id = outs[i];
    if (id == 0) return invalid_argument(name() + ": output id 0 is reserved for 'no tensor'");
    if (table_.count(id)) {
      return invalid_argument(name() + ": output id " + tensor_id_str(id) + " is already in use");
    }
    for (size_t j = 0; j < i; ++j) {
      if (outs[j] == id) {
        return invalid_argument(name() + ": output id " + tensor_id_str(id) + " appears twice");
      }
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

template <class T>
Result<ir::GraphId> TableBackend<T>::register_graph(ir::Graph graph) {
  TW_ASSIGN_OR_RETURN(ir::GraphPlan plan, ir::validate_graph(graph));
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    if (!supports(ir::op_code(graph.ops[i]))) {
      return unsupported_op(ir::op_name(graph.ops[i]), this->name())
          .with_context("graph op " + std::to_string(i));
    }
  }
  RegisteredGraph g = prepare_graph(std::move(graph), plan);
  if (plans_graph_buffers()) TW_RETURN_NOT_OK(plan_arena(g));
  next_scratch_ += g.slot_count;
  graph_bytes_ += g.arena_bytes;
  const ir::GraphId id = next_graph_++;
  graphs_.emplace(id, std::move(g));
  return id;
}

template <class T>
typename TableBackend<T>::RegisteredGraph TableBackend<T>::prepare_graph(
    ir::Graph graph, const ir::GraphPlan& plan) {
  RegisteredGraph g;
  g.base = next_scratch_;
  g.input_metas = std::move(graph.inputs);
  std::unordered_map<ir::TensorId, uint32_t> slot;  // graph-local id -> slot
  std::vector<TensorMeta> metas;                    // by slot
  for (ir::TensorId id : graph.input_ids) {
    slot.emplace(id, static_cast<uint32_t>(metas.size()));
    metas.push_back(g.input_metas[metas.size()]);
  }
  const ir::MetaLookup lookup = [&](ir::TensorId id) -> Result<TensorMeta> {
    return metas.at(id - g.base);
  };
  const std::function<ir::TensorId(ir::TensorId)> to_slot_id = [&](ir::TensorId local) {
    return g.base + slot.emplace(local, static_cast<uint32_t>(slot.size())).first->second;
  };
  g.ops.reserve(graph.ops.size());
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    GraphOp op;
    op.op = std::move(graph.ops[i]);
    // Inputs were all seen before (validation), so only outputs take new slots, in op order.
    ir::remap_op(op.op, to_slot_id);
    // validate_graph inferred the same op on the same metas; it cannot fail here.
    Result<std::vector<TensorMeta>> out = ir::infer(op.op, lookup);
    op.metas = out.ok() ? std::move(out).value() : std::vector<TensorMeta>{};
    op.in_begin = static_cast<uint32_t>(g.in_slots.size());
    for (ir::TensorId id : ir::op_inputs(op.op)) {
      g.in_slots.push_back(static_cast<uint32_t>(id - g.base));
      g.in_ids.push_back(id);
    }
    op.in_end = static_cast<uint32_t>(g.in_slots.size());
    op.out_begin = static_cast<uint32_t>(g.out_slots.size());
    for (ir::TensorId id : ir::op_outputs(op.op)) {
      g.out_slots.push_back(static_cast<uint32_t>(id - g.base));
      g.out_ids.push_back(id);
    }
    op.out_end = static_cast<uint32_t>(g.out_slots.size());
    metas.resize(slot.size());
    for (uint32_t k = op.out_begin; k < op.out_end; ++k) {
      metas[g.out_slots[k]] = op.metas[k - op.out_begin];
    }
    op.free_begin = static_cast<uint32_t>(g.free_slots.size());
    for (ir::TensorId local : plan.free_after[i]) g.free_slots.push_back(slot.at(local));
    op.free_end = static_cast<uint32_t>(g.free_slots.size());
    g.ops.push_back(std::move(op));
  }
  std::unordered_set<uint32_t> outputs;
  for (ir::TensorId id : graph.output_ids) {
    g.output_slots.push_back(slot.at(id));
    outputs.insert(slot.at(id));
  }
  for (GraphOp& op : g.ops) {
    op.from_arena = true;
    for (uint32_t k = op.out_begin; k < op.out_end; ++k) {
      if (outputs.count(g.out_slots[k])) op.from_arena = false;
    }
  }
  // Intermediates read, and only by writes_in_place kinds of op.
  std::vector<char> read_by(slot.size(), 0);  // bit 0: read; bit 1: by another kind
  for (const GraphOp& op : g.ops) {
    const char kind = writes_in_place(op.op) ? 1 : 3;
    for (uint32_t i = op.in_begin; i < op.in_end; ++i) read_by[g.in_slots[i]] |= kind;
  }
  for (GraphOp& op : g.ops) {
    op.elementwise_readers =
        op.from_arena && op.out_end - op.out_begin == 1 && read_by[g.out_slots[op.out_begin]] == 1;
  }
  // In-place offers: an intermediate made by an arena op (so its storage is the arena's), read
  // last by an arena op of one output with its meta.
  std::vector<char> arena_made(slot.size(), 0);
  for (GraphOp& op : g.ops) {
    if (op.from_arena && op.out_end - op.out_begin == 1 && writes_in_place(op.op)) {
      for (uint32_t k = op.free_begin; k < op.free_end && op.donor == UINT32_MAX; ++k) {
        const uint32_t s = g.free_slots[k];
        bool read = false;
        for (uint32_t i = op.in_begin; i < op.in_end; ++i) read = read || g.in_slots[i] == s;
        if (read && arena_made[s] && metas[s] == op.metas[0]) op.donor = s;
      }
    }
    if (op.from_arena) {
      for (uint32_t k = op.out_begin; k < op.out_end; ++k) arena_made[g.out_slots[k]] = 1;
    }
  }
  g.slot_count = static_cast<uint32_t>(slot.size());
  return g;
}

template <class T>
Status TableBackend<T>::plan_arena(RegisteredGraph& g) {
  // Walk the ops as a run does: an arena op takes a block of each output's size class, and the
  // block returns after the tensor's last reader.
  std::vector<size_t> block_of(g.slot_count, 0);  // slot -> its block's size class (0: none)
  std::map<size_t, std::pair<uint64_t, uint64_t>> blocks;  // size class -> (live, most live)
  // Sizes saturate rather than wrap: a peer's graph of huge tensors is refused below, never
  // planned small.
  constexpr uint64_t kHuge = uint64_t{1} << 62;
  for (const GraphOp& op : g.ops) {
    if (op.from_arena) {
      for (uint32_t k = op.out_begin; k < op.out_end; ++k) {
        const TensorMeta& m = op.metas[k - op.out_begin];
        const uint64_t n = static_cast<uint64_t>(numel(m.shape));
        const uint64_t bytes = n > kHuge / 8 ? kHuge : n * dtype_size(m.dtype);
        const size_t cls =
            bytes >= kHuge ? kHuge : BufferPool::size_class(std::max<uint64_t>(bytes, 1));
        auto& [live, most] = blocks[cls];
        most = std::max(most, ++live);
        block_of[g.out_slots[k]] = cls;
      }
    }
    for (uint32_t k = op.free_begin; k < op.free_end; ++k) {
      if (size_t cls = block_of[g.free_slots[k]]) --blocks[cls].first;
    }
  }
  uint64_t need = 0;
  for (const auto& [cls, counts] : blocks) {
    need = counts.second > (kHuge - need) / cls ? kHuge : need + cls * counts.second;
  }
  if (need >= kHuge || bytes_held() + need > memory_limit_) {
    return resource_exhausted("register_graph: the graph's planned buffers take " +
                              std::to_string(need) + " bytes beside the " +
                              std::to_string(bytes_held()) + " held, over the limit of " +
                              std::to_string(memory_limit_) + " bytes");
  }
  // Reserve the blocks now: the first run takes no fresh memory either. The arena keeps
  // whatever a run hands back (views can keep a block a little longer than planned, and a
  // later run then finds the extra block cached).
  g.arena = std::make_unique<BufferPool>(SIZE_MAX);
  try {
    std::vector<Buffer> reserve;
    for (const auto& [cls, counts] : blocks) {
      for (uint64_t k = 0; k < counts.second; ++k) reserve.push_back(g.arena->allocate(cls));
    }
  } catch (const std::bad_alloc&) {
    g.arena.reset();
    return resource_exhausted("register_graph: out of memory reserving the graph's planned " +
                              std::to_string(need) + " bytes in the " + name() + " backend");
  }
  g.arena_bytes = need;
  g.reserved_blocks = g.arena->stats().allocations;
  return Status::OK();
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
  slots_ = &g.slots;
  slot_base_ = g.base;
  Status first_error;
  for (const GraphOp& op : g.ops) {
    Status st = run_graph_op(g, op);
    if (first_error.ok()) first_error = st;
    for (uint32_t k = op.free_begin; k < op.free_end; ++k) free_slot(g.slots[g.free_slots[k]]);
  }
  slots_ = nullptr;
  for (size_t k = 0; k < outputs.size(); ++k) {
    std::optional<Entry>& e = g.slots[g.output_slots[k]];
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
