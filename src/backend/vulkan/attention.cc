// ScaledDotProductAttention and its backward (shaders/attention.comp): f32 compute (f16 and bf16
// as storage); f64 is refused (GLSL has no double exp). The mask is expanded to the scores'
// shape [..., Tq, Tk] on the device first (a copy of its broadcast view), so the shader indexes
// it as [batch-head, Tq, Tk].
#include <cstring>

#include "backend/vulkan/kernels.h"

namespace tw::vk {
namespace {

struct AttentionParams {
  uint32_t bh = 0, tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1;
  uint32_t oq = 0, ok = 0, ov = 0, og = 0, om = 0;
  uint32_t scale_lo = 0, scale_hi = 0;  // scale's double bits (the f64 build)
};

AttentionParams params_of(const Kernels::Attention& a, double scale) {
  auto u = [](int64_t v) { return static_cast<uint32_t>(v); };
  uint64_t bits;
  std::memcpy(&bits, &scale, sizeof scale);
  return {u(a.bh),
          u(a.tq),
          u(a.tk),
          u(a.d),
          u(a.dv),
          static_cast<float>(scale),
          u(a.t[0].offset),
          u(a.t[1].offset),
          u(a.t[2].offset),
          u(a.t[3].offset),
          0,
          static_cast<uint32_t>(bits),
          static_cast<uint32_t>(bits >> 32)};
}

// attention.comp's build for dtype d: attention_1 computes in double.
const char* attention_shader(DType d) { return d == kF64 ? "attention_1" : "attention_0"; }

}  // namespace

Result<Kernels::Attention> Kernels::attention_operands(const ir::In& q, const ir::In& k,
                                                       const ir::In& v, const ir::In& mask,
                                                       const ir::In* grad, const std::string& op) {
  Attention a;
  const ir::In ids[4] = {q, k, v, grad ? *grad : ir::In{}};
  for (int i = 0; i < 4; ++i) {
    if (ids[i].id == 0) continue;
    TW_ASSIGN_OR_RETURN(const VkTensor* t, in(ids[i]));
    VkTensor keep;
    TW_ASSIGN_OR_RETURN(const VkTensor* dense_t, dense(*t, keep));
    a.t[i] = *dense_t;
  }
  const DType d = a.t[0].dtype;
  if (d == kF64) TW_RETURN_NOT_OK(cls_of(d, op).status());
  if (d != kF32 && d != kF16 && d != kBF16 && d != kF64) {
    return unsupported_dtype(op, d, device_, "float dtypes only");
  }
  const Shape& qs = a.t[0].shape;
  const size_t r = qs.size();
  int64_t bh = 1;
  for (size_t i = 0; i + 2 < r; ++i) bh *= qs[i];
  a.bh = bh;
  a.tq = qs[r - 2];
  a.tk = a.t[1].shape[r - 2];
  a.d = qs[r - 1];
  a.dv = a.t[2].shape[r - 1];
  if (mask.id != 0) {
    TW_ASSIGN_OR_RETURN(const VkTensor* m, in(mask));
    Shape scores(qs.begin(), qs.end() - 1);
    scores.push_back(a.tk);
    VkTensor view = *m;
    view.shape = scores;
    view.strides = broadcast_operand(*m, scores).strides;
    TW_ASSIGN_OR_RETURN(a.mask, contiguous(view));
    a.has_mask = true;
  }
  const int64_t biggest = std::max(
      {bh * a.tq * a.tk, bh * a.tq * std::max(a.d, a.dv), bh * a.tk * std::max(a.d, a.dv)});
  if (biggest >= (int64_t{1} << 31)) {
    return unimplemented(op + ": more than 2^31 - 1 elements per operand is not supported by the " +
                         device_ + " backend");
  }
  return a;
}

Result<VkTensor> Kernels::run(const ir::ScaledDotProductAttention& op) {
  const std::string name = "scaled_dot_product_attention";
  TW_ASSIGN_OR_RETURN(Attention a,
                      attention_operands(op.query, op.key, op.value, op.mask, nullptr, name));
  TW_ASSIGN_OR_RETURN(VkTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  const AttentionParams p = params_of(a, op.scale);
  const std::vector<int32_t> spec = {0, static_cast<int32_t>(a.t[0].dtype), op.causal ? 1 : 0,
                                     a.has_mask ? 1 : 0};
  std::vector<Binding> bindings = {
      {out.storage.get()}, {a.t[0].storage.get()}, {a.t[1].storage.get()}, {a.t[2].storage.get()}};
  if (a.has_mask) bindings.push_back({a.mask.storage.get()});
  const uint32_t groups = static_cast<uint32_t>(std::min<int64_t>((a.bh * a.tq + 63) / 64, 65535));
  const DType d = a.t[0].dtype;
  TW_RETURN_NOT_OK(
      ctx_->dispatch(attention_shader(d), d == kF64, spec, bindings, &p, sizeof p, groups));
  return out;
}

Result<std::vector<VkTensor>> Kernels::run(const ir::ScaledDotProductAttentionBackward& op) {
  const std::string name = "scaled_dot_product_attention_backward";
  TW_ASSIGN_OR_RETURN(Attention a,
                      attention_operands(op.query, op.key, op.value, op.mask, &op.grad, name));
  std::vector<VkTensor> outs(3);
  for (int k = 0; k < 3; ++k) {
    TW_ASSIGN_OR_RETURN(outs[k], fresh((*metas_)[k]));
  }
  if (a.bh == 0 || (a.tq == 0 && a.tk == 0)) return outs;
  const AttentionParams p = params_of(a, op.scale);
  const DType d = a.t[0].dtype;
  TW_ASSIGN_OR_RETURN(Storage stats,
                      ctx_->alloc(static_cast<uint64_t>(std::max<int64_t>(a.bh * a.tq, 1)) * 4 *
                                  (d == kF64 ? 8 : 4)));
  const int32_t dt = static_cast<int32_t>(d);
  const Binding mask{a.has_mask ? a.mask.storage.get() : a.t[0].storage.get()};
  auto groups = [](int64_t threads) {
    return static_cast<uint32_t>(std::min<int64_t>((threads + 63) / 64, 65535));
  };
  // Rows: dq and the statistics; then keys: dk and dv.
  TW_RETURN_NOT_OK(ctx_->dispatch(attention_shader(d), d == kF64,
                                  {1, dt, op.causal ? 1 : 0, a.has_mask ? 1 : 0},
                                  {{outs[0].storage.get()},
                                   {a.t[0].storage.get()},
                                   {a.t[1].storage.get()},
                                   {a.t[2].storage.get()},
                                   mask,
                                   {a.t[3].storage.get()},
                                   {stats.get()}},
                                  &p, sizeof p, groups(a.bh * a.tq)));
  TW_RETURN_NOT_OK(ctx_->dispatch(attention_shader(d), d == kF64,
                                  {2, dt, op.causal ? 1 : 0, a.has_mask ? 1 : 0},
                                  {{outs[1].storage.get()},
                                   {a.t[0].storage.get()},
                                   {a.t[1].storage.get()},
                                   {a.t[2].storage.get()},
                                   mask,
                                   {a.t[3].storage.get()},
                                   {stats.get()},
                                   {outs[2].storage.get()}},
                                  &p, sizeof p, groups(a.bh * a.tk)));
  return outs;
}

}  // namespace tw::vk
