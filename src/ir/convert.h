// The Cast rules of docs/ops.md on single values: f16/bf16 storage types, the conversion of one
// element from any dtype's C++ type to another's, and the conversion of an op's scalar attribute
// (and of a Clamp bound) to a dtype. Every backend converts by these, so a cast, a fill or a
// scalar operand gives the same bits on each (the cpu kernels, and the torch backend where ATen's
// own conversion differs). Values only: no tensors here.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/half.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::ir {

// Storage-only element types: the bits of an IEEE binary16 / bfloat16 value.
struct Half {
  uint16_t bits;
};
struct BFloat16 {
  uint16_t bits;
};

template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<From, Half>) {
    return convert<To>(f16_to_f32(v.bits));
  } else if constexpr (std::is_same_v<From, BFloat16>) {
    return convert<To>(bf16_to_f32(v.bits));
  } else if constexpr (std::is_same_v<To, Half>) {
    return Half{f32_to_f16(static_cast<float>(v))};  // f64 and integers go through f32
  } else if constexpr (std::is_same_v<To, BFloat16>) {
    return BFloat16{f32_to_bf16(static_cast<float>(v))};
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);  // NaN -> true
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    return float_to_int<To>(static_cast<double>(v));  // the Cast rule (ops.h)
  } else {
    return static_cast<To>(v);  // integral narrowing wraps (C++20 modular conversion)
  }
}

// A scalar attribute in dtype T by the same rules (an integer scalar converts exactly, as an
// int64).
template <class T>
inline T scalar_to(const Scalar& s) {
  return s.is_float ? convert<T>(s.f) : convert<T>(s.i);
}

// A Clamp bound in x's dtype. Float bounds convert as Cast does (truncation toward zero,
// saturating); integer bounds saturate too rather than wrap, so clamping a u8 tensor to
// [-1, 300] leaves it unchanged, as the mathematical clamp does.
template <class T>
T clamp_bound(const Scalar& s) {
  if constexpr (std::is_integral_v<T>) {
    if (!s.is_float) {
      using L = std::numeric_limits<T>;
      return static_cast<T>(std::clamp<int64_t>(s.i, L::min(), L::max()));
    }
  }
  return scalar_to<T>(s);
}

}  // namespace tw::ir
TW_INTERNAL_END
