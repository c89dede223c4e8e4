// Softmax, log_softmax and layer_norm through one shader (shaders/rows.comp): a workgroup per
// row. f32 compute (f16 and bf16 as storage) in rows_0, f64 in rows_1 (the shader built with
// math64.glsl's exp and log).
#include <algorithm>
#include <cstring>

#include "backend/vulkan/kernels.h"

namespace tw::vk {

Result<const VkTensor*> Kernels::dense(const VkTensor& t, VkTensor& keep) {
  if (t.contiguous()) return &t;
  TW_ASSIGN_OR_RETURN(keep, contiguous(t));
  return &keep;
}

namespace {
constexpr int32_t kSoftmax = 0, kLogSoftmax = 1, kLayerNorm = 2;
// rows.comp's build for dtype d: rows_1 computes in double.
const char* rows_shader(DType d) { return d == kF64 ? "rows_1" : "rows_0"; }
}  // namespace

Result<VkTensor> Kernels::run(const ir::Softmax& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x0, in(op.x));
  const std::string name = op.log ? "log_softmax" : "softmax";
  TW_RETURN_NOT_OK(cls_of(x0->dtype, name).status());
  VkTensor keep;
  TW_ASSIGN_OR_RETURN(const VkTensor* x, dense(*x0, keep));
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  const int64_t dim = rank == 0 ? 0 : (op.dim < 0 ? op.dim + rank : op.dim);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= x->shape[d];
  for (int64_t d = dim + 1; d < rank; ++d) inner *= x->shape[d];
  const int64_t len = rank == 0 ? 1 : x->shape[dim];
  RowsParams p;
  p.rows = static_cast<uint32_t>(outer * inner);
  p.len = static_cast<uint32_t>(len);
  p.inner = static_cast<uint32_t>(inner);
  TW_ASSIGN_OR_RETURN(VkTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  const std::vector<int32_t> spec = {op.log ? kLogSoftmax : kSoftmax,
                                     static_cast<int32_t>(x->dtype), 0, 0};
  // x's offset: a contiguous view may start inside its buffer.
  if (x->offset != 0) {
    TW_ASSIGN_OR_RETURN(keep, contiguous(*x));
    x = &keep;
  }
  TW_RETURN_NOT_OK(ctx_->dispatch(rows_shader(x->dtype), x->dtype == kF64, spec,
                                  {{out.storage.get()}, {x->storage.get()}}, &p, sizeof p,
                                  std::min<uint32_t>(p.rows, 65535)));
  return out;
}

Result<VkTensor> Kernels::run(const ir::LayerNorm& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x0, in(op.x));
  TW_RETURN_NOT_OK(cls_of(x0->dtype, "layer_norm").status());
  VkTensor kx, kw, kb;
  TW_ASSIGN_OR_RETURN(const VkTensor* x, dense(*x0, kx));
  if (x->offset != 0) {
    TW_ASSIGN_OR_RETURN(kx, contiguous(*x));
    x = &kx;
  }
  const VkTensor* w = nullptr;
  const VkTensor* b = nullptr;
  // Weight and bias are read at [0, len): made contiguous from offset 0.
  auto flat = [&](const ir::In& id, VkTensor& keep) -> Result<const VkTensor*> {
    TW_ASSIGN_OR_RETURN(const VkTensor* t, in(id));
    if (t->contiguous() && t->offset == 0) return t;
    TW_ASSIGN_OR_RETURN(keep, contiguous(*t));
    return &keep;
  };
  if (op.weight.id != 0) {
    TW_ASSIGN_OR_RETURN(w, flat(op.weight, kw));
  }
  if (op.bias.id != 0) {
    TW_ASSIGN_OR_RETURN(b, flat(op.bias, kb));
  }
  int64_t len = 1;
  const int64_t rank = static_cast<int64_t>(x->shape.size());
  for (int64_t d = rank - op.normalized_dims; d < rank; ++d) len *= x->shape[d];
  RowsParams p;
  p.rows = static_cast<uint32_t>(len == 0 ? 0 : x->numel() / len);
  p.len = static_cast<uint32_t>(len);
  p.inner = 1;
  p.eps = static_cast<float>(op.eps);
  const double eps = op.eps;
  uint64_t eps_bits;
  std::memcpy(&eps_bits, &eps, sizeof eps);
  p.eps_lo = static_cast<uint32_t>(eps_bits);
  p.eps_hi = static_cast<uint32_t>(eps_bits >> 32);
  TW_ASSIGN_OR_RETURN(VkTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  const std::vector<int32_t> spec = {kLayerNorm, static_cast<int32_t>(x->dtype), w ? 1 : 0,
                                     b ? 1 : 0};
  std::vector<Binding> bindings = {{out.storage.get()},
                                   {x->storage.get()},
                                   {w ? w->storage.get() : nullptr},
                                   {b ? b->storage.get() : nullptr}};
  TW_RETURN_NOT_OK(ctx_->dispatch(rows_shader(x->dtype), x->dtype == kF64, spec, bindings, &p,
                                  sizeof p, std::min<uint32_t>(p.rows, 65535)));
  return out;
}

}  // namespace tw::vk

