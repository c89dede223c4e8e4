// Every elementwise op through one shader (shaders/elementwise.comp): the op picks the family,
// kind, dtypes and compute class (specialisation constants), and the operands' strides against
// the output's shape (broadcasting, any view) go in the dispatch's parameter block.
#include <algorithm>
#include <cstring>

#include "backend/vulkan/kernels.h"
#include "ir/convert.h"
#include "ir/infer.h"

namespace tw::vk {
namespace {

constexpr int32_t kCastKind = -1;  // the unary family's cast (values converted)
constexpr int32_t kCopyKind = -2;  // the unary family's bit copy

void split64(uint64_t v, uint32_t& lo, uint32_t& hi) {
  lo = static_cast<uint32_t>(v);
  hi = static_cast<uint32_t>(v >> 32);
}

// A scalar attribute in dtype d by the Cast rules (ir/convert.h), in the slot the shader's
// class reads. `bound`: Clamp's rule (integer bounds saturate).
void set_scalar(EwParams& p, int slot, DType d, const ir::Scalar& s, bool bound) {
  float f = 0;
  double dd = 0;
  int64_t i = 0;
  auto to = [&](auto tag) {
    using T = decltype(tag);
    return bound ? ir::clamp_bound<T>(s) : ir::scalar_to<T>(s);
  };
  switch (d) {
    case kF32:
    case kF16:
    case kBF16: f = to(float{}); break;
    case kF64: dd = to(double{}); break;
    case kI32: i = to(int32_t{}); break;
    case kI64: i = to(int64_t{}); break;
    case kU8: i = to(uint8_t{}); break;
    case kI8: i = to(int8_t{}); break;
    case kBool: i = to(bool{}) ? 1 : 0; break;
  }
  uint64_t dbits, ibits = static_cast<uint64_t>(i);
  std::memcpy(&dbits, &dd, sizeof dd);
  uint32_t fbits;
  std::memcpy(&fbits, &f, sizeof f);
  if (slot == 0) {
    p.s0f = fbits;
    split64(dbits, p.s0d_lo, p.s0d_hi);
    split64(ibits, p.s0i_lo, p.s0i_hi);
  } else {
    p.s1f = fbits;
    split64(dbits, p.s1d_lo, p.s1d_hi);
    split64(ibits, p.s1i_lo, p.s1i_hi);
  }
}

}  // namespace

Result<VkTensor> Kernels::fresh(const TensorMeta& m) {
  VkTensor t;
  t.shape = m.shape;
  t.dtype = m.dtype;
  t.strides = contiguous_strides(m.shape);
  TW_ASSIGN_OR_RETURN(t.storage,
                      ctx_->alloc(static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype)));
  return t;
}

Result<int32_t> Kernels::cls_of(DType d, const std::string& op) const {
  switch (d) {
    case kF64:
      if (!ctx_->info().f64) {
        return unsupported_dtype(op, d, device_, "the device lacks shaderFloat64");
      }
      return kClsF64;
    case kF32:
    case kF16:
    case kBF16: return kClsF32;
    default: return kClsI64;
  }
}

