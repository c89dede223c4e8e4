// Walks the op declaration (TW_OP_LIST and the kind lists of ir/ops.h) and checks that the op
// suite covers each op: an entry in the op registry (op_registry.cc) under the op's API name.
// op_cases_test then checks every registry entry has cases, so a new op cannot go untested.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "ir/ops.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

// Ops the Tensor API reaches only through other calls, with where they are tested instead.
// Anything else must be in the registry.
const std::set<std::string> kNotInRegistry = {
    "from_host",  // every case's inputs: the upload path of each case
    "rand_uniform",
    "rand_normal",            // random: random_test.cc (statistics, not a reference)
    "bernoulli",              // random: random_test.cc
    "conv2d_backward_input",  // gradients: tw_test_autograd's gradchecks
    "conv2d_backward_weight",
    "pool2d_backward",
    "adaptive_avg_pool2d_backward",
    "adam_step",  // optimizer: tw_test_train's optim_test (fused equals composed, bit for bit)
    "linear",     // nn::Linear: tw_test_train's nn_test (against the composed ops, both backends)
};

// The registry names an op of the declaration must have: its kinds' API names for the kind
// families, op_name otherwise.
std::vector<std::string> registry_names(const ir::Op& op) {
  return std::visit(
      [&](const auto& o) -> std::vector<std::string> {
        using T = std::decay_t<decltype(o)>;
        std::vector<std::string> names;
        if constexpr (std::is_same_v<T, ir::Unary>) {
#define TW_NAME(Kind, ir_name, api_name, ...) names.push_back(#api_name);
          TW_UNARY_KINDS(TW_NAME)
        } else if constexpr (std::is_same_v<T, ir::Binary>) {
          TW_BINARY_KINDS(TW_NAME)
        } else if constexpr (std::is_same_v<T, ir::Reduce>) {
          TW_REDUCE_KINDS(TW_NAME)
        } else if constexpr (std::is_same_v<T, ir::Pool2d>) {
          TW_POOL_KINDS(TW_NAME)
#undef TW_NAME
        } else if constexpr (std::is_same_v<T, ir::BinaryScalar>) {
#define TW_SCALAR_NAME(Kind, ir_name, api_name, grad, scalar) \
  if (ir::kind_traits::scalar) names.push_back(#api_name "_scalar");
          TW_BINARY_KINDS(TW_SCALAR_NAME)
#undef TW_SCALAR_NAME
        } else if constexpr (std::is_same_v<T, ir::Softmax>) {
          names = {"softmax", "log_softmax"};
        } else {
          names.push_back(ir::op_name(op));
        }
        return names;
      },
      op);
}

TEST(OpList, EveryDeclaredOpHasAnOpSuiteRegistryEntry) {
  std::set<std::string> registered;
  for (const std::string& name : registered_ops()) registered.insert(name);
#define TW_CHECK_OP(Name, code, since)                                                         \
  for (const std::string& name : registry_names(ir::Op{ir::Name{}})) {                         \
    if (kNotInRegistry.count(name)) continue;                                                  \
    EXPECT_TRUE(registered.count(name))                                                        \
        << "op " #Name " (" << name << ") has no entry in tests/unit/ops/op_registry.cc; add " \
        << "one (and its cases in op_cases.cc), or list it in kNotInRegistry with where it "   \
        << "is tested";                                                                        \
  }
  TW_OP_LIST(TW_CHECK_OP)
#undef TW_CHECK_OP
}

}  // namespace
}  // namespace tw::optest
