// The CPU's peak f32 multiply-add rate: threads each running independent chains of vector FMAs
// on registers only (no memory traffic), as many chains as keep both FMA ports busy through
// their latency. What a GEMM could reach at best on this machine: bench/compare_table.py sets
// the matmul rows against it. Prints GFLOP/s (2 per FMA lane), the best of --rounds.
// With --dtype bf16, the same for bf16 products with f32 accumulation: chains of AVX512_BF16's
// vdpbf16ps (each adds two bf16 products into every f32 lane: 4 FLOP per lane); on a CPU without
// AVX512_BF16 it prints "n/a" (bench/lowp_bench.sh).
//   tw_bench_fma_peak [--threads N] [--rounds N] [--dtype f32|bf16]
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

// kIters rounds of kChains vdpbf16ps on 16 f32 lanes (32 bf16 pairs).
__attribute__((target("avx512f,avx512bf16"))) float run_bf16() {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + static_cast<float>(i) * 1e-7f);
  // bf16 pairs of 1e-4 and 1e-3 (0x38D1 and 0x3A83): the sums grow slowly, never to inf.
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x38D138D1));
  const __m512bh c = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3A833A83));
  for (long k = 0; k < kIters; ++k) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], b, c);
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
  bool bf16 = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads") {
      threads = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--rounds") {
      rounds = std::max(1, std::atoi(argv[i + 1]));
    } else if (a == "--dtype" &&
               (std::string(argv[i + 1]) == "f32" || std::string(argv[i + 1]) == "bf16")) {
      bf16 = std::string(argv[i + 1]) == "bf16";
    } else {
      std::fprintf(stderr,
                   "usage: tw_bench_fma_peak [--threads N] [--rounds N] [--dtype f32|bf16]\n");
      return 2;
    }
  }
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (bf16 && !(avx512 && __builtin_cpu_supports("avx512bf16"))) {
    std::printf("n/a\n");  // no AVX512_BF16: bf16 products run through f32 (docs/lowp.md)
    return 0;
  }
  // FLOP per instruction and lane: 2 (one multiply-add), or 4 (vdpbf16ps: two).
  const int lanes = avx512 ? 16 : 8, flop = bf16 ? 4 : 2;
  double best = 0;
  volatile float sink = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<float> results(static_cast<size_t>(threads));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        results[static_cast<size_t>(t)] = bf16 ? run_bf16() : avx512 ? run512() : run256();
      });
    }
    for (auto& t : pool) t.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (float v : results) sink = sink + v;
    best = std::max(best,
                    1.0 * flop * lanes * kChains * static_cast<double>(kIters) * threads / s / 1e9);
  }
  std::printf("%.1f\n", best);
  return 0;
}
