#version 450
// Every elementwise op, written once: unary kinds (Unary, Cast and copies), binary kinds (Binary,
// BinaryScalar), Where, Clamp, MaskedFill and Full. The op family, kind, dtypes and compute
// class are specialisation constants (vulkan/elementwise.cc picks them), so each pipeline keeps
// only its own branch, and a kind added to TW_UNARY_KINDS needs a case below, not a new shader.
// Inputs are read through strides (broadcast: stride 0; any view) against the output's shape;
// the output is contiguous.
#include "common.glsl"

// This build's part: EW_PART 1 unary (casts, copies), 2 binary, 3 the rest; EW_CLASS: the
// compute class whose kind functions it has (vulkan.cmake builds each pair; a pipeline parses
// only its own part, which keeps pipeline creation short on drivers that compile at creation).
#ifndef EW_PART
#define EW_PART 1
#define EW_CLASS 0
#endif

layout(local_size_x = 256) in;
// The family and the compute class are fixed by the build where they can be (EW_PART 1 is
// Unary's, 2 Binary's; EW_CLASS is the class), not specialisation constants: the compiler
// then drops the other families' and classes' code from the SPIR-V, which is what lavapipe
// parses and optimises for every pipeline it makes (a fifth of the code, and of the time).
// The specialisation constants' ids stay as elementwise.cc passes them (an id a variant does
// not declare is ignored).
#if EW_PART == 1
#define FAMILY EW_UNARY
#elif EW_PART == 2
#define FAMILY EW_BINARY
#else
layout(constant_id = 0) const int FAMILY = 0;  // EW_* (kinds.glsl)
#endif
#define CLS EW_CLASS  // CLS_F32, CLS_F64, CLS_I64: how values compute
layout(constant_id = 1) const int KIND = 0;    // the family's kind; -1: cast; -2: bit copy
layout(constant_id = 2) const int DT_OUT = 0;
layout(constant_id = 4) const int SCALAR = 0;  // 0: b is a tensor; 1: b is the scalar; 2: a is
// The inputs' dtypes are parameters, not specialisation constants: a pipeline per combination
// of operand dtypes made pipeline creation (a compile, on lavapipe) most of the suite's time.
#define DT_A int(p.dta)
#define DT_B int(p.dtb)
#define DT_C int(p.dtc)

TW_TENSOR(0)  // out
TW_TENSOR(1)  // a (x, cond of where)
TW_TENSOR(2)  // b
TW_TENSOR(3)  // c

// This dispatch's parameters: a slot of its command batch's parameter buffer (context.h).
layout(set = 0, binding = 4) readonly buffer Params {
  uint n, rank;
  uint shape[6];
  int sa[6], sb[6], sc[6];
  uint oa, ob, oc;
  // Scalars (BinaryScalar's, Full's, Clamp's lo and hi), converted on the host per class.
  uint s0f, s0d_lo, s0d_hi, s0i_lo, s0i_hi;
  uint s1f, s1d_lo, s1d_hi, s1i_lo, s1i_hi;
  uint dta, dtb, dtc;  // the operands' dtypes
} p;

int64_t s_i(uint lo, uint hi) { return int64_t(uint64_t(lo) | (uint64_t(hi) << 32)); }
#if TW_F64
double s_d(uint lo, uint hi) { return uint64BitsToDouble(uint64_t(lo) | (uint64_t(hi) << 32)); }
#else
float s_d(uint lo, uint hi) { return 0.0; }
#endif

