// Convolution and pooling, forward and backward (shaders/conv.comp): a thread per output
// element, the gradients gathered rather than scattered (deterministic, no atomics). Operands
// are made contiguous first. f32, f16 and bf16 compute in float; f64 where the device has
// shaderFloat64; other dtypes are refused.
#include "backend/vulkan/kernels.h"

namespace tw::vk {
namespace {

uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

void geometry(ConvParams& p, const std::vector<int64_t>& stride,
              const std::vector<int64_t>& padding, const std::vector<int64_t>* dilation) {
  p.sh = u32(stride[0]);
  p.sw = u32(stride[1]);
  p.ph = u32(padding[0]);
  p.pw = u32(padding[1]);
  if (dilation) {
    p.dh = u32((*dilation)[0]);
    p.dw = u32((*dilation)[1]);
  }
}
void x_dims(ConvParams& p, const Shape& x) {
  p.N = u32(x[0]);
  p.C = u32(x[1]);
  p.H = u32(x[2]);
  p.W = u32(x[3]);
}
void out_dims(ConvParams& p, const Shape& y) {
  p.O = u32(y[1]);
  p.Ho = u32(y[2]);
  p.Wo = u32(y[3]);
}

}  // namespace

Result<VkTensor> Kernels::conv_dispatch(int32_t mode, int32_t kind, ConvParams& p,
                                        const TensorMeta& m, const VkTensor* a, const VkTensor* b,
                                        const VkTensor* c, const std::string& op) {
  if (m.dtype != kF32 && m.dtype != kF16 && m.dtype != kBF16 && m.dtype != kF64) {
    return unsupported_dtype(op, m.dtype, device_, "float dtypes only");
  }
  if (m.dtype == kF64 && !ctx_->info().f64) {
    return unsupported_dtype(op, kF64, device_, "the device lacks shaderFloat64");
  }
  const int64_t n = numel(m.shape);
  if (n >= (int64_t{1} << 31)) {
    return unimplemented(op + " of " + std::to_string(n) + " elements: not supported by the " +
                         device_ + " backend (at most 2^31 - 1 per dispatch)");
  }
  VkTensor keep[3];
  const VkTensor* in[3] = {a, b, c};
  uint32_t* offsets[3] = {&p.oa, &p.ob, &p.oc};
  std::vector<Binding> bindings(4);
  for (int k = 0; k < 3; ++k) {
    if (!in[k]) continue;
    TW_ASSIGN_OR_RETURN(in[k], dense(*in[k], keep[k]));
    *offsets[k] = u32(in[k]->offset);
    bindings[k + 1].buf = in[k]->storage.get();
  }
  TW_ASSIGN_OR_RETURN(VkTensor out, fresh(m));
  if (n == 0) return out;
  p.n = u32(n);
  bindings[0].buf = out.storage.get();
  const std::vector<int32_t> spec = {mode, static_cast<int32_t>(m.dtype), kind};
  const uint32_t groups =
      static_cast<uint32_t>(std::min<int64_t>((n + kGroupSize - 1) / kGroupSize, 65535));
  TW_RETURN_NOT_OK(ctx_->dispatch("conv", m.dtype == kF64, spec, bindings, &p, sizeof p, groups));
  return out;
}

Result<VkTensor> Kernels::run(const ir::Conv2d& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const VkTensor* w, in(op.w));
  const VkTensor* bias = nullptr;
  if (op.bias.id != 0) {
    TW_ASSIGN_OR_RETURN(bias, in(op.bias));
  }
  const TensorMeta& m = out_meta();
  ConvParams p;
  x_dims(p, x->shape);
  out_dims(p, m.shape);
  p.kh = u32(w->shape[2]);
  p.kw = u32(w->shape[3]);
  p.groups = u32(op.groups);
  p.has_bias = bias ? 1 : 0;
  geometry(p, op.stride, op.padding, &op.dilation);
  return conv_dispatch(kCvForward, 0, p, m, x, w, bias, "conv2d");
}

Result<VkTensor> Kernels::run(const ir::Conv2dBackwardInput& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* grad, in(op.grad));
  TW_ASSIGN_OR_RETURN(const VkTensor* w, in(op.w));
  const TensorMeta& m = out_meta();
  ConvParams p;
  x_dims(p, m.shape);
  out_dims(p, grad->shape);
  p.kh = u32(w->shape[2]);
  p.kw = u32(w->shape[3]);
  p.groups = u32(op.groups);
  geometry(p, op.stride, op.padding, &op.dilation);
  return conv_dispatch(kCvBackwardInput, 0, p, m, grad, w, nullptr, "conv2d_backward_input");
}

Result<VkTensor> Kernels::run(const ir::Conv2dBackwardWeight& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* grad, in(op.grad));
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  const TensorMeta& m = out_meta();
  ConvParams p;
  x_dims(p, x->shape);
  out_dims(p, grad->shape);
  p.kh = u32(m.shape[2]);
  p.kw = u32(m.shape[3]);
  p.groups = u32(op.groups);
  geometry(p, op.stride, op.padding, &op.dilation);
  return conv_dispatch(kCvBackwardWeight, 0, p, m, grad, x, nullptr, "conv2d_backward_weight");
}

Result<VkTensor> Kernels::run(const ir::Pool2d& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  const TensorMeta& m = out_meta();
  ConvParams p;
  x_dims(p, x->shape);
  out_dims(p, m.shape);
  p.kh = u32(op.kernel[0]);
  p.kw = u32(op.kernel[1]);
  geometry(p, op.stride, op.padding, nullptr);
  return conv_dispatch(kCvPool, static_cast<int32_t>(op.kind), p, m, x, nullptr, nullptr, "pool2d");
}

Result<VkTensor> Kernels::run(const ir::Pool2dBackward& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* grad, in(op.grad));
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  const TensorMeta& m = out_meta();
  ConvParams p;
  x_dims(p, m.shape);
  out_dims(p, grad->shape);
  p.kh = u32(op.kernel[0]);
  p.kw = u32(op.kernel[1]);
  geometry(p, op.stride, op.padding, nullptr);
  return conv_dispatch(kCvPoolBackward, static_cast<int32_t>(op.kind), p, m, grad, x, nullptr,
                       "pool2d_backward");
}

Result<VkTensor> Kernels::run(const ir::AdaptiveAvgPool2d& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  const TensorMeta& m = out_meta();
  ConvParams p;
  x_dims(p, x->shape);
  out_dims(p, m.shape);
  return conv_dispatch(kCvAdaptive, 0, p, m, x, nullptr, nullptr, "adaptive_avg_pool2d");
}

Result<VkTensor> Kernels::run(const ir::AdaptiveAvgPool2dBackward& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* grad, in(op.grad));
  const TensorMeta& m = out_meta();
  ConvParams p;
  x_dims(p, m.shape);
  out_dims(p, grad->shape);
  return conv_dispatch(kCvAdaptiveBackward, 0, p, m, grad, nullptr, nullptr,
                       "adaptive_avg_pool2d_backward");
}

}  // namespace tw::vk
