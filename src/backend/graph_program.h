// Graph planning for TableBackend (table_backend.h): what registration makes of a graph that
// ir::validate_graph accepted, whatever a backend's tensors are. prepare_graph renumbers the
// graph's tensors to dense slots (ids from the graph's own range at kGraphScratchIds and up) and
// keeps each op's inferred output metas, its inputs, outputs and the slots freed after it (the
// validation's liveness), so that a run (table_backend_graphs.h) hands each op straight to the
// backend's kernels with no per-op checks and no look-ups by id.
//
// A backend that can take kernel outputs from a given pool (plans_graph_buffers: the cpu backend)
// gets an arena per graph, planned here (plan_arena): walking the ops with the plan's liveness,
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
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/status.h"
#include "ir/graph.h"
#include "ir/infer.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

// Within a graph run the graph's tensors have ids from here up (each registered graph has a range
// of its own). They live in the graph's slots, never in the table, and only the graph's ops name
// them, so no id a caller picks (the API's count up from 1; a peer's are anything) can clash.
inline constexpr ir::TensorId kGraphScratchIds = ir::TensorId{1} << 63;

// One op of a GraphProgram, with ranges into the program's slot arrays.
struct GraphOp {
  ir::Op op;                      // its ids are slot ids (GraphProgram::base + slot)
  std::vector<TensorMeta> metas;  // its outputs' metas, inferred at registration
  uint32_t in_begin = 0, in_end = 0, out_begin = 0, out_end = 0, free_begin = 0, free_end = 0;
  bool from_arena = false;           // its outputs are all intermediates: allocate from the arena
  uint32_t donor = UINT32_MAX;       // the input slot offered to the output (writes_in_place)
  bool elementwise_readers = false;  // TableBackend::OpIo::elementwise_readers
};
// A registered graph, as registration prepared it for runs. Slot j is the graph's tensor with
// id base + j: first the inputs, then every op output in op order.
struct GraphProgram {
  std::vector<TensorMeta> input_metas;
  std::vector<GraphOp> ops;
  // Slot indices, shared by the ops' ranges above: inputs read, outputs made, slots freed after.
  std::vector<uint32_t> in_slots, out_slots, free_slots;
  // The same inputs and outputs as slot ids, the form run_into() takes.
  std::vector<ir::TensorId> in_ids, out_ids;
  std::vector<uint32_t> output_slots;  // the graph's outputs, in run order
  ir::TensorId base = 0;
  uint32_t slot_count = 0;
  std::unique_ptr<BufferPool> arena;  // null: the backend plans no buffers
  uint64_t arena_bytes = 0;
  uint64_t reserved_blocks = 0;
};

// Renumbers a graph that ir::validate_graph accepted (giving `plan`) to slots from `base` and
// infers each op's metas; `writes_in_place` is the backend's TableBackend::writes_in_place.
inline GraphProgram prepare_graph(ir::Graph graph, const ir::GraphPlan& plan, ir::TensorId base,
                                  const std::function<bool(const ir::Op&)>& writes_in_place) {
  GraphProgram g;
  g.base = base;
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

// The arena a graph needs (see the top of this file), reserved in g.arena; an over-limit one
// (`held` bytes beside it over `limit`) is refused, naming `backend`, before any of it is
// allocated.
inline Status plan_arena(GraphProgram& g, uint64_t held, uint64_t limit,
                         const std::string& backend) {
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
  if (need >= kHuge || held + need > limit) {
    return resource_exhausted("register_graph: the graph's planned buffers take " +
                              std::to_string(need) + " bytes beside the " + std::to_string(held) +
                              " held, over the limit of " + std::to_string(limit) + " bytes");
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
                              std::to_string(need) + " bytes in the " + backend + " backend");
  }
  g.arena_bytes = need;
  g.reserved_blocks = g.arena->stats().allocations;
  return Status::OK();
}

}  // namespace tw
TW_INTERNAL_END
