// tw::optim (tensorwire/optim.h). Each update is a handful of tensor ops per parameter on its
// device, under NoGradGuard; Adam's is one op (AdamStep: the parameter and both moments in one
// pass) where the device has it and the dtype is f32 or f64, else the same update composed from
// 13 elementwise ops, with the same bits. Adam's bias corrections are computed on the device too
// (in f64, then rounded to the parameter's dtype as a scalar attribute would be), so that a
// recorded step (tw::graph::Capture) holds no host-computed value that changes from step to step;
// they are shared by the parameters that step together (a few ops per step, not per parameter).
#include "tensorwire/optim.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "api/emit.h"

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
  // One clock per device the parameters are on.
  std::vector<Device> devices;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& value = params_[i]->value();
    const Device d = value.defined() ? value.device() : Device::cpu();
    size_t c = 0;
    while (c < devices.size() && !(devices[c] == d)) ++c;
    if (c == devices.size()) devices.push_back(d);
    state_[i].clock = c;
  }
  clocks_.resize(devices.size());
}

void Adam::step() {
  NoGradGuard no_grad;
  // A clock advances when a parameter on it steps now; a parameter on it that does not step
  // leaves it for a pair of its own, at the powers it has reached (undefined: none yet, so its
  // first step starts from 1 as a fresh pair does).
  std::vector<char> advances(clocks_.size(), 0);
  std::vector<Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    grads[i] = params_[i]->grad();
    if (grads[i].defined() && !state_[i].own_clock) advances[state_[i].clock] = 1;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    State& s = state_[i];
    if (grads[i].defined() || s.own_clock || !advances[s.clock]) continue;
    s.own_clock = true;
    s.beta1_pow = clocks_[s.clock].beta1_pow;
    s.beta2_pow = clocks_[s.clock].beta2_pow;
  }
  // The pair's advance (a multiply each), on the device of the values that step with it.
  auto advance = [&](Tensor& beta1_pow, Tensor& beta2_pow, const Device& device) {
    if (!beta1_pow.defined()) {
      beta1_pow = ones({}, kF64, device);
      beta2_pow = ones({}, kF64, device);
    }
    beta1_pow = beta1_pow * o_.beta1;
    beta2_pow = beta2_pow * o_.beta2;
  };
  // The bias corrections of a pair in a dtype: the f64 values a host computation would give,
  // cast to the parameter's dtype as a scalar attribute is (the same bits as multiplying by
  // the host scalar).
  struct Corrections {
    size_t clock;
    DType dtype;
    Tensor step_size, bias2_sqrt;
  };
  auto corrections = [&](const Tensor& beta1_pow, const Tensor& beta2_pow, DType dtype) {
    return std::pair<Tensor, Tensor>{(o_.lr / (1.0 - beta1_pow)).to(dtype),
                                     (1.0 - beta2_pow).sqrt().to(dtype)};
  };
  std::vector<Corrections> shared;  // per clock and dtype, computed once this step
  for (size_t i = 0; i < params_.size(); ++i) {
    nn::Parameter& p = *params_[i];
    Tensor g = grads[i];
    if (!g.defined()) continue;
    State& s = state_[i];
    Tensor value = p.value();
    if (!s.m.defined()) {
      s.m = zeros_like(value);
      s.v = zeros_like(value);
    }
    Tensor step_size, bias2_sqrt;
    if (s.own_clock) {
      advance(s.beta1_pow, s.beta2_pow, value.device());
      std::tie(step_size, bias2_sqrt) = corrections(s.beta1_pow, s.beta2_pow, value.dtype());
    } else {
      Clock& c = clocks_[s.clock];
      if (advances[s.clock]) {
        advance(c.beta1_pow, c.beta2_pow, value.device());
        advances[s.clock] = 0;
      }
      auto it = std::find_if(shared.begin(), shared.end(), [&](const Corrections& k) {
        return k.clock == s.clock && k.dtype == value.dtype();
      });
      if (it == shared.end()) {
        auto [a, b] = corrections(c.beta1_pow, c.beta2_pow, value.dtype());
        it = shared.insert(shared.end(), Corrections{s.clock, value.dtype(), a, b});
      }
      step_size = it->step_size;
      bias2_sqrt = it->bias2_sqrt;
    }
    const std::shared_ptr<detail::Sink>& sink = value.impl()->sink;
    if ((value.dtype() == kF32 || value.dtype() == kF64) && g.dtype() == value.dtype() &&
        sink->supports(ir::OpCode::kAdamStep)) {
      // One pass over the parameter, its gradient and both moments (13 elementwise ops
      // otherwise): the same values, bit for bit.
      using detail::in;
      std::vector<Tensor> out = detail::emit_all(sink,
                                                 ir::AdamStep{.param = in(value),
                                                              .grad = in(g),
                                                              .exp_avg = in(s.m),
                                                              .exp_avg_sq = in(s.v),
                                                              .step_size = in(step_size),
                                                              .bias2_sqrt = in(bias2_sqrt),
                                                              .beta1 = o_.beta1,
                                                              .beta2 = o_.beta2,
                                                              .eps = o_.eps,
                                                              .weight_decay = o_.weight_decay,
                                                              .lr = o_.lr,
                                                              .decoupled = decoupled_,
                                                              .param_out = {},
                                                              .exp_avg_out = {},
                                                              .exp_avg_sq_out = {}},
                                                 {&value, &g, &s.m, &s.v, &step_size, &bias2_sqrt});
      p.set(std::move(out[0]));
      s.m = std::move(out[1]);
      s.v = std::move(out[2]);
      continue;
    }
    if (o_.weight_decay != 0) {
      if (decoupled_) {
        value = value * (1.0 - o_.lr * o_.weight_decay);
      } else {
        g = g + value * o_.weight_decay;
      }
    }
    s.m = s.m + (g - s.m) * (1.0 - o_.beta1);
    s.v = s.v * o_.beta2 + g.square() * (1.0 - o_.beta2);
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
  for (Clock& c : clocks_) {
    out.push_back(&c.beta1_pow);
    out.push_back(&c.beta2_pow);
  }
  return out;
}

void Adam::state_restored() {
  // A parameter has a clock of its own exactly when its own pair was made (see step()).
  for (State& s : state_) s.own_clock = s.beta1_pow.defined();
}

AdamW::AdamW(std::vector<nn::ParameterPtr> params, AdamWOptions options)
    : Adam(std::move(params),
           AdamOptions{options.lr, options.beta1, options.beta2, options.eps, options.weight_decay},
           true) {}

}  // namespace tw::optim
