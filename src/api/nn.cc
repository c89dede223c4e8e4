// tw::nn: parameters, modules, losses and initialisation (tensorwire/nn.h). Everything here is
// composed from the Tensor API, so it runs on any device and autograd differentiates it.
#include "tensorwire/nn.h"

#include <cmath>
#include <set>
#include <sstream>
#include <typeinfo>

#include "api/autograd.h"
#include "api/emit.h"
#include "core/shape.h"

namespace tw::nn {

namespace {
std::string b(bool v) { return v ? "true" : "false"; }
std::string pair_str(const std::vector<int64_t>& v) {
  return v.size() == 2 && v[0] == v[1] ? std::to_string(v[0]) : shape_str(v);
}
}  // namespace

// ---- Parameter ----
namespace {
// f32 and f64 parameters take gradients; others (a packed quantized weight) are frozen.
bool trainable(const Tensor& t) { return t.dtype() == kF32 || t.dtype() == kF64; }
}  // namespace

Parameter::Parameter(Tensor value) {
  if (!value.defined()) throw Error("Parameter: the value is undefined");
  value_ = value.detach();
  value_.set_requires_grad(trainable(value_));
}

void Parameter::set(Tensor value) {
  if (!value.defined()) throw Error("Parameter::set: the value is undefined");
  if (value.shape() != value_.shape() || value.dtype() != value_.dtype()) {
    throw Error("Parameter::set: the new value " + std::string(dtype_name(value.dtype())) +
                shape_str(value.shape()) + " differs from the parameter's " +
                std::string(dtype_name(value_.dtype())) + shape_str(value_.shape()));
  }
  Tensor grad = value_.grad();
  // A fresh handle: the caller's tensor keeps its own autograd state.
  Tensor v = value.detach();
  v.set_requires_grad(trainable(v));
  if (grad.defined() && grad.device() == v.device()) v.set_grad(grad);
  value_ = std::move(v);
}

// ---- Module ----
ParameterPtr Module::register_parameter(std::string name, Tensor value) {
  auto p = std::make_shared<Parameter>(std::move(value));
  params_.emplace_back(std::move(name), p);
  return p;
}

ParameterPtr Module::replace_parameter(const std::string& name, Tensor value) {
  for (auto& [n, p] : params_) {
    if (n == name) {
      p = std::make_shared<Parameter>(std::move(value));
      return p;
    }
  }
  throw Error("replace_parameter: module " + this->name() + " has no parameter '" + name + "'");
}

int Module::quantize_linears(BlockFormat format) {
  int packed = 0;
  for (auto& [n, child] : children_) {
    if (auto* linear = dynamic_cast<Linear*>(child.get())) {
      if (!linear->quantized() && linear->in_features() % kQuantBlock == 0) {
        linear->quantize(format);
        ++packed;
      }
    } else {
      packed += child->quantize_linears(format);
    }
  }
  return packed;
}

BlockFormat block_format_of(const std::string& scheme) {
  if (scheme == "q8" || scheme == "q8_0") return BlockFormat::kQ8_0;
  if (scheme == "q4" || scheme == "q4_0") return BlockFormat::kQ4_0;
  throw Error("quantize: unknown scheme '" + scheme + "' (expected \"q8\" or \"q4\")");
}

int quantize(Module& module, const std::string& scheme) {
  const BlockFormat format = block_format_of(scheme);
  if (auto* linear = dynamic_cast<Linear*>(&module)) {
    if (linear->quantized() || linear->in_features() % kQuantBlock != 0) return 0;
    linear->quantize(format);
    return 1;
  }
  return module.quantize_linears(format);
}

std::vector<ParameterPtr> Module::parameters() const {
  std::vector<ParameterPtr> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, ParameterPtr>> Module::named_parameters() const {
  std::vector<std::pair<std::string, ParameterPtr>> out = params_;
  for (const auto& [child_name, child] : children_) {
    for (auto& [name, p] : child->named_parameters()) out.emplace_back(child_name + "." + name, p);
  }
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(const Device& device) {
  for (const ParameterPtr& p : parameters()) {
    if (p->value().device() == device) continue;
    Tensor grad = p->grad();
    p->zero_grad();
    p->set(p->value().to(device));
    if (grad.defined()) {
      Tensor v = p->value();
      v.set_grad(grad.to(device));
    }
  }
}

void Module::zero_grad() {
  for (const ParameterPtr& p : parameters()) p->zero_grad();
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [name, p] : named_parameters()) out.emplace_back(name, p->value().detach());
  return out;
}

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  const auto named = named_parameters();
  std::set<std::string> missing, used;
  for (const auto& [name, p] : named) {
    auto it = state.find(name);
    if (it == state.end()) {
      missing.insert(name);
      continue;
    }
    used.insert(name);
    const Tensor& t = it->second;
    if (t.shape() != p->value().shape() || t.dtype() != p->value().dtype()) {
      throw Error("load_state_dict: " + name + " is " + std::string(dtype_name(t.dtype())) +
                  shape_str(t.shape()) + " but the module's parameter is " +
                  std::string(dtype_name(p->value().dtype())) + shape_str(p->value().shape()));
    }
  }
  std::set<std::string> unexpected;
  for (const auto& [name, t] : state) {
    if (!used.count(name)) unexpected.insert(name);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string msg = "load_state_dict: names differ from the module's";
    auto list = [](const std::set<std::string>& s) {
      std::string r;
      for (const auto& n : s) r += (r.empty() ? "" : ", ") + n;
      return r;
    };
    if (!missing.empty()) msg += "; missing: " + list(missing);
    if (!unexpected.empty()) msg += "; unexpected: " + list(unexpected);
    throw Error(msg + " (pass strict = false to load the common ones)");
  }
  for (const auto& [name, p] : named) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    const Device dev = p->value().device();
    p->zero_grad();
    p->set(it->second.device() == dev ? it->second : it->second.to(dev));
  }
}

