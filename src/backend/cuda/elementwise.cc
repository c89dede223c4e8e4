// Every elementwise op through one kernel (kernels.cu, per compute class): the op picks the
// family, kind, dtypes and class; the operands' strides against the output's shape (broadcasts,
// any view) go in the launch's argument block (plan.h). Uploads (FromHost) copy through pinned
// staging.
#include <cstring>

#include "backend/cuda/kernels.h"
#include "ir/convert.h"
#include "ir/infer.h"

namespace tw::cuda {
namespace {

// A scalar attribute in dtype d by the Cast rules (ir/convert.h), for each class's slot.
// `bound`: Clamp's rule (integer bounds saturate).
ScalarArg scalar_arg(DType d, const ir::Scalar& s, bool bound) {
  auto to = [&](auto tag) {
    using T = decltype(tag);
    return bound ? ir::clamp_bound<T>(s) : ir::scalar_to<T>(s);
  };
  ScalarArg a;
  switch (d) {
    case kF32:
    case kF16:
    case kBF16: a.f = to(float{}); break;
    case kF64: a.d = to(double{}); break;
    case kI32: a.i = to(int32_t{}); break;
    case kI64: a.i = to(int64_t{}); break;
    case kU8: a.i = to(uint8_t{}); break;
    case kI8: a.i = to(int8_t{}); break;
    case kBool: a.i = to(bool{}) ? 1 : 0; break;
  }
  return a;
}

}  // namespace

int32_t Kernels::cls_of(DType d) {
  switch (d) {
    case kF64: return kClsF64;
    case kF32:
    case kF16:
    case kBF16: return kClsF32;
    default: return kClsI64;
  }
}

Result<CuTensor> Kernels::fresh(const TensorMeta& m) {
  CuTensor t;
  t.shape = m.shape;
  t.dtype = m.dtype;
  t.strides = strided::contiguous_strides(m.shape);
  const uint64_t bytes = static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
  if (bytes == 0) return t;
  auto block = std::make_shared<DeviceBlock>();
  block->stream = ex_->stream;
  block->size = bytes;
  GraphArena* arena = ex_->arena.get();
  if (arena && arena->serving) {
    // Inside a capture: the block the recording run's allocation got (capture_plan.h).
    std::optional<size_t> i = arena->planner.serve(bytes);
    if (!i) {
      if (!arena->missed) arena->missed = bytes;
      return resource_exhausted(device_ + ": " + meta_str(m) + " (" + std::to_string(bytes) +
                                " bytes) asked of a CUDA Graph's buffers that the graph's "
                                "recording run did not allocate");
    }
    block->ptr = arena->blocks[*i];
    block->pooled = false;
    block->arena_block = *i;
  } else {
    TW_RETURN_NOT_OK(ex_->dev->check(
        cudaMallocFromPoolAsync(&block->ptr, bytes, ex_->dev->pool(), ex_->stream->s),
        "allocating " + std::to_string(bytes) + " bytes for " + meta_str(m)));
    if (arena) block->arena_block = arena->planner.record(bytes);
  }
  if (arena) {
    block->arena = ex_->arena;
    block->arena_generation = arena->planner.generation();
  }
  t.storage = std::move(block);
  return t;
}

Status Kernels::launched(int err, const std::string& op) {
  ex_->count_dispatch();
  ex_->last_op = op;
  return ex_->dev->check(static_cast<cudaError_t>(err), op + " (kernel launch)");
}

Result<CuTensor> Kernels::elementwise(EwArgs proto, const std::vector<const CuTensor*>& inputs,
                                      const TensorMeta& m, const std::string& op) {
  std::vector<View> views;
  for (const CuTensor* t : inputs) views.push_back(*t);
  TW_ASSIGN_OR_RETURN(EwArgs a, elementwise_args(m.shape, m.dtype, views, op, device_));
  a.family = proto.family;
  a.kind = proto.kind;
  a.cls = proto.cls;
  a.scalar = proto.scalar;
  a.s0 = proto.s0;
  a.s1 = proto.s1;
  for (size_t k = 0; k < inputs.size(); ++k) a.in[k] = inputs[k]->data();
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(m));
  if (a.n == 0) return out;
  a.out = out.storage->ptr;
  TW_RETURN_NOT_OK(launched(launch_elementwise(a, ex_->stream->s), op));
  return out;
}

