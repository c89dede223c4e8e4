// The host side of ScaledDotProductAttention and its backward (attention.cu): f32 through this
// backend's fused kernels; other dtypes are refused by name (cuDNN's fused attention for
// f16/bf16 is not wired yet: docs/cuda.md).
#include "backend/cuda/kernels.h"

namespace tw::cuda {

Result<AttnArgs> Kernels::attention_args(const ir::In& query, const ir::In& key,
                                         const ir::In& value, const ir::In& mask, bool causal,
                                         double scale, const std::string& op, CuTensor (&keep)[4]) {
  TW_ASSIGN_OR_RETURN(const CuTensor* q0, in(query));
  TW_ASSIGN_OR_RETURN(const CuTensor* k0, in(key));
  TW_ASSIGN_OR_RETURN(const CuTensor* v0, in(value));
  if (q0->dtype != kF32) {
    return unsupported_dtype(op, q0->dtype, device_,
                             "the fused attention kernels here are f32; cuDNN's fused attention "
                             "for f16 and bf16 is not wired yet");
  }
  TW_ASSIGN_OR_RETURN(const CuTensor* q, dense(*q0, keep[0]));
  TW_ASSIGN_OR_RETURN(const CuTensor* k, dense(*k0, keep[1]));
  TW_ASSIGN_OR_RETURN(const CuTensor* v, dense(*v0, keep[2]));
  const size_t r = q->shape.size();
  AttnArgs a;
  a.tq = q->shape[r - 2];
  a.tk = k->shape[r - 2];
  a.d = q->shape[r - 1];
  a.dv = v->shape[r - 1];
  a.bh = 1;
  for (size_t i = 0; i + 2 < r; ++i) a.bh *= q->shape[i];
  a.q = static_cast<const float*>(q->data());
  a.k = static_cast<const float*>(k->data());
  a.v = static_cast<const float*>(v->data());
  a.scale = static_cast<float>(scale);
  a.causal = causal ? 1 : 0;
  if (mask.id != 0) {
    TW_ASSIGN_OR_RETURN(const CuTensor* m, in(mask));
    if (r - 2 > static_cast<size_t>(kMaxMaskRank)) {
      return unimplemented(op + ": a mask with " + std::to_string(r - 2) + " batch dims (at most " +
                           std::to_string(kMaxMaskRank) + " on " + device_ + ")");
    }
    Shape scores(q->shape.begin(), q->shape.end() - 1);
    scores.push_back(a.tk);
    const std::vector<int64_t> st = strided::broadcast_strides(m->shape, m->strides, scores);
    a.mask = static_cast<const uint8_t*>(m->data());
    a.mask_si = st[r - 2];
    a.mask_sj = st[r - 1];
    a.batch_rank = static_cast<int32_t>(r - 2);
    for (size_t d = 0; d + 2 < r; ++d) {
      a.batch_shape[d] = scores[d];
      a.batch_stride[d] = st[d];
    }
  }
  return a;
}

Result<CuTensor> Kernels::run(const ir::ScaledDotProductAttention& op) {
  CuTensor keep[4];
  TW_ASSIGN_OR_RETURN(AttnArgs a, attention_args(op.query, op.key, op.value, op.mask, op.causal,
                                                 op.scale, "scaled_dot_product_attention", keep));
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  a.out = static_cast<float*>(out.storage->ptr);
  TW_RETURN_NOT_OK(launched(launch_attention(a, ex_->stream->s), "scaled_dot_product_attention"));
  return out;
}

Result<std::vector<CuTensor>> Kernels::run(const ir::ScaledDotProductAttentionBackward& op) {
  const std::string name = "scaled_dot_product_attention_backward";
  CuTensor keep[4];
  TW_ASSIGN_OR_RETURN(AttnArgs a, attention_args(op.query, op.key, op.value, op.mask, op.causal,
                                                 op.scale, name, keep));
  TW_ASSIGN_OR_RETURN(const CuTensor* g0, in(op.grad));
  TW_ASSIGN_OR_RETURN(const CuTensor* g, dense(*g0, keep[3]));
  a.g = static_cast<const float*>(g->data());
  const std::vector<TensorMeta>& m = *metas_;
  std::vector<CuTensor> outs;
  for (size_t k = 0; k < 3; ++k) {
    TW_ASSIGN_OR_RETURN(CuTensor o, fresh(m[k]));
    outs.push_back(std::move(o));
  }
  if (a.bh == 0 || (a.tq == 0 && a.tk == 0)) return outs;
  TW_ASSIGN_OR_RETURN(CuTensor stats, fresh(TensorMeta{Shape{3, a.bh * a.tq}, kF32}));
  auto ptr = [](CuTensor& t) { return t.storage ? static_cast<float*>(t.storage->ptr) : nullptr; };
  a.dq = ptr(outs[0]);
  a.dk = ptr(outs[1]);
  a.dv_out = ptr(outs[2]);
  a.stats = ptr(stats);
  if (a.d == 0 || a.dv == 0) {
    // Empty rows: nothing to sum, but the outputs must still be zeros.
    for (CuTensor& o : outs) {
      if (o.numel() == 0) continue;
      TW_RETURN_NOT_OK(ex_->dev->check(
          cudaMemsetAsync(o.storage->ptr, 0, o.numel() * sizeof(float), ex_->stream->s), name));
    }
    if (a.d == 0 && a.dv == 0) {
      ex_->dev->count_dispatch();
      return outs;
    }
  }
  TW_RETURN_NOT_OK(launched(launch_attention_backward(a, ex_->stream->s), name));
  return outs;
}

}  // namespace tw::cuda
