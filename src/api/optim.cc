// tw::optim (tensorwire/optim.h). Each update is a handful of tensor ops per parameter on its
// device, under NoGradGuard. Adam's bias corrections are computed on the device too (in f64,
// then rounded to the parameter's dtype as a scalar attribute would be), so that a recorded step
// (tw::graph::Capture) holds no host-computed value that changes from step to step.
#include "tensorwire/optim.h"

namespace tw::optim {

Optimizer::Optimizer(std::vector<nn::ParameterPtr> params) : params_(std::move(params)) {
  for (const auto& p : params_) {
    if (!p) throw Error("optimizer: a parameter is null");
  }
}

void Optimizer::zero_grad() {
  for (const auto& p : params_) p->zero_grad();
}

namespace {
void check_lr(const char* what, double lr) {
  if (!(lr >= 0)) throw Error(std::string(what) + ": lr must be >= 0, got " + std::to_string(lr));
}
}  // namespace

// ---- SGD ----
SGD::SGD(std::vector<nn::ParameterPtr> params, SGDOptions options)
    : Optimizer(std::move(params)), o_(options), momentum_(params_.size()) {
  check_lr("SGD", o_.lr);
  if (o_.nesterov && (o_.momentum <= 0 || o_.dampening != 0)) {
    throw Error("SGD: nesterov needs momentum > 0 and dampening 0");
  }
}

void SGD::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (o_.weight_decay != 0) g = g + p.value() * o_.weight_decay;
    if (o_.momentum != 0) {
      Tensor& buf = momentum_[i];
      buf = buf.defined() ? buf * o_.momentum + g * (1.0 - o_.dampening) : g;
      g = o_.nesterov ? g + buf * o_.momentum : buf;
    }
    p.set(p.value() - g * o_.lr);
  }
}

std::vector<Tensor*> SGD::state() {
  std::vector<Tensor*> out;
  for (Tensor& t : momentum_) out.push_back(&t);
  return out;
}

// ---- Adam / AdamW ----
Adam::Adam(std::vector<nn::ParameterPtr> params, AdamOptions options)
    : Adam(std::move(params), options, false) {}

Adam::Adam(std::vector<nn::ParameterPtr> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params)), o_(options), decoupled_(decoupled), state_(params_.size()) {
  check_lr(decoupled ? "AdamW" : "Adam", o_.lr);
  if (!(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1)) {
    throw Error("Adam: betas must lie in [0, 1), got " + std::to_string(o_.beta1) + " and " +
                std::to_string(o_.beta2));
  }
}

void Adam::step() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    State& s = state_[i];
    Tensor value = p.value();
    if (o_.weight_decay != 0) {
      if (decoupled_) {
        value = value * (1.0 - o_.lr * o_.weight_decay);
      } else {
        g = g + value * o_.weight_decay;
      }
    }
    if (!s.m.defined()) {
      s.m = zeros_like(value);
      s.v = zeros_like(value);
      s.beta1_pow = ones({}, kF64, value.device());
      s.beta2_pow = ones({}, kF64, value.device());
    }
    s.m = s.m + (g - s.m) * (1.0 - o_.beta1);
    s.v = s.v * o_.beta2 + g.square() * (1.0 - o_.beta2);
    s.beta1_pow = s.beta1_pow * o_.beta1;
    s.beta2_pow = s.beta2_pow * o_.beta2;
    // The f64 values a host computation would give, cast to the parameter's dtype as a scalar
    // attribute is: the same bits as multiplying by the host scalar.
    const Tensor step_size = (o_.lr / (1.0 - s.beta1_pow)).to(value.dtype());
    const Tensor bias2_sqrt = (1.0 - s.beta2_pow).sqrt().to(value.dtype());
    Tensor denom = s.v.sqrt() / bias2_sqrt + o_.eps;
    p.set(value - (s.m / denom) * step_size);
  }
}

std::vector<Tensor*> Adam::state() {
  std::vector<Tensor*> out;
  for (State& s : state_) {
    out.push_back(&s.m);
    out.push_back(&s.v);
    out.push_back(&s.beta1_pow);
    out.push_back(&s.beta2_pow);
  }
  return out;
}

AdamW::AdamW(std::vector<nn::ParameterPtr> params, AdamWOptions options)
    : Adam(std::move(params),
           AdamOptions{options.lr, options.beta1, options.beta2, options.eps, options.weight_decay},
           true) {}

}  // namespace tw::optim
