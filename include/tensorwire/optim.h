// Optimizers with PyTorch's update rules (torch.optim.SGD, Adam, AdamW, single-tensor form).
// An update is computed with tensor ops on the parameters' device (nothing is read back) under
// NoGradGuard, and rebinds each nn::Parameter to its new value.
//
//   tw::optim::Adam opt(model.parameters(), {.lr = 1e-3});
//   opt.zero_grad(); loss.backward(); opt.step();
#pragma once
#include <cstdint>
#include <vector>

#include "tensorwire/export.h"
#include "tensorwire/nn.h"

TW_API_BEGIN

namespace tw::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<nn::ParameterPtr> params);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;
  // One update of every parameter that has a gradient (the others are skipped, as in PyTorch).
  virtual void step() = 0;
  // Forgets every parameter's gradient (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();
  virtual double lr() const = 0;
  virtual void set_lr(double lr) = 0;
  const std::vector<nn::ParameterPtr>& params() const { return params_; }
  // The optimizer's state tensors (momentum buffers, moments, step counters), undefined until
  // the first step() that makes them. A step recorded by tw::graph::Capture takes them as trace
  // inputs and gives their new values as outputs; replaying it rebinds them through these.
  virtual std::vector<Tensor*> state() = 0;
  // Called after the tensors behind state() were replaced (tw::Checkpoint::load), so that the
  // optimizer re-derives what it keeps beside them.
  virtual void state_restored() {}

 protected:
  std::vector<nn::ParameterPtr> params_;
};

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// g = grad + weight_decay * p; with momentum: buf = g at the first step, then
// buf = momentum * buf + (1 - dampening) * g, and g = nesterov ? g + momentum * buf : buf;
// p = p - lr * g.
class SGD : public Optimizer {
 public:
  SGD(std::vector<nn::ParameterPtr> params, SGDOptions options = {});
  void step() override;
  double lr() const override { return o_.lr; }
  void set_lr(double lr) override { o_.lr = lr; }
  std::vector<Tensor*> state() override;

 private:
  SGDOptions o_;
  std::vector<Tensor> momentum_;  // per parameter; undefined before its first step
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;  // Adam: added to the gradient (L2); AdamW: decoupled
};

// Per parameter, at step t: g = grad (+ weight_decay * p for Adam); m = m + (1 - beta1)(g - m);
// v = beta2 v + (1 - beta2) g^2; p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) +
// eps), with beta^t kept as a running product on the device. AdamW first decays p = p * (1 - lr *
// weight_decay) and leaves g alone.
class Adam : public Optimizer {
 public:
  Adam(std::vector<nn::ParameterPtr> params, AdamOptions options = {});
  void step() override;
  double lr() const override { return o_.lr; }
  void set_lr(double lr) override { o_.lr = lr; }
  std::vector<Tensor*> state() override;
  void state_restored() override;

 protected:
  Adam(std::vector<nn::ParameterPtr> params, AdamOptions options, bool decoupled);

 private:
  AdamOptions o_;
  bool decoupled_;
  // beta1^t and beta2^t live on the device (f64 scalars updated by a multiply each step)
  // rather than as a host step count, so that a recorded step replayed n times takes n steps'
  // bias corrections, not the recorded one's. The parameters that share a device (as they were
  // at construction) and have stepped together share one pair, and its bias corrections are
  // computed once per step and dtype; a parameter left out of a step (no gradient) goes on
  // with a pair of its own from there.
  struct Clock {
    Tensor beta1_pow, beta2_pow;
  };
  struct State {
    Tensor m, v;
    Tensor beta1_pow, beta2_pow;  // its own pair; undefined while it uses its clock's
    size_t clock = 0;             // index into clocks_
    bool own_clock = false;
  };
  std::vector<State> state_;
  std::vector<Clock> clocks_;  // fixed at construction: state() hands out pointers into it
};

// AdamOptions with weight_decay defaulting to 1e-2, as torch.optim.AdamW.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<nn::ParameterPtr> params, AdamWOptions options = {});
};

}  // namespace tw::optim
TW_API_END
