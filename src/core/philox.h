// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. Element i of a random tensor made with seed s is a pure function of
// (s, i), so the same seed gives the same tensor on every device, backend and thread count.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

// The cuda backend's kernels run the same functions on the device (backend/cuda/kernels.cu).
#if defined(__CUDACC__)
#define TW_PHILOX_HD __host__ __device__ inline
#else
#define TW_PHILOX_HD inline
#endif

namespace tw {

TW_PHILOX_HD std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t key_in) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(key_in), k1 = static_cast<uint32_t>(key_in >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t{kM0} * c0;
    uint64_t p1 = uint64_t{kM1} * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kW0;
    k1 += kW1;
  }
  return {c0, c1, c2, c3};
}

// Uniform in [0, 1) with 24 (float) or 53 (double) random bits.
TW_PHILOX_HD float philox_uniform_f32(uint64_t seed, uint64_t i) {
  return static_cast<float>(philox4x32(i, seed)[0] >> 8) * (1.0f / 16777216.0f);
}
TW_PHILOX_HD double philox_uniform_f64(uint64_t seed, uint64_t i) {
  auto r = philox4x32(i, seed);
  uint64_t bits = (uint64_t{r[0]} << 21) ^ (r[1] >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}
// Standard normal by Box-Muller on two uniforms of the same counter; computed in double so
// float and double tensors of the same seed agree to float precision.
TW_PHILOX_HD double philox_normal(uint64_t seed, uint64_t i) {
  auto r = philox4x32(i, seed);
  double u1 = (static_cast<double>(r[0]) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
  double u2 = static_cast<double>(r[1]) * (1.0 / 4294967296.0);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace tw
TW_INTERNAL_END
