// Internal to the torch backend (only its .cc files include it: ATen is heavy to compile): one
// kernel per op of the IR, each returning the op's output as an at::Tensor, and the helpers that
// map tensorwire's semantics (docs/ops.md) onto ATen's where the two differ.
//
// Kernels may assume ir::infer accepted the op. They compute with ATen and bring the result to
// the inferred dtype; the executor (torch_backend.cc) checks that shape and dtype match the
// inferred meta, so a kernel that disagrees with inference fails its op instead of corrupting
// the table.
#pragma once
#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <unordered_map>

#include "core/status.h"
#include "ir/ops.h"

namespace tw::torch {

at::ScalarType scalar_type(DType d);
at::TensorOptions options(DType d);
Result<DType> dtype_of(at::ScalarType t);
TensorMeta meta_of(const at::Tensor& t);
std::vector<int64_t> sizes(const Shape& s);

// A contiguous tensor over `bytes` (no copy); it keeps the buffer's storage alive.
at::Tensor tensor_over(Buffer bytes, const TensorMeta& meta);
// The bytes of a contiguous tensor as a Buffer: its pooled storage, sliced, when it has one
// (every tensor ATen allocates does, see torch_backend.cc), else a copy.
Buffer buffer_of(const at::Tensor& contiguous);

// Runs ops on the host with tensorwire's own CPU kernels: the random ops, whose values come from
// tensorwire's counter-based generator (core/philox.h), so that a seed gives the same tensor on
// every backend; and the quantization ops, whose rounding and block layouts (docs/ops.md) ATen's
// quantized kernels do not share. Inputs and results cross without a copy when their storage is
// pooled.
class HostRunner {
 public:
  virtual ~HostRunner() = default;
  // An input of the next op run(): its id in the host backend.
  virtual ir::In put(const at::Tensor& t) = 0;
  virtual ir::Out fresh() = 0;
  // Runs a single-output op whose ids come from put() and fresh(); forgets every id afterwards.
  virtual Result<at::Tensor> run(const ir::Op& op) = 0;
};

// What a kernel sees: its inputs by id, the inferred meta of its (first) output, and the host
// runner.
class Ctx {
 public:
  Ctx(TensorMeta out, HostRunner& host) : out_(std::move(out)), host_(host) {}
  void add_input(ir::TensorId id, at::Tensor t) { inputs_.emplace(id, std::move(t)); }
  bool has(ir::In in) const { return in.id != 0 && inputs_.count(in.id) != 0; }
  const at::Tensor& in(ir::In in) const { return inputs_.at(in.id); }
  const TensorMeta& out() const { return out_; }
  HostRunner& host() const { return host_; }

 private:
  std::unordered_map<ir::TensorId, at::Tensor> inputs_;
  TensorMeta out_;
  HostRunner& host_;
};

// The kernel of an op with several outputs returns them all, in op_outputs order.
template <class Op>
struct TorchKernelResult {
  using type = Result<at::Tensor>;
};
template <>
struct TorchKernelResult<ir::AdamStep> {
  using type = Result<std::vector<at::Tensor>>;
};
template <>
struct TorchKernelResult<ir::ScaledDotProductAttentionBackward> {
  using type = Result<std::vector<at::Tensor>>;
};
template <>
struct TorchKernelResult<ir::LayerNormBackward> {
  using type = Result<std::vector<at::Tensor>>;
};
#define TW_DECLARE_TORCH_KERNEL(Name, code, since) \
  TorchKernelResult<ir::Name>::type run(const ir::Name& op, const Ctx& ctx);
TW_OP_LIST(TW_DECLARE_TORCH_KERNEL)
#undef TW_DECLARE_TORCH_KERNEL

// ---- helpers shared by the kernel files ----

// x converted to `to` by the Cast rules of docs/ops.md (x itself when it has that dtype already):
// float -> integral truncates toward zero with NaN -> 0 and saturation (ATen's conversion is
// undefined there); f64 -> f16/bf16 goes through f32; narrowing integers wrap.
at::Tensor cast(const at::Tensor& x, DType to);
// A 0-d tensor of dtype `d` holding the scalar converted by the Cast rules.
at::Tensor scalar_tensor(const ir::Scalar& s, DType d);
// The scalar converted to dtype `d` (a compute dtype) by the Cast rules, as an ATen Scalar.
at::Scalar scalar_in(const ir::Scalar& s, DType d);
// A Clamp bound (integer bounds saturate to d's range; float bounds convert as Cast does).
at::Scalar clamp_bound_in(const ir::Scalar& s, DType d);

// The first element (row-major) of an integer tensor outside [-limit, limit) (outside [0, limit)
// when !negatives), if any.
struct BadIndex {
  int64_t pos = -1;
  int64_t value = 0;
};
BadIndex find_bad_index(const at::Tensor& index, int64_t limit, bool negatives = true);
// A checked index as i64 with its negative values counted from the end (+ size), as ATen's
// gather, scatter and index kernels take only [0, size).
at::Tensor wrap_index(const at::Tensor& index, int64_t size);

}  // namespace tw::torch
