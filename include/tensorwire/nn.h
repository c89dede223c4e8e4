// Neural-network building blocks over tw::Tensor and autograd, modelled on torch.nn:
//
//   tw::manual_seed(0);
//   tw::nn::Sequential model(tw::nn::Linear(64, 128), tw::nn::ReLU(), tw::nn::Linear(128, 10));
//   model.to(device);
//   tw::Tensor loss = tw::nn::cross_entropy(model(x), labels);
//   loss.backward();
//
// Parameters are initialised as PyTorch does (kaiming_uniform_(a = sqrt(5)) for Linear and Conv2d
// weights, bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in))) from the global seeded generator, so the
// same seed gives the same model on every device.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensorwire/autograd.h"
#include "tensorwire/export.h"
#include "tensorwire/tensor.h"

TW_API_BEGIN

namespace tw::nn {

// A trainable tensor with a stable identity. Ops are functional, so an optimizer's update makes a
// new tensor; set() rebinds this Parameter to it (keeping requires_grad and the accumulated
// grad), and every holder of the Parameter (its module, the optimizer, the user) sees the new
// value. f32 and f64 values require grad; others (a Linear's packed quantized weight) do not.
class Parameter {
 public:
  explicit Parameter(Tensor value);
  const Tensor& value() const { return value_; }
  const Tensor& operator*() const { return value_; }
  const Tensor* operator->() const { return &value_; }
  Tensor grad() const { return value_.grad(); }
  // Rebinds to `value` (same shape and dtype; detached from any graph).
  void set(Tensor value);
  void zero_grad() { value_.zero_grad(); }

 private:
  Tensor value_;
};
using ParameterPtr = std::shared_ptr<Parameter>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = default;
  Module(Module&&) = default;
  Module& operator=(const Module&) = default;
  Module& operator=(Module&&) = default;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  // "Linear(in_features=64, out_features=128, bias=true)".
  virtual std::string name() const = 0;
  // The module tree, one module per line, as torch prints it.
  std::string to_string() const;

  // This module's parameters and its children's, in registration order.
  std::vector<ParameterPtr> parameters() const;
  // Dotted names: "0.weight", "2.bias", "encoder.layers.1.weight".
  std::vector<std::pair<std::string, ParameterPtr>> named_parameters() const;
  // Training mode (Dropout drops) or evaluation mode (Dropout is the identity); recursive.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Copies every parameter to `device` (rebinding the Parameters).
  void to(const Device& device);
  void zero_grad();
  // Named parameter values, and loading them back (copied onto each parameter's device; shapes
  // and dtypes must match; strict: the names must match exactly).
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  // Packs the weight of every Linear in this module and its children into `format` blocks
  // (weight-only quantization, for inference; nn::quantize below). Returns how many it packed.
  int quantize_linears(BlockFormat format);

  // The layers tw::nn::place() (tensorwire/split.h) may put on different devices, in order: each
  // the modules whose parameters go to one device together. By default the module itself, one
  // layer; a Sequential's are its modules, a GPT's its embeddings, each block, then its final
  // norm and head.
  virtual std::vector<std::vector<Module*>> layers() { return {{this}}; }

 protected:
  ParameterPtr register_parameter(std::string name, Tensor value);
  // Rebinds parameter `name` to a new Parameter holding `value` (any shape and dtype: a packed
  // weight); holders of the old Parameter keep the old value.
  ParameterPtr replace_parameter(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }

 private:
  void to_string_into(std::string& out, const std::string& prefix, int indent) const;
  std::vector<std::pair<std::string, ParameterPtr>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Where a module's parameters are created.
struct Placement {
  Device device = Device::cpu();
  DType dtype = kF32;
};

// y = x W^T + b, W [out, in].
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, const Placement& at = {});
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)): for f32 rows [N, in] one op (matmul, bias and ReLU together) on a device
  // that has it. Sequential calls it for a Linear followed by a ReLU.
  Tensor forward_relu(const Tensor& x);
  std::string name() const override;
  const ParameterPtr& weight() const { return weight_; }
  const ParameterPtr& bias() const { return bias_; }
  // Replaces the f32 weight by its `format` blocks: "weight" then holds u8 [out, in / 32 *
  // block bytes] (state_dict and checkpoints carry it packed) and forward runs linear_blocks,
  // without gradients. in_features must be a multiple of 32.
  void quantize(BlockFormat format);
  std::optional<BlockFormat> quantized() const { return format_; }
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  Tensor apply(const Tensor& x, bool relu);
  int64_t in_, out_;
  ParameterPtr weight_, bias_;
  std::optional<BlockFormat> format_;
};

// Weight-only quantization of a model for inference: every Linear whose in_features is a
// multiple of 32 (the module itself, when it is one) gets "q8" (ggml Q8_0 blocks) or "q4" (Q4_0)
// weights (Module::quantize_linears). Returns how many Linears were packed; throws for another
// scheme. block_format_of also takes the format names "q8_0" and "q4_0".
int quantize(Module& module, const std::string& scheme);
BlockFormat block_format_of(const std::string& scheme);

struct Conv2dOptions {
  int64_t in_channels = 1, out_channels = 1;
  std::vector<int64_t> kernel_size = {3, 3};
  std::vector<int64_t> stride = {1, 1}, padding = {0, 0}, dilation = {1, 1};
  int64_t groups = 1;
  bool bias = true;
};

class Conv2d : public Module {
 public:
  explicit Conv2d(const Conv2dOptions& options, const Placement& at = {});
  // Square kernel, stride and padding.
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, int64_t stride = 1,
         int64_t padding = 0, bool bias = true, const Placement& at = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override;
  const ParameterPtr& weight() const { return weight_; }
  const ParameterPtr& bias() const { return bias_; }

