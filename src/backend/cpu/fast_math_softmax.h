// A fast f32 exp for the softmax kernel, in an 8-lane AVX2 form and a one-lane form that
// performs the same operations in the same order (FMAs included), so a row's tail gives
// bit-for-bit what a full vector would. Cephes' expf scheme: n = round(x log2 e),
// r = x - n ln 2 (in two parts), exp(r) by a degree-6 polynomial, times 2^n. Error within 2 ulp
// on [-87.3, 88.3]; below -87.3 the result is 0 (the true value is subnormal), above 88.3 +inf;
// NaN stays NaN.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace tw::cpu::softmax_math {

inline constexpr float kExpLo = -87.3365447f;  // exp(kExpLo) is the smallest normal float
inline constexpr float kExpHi = 88.3762626f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so that n * kLn2Hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kP0 = 1.9875691500e-4f;
inline constexpr float kP1 = 1.3981999507e-3f;
inline constexpr float kP2 = 8.3334519073e-3f;
inline constexpr float kP3 = 4.1665795894e-2f;
inline constexpr float kP4 = 1.6666665459e-1f;
inline constexpr float kP5 = 5.0000001201e-1f;

inline float exp_f32(float x) {
  if (x != x) return x;
  if (x < kExpLo) return 0.0f;
  if (x > kExpHi) return std::numeric_limits<float>::infinity();
  const float n = std::nearbyint(x * kLog2e);
  float r = std::fma(n, -kLn2Hi, x);
  r = std::fma(n, -kLn2Lo, r);
  float p = kP0;
  p = std::fma(p, r, kP1);
  p = std::fma(p, r, kP2);
  p = std::fma(p, r, kP3);
  p = std::fma(p, r, kP4);
  p = std::fma(p, r, kP5);
  p = std::fma(p, r * r, r);
  p = p + 1.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

#ifdef __AVX2__
inline __m256 exp_f32x8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(kExpLo);
  const __m256 hi = _mm256_set1_ps(kExpHi);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  const __m256 overflow = _mm256_cmp_ps(x, hi, _CMP_GT_OQ);
  // min/max return their second operand when either is NaN: x stays NaN through the clamp.
  const __m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Hi), xc);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  y = _mm256_andnot_ps(underflow, y);
  return _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()), overflow);
}
#endif

}  // namespace tw::cpu::softmax_math
