// What each elementwise kind computes, written once per kind for every GPU backend: one
// expression per kind and compute class (float: f32 or f64; integral: i64), listed in the order
// of the IR's kind lists (tensorwire/op_kinds.h), with static_asserts that break the build when
// a kind is added there without its math here. The expressions use a small vocabulary (km_exp,
// km_log, ...) that each target defines: the CUDA backend's kernels expand them as
// __host__ __device__ functions (the same text compiles on the host, where
// tests/unit/cuda checks it against the cpu backend); a shader generator can print them, since
// each entry is also available as text (kUnaryFloatText, ...), for GLSL (the vulkan backend's
// elementwise.comp spells the same cases out by hand today). Plain C++: no project headers
// beyond the kind lists, so nvcc compiles it without the IR.
#pragma once
#include <cstdint>

#include "tensorwire/op_kinds.h"

#if defined(__CUDACC__)
#define TW_KM_HD __host__ __device__ __forceinline__
#else
#include <cmath>
#define TW_KM_HD inline
#endif

namespace tw::kind_math {

// The kinds' positions, as the IR's enums number them (ir/ops.h makes the same from the lists).
#define TW_KM_ENUM(Name, ...) k##Name,
enum UnaryKind : int32_t { TW_UNARY_KINDS(TW_KM_ENUM) kUnaryCount };
enum BinaryKind : int32_t { TW_BINARY_KINDS(TW_KM_ENUM) kBinaryCount };
#undef TW_KM_ENUM

// ---- the vocabulary, for float and double ----
#if defined(__CUDACC__)
TW_KM_HD float km_exp(float x) { return ::expf(x); }
TW_KM_HD double km_exp(double x) { return ::exp(x); }
TW_KM_HD float km_log(float x) { return ::logf(x); }
TW_KM_HD double km_log(double x) { return ::log(x); }
TW_KM_HD float km_log1p(float x) { return ::log1pf(x); }
TW_KM_HD double km_log1p(double x) { return ::log1p(x); }
TW_KM_HD float km_sqrt(float x) { return ::sqrtf(x); }
TW_KM_HD double km_sqrt(double x) { return ::sqrt(x); }
TW_KM_HD float km_sin(float x) { return ::sinf(x); }
TW_KM_HD double km_sin(double x) { return ::sin(x); }
TW_KM_HD float km_cos(float x) { return ::cosf(x); }
TW_KM_HD double km_cos(double x) { return ::cos(x); }
TW_KM_HD float km_tanh(float x) { return ::tanhf(x); }
TW_KM_HD double km_tanh(double x) { return ::tanh(x); }
TW_KM_HD float km_erf(float x) { return ::erff(x); }
TW_KM_HD double km_erf(double x) { return ::erf(x); }
TW_KM_HD float km_floor(float x) { return ::floorf(x); }
TW_KM_HD double km_floor(double x) { return ::floor(x); }
TW_KM_HD float km_ceil(float x) { return ::ceilf(x); }
TW_KM_HD double km_ceil(double x) { return ::ceil(x); }
TW_KM_HD float km_rint(float x) { return ::rintf(x); }  // half to even
TW_KM_HD double km_rint(double x) { return ::rint(x); }
TW_KM_HD float km_pow(float x, float y) { return ::powf(x, y); }
TW_KM_HD double km_pow(double x, double y) { return ::pow(x, y); }
TW_KM_HD float km_fmod(float x, float y) { return ::fmodf(x, y); }
TW_KM_HD double km_fmod(double x, double y) { return ::fmod(x, y); }
#else
template <class T>
TW_KM_HD T km_exp(T x) {
  return std::exp(x);
}
template <class T>
TW_KM_HD T km_log(T x) {
  return std::log(x);
}
template <class T>
TW_KM_HD T km_log1p(T x) {
  return std::log1p(x);
}
template <class T>
TW_KM_HD T km_sqrt(T x) {
  return std::sqrt(x);
}
template <class T>
TW_KM_HD T km_sin(T x) {
  return std::sin(x);
}
template <class T>
TW_KM_HD T km_cos(T x) {
  return std::cos(x);
}
template <class T>
TW_KM_HD T km_tanh(T x) {
  return std::tanh(x);
}
template <class T>
TW_KM_HD T km_erf(T x) {
  return std::erf(x);
}
template <class T>
TW_KM_HD T km_floor(T x) {
  return std::floor(x);
}
template <class T>
TW_KM_HD T km_ceil(T x) {
  return std::ceil(x);
}
template <class T>
TW_KM_HD T km_rint(T x) {
  return std::nearbyint(x);
}  // half to even (the default mode)
template <class T>
TW_KM_HD T km_pow(T x, T y) {
  return std::pow(x, y);
}
template <class T>
TW_KM_HD T km_fmod(T x, T y) {
  return std::fmod(x, y);
}
#endif
template <class T>
TW_KM_HD bool km_isnan(T x) {
  return x != x;
}
template <class T>
TW_KM_HD T km_abs(T x) {
  return x < T(0) ? -x : (x == T(0) ? T(0) : x);
}  // abs(-0) = +0
template <class T>
TW_KM_HD T km_sigmoid(T x) {  // no overflow for either sign
  const T e = km_exp(x < T(0) ? x : -x);
  return (x < T(0) ? e : T(1)) / (T(1) + e);
}
template <class T>
TW_KM_HD T km_gelu(T x) {
  return T(0.5) * x * (T(1) + km_erf(x * T(0.70710678118654752440)));
}
template <class T>
TW_KM_HD T km_sign(T x) {
  return km_isnan(x) ? x : (x > T(0) ? T(1) : (x < T(0) ? T(-1) : T(0)));
}
// Python's remainder: the result takes the divisor's sign.
template <class T>
TW_KM_HD T km_remainder(T a, T b) {
  T m = km_fmod(a, b);
  if (m != T(0) && ((b < T(0)) != (m < T(0)))) m += b;
  if (m == T(0)) m = b < T(0) ? -T(0) : T(0);
  return m;
}
// Maximum and minimum propagate NaN from either side.
template <class T>
TW_KM_HD T km_max(T a, T b) {
  return (a > b || km_isnan(a)) ? a : b;
}
template <class T>
TW_KM_HD T km_min(T a, T b) {
  return (a < b || km_isnan(a)) ? a : b;
}
// Integer power by squaring; a negative exponent gives 0 except for bases 1 and -1.
TW_KM_HD int64_t km_ipow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : (base == -1 ? ((e & 1) ? -1 : 1) : 0);
  int64_t r = 1;
  uint64_t b = static_cast<uint64_t>(base), acc = 1;
  while (e != 0) {
    if (e & 1) acc *= b;
    e >>= 1;
    b *= b;
  }
  r = static_cast<int64_t>(acc);  // wraps as the cpu backend's (unsigned arithmetic)
  return r;
}

