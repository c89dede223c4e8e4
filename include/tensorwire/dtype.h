// Element types. The numeric values are part of the wire format: append only, never renumber.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tensorwire/export.h"

TW_API_BEGIN

namespace tw {

enum class DType : uint8_t {
  kF32 = 0,
  kF64 = 1,
  kI32 = 2,
  kI64 = 3,
  kU8 = 4,
  kBool = 5,
  kF16 = 6,   // storage only: cast, upload, download and movement ops; compute through f32
  kBF16 = 7,  // storage only, as kF16
};
inline constexpr int kNumDTypes = 8;

inline constexpr DType kF32 = DType::kF32;
inline constexpr DType kF64 = DType::kF64;
inline constexpr DType kI32 = DType::kI32;
inline constexpr DType kI64 = DType::kI64;
inline constexpr DType kU8 = DType::kU8;
inline constexpr DType kBool = DType::kBool;
inline constexpr DType kF16 = DType::kF16;
inline constexpr DType kBF16 = DType::kBF16;

constexpr size_t dtype_size(DType d) {
  switch (d) {
    case DType::kF32: return 4;
    case DType::kF64: return 8;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    case DType::kBool: return 1;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kBool: return "bool";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
  }
  return "?";
}

constexpr bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}
constexpr bool is_integral(DType d) {  // bool excluded
  return d == DType::kI32 || d == DType::kI64 || d == DType::kU8;
}
// Storage-only types take part in cast, upload/download and movement, not in arithmetic.
constexpr bool is_storage_only(DType d) { return d == DType::kF16 || d == DType::kBF16; }

constexpr bool dtype_valid(uint8_t v) { return v < kNumDTypes; }

// Type promotion for two tensor operands: bool < u8 < i32 < i64 < f32 < f64.
constexpr int promotion_rank(DType d) {
  switch (d) {
    case DType::kBool: return 0;
    case DType::kU8: return 1;
    case DType::kI32: return 2;
    case DType::kI64: return 3;
    case DType::kF16: return 4;
    case DType::kBF16: return 4;
    case DType::kF32: return 5;
    case DType::kF64: return 6;
  }
  return 0;
}
constexpr DType promote(DType a, DType b) {
  if (a == b) return a;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

}  // namespace tw
TW_API_END
