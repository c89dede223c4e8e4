// AdamStep (shaders/adam.comp): one pass over the parameter, its gradient and both moments,
// writing the three outputs; the scalars rounded to the dtype as the cpu backend rounds them.
#include <cstring>

#include "backend/vulkan/kernels.h"
#include "ir/convert.h"

namespace tw::vk {

Result<std::vector<VkTensor>> Kernels::run(const ir::AdamStep& op) {
  const ir::In ins[6] = {op.param, op.grad, op.exp_avg, op.exp_avg_sq, op.step_size, op.bias2_sqrt};
  VkTensor keep[6];
  const VkTensor* t[6];
  for (int k = 0; k < 6; ++k) {
    TW_ASSIGN_OR_RETURN(const VkTensor* v, in(ins[k]));
    TW_ASSIGN_OR_RETURN(t[k], dense(*v, keep[k]));
  }
  const DType d = t[0]->dtype;
  if (d != kF32 && d != kF64) return unsupported_dtype("adam_step", d, device_, "f32 and f64 only");
  if (d == kF64 && !ctx_->info().f64) {
    return unsupported_dtype("adam_step", d, device_, "the device lacks shaderFloat64");
  }
  struct {
    uint32_t n = 0;
    uint32_t o[6] = {};
    uint32_t s[12] = {};
  } p;
  const int64_t n = t[0]->numel();
  if (n >= (int64_t{1} << 31)) {
    return unimplemented("adam_step of " + std::to_string(n) + " elements: not supported by the " +
                         device_ + " backend (at most 2^31 - 1 per dispatch)");
  }
  p.n = static_cast<uint32_t>(n);
  for (int k = 0; k < 6; ++k) p.o[k] = static_cast<uint32_t>(t[k]->offset);
  const double scalars[6] = {1.0 - op.beta1, op.beta2,        1.0 - op.beta2,
                             op.eps,         op.weight_decay, 1.0 - op.lr * op.weight_decay};
  for (int k = 0; k < 6; ++k) {
    if (d == kF64) {
      const double v = ir::scalar_to<double>(ir::Scalar(scalars[k]));
      std::memcpy(&p.s[2 * k], &v, 8);
    } else {
      const float v = ir::scalar_to<float>(ir::Scalar(scalars[k]));
      std::memcpy(&p.s[2 * k], &v, 4);
    }
  }
  std::vector<VkTensor> outs(3);
  for (int k = 0; k < 3; ++k) {
    TW_ASSIGN_OR_RETURN(outs[k], fresh((*metas_)[k]));
  }
  if (n == 0) return outs;
  const int32_t decay = op.weight_decay == 0 ? 0 : (op.decoupled ? 2 : 1);
  const std::vector<Binding> bindings = {
      {outs[0].storage.get()}, {t[0]->storage.get()},   {t[1]->storage.get()},
      {t[2]->storage.get()},   {t[3]->storage.get()},   {t[4]->storage.get()},
      {t[5]->storage.get()},   {outs[1].storage.get()}, {outs[2].storage.get()}};
  const uint32_t groups =
      static_cast<uint32_t>(std::min<int64_t>((n + kGroupSize - 1) / kGroupSize, 65535));
  TW_RETURN_NOT_OK(ctx_->dispatch("adam", d == kF64, {static_cast<int32_t>(d), decay}, bindings, &p,
                                  sizeof p, groups));
  return outs;
}

}  // namespace tw::vk
