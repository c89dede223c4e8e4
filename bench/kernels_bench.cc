// Kernel benchmarks on the CPU device (or the torch device, TW_BENCH_DEVICE=torch), measured the
// way a user writes the code: every iteration
// builds a fresh result (`c = a + b`) and waits for it, so allocation and the wait are part of
// the time, exactly as in bench/torch_kernels.py. The workload names are shared with that
// script; bench/compare_torch.sh joins the two by name.
//
// Before timing, each benchmark runs its op once and checks a sample of the result against a
// double-precision reference: a kernel that fails (the CPU device records errors in the output
// instead of throwing at submit) or computes the wrong thing is reported as an error, never
// timed as fast.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "tensorwire/tensorwire.h"

namespace {

// Intra-op threads, the same as torch.set_num_threads in torch_kernels.py. TW_BENCH_THREADS
// overrides it.
constexpr int kDefaultThreads = 2;
// 16M f32 elements: 64 MiB per tensor, far beyond every cache, so elementwise ops and reductions
// measure memory bandwidth and allocation, as they do in real models.
constexpr int64_t kBigNumel = int64_t{1} << 24;
constexpr uint64_t kSeed = 20240601;

// The device every benchmark runs on: the CPU device, or the torch device (PyTorch's kernels
// behind tensorwire's op IR) when TW_BENCH_DEVICE=torch, or any local device it names
// (TW_BENCH_DEVICE=vulkan:0). bench/compare_torch.sh runs cpu and torch.
const tw::Device& device() {
  static const tw::Device d = [] {
    const char* e = std::getenv("TW_BENCH_DEVICE");
    if (!e || std::string(e) == "cpu") return tw::Device::cpu();
    if (std::string(e) == "torch") return tw::Device::torch();
    return tw::Device::local(e);  // vulkan, vulkan:0, ... (scripts/device_check.sh)
  }();
  return d;
}

// Evenly spread sample positions in [0, n), always including the first and the last.
std::vector<int64_t> sample_positions(int64_t n, int count = 17) {
  std::vector<int64_t> out;
  for (int i = 0; i < count; ++i) out.push_back(n <= 1 ? 0 : (n - 1) * i / (count - 1));
  return out;
}

// Throws tw::Error when |got - want| exceeds tol; `what` names the element.
void expect_near(double got, double want, double tol, const std::string& what) {
  if (!(std::abs(got - want) <= tol)) {
    throw tw::Error("wrong result at " + what + ": got " + std::to_string(got) + ", want " +
                    std::to_string(want) + " (tolerance " + std::to_string(tol) + ")");
  }
}

// Validates one result with `check`, then times `body` (which builds one fresh result and waits
// for it).
void run_checked(benchmark::State& state, const std::function<void()>& check,
                 const std::function<void()>& body) {
  check();
  for (auto _ : state) body();
}

// A benchmark whose errors (tw::Error from setup, the check or the op) become the benchmark's
// error, reported in its output, instead of ending the program.
template <class F>
auto guarded(F f) {
  return [f](benchmark::State& state) {
    try {
      f(state);
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
    }
  };
}

// ---- matmul: [rows, k] x [k, cols], f32 ----
void bm_matmul(benchmark::State& state, int64_t rows, int64_t k, int64_t cols) {
  tw::manual_seed(kSeed);
  tw::Tensor a = tw::randn({rows, k}, tw::kF32, device());
  tw::Tensor b = tw::randn({k, cols}, tw::kF32, device());
  auto check = [&] {
    std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
    std::vector<float> cv = a.matmul(b).to_vector<float>();
    for (int64_t i : sample_positions(rows, 5)) {
      for (int64_t j : sample_positions(cols, 5)) {
        double want = 0, mag = 0;
        for (int64_t p = 0; p < k; ++p) {
          double t = double{av[i * k + p]} * bv[p * cols + j];
          want += t;
          mag += std::abs(t);
        }
        expect_near(cv[i * cols + j], want, 1e-4 * mag + 1e-6,
                    "matmul [" + std::to_string(i) + ", " + std::to_string(j) + "]");
      }
    }
  };
  run_checked(state, check, [&] {
    tw::Tensor c = a.matmul(b);
    c.device().sync();
  });
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * k * cols * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// ---- a layer's input times its weights: [8, 256, 768] x [768, 3072], f32 ----
// (the batches become rows of one product: matmul.cc)
void bm_batched_matmul(benchmark::State& state) {
  constexpr int64_t kBatch = 8, kRows = 256, kK = 768, kCols = 3072;
  tw::manual_seed(kSeed);
  tw::Tensor a = tw::randn({kBatch, kRows, kK}, tw::kF32, device());
  tw::Tensor b = tw::randn({kK, kCols}, tw::kF32, device());
  auto check = [&] {
    std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
    std::vector<float> cv = a.matmul(b).to_vector<float>();
    for (int64_t n : {int64_t{0}, kBatch - 1}) {
      for (int64_t i : sample_positions(kRows, 3)) {
        for (int64_t j : sample_positions(kCols, 3)) {
          double want = 0, mag = 0;
          for (int64_t p = 0; p < kK; ++p) {
            double t = double{av[(n * kRows + i) * kK + p]} * bv[p * kCols + j];
            want += t;
            mag += std::abs(t);
          }
          expect_near(cv[(n * kRows + i) * kCols + j], want, 1e-4 * mag + 1e-6, "batched matmul");
        }
      }
    }
  };
  run_checked(state, check, [&] {
    tw::Tensor c = a.matmul(b);
    c.device().sync();
  });
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kBatch * kRows * kK * kCols * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// ---- a contiguous copy of a permuted view: [64, 256, 1024] read as [64, 1024, 256], f32 ----
void bm_permute_copy(benchmark::State& state) {
  constexpr int64_t kB = 64, kS = 256, kD = 1024;
  tw::manual_seed(kSeed);
  tw::Tensor x = tw::randn({kB, kS, kD}, tw::kF32, device());
  auto check = [&] {
    std::vector<float> xv = x.to_vector<float>();
    std::vector<float> yv = x.permute({0, 2, 1}).reshape({kB * kD * kS}).to_vector<float>();
    for (int64_t n : sample_positions(kB, 3)) {
      for (int64_t d : sample_positions(kD, 9)) {
        for (int64_t s : sample_positions(kS, 9)) {
          expect_near(yv[(n * kD + d) * kS + s], xv[(n * kS + s) * kD + d], 0, "permute copy");
        }
      }
    }
  };
  run_checked(state, check, [&] {
    tw::Tensor y = x.permute({0, 2, 1}).reshape({kB * kD * kS});
    y.device().sync();
  });
  state.SetBytesProcessed(state.iterations() * kB * kS * kD * 2 * int64_t{sizeof(float)});
}

// ---- conv2d forward: x [32, 3, 32, 32], w [64, 3, 3, 3], bias [64], stride 1, padding 1 ----
void bm_conv2d(benchmark::State& state) {
  constexpr int64_t kN = 32, kC = 3, kO = 64, kH = 32, kW = 32, kK = 3, kPad = 1;
  tw::manual_seed(kSeed);
  tw::Tensor x = tw::randn({kN, kC, kH, kW}, tw::kF32, device());
  tw::Tensor w = tw::randn({kO, kC, kK, kK}, tw::kF32, device());
  tw::Tensor bias = tw::randn({kO}, tw::kF32, device());
  auto conv = [&] { return tw::conv2d(x, w, bias, {1, 1}, {kPad, kPad}); };
  auto check = [&] {
    std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>();
    std::vector<float> bv = bias.to_vector<float>();
    tw::Tensor y = conv();
    if (y.shape() != tw::Shape{kN, kO, kH, kW}) throw tw::Error("conv2d: wrong output shape");
    std::vector<float> yv = y.to_vector<float>();
    for (int64_t p : sample_positions(kN * kO * kH * kW, 41)) {
      int64_t ox = p % kW, oy = p / kW % kH, o = p / (kW * kH) % kO, n = p / (kW * kH * kO);
      double want = bv[o], mag = std::abs(want);
      for (int64_t c = 0; c < kC; ++c)
        for (int64_t ky = 0; ky < kK; ++ky)
          for (int64_t kx = 0; kx < kK; ++kx) {
            int64_t iy = oy + ky - kPad, ix = ox + kx - kPad;
            if (iy < 0 || iy >= kH || ix < 0 || ix >= kW) continue;
            double t = double{xv[((n * kC + c) * kH + iy) * kW + ix]} *
                       wv[((o * kC + c) * kK + ky) * kK + kx];
            want += t;
            mag += std::abs(t);
          }
      expect_near(yv[p], want, 1e-5 * mag + 1e-6, "conv2d flat index " + std::to_string(p));
    }
  };
  run_checked(state, check, [&] {
    tw::Tensor y = conv();
    y.device().sync();
  });
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kN * kO * kH * kW * kC * kK * kK * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// ---- depthwise conv2d: x [n, c, hw, hw], w [c, 1, 3, 3], bias [c], groups c, padding 1 ----
// MobileNet/EfficientNet layers (issue 53); forward, or forward and both gradients (bias on
// PyTorch's side too). The check compares sampled outputs, d x and every d w with double sums.
void bm_depthwise(benchmark::State& state, int64_t n, int64_t c, int64_t hw, bool backward) {
  constexpr int64_t kK = 3, kPad = 1;
  tw::manual_seed(kSeed);
  tw::Tensor x = tw::randn({n, c, hw, hw}, tw::kF32, device());
  tw::Tensor w = tw::randn({c, 1, kK, kK}, tw::kF32, device());
  tw::Tensor bias = tw::randn({c}, tw::kF32, device());
  tw::Tensor g = tw::randn({n, c, hw, hw}, tw::kF32, device());
  if (backward) {
    x.set_requires_grad();
    w.set_requires_grad();
  }
  auto conv = [&] { return tw::conv2d(x, w, bias, {1, 1}, {kPad, kPad}, {1, 1}, c); };
  auto step = [&] {
    x.zero_grad();
    w.zero_grad();
    conv().backward(g);
  };
  auto check = [&] {
    const std::vector<float> xv = x.to_vector<float>(), wv = w.to_vector<float>(),
                             bv = bias.to_vector<float>(), gv = g.to_vector<float>();
    const std::vector<float> yv = conv().to_vector<float>();
    std::vector<float> dx, dwv;
    if (backward) {
      step();
      dx = x.grad().to_vector<float>();
      dwv = w.grad().to_vector<float>();
    }
    std::vector<double> want_dw(static_cast<size_t>(c * kK * kK), 0.0);
    std::vector<double> mag_dw(want_dw.size(), 0.0);
    const int64_t plane = hw * hw;
    for (int64_t p = 0; p < n * c * plane; ++p) {
      const int64_t ox = p % hw, oy = p / hw % hw, ch = p / plane % c;
      double want = bv[ch], mag = std::abs(want), want_dx = 0, mag_dx = 0;
      for (int64_t ky = 0; ky < kK; ++ky)
        for (int64_t kx = 0; kx < kK; ++kx) {
          const int64_t wi = ch * kK * kK + ky * kK + kx, row0 = p - ox - oy * hw;
          // d x at p: the outputs whose window holds p (the kernel turned around).
          const int64_t gy = oy - ky + kPad, gx = ox - kx + kPad;
          if (gy >= 0 && gy < hw && gx >= 0 && gx < hw) {
            const double t = double{gv[row0 + gy * hw + gx]} * wv[wi];
            want_dx += t;
            mag_dx += std::abs(t);
          }
          const int64_t iy = oy + ky - kPad, ix = ox + kx - kPad;
          if (iy < 0 || iy >= hw || ix < 0 || ix >= hw) continue;
          const int64_t xi = row0 + iy * hw + ix;
          want += double{xv[xi]} * wv[wi];
          mag += std::abs(double{xv[xi]} * wv[wi]);
          want_dw[wi] += double{gv[p]} * xv[xi];
          mag_dw[wi] += std::abs(double{gv[p]} * xv[xi]);
        }
      if (p % 97 == 0)
        expect_near(yv[p], want, 1e-5 * mag + 1e-6, "depthwise y " + std::to_string(p));
      if (backward && p % 89 == 0)
        expect_near(dx[p], want_dx, 1e-5 * mag_dx + 1e-6, "depthwise d x " + std::to_string(p));
    }
    for (size_t i = 0; backward && i < want_dw.size(); ++i)
      expect_near(dwv[i], want_dw[i], 1e-5 * mag_dw[i] + 1e-6,
                  "depthwise d w " + std::to_string(i));
  };
  if (backward) {
    run_checked(state, check, [&] {
      step();
      x.grad().device().sync();
    });
  } else {
    run_checked(state, check, [&] {
      tw::Tensor y = conv();
      y.device().sync();
    });
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter((backward ? 3.0 : 1.0) * 2.0 * n * c * hw * hw * kK * kK * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}

// ---- add, exp, sum over 16M f32 ----
void bm_add(benchmark::State& state) {
  tw::manual_seed(kSeed);
  tw::Tensor a = tw::rand({kBigNumel}, tw::kF32, device());
  tw::Tensor b = tw::rand({kBigNumel}, tw::kF32, device());
  auto check = [&] {
    std::vector<float> av = a.to_vector<float>(), bv = b.to_vector<float>();
    std::vector<float> cv = (a + b).to_vector<float>();
    for (int64_t i : sample_positions(kBigNumel))
      expect_near(cv[i], av[i] + bv[i], 0.0, "add [" + std::to_string(i) + "]");
  };
  run_checked(state, check, [&] {
    tw::Tensor c = a + b;
    c.device().sync();
  });
  state.SetBytesProcessed(state.iterations() * kBigNumel * 3 * int64_t{sizeof(float)});
}

void bm_exp(benchmark::State& state) {
  tw::manual_seed(kSeed);
  tw::Tensor a = tw::randn({kBigNumel}, tw::kF32, device());
  auto check = [&] {
    std::vector<float> av = a.to_vector<float>();
    std::vector<float> cv = a.exp().to_vector<float>();
    for (int64_t i : sample_positions(kBigNumel)) {
      double want = std::exp(double{av[i]});
      expect_near(cv[i], want, 1e-6 * want, "exp [" + std::to_string(i) + "]");
    }
  };
  run_checked(state, check, [&] {
    tw::Tensor c = a.exp();
    c.device().sync();
  });
  state.SetBytesProcessed(state.iterations() * kBigNumel * 2 * int64_t{sizeof(float)});
}

void bm_sum(benchmark::State& state) {
  tw::manual_seed(kSeed);
  tw::Tensor a = tw::rand({kBigNumel}, tw::kF32, device());
  auto check = [&] {
    std::vector<float> av = a.to_vector<float>();
    double want = 0;
    for (float v : av) want += v;
    expect_near(a.sum().item<float>(), want, 1e-5 * want, "sum");
  };
  float sink = 0;
  run_checked(state, check, [&] {
    tw::Tensor s = a.sum();
    sink += s.item<float>();  // reading the value is what a user does with a sum
  });
  benchmark::DoNotOptimize(sink);
  state.SetBytesProcessed(state.iterations() * kBigNumel * int64_t{sizeof(float)});
}

// ---- softmax over the last dim of [4096, 4096] f32 ----
void bm_softmax(benchmark::State& state) {
  constexpr int64_t kRows = 4096, kCols = 4096;
  tw::manual_seed(kSeed);
  tw::Tensor x = tw::randn({kRows, kCols}, tw::kF32, device());
  auto check = [&] {
    std::vector<float> xv = x.to_vector<float>();
    std::vector<float> yv = x.softmax(-1).to_vector<float>();
    for (int64_t r : sample_positions(kRows, 5)) {
      const float* row = xv.data() + r * kCols;
      double mx = row[0], denom = 0;
      for (int64_t j = 0; j < kCols; ++j) mx = std::max(mx, double{row[j]});
      for (int64_t j = 0; j < kCols; ++j) denom += std::exp(row[j] - mx);
      for (int64_t j : sample_positions(kCols, 9)) {
        double want = std::exp(row[j] - mx) / denom;
        expect_near(yv[r * kCols + j], want, 1e-5 * want + 1e-9,
                    "softmax [" + std::to_string(r) + ", " + std::to_string(j) + "]");
      }
    }
  };
  run_checked(state, check, [&] {
    tw::Tensor y = x.softmax(-1);
    y.device().sync();
  });
  state.SetBytesProcessed(state.iterations() * kRows * kCols * 2 * int64_t{sizeof(float)});
}

// ---- a Linear layer followed by a ReLU: relu(x w^T + b), x [256, 512], w [512, 512] f32 ----
// (nn::Linear::forward_relu: op Linear, the matmul with the bias and the ReLU together.)
void bm_linear_relu(benchmark::State& state) {
  constexpr int64_t kRows = 256, kIn = 512, kOut = 512;
  tw::manual_seed(kSeed);
  tw::nn::Linear lin(kIn, kOut, true, {device(), tw::kF32});
  tw::Tensor x = tw::randn({kRows, kIn}, tw::kF32, device());
  tw::NoGradGuard no_grad;
  auto check = [&] {
    const std::vector<float> xv = x.to_vector<float>();
    const std::vector<float> wv = lin.weight()->value().to_vector<float>();
    const std::vector<float> bv = lin.bias()->value().to_vector<float>();
    const std::vector<float> yv = lin.forward_relu(x).to_vector<float>();
    for (int64_t r : sample_positions(kRows, 5)) {
      for (int64_t j : sample_positions(kOut, 9)) {
        double want = bv[j];
        for (int64_t k = 0; k < kIn; ++k) want += double{xv[r * kIn + k]} * wv[j * kIn + k];
        want = std::max(want, 0.0);
        expect_near(yv[r * kOut + j], want, 1e-4 * (1 + std::abs(want)),
                    "linear_relu [" + std::to_string(r) + ", " + std::to_string(j) + "]");
      }
    }
  };
  run_checked(state, check, [&] {
    tw::Tensor y = lin.forward_relu(x);
    y.device().sync();
  });
}

// ---- attention forward + backward: q, k, v [4, 8, 512, 64] f32 (batch 4, 8 heads) ----
// The fused op (ScaledDotProductAttention and its backward kernel) against PyTorch composing
// matmul, softmax and matmul (torch 1.13 has no fused attention), as bench/torch_kernels.py does.
void bm_attention(benchmark::State& state, bool causal) {
  constexpr int64_t kB = 4, kH = 8, kT = 512, kD = 64;
  tw::manual_seed(kSeed);
  tw::Tensor q = tw::randn({kB, kH, kT, kD}, tw::kF32, device()).set_requires_grad();
  tw::Tensor k = tw::randn({kB, kH, kT, kD}, tw::kF32, device()).set_requires_grad();
  tw::Tensor v = tw::randn({kB, kH, kT, kD}, tw::kF32, device()).set_requires_grad();
  tw::Tensor g = tw::randn({kB, kH, kT, kD}, tw::kF32, device());
  auto step = [&] {
    for (tw::Tensor* t : {&q, &k, &v}) t->zero_grad();
    tw::scaled_dot_product_attention(q, k, v, {}, causal).backward(g);
  };
  // The fused op's output and gradients against tensorwire's composed matmul + softmax.
  auto check = [&] {
    step();
    const std::vector<float> fused[] = {q.grad().to_vector<float>(), k.grad().to_vector<float>(),
                                        v.grad().to_vector<float>()};
    for (tw::Tensor* t : {&q, &k, &v}) t->zero_grad();
    tw::Tensor s = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(double{kD}));
    if (causal) {
      tw::Tensor i = tw::arange(kT, device()).reshape({kT, 1});
      s = s.masked_fill(tw::arange(kT, device()).reshape({1, kT}) > i, -INFINITY);
    }
    s.softmax(-1).matmul(v).backward(g);
    const std::vector<float> composed[] = {q.grad().to_vector<float>(), k.grad().to_vector<float>(),
                                           v.grad().to_vector<float>()};
    const char* names[] = {"d q", "d k", "d v"};
    for (int t = 0; t < 3; ++t) {
      for (int64_t i : sample_positions(kB * kH * kT * kD, 33)) {
        expect_near(fused[t][i], composed[t][i], 1e-3 * (1 + std::abs(composed[t][i])),
                    std::string("attention ") + names[t] + " [" + std::to_string(i) + "]");
      }
    }
  };
  run_checked(state, check, [&] {
    step();
    v.grad().device().sync();
  });
}

// ---- layer_norm and gelu forward + backward at a transformer's sizes ----
// 64 sequences of 128 tokens, d_model 192 (the LayerNorm rows) and its 4x MLP width 768 (gelu's),
// f32. Each step runs the op and autograd's backward into the input's (and parameters') grads,
// as PyTorch's autograd does in bench/torch_kernels.py.
constexpr int64_t kTokens = 64 * 128, kModel = 192, kHidden = 4 * kModel;

// composed: the same forward, then the gradients composed from elementwise ops and reductions as
// autograd's LayerNorm rule did before the LayerNormBackward kernel (and still does for a server
// older than protocol 9), for the before/after comparison.
void bm_layer_norm(benchmark::State& state, bool composed) {
  tw::manual_seed(kSeed);
  tw::Tensor x = tw::randn({kTokens, kModel}, tw::kF32, device()).set_requires_grad();
  tw::Tensor w = (tw::randn({kModel}, tw::kF32, device()) * 0.1 + 1.0).set_requires_grad();
  tw::Tensor b = (tw::randn({kModel}, tw::kF32, device()) * 0.1).set_requires_grad();
  tw::Tensor g = tw::randn({kTokens, kModel}, tw::kF32, device());
  auto step = [&]() -> std::vector<tw::Tensor> {
    if (!composed) {
      for (tw::Tensor* t : {&x, &w, &b}) t->zero_grad();
      tw::layer_norm(x, {kModel}, w, b).backward(g);
      return {x.grad(), w.grad(), b.grad()};
    }
    tw::NoGradGuard no_grad;
    tw::Tensor y = tw::layer_norm(x, {kModel}, w, b);
    tw::Tensor mean = x.mean({1}, true);
    tw::Tensor xc = x - mean;
    tw::Tensor rstd = (xc.square().mean({1}, true) + 1e-5).rsqrt();
    tw::Tensor xhat = xc * rstd;
    tw::Tensor gh = g * w;
    tw::Tensor dx = rstd * (gh - gh.mean({1}, true) - xhat * (gh * xhat).mean({1}, true));
    return {dx, (g * xhat).sum({0}), g.sum({0}), y};
  };
  // The gradients against a double-precision evaluation of the formula on sampled rows.
  auto check = [&] {
    const std::vector<tw::Tensor> d = step();
    const std::vector<float> xv = x.to_vector<float>(), gv = g.to_vector<float>(),
                             wv = w.to_vector<float>(), dx = d[0].to_vector<float>(),
                             dw = d[1].to_vector<float>(), db = d[2].to_vector<float>();
    std::vector<double> dw_want(kModel, 0.0), db_want(kModel, 0.0);
    for (int64_t r = 0; r < kTokens; ++r) {
      const float* xr = xv.data() + r * kModel;
      const float* gr = gv.data() + r * kModel;
      double mean = 0, var = 0, a = 0, c = 0;
      for (int64_t i = 0; i < kModel; ++i) mean += xr[i];
      mean /= kModel;
      for (int64_t i = 0; i < kModel; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      const double rstd = 1 / std::sqrt(var / kModel + 1e-5);
      for (int64_t i = 0; i < kModel; ++i) {
        const double xh = (xr[i] - mean) * rstd;
        a += double{gr[i]} * wv[i];
        c += double{gr[i]} * wv[i] * xh;
        dw_want[i] += gr[i] * xh;
        db_want[i] += gr[i];
      }
      if (r % 997 != 0) continue;
      for (int64_t i = 0; i < kModel; i += 7) {
        const double xh = (xr[i] - mean) * rstd;
        const double want = rstd * (double{gr[i]} * wv[i] - a / kModel - xh * c / kModel);
        expect_near(dx[r * kModel + i], want, 1e-3 * (1 + std::abs(want)),
                    "layer_norm d x [" + std::to_string(r) + ", " + std::to_string(i) + "]");
      }
    }
    for (int64_t i = 0; i < kModel; ++i) {
      expect_near(dw[i], dw_want[i], 1e-2 * (1 + std::abs(dw_want[i])),
                  "layer_norm d weight [" + std::to_string(i) + "]");
      expect_near(db[i], db_want[i], 1e-2 * (1 + std::abs(db_want[i])),
                  "layer_norm d bias [" + std::to_string(i) + "]");
    }
  };
  run_checked(state, check, [&] {
    const std::vector<tw::Tensor> d = step();
    d[0].device().sync();
  });
}

void bm_gelu(benchmark::State& state) {
  tw::manual_seed(kSeed);
  tw::Tensor x = tw::randn({kTokens, kHidden}, tw::kF32, device()).set_requires_grad();
  tw::Tensor g = tw::randn({kTokens, kHidden}, tw::kF32, device());
  auto step = [&] {
    x.zero_grad();
    x.gelu().backward(g);
    return x.grad();
  };
  auto check = [&] {
    const std::vector<float> xv = x.to_vector<float>(), gv = g.to_vector<float>(),
                             dx = step().to_vector<float>();
    for (int64_t i : sample_positions(kTokens * kHidden, 65)) {
      const double v = xv[i];
      const double want = gv[i] * (0.5 * (1 + std::erf(v / std::sqrt(2.0))) +
                                   v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI));
      expect_near(dx[i], want, 1e-5 * (1 + std::abs(want)), "gelu d x [" + std::to_string(i) + "]");
    }
  };
  run_checked(state, check, [&] { step().device().sync(); });
}

template <class F>
void add_benchmark(const char* name, F f) {
  benchmark::RegisterBenchmark(name, guarded(f))
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MeasureProcessCPUTime();
}

}  // namespace

int main(int argc, char** argv) {
  int threads = kDefaultThreads;
  if (const char* e = std::getenv("TW_BENCH_THREADS")) threads = std::max(1, std::atoi(e));
  tw::set_num_threads(threads);
  benchmark::AddCustomContext("tw_threads", std::to_string(tw::get_num_threads()));
  try {
    benchmark::AddCustomContext("tw_device", device().str());
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tw_bench_kernels: %s\n", e.what());
    return 1;
  }

  add_benchmark("matmul_f32_1024", [](benchmark::State& s) { bm_matmul(s, 1024, 1024, 1024); });
  add_benchmark("matmul_f32_2048", [](benchmark::State& s) { bm_matmul(s, 2048, 2048, 2048); });
  // A transformer's feed-forward shape (GPT-2 small: 768 -> 3072, 256 tokens).
  add_benchmark("matmul_f32_256x768x3072",
                [](benchmark::State& s) { bm_matmul(s, 256, 768, 3072); });
  add_benchmark("batched_matmul_f32_8x256x768x3072", bm_batched_matmul);
  add_benchmark("permute_copy_f32_64x256x1024", bm_permute_copy);
  add_benchmark("conv2d_f32_b32_c3to64_32x32_k3p1", bm_conv2d);
  add_benchmark("depthwise_conv2d_f32_2x144x56x56_k3p1",
                [](benchmark::State& s) { bm_depthwise(s, 2, 144, 56, false); });
  add_benchmark("depthwise_conv2d_f32_2x384x14x14_k3p1",
                [](benchmark::State& s) { bm_depthwise(s, 2, 384, 14, false); });
  add_benchmark("depthwise_conv2d_fwd_bwd_f32_2x144x56x56_k3p1",
                [](benchmark::State& s) { bm_depthwise(s, 2, 144, 56, true); });
  add_benchmark("depthwise_conv2d_fwd_bwd_f32_2x384x14x14_k3p1",
                [](benchmark::State& s) { bm_depthwise(s, 2, 384, 14, true); });
  add_benchmark("add_f32_16M", bm_add);
  add_benchmark("exp_f32_16M", bm_exp);
  add_benchmark("sum_f32_16M", bm_sum);
  add_benchmark("softmax_f32_4096x4096", bm_softmax);
  add_benchmark("linear_relu_f32_256x512x512", bm_linear_relu);
  add_benchmark("attention_fwd_bwd_f32_4x8x512x64",
                [](benchmark::State& s) { bm_attention(s, false); });
  add_benchmark("attention_causal_fwd_bwd_f32_4x8x512x64",
                [](benchmark::State& s) { bm_attention(s, true); });
  add_benchmark("layer_norm_fwd_bwd_f32_8192x192",
                [](benchmark::State& s) { bm_layer_norm(s, false); });
  add_benchmark("layer_norm_composed_fwd_bwd_f32_8192x192",
                [](benchmark::State& s) { bm_layer_norm(s, true); });
  add_benchmark("gelu_fwd_bwd_f32_8192x768", bm_gelu);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
