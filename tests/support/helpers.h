// Small helpers several test files share (unit and integration): a substring check, the ops
// that hand-built batches and graphs use most, the message a failed read gives, and a check
// that a device still computes right while other clients misbehave.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "ir/ops.h"
#include "tensorwire/tensorwire.h"

namespace tw::testing {

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// ---- single ops, for hand-built batches and graphs ----
inline ir::Op full_op(ir::TensorId out, Shape shape, DType dtype, ir::Scalar value) {
  return ir::Full{.out = {out}, .shape = std::move(shape), .dtype = dtype, .value = value};
}

inline ir::Op unary(ir::UnaryKind kind, ir::TensorId x, ir::TensorId out) {
  return ir::Unary{.kind = kind, .x = {x}, .out = {out}};
}

inline ir::Op binary(ir::BinaryKind kind, ir::TensorId a, ir::TensorId b, ir::TensorId out) {
  return ir::Binary{.kind = kind, .a = {a}, .b = {b}, .out = {out}};
}

inline ir::Op matmul(ir::TensorId a, ir::TensorId b, ir::TensorId out) {
  return ir::MatMul{.a = {a}, .b = {b}, .out = {out}};
}

// ---- through the Tensor API ----
// What reading `t` throws; "(no error)" when the read succeeds.
inline std::string read_error(const Tensor& t) {
  try {
    (void)t.to_bytes();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A well-behaved client's work on a server; its answer must stay right whatever the others do.
inline void expect_healthy(const Device& d, int64_t k) {
  Tensor x = arange(0, 100, 1, std::nullopt, d);  // i64
  EXPECT_EQ((x + k).sum().item<int64_t>(), 4950 + 100 * k) << "the well-behaved client broke";
}

}  // namespace tw::testing