#if EW_CLASS == CLS_F32
// ---- float kinds (f32; the f64 class has the correctly rounded ones: elementwise.cc) ----
float erf_f(float x) {
  float ax = min(abs(x), 4.0);
  float x2 = ax * ax;
  float small_ = ax * 1.12837916709551257 +
                 ax * x2 * (((((7.919117343e-05 * x2 - 8.031139150e-04) * x2 + 5.190899130e-03) * x2 -
                              2.685531229e-02) * x2 + 1.128362715e-01) * x2 - 3.761263192e-01);
  float t = 1.0 / max(ax, 1.0);
  float q = 7.237630431e-03;
  q = q * t - 6.107095256e-02;
  q = q * t + 2.308851331e-01;
  q = q * t - 5.107825994e-01;
  q = q * t + 7.112290859e-01;
  q = q * t - 5.789284706e-01;
  q = q * t + 7.495535165e-02;
  q = q * t + 5.533681512e-01;
  q = q * t + 6.902119494e-04;
  float large_ = 1.0 - exp(-x2) * q;
  float r = ax < 1.0 ? small_ : large_;
  if (isnan(x)) return x;
  return x < 0.0 || (x == 0.0 && floatBitsToUint(x) != 0u) ? -r : r;
}
float tanh_f(float x) {
  float ax = abs(x);
  if (ax < 0.625) {
    float x2 = x * x;
    float q = ((((-5.718962755e-03 * x2 + 2.065312490e-02) * x2 - 5.374465883e-02) * x2 +
                1.333151311e-01) * x2 - 3.333328664e-01);
    return x + x * x2 * q;
  }
  if (isnan(x)) return x;
  float r = 1.0 - 2.0 / (exp(2.0 * ax) + 1.0);
  return x < 0.0 ? -r : r;
}
// log(x) as the cpu backend computes it (vec_math.h log_f32): x = 2^e m, m in [sqrt(1/2),
// sqrt(2)), log(1 + f) = f - f^2/2 + f^3 Q(f) plus e ln 2 in two parts. Within an ulp or two,
// where GLSL's log is only bounded in absolute error near 1.
// log(1 + f) + e ln 2 for f in [sqrt(1/2) - 1, sqrt(2) - 1).
float log_core(float f, float e) {
  const float z = f * f;
  float q = 6.675271690e-02;
  q = q * f - 1.164643466e-01;
  q = q * f + 1.190471202e-01;
  q = q * f - 1.241126880e-01;
  q = q * f + 1.421789080e-01;
  q = q * f - 1.666764319e-01;
  q = q * f + 2.000220418e-01;
  q = q * f - 2.500001490e-01;
  q = q * f + 3.333331048e-01;
  float y = f * z * q;
  y += e * -2.12194440054690583e-4;
  y += z * -0.5;
  return e * 0.693359375 + (f + y);
}
float log_f(float x) {
  if (isnan(x) || x < 0.0) return uintBitsToFloat(0x7fc00000u);
  if (x == 0.0) return uintBitsToFloat(0xff800000u);
  if (isinf(x)) return x;
  float e = 0.0;
  if (x < 1.17549435e-38) {
    x *= 8388608.0;
    e = -23.0;
  }
  const int u = int(floatBitsToUint(x)) - 0x3f3504f3;
  e += float(u >> 23);
  return log_core(uintBitsToFloat(uint((u & 0x007fffff) + 0x3f3504f3)) - 1.0, e);
}
// log1p: near 0 the polynomial takes x itself (1 + x would round it away; and the usual
// log(u) x / (u - 1) is folded back into log(u) by compilers that reassociate, as lavapipe's).
float log1p_f(float x) {
  if (isinf(x)) return x > 0.0 ? x : uintBitsToFloat(0x7fc00000u);
  if (x > -0.29289321 && x < 0.41421356) return x == 0.0 ? x : log_core(x, 0.0);
  return log_f(1.0 + x);
}
bool is_int(float y) { return floor(y) == y && !isinf(y); }
bool is_odd_int(float y) { return is_int(y) && abs(mod(y, 2.0)) == 1.0; }
float pow_f(float x, float y) {
  if (y == 0.0 || x == 1.0) return 1.0;
  if (isnan(x) || isnan(y)) return x + y;
  float ax = abs(x);
  if (isinf(y)) {
    if (ax == 1.0) return 1.0;
    return (ax > 1.0) == (y > 0.0) ? uintBitsToFloat(0x7f800000u) : 0.0;
  }
  if (x < 0.0 && !is_int(y)) return uintBitsToFloat(0x7fc00000u);
  float r;
  if (ax == 0.0) {
    r = y > 0.0 ? 0.0 : uintBitsToFloat(0x7f800000u);
  } else if (isinf(ax)) {
    r = y > 0.0 ? uintBitsToFloat(0x7f800000u) : 0.0;
  } else {
    r = exp2(y * log2(ax));
  }
  bool neg = (x < 0.0 || (x == 0.0 && floatBitsToUint(x) != 0u)) && is_odd_int(y);
  return neg ? -r : r;
}
#if EW_PART == 1
float unary_f(float x) {
  switch (KIND) {
    case UK_Neg: return -x;
    case UK_Abs: return abs(x);
    case UK_Exp: return exp(x);
    case UK_Log: return log_f(x);
    case UK_Log1p: return log1p_f(x);
    case UK_Sqrt: return sqrt(x);
    case UK_Rsqrt: return 1.0 / sqrt(x);
    case UK_Sin: return sin(x);
    case UK_Cos: return cos(x);
    case UK_Tanh: return tanh_f(x);
    case UK_Sigmoid: {
      float e = exp(-abs(x));
      return (x < 0.0 ? e : 1.0) / (1.0 + e);
    }
    case UK_Relu: return x < 0.0 ? 0.0 : x;
    case UK_Gelu: return 0.5 * x * (1.0 + erf_f(x * 0.70710678118654752));
    case UK_Erf: return erf_f(x);
    case UK_Recip: return 1.0 / x;
    case UK_Floor: return floor(x);
    case UK_Ceil: return ceil(x);
    case UK_Round: return roundEven(x);
    case UK_Sign: return isnan(x) ? x : (x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0));
    case UK_Square: return x * x;
    case UK_LogicalNot: return x == 0.0 ? 1.0 : 0.0;
  }
  return x;  // KIND -1: a copy or cast
}
#else
float unary_f(float x) { return x; }
#endif
#if EW_PART == 2
float remainder_f(float a, float b) {
  float m = a - b * trunc(a / b);  // fmod's sign: a's
  if (isinf(b) && !isinf(a)) m = a;
  if (m == 0.0) return b < 0.0 ? -0.0 : 0.0;
  return (b < 0.0) != (m < 0.0) ? m + b : m;
}
float binary_f(float a, float b) {
  switch (KIND) {
    case BK_Add: return a + b;
    case BK_Sub: return a - b;
    case BK_Mul: return a * b;
    case BK_Div: return a / b;
    case BK_Pow: return pow_f(a, b);
    case BK_Maximum: return (a > b || isnan(a)) ? a : b;
    case BK_Minimum: return (a < b || isnan(a)) ? a : b;
    case BK_Remainder: return remainder_f(a, b);
  }
  return 0.0;
}
bool compare_f(float a, float b) {
  switch (KIND) {
    case BK_Eq: return a == b;
    case BK_Ne: return a != b;
    case BK_Lt: return a < b;
    case BK_Le: return a <= b;
    case BK_Gt: return a > b;
    case BK_Ge: return a >= b;
    case BK_LogicalAnd: return a != 0.0 && b != 0.0;
    case BK_LogicalOr: return a != 0.0 || b != 0.0;
    case BK_LogicalXor: return (a != 0.0) != (b != 0.0);
  }
  return false;
}

