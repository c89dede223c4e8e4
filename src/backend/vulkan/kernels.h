// The vulkan backend's kernels: one run() per op it executes (an op without one here is refused
// by the backend's supports(), vulkan_backend.cc), written once per op kind: elementwise.cc (one
// shader, shaders/elementwise.comp, for every unary and binary kind, casts, where, clamp, masked
// fill and full), reduce.cc (every Reduce kind, shaders/reduce.comp), matmul.cc (MatMul and
// Linear, one tiled shader), rows.cc (softmax, log_softmax, layer_norm) and movement.cc (views, and
// copies where a view cannot do). Kernels may assume ir::infer accepted the op; they refuse, naming
// op, dtype and device (unsupported_dtype), what the device does not run.
#pragma once
#include <string>
#include <vector>

#include "backend/vulkan/tensor.h"
#include "ir/ops.h"

namespace tw::vk {

class Kernels {
 public:
  Kernels(Context* ctx, std::string device, TableBackend<VkTensor>* table)
      : ctx_(ctx), device_(std::move(device)), table_(table) {}
  void set_metas(const std::vector<TensorMeta>* metas) { metas_ = metas; }

  Result<VkTensor> run(const ir::FromHost& op);
  Result<VkTensor> run(const ir::Full& op);
  Result<VkTensor> run(const ir::Unary& op);
  Result<VkTensor> run(const ir::Binary& op);
  Result<VkTensor> run(const ir::BinaryScalar& op);
  Result<VkTensor> run(const ir::Where& op);
  Result<VkTensor> run(const ir::Clamp& op);
  Result<VkTensor> run(const ir::MaskedFill& op);
  Result<VkTensor> run(const ir::Cast& op);
  Result<VkTensor> run(const ir::Reshape& op);
  Result<VkTensor> run(const ir::Permute& op);
  Result<VkTensor> run(const ir::Expand& op);
  Result<VkTensor> run(const ir::Slice& op);
  Result<VkTensor> run(const ir::Reduce& op);
  Result<VkTensor> run(const ir::MatMul& op);
  Result<VkTensor> run(const ir::Linear& op);
  Result<VkTensor> run(const ir::Softmax& op);
  Result<VkTensor> run(const ir::LayerNorm& op);

  // A contiguous copy of a view (reads of strided tensors, reshapes no view can express).
  Result<VkTensor> contiguous(const VkTensor& t);

 private:
  const TensorMeta& out_meta() const { return (*metas_)[0]; }
  Result<const VkTensor*> in(const ir::In& i) const { return table_->tensor(i.id); }
  Result<VkTensor> fresh(const TensorMeta& m);
  // One elementwise dispatch: `inputs` (up to three) read through strides against m's shape.
  struct Ew {
    int32_t family = 0, kind = -1, cls = 0, scalar = 0;
    EwParams params;
  };
  Result<VkTensor> elementwise(Ew ew, const std::vector<const VkTensor*>& inputs,
                               const TensorMeta& m, const std::string& op);
  const std::string& device() const { return device_; }
  // t itself when contiguous, else a contiguous copy (kept in `keep`).
  Result<const VkTensor*> dense(const VkTensor& t, VkTensor& keep);
  // C = A B (+ bias, relu) with A [batch..., M, K] and B [batch..., K, N] as views.
  Result<VkTensor> matmul(const VkTensor& a, const VkTensor& b, const VkTensor* bias, bool relu,
                          const std::string& op);
  // The compute class for dtype d, or the refusal naming op and device.
  Result<int32_t> cls_of(DType d, const std::string& op) const;

  Context* ctx_;
  std::string device_;
  TableBackend<VkTensor>* table_;
  const std::vector<TensorMeta>* metas_ = nullptr;
};

}  // namespace tw::vk