// ---- the kinds: X(Kind, expression) in the kind lists' order ----
// Unary, float class (f32 and f64; integral inputs of float-math kinds arrive as f32).
// clang-format off
#define TW_KM_UNARY_FLOAT(X)                                          \
  X(Neg, -x) X(Abs, km_abs(x)) X(Exp, km_exp(x)) X(Log, km_log(x))     \
  X(Log1p, km_log1p(x)) X(Sqrt, km_sqrt(x)) X(Rsqrt, T(1) / km_sqrt(x)) \
  X(Sin, km_sin(x)) X(Cos, km_cos(x)) X(Tanh, km_tanh(x))              \
  X(Sigmoid, km_sigmoid(x)) X(Relu, (x < T(0) ? T(0) : x))             \
  X(Gelu, km_gelu(x)) X(Erf, km_erf(x)) X(Recip, T(1) / x)             \
  X(Floor, km_floor(x)) X(Ceil, km_ceil(x)) X(Round, km_rint(x))       \
  X(Sign, km_sign(x)) X(Square, x * x) X(LogicalNot, T(x == T(0)))
// Unary, integral class (i64; kinds that are the identity on integers keep x).
#define TW_KM_UNARY_INT(X)                                                    \
  X(Neg, -x) X(Abs, (x < 0 ? -x : x)) X(Exp, x) X(Log, x) X(Log1p, x)        \
  X(Sqrt, x) X(Rsqrt, x) X(Sin, x) X(Cos, x) X(Tanh, x) X(Sigmoid, x)         \
  X(Relu, (x < 0 ? int64_t(0) : x)) X(Gelu, x) X(Erf, x) X(Recip, x)          \
  X(Floor, x) X(Ceil, x) X(Round, x) X(Sign, int64_t((x > 0) - (x < 0)))       \
  X(Square, x * x) X(LogicalNot, int64_t(x == 0))
// Binary arithmetic kinds, float class; comparisons and logical kinds give bool (TW_KM_COMPARE).
#define TW_KM_BINARY_FLOAT(X)                                                        \
  X(Add, a + b) X(Sub, a - b) X(Mul, a * b) X(Div, a / b) X(Pow, km_pow(a, b))       \
  X(Maximum, km_max(a, b)) X(Minimum, km_min(a, b)) X(Remainder, km_remainder(a, b))  \
  X(Eq, T(a == b)) X(Ne, T(a != b)) X(Lt, T(a < b)) X(Le, T(a <= b)) X(Gt, T(a > b))   \
  X(Ge, T(a >= b)) X(LogicalAnd, T(a != T(0) && b != T(0)))                           \
  X(LogicalOr, T(a != T(0) || b != T(0))) X(LogicalXor, T((a != T(0)) != (b != T(0))))