#else
float remainder_f(float a, float b) { return a; }
float binary_f(float a, float b) { return a; }
bool compare_f(float a, float b) { return false; }
#endif
#else
float erf_f(float x) { return x; }
float unary_f(float x) { return x; }
float binary_f(float a, float b) { return a; }
bool compare_f(float a, float b) { return false; }
#endif

#if EW_CLASS == CLS_I64
// ---- integer kinds (computed in i64; a narrower output wraps when stored) ----
int64_t ipow(int64_t base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e & 1) != 0 ? -1 : 1;
    return 0;
  }
  int64_t r = 1;
  while (e != 0) {
    if ((e & 1) != 0) r *= base;
    e >>= 1;
    if (e != 0) base *= base;
  }
  return r;
}
int64_t unary_i(int64_t x) {
  switch (KIND) {
    case UK_Neg: return -x;
    case UK_Abs: return x < 0 ? -x : x;
    case UK_Relu: return x < 0 ? 0 : x;
    case UK_Sign: return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case UK_Square: return x * x;
    case UK_LogicalNot: return x == 0 ? 1 : 0;
  }
  return x;  // floor, ceil, round of an integer; copy; cast
}
int64_t binary_i(int64_t a, int64_t b) {
  switch (KIND) {
    case BK_Add: return a + b;
    case BK_Sub: return a - b;
    case BK_Mul: return a * b;
    case BK_Pow: return ipow(a, b);
    case BK_Remainder: {  // Python's: the divisor's sign (divisors checked for 0 on the host)
      if (b == -1) return 0;  // min % -1 overflows; the true remainder is 0
      const int64_t m = a - (a / b) * b;
      return m != 0 && ((m < 0) != (b < 0)) ? m + b : m;
    }
    case BK_Maximum: return a > b ? a : b;
    case BK_Minimum: return a < b ? a : b;
  }
  return 0;
}
bool compare_i(int64_t a, int64_t b) {
  switch (KIND) {
    case BK_Eq: return a == b;
    case BK_Ne: return a != b;
    case BK_Lt: return a < b;
    case BK_Le: return a <= b;
    case BK_Gt: return a > b;
    case BK_Ge: return a >= b;
    case BK_LogicalAnd: return a != 0 && b != 0;
    case BK_LogicalOr: return a != 0 || b != 0;
    case BK_LogicalXor: return (a != 0) != (b != 0);
  }
  return false;
}

