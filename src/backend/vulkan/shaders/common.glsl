// Shared by every shader of the vulkan backend: tensor storage of any dtype behind one binding,
// loads that convert to the compute type and stores that convert back by the Cast rules of
// docs/ops.md. Each binding is declared once per element width (8, 16, 32, 64 bits) over the
// same buffer; the dtype codes below are specialisation constants, so a pipeline keeps only the
// branch of its dtype. TW_F64 (1 or 0): whether this build of the shader has doubles (a device
// without shaderFloat64 gets the variant without them, and f64 ops are refused there).
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require

#include "kinds.glsl"  // generated from the IR's kind lists (tensorwire/op_kinds.h, DType)

#define TW_BUFFER(N)                                                          \
  layout(set = 0, binding = N) buffer B##N##_8 { uint8_t v[]; } b##N##_8;     \
  layout(set = 0, binding = N) buffer B##N##_16 { uint16_t v[]; } b##N##_16;  \
  layout(set = 0, binding = N) buffer B##N##_32 { uint v[]; } b##N##_32;      \
  layout(set = 0, binding = N) buffer B##N##_64 { uint64_t v[]; } b##N##_64;

// Cast rules: float -> integer truncates toward zero, saturates, NaN -> 0.
int64_t f2i(float x, int dt) {
  if (dt == DT_BOOL) return x != 0.0 ? 1 : 0;  // NaN -> true
  if (isnan(x)) return 0;
  if (dt == DT_U8) return int64_t(clamp(x, 0.0, 255.0));
  if (dt == DT_I32) {
    if (x >= 2147483648.0) return 2147483647;
    if (x <= -2147483648.0) return -2147483648;
    return int64_t(x);
  }
  if (x <= -9223372036854775808.0) return int64_t(0x8000000000000000UL);
  if (x >= 9223372036854775808.0) return int64_t(0x7fffffffffffffffUL);
  return int64_t(x);
}
// An i32's bits widened with their sign. (Spelled with shifts: lavapipe widened
// int64_t(int(u)) without the sign.)
int64_t sext32(uint u) { return int64_t(uint64_t(u) << 32) >> 32; }