Result<VkTensor> Kernels::elementwise(Ew ew, const std::vector<const VkTensor*>& inputs,
                                      const TensorMeta& m, const std::string& op) {
  const int64_t n = numel(m.shape);
  if (n >= (int64_t{1} << 31)) {
    return unimplemented(op + " of " + std::to_string(n) + " elements: not supported by the " +
                         device_ + " backend (at most 2^31 - 1 per dispatch)");
  }
  std::vector<Operand> operands;
  for (const VkTensor* t : inputs) operands.push_back(broadcast_operand(*t, m.shape));
  TW_ASSIGN_OR_RETURN(Indexing ix, merge_dims(m.shape, operands, op));
  EwParams& p = ew.params;
  p.n = static_cast<uint32_t>(n);
  p.rank = static_cast<uint32_t>(ix.shape.size());
  for (size_t d = 0; d < ix.shape.size(); ++d) {
    p.shape[d] = static_cast<uint32_t>(ix.shape[d]);
    if (inputs.size() > 0) p.sa[d] = static_cast<int32_t>(ix.strides[0][d]);
    if (inputs.size() > 1) p.sb[d] = static_cast<int32_t>(ix.strides[1][d]);
    if (inputs.size() > 2) p.sc[d] = static_cast<int32_t>(ix.strides[2][d]);
  }
  if (inputs.size() > 0) p.oa = static_cast<uint32_t>(inputs[0]->offset);
  if (inputs.size() > 1) p.ob = static_cast<uint32_t>(inputs[1]->offset);
  if (inputs.size() > 2) p.oc = static_cast<uint32_t>(inputs[2]->offset);
  auto dt = [&](size_t k) {
    return static_cast<int32_t>(k < inputs.size() ? inputs[k]->dtype : m.dtype);
  };
  bool f64 = ew.cls == kClsF64 || m.dtype == kF64;
  for (const VkTensor* t : inputs) f64 |= t->dtype == kF64;
  if (ew.kind == kCopyKind && ew.family == kEwUnary) f64 = false;  // bits only
  if (f64 && !ctx_->info().f64) {
    return unsupported_dtype(op, kF64, device_, "the device lacks shaderFloat64");
  }
  TW_ASSIGN_OR_RETURN(VkTensor out, fresh(m));
  if (n == 0) return out;
  p.dta = static_cast<uint32_t>(dt(0));
  p.dtb = static_cast<uint32_t>(dt(1));
  p.dtc = static_cast<uint32_t>(dt(2));
  const std::vector<int32_t> spec = {ew.family, ew.kind, static_cast<int32_t>(m.dtype), ew.cls,
                                     ew.scalar};
  std::vector<Binding> bindings = {{out.storage.get()}};
  for (const VkTensor* t : inputs) bindings.push_back({t->storage.get()});
  const uint32_t groups =
      static_cast<uint32_t>(std::min<int64_t>((n + kGroupSize - 1) / kGroupSize, 65535));
  // The shader's part (vulkan.cmake): 1 unary, casts and copies; 2 binary; 3 the rest.
  const int part = ew.family == kEwUnary ? 1 : (ew.family == kEwBinary ? 2 : 3);
  const std::string shader = "elementwise_" + std::to_string(part) + "_" + std::to_string(ew.cls);
  TW_RETURN_NOT_OK(ctx_->dispatch(shader, f64, spec, bindings, &p, sizeof p, groups));
  return out;
}

Result<VkTensor> Kernels::contiguous(const VkTensor& t) {
  Ew ew;
  ew.family = kEwUnary;
  ew.kind = kCopyKind;
  return elementwise(ew, {&t}, t.meta(), "contiguous copy");
}

Result<VkTensor> Kernels::run(const ir::FromHost& op) {
  TW_ASSIGN_OR_RETURN(VkTensor t, fresh(out_meta()));
  const uint64_t n = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
  if (op.data.data.size() != n) {
    return invalid_argument("from_host: " + std::to_string(op.data.data.size()) +
                            " bytes given for " + meta_str(out_meta()) + " (" + std::to_string(n) +
                            " bytes)");
  }
  TW_RETURN_NOT_OK(ctx_->upload(*t.storage, 0, op.data.data.data(), n));
  return t;
}

Result<VkTensor> Kernels::filled(const TensorMeta& m, DType dtype, const ir::Scalar& v) {
  Ew ew;
  ew.family = kEwFill;
  TW_ASSIGN_OR_RETURN(ew.cls, cls_of(dtype, "full"));
  set_scalar(ew.params, 0, dtype, v, false);
  return elementwise(ew, {}, m, "full");
}

Result<VkTensor> Kernels::run(const ir::Full& op) { return filled(out_meta(), op.dtype, op.value); }

Result<VkTensor> Kernels::run(const ir::Unary& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  const std::string name = std::string("unary ") + ir::kind_name(op.kind);
  Ew ew;
  ew.family = kEwUnary;
  ew.kind = static_cast<int32_t>(op.kind);
  const DType cd = ir::is_float_math(op.kind) ? out_meta().dtype : x->dtype;
  TW_ASSIGN_OR_RETURN(ew.cls, cls_of(cd, name));
  return elementwise(ew, {x}, out_meta(), name);
}

// An integer remainder's divisor is checked for zero first, as the cpu backend does (with its
// message): the divisor is read back, a sync.
Status Kernels::check_divisor(ir::BinaryKind k, int32_t cls, const VkTensor& divisor,
                              const std::string& name) {
  if (k != ir::BinaryKind::kRemainder || cls != kClsI64 || numel(out_meta().shape) == 0) {
    return Status::OK();
  }
  TW_ASSIGN_OR_RETURN(std::vector<int64_t> v, index_values(divisor));
  for (int64_t x : v) {
    if (x == 0) {
      return invalid_argument(name + ": integer remainder by zero (the divisor " +
                              meta_str(divisor.meta()) + " holds a 0); use a float dtype for NaN");
    }
  }
  return Status::OK();
}