std::string Module::to_string() const {
  std::string out;
  to_string_into(out, "", 0);
  return out;
}

void Module::to_string_into(std::string& out, const std::string& prefix, int indent) const {
  out += prefix + name();
  if (children_.empty()) return;
  out += "(\n";
  for (const auto& [child_name, child] : children_) {
    out += std::string(static_cast<size_t>(indent + 2), ' ');
    child->to_string_into(out, "(" + child_name + "): ", indent + 2);
    out += "\n";
  }
  out += std::string(static_cast<size_t>(indent), ' ') + ")";
}

// ---- init ----
namespace init {
Tensor kaiming_uniform(const Shape& shape, double a, int64_t fan_in, const Placement& at) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = fan_in > 0 ? gain * std::sqrt(3.0 / static_cast<double>(fan_in)) : 0.0;
  return uniform(shape, -bound, bound, at.dtype, at.device);
}
}  // namespace init

namespace {
// PyTorch's bias initialisation for Linear and Conv2d.
Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, const Placement& at) {
  const double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
  return uniform(shape, -bound, bound, at.dtype, at.device);
}
}  // namespace

// ---- Linear ----
Linear::Linear(int64_t in_features, int64_t out_features, bool bias, const Placement& at)
    : in_(in_features), out_(out_features) {
  if (in_features < 0 || out_features < 0) {
    throw Error("Linear: sizes must be >= 0, got " + std::to_string(in_features) + " and " +
                std::to_string(out_features));
  }
  weight_ =
      register_parameter("weight", init::kaiming_uniform({out_, in_}, std::sqrt(5.0), in_, at));
  if (bias) bias_ = register_parameter("bias", fan_in_uniform({out_}, in_, at));
}

Tensor Linear::forward(const Tensor& x) { return apply(x, false); }

Tensor Linear::forward_relu(const Tensor& x) { return apply(x, true); }