#else
int64_t unary_i(int64_t x) { return x; }
int64_t binary_i(int64_t a, int64_t b) { return a; }
bool compare_i(int64_t a, int64_t b) { return false; }
#endif

#if TW_F64 && EW_CLASS == CLS_F64
// ---- f64: GLSL's correctly rounded operations, and math64.glsl's functions ----
#include "math64.glsl"
double unary_d(double x) {
  switch (KIND) {
    case UK_Neg: return -x;
    case UK_Abs: return abs(x);
    case UK_Exp: return exp_d(x);
    case UK_Log: return log_d(x);
    case UK_Log1p: return log1p_d(x);
    case UK_Sin: return sin_d(x);
    case UK_Cos: return cos_d(x);
    case UK_Tanh: return tanh_d(x);
    case UK_Sigmoid: return 1.0LF / (1.0LF + exp_d(-x));  // the cpu backend's formula
    case UK_Erf: return erf_d(x);
    case UK_Gelu: return x * 0.5LF * one_plus_erf_d(x * 0.70710678118654752440LF);
    case UK_Sqrt: return sqrt(x);
    case UK_Rsqrt: return 1.0LF / sqrt(x);
    case UK_Relu: return x < 0.0LF ? 0.0LF : x;
    case UK_Recip: return 1.0LF / x;
    case UK_Floor: return floor(x);
    case UK_Ceil: return ceil(x);
    case UK_Round: {  // half to even, by hand: lavapipe's double roundEven rounds halves down
      double r = floor(x);
      const double d = x - r;
      if (d > 0.5LF || (d == 0.5LF && r - 2.0LF * floor(r * 0.5LF) != 0.0LF)) r += 1.0LF;
      return r == 0.0LF && x < 0.0LF ? -0.0LF : r;
    }
    case UK_Sign: return isnan(x) ? x : (x > 0.0LF ? 1.0LF : (x < 0.0LF ? -1.0LF : 0.0LF));
    case UK_Square: return x * x;
    case UK_LogicalNot: return x == 0.0LF ? 1.0LF : 0.0LF;
  }
  return x;
}
double binary_d(double a, double b) {
  switch (KIND) {
    case BK_Add: return a + b;
    case BK_Sub: return a - b;
    case BK_Mul: return a * b;
    case BK_Div: return a / b;
    case BK_Pow: return pow_d(a, b);
    case BK_Maximum: return (a > b || isnan(a)) ? a : b;
    case BK_Minimum: return (a < b || isnan(a)) ? a : b;
    case BK_Remainder: {  // Python's: the divisor's sign
      const double m = fmod_d(a, b);
      if (m == 0.0LF) return b < 0.0LF ? -0.0LF : 0.0LF;
      return (b < 0.0LF) != (m < 0.0LF) ? m + b : m;
    }
  }
  return 0.0LF;
}
bool compare_d(double a, double b) {
  switch (KIND) {
    case BK_Eq: return a == b;
    case BK_Ne: return a != b;
    case BK_Lt: return a < b;
    case BK_Le: return a <= b;
    case BK_Gt: return a > b;
    case BK_Ge: return a >= b;
    case BK_LogicalAnd: return a != 0.0LF && b != 0.0LF;
    case BK_LogicalOr: return a != 0.0LF || b != 0.0LF;
    case BK_LogicalXor: return (a != 0.0LF) != (b != 0.0LF);
  }
  return false;
}
#elif TW_F64
double unary_d(double x) { return x; }
double binary_d(double a, double b) { return a; }
bool compare_d(double a, double b) { return false; }
#endif

