// tw::nn::RNN, LSTM and GRU: PyTorch's parameter names and shapes, a hand-computed sequence, and
// gradients through time (input, initial state, weights of both layers and directions) against
// central finite differences in f64. (python/tests/test_rnn.py compares outputs with torch.)
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensorwire/nn.h"

namespace tw {
namespace {

TEST(Rnn, ParameterNamesAndShapesAreTorchs) {
  manual_seed(0);
  nn::RNNOptions o;
  o.num_layers = 2;
  o.bidirectional = true;
  nn::LSTM lstm(3, 5, o);
  const auto named = lstm.named_parameters();
  ASSERT_EQ(named.size(), 16u);
  EXPECT_EQ(named[0].first, "weight_ih_l0");
  EXPECT_EQ(named[3].first, "bias_hh_l0");
  EXPECT_EQ(named[4].first, "weight_ih_l0_reverse");
  EXPECT_EQ(named[8].first, "weight_ih_l1");
  EXPECT_EQ(named[0].second->value().shape(), (Shape{20, 3}));
  EXPECT_EQ(named[8].second->value().shape(), (Shape{20, 10}));  // the layer below's 2 directions
  EXPECT_EQ(lstm.name(), "LSTM(3, 5, num_layers=2, bidirectional=true)");
  const nn::RNNOutput out = lstm.forward_state(randn({4, 2, 3}));
  EXPECT_EQ(out.output.shape(), (Shape{4, 2, 10}));
  EXPECT_EQ(out.h_n.shape(), (Shape{4, 2, 5}));
  EXPECT_EQ(out.c_n.shape(), (Shape{4, 2, 5}));
  nn::GRU gru(3, 5);
  EXPECT_EQ(gru.named_parameters()[0].second->value().shape(), (Shape{15, 3}));
  EXPECT_FALSE(gru.forward_state(randn({4, 3})).c_n.defined());  // unbatched; no cell state
  EXPECT_THROW(lstm.forward_state(randn({4, 2, 4})), Error);     // 4 features, input_size 3
}

TEST(Rnn, ElmanSequenceByHand) {
  nn::RNN rnn(1, 1);
  const auto p = rnn.named_parameters();  // weight_ih, weight_hh, bias_ih, bias_hh
  p[0].second->set(from_vector<float>({0.5f}, {1, 1}));
  p[1].second->set(from_vector<float>({-1.0f}, {1, 1}));
  p[2].second->set(from_vector<float>({0.25f}, {1}));
  p[3].second->set(from_vector<float>({0.0f}, {1}));
  const nn::RNNOutput out = rnn.forward_state(from_vector<float>({1.0f, 2.0f}, {2, 1, 1}));
  const double h1 = std::tanh(0.5 + 0.25), h2 = std::tanh(1.0 + 0.25 - h1);
  const std::vector<float> y = out.output.to_vector<float>();
  ASSERT_EQ(y.size(), 2u);
  EXPECT_NEAR(y[0], h1, 1e-6);
  EXPECT_NEAR(y[1], h2, 1e-6);
  EXPECT_NEAR(out.h_n.to_vector<float>()[0], h2, 1e-6);
}

// loss = sum(output * r) + sum(h_n * s) (+ sum(c_n * s)); its gradient with respect to x, h0
// and two weights, against (loss(v + eps) - loss(v - eps)) / (2 eps) element by element.
void check_gradients(nn::RNNBase& m, bool lstm, bool batch_first) {
  manual_seed(7);
  const int64_t T = 3, B = 2, D = m.options().bidirectional ? 2 : 1;
  const int64_t LD = m.options().num_layers * D, H = m.hidden_size();
  const Shape xs = batch_first ? Shape{B, T, m.input_size()} : Shape{T, B, m.input_size()};
  Tensor x = randn(xs, kF64).set_requires_grad();
  Tensor h0 = randn({LD, B, H}, kF64).set_requires_grad();
  Tensor c0 = randn({LD, B, H}, kF64).set_requires_grad();
  const Shape os = batch_first ? Shape{B, T, D * H} : Shape{T, B, D * H};
  const Tensor r = randn(os, kF64), s = randn({LD, B, H}, kF64);
  auto loss = [&](const Tensor& xv, const Tensor& hv, const Tensor& cv) {
    const nn::RNNOutput o = m.forward_state(xv, hv, lstm ? cv : Tensor());
    Tensor l = (o.output * r).sum() + (o.h_n * s).sum();
    if (lstm) l = l + (o.c_n * s).sum();
    return l;
  };
  m.zero_grad();
  loss(x, h0, c0).backward();
  constexpr double kEps = 1e-6;
  auto numeric = [&](const std::function<double(double)>& at, double want, const std::string& w) {
    const double num = (at(kEps) - at(-kEps)) / (2 * kEps);
    EXPECT_NEAR(want, num, 1e-6 + 1e-5 * std::abs(num)) << m.name() << " " << w;
  };
  auto value = [&](const Tensor& l) { return l.to_vector<double>()[0]; };
  auto bumped = [](const Tensor& v, size_t i, double d) {
    std::vector<double> h = v.to_vector<double>();
    h[i] += d;
    return from_vector<double>(h, v.shape());
  };
  const std::vector<double> gx = x.grad().to_vector<double>(), gh = h0.grad().to_vector<double>();
  for (size_t i = 0; i < gx.size(); ++i) {
    numeric([&](double d) { return value(loss(bumped(x.detach(), i, d), h0.detach(), c0)); }, gx[i],
            "x[" + std::to_string(i) + "]");
  }
  for (size_t i = 0; i < gh.size(); ++i) {
    numeric([&](double d) { return value(loss(x.detach(), bumped(h0.detach(), i, d), c0)); }, gh[i],
            "h0[" + std::to_string(i) + "]");
  }
  if (lstm) {
    const std::vector<double> gc = c0.grad().to_vector<double>();
    for (size_t i = 0; i < gc.size(); ++i) {
      numeric([&](double d) { return value(loss(x.detach(), h0.detach(), bumped(c0, i, d))); },
              gc[i], "c0[" + std::to_string(i) + "]");
    }
  }
  // The recurrent weight of the first layer and the last parameter (the top layer's last
  // direction's bias, or its weight_hh without biases).
  const auto named = m.named_parameters();
  for (const auto& [name, p] : {named[1], named.back()}) {
    const std::vector<double> g = p->grad().to_vector<double>();
    const Tensor orig = p->value();
    for (size_t i = 0; i < g.size(); ++i) {
      numeric(
          [&](double d) {
            p->set(bumped(orig, i, d));
            const double v = value(loss(x.detach(), h0.detach(), c0.detach()));
            p->set(orig);
            return v;
          },
          g[i], name + "[" + std::to_string(i) + "]");
    }
  }
}

TEST(Rnn, GradientsThroughTimeMatchFiniteDifferences) {
  nn::RNNOptions two;
  two.num_layers = 2;
  two.bidirectional = true;
  nn::RNNOptions relu_first;
  relu_first.nonlinearity = "relu";
  relu_first.batch_first = true;
  relu_first.bias = false;
  const nn::Placement f64{Device::cpu(), kF64};
  manual_seed(1);
  nn::LSTM lstm(2, 3, two, f64);
  nn::GRU gru(2, 3, two, f64);
  nn::RNN rnn(2, 3, relu_first, f64);
  check_gradients(lstm, true, false);
  check_gradients(gru, false, false);
  check_gradients(rnn, false, true);
}

}  // namespace
}  // namespace tw