Result<VkTensor> Kernels::run(const ir::Binary& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* a, in(op.a));
  TW_ASSIGN_OR_RETURN(const VkTensor* b, in(op.b));
  const std::string name = std::string("binary ") + ir::kind_name(op.kind);
  const DType cd = ir::binary_compute_dtype(op.kind, a->dtype, b->dtype);
  Ew ew;
  ew.family = kEwBinary;
  ew.kind = static_cast<int32_t>(op.kind);
  TW_ASSIGN_OR_RETURN(ew.cls, cls_of(cd, name));
  TW_RETURN_NOT_OK(check_divisor(op.kind, ew.cls, *b, ir::kind_name(op.kind)));
  return elementwise(ew, {a, b}, out_meta(), name);
}

Result<VkTensor> Kernels::run(const ir::BinaryScalar& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* a, in(op.a));
  const std::string name = std::string(ir::kind_name(op.kind)) + "_scalar";
  const DType cd = ir::binary_scalar_compute_dtype(op.kind, a->dtype, op.s.is_float);
  Ew ew;
  ew.family = kEwBinary;
  ew.kind = static_cast<int32_t>(op.kind);
  ew.scalar = op.reverse ? 2 : 1;
  TW_ASSIGN_OR_RETURN(ew.cls, cls_of(cd, name));
  set_scalar(ew.params, 0, cd, op.s, false);
  if (op.kind == ir::BinaryKind::kRemainder && ew.cls == kClsI64 && a->numel() > 0) {
    if (op.reverse) {
      TW_RETURN_NOT_OK(check_divisor(op.kind, ew.cls, *a, name));
    } else if (ew.params.s0i_lo == 0 && ew.params.s0i_hi == 0) {
      return invalid_argument(name + ": integer remainder by zero (the scalar is 0)");
    }
  }
  // The tensor is read at binding 1 (a) or, with the scalar on the left, 2 (b).
  return elementwise(ew, {a, a}, out_meta(), name);
}

Result<VkTensor> Kernels::run(const ir::Where& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* c, in(op.cond));
  TW_ASSIGN_OR_RETURN(const VkTensor* a, in(op.a));
  TW_ASSIGN_OR_RETURN(const VkTensor* b, in(op.b));
  Ew ew;
  ew.family = kEwWhere;
  TW_ASSIGN_OR_RETURN(ew.cls, cls_of(out_meta().dtype, "where"));
  return elementwise(ew, {c, a, b}, out_meta(), "where");
}

Result<VkTensor> Kernels::run(const ir::Clamp& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  Ew ew;
  ew.family = kEwClamp;
  ew.kind = (op.has_lo ? 1 : 0) | (op.has_hi ? 2 : 0);
  TW_ASSIGN_OR_RETURN(ew.cls, cls_of(x->dtype, "clamp"));
  set_scalar(ew.params, 0, x->dtype, op.lo, true);
  set_scalar(ew.params, 1, x->dtype, op.hi, true);
  return elementwise(ew, {x}, out_meta(), "clamp");
}

Result<VkTensor> Kernels::run(const ir::MaskedFill& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const VkTensor* mask, in(op.mask));
  Ew ew;
  ew.family = kEwMaskedFill;
  TW_ASSIGN_OR_RETURN(ew.cls, cls_of(x->dtype, "masked_fill"));
  set_scalar(ew.params, 0, x->dtype, op.value, false);
  return elementwise(ew, {x, mask}, out_meta(), "masked_fill");
}

Result<VkTensor> Kernels::run(const ir::GeluBackward& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* g, in(op.grad));
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  Ew ew;
  ew.family = kEwGeluBackward;
  TW_ASSIGN_OR_RETURN(ew.cls, cls_of(x->dtype, "gelu_backward"));
  if (ew.cls == kClsI64)
    return unsupported_dtype("gelu_backward", x->dtype, device_, "float dtypes only");
  return elementwise(ew, {g, x}, out_meta(), "gelu_backward");
}

Result<VkTensor> Kernels::run(const ir::Cast& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  Ew ew;
  ew.family = kEwUnary;
  if (x->dtype == op.dtype) {
    ew.kind = kCopyKind;
  } else {
    ew.kind = kCastKind;
    TW_ASSIGN_OR_RETURN(ew.cls, cls_of(x->dtype, "cast"));
  }
  return elementwise(ew, {x}, out_meta(), "cast");
}

}  // namespace tw::vk
