// tw::nn::RNN, LSTM and GRU (tensorwire/nn.h): unrolled over the sequence, each step composed of
// Tensor ops, so autograd gives gradients through time without a kernel of its own.
#include "tensorwire/nn.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "core/shape.h"

namespace tw::nn {

namespace {
int64_t gates_of(RNNBase::Kind k) {
  return k == RNNBase::Kind::kLstm ? 4 : k == RNNBase::Kind::kGru ? 3 : 1;
}
const char* kind_name(RNNBase::Kind k) {
  return k == RNNBase::Kind::kLstm ? "LSTM" : k == RNNBase::Kind::kGru ? "GRU" : "RNN";
}
}  // namespace

RNNBase::RNNBase(Kind kind, int64_t input_size, int64_t hidden_size, RNNOptions options,
                 const Placement& at)
    : kind_(kind), in_(input_size), hidden_(hidden_size), o_(std::move(options)) {
  const std::string what = kind_name(kind);
  if (input_size <= 0 || hidden_size <= 0 || o_.num_layers <= 0) {
    throw Error(what + ": input_size, hidden_size and num_layers must be > 0, got " +
                std::to_string(input_size) + ", " + std::to_string(hidden_size) + " and " +
                std::to_string(o_.num_layers));
  }
  if (kind == Kind::kRnn && o_.nonlinearity != "tanh" && o_.nonlinearity != "relu") {
    throw Error("RNN: nonlinearity '" + o_.nonlinearity + "' is not tanh or relu");
  }
  const int64_t g = gates_of(kind), dirs = o_.bidirectional ? 2 : 1;
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  auto param = [&](const std::string& name, const Shape& shape) {
    return register_parameter(name, uniform(shape, -bound, bound, at.dtype, at.device));
  };
  for (int64_t l = 0; l < o_.num_layers; ++l) {
    const int64_t in = l == 0 ? input_size : hidden_size * dirs;
    for (int64_t d = 0; d < dirs; ++d) {
      const std::string sfx = "_l" + std::to_string(l) + (d == 1 ? "_reverse" : "");
      w_ih_.push_back(param("weight_ih" + sfx, {g * hidden_size, in}));
      w_hh_.push_back(param("weight_hh" + sfx, {g * hidden_size, hidden_size}));
      if (o_.bias) {
        b_ih_.push_back(param("bias_ih" + sfx, {g * hidden_size}));
        b_hh_.push_back(param("bias_hh" + sfx, {g * hidden_size}));
      }
    }
  }
}

std::string RNNBase::name() const {
  std::string s =
      std::string(kind_name(kind_)) + "(" + std::to_string(in_) + ", " + std::to_string(hidden_);
  if (o_.num_layers != 1) s += ", num_layers=" + std::to_string(o_.num_layers);
  if (kind_ == Kind::kRnn && o_.nonlinearity != "tanh") s += ", nonlinearity=" + o_.nonlinearity;
  if (!o_.bias) s += ", bias=false";
  if (o_.batch_first) s += ", batch_first=true";
  if (o_.bidirectional) s += ", bidirectional=true";
  return s + ")";
}

RNNOutput RNNBase::forward_state(const Tensor& input, const Tensor& h0_in, const Tensor& c0_in) {
  const std::string what = kind_name(kind_);
  const int64_t dirs = o_.bidirectional ? 2 : 1, L = o_.num_layers, H = hidden_;
  if (input.dim() != 2 && input.dim() != 3) {
    throw Error(what + ": input must be [T, B, in] (or [B, T, in] batch_first, or unbatched [T, " +
                "in]), got " + shape_str(input.shape()));
  }
  const bool unbatched = input.dim() == 2;
  Tensor x = unbatched ? input.unsqueeze(1) : o_.batch_first ? input.transpose(0, 1) : input;
  const int64_t T = x.size(0), B = x.size(1);
  if (x.size(2) != in_) {
    throw Error(what + ": input has " + std::to_string(x.size(2)) + " features, want input_size " +
                std::to_string(in_));
  }
  auto state = [&](const Tensor& s, const char* name) {
    if (!s.defined()) return zeros({L * dirs, B, H}, x.dtype(), x.device());
    const Tensor t = unbatched ? s.unsqueeze(1) : s;
    if (t.shape() != Shape{L * dirs, B, H}) {
      throw Error(what + ": " + name + " has shape " + shape_str(s.shape()) + ", want " +
                  shape_str(unbatched ? Shape{L * dirs, H} : Shape{L * dirs, B, H}));
    }
    return t;
  };
  const Tensor h0 = state(h0_in, "h0");
  const Tensor c0 = kind_ == Kind::kLstm ? state(c0_in, "c0") : Tensor();
  std::vector<Tensor> hn, cn;
  Tensor layer_in = x;
  for (int64_t l = 0; l < L; ++l) {
    std::vector<Tensor> outs;
    for (int64_t d = 0; d < dirs; ++d) {
      const size_t i = static_cast<size_t>(l * dirs + d);
      const Tensor& wih = **w_ih_[i];
      const Tensor whh_t = (**w_hh_[i]).t();
      const int64_t in = layer_in.size(2);
      // Every step's input projection in one matmul: [T * B, G * H].
      Tensor xw = layer_in.reshape({T * B, in}).matmul(wih.t());
      if (o_.bias) xw = xw + **b_ih_[i];
      Tensor h = h0.narrow(0, l * dirs + d, 1).reshape({B, H});
      Tensor c = kind_ == Kind::kLstm ? c0.narrow(0, l * dirs + d, 1).reshape({B, H}) : Tensor();
      std::vector<Tensor> steps(static_cast<size_t>(T));
      for (int64_t k = 0; k < T; ++k) {
        const int64_t t = d == 1 ? T - 1 - k : k;
        const Tensor xt = xw.narrow(0, t * B, B);
        Tensor hh = h.matmul(whh_t);
        if (o_.bias) hh = hh + **b_hh_[i];
        if (kind_ == Kind::kRnn) {
          const Tensor s = xt + hh;
          h = o_.nonlinearity == "relu" ? s.relu() : s.tanh();
        } else if (kind_ == Kind::kLstm) {
          const Tensor s = xt + hh;
          const Tensor ig = s.narrow(1, 0, H).sigmoid(), fg = s.narrow(1, H, H).sigmoid();
          const Tensor gg = s.narrow(1, 2 * H, H).tanh(), og = s.narrow(1, 3 * H, H).sigmoid();
          c = fg * c + ig * gg;
          h = og * c.tanh();
        } else {
          const Tensor r = (xt.narrow(1, 0, H) + hh.narrow(1, 0, H)).sigmoid();
          const Tensor z = (xt.narrow(1, H, H) + hh.narrow(1, H, H)).sigmoid();
          const Tensor n = (xt.narrow(1, 2 * H, H) + r * hh.narrow(1, 2 * H, H)).tanh();
          h = (1.0 - z) * n + z * h;
        }
        steps[static_cast<size_t>(t)] = h;
      }
      outs.push_back(stack(steps, 0));  // [T, B, H]
      hn.push_back(h);
      if (kind_ == Kind::kLstm) cn.push_back(c);
    }
    layer_in = dirs == 2 ? cat(outs, 2) : outs[0];
  }
  RNNOutput out;
  out.output = unbatched        ? layer_in.squeeze(1)
               : o_.batch_first ? layer_in.transpose(0, 1)
                                : layer_in;
  out.h_n = stack(hn, 0);
  if (unbatched) out.h_n = out.h_n.squeeze(1);
  if (kind_ == Kind::kLstm) {
    out.c_n = stack(cn, 0);
    if (unbatched) out.c_n = out.c_n.squeeze(1);
  }
  return out;
}

}  // namespace tw::nn
