// Gradient checks: every differentiable op's backward rule against central finite differences in
// f64, on small random inputs, on the local CPU device, on a remote device (a server process
// over loopback) over each transport (tcp, unix, tls) and, when built with libtorch, on the
// local torch device. One checker, one case
// table, run over every device; then the CPU and torch backends' gradients against each other.
//
// A case is a function of its inputs; the checker reduces its output to the scalar
// loss = sum(out * r) with fixed random r (so every output element's gradient matters), runs
// backward, and compares each input's grad() with (loss(x + eps) - loss(x - eps)) / (2 eps) for
// every element. Inputs are drawn away from kinks (|x| >= 0.1, distinct values) so that
// non-smooth ops (relu, abs, max, pooling, clamp) are differentiable where they are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "support/remote_device.h"
#include "tensorwire/nn.h"
#include "tensorwire/remote.h"

namespace tw {
namespace {

enum class Gen {
  kNormal,    // N(0, 1) with |x| >= 0.1
  kPositive,  // U(0.5, 2)
  kIndex,     // integers in [0, index_max), i64, no grad
  kMask,      // bool, no grad
};

struct Input {
  Shape shape;
  Gen gen = Gen::kNormal;
  bool grad = true;
  int64_t index_max = 0;
};

inline Input normal(Shape s) { return {std::move(s), Gen::kNormal, true, 0}; }
inline Input positive(Shape s) { return {std::move(s), Gen::kPositive, true, 0}; }
inline Input constant(Shape s) { return {std::move(s), Gen::kNormal, false, 0}; }
inline Input index(Shape s, int64_t max) { return {std::move(s), Gen::kIndex, false, max}; }
inline Input mask(Shape s) { return {std::move(s), Gen::kMask, false, 0}; }

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Case {
  std::string name;
  std::vector<Input> inputs;
  Fn fn;
  double eps = 1e-6;
};

uint64_t seed_of(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (char c : s) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

// Host values of one input: doubles for float inputs, else integers/bools stored as doubles.
std::vector<double> generate(const Input& in, std::mt19937_64& rng) {
  int64_t n = 1;
  for (int64_t d : in.shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  std::normal_distribution<double> nd(0, 1);
  std::uniform_real_distribution<double> ud(0.5, 2);
  for (auto& x : v) {
    switch (in.gen) {
      case Gen::kNormal:
        do x = nd(rng);
        while (std::abs(x) < 0.1);
        break;
      case Gen::kPositive: x = ud(rng); break;
      case Gen::kIndex: x = static_cast<double>(rng() % static_cast<uint64_t>(in.index_max)); break;
      case Gen::kMask: x = static_cast<double>(rng() % 2); break;
    }
  }
  return v;
}

Tensor make(const Input& in, const std::vector<double>& v, const Device& d) {
  switch (in.gen) {
    case Gen::kIndex:
      return from_vector<int64_t>(std::vector<int64_t>(v.begin(), v.end()), in.shape, d);
    case Gen::kMask: {
      std::vector<uint8_t> b(v.begin(), v.end());
      return from_bytes(b, in.shape, kBool, d);
    }
    default: return from_vector<double>(v, in.shape, d);
  }
}

// One backward pass of a case on a device: the inputs (values and tensors, those that take a
// gradient marked so), the fixed random weights r of the loss sum(out * r), after
// (out * r).sum().backward().
struct Backward {
  std::vector<std::vector<double>> values;
  std::vector<Tensor> xs;
  Tensor weights;
};

void run_backward(const Case& c, const Device& dev, Backward& b) {
  std::mt19937_64 rng(seed_of(c.name));
  for (const Input& in : c.inputs) b.values.push_back(generate(in, rng));
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    b.xs.push_back(make(c.inputs[i], b.values[i], dev));
    if (c.inputs[i].grad) b.xs.back().set_requires_grad();
  }
  Tensor out = c.fn(b.xs);
  ASSERT_EQ(out.dtype(), kF64);
  ASSERT_TRUE(out.requires_grad());
  std::vector<double> r(static_cast<size_t>(out.numel()));
  std::uniform_real_distribution<double> rd(-1, 1);
  for (auto& x : r) x = rd(rng);
  b.weights = from_vector<double>(r, out.shape(), dev);
  (out * b.weights).sum().backward();
}

class GradCheck : public ::testing::TestWithParam<std::string> {
 protected:
  Device device() const { return testing::test_device(GetParam()); }

  void SetUp() override {
    if (const testing::LocalBackend* b = testing::local_backend_of(GetParam())) {
      TW_SKIP_IF_UNAVAILABLE(b->unavailable);
    }
  }
  // A backend that declares ops unsupported (support/local_backends.h) may decline a case: its
  // refusal ends the case (counted in declined_) and the rest still run.
  void check(const Case& c) {
    try {
      check_case(c);
    } catch (const std::exception& e) {
      if (GetParam() == "cpu" || !testing::is_refusal(e.what())) throw;
      ++declined_;
    }
  }
  void TearDown() override {
    if (declined_ > 0) RecordProperty("declined_cases", declined_);
  }
  int declined_ = 0;

  void check_case(const Case& c) {
    SCOPED_TRACE(c.name + " on " + GetParam());
    const Device dev = device();
    Backward b;
    ASSERT_NO_FATAL_FAILURE(run_backward(c, dev, b));
    const std::vector<std::vector<double>>& values = b.values;
    const std::vector<Tensor>& xs = b.xs;
    const Tensor& weights = b.weights;

    // The loss at perturbed inputs, read later: every loss of an input is queued before the
    // first is read, so that on a remote device the reads travel together rather than one
    // round trip each.
    auto loss_at = [&](const std::vector<std::vector<double>>& vals) {
      NoGradGuard no_grad;
      std::vector<Tensor> ys;
      for (size_t i = 0; i < c.inputs.size(); ++i) ys.push_back(make(c.inputs[i], vals[i], dev));
      return (c.fn(ys) * weights).sum().to_vector_async<double>();
    };
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!c.inputs[i].grad) {
        EXPECT_FALSE(xs[i].grad().defined()) << "input " << i;
        continue;
      }
      ASSERT_TRUE(xs[i].grad().defined()) << "input " << i << " got no gradient";
      ASSERT_EQ(xs[i].grad().shape(), c.inputs[i].shape) << "input " << i;
      const std::vector<double> analytic = xs[i].grad().to_vector<double>();
      std::vector<std::vector<double>> vals = values;
      std::vector<std::future<std::vector<double>>> ups, downs;
      for (size_t j = 0; j < values[i].size(); ++j) {
        vals[i][j] = values[i][j] + c.eps;
        ups.push_back(loss_at(vals));
        vals[i][j] = values[i][j] - c.eps;
        downs.push_back(loss_at(vals));
        vals[i][j] = values[i][j];
      }
      for (size_t j = 0; j < values[i].size(); ++j) {
        const double up = ups[j].get().at(0), down = downs[j].get().at(0);
        const double numeric = (up - down) / (2 * c.eps);
        EXPECT_NEAR(analytic[j], numeric, 1e-5 + 1e-4 * std::abs(numeric))
            << "input " << i << " element " << j;
      }
    }
  }
};

// ------------------------------------------------------------------------------ the cases
using V = const std::vector<Tensor>&;

std::vector<Case> elementwise_cases() {
  std::vector<Case> cs;
  auto unary = [&](const std::string& name, Input in, std::function<Tensor(const Tensor&)> f) {
    cs.push_back({name, {std::move(in)}, [f](V x) { return f(x[0]); }});
  };
  unary("neg", normal({2, 3}), [](const Tensor& x) { return x.neg(); });
  unary("abs", normal({2, 3}), [](const Tensor& x) { return x.abs(); });
  unary("exp", normal({2, 3}), [](const Tensor& x) { return x.exp(); });
  unary("log", positive({2, 3}), [](const Tensor& x) { return x.log(); });
  unary("log1p", positive({2, 3}), [](const Tensor& x) { return x.log1p(); });
  unary("sqrt", positive({2, 3}), [](const Tensor& x) { return x.sqrt(); });
  unary("rsqrt", positive({2, 3}), [](const Tensor& x) { return x.rsqrt(); });
  unary("sin", normal({2, 3}), [](const Tensor& x) { return x.sin(); });
  unary("cos", normal({2, 3}), [](const Tensor& x) { return x.cos(); });
  unary("tanh", normal({2, 3}), [](const Tensor& x) { return x.tanh(); });
  unary("sigmoid", normal({2, 3}), [](const Tensor& x) { return x.sigmoid(); });
  unary("relu", normal({2, 3}), [](const Tensor& x) { return x.relu(); });
  unary("gelu", normal({2, 3}), [](const Tensor& x) { return x.gelu(); });
  // Through gelu's minimum (x ~ -0.75, where its derivative changes sign) and its tails.
  unary("gelu wide", normal({3, 5}), [](const Tensor& x) { return (x * 2.5).gelu(); });
  unary("erf", normal({2, 3}), [](const Tensor& x) { return x.erf(); });
  unary("reciprocal", normal({2, 3}), [](const Tensor& x) { return x.reciprocal(); });
  unary("floor", normal({2, 3}), [](const Tensor& x) { return x.floor(); });
  unary("ceil", normal({2, 3}), [](const Tensor& x) { return x.ceil(); });
  unary("round", normal({2, 3}), [](const Tensor& x) { return x.round(); });
  unary("sign", normal({2, 3}), [](const Tensor& x) { return x.sign(); });
  unary("square", normal({2, 3}), [](const Tensor& x) { return x.square(); });
  unary("0-d exp", normal({}), [](const Tensor& x) { return x.exp(); });

  auto binary = [&](const std::string& name, Input a, Input b,
                    std::function<Tensor(const Tensor&, const Tensor&)> f) {
    cs.push_back({name, {std::move(a), std::move(b)}, [f](V x) { return f(x[0], x[1]); }});
  };
  binary("add", normal({2, 3}), normal({2, 3}), [](auto& a, auto& b) { return a + b; });
  binary("add broadcast", normal({2, 1, 3}), normal({4, 1}),
         [](auto& a, auto& b) { return a + b; });
  binary("sub broadcast", normal({3}), normal({2, 3}), [](auto& a, auto& b) { return a - b; });
  binary("mul broadcast", normal({2, 3}), normal({1, 3}), [](auto& a, auto& b) { return a * b; });
  binary("mul same tensor", normal({2, 3}), constant({1}), [](auto& a, auto&) { return a * a; });
  binary("div broadcast", normal({2, 3}), normal({2, 1}), [](auto& a, auto& b) { return a / b; });
  binary("pow", positive({2, 3}), normal({2, 3}), [](auto& a, auto& b) { return a.pow(b); });
  binary("pow broadcast", positive({2, 3}), normal({3}), [](auto& a, auto& b) { return a.pow(b); });
  binary("maximum", normal({2, 3}), normal({2, 3}), [](auto& a, auto& b) { return a.maximum(b); });
  binary("minimum broadcast", normal({2, 3}), normal({3}),
         [](auto& a, auto& b) { return a.minimum(b); });
  binary("remainder", normal({2, 3}), positive({2, 3}),
         [](auto& a, auto& b) { return a.remainder(b); });
  binary("mul no grad b", normal({2, 3}), constant({2, 3}), [](auto& a, auto& b) { return a * b; });

  auto scalar = [&](const std::string& name, Input a, std::function<Tensor(const Tensor&)> f) {
    cs.push_back({name, {std::move(a)}, [f](V x) { return f(x[0]); }});
  };
  scalar("add scalar", normal({2, 3}), [](const Tensor& x) { return x + 1.5; });
  scalar("sub scalar", normal({2, 3}), [](const Tensor& x) { return x - 2; });
  scalar("scalar sub", normal({2, 3}), [](const Tensor& x) { return 2.0 - x; });
  scalar("mul scalar", normal({2, 3}), [](const Tensor& x) { return x * -3.0; });
  scalar("scalar mul", normal({2, 3}), [](const Tensor& x) { return 0.5 * x; });
  scalar("div scalar", normal({2, 3}), [](const Tensor& x) { return x / 4.0; });
  scalar("scalar div", normal({2, 3}), [](const Tensor& x) { return 3.0 / x; });
  scalar("scalar add", normal({2, 3}), [](const Tensor& x) { return 1 + x; });
  scalar("pow scalar", positive({2, 3}), [](const Tensor& x) { return x.pow(2.5); });
  scalar("pow scalar 0", positive({2, 3}), [](const Tensor& x) { return x.pow(0.0) + x; });
  scalar("remainder scalar", normal({2, 3}), [](const Tensor& x) { return x.remainder(0.7); });

  cs.push_back({"where", {mask({2, 3}), normal({2, 3}), normal({3})}, [](V x) {
                  return where(x[0], x[1], x[2]);
                }});
  cs.push_back({"where broadcast cond", {mask({3}), normal({2, 1}), normal({2, 3})}, [](V x) {
                  return where(x[0], x[1], x[2]);
                }});
  cs.push_back({"clamp both", {normal({3, 4})}, [](V x) { return x[0].clamp(-0.55, 0.45); }});
  cs.push_back({"clamp lo", {normal({3, 4})}, [](V x) { return x[0].clamp(0.05, std::nullopt); }});
  cs.push_back({"clamp hi", {normal({3, 4})}, [](V x) { return x[0].clamp(std::nullopt, -0.05); }});
  cs.push_back({"masked_fill", {normal({2, 3}), mask({3})}, [](V x) {
                  return x[0].masked_fill(x[1], 2.0);
                }});
  cs.push_back({"cast f64 to f64", {normal({2, 3})}, [](V x) { return x[0].to(kF64) * 2.0; }});
  // Through f32 and back: rounding to f32 is far above eps = 1e-6, so the step is coarse
  // (the function is linear: central differences stay exact up to f32 rounding).
  cs.push_back({"cast through f32",
                {normal({2, 3})},
                [](V x) { return x[0].to(kF32).mul(3.0).to(kF64); },
                1e-2});
  return cs;
}

std::vector<Case> reduction_cases() {
  std::vector<Case> cs;
  cs.push_back({"sum all", {normal({2, 3})}, [](V x) { return x[0].sum(); }});
  cs.push_back({"sum dim", {normal({2, 3, 4})}, [](V x) { return x[0].sum(1); }});
  cs.push_back({"sum dims keepdim", {normal({2, 3, 4})}, [](V x) {
                  return x[0].sum({0, -1}, true);
                }});
  cs.push_back({"mean all", {normal({2, 3})}, [](V x) { return x[0].mean(); }});
  cs.push_back({"mean dim keepdim", {normal({2, 3, 4})}, [](V x) { return x[0].mean(2, true); }});
  cs.push_back({"prod all", {positive({2, 3})}, [](V x) { return x[0].prod(); }});
  cs.push_back({"prod dim", {normal({3, 4})}, [](V x) { return x[0].prod(1); }});
  cs.push_back({"max all", {normal({3, 4})}, [](V x) { return x[0].max(); }});
  cs.push_back({"max dim", {normal({3, 4})}, [](V x) { return x[0].max(1); }});
  cs.push_back({"min dim keepdim", {normal({3, 4})}, [](V x) { return x[0].min(0, true); }});
  cs.push_back({"cumsum", {normal({3, 4})}, [](V x) { return x[0].cumsum(1); }});
  cs.push_back({"cumsum dim 0", {normal({3, 4})}, [](V x) { return x[0].cumsum(0); }});
  return cs;
}

std::vector<Case> linalg_and_movement_cases() {
  std::vector<Case> cs;
  cs.push_back({"matmul", {normal({3, 4}), normal({4, 2})}, [](V x) { return x[0].matmul(x[1]); }});
  cs.push_back({"matmul batched", {normal({2, 3, 4}), normal({2, 4, 2})}, [](V x) {
                  return x[0].matmul(x[1]);
                }});
  cs.push_back({"matmul broadcast b", {normal({2, 3, 4}), normal({4, 2})}, [](V x) {
                  return x[0].matmul(x[1]);
                }});
  cs.push_back({"matmul broadcast a", {normal({3, 4}), normal({2, 1, 4, 2})}, [](V x) {
                  return x[0].matmul(x[1]);
                }});
  cs.push_back({"matmul vector-matrix", {normal({4}), normal({4, 3})}, [](V x) {
                  return x[0].matmul(x[1]);
                }});
  cs.push_back({"matmul matrix-vector", {normal({3, 4}), normal({4})}, [](V x) {
                  return x[0].matmul(x[1]);
                }});
  cs.push_back({"matmul dot", {normal({4}), normal({4})}, [](V x) { return x[0].matmul(x[1]); }});
  cs.push_back({"matmul transposed", {normal({4, 3}), normal({2, 4})}, [](V x) {
                  return x[0].t().matmul(x[1].t());
                }});

  cs.push_back({"reshape", {normal({2, 6})}, [](V x) { return x[0].reshape({3, -1, 2}); }});
  cs.push_back({"flatten", {normal({2, 3, 2})}, [](V x) { return x[0].flatten(1); }});
  cs.push_back({"permute", {normal({2, 3, 4})}, [](V x) { return x[0].permute({2, 0, 1}); }});
  cs.push_back({"transpose", {normal({2, 3, 4})}, [](V x) { return x[0].transpose(0, -1); }});
  cs.push_back({"t", {normal({2, 3})}, [](V x) { return x[0].t(); }});
  cs.push_back({"expand", {normal({3, 1})}, [](V x) { return x[0].expand({2, 3, 4}); }});
  cs.push_back({"squeeze", {normal({3, 1, 2})}, [](V x) { return x[0].squeeze(); }});
  cs.push_back({"unsqueeze", {normal({3, 2})}, [](V x) { return x[0].unsqueeze(1); }});
  cs.push_back({"slice", {normal({5, 4})}, [](V x) { return x[0].slice(0, 1, 5, 2); }});
  cs.push_back({"slice negative", {normal({5, 4})}, [](V x) { return x[0].slice(1, -3, -1); }});
  cs.push_back({"narrow", {normal({5, 4})}, [](V x) { return x[0].narrow(1, 1, 2); }});
  cs.push_back({"slice_assign", {normal({5, 4}), normal({2, 4})}, [](V x) {
                  return x[0].slice_assign(0, 1, 5, 2, x[1]);
                }});
  cs.push_back({"slice_assign broadcast src", {normal({5, 4}), normal({4})}, [](V x) {
                  return x[0].slice_assign(0, 0, 3, 1, x[1]);
                }});
  cs.push_back({"cat", {normal({2, 3}), normal({1, 3}), normal({3, 3})}, [](V x) {
                  return cat({x[0], x[1], x[2]}, 0);
                }});
  cs.push_back({"cat dim 1 with constant", {normal({2, 3}), constant({2, 2})}, [](V x) {
                  return cat({x[0], x[1]}, -1);
                }});
  cs.push_back({"stack", {normal({2, 3}), normal({2, 3})}, [](V x) {
                  return stack({x[0], x[1]}, 1);
                }});
  cs.push_back({"flip", {normal({2, 3, 2})}, [](V x) { return x[0].flip({0, 2}); }});
  cs.push_back({"repeat", {normal({2, 3})}, [](V x) { return x[0].repeat({2, 1, 3}); }});
  cs.push_back({"repeat same rank", {normal({2, 3})}, [](V x) { return x[0].repeat({3, 2}); }});
  return cs;
}

std::vector<Case> indexing_cases() {
  std::vector<Case> cs;
  cs.push_back(
      {"gather", {normal({3, 4}), index({3, 5}, 4)}, [](V x) { return x[0].gather(1, x[1]); }});
  cs.push_back({"gather dim 0", {normal({3, 4}), index({2, 4}, 3)}, [](V x) {
                  return x[0].gather(0, x[1]);
                }});
  cs.push_back({"scatter_add", {normal({3, 4}), index({2, 4}, 3), normal({2, 4})}, [](V x) {
                  return x[0].scatter_add(0, x[1], x[2]);
                }});
  cs.push_back({"scatter_add src larger",
                {normal({3, 4}), index({3, 2}, 4), normal({3, 3})},
                [](V x) { return x[0].scatter_add(1, x[1], x[2]); }});
  cs.push_back({"index_select", {normal({4, 3}), index({6}, 4)}, [](V x) {
                  return x[0].index_select(0, x[1]);
                }});
  cs.push_back({"index_select dim 1", {normal({2, 4, 3}), index({5}, 4)}, [](V x) {
                  return x[0].index_select(1, x[1]);
                }});
  cs.push_back(
      {"embedding", {normal({5, 3}), index({2, 4}, 5)}, [](V x) { return embedding(x[0], x[1]); }});
  return cs;
}

std::vector<Case> neural_cases() {
  std::vector<Case> cs;
  cs.push_back({"softmax", {normal({3, 4})}, [](V x) { return x[0].softmax(-1); }});
  cs.push_back({"softmax dim 0", {normal({3, 4})}, [](V x) { return softmax(x[0], 0); }});
  cs.push_back({"log_softmax", {normal({3, 4})}, [](V x) { return x[0].log_softmax(1); }});
  cs.push_back({"log_softmax 3-d", {normal({2, 3, 4})}, [](V x) { return log_softmax(x[0], 1); }});
  cs.push_back({"attention", {normal({2, 3, 4}), normal({2, 5, 4}), normal({2, 5, 3})}, [](V x) {
                  return scaled_dot_product_attention(x[0], x[1], x[2]);
                }});
  cs.push_back({"attention causal",
                {normal({2, 5, 3}), normal({2, 5, 3}), normal({2, 5, 2})},
                [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, true); }});
  cs.push_back(
      {"attention mask scale",
       {normal({2, 3, 4}), normal({2, 5, 4}), normal({2, 5, 3}), mask({3, 5})},
       [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], x[3], false, 0.7); }});
  // 66 queries: two query blocks of the CPU kernel, the second partial.
  cs.push_back({"attention causal blocks",
                {normal({66, 1}), normal({66, 1}), normal({66, 2})},
                [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2], {}, true); }});
  cs.push_back({"attention value only",
                {constant({3, 2}), constant({4, 2}), normal({4, 3})},
                [](V x) { return scaled_dot_product_attention(x[0], x[1], x[2]); }});
  cs.push_back({"conv2d", {normal({2, 3, 5, 5}), normal({4, 3, 3, 3}), normal({4})}, [](V x) {
                  return conv2d(x[0], x[1], x[2]);
                }});
  cs.push_back(
      {"conv2d stride padding", {normal({1, 2, 6, 5}), normal({3, 2, 3, 2}), normal({3})}, [](V x) {
         return conv2d(x[0], x[1], x[2], {2, 2}, {1, 1});
       }});
  cs.push_back({"conv2d dilation no bias", {normal({1, 2, 7, 7}), normal({2, 2, 3, 3})}, [](V x) {
                  return conv2d(x[0], x[1], {}, {1, 2}, {2, 0}, {2, 2});
                }});
  cs.push_back(
      {"conv2d groups", {normal({2, 4, 5, 4}), normal({6, 2, 2, 3}), normal({6})}, [](V x) {
         return conv2d(x[0], x[1], x[2], {1, 1}, {1, 1}, {1, 1}, 2);
       }});
  cs.push_back({"conv2d input only", {normal({1, 2, 4, 4}), constant({3, 2, 3, 3})}, [](V x) {
                  return conv2d(x[0], x[1], {}, {1, 1}, {1, 1});
                }});
  cs.push_back({"max_pool2d", {normal({2, 2, 4, 6})}, [](V x) {
                  return max_pool2d(x[0], {2, 2});
                }});
  cs.push_back({"max_pool2d overlapping padded", {normal({1, 2, 5, 5})}, [](V x) {
                  return max_pool2d(x[0], {3, 3}, {1, 2}, {1, 1});
                }});
  cs.push_back({"avg_pool2d", {normal({2, 2, 4, 6})}, [](V x) {
                  return avg_pool2d(x[0], {2, 3});
                }});
  cs.push_back({"avg_pool2d padded", {normal({1, 2, 5, 5})}, [](V x) {
                  return avg_pool2d(x[0], {3, 3}, {2, 2}, {1, 1});
                }});
  cs.push_back({"adaptive_avg_pool2d", {normal({2, 2, 5, 7})}, [](V x) {
                  return adaptive_avg_pool2d(x[0], {3, 2});
                }});
  cs.push_back({"adaptive_avg_pool2d up", {normal({1, 2, 2, 3})}, [](V x) {
                  return adaptive_avg_pool2d(x[0], {3, 4});
                }});
  cs.push_back({"layer_norm", {normal({3, 4}), normal({4}), normal({4})}, [](V x) {
                  return layer_norm(x[0], {4}, x[1], x[2]);
                }});
  cs.push_back({"layer_norm 2 dims", {normal({2, 3, 4}), normal({3, 4}), normal({3, 4})}, [](V x) {
                  return layer_norm(x[0], {3, 4}, x[1], x[2]);
                }});
  cs.push_back(
      {"layer_norm no affine", {normal({3, 5})}, [](V x) { return layer_norm(x[0], {5}); }});
  cs.push_back({"layer_norm weight only", {normal({2, 2, 5}), normal({5})}, [](V x) {
                  return layer_norm(x[0], {5}, x[1]);
                }});
  cs.push_back({"layer_norm bias only", {normal({4, 3}), normal({3})}, [](V x) {
                  return layer_norm(x[0], {3}, Tensor(), x[1]);
                }});
  cs.push_back(
      {"layer_norm all dims eps", {normal({2, 3}), normal({2, 3}), normal({2, 3})}, [](V x) {
         return layer_norm(x[0], {2, 3}, x[1], x[2], 0.5);
       }});
  // Only the parameters take gradients: x is a constant.
  cs.push_back({"layer_norm params", {constant({4, 6}), normal({6}), normal({6})}, [](V x) {
                  return layer_norm(x[0], {6}, x[1], x[2]);
                }});
  return cs;
}

