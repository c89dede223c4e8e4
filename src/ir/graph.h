// A graph: a fixed list of ops over graph-local tensor ids, with declared inputs (ids and metas,
// bound to real tensors at each run) and outputs. It is validated once, when a device registers
// it (validate_graph below, on the same ir::infer every eager op passes), and then run by id
// with every graph-local id remapped to the session's ids (remap_op).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "core/shape.h"
#include "core/status.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

using GraphId = uint64_t;  // chosen by the device that registers the graph; 0 is never one

struct Graph {
  // Graph-local ids of the inputs, in the order a run binds them, and their metas: each run's
  // inputs must have exactly these metas, which is what lets the ops be validated only once.
  std::vector<TensorId> input_ids;
  std::vector<TensorMeta> inputs;
  // Run in this order. Each op reads graph inputs or earlier ops' outputs; every output id is
  // fresh (no id is assigned twice: the graph is in SSA form, as eager ops are).
  std::vector<Op> ops;
  // Graph-local ids (outputs of ops, in any order) that a run hands back under ids of the
  // caller's choosing; the other op outputs are intermediates, freed by the run.
  std::vector<TensorId> output_ids;
};

// What registration learns from validating a graph.
struct GraphPlan {
  std::vector<TensorMeta> outputs;  // metas of output_ids, in order
  // For each op, the intermediates whose last reader it is: a run frees them right after it.
  std::vector<std::vector<TensorId>> free_after;
};

// Checks a graph: input ids nonzero and distinct with one meta each, every op valid under
// ir::infer given the metas before it, op outputs fresh, outputs produced by ops and distinct.
// Errors name the op by index and name, e.g. "graph op 1 (matmul): matmul: inner dimensions
// differ: [2, 3] x [4, 5]".
Result<GraphPlan> validate_graph(const Graph& graph);

// Rewrites every tensor id an op names (inputs, optional inputs that are present, and outputs)
// through `map`. Id 0 ("no tensor") stays 0.
void remap_op(Op& op, const std::function<TensorId(TensorId)>& map);

}  // namespace tw::ir
TW_INTERNAL_END
