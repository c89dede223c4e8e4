// The host side of ScaledDotProductAttention and its backward: f16 and bf16 on cuDNN's fused
// attention where it serves the case (attention_cudnn.cc), else, and f32 always, this backend's
// fused f32 kernels (attention.cu), f16/bf16 operands converted to f32 first and the results
// rounded to the op's dtype; f64 is refused by name.
#include "backend/cuda/kernels.h"

namespace tw::cuda {

Result<const CuTensor*> Kernels::dense_f32(const CuTensor& t, CuTensor& keep) {
  if (t.dtype == kF32) return dense(t, keep);
  TW_ASSIGN_OR_RETURN(keep, fresh(TensorMeta{t.shape, kF32}));
  TW_RETURN_NOT_OK(copy_into(t, keep, "attention operand to f32"));
  return &keep;
}

Result<std::optional<std::vector<CuTensor>>> Kernels::try_cudnn(
    const ir::In& query, const ir::In& key, const ir::In& value, const ir::In& mask, bool causal,
    double scale, const ir::In* grad, const std::string& op) {
  using None = std::optional<std::vector<CuTensor>>;
  TW_ASSIGN_OR_RETURN(const CuTensor* q, in(query));
  if (ex_->sdpa_mode == SdpaMode::kKernel || (q->dtype != kF16 && q->dtype != kBF16)) {
    return None();
  }
  TW_ASSIGN_OR_RETURN(const CuTensor* k, in(key));
  TW_ASSIGN_OR_RETURN(const CuTensor* v, in(value));
  std::string why;
  if (mask.id != 0 || causal) {
    why = std::string(mask.id != 0 ? "a mask" : "causal") +
          " (cuDNN 9.19's fused attention operation has no score mask)";
  } else if (q->numel() == 0 || k->numel() == 0 || v->numel() == 0) {
    why = "an empty operand";
  } else {
#if TW_CUDA_CUDNN
    const CuTensor* g = nullptr;
    if (grad) {
      TW_ASSIGN_OR_RETURN(g, in(*grad));
    }
    TW_ASSIGN_OR_RETURN(None r, cudnn_attention(*q, *k, *v, g, scale, &why));
    if (r) return r;
#else
    (void)grad;
    (void)scale;
    why = "this build has no cuDNN";
#endif
  }
  if (ex_->sdpa_mode == SdpaMode::kCudnn) {
    return unsupported_dtype(op, q->dtype, device_,
                             "TW_CUDA_SDPA=cudnn, and cuDNN's fused attention does not run this "
                             "case: " +
                                 why);
  }
  return None();
}

Result<CuTensor> Kernels::round_to(CuTensor t, DType dtype, const std::string& op) {
  if (t.dtype == dtype) return t;
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(TensorMeta{t.shape, dtype}));
  TW_RETURN_NOT_OK(copy_into(t, out, op));
  return out;
}

Result<AttnArgs> Kernels::attention_args(const ir::In& query, const ir::In& key,
                                         const ir::In& value, const ir::In& mask, bool causal,
                                         double scale, const std::string& op, CuTensor (&keep)[4]) {
  TW_ASSIGN_OR_RETURN(const CuTensor* q0, in(query));
  TW_ASSIGN_OR_RETURN(const CuTensor* k0, in(key));
  TW_ASSIGN_OR_RETURN(const CuTensor* v0, in(value));
  if (q0->dtype != kF32 && q0->dtype != kF16 && q0->dtype != kBF16) {
    return unsupported_dtype(op, q0->dtype, device_,
                             "the fused attention kernels here compute in f32, for f32, f16 and "
                             "bf16 operands");
  }
  TW_ASSIGN_OR_RETURN(const CuTensor* q, dense_f32(*q0, keep[0]));
  TW_ASSIGN_OR_RETURN(const CuTensor* k, dense_f32(*k0, keep[1]));
  TW_ASSIGN_OR_RETURN(const CuTensor* v, dense_f32(*v0, keep[2]));
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
  TW_ASSIGN_OR_RETURN(std::optional<std::vector<CuTensor>> by_cudnn,
                      try_cudnn(op.query, op.key, op.value, op.mask, op.causal, op.scale, nullptr,
                                "scaled_dot_product_attention"));
  if (by_cudnn) return std::move((*by_cudnn)[0]);
  CuTensor keep[4];
  TW_ASSIGN_OR_RETURN(AttnArgs a, attention_args(op.query, op.key, op.value, op.mask, op.causal,
                                                 op.scale, "scaled_dot_product_attention", keep));
  const std::string name = "scaled_dot_product_attention";
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(TensorMeta{out_meta().shape, kF32}));
  if (out.numel() == 0) return round_to(std::move(out), out_meta().dtype, name);
  a.out = static_cast<float*>(out.storage->ptr);
  TW_RETURN_NOT_OK(launched(launch_attention(a, ex_->stream->s), name));
  return round_to(std::move(out), out_meta().dtype, name);
}

Result<std::vector<CuTensor>> Kernels::run(const ir::ScaledDotProductAttentionBackward& op) {
  const std::string name = "scaled_dot_product_attention_backward";
  TW_ASSIGN_OR_RETURN(
      std::optional<std::vector<CuTensor>> by_cudnn,
      try_cudnn(op.query, op.key, op.value, op.mask, op.causal, op.scale, &op.grad, name));
  if (by_cudnn) return std::move(*by_cudnn);
  CuTensor keep[4];
  TW_ASSIGN_OR_RETURN(AttnArgs a, attention_args(op.query, op.key, op.value, op.mask, op.causal,
                                                 op.scale, name, keep));
  TW_ASSIGN_OR_RETURN(const CuTensor* g0, in(op.grad));
  TW_ASSIGN_OR_RETURN(const CuTensor* g, dense_f32(*g0, keep[3]));
  a.g = static_cast<const float*>(g->data());
  const std::vector<TensorMeta> m = *metas_;
  // The gradients in f32, rounded to the op's dtype at the end.
  auto rounded = [&](std::vector<CuTensor> f32) -> Result<std::vector<CuTensor>> {
    std::vector<CuTensor> r;
    for (size_t k = 0; k < f32.size(); ++k) {
      TW_ASSIGN_OR_RETURN(CuTensor o, round_to(std::move(f32[k]), m[k].dtype, name));
      r.push_back(std::move(o));
    }
    return r;
  };
  std::vector<CuTensor> outs;
  for (size_t k = 0; k < 3; ++k) {
    TW_ASSIGN_OR_RETURN(CuTensor o, fresh(TensorMeta{m[k].shape, kF32}));
    outs.push_back(std::move(o));
  }
  if (a.bh == 0 || (a.tq == 0 && a.tk == 0)) return rounded(std::move(outs));
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
      ex_->count_dispatch();
      return rounded(std::move(outs));
    }
  }
  TW_RETURN_NOT_OK(launched(launch_attention_backward(a, ex_->stream->s), name));
  return rounded(std::move(outs));
}

}  // namespace tw::cuda
