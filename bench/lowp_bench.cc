// The tensorwire side of `make bench-lowp` (bench/lowp_bench.sh): bf16 matmul 2048^3 (both
// operands bf16, an f32 result; docs/lowp.md) against tensorwire's f32 matmul of the same shape,
// in interleaved rounds (f32 then bf16, the order reversed every other round; each side the
// median of --repeats runs), with the per-round ratio's median; and the bf16 result checked
// against the f32 product of the rounded operands on sampled entries. With the FMA peaks that
// lowp_bench.sh measures (tw_bench_fma_peak --dtype f32|bf16) it prints issue 53's targets.
//   tw_bench_lowp [--threads N] [--rounds N] [--repeats N] [--f32-peak GFLOPS] [--bf16-peak X]
//                 [--matmul 0] (the quantization rows only)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/dnnl_util.h"
#include "tensorwire/tensorwire.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Median ms of `repeats` runs of a x b (synced).
double time_matmul(const tw::Tensor& a, const tw::Tensor& b, int repeats) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    tw::Tensor c = a.matmul(b);
    c.device().sync();
    ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(ms);
}

template <class F>
double time_ms(F&& fn, int repeats) {
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    fn();
    ms.push_back(1e3 * std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(ms);
}

// Interleaved rounds of the `sides` (the order rotated every round); per side the median of its
// rounds, and per side after the first the median of the per-round ratios first / side.
struct Rounds {
  std::vector<std::vector<double>> ms, ratio;
  template <class... F>
  static Rounds run(int rounds, F&&... sides) {
    std::vector<std::function<double()>> fs = {std::function<double()>(sides)...};
    Rounds r;
    r.ms.resize(fs.size());
    r.ratio.resize(fs.size());
    for (int k = 0; k < rounds; ++k) {
      std::vector<double> got(fs.size());
      for (size_t i = 0; i < fs.size(); ++i) {
        const size_t s = (i + static_cast<size_t>(k)) % fs.size();
        got[s] = fs[s]();
      }
      for (size_t s = 0; s < fs.size(); ++s) {
        r.ms[s].push_back(got[s]);
        r.ratio[s].push_back(got[0] / got[s]);
      }
    }
    return r;
  }
  double med(size_t s) const { return median(ms[s]); }
  double speedup(size_t s) const { return median(ratio[s]); }
};

const char* met(bool ok) { return ok ? "yes" : "NO"; }

// Issue 53's quantization rows: int8 linear [256, 4096] x [4096, 4096] against tensorwire's f32
// Linear and PyTorch's dynamic int8 Linear (measured by bench/lowp_torch.py in the same run); and
// batch-1 generation of a GPT-2-small-sized model (12 layers, d 768, 12 heads; random weights, a
// 256-token vocabulary, so the head is small) in f32, q8 and q4, with the bytes its parameters
// upload as.
void quant_rows(int rounds, int repeats, const std::string& torch_engine, double torch_int8_ms,
                double torch_f32_ms) {
  tw::manual_seed(54);
  const tw::Tensor x = tw::randn({256, 4096});
  tw::nn::Linear layer(4096, 4096);
  const auto [wq, ws] = tw::quantize_weight_int8(layer.weight()->value());
  const tw::Tensor bias = layer.bias()->value();
  auto f32 = [&] { return time_ms([&] { layer.forward(x).device().sync(); }, repeats); };
  auto int8 = [&] {
    return time_ms([&] { tw::linear_int8(x, wq, ws, bias).device().sync(); }, repeats);
  };
  {
    tw::NoGradGuard no_grad;
    const std::vector<float> a = layer.forward(x).to_vector<float>();
    const std::vector<float> b = tw::linear_int8(x, wq, ws, bias).to_vector<float>();
    double err = 0, mag = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      err = std::max(err, static_cast<double>(std::fabs(a[i] - b[i])));
      mag = std::max(mag, static_cast<double>(std::fabs(a[i])));
    }
    std::printf("int8 linear: max |int8 - f32| = %.3g of max |f32| %.3g (%.2f%%)\n", err, mag,
                100 * err / mag);
    const Rounds r = Rounds::run(rounds, f32, int8);
    std::printf("| row | f32 | quantized | ratio | target | met |\n|---|---|---|---|---|---|\n");
    const double gop = 2.0 * 256 * 4096 * 4096 / 1e6;
    std::printf(
        "| int8 linear [256,4096]x[4096,4096], ms (GOP/s) | %.2f (%.0f) | %.2f (%.0f) | "
        "f32/int8 %.2f | >= 2.5 | %s |\n",
        r.med(0), gop / r.med(0), r.med(1), gop / r.med(1), r.speedup(1), met(r.speedup(1) >= 2.5));
    if (torch_int8_ms > 0) {
      std::printf(
          "| vs PyTorch quantize_dynamic (engine %s; its f32 Linear %.2f ms), ms | %.2f | "
          "%.2f | torch/tw %.2f | >= 1.2 | %s |\n",
          torch_engine.c_str(), torch_f32_ms, torch_int8_ms, r.med(1), torch_int8_ms / r.med(1),
          met(torch_int8_ms / r.med(1) >= 1.2));
    }
  }

  const tw::nn::GPTConfig c{
      .vocab_size = 256, .context = 128, .n_layer = 12, .n_head = 12, .n_embd = 768};
  auto make = [&](const char* scheme) {
    tw::manual_seed(55);  // the same weights for every side
    auto m = std::make_unique<tw::nn::GPT>(c);
    m->eval();
    if (scheme) tw::nn::quantize(*m, scheme);
    return m;
  };
  auto upload_bytes = [](const tw::nn::Module& m) {
    double b = 0;
    for (const auto& [name, t] : m.state_dict()) {
      b += static_cast<double>(t.numel()) * static_cast<double>(tw::dtype_size(t.dtype()));
    }
    return b;
  };
  auto f = make(nullptr), q8 = make("q8"), q4 = make("q4");
  tw::nn::Generator gf(*f), g8(*q8), g4(*q4);
  constexpr int64_t kTokens = 32;
  const tw::nn::SampleOptions greedy{.temperature = 0};
  auto gen = [&](tw::nn::Generator& g) {
    return [&g, &greedy] {
      const auto t0 = Clock::now();
      (void)g.generate({1}, kTokens, greedy);
      return std::chrono::duration<double>(Clock::now() - t0).count() * 1e3;
    };
  };
  for (tw::nn::Generator* g : {&gf, &g8, &g4}) (void)g->generate({1}, 4, greedy);  // warm-up
  const Rounds r = Rounds::run(rounds, gen(gf), gen(g8), gen(g4));
  auto tps = [&](size_t s) { return 1e3 * kTokens / r.med(s); };
  std::printf(
      "| generation, GPT-2-small-sized, batch 1, %lld tokens: tokens/s | %.1f | q8 %.1f | "
      "q8/f32 %.2f | >= 2 | %s |\n",
      static_cast<long long>(kTokens), tps(0), tps(1), r.speedup(1), met(r.speedup(1) >= 2));
  std::printf("| (the same) | | q4 %.1f | q4/f32 %.2f | >= 3 | %s |\n", tps(2), r.speedup(2),
              met(r.speedup(2) >= 3));
  const double bf = upload_bytes(*f), b4 = upload_bytes(*q4), b8 = upload_bytes(*q8);
  std::printf(
      "| upload bytes (the parameters' payload), MB | %.1f | q8 %.1f, q4 %.1f | q4/f32 %.3f "
      "| <= 0.2 | %s |\n",
      bf / 1e6, b8 / 1e6, b4 / 1e6, b4 / bf, met(b4 / bf <= 0.2));
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 5, repeats = 3;
  bool matmul_rows = true;
  std::string f32_peak = "n/a", bf16_peak = "n/a", torch_engine = "n/a";
  double torch_int8_ms = 0, torch_f32_ms = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i], v = argv[i + 1];
    if (f == "--threads") {
      threads = std::max(1, std::atoi(v.c_str()));
    } else if (f == "--rounds") {
      rounds = std::max(1, std::atoi(v.c_str()));
    } else if (f == "--repeats") {
      repeats = std::max(1, std::atoi(v.c_str()));
    } else if (f == "--f32-peak") {
      f32_peak = v;
    } else if (f == "--bf16-peak") {
      bf16_peak = v;
    } else if (f == "--matmul") {
      matmul_rows = v != "0";
    } else if (f == "--torch-engine") {
      torch_engine = v;
    } else if (f == "--torch-int8-ms") {
      torch_int8_ms = std::atof(v.c_str());
    } else if (f == "--torch-f32-ms") {
      torch_f32_ms = std::atof(v.c_str());
    } else {
      std::fprintf(stderr,
                   "usage: tw_bench_lowp [--threads N] [--rounds N] [--repeats N] [--matmul 0|1] "
                   "[--f32-peak GFLOPS] [--bf16-peak GFLOPS|n/a] [--torch-engine NAME "
                   "--torch-int8-ms MS --torch-f32-ms MS]\n");
      return 2;
    }
  }
  try {
    tw::set_num_threads(threads);
    if (!matmul_rows) {  // --matmul 0: the quantization rows only
      quant_rows(rounds, repeats, torch_engine, torch_int8_ms, torch_f32_ms);
      return 0;
    }
    constexpr int64_t kN = 2048;
    tw::manual_seed(53);
    const tw::Tensor a = tw::randn({kN, kN}), b = tw::randn({kN, kN});
    const tw::Tensor a16 = a.to(tw::kBF16), b16 = b.to(tw::kBF16);

    // Check: sampled entries against the double sum of the rounded operands' products, within
    // k * 2^-24 * sum |a_i b_i| (f32 accumulation in any order).
    {
      const std::vector<float> av = a16.to(tw::kF32).to_vector<float>();
      const std::vector<float> bv = b16.to(tw::kF32).to_vector<float>();
      const std::vector<float> cv = a16.matmul(b16).to_vector<float>();
      for (int s = 0; s < 64; ++s) {
        const int64_t i = (s * 977) % kN, j = (s * 1511 + 7) % kN;
        double want = 0, mag = 0;
        for (int64_t p = 0; p < kN; ++p) {
          const double t = double{av[i * kN + p]} * bv[p * kN + j];
          want += t;
          mag += std::abs(t);
        }
        if (std::abs(cv[i * kN + j] - want) > kN * 0x1p-24 * mag) {
          std::fprintf(stderr, "tw_bench_lowp: bf16 matmul [%lld, %lld] = %g, want %g\n",
                       static_cast<long long>(i), static_cast<long long>(j), cv[i * kN + j], want);
          return 1;
        }
      }
    }

    (void)time_matmul(a, b, 1);  // warm-up: primitives created, buffers pooled
    (void)time_matmul(a16, b16, 1);
    std::vector<double> f32_ms, bf16_ms, ratio;
    for (int r = 0; r < rounds; ++r) {
      double f = 0, h = 0;
      if (r % 2 == 0) {
        f = time_matmul(a, b, repeats);
        h = time_matmul(a16, b16, repeats);
      } else {
        h = time_matmul(a16, b16, repeats);
        f = time_matmul(a, b, repeats);
      }
      f32_ms.push_back(f);
      bf16_ms.push_back(h);
      ratio.push_back(f / h);
    }
    const double flop = 2.0 * kN * kN * kN;
    const double f_ms = median(f32_ms), h_ms = median(bf16_ms), speedup = median(ratio);
    const double h_gflops = flop / h_ms / 1e6, f_gflops = flop / f_ms / 1e6;
    const bool native = tw::cpu::bf16_native();
    double load[1] = {0};
    getloadavg(load, 1);
    std::printf(
        "bench-lowp: %d threads, %d interleaved rounds (median of %d runs per side each), "
        "load average %.2f\n",
        threads, rounds, repeats, load[0]);
    std::printf("bf16 compute: %s\n",
                native ? "oneDNN's AVX512_BF16 kernels"
                       : "through f32 (this CPU has no AVX512_BF16: operands widened, f32 GEMM)");
    std::printf("| row | f32 | bf16 | ratio | target | met |\n|---|---|---|---|---|---|\n");
    std::printf(
        "| matmul 2048^3, ms (GFLOP/s) | %.1f (%.0f) | %.1f (%.0f) | f32/bf16 %.2f "
        "(rounds %.2f-%.2f) | >= 1.7 | %s |\n",
        f_ms, f_gflops, h_ms, h_gflops, speedup, *std::min_element(ratio.begin(), ratio.end()),
        *std::max_element(ratio.begin(), ratio.end()), speedup >= 1.7 ? "yes" : "NO");
    const double fp = std::atof(f32_peak.c_str()), bp = std::atof(bf16_peak.c_str());
    if (bp > 0) {
      std::printf("| bf16 matmul / bf16 FMA peak | | %.0f / %.0f GFLOP/s | %.2f | >= 0.80 | %s |\n",
                  h_gflops, bp, h_gflops / bp, h_gflops / bp >= 0.8 ? "yes" : "NO");
      if (fp > 0) {
        std::printf("| FMA peak, GFLOP/s | %.0f | %.0f | bf16/f32 %.2f | >= 1.9 | %s |\n", fp, bp,
                    bp / fp, bp / fp >= 1.9 ? "yes" : "NO");
      }
    } else {
      std::printf("| FMA peak, GFLOP/s | %s | %s | | bf16 >= 1.9x f32 | n/a: no AVX512_BF16 |\n",
                  f32_peak.c_str(), bf16_peak.c_str());
    }
    std::printf(
        "\nQuantization (int8: oneDNN's u8 x s8 matmul%s; q8/q4: tensorwire's AVX2 "
        "weight-only kernel):\n\n",
        tw::cpu::int8_native() ? ", VNNI" : " on AVX2, without VNNI (vpmaddubsw)");
    quant_rows(rounds, repeats, torch_engine, torch_int8_ms, torch_f32_ms);
    return 0;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tw_bench_lowp: %s\n", e.what());
    return 1;
  }
}