Result<CuTensor> Kernels::contiguous(const CuTensor& t) {
  EwArgs a;
  a.family = kEwUnary;
  a.kind = kCopyKind;
  return elementwise(a, {&t}, t.meta(), "contiguous copy");
}

Result<const CuTensor*> Kernels::dense(const CuTensor& t, CuTensor& keep) {
  if (t.contiguous() && t.offset == 0) return &t;
  TW_ASSIGN_OR_RETURN(keep, contiguous(t));
  return &keep;
}

Result<CuTensor> Kernels::run(const ir::FromHost& op) {
  TW_ASSIGN_OR_RETURN(CuTensor t, fresh(out_meta()));
  const uint64_t n = static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
  if (op.data.data.size() != n) {
    return invalid_argument("from_host: " + std::to_string(op.data.data.size()) +
                            " bytes given for " + meta_str(out_meta()) + " (" + std::to_string(n) +
                            " bytes)");
  }
  if (n == 0) return t;
  Device* dev = ex_->dev;
  cudaStream_t s = ex_->stream->s;
  // Through pinned staging, released (back to the pool) by the stream once the copy is done.
  std::shared_ptr<void> staging;
  if (CaptureHost* c = ex_->capture) {
    // Taken before the capture (else now), and kept with the CUDA Graph.
    if (c->next == c->staging.size()) {
      TW_ASSIGN_OR_RETURN(std::shared_ptr<void> more, dev->pinned(n));
      c->staging.push_back(std::move(more));
    }
    staging = c->staging[c->next++];
  } else {
    TW_ASSIGN_OR_RETURN(staging, dev->pinned(n));
  }
  std::memcpy(staging.get(), op.data.data.data(), n);
  TW_RETURN_NOT_OK(dev->check(
      cudaMemcpyAsync(t.storage->ptr, staging.get(), n, cudaMemcpyHostToDevice, s), "upload"));
  if (ex_->capture) {
    ex_->last_op = "from_host";
    return t;  // the graph holds the staging, whose bytes every launch copies again
  }
  auto* hold = new std::shared_ptr<void>(std::move(staging));
  const cudaError_t err = cudaLaunchHostFunc(
      s, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); }, hold);
  if (err != cudaSuccess) {
    (void)cudaStreamSynchronize(s);  // the copy must finish before the staging goes back
    delete hold;
    TW_RETURN_NOT_OK(dev->check(err, "upload (cudaLaunchHostFunc)"));
  }
  ex_->last_op = "from_host";
  return t;
}

Result<CuTensor> Kernels::run(const ir::Full& op) {
  EwArgs a;
  a.family = kEwFill;
  a.cls = cls_of(op.dtype);
  a.s0 = scalar_arg(op.dtype, op.value, false);
  return elementwise(a, {}, out_meta(), "full");
}

Result<CuTensor> Kernels::run(const ir::Arange& op) {
  // As the cpu backend: integers exactly (start + i * step, wrapping, then narrowed); else
  // fma(i, step, start) in double, converted to the dtype.
  EwArgs a;
  a.family = kEwIota;
  a.kind = 0;
  if (is_integral(op.dtype) && !op.start.is_float && !op.step.is_float) {
    a.cls = kClsI64;
    a.s0.i = op.start.i;
    a.s1.i = op.step.i;
  } else {
    a.cls = kClsF64;
    a.s0.d = op.start.as_double();
    a.s1.d = op.step.as_double();
  }
  return elementwise(a, {}, out_meta(), "arange");
}

Result<CuTensor> Kernels::run(const ir::Eye& op) {
  EwArgs a;
  a.family = kEwIota;
  a.kind = 1;
  a.cls = cls_of(op.dtype);
  const TensorMeta& m = out_meta();
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(m));
  if (out.numel() == 0) return out;
  a.n = out.numel();
  a.rank = 2;
  a.shape[0] = op.n;
  a.shape[1] = op.m;
  a.out = out.storage->ptr;
  a.out_dtype = static_cast<int32_t>(m.dtype);
  const Launch l = launch_1d(a.n);
  a.grid = l.grid;
  a.block = l.block;
  TW_RETURN_NOT_OK(launched(launch_elementwise(a, ex_->stream->s), "eye"));
  return out;
}

