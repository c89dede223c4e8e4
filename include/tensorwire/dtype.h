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
  kI8 = 8,    // signed 8-bit; with kU8 the element type of quantized tensors (docs/ops.md)
};
inline constexpr int kNumDTypes = 9;

inline constexpr DType kF32 = DType::kF32;
inline constexpr DType kF64 = DType::kF64;
inline constexpr DType kI32 = DType::kI32;
inline constexpr DType kI64 = DType::kI64;
inline constexpr DType kU8 = DType::kU8;
inline constexpr DType kBool = DType::kBool;
inline constexpr DType kF16 = DType::kF16;
inline constexpr DType kBF16 = DType::kBF16;
inline constexpr DType kI8 = DType::kI8;

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
    case DType::kI8: return 1;
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
    case DType::kI8: return "i8";
  }
  return "?";
}

constexpr bool is_float(DType d) {
  return d == DType::kF32 || d == DType::kF64 || d == DType::kF16 || d == DType::kBF16;
}
constexpr bool is_integral(DType d) {  // bool excluded
  return d == DType::kI32 || d == DType::kI64 || d == DType::kU8 || d == DType::kI8;
}
// Storage-only types take part in cast, upload/download and movement, not in arithmetic.
constexpr bool is_storage_only(DType d) { return d == DType::kF16 || d == DType::kBF16; }

constexpr bool dtype_valid(uint8_t v) { return v < kNumDTypes; }

// Block-quantized weight formats (ggml's Q8_0 and Q4_0; byte layout in docs/ops.md,
// "Quantization"). A packed tensor is a u8 tensor whose last dim holds whole blocks: a row of K
// values (K a multiple of kQuantBlock) packs into K / kQuantBlock * block_bytes(format) bytes.
// The values are part of the wire format: append only.
enum class BlockFormat : uint8_t {
  kQ8_0 = 0,  // per block: f16 scale d, then 32 i8 q; value = d * q
  kQ4_0 = 1,  // per block: f16 scale d, then 16 bytes of 4-bit q; value = d * (q - 8)
  kCount
};
inline constexpr int64_t kQuantBlock = 32;
constexpr int64_t block_bytes(BlockFormat f) { return f == BlockFormat::kQ8_0 ? 34 : 18; }
constexpr std::string_view block_format_name(BlockFormat f) {
  switch (f) {
    case BlockFormat::kQ8_0: return "q8_0";
    case BlockFormat::kQ4_0: return "q4_0";
    case BlockFormat::kCount: break;
  }
  return "?";
}

// Type promotion for two tensor operands: bool < u8, i8 < i32 < i64 < f32 < f64; u8 with i8
// gives i32 (PyTorch gives i16, which tensorwire does not have: i32 is the narrowest signed type
// holding both ranges).
constexpr int promotion_rank(DType d) {
  switch (d) {
    case DType::kBool: return 0;
    case DType::kU8: return 1;
    case DType::kI8: return 1;
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
  if ((a == DType::kU8 && b == DType::kI8) || (a == DType::kI8 && b == DType::kU8))
    return DType::kI32;
  return promotion_rank(a) >= promotion_rank(b) ? a : b;
}

}  // namespace tw
TW_API_END