 private:
  Conv2dOptions o_;
  ParameterPtr weight_, bias_;
};

class MaxPool2d : public Module {
 public:
  // stride defaults to the kernel size.
  explicit MaxPool2d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt,
                     int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;

 private:
  int64_t k_, s_, p_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel_size, std::optional<int64_t> stride = std::nullopt,
                     int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;

 private:
  int64_t k_, s_, p_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.relu(); }
  std::string name() const override { return "ReLU()"; }
};

class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x.gelu(); }
  std::string name() const override { return "GELU()"; }
};

// Zeroes each element with probability p in training mode (a Bernoulli mask drawn from the
// global seeded generator) and scales the rest by 1 / (1 - p); the identity in eval mode.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;

 private:
  double p_;
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     const Placement& at = {});
  Tensor forward(const Tensor& x) override;
  std::string name() const override;

 private:
  Shape shape_;
  double eps_;
  ParameterPtr weight_, bias_;
};

// Rows of a [num_embeddings, embedding_dim] table (initialised N(0, 1)) looked up by i64 indices.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, const Placement& at = {});
  Tensor forward(const Tensor& indices) override;
  std::string name() const override;
  const ParameterPtr& weight() const { return weight_; }

 private:
  int64_t num_, dim_;
  ParameterPtr weight_;
};

class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_(start_dim), end_(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_, end_); }
  std::string name() const override;

 private:
  int64_t start_, end_;
};

// ---- recurrent layers, as torch.nn.RNN, LSTM and GRU (gate order and parameter names as
// PyTorch's, so state_dicts move between the two; initialised U(-1/sqrt(H), 1/sqrt(H))). Each step
// is composed of existing ops (matmul, sigmoid, tanh, ...), so autograd differentiates it
// through time and every device runs it. ----
struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;
  bool batch_first = false;  // x [B, T, in] and output [B, T, D * H]
  bool bidirectional = false;
  std::string nonlinearity = "tanh";  // RNN only: "tanh" or "relu"
};

// output: the last layer's hidden state at every step ([T, B, D * H]; [B, T, D * H] batch_first;
// [T, D * H] for an unbatched [T, in] input). h_n: every layer and direction's last hidden state
// [L * D, B, H] ([L * D, H] unbatched); c_n: LSTM's cell state alike (undefined otherwise).
struct RNNOutput {
  Tensor output, h_n, c_n;
};

class RNNBase : public Module {
 public:
  enum class Kind { kRnn, kLstm, kGru };
  Tensor forward(const Tensor& x) override { return forward_state(x).output; }
  // h0 (and c0, LSTM) shaped as h_n; zeros when undefined.
  RNNOutput forward_state(const Tensor& x, const Tensor& h0 = {}, const Tensor& c0 = {});
  std::string name() const override;
  int64_t input_size() const { return in_; }
  int64_t hidden_size() const { return hidden_; }
  const RNNOptions& options() const { return o_; }

 protected:
  RNNBase(Kind kind, int64_t input_size, int64_t hidden_size, RNNOptions options,
          const Placement& at);

 private:
  Kind kind_;
  int64_t in_, hidden_;
  RNNOptions o_;
  // Per layer and direction (l * D + d): weight_ih [G * H, in], weight_hh [G * H, H], biases.
  std::vector<ParameterPtr> w_ih_, w_hh_, b_ih_, b_hh_;
};

// h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (relu with nonlinearity "relu").
class RNN : public RNNBase {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {}, const Placement& at = {})
      : RNNBase(Kind::kRnn, input_size, hidden_size, std::move(options), at) {}
};
// Gates i, f, g, o: c' = f * c + i * g, h' = o * tanh(c').
class LSTM : public RNNBase {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {}, const Placement& at = {})
      : RNNBase(Kind::kLstm, input_size, hidden_size, std::move(options), at) {}
};
// Gates r, z, n: n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)), h' = (1 - z) * n + z * h.
class GRU : public RNNBase {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {}, const Placement& at = {})
      : RNNBase(Kind::kGru, input_size, hidden_size, std::move(options), at) {}
};

// Applies its modules in order; they are named "0", "1", ...
class Sequential : public Module {
 public:
  Sequential() = default;
  // Modules by value (moved in) or as shared_ptr (shared with the caller).
  template <class... Ms>
  requires(sizeof...(Ms) > 0 &&
           !(sizeof...(Ms) == 1 && (std::is_same_v<std::decay_t<Ms>, Sequential> &&
                                    ...))) explicit Sequential(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }
  void push_back(std::shared_ptr<Module> module);
  template <class M, class = std::enable_if_t<std::is_base_of_v<Module, std::decay_t<M>>>>
  void push_back(M&& module) {
    push_back(std::shared_ptr<Module>(std::make_shared<std::decay_t<M>>(std::forward<M>(module))));
  }
  template <class M>
  void push_back(std::shared_ptr<M> module) {
    push_back(std::shared_ptr<Module>(std::move(module)));
  }
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  std::vector<std::vector<Module*>> layers() override;
  size_t size() const { return children().size(); }
  Module& operator[](size_t i) const { return *children().at(i).second; }
};

// Mean over the batch of -log softmax(logits)[target]: logits [N, C] float, target [N] i64.
Tensor cross_entropy(const Tensor& logits, const Tensor& target);
// Mean of (input - target)^2.
Tensor mse_loss(const Tensor& input, const Tensor& target);

namespace init {
// U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)) (torch's
// kaiming_uniform_ with the leaky_relu nonlinearity and fan_in mode).
Tensor kaiming_uniform(const Shape& shape, double a, int64_t fan_in, const Placement& at = {});
}  // namespace init

}  // namespace tw::nn
TW_API_END
