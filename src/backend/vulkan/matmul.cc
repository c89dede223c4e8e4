// MatMul and Linear through one tiled shader (shaders/matmul.comp): operands are read through
// strides, so a transposed weight or a broadcast batch is never copied.
#include <algorithm>

#include "backend/vulkan/kernels.h"

namespace tw::vk {

Result<VkTensor> Kernels::matmul(const VkTensor& a, const VkTensor& b, const VkTensor* bias,
                                 bool relu, const std::string& op) {
  const TensorMeta& m = out_meta();
  const size_t ra = a.shape.size(), rb = b.shape.size(), ro = m.shape.size();
  const Shape batch(m.shape.begin(), m.shape.end() - 2);
  // The batch dims of A and B broadcast against the output's.
  VkTensor ab = a, bb = b;
  ab.shape.assign(a.shape.begin(), a.shape.end() - 2);
  ab.strides.assign(a.strides.begin(), a.strides.end() - 2);
  bb.shape.assign(b.shape.begin(), b.shape.end() - 2);
  bb.strides.assign(b.strides.begin(), b.strides.end() - 2);
  TW_ASSIGN_OR_RETURN(
      Indexing ix,
      merge_dims(batch, {broadcast_operand(ab, batch), broadcast_operand(bb, batch)}, op));
  if (ix.shape.size() > static_cast<size_t>(kMaxBatchRank)) {
    return unimplemented(op + ": " + std::to_string(ix.shape.size()) +
                         " batch dims that cannot be merged: not supported by the " + device() +
                         " backend (at most " + std::to_string(kMaxBatchRank) + ")");
  }
  MatmulParams p;
  p.M = static_cast<uint32_t>(m.shape[ro - 2]);
  p.N = static_cast<uint32_t>(m.shape[ro - 1]);
  p.K = static_cast<uint32_t>(a.shape[ra - 1]);
  p.batch = static_cast<uint32_t>(numel(batch));
  p.batch_rank = static_cast<uint32_t>(ix.shape.size());
  for (size_t d = 0; d < ix.shape.size(); ++d) {
    p.bshape[d] = static_cast<uint32_t>(ix.shape[d]);
    p.a_bstride[d] = static_cast<int32_t>(ix.strides[0][d]);
    p.b_bstride[d] = static_cast<int32_t>(ix.strides[1][d]);
  }
  p.a_m = static_cast<int32_t>(a.strides[ra - 2]);
  p.a_k = static_cast<int32_t>(a.strides[ra - 1]);
  p.b_k = static_cast<int32_t>(b.strides[rb - 2]);
  p.b_n = static_cast<int32_t>(b.strides[rb - 1]);
  p.a_off = static_cast<uint32_t>(a.offset);
  p.b_off = static_cast<uint32_t>(b.offset);
  if (bias) {
    p.bias_n = bias->shape[0] == 1 ? 0 : static_cast<int32_t>(bias->strides[0]);
    p.bias_off = static_cast<uint32_t>(bias->offset);
  }
  TW_ASSIGN_OR_RETURN(int32_t cls, cls_of(m.dtype, op));
  TW_ASSIGN_OR_RETURN(VkTensor out, fresh(m));
  if (numel(m.shape) == 0) return out;
  const std::vector<int32_t> spec = {static_cast<int32_t>(m.dtype), cls, bias ? 1 : 0,
                                     relu ? 1 : 0};
  const uint32_t gx = (p.N + kMatmulTile - 1) / kMatmulTile;
  const uint32_t gy = (p.M + kMatmulTile - 1) / kMatmulTile;
  const uint32_t gz = std::min<uint32_t>(p.batch, 65535);
  if (gx > 65535 || gy > 65535) {
    return unimplemented(op + " of " + meta_str(m) + ": not supported by the " + device() +
                         " backend (at most 65535 tiles of 16 per matrix side)");
  }
  std::vector<Binding> bindings = {{out.storage.get()}, {a.storage.get()}, {b.storage.get()}};
  if (bias) bindings.push_back({bias->storage.get()});
  TW_RETURN_NOT_OK(
      ctx_->dispatch("matmul", cls == kClsF64, spec, bindings, &p, sizeof p, gx, gy, gz));
  return out;
}

Result<VkTensor> Kernels::run(const ir::MatMul& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* a, in(op.a));
  TW_ASSIGN_OR_RETURN(const VkTensor* b, in(op.b));
  return matmul(*a, *b, nullptr, false, "matmul");
}

Result<VkTensor> Kernels::run(const ir::Linear& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const VkTensor* w, in(op.w));
  const VkTensor* bias = nullptr;
  if (op.bias.id != 0) {
    TW_ASSIGN_OR_RETURN(bias, in(op.bias));
  }
  VkTensor wt = *w;  // w [out, in] read as [in, out]: a view
  std::swap(wt.shape[0], wt.shape[1]);
  std::swap(wt.strides[0], wt.strides[1]);
  return matmul(*x, wt, bias, op.relu, "linear");
}

}  // namespace tw::vk
