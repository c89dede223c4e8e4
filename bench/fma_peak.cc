// The CPU's peak f32 multiply-add rate: threads each running independent chains of vector FMAs
// on registers only (no memory traffic), as many chains as keep both FMA ports busy through
// their latency. What a GEMM could reach at best on this machine: bench/compare_table.py sets
// the matmul rows against it. Prints GFLOP/s (2 per FMA lane), the best of --rounds.
//   tw_bench_fma_peak [--threads N] [--rounds N]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kChains = 12;  // FMA latency 4 x 2 ports = 8 in flight, with room to spare
constexpr long kIters = 100'000'000;

// kIters rounds of kChains FMAs of 16 (AVX-512) or 8 (AVX2) f32 lanes; each returns a value
// that depends on every chain so that none is optimised away.
__attribute__((target("avx512f"))) float run512() {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long k = 0; k < kIters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], b, c);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}

float run256() {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (long k = 0; k < kIters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], b, c);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") {
      threads = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--rounds") {
      rounds = std::max(1, std::atoi(argv[i + 1]));
    } else {
      std::fprintf(stderr, "usage: tw_bench_fma_peak [--threads N] [--rounds N]\n");
      return 2;
    }
  }
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const int lanes = avx512 ? 16 : 8;
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<float> results(static_cast<size_t>(threads));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] { results[static_cast<size_t>(t)] = avx512 ? run512() : run256(); });
    }
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float v : results) sink = sink + v;
    best = std::max(best, 2.0 * lanes * kChains * static_cast<double>(kIters) * threads / s / 1e9);
  }
  std::printf("%.1f\n", best);
  return 0;
}
