// TensorData: a contiguous, row-major host tensor (bytes + shape + dtype) with typed access.
// What reads return and what uploads take.
#pragma once
#include <cstring>
#include <span>
#include <string>

#include "core/buffer.h"
#include "core/shape.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return kF32;
}
template <>
constexpr DType dtype_of<double>() {
  return kF64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return kI32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return kI64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return kU8;
}
template <>
constexpr DType dtype_of<int8_t>() {
  return kI8;
}
template <>
constexpr DType dtype_of<bool>() {
  return kBool;
}

struct TensorData {
  TensorMeta meta;
  Buffer bytes;  // numel * dtype_size bytes, little-endian, row-major

  int64_t numel() const { return tw::numel(meta.shape); }
  // The elements in place: the bytes must be aligned for T (a backend's are; bytes decoded from
  // a frame may not be: use value()).
  template <class T>
  std::span<const T> values() const {
    return {bytes.as<const T>(), static_cast<size_t>(numel())};
  }
  // Element i, wherever the bytes lie.
  template <class T>
  T value(size_t i) const {
    T v;
    std::memcpy(&v, bytes.data() + i * sizeof(T), sizeof(T));
    return v;
  }
  // Copies `values` into a new TensorData of the given shape.
  template <class T>
  static TensorData from(const Shape& shape, std::span<const T> values) {
    TensorData d;
    d.meta = {shape, dtype_of<T>()};
    d.bytes = Buffer::copy_of(values.data(), values.size() * sizeof(T));
    return d;
  }
};

}  // namespace tw
TW_INTERNAL_END