// Binary kinds, integral class (i64, wrapping: computed unsigned where C++ would overflow).
// Remainder is refused on integers (a zero divisor is the cpu backend's error), so it is 0 here.
#define TW_KM_BINARY_INT(X)                                                                  \
  X(Add, int64_t(uint64_t(a) + uint64_t(b))) X(Sub, int64_t(uint64_t(a) - uint64_t(b)))      \
  X(Mul, int64_t(uint64_t(a) * uint64_t(b))) X(Div, (b == 0 ? int64_t(0) : a / b))           \
  X(Pow, km_ipow(a, b)) X(Maximum, (a > b ? a : b)) X(Minimum, (a < b ? a : b))              \
  X(Remainder, int64_t(0)) X(Eq, int64_t(a == b)) X(Ne, int64_t(a != b))                     \
  X(Lt, int64_t(a < b)) X(Le, int64_t(a <= b)) X(Gt, int64_t(a > b)) X(Ge, int64_t(a >= b))  \
  X(LogicalAnd, int64_t(a != 0 && b != 0)) X(LogicalOr, int64_t(a != 0 || b != 0))           \
  X(LogicalXor, int64_t((a != 0) != (b != 0)))
// clang-format on

// Each list names every kind of its IR list, in order: a kind added to op_kinds.h without its
// math here fails to compile.
namespace check {
#define TW_KM_POS(Name, ...) k##Name,
constexpr int32_t kUnaryFloat[] = {TW_KM_UNARY_FLOAT(TW_KM_POS)};
constexpr int32_t kUnaryInt[] = {TW_KM_UNARY_INT(TW_KM_POS)};
constexpr int32_t kBinaryFloat[] = {TW_KM_BINARY_FLOAT(TW_KM_POS)};
constexpr int32_t kBinaryInt[] = {TW_KM_BINARY_INT(TW_KM_POS)};
#undef TW_KM_POS
template <size_t N>
constexpr bool in_order(const int32_t (&v)[N], int32_t count) {
  if (static_cast<int32_t>(N) != count) return false;
  for (size_t i = 0; i < N; ++i) {
    if (v[i] != static_cast<int32_t>(i)) return false;
  }
  return true;
}
static_assert(in_order(kUnaryFloat, kUnaryCount), "TW_KM_UNARY_FLOAT must list every unary kind");
static_assert(in_order(kUnaryInt, kUnaryCount), "TW_KM_UNARY_INT must list every unary kind");
static_assert(in_order(kBinaryFloat, kBinaryCount), "TW_KM_BINARY_FLOAT: every binary kind");
static_assert(in_order(kBinaryInt, kBinaryCount), "TW_KM_BINARY_INT: every binary kind");
}  // namespace check

// The kinds as functions of a runtime kind (a GPU kernel's switch is uniform across a launch).
#define TW_KM_CASE_X(Name, expr) \
  case k##Name: return (expr);
template <class T>
TW_KM_HD T unary_float(int32_t kind, T x) {
  switch (kind) { TW_KM_UNARY_FLOAT(TW_KM_CASE_X) }
  return x;
}
TW_KM_HD int64_t unary_int(int32_t kind, int64_t x) {
  switch (kind) { TW_KM_UNARY_INT(TW_KM_CASE_X) }
  return x;
}
template <class T>
TW_KM_HD T binary_float(int32_t kind, T a, T b) {
  switch (kind) { TW_KM_BINARY_FLOAT(TW_KM_CASE_X) }
  return T(0);
}
TW_KM_HD int64_t binary_int(int32_t kind, int64_t a, int64_t b) {
  switch (kind) { TW_KM_BINARY_INT(TW_KM_CASE_X) }
  return 0;
}
#undef TW_KM_CASE_X
// Comparison and logical kinds (Eq and after) give bool, whatever the class.
TW_KM_HD bool is_comparison(int32_t kind) { return kind >= kEq; }

// The same entries as text, for a generator that renders them for another target (GLSL).
#define TW_KM_TEXT(Name, expr) {#Name, #expr},
struct KindText {
  const char* kind;
  const char* expr;
};
inline constexpr KindText kUnaryFloatText[] = {TW_KM_UNARY_FLOAT(TW_KM_TEXT)};
inline constexpr KindText kBinaryFloatText[] = {TW_KM_BINARY_FLOAT(TW_KM_TEXT)};
#undef TW_KM_TEXT

}  // namespace tw::kind_math
