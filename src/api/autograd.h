// Autograd's tape (inside the API layer). Every op emitted while grad mode is on and one of its
// inputs requires grad gets a Node: the op's backward rule as a closure over the tensor handles
// it needs (handles, not values: on a remote device backward emits ordinary ops to the same
// device and reads nothing back) and one Edge per input. The output tensor points at its node;
// nodes point at their inputs' nodes (or, for leaves, at the leaf's AutogradMeta where the
// gradient accumulates), so the graph lives exactly as long as something downstream of it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/shape.h"
#include "ir/ops.h"
#include "tensorwire/export.h"
#include "tensorwire/tensor.h"

TW_INTERNAL_BEGIN

namespace tw::autograd {

struct Node;

// A tensor's part in autograd (TensorImpl::autograd; null for the others).
struct AutogradMeta {
  bool requires_grad = false;     // leaves: set_requires_grad; non-leaves: always true
  std::shared_ptr<Node> grad_fn;  // the node that computed this tensor; null for leaves
  Tensor grad;                    // leaves: what backward() accumulated (undefined: none yet)
};

// Where the gradient of one op input goes.
struct Edge {
  std::shared_ptr<Node> fn;            // a computed input: its node
  std::shared_ptr<AutogradMeta> leaf;  // a leaf input that requires grad
  TensorMeta meta;                     // the input's shape and dtype, which its gradient takes
  bool live() const { return fn != nullptr || leaf != nullptr; }
};

// Given d loss / d output, returns d loss / d input for each input of the op (an undefined
// tensor where the input needs none).
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad)>;

struct Node {
  std::string name;        // the op's name, for messages
  uint64_t seq = 0;        // creation order: backward runs later nodes first
  std::vector<Edge> next;  // one per op input, in the order emit received them
  BackwardFn backward;     // null once backward() has run without retain_graph
};

// The dtypes that carry gradients.
inline bool grad_dtype(DType d) { return d == kF32 || d == kF64; }

// Whether emitting an op with these inputs must record it: grad mode is on and an input
// requires grad.
bool needs_record(std::span<const Tensor* const> inputs);
// Records `op`, already submitted, whose inputs are `inputs` (as given to emit) and whose output
// is `out`: out gets a node when the op is differentiable and its output is floating point.
void record(const ir::Op& op, std::span<const Tensor* const> inputs, Tensor& out);

// Records a composite, computed with grad mode off (several ops whose backward is cheaper written
// as a whole: nn::cross_entropy), once grad mode is back: `out` gets a node named `name` with one
// edge per input and `fn` as its backward. Nothing is recorded unless needs_record(inputs).
void record_composite(std::string name, std::span<const Tensor* const> inputs, Tensor& out,
                      BackwardFn fn);

// a x b for f32 a and b under autocast(kBF16): both rounded to bf16, an f32 result; recorded as
// one node whose backward multiplies in bf16 too (api/grad_rules.cc).
Tensor autocast_matmul(const Tensor& a, const Tensor& b);

// A second handle on t's values without t's autograd state (no op is emitted).
Tensor alias_of(const Tensor& t);

// What a backward rule (api/grad_rules.cc) is built from.
struct RuleInputs {
  std::vector<Tensor> in;   // the op's inputs (handles; undefined where absent)
  std::vector<bool> needs;  // whether input i requires grad
  Tensor* out;              // the op's output (use saved_out() to keep it)
  // The output's values without its graph links (the node is owned through them otherwise).
  Tensor saved_out() const { return alias_of(*out); }
};
// The backward rule of `op` for these inputs; null when the op (or its kind, or its input
// dtype) is not differentiable. Which ops have rules is declared in ir/ops.h (kAutograd).
BackwardFn backward_rule(const ir::Op& op, const RuleInputs& inputs);

// Backpropagates from roots[i] seeded with grads[i] (undefined: ones, for one-element roots),
// accumulating into the leaves' grad(). Runs with grad mode off; frees each node's saved
// tensors unless retain_graph.
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
                  bool retain_graph);

}  // namespace tw::autograd
TW_INTERNAL_END