namespace tw::vk {

Result<std::vector<VkTensor>> Kernels::run(const ir::LayerNormBackward& op) {
  const std::string name = "layer_norm_backward";
  TW_ASSIGN_OR_RETURN(const VkTensor* g0, in(op.grad));
  TW_ASSIGN_OR_RETURN(const VkTensor* x0, in(op.x));
  const DType d = x0->dtype;
  if (d != kF32 && d != kF64 && d != kF16 && d != kBF16) {
    return unsupported_dtype(name, d, device_, "float dtypes only");
  }
  if (!ctx_->info().f64) {
    return unsupported_dtype(name, d, device_,
                             "it computes in double; the device lacks shaderFloat64");
  }
  VkTensor kg, kx, kw;
  TW_ASSIGN_OR_RETURN(const VkTensor* g, dense(*g0, kg));
  TW_ASSIGN_OR_RETURN(const VkTensor* x, dense(*x0, kx));
  const VkTensor* w = nullptr;
  if (op.weight.id != 0) {
    TW_ASSIGN_OR_RETURN(const VkTensor* w0, in(op.weight));
    TW_ASSIGN_OR_RETURN(w, dense(*w0, kw));
  }
  // Every operand from its buffer's start (the shader indexes from 0).
  for (auto [t, keep] : {std::pair{&g, &kg}, std::pair{&x, &kx}, std::pair{&w, &kw}}) {
    if (*t && (*t)->offset != 0) {
      TW_ASSIGN_OR_RETURN(*keep, contiguous(**t));
      *t = keep;
    }
  }
  std::vector<VkTensor> outs(3);
  for (int k = 0; k < 3; ++k) {
    TW_ASSIGN_OR_RETURN(outs[k], fresh((*metas_)[k]));
  }
  const int64_t n = outs[1].numel();
  if (n == 0) return outs;
  if (x->numel() == 0) {  // no rows: dw and db are empty sums
    for (int k = 1; k < 3; ++k) {
      TW_ASSIGN_OR_RETURN(outs[k], filled((*metas_)[k], (*metas_)[k].dtype, ir::Scalar(0.0)));
    }
    return outs;
  }
  const int64_t rows = x->numel() / n;
  if (x->numel() >= (int64_t{1} << 31)) {
    return unimplemented(name + " of " + std::to_string(x->numel()) +
                         " elements: not supported by the " + device_ +
                         " backend (at most 2^31 - 1)");
  }
  struct {
    uint32_t rows, n, eps_lo, eps_hi;
  } p{static_cast<uint32_t>(rows), static_cast<uint32_t>(n), 0, 0};
  uint64_t eps_bits;
  std::memcpy(&eps_bits, &op.eps, 8);
  p.eps_lo = static_cast<uint32_t>(eps_bits);
  p.eps_hi = static_cast<uint32_t>(eps_bits >> 32);
  TW_ASSIGN_OR_RETURN(Storage stats, ctx_->alloc(static_cast<uint64_t>(rows) * 16));
  const int32_t dt = static_cast<int32_t>(d), has_w = w ? 1 : 0;
  auto groups = [](int64_t threads) {
    return static_cast<uint32_t>(std::min<int64_t>((threads + 63) / 64, 65535));
  };
  const Binding wb{w ? w->storage.get() : nullptr};
  TW_RETURN_NOT_OK(ctx_->dispatch(
      "lnback", true, {0, dt, has_w},
      {{outs[0].storage.get()}, {g->storage.get()}, {x->storage.get()}, wb, {stats.get()}}, &p,
      sizeof p, groups(rows)));
  TW_RETURN_NOT_OK(ctx_->dispatch("lnback", true, {1, dt, has_w},
                                  {{outs[1].storage.get()},
                                   {g->storage.get()},
                                   {x->storage.get()},
                                   wb,
                                   {stats.get()},
                                   {outs[2].storage.get()}},
                                  &p, sizeof p, groups(n)));
  return outs;
}

}  // namespace tw::vk