// Integer -> narrower integer wraps (two's complement); bool is `!= 0`.
int64_t i2i(int64_t x, int dt) {
  if (dt == DT_I32) return int64_t(int(x));
  if (dt == DT_U8) return x & 255;
  if (dt == DT_BOOL) return x != 0 ? 1 : 0;
  return x;
}
// f32 -> bf16 rounds to nearest even; NaN stays NaN.
uint f2bf(float x) {
  uint u = floatBitsToUint(x);
  if (isnan(x)) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
// f32 -> f16 rounds to nearest even (packHalf2x16's rounding is the implementation's: done here).
uint f2h(float x) {
  uint u = floatBitsToUint(x);
  uint sign = (u >> 16) & 0x8000u;
  uint a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;          // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;         // rounds past 65504: inf
  if (a < 0x38800000u) {                               // subnormal or zero in f16
    if (a < 0x33000000u) return sign;                  // below half the smallest subnormal
    uint m = (a & 0x7fffffu) | 0x800000u;
    uint shift = 126u - (a >> 23);  // f16 subnormals count 2^-24
    uint h = m >> shift;
    uint rem = m & ((1u << shift) - 1u);
    uint half_ = 1u << (shift - 1u);
    if (rem > half_ || (rem == half_ && (h & 1u) != 0u)) h += 1u;
    return sign | h;
  }
  uint h = ((a >> 13) - (112u << 10));
  uint rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h += 1u;
  return sign | h;
}

#define TW_LOADS(N)                                                                            \
  float ldf##N(int dt, uint i) {                                                               \
    if (dt == DT_F32) return uintBitsToFloat(b##N##_32.v[i]);                                  \
    if (dt == DT_I32) return float(int(b##N##_32.v[i]));                                       \
    if (dt == DT_I64) return float(int64_t(b##N##_64.v[i]));                                   \
    if (dt == DT_U8) return float(uint(b##N##_8.v[i]));                                        \
    if (dt == DT_BOOL) return b##N##_8.v[i] != uint8_t(0) ? 1.0 : 0.0;                         \
    if (dt == DT_F16) return unpackHalf2x16(uint(b##N##_16.v[i])).x;                           \
    if (dt == DT_BF16) return uintBitsToFloat(uint(b##N##_16.v[i]) << 16);                     \
    return ldf64_##N(dt, i);                                                                   \
  }                                                                                            \
  int64_t ldi##N(int dt, uint i) {                                                             \
    if (dt == DT_I32) return sext32(b##N##_32.v[i]);                                           \
    if (dt == DT_I64) return int64_t(b##N##_64.v[i]);                                          \
    if (dt == DT_U8) return int64_t(uint(b##N##_8.v[i]));                                      \
    if (dt == DT_BOOL) return b##N##_8.v[i] != uint8_t(0) ? 1 : 0;                             \
    return f2i(ldf##N(dt, i), DT_I64);                                                         \
  }                                                                                            \
  void stf##N(int dt, uint i, float x) {                                                       \
    if (dt == DT_F32) b##N##_32.v[i] = floatBitsToUint(x);                                     \
    else if (dt == DT_F16) b##N##_16.v[i] = uint16_t(f2h(x));                                  \
    else if (dt == DT_BF16) b##N##_16.v[i] = uint16_t(f2bf(x));                                \
    else if (dt == DT_F64) stf64_##N(i, x);                                                    \
    else sti##N(dt, i, f2i(x, dt));                                                            \
  }

#define TW_STORE_INT(N)                                                                        \
  void sti##N(int dt, uint i, int64_t x) {                                                     \
    if (dt == DT_I32) b##N##_32.v[i] = uint(int(x));                                           \
    else if (dt == DT_I64) b##N##_64.v[i] = uint64_t(x);                                       \
    else if (dt == DT_U8) b##N##_8.v[i] = uint8_t(x & 255);                                    \
    else if (dt == DT_BOOL) b##N##_8.v[i] = uint8_t(x != 0 ? 1 : 0);                           \
    else if (dt == DT_F32) b##N##_32.v[i] = floatBitsToUint(float(x));                         \
    else if (dt == DT_F16) b##N##_16.v[i] = uint16_t(f2h(float(x)));                           \
    else if (dt == DT_BF16) b##N##_16.v[i] = uint16_t(f2bf(float(x)));                         \
    else stif64_##N(i, x);                                                                     \
  }

#if TW_F64
#extension GL_EXT_shader_explicit_arithmetic_types_float64 : require
#define real64 double
int64_t d2i(double x, int dt) {
  if (dt == DT_BOOL) return x != 0.0LF ? 1 : 0;
  if (isnan(x)) return 0;
  if (dt == DT_U8) return int64_t(clamp(x, 0.0LF, 255.0LF));
  if (dt == DT_I32) return int64_t(clamp(x, -2147483648.0LF, 2147483647.0LF));
  if (x <= -9223372036854775808.0LF) return int64_t(0x8000000000000000UL);
  if (x >= 9223372036854775808.0LF) return int64_t(0x7fffffffffffffffUL);
  return int64_t(x);
}
#define TW_F64_FNS(N)                                                                          \
  float ldf64_##N(int dt, uint i) { return float(uint64BitsToDouble(b##N##_64.v[i])); }        \
  void stf64_##N(uint i, float x) { b##N##_64.v[i] = doubleBitsToUint64(double(x)); }          \
  void stif64_##N(uint i, int64_t x) { b##N##_64.v[i] = doubleBitsToUint64(double(x)); }       \
  double ldd##N(int dt, uint i) {                                                              \
    if (dt == DT_F64) return uint64BitsToDouble(b##N##_64.v[i]);                               \
    if (dt == DT_I64) return double(int64_t(b##N##_64.v[i]));                                  \
    if (dt == DT_I32) return double(sext32(b##N##_32.v[i]));                                   \
    if (dt == DT_U8) return double(uint(b##N##_8.v[i]));                                       \
    if (dt == DT_BOOL) return b##N##_8.v[i] != uint8_t(0) ? 1.0LF : 0.0LF;                     \
    return double(ldf##N(dt, i));                                                              \
  }                                                                                            \
  void std##N(int dt, uint i, double x) {                                                      \
    if (dt == DT_F64) b##N##_64.v[i] = doubleBitsToUint64(x);                                  \
    else if (dt == DT_F32 || dt == DT_F16 || dt == DT_BF16) stf##N(dt, i, float(x));           \
    else sti##N(dt, i, d2i(x, dt));                                                            \
  }
#else
#define real64 float
#define TW_F64_FNS(N)                                                                          \
  float ldf64_##N(int dt, uint i) { return 0.0; }                                              \
  void stf64_##N(uint i, float x) {}                                                           \
  void stif64_##N(uint i, int64_t x) {}                                                        \
  float ldd##N(int dt, uint i) { return ldf##N(dt, i); }                                       \
  void std##N(int dt, uint i, float x) { stf##N(dt, i, x); }
#endif

// Binding N with its loads and stores: ldfN/ldiN/lddN (compute type from any dtype) and
// stfN/stiN/stdN (any dtype from the compute type).
#define TW_TENSOR(N)                              \
  TW_BUFFER(N)                                    \
  float ldf64_##N(int dt, uint i);                \
  void stf64_##N(uint i, float x);                \
  void stif64_##N(uint i, int64_t x);             \
  void sti##N(int dt, uint i, int64_t x);         \
  TW_LOADS(N)                                     \
  TW_STORE_INT(N)                                 \
  TW_F64_FNS(N)