void Linear::quantize(BlockFormat format) {
  if (format_) throw Error("Linear.quantize: the weight is already packed");
  if (in_ % kQuantBlock != 0) {
    throw Error("Linear.quantize: in_features " + std::to_string(in_) + " is not a multiple of " +
                std::to_string(kQuantBlock) + " (whole blocks)");
  }
  Tensor packed;
  {
    NoGradGuard no_grad;
    packed = pack_blocks(weight_->value().detach(), format);
  }
  weight_ = replace_parameter("weight", packed);
  format_ = format;
}

Tensor Linear::apply(const Tensor& x, bool relu) {
  const Tensor& w = weight_->value();
  const Tensor b = bias_ ? bias_->value() : Tensor();
  if (format_) {  // packed weights: no gradient flows to them (inference only)
    if (x.dim() < 1 || x.shape().back() != in_) {
      throw Error("Linear: input " + shape_str(x.shape()) + " must end in " + std::to_string(in_) +
                  " features");
    }
    Shape out_shape = x.shape();
    out_shape.back() = out_;
    const Tensor rows = x.dim() == 2 ? x : x.reshape({-1, in_});
    Tensor y = linear_blocks(rows, w, *format_, b);
    if (relu) y = y.relu();
    return x.dim() == 2 ? y : y.reshape(out_shape);
  }
  std::vector<const Tensor*> inputs = {&x, &w};
  if (bias_) inputs.push_back(&b);
  const bool record = autograd::needs_record(inputs);
  // Under autocast(kBF16) (or for rows of another rank) the product is a matmul, which then
  // computes in bf16 itself.
  if (x.dim() != 2 || autocast_dtype() == kBF16) {
    Tensor y = x.matmul(w.t());
    if (bias_) y = y + b;
    return relu ? y.relu() : y;
  }
  // Rows of f32 on a device with op Linear: the matmul, bias and ReLU in one op.
  const std::shared_ptr<detail::Sink>& sink = x.impl()->sink;
  const bool fused = x.dtype() == kF32 && w.dtype() == kF32 && (!bias_ || b.dtype() == kF32) &&
                     sink->supports(ir::OpCode::kLinear);
  Tensor y;
  {
    NoGradGuard no_grad;
    if (fused) {
      using detail::in;
      y = detail::emit(sink,
                       ir::Linear{.x = in(x), .w = in(w), .bias = in(b), .relu = relu, .out = {}},
                       {&x, &w, &b});
    } else {
      y = x.matmul(w.t());
      if (bias_) y = y + b;
      if (relu) y = y.relu();
    }
  }
  if (!record) return y;
  // Recorded as one node: with g the incoming gradient, masked by y > 0 after a ReLU, d x = g w,
  // d w = g^T x and d bias = the sum of g's rows; four ops where the forward's own rules took
  // six (the transposes of w, x and of the weight's gradient), and the weight's gradient comes
  // out row-major, as the optimizer reads it, instead of as the transposed view of x^T g.
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = bias_ && b.requires_grad();
  const Tensor saved_x = need_w ? autograd::alias_of(x) : Tensor();
  const Tensor saved_w = need_x ? autograd::alias_of(w) : Tensor();
  const Tensor saved_y = relu ? autograd::alias_of(y) : Tensor();
  const size_t n = inputs.size();
  autograd::record_composite(
      relu ? "linear_relu" : "linear", inputs, y,
      [saved_x, saved_w, saved_y, need_x, need_w, need_b, n](const Tensor& grad) {
        const Tensor g = saved_y.defined() ? grad * saved_y.gt(0) : grad;
        std::vector<Tensor> grads(n);
        if (need_x) grads[0] = g.matmul(saved_w);
        if (need_w) grads[1] = g.t().matmul(saved_x);
        if (need_b) grads[2] = g.sum({0});
        return grads;
      });
  return y;
}

std::string Linear::name() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + b(bias_ != nullptr) +
         (format_ ? ", weight=" + std::string(block_format_name(*format_)) : std::string()) + ")";
}

