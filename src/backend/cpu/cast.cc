// Cast: any dtype to any dtype by the rules in docs/ops.md (implemented by convert<> in
// ir/convert.h), and cast_tensor, which the other kernels use to bring an operand to their
// compute dtype.
#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"

namespace tw::cpu {
namespace {

template <class From, class To>
void cast_into(const CpuTensor& x, To* out) {
  map_unary<From, To>(x, out, kElementwiseGrain, [](const From* in, To* o, int64_t n) {
    for (int64_t i = 0; i < n; ++i) o[i] = convert<To>(in[i]);
  });
}

void cast_into(const CpuTensor& x, CpuTensor& out) {
  // Every (from, to) pair is valid; the dispatch cannot fail.
  (void)visit_dtype(x.dtype, "cast", [&](auto from) {
    using From = typename decltype(from)::type;
    return visit_dtype(out.dtype, "cast", [&](auto to) {
      using To = typename decltype(to)::type;
      cast_into<From, To>(x, out.data<To>());
      return Status::OK();
    });
  });
}

}  // namespace

CpuTensor cast_tensor(const CpuTensor& t, DType to) {
  if (t.dtype == to) return t;
  CpuTensor out = alloc_tensor({t.shape, to});
  cast_into(t, out);
  return out;
}

Status run(const ir::Cast& op, KernelContext& ctx) {
  const CpuTensor& x = ctx.in(op.x);
  TW_RETURN_NOT_OK(check_out_dtype("cast", ctx.meta(op.out), op.dtype));
  // Casting to the same dtype changes nothing; tensors are immutable, so share the storage.
  if (x.dtype == op.dtype) return ctx.set_view(op.out, x);
  cast_into(x, ctx.alloc(op.out));
  return Status::OK();
}

}  // namespace tw::cpu