void main() {
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
    int ia = int(p.oa), ib = int(p.ob), ic = int(p.oc);
    uint rem = i;
    for (int d = int(p.rank) - 1; d >= 0; --d) {
      const uint idx = rem % p.shape[d];
      rem /= p.shape[d];
      ia += int(idx) * p.sa[d];
      ib += int(idx) * p.sb[d];
      ic += int(idx) * p.sc[d];
    }
    const uint ua = uint(ia), ub = uint(ib), uc = uint(ic);
    if (FAMILY == EW_UNARY && KIND == -2) {  // a copy of the bits, by element width
      if (DT_OUT == DT_U8 || DT_OUT == DT_BOOL) b0_8.v[i] = b1_8.v[ua];
      else if (DT_OUT == DT_F16 || DT_OUT == DT_BF16) b0_16.v[i] = b1_16.v[ua];
      else if (DT_OUT == DT_F64 || DT_OUT == DT_I64) b0_64.v[i] = b1_64.v[ua];
      else b0_32.v[i] = b1_32.v[ua];
    } else if (FAMILY == EW_FILL) {
      if (CLS == CLS_I64) sti0(DT_OUT, i, s_i(p.s0i_lo, p.s0i_hi));
      else if (CLS == CLS_F64) std0(DT_OUT, i, s_d(p.s0d_lo, p.s0d_hi));
      else stf0(DT_OUT, i, uintBitsToFloat(p.s0f));
    } else if (FAMILY == EW_WHERE) {  // cond ? b : c, computed in the output's class
      const bool cond = ldi1(DT_A, ua) != 0;
      if (CLS == CLS_I64) sti0(DT_OUT, i, cond ? ldi2(DT_B, ub) : ldi3(DT_C, uc));
      else if (CLS == CLS_F64) std0(DT_OUT, i, cond ? ldd2(DT_B, ub) : ldd3(DT_C, uc));
      else stf0(DT_OUT, i, cond ? ldf2(DT_B, ub) : ldf3(DT_C, uc));
    } else if (FAMILY == EW_MASKED_FILL) {  // b (bool mask) ? scalar : a
      const bool m = ldi2(DT_B, ub) != 0;
      if (CLS == CLS_I64) sti0(DT_OUT, i, m ? s_i(p.s0i_lo, p.s0i_hi) : ldi1(DT_A, ua));
      else if (CLS == CLS_F64) std0(DT_OUT, i, m ? s_d(p.s0d_lo, p.s0d_hi) : ldd1(DT_A, ua));
      else stf0(DT_OUT, i, m ? uintBitsToFloat(p.s0f) : ldf1(DT_A, ua));
    } else if (FAMILY == EW_GELU_BACKWARD && CLS == CLS_F64) {  // the cpu's double formula
#if TW_F64 && EW_CLASS == CLS_F64
      const double g = ldd1(DT_A, ua), x = ldd2(DT_B, ub);
      const double cdf = 0.5LF * one_plus_erf_d(x * 0.70710678118654752440LF);
      const double pdf = exp_d(-0.5LF * x * x) * 0.39894228040143267794LF;
      std0(DT_OUT, i, g * (cdf + x * pdf));
#endif
    } else if (FAMILY == EW_GELU_BACKWARD) {  // a: grad, b: x; f32 (the erf form)
      const float g = ldf1(DT_A, ua), x = ldf2(DT_B, ub);
      const float cdf = 0.5 * (1.0 + erf_f(x * 0.70710678118654752));
      const float pdf = exp(-0.5 * x * x) * 0.39894228040143268;
      stf0(DT_OUT, i, g * (cdf + x * pdf));
    } else if (FAMILY == EW_CLAMP) {  // KIND bit 0: lo given, bit 1: hi given; NaN propagates
      if (CLS == CLS_I64) {
        int64_t x = ldi1(DT_A, ua);
        if ((KIND & 1) != 0 && x < s_i(p.s0i_lo, p.s0i_hi)) x = s_i(p.s0i_lo, p.s0i_hi);
        if ((KIND & 2) != 0 && x > s_i(p.s1i_lo, p.s1i_hi)) x = s_i(p.s1i_lo, p.s1i_hi);
        sti0(DT_OUT, i, x);
      } else if (CLS == CLS_F64) {
        real64 x = ldd1(DT_A, ua);
        const real64 lo = s_d(p.s0d_lo, p.s0d_hi), hi = s_d(p.s1d_lo, p.s1d_hi);
        if ((KIND & 1) != 0 && (x < lo || isnan(lo))) x = lo;
        if ((KIND & 2) != 0 && (x > hi || isnan(hi))) x = hi;
        std0(DT_OUT, i, x);
      } else {
        float x = ldf1(DT_A, ua);
        const float lo = uintBitsToFloat(p.s0f), hi = uintBitsToFloat(p.s1f);
        if ((KIND & 1) != 0 && (x < lo || isnan(lo))) x = lo;
        if ((KIND & 2) != 0 && (x > hi || isnan(hi))) x = hi;
        stf0(DT_OUT, i, x);
      }
    } else if (FAMILY == EW_UNARY) {
      if (CLS == CLS_I64) {
        sti0(DT_OUT, i, unary_i(ldi1(DT_A, ua)));
      } else if (CLS == CLS_F64) {
#if TW_F64
        std0(DT_OUT, i, unary_d(ldd1(DT_A, ua)));
#endif
      } else {
        stf0(DT_OUT, i, unary_f(ldf1(DT_A, ua)));
      }
    } else {  // EW_BINARY: SCALAR 1: b is the scalar; 2: a is
      const bool cmp = KIND >= BK_Eq;
      if (CLS == CLS_I64) {
        const int64_t s = s_i(p.s0i_lo, p.s0i_hi);
        const int64_t a = SCALAR == 2 ? s : ldi1(DT_A, ua);
        const int64_t b = SCALAR == 1 ? s : ldi2(DT_B, ub);
        sti0(DT_OUT, i, cmp ? (compare_i(a, b) ? 1 : 0) : binary_i(a, b));
      } else if (CLS == CLS_F64) {
#if TW_F64
        const double s = s_d(p.s0d_lo, p.s0d_hi);
        const double a = SCALAR == 2 ? s : ldd1(DT_A, ua);
        const double b = SCALAR == 1 ? s : ldd2(DT_B, ub);
        if (cmp) sti0(DT_OUT, i, compare_d(a, b) ? 1 : 0);
        else std0(DT_OUT, i, binary_d(a, b));
#endif
      } else {
        const float s = uintBitsToFloat(p.s0f);
        const float a = SCALAR == 2 ? s : ldf1(DT_A, ua);
        const float b = SCALAR == 1 ? s : ldf2(DT_B, ub);
        if (cmp) sti0(DT_OUT, i, compare_f(a, b) ? 1 : 0);
        else stf0(DT_OUT, i, binary_f(a, b));
      }
    }
  }
}
