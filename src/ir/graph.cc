#include "ir/graph.h"

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/infer.h"

namespace tw::ir {
namespace {

std::string id_str(TensorId id) { return "%" + std::to_string(id); }

struct IdRemapper {
  const std::function<TensorId(TensorId)>* map;
  void operator()(const char*, In& v) const {
    if (v.id) v.id = (*map)(v.id);
  }
  void operator()(const char*, std::vector<In>& v) const {
    for (In& x : v)
      if (x.id) x.id = (*map)(x.id);
  }
  void operator()(const char*, Out& v) const {
    if (v.id) v.id = (*map)(v.id);
  }
  template <class T>
  void operator()(const char*, T&) const {}
};

}  // namespace

Result<GraphPlan> validate_graph(const Graph& graph) {
  if (graph.input_ids.size() != graph.inputs.size()) {
    return invalid_argument("graph: " + std::to_string(graph.input_ids.size()) + " input ids but " +
                            std::to_string(graph.inputs.size()) + " input metas");
  }
  std::unordered_map<TensorId, TensorMeta> metas;
  // The op that last reads each op output (-1: none yet); graph inputs belong to the caller.
  std::unordered_map<TensorId, int64_t> last_reader;
  for (size_t i = 0; i < graph.input_ids.size(); ++i) {
    const TensorId id = graph.input_ids[i];
    if (id == 0) return invalid_argument("graph: input " + std::to_string(i) + " has id 0");
    if (!metas.emplace(id, graph.inputs[i]).second) {
      return invalid_argument("graph: input id " + id_str(id) + " appears twice");
    }
  }
  const MetaLookup lookup = [&](TensorId id) -> Result<TensorMeta> {
    auto it = metas.find(id);
    if (it == metas.end()) {
      return not_found("tensor " + id_str(id) +
                       " is neither a graph input nor made by an op before");
    }
    return it->second;
  };
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    const std::string where = "graph op " + std::to_string(i);
    if (std::holds_alternative<std::monostate>(op)) return invalid_argument(where + ": empty op");
    const std::string name = where + " (" + op_name(op) + ")";
    Result<std::vector<TensorMeta>> out_metas = infer(op, lookup);
    if (!out_metas.ok()) return out_metas.status().with_context(name);
    for (TensorId id : op_inputs(op)) {
      auto it = last_reader.find(id);
      if (it != last_reader.end()) it->second = static_cast<int64_t>(i);
    }
    const std::vector<TensorId> outs = op_outputs(op);
    for (size_t k = 0; k < outs.size(); ++k) {
      if (outs[k] == 0) return invalid_argument(name + ": output id 0 is reserved for 'no tensor'");
      if (!metas.emplace(outs[k], (*out_metas)[k]).second) {
        return invalid_argument(name + ": output id " + id_str(outs[k]) + " is already assigned");
      }
      last_reader.emplace(outs[k], -1);
    }
  }
  GraphPlan plan;
  plan.free_after.resize(graph.ops.size());
  std::unordered_set<TensorId> outputs;
  for (TensorId id : graph.output_ids) {
    if (!last_reader.count(id)) {
      return invalid_argument(
          "graph: output " + id_str(id) +
          (metas.count(id) ? " is a graph input, not made by an op" : " is not made by any op"));
    }
    if (!outputs.insert(id).second) {
      return invalid_argument("graph: output " + id_str(id) + " appears twice");
    }
    plan.outputs.push_back(metas.at(id));
  }
  // An intermediate no op reads is freed right after the op that makes it.
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    for (TensorId id : op_outputs(graph.ops[i])) {
      if (outputs.count(id)) continue;
      const int64_t last = last_reader.at(id);
      plan.free_after[last < 0 ? i : static_cast<size_t>(last)].push_back(id);
    }
  }
  return plan;
}

void remap_op(Op& op, const std::function<TensorId(TensorId)>& map) {
  std::visit(
      [&](auto& o) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(o)>, std::monostate>)
          o.fields(IdRemapper{&map});
      },
      op);
}

}  // namespace tw::ir
