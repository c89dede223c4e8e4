// f16 (IEEE binary16) and bf16 conversions, round to nearest even, NaN preserved.
#pragma once
#include <cstdint>
#include <cstring>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

inline float bits_to_f32(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t f32_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t{h} << 16); }

inline float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t{h & 0x8000u} << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
  uint32_t b = f32_to_bits(f);
  uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000u);
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // overflow (incl. rounding) -> inf
  if (abs < 0x38800000u) {                        // below the smallest normal
    if (abs < 0x33000000u) return sign;           // rounds to zero
    uint32_t e = abs >> 23;
    uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (113 - e) - ... see below
    // value = man * 2^(e-150); f16 subnormal unit is 2^-24 -> units = man * 2^(e-126)
    uint32_t units = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (units & 1u))) ++units;
    return sign | static_cast<uint16_t>(units);
  }
  uint32_t r = abs - 0x38000000u;  // rebias exponent 127 -> 15
  uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace tw
TW_INTERNAL_END
