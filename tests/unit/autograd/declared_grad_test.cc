// Walks the kind lists of ir/ops.h and checks autograd agrees with their grad column: a kind
// declared kGrad gets a node whose backward delivers a gradient of the input's shape, one
// declared kNoGrad gets none. (Whole ops are held in step with their kAutograd at compile time,
// by the static_asserts in api/grad_rules.cc.)
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "api/emit.h"
#include "ir/ops.h"
#include "tensorwire/autograd.h"

namespace tw {
namespace {

using detail::in;

// Whether autograd recorded the op that made y, and if so that backward reaches x.
void expect_recorded(Tensor x, const Tensor& y, bool declared, const std::string& what) {
  const bool recorded = !y.is_leaf();
  EXPECT_EQ(recorded, declared) << what << " is declared " << (declared ? "kGrad" : "kNoGrad")
                                << " in ir/ops.h but api/grad_rules.cc "
                                << (recorded ? "has" : "has no") << " rule for it";
  if (!recorded) return;
  y.sum().backward();
  ASSERT_TRUE(x.grad().defined()) << what << ": backward gave no gradient";
  EXPECT_EQ(x.grad().shape(), x.shape()) << what;
}

Tensor leaf() { return from_vector<float>({0.25f, 0.5f, 1.5f}, {3}).set_requires_grad(); }

Tensor emit_on(const Tensor& anchor, ir::Op op, std::initializer_list<const Tensor*> inputs) {
  return detail::emit(anchor.impl()->sink, std::move(op), inputs);
}

TEST(DeclaredGrad, UnaryKinds){
#define TW_CHECK(Kind, ir_name, api_name, grad, ...)                           \
  {                                                                            \
    Tensor x = leaf();                                                         \
    Tensor y = emit_on(x, ir::Unary{ir::UnaryKind::k##Kind, in(x), {}}, {&x}); \
    expect_recorded(x, y, ir::kind_traits::grad, "unary " #ir_name);           \
  }
    TW_UNARY_KINDS(TW_CHECK)
#undef TW_CHECK
}

TEST(DeclaredGrad, BinaryKinds){
#define TW_CHECK(Kind, ir_name, api_name, grad, ...)                                        \
  {                                                                                         \
    Tensor a = leaf(), b = leaf();                                                          \
    Tensor y = emit_on(a, ir::Binary{ir::BinaryKind::k##Kind, in(a), in(b), {}}, {&a, &b}); \
    expect_recorded(a, y, ir::kind_traits::grad, "binary " #ir_name);                       \
  }
    TW_BINARY_KINDS(TW_CHECK)
#undef TW_CHECK
}

TEST(DeclaredGrad, BinaryScalarKinds) {
#define TW_CHECK(Kind, ir_name, api_name, grad, ...)                                          \
  for (bool reverse : {false, true}) {                                                        \
    Tensor a = leaf();                                                                        \
    Tensor y =                                                                                \
        emit_on(a, ir::BinaryScalar{ir::BinaryKind::k##Kind, in(a), 2.0, reverse, {}}, {&a}); \
    expect_recorded(a, y, ir::kind_traits::grad,                                              \
                    std::string(reverse ? "reversed " : "") + "binary scalar " #ir_name);     \
  }
  TW_BINARY_KINDS(TW_CHECK)
#undef TW_CHECK
}

TEST(DeclaredGrad, ReduceKinds) {
#define TW_CHECK(Kind, ir_name, api_name, grad, ...)                                        \
  {                                                                                         \
    Tensor x = leaf();                                                                      \
    Tensor y = emit_on(x, ir::Reduce{ir::ReduceKind::k##Kind, in(x), {}, false, {}}, {&x}); \
    expect_recorded(x, y, ir::kind_traits::grad, "reduce " #ir_name);                       \
  }
  TW_REDUCE_KINDS(TW_CHECK)
#undef TW_CHECK
}

}  // namespace
}  // namespace tw
