// ir::size_bound (ir/cost.h), the bound from sizes alone with which a server settles small ops
// without op_cost: for every op of the shared program over TW_OP_LIST, and for the same ops at
// sizes where the work per element is largest (one output element from a long reduction, a
// matmul's long inner dimension, a wide pooling window), op_cost never exceeds it.
#include <gtest/gtest.h>

#include <set>
#include <unordered_map>
#include <vector>

#include "ir/cost.h"
#include "support/op_program.h"

namespace tw {
namespace {

// Checks op_cost <= size_bound for each op of `ops` (inferred in order); the codes checked.
std::set<ir::OpCode> check_program(const std::vector<ir::Op>& ops) {
  std::unordered_map<ir::TensorId, TensorMeta> made;
  const ir::MetaLookup lookup = [&made](ir::TensorId id) -> Result<TensorMeta> {
    auto it = made.find(id);
    if (it == made.end()) return not_found("no tensor " + std::to_string(id));
    return it->second;
  };
  std::set<ir::OpCode> codes;
  for (const ir::Op& op : ops) {
    Result<std::vector<TensorMeta>> metas = ir::infer(op, lookup);
    EXPECT_TRUE(metas.ok()) << ir::to_string(op);
    if (!metas.ok()) continue;
    double max_in = 1, in_bytes = 0;
    for (ir::TensorId id : ir::op_inputs(op)) {
      const TensorMeta& m = made.at(id);
      const double n = static_cast<double>(numel(m.shape));
      max_in = std::max(max_in, n);
      in_bytes += n * static_cast<double>(dtype_size(m.dtype));
    }
    const ir::OpCost cost = ir::op_cost(op, lookup, *metas);
    const ir::OpCost bound = ir::size_bound(max_in, in_bytes, *metas);
    EXPECT_LE(cost.flops, bound.flops) << ir::to_string(op);
    EXPECT_LE(cost.bytes, bound.bytes) << ir::to_string(op);
    EXPECT_LE(cost.transcendentals, bound.transcendentals) << ir::to_string(op);
    codes.insert(ir::op_code(op));
    const std::vector<ir::TensorId> outs = ir::op_outputs(op);
    for (size_t i = 0; i < outs.size() && i < metas->size(); ++i) made[outs[i]] = (*metas)[i];
  }
  return codes;
}

TEST(CostBound, NoOpOfTheProgramCostsMoreThanItsSizesBound) {
  const std::set<ir::OpCode> codes = check_program(testing::every_op_program());
  EXPECT_EQ(static_cast<int>(codes.size()), ir::kNumOps);  // every op of TW_OP_LIST
}

TEST(CostBound, OpsWithTheMostWorkPerElementStayUnderIt) {
  using namespace ir;
  check_program({
      RandNormal{.out = {1}, .shape = {1, 4096}, .dtype = kF32, .seed = 1, .mean = 0, .std = 1},
      Reduce{.kind = ReduceKind::kSum, .x = {1}, .dims = {0, 1}, .keepdim = false, .out = {2}},
      RandNormal{.out = {3}, .shape = {4096, 1}, .dtype = kF32, .seed = 2, .mean = 0, .std = 1},
      MatMul{.a = {1}, .b = {3}, .out = {4}},  // [1,4096] x [4096,1]: one element, 4096 MACs
      RandNormal{.out = {5}, .shape = {1, 1, 9, 9}, .dtype = kF32, .seed = 3, .mean = 0, .std = 1},
      Pool2d{.kind = PoolKind::kAvg,
             .x = {5},
             .kernel = {9, 9},
             .stride = {1, 1},
             .padding = {4, 4},
             .out = {6}},  // a 9x9 window over a 9x9 plane, padded
      Softmax{.x = {1}, .dim = 1, .log = false, .out = {7}},
      Cumsum{.x = {1}, .dim = 1, .out = {8}},
  });
}

}  // namespace
}  // namespace tw
