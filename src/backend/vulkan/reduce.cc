// Reduce (sum, mean, prod, max, min, argmax, argmin) through one shader, shaders/reduce.comp:
// the kind, dtypes and accumulation class are specialisation constants; the kept and reduced
// dims of the input (any view) go in the parameter block as strides.
#include <algorithm>

#include "backend/vulkan/kernels.h"

namespace tw::vk {

Result<VkTensor> Kernels::run(const ir::Reduce& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  const std::string name = std::string("reduce ") + ir::kind_name(op.kind);
  const TensorMeta& m = out_meta();
  const size_t rank = x->shape.size();
  std::vector<bool> reduced(rank, op.dims.empty());
  for (int64_t d : op.dims) {  // (a 0-d tensor's dim 0 or -1 names the tensor itself)
    if (rank > 0) reduced[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(rank) : d)] = true;
  }
  Shape kept_shape, red_shape;
  std::vector<int64_t> kept_strides, red_strides;
  for (size_t d = 0; d < rank; ++d) {
    (reduced[d] ? red_shape : kept_shape).push_back(x->shape[d]);
    (reduced[d] ? red_strides : kept_strides).push_back(x->strides[d]);
  }
  TW_ASSIGN_OR_RETURN(Indexing k, merge_dims(kept_shape, {Operand{x, kept_strides}}, name));
  TW_ASSIGN_OR_RETURN(Indexing r, merge_dims(red_shape, {Operand{x, red_strides}}, name));
  const int64_t n_out = numel(kept_shape), n_red = numel(red_shape);
  if (n_out >= (int64_t{1} << 31) || n_red >= (int64_t{1} << 31)) {
    return unimplemented(name + " of " + meta_str(x->meta()) + ": not supported by the " +
                         device() + " backend (at most 2^31 - 1 elements per dispatch)");
  }
  // Integral means accumulate in double (as the cpu backend's); other kinds in the dtype's class.
  int32_t cls;
  if (op.kind == ir::ReduceKind::kMean && !is_float(x->dtype)) {
    if (!ctx_->info().f64) {
      return unsupported_dtype(name, x->dtype, device(),
                               "an integral mean accumulates in double; the device lacks "
                               "shaderFloat64");
    }
    cls = kClsF64;
  } else {
    TW_ASSIGN_OR_RETURN(cls, cls_of(x->dtype, name));
  }
  ReduceParams p;
  p.n_out = static_cast<uint32_t>(n_out);
  p.n_red = static_cast<uint32_t>(n_red);
  p.kept_rank = static_cast<uint32_t>(k.shape.size());
  p.red_rank = static_cast<uint32_t>(r.shape.size());
  for (size_t d = 0; d < k.shape.size(); ++d) {
    p.kshape[d] = static_cast<uint32_t>(k.shape[d]);
    p.kstride[d] = static_cast<int32_t>(k.strides[0][d]);
  }
  for (size_t d = 0; d < r.shape.size(); ++d) {
    p.rshape[d] = static_cast<uint32_t>(r.shape[d]);
    p.rstride[d] = static_cast<int32_t>(r.strides[0][d]);
  }
  p.offset = static_cast<uint32_t>(x->offset);
  TW_ASSIGN_OR_RETURN(VkTensor out, fresh(m));
  if (n_out == 0) return out;
  const bool f64 = cls == kClsF64 || x->dtype == kF64 || m.dtype == kF64;
  const std::vector<int32_t> spec = {static_cast<int32_t>(op.kind), static_cast<int32_t>(x->dtype),
                                     static_cast<int32_t>(m.dtype), cls};
  const uint32_t groups = static_cast<uint32_t>(std::min<int64_t>(n_out, 65535));
  TW_RETURN_NOT_OK(ctx_->dispatch("reduce", f64, spec, {{out.storage.get()}, {x->storage.get()}},
                                  &p, sizeof p, groups));
  return out;
}

}  // namespace tw::vk
