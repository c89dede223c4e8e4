// What an op costs, estimated from its shapes before it runs (issue 52): the floating-point
// operations, the bytes it reads and writes, and the transcendental functions it evaluates
// (attention's exp per score, a unary exp/log/tanh per element). One function per op struct,
// dispatched so that an op added to TW_OP_LIST without a cost does not compile (cost.cc), and
// one entry per kind of the kind lists (a switch without a default: -Wswitch fails the build).
// The server refuses an op whose estimate is over its --max-op-cost, and runs an op estimated to
// take long off the thread that serves its sessions' sockets (src/server/README.md).
#pragma once
#include <string>
#include <vector>

#include "core/shape.h"
#include "ir/graph.h"
#include "ir/infer.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

// An upper estimate, in doubles (shapes a peer sends can multiply past 2^64).
struct OpCost {
  double flops = 0;            // a multiply-add counts 2
  double bytes = 0;            // read and written, each tensor once (views count as copies)
  double transcendentals = 0;  // exp, log, tanh, erf, sin, pow... evaluations
  OpCost& operator+=(const OpCost& o) {
    flops += o.flops;
    bytes += o.bytes;
    transcendentals += o.transcendentals;
    return *this;
  }
};

// How fast a device does each of the three, per second; an op's estimated time is the sum of the
// three over their rates (no overlap assumed: an upper estimate).
struct DeviceRate {
  double flops = 1e9, bytes = 1e9, transcendentals = 1e8;
};
double cost_seconds(const OpCost& c, const DeviceRate& r);

// The cost of `op`, whose inputs `lookup` finds and whose outputs ir::infer gave `outputs`
// (call it only on an op infer accepted). Never fails on such an op.
OpCost op_cost(const Op& op, const MetaLookup& lookup, const std::vector<TensorMeta>& outputs);

// An upper bound on op_cost(op, ...) from sizes alone, whatever the op: no op does more than
// kSizeBoundWork operations (or transcendental functions) per output element per element of its
// largest input, nor reads and writes more than 4 times its tensors' bytes. `max_input_numel` is
// its largest input's element count (1 with none), `input_bytes` its inputs' bytes. A server
// settles most ops (small ones) with it, without op_cost's visit of the op;
// tests/unit/ir/cost_bound_test.cc checks it against op_cost for every op.
inline constexpr double kSizeBoundWork = 64;
OpCost size_bound(double max_input_numel, double input_bytes,
                  const std::vector<TensorMeta>& outputs);
// The cost of each op of a graph that ir::validate_graph accepts, in order (each op inferred
// against the metas before it, as validation does); an error for a graph it would refuse.
Result<std::vector<OpCost>> graph_op_costs(const Graph& graph);

// "6.9e+10 FLOPs, 2.1MB, 6.9e+10 transcendentals": the parts, for messages.
std::string cost_str(const OpCost& c);

}  // namespace tw::ir
TW_INTERNAL_END