Result<CuTensor> Kernels::run(const ir::Unary& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  EwArgs a;
  a.family = kEwUnary;
  a.kind = static_cast<int32_t>(op.kind);
  a.cls = cls_of(ir::is_float_math(op.kind) ? out_meta().dtype : x->dtype);
  return elementwise(a, {x}, out_meta(), std::string("unary ") + ir::kind_name(op.kind));
}

namespace {
// An integer remainder checks its divisors for zero first on the cpu backend (an error); a
// kernel cannot report that per element, so it is refused here.
Status check_binary(ir::BinaryKind k, DType cd, const std::string& name,
                    const std::string& device) {
  if (!is_float(cd) && k == ir::BinaryKind::kRemainder) {
    return unsupported_dtype(name, cd, device,
                             "an integer remainder checks its divisors for zero first, which "
                             "this backend does not do on the device yet");
  }
  return Status::OK();
}
}  // namespace

Result<CuTensor> Kernels::run(const ir::Binary& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.a));
  TW_ASSIGN_OR_RETURN(const CuTensor* y, in(op.b));
  const std::string name = std::string("binary ") + ir::kind_name(op.kind);
  const DType cd = ir::binary_compute_dtype(op.kind, x->dtype, y->dtype);
  TW_RETURN_NOT_OK(check_binary(op.kind, cd, name, device_));
  EwArgs a;
  a.family = kEwBinary;
  a.kind = static_cast<int32_t>(op.kind);
  a.cls = cls_of(cd);
  return elementwise(a, {x, y}, out_meta(), name);
}

Result<CuTensor> Kernels::run(const ir::BinaryScalar& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.a));
  const std::string name = std::string(ir::kind_name(op.kind)) + "_scalar";
  const DType cd = ir::binary_scalar_compute_dtype(op.kind, x->dtype, op.s.is_float);
  TW_RETURN_NOT_OK(check_binary(op.kind, cd, name, device_));
  EwArgs a;
  a.family = kEwBinary;
  a.kind = static_cast<int32_t>(op.kind);
  a.cls = cls_of(cd);
  a.scalar = op.reverse ? 2 : 1;
  a.s0 = scalar_arg(cd, op.s, false);
  // The tensor is read as operand 0 (x op s) or 1 (s op x).
  return elementwise(a, {x, x}, out_meta(), name);
}

Result<CuTensor> Kernels::run(const ir::Where& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* c, in(op.cond));
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.a));
  TW_ASSIGN_OR_RETURN(const CuTensor* y, in(op.b));
  EwArgs a;
  a.family = kEwWhere;
  a.cls = cls_of(out_meta().dtype);
  return elementwise(a, {c, x, y}, out_meta(), "where");
}

Result<CuTensor> Kernels::run(const ir::Clamp& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  EwArgs a;
  a.family = kEwClamp;
  a.kind = (op.has_lo ? 1 : 0) | (op.has_hi ? 2 : 0);
  a.cls = cls_of(x->dtype);
  a.s0 = scalar_arg(x->dtype, op.lo, true);
  a.s1 = scalar_arg(x->dtype, op.hi, true);
  return elementwise(a, {x}, out_meta(), "clamp");
}

Result<CuTensor> Kernels::run(const ir::MaskedFill& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const CuTensor* mask, in(op.mask));
  EwArgs a;
  a.family = kEwMaskedFill;
  a.cls = cls_of(x->dtype);
  a.s0 = scalar_arg(x->dtype, op.value, false);
  return elementwise(a, {x, mask}, out_meta(), "masked_fill");
}

Result<CuTensor> Kernels::run(const ir::Cast& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  EwArgs a;
  a.family = kEwUnary;
  a.kind = x->dtype == op.dtype ? kCopyKind : kCastKind;
  a.cls = cls_of(x->dtype);
  return elementwise(a, {x}, out_meta(), "cast");
}

}  // namespace tw::cuda
