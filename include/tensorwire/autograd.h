// Reverse-mode automatic differentiation, as in PyTorch:
//
//   tw::Tensor w = tw::randn({3, 2}).set_requires_grad();
//   tw::Tensor loss = x.matmul(w).relu().sum();
//   loss.backward();          // w.grad() now holds d loss / d w
//   { tw::NoGradGuard g; w = w - w.grad() * 0.1; }
//
// Autograd records the ops that use a tensor requiring grad; backward() emits the gradient ops
// onto the same device, so on a remote device training sends only ops and reads nothing back.
// The Tensor methods set_requires_grad, requires_grad, is_leaf, grad, set_grad, zero_grad,
// backward and detach are declared in tensor.h. Not supported: gradients of gradients
// (create_graph), hooks.
#pragma once
#include <vector>

#include "tensorwire/export.h"
#include "tensorwire/tensor.h"

TW_API_BEGIN

namespace tw {

// Whether ops on this thread are recorded (on by default).
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Turns recording off on this thread for its lifetime (optimizer updates, evaluation).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Mixed precision (docs/lowp.md). While an autocast guard lives, on this thread, matmul (and so
// nn::Linear) on two f32 operands computes in bf16: both operands rounded to bf16, their products
// summed in f32, an f32 result. Gradients flow back to the f32 tensors, so parameters (master
// weights) and the optimizer stay f32; the gradients' own matmuls run in bf16 too.
//   { auto amp = tw::autocast(tw::kBF16); loss = model.forward(x) ...; loss.backward(); }
// kF32 turns it off within an enclosing guard; other dtypes are an error.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  DType previous_;
};
[[nodiscard]] inline AutocastGuard autocast(DType dtype) { return AutocastGuard(dtype); }
// kBF16 inside an autocast(kBF16) scope on this thread, else kF32.
DType autocast_dtype();

// backward() from several tensors at once: accumulates d(sum_i <roots[i], grads[i]>) into the
// leaves. grads may be empty (every root must then have one element) or give one per root.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

}  // namespace tw
TW_API_END
