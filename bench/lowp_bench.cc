// The tensorwire side of `make bench-lowp` (bench/lowp_bench.sh): bf16 matmul 2048^3 (both
// operands bf16, an f32 result; docs/lowp.md) against tensorwire's f32 matmul of the same shape,
// in interleaved rounds (f32 then bf16, the order reversed every other round; each side the
// median of --repeats runs), with the per-round ratio's median; and the bf16 result checked
// against the f32 product of the rounded operands on sampled entries. With the FMA peaks that
// lowp_bench.sh measures (tw_bench_fma_peak --dtype f32|bf16) it prints issue 53's targets.
//   tw_bench_lowp [--threads N] [--rounds N] [--repeats N] [--f32-peak GFLOPS] [--bf16-peak X]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 5, repeats = 3;
  std::string f32_peak = "n/a", bf16_peak = "n/a";
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
    } else {
      std::fprintf(stderr,
                   "usage: tw_bench_lowp [--threads N] [--rounds N] [--repeats N] "
                   "[--f32-peak GFLOPS] [--bf16-peak GFLOPS|n/a]\n");
      return 2;
    }
  }
  try {
    tw::set_num_threads(threads);
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
    return 0;
  } catch (const tw::Error& e) {
    std::fprintf(stderr, "tw_bench_lowp: %s\n", e.what());
    return 1;
  }
}