std::vector<Case> composite_cases() {
  std::vector<Case> cs;
  cs.push_back({"cross_entropy", {normal({4, 5}), index({4}, 5)}, [](V x) {
                  return nn::cross_entropy(x[0], x[1]);
                }});
  cs.push_back(
      {"mse_loss", {normal({3, 4}), normal({3, 4})}, [](V x) { return nn::mse_loss(x[0], x[1]); }});
  cs.push_back({"mlp", {normal({4, 3}), normal({5, 3}), normal({5}), normal({2, 5})}, [](V x) {
                  return (x[0].matmul(x[1].t()) + x[2]).tanh().matmul(x[3].t()).log_softmax(1);
                }});
  cs.push_back({"reused input", {normal({3, 3})}, [](V x) {
                  return (x[0] * x[0].exp()).matmul(x[0]).sum(0);
                }});
  return cs;
}

#define TW_GRADCHECK_GROUP(Name, cases_fn)     \
  TEST_P(GradCheck, Name) {                    \
    for (const Case& c : cases_fn()) check(c); \
  }
TW_GRADCHECK_GROUP(Elementwise, elementwise_cases)
TW_GRADCHECK_GROUP(Reductions, reduction_cases)
TW_GRADCHECK_GROUP(LinalgAndMovement, linalg_and_movement_cases)
TW_GRADCHECK_GROUP(Indexing, indexing_cases)
TW_GRADCHECK_GROUP(Neural, neural_cases)
TW_GRADCHECK_GROUP(Composite, composite_cases)
#undef TW_GRADCHECK_GROUP