// ---- Conv2d ----
Conv2d::Conv2d(const Conv2dOptions& options, const Placement& at) : o_(options) {
  if (o_.kernel_size.size() != 2 || o_.stride.size() != 2 || o_.padding.size() != 2 ||
      o_.dilation.size() != 2) {
    throw Error("Conv2d: kernel_size, stride, padding and dilation take 2 entries each");
  }
  if (o_.groups < 1 || o_.in_channels % o_.groups != 0 || o_.out_channels % o_.groups != 0) {
    throw Error("Conv2d: groups " + std::to_string(o_.groups) + " must divide in_channels " +
                std::to_string(o_.in_channels) + " and out_channels " +
                std::to_string(o_.out_channels));
  }
  const int64_t cg = o_.in_channels / o_.groups;
  const int64_t fan_in = cg * o_.kernel_size[0] * o_.kernel_size[1];
  weight_ = register_parameter(
      "weight", init::kaiming_uniform({o_.out_channels, cg, o_.kernel_size[0], o_.kernel_size[1]},
                                      std::sqrt(5.0), fan_in, at));
  if (o_.bias) bias_ = register_parameter("bias", fan_in_uniform({o_.out_channels}, fan_in, at));
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride,
               int64_t padding, bool bias, const Placement& at)
    : Conv2d(Conv2dOptions{in_channels,
                           out_channels,
                           {kernel_size, kernel_size},
                           {stride, stride},
                           {padding, padding},
                           {1, 1},
                           1,
                           bias},
             at) {}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight_->value(), bias_ ? bias_->value() : Tensor(), o_.stride, o_.padding,
                o_.dilation, o_.groups);
}

std::string Conv2d::name() const {
  std::string s = "Conv2d(" + std::to_string(o_.in_channels) + ", " +
                  std::to_string(o_.out_channels) + ", kernel_size=" + pair_str(o_.kernel_size) +
                  ", stride=" + pair_str(o_.stride);
  if (o_.padding != std::vector<int64_t>{0, 0}) s += ", padding=" + pair_str(o_.padding);
  if (o_.dilation != std::vector<int64_t>{1, 1}) s += ", dilation=" + pair_str(o_.dilation);
  if (o_.groups != 1) s += ", groups=" + std::to_string(o_.groups);
  if (!o_.bias) s += ", bias=false";
  return s + ")";
}

// ---- pooling ----
MaxPool2d::MaxPool2d(int64_t kernel_size, std::optional<int64_t> stride, int64_t padding)
    : k_(kernel_size), s_(stride.value_or(kernel_size)), p_(padding) {}
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, {k_, k_}, {s_, s_}, {p_, p_}); }
std::string MaxPool2d::name() const {
  return "MaxPool2d(kernel_size=" + std::to_string(k_) + ", stride=" + std::to_string(s_) +
         ", padding=" + std::to_string(p_) + ")";
}

AvgPool2d::AvgPool2d(int64_t kernel_size, std::optional<int64_t> stride, int64_t padding)
    : k_(kernel_size), s_(stride.value_or(kernel_size)), p_(padding) {}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, {k_, k_}, {s_, s_}, {p_, p_}); }
std::string AvgPool2d::name() const {
  return "AvgPool2d(kernel_size=" + std::to_string(k_) + ", stride=" + std::to_string(s_) +
         ", padding=" + std::to_string(p_) + ")";
}

// ---- Dropout ----
Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0 && p <= 1)) throw Error("Dropout: p must lie in [0, 1], got " + std::to_string(p));
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0) return x;
  if (p_ == 1) return x * 0.0;
  Tensor keep = bernoulli(full(x.shape(), 1.0 - p_, x.dtype(), x.device()));
  return x * (keep * (1.0 / (1.0 - p_)));
}

std::string Dropout::name() const {
  std::ostringstream os;
  os << "Dropout(p=" << p_ << ")";
  return os.str();
}

// ---- LayerNorm ----
LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine,
                     const Placement& at)
    : shape_(std::move(normalized_shape)), eps_(eps) {
  if (elementwise_affine) {
    weight_ = register_parameter("weight", ones(shape_, at.dtype, at.device));
    bias_ = register_parameter("bias", zeros(shape_, at.dtype, at.device));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, shape_, weight_ ? weight_->value() : Tensor(),
                    bias_ ? bias_->value() : Tensor(), eps_);
}

std::string LayerNorm::name() const {
  std::ostringstream os;
  os << "LayerNorm(" << shape_str(shape_) << ", eps=" << eps_
     << ", elementwise_affine=" << b(weight_ != nullptr) << ")";
  return os.str();
}

// ---- Embedding ----
Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, const Placement& at)
    : num_(num_embeddings), dim_(embedding_dim) {
  weight_ = register_parameter("weight", normal({num_, dim_}, 0.0, 1.0, at.dtype, at.device));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(weight_->value(), indices); }

std::string Embedding::name() const {
  return "Embedding(" + std::to_string(num_) + ", " + std::to_string(dim_) + ")";
}

std::string Flatten::name() const {
  return "Flatten(start_dim=" + std::to_string(start_) + ", end_dim=" + std::to_string(end_) + ")";
}

// ---- Sequential ----
void Sequential::push_back(std::shared_ptr<Module> module) {
  if (!module) throw Error("Sequential: a module is null");
  register_module(std::to_string(children().size()), std::move(module));
}

std::vector<std::vector<Module*>> Sequential::layers() {
  std::vector<std::vector<Module*>> out;
  for (const auto& [name, m] : children()) out.push_back({m.get()});
  return out;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const auto& mods = children();
  for (size_t i = 0; i < mods.size(); ++i) {
    Module& m = *mods[i].second;
    // A Linear followed by a ReLU (those classes themselves, not subclasses that may forward
    // otherwise): one op on devices that have it (Linear::forward_relu).
    if (typeid(m) == typeid(Linear) && i + 1 < mods.size() &&
        typeid(*mods[i + 1].second) == typeid(ReLU)) {
      y = static_cast<Linear&>(m).forward_relu(y);
      ++i;
      continue;
    }
    y = m.forward(y);
  }
  return y;
}

// ---- losses ----
Tensor cross_entropy(const Tensor& logits, const Tensor& target) {
  if (logits.dim() != 2)
    throw Error("cross_entropy: logits must be [N, C], got " + shape_str(logits.shape()));
  if (target.dim() != 1 || target.size(0) != logits.size(0)) {
    throw Error("cross_entropy: target must be [N] = [" + std::to_string(logits.size(0)) +
                "] class indices, got " + shape_str(target.shape()));
  }
  if (target.dtype() != kI64 && target.dtype() != kI32) {
    throw Error("cross_entropy: target must hold class indices (i64 or i32), got " +
                std::string(dtype_name(target.dtype())));
  }
  const Tensor* inputs[] = {&logits};
  if (!autograd::needs_record(inputs)) {
    return -logits.log_softmax(1).gather(1, target.reshape({-1, 1})).mean();
  }
  // Recorded as one node: d loss / d logits = (softmax(logits) - one_hot(target)) * g / N is six
  // ops (exp, one_hot, cast, sub, div, mul) where the chain of the forward's own rules took nine
  // (neg's, mean's, gather's scatter into zeros, log_softmax's), on tensors of a batch's logits
  // whose cost is the op more than the arithmetic.
  Tensor logp, loss;
  {
    NoGradGuard no_grad;
    logp = logits.log_softmax(1);
    loss = -logp.gather(1, target.reshape({-1, 1})).mean();
  }
  const Tensor index = target;
  const int64_t n = logits.size(0), classes = logits.size(1);
  autograd::record_composite(
      "cross_entropy", inputs, loss, [logp, index, n, classes](const Tensor& g) {
        const Tensor hot = one_hot(index, classes).to(logp.dtype());
        return std::vector<Tensor>{(logp.exp() - hot) * (g / static_cast<double>(n))};
      });
  return loss;
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  if (input.shape() != target.shape()) {
    throw Error("mse_loss: input " + shape_str(input.shape()) + " and target " +
                shape_str(target.shape()) + " must have the same shape");
  }
  return (input - target).square().mean();
}

}  // namespace tw::nn