std::vector<std::string> gradcheck_devices() {
  std::vector<std::string> v = {"cpu"};
  for (testing::Transport t : testing::kTransports) v.push_back(testing::remote_name(t));
  for (const std::string& name : testing::backend_test_names()) v.push_back(name);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Devices, GradCheck, ::testing::ValuesIn(gradcheck_devices()),
                         [](const auto& info) { return info.param; });

// The CPU and torch backends give the same gradients for every case: the same backward pass on
// the same inputs, compared element by element. Both compute in f64 with different summation
// orders (and, for convolutions and matmuls, different algorithms), so they agree to a few
// ulps of the largest term, not bit for bit.
void compare_backends(const std::vector<Case>& cases) {
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no torch backend";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Backward cpu, torch;
    ASSERT_NO_FATAL_FAILURE(run_backward(c, Device::cpu(), cpu));
    ASSERT_NO_FATAL_FAILURE(run_backward(c, Device::torch(), torch));
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (!c.inputs[i].grad) continue;
      ASSERT_TRUE(torch.xs[i].grad().defined()) << "input " << i << " got no gradient on torch";
      const std::vector<double> a = cpu.xs[i].grad().to_vector<double>();
      const std::vector<double> b = torch.xs[i].grad().to_vector<double>();
      ASSERT_EQ(a.size(), b.size()) << "input " << i;
      for (size_t j = 0; j < a.size(); ++j) {
        EXPECT_NEAR(a[j], b[j], 1e-12 + 1e-10 * std::max(std::abs(a[j]), std::abs(b[j])))
            << "input " << i << " element " << j << " (cpu vs torch)";
      }
    }
  }
}

TEST(GradCpuVsTorch, Elementwise) { compare_backends(elementwise_cases()); }
TEST(GradCpuVsTorch, Reductions) { compare_backends(reduction_cases()); }
TEST(GradCpuVsTorch, LinalgAndMovement) { compare_backends(linalg_and_movement_cases()); }
TEST(GradCpuVsTorch, Indexing) { compare_backends(indexing_cases()); }
TEST(GradCpuVsTorch, Neural) { compare_backends(neural_cases()); }
TEST(GradCpuVsTorch, Composite) { compare_backends(composite_cases()); }

}  // namespace
}  // namespace tw
