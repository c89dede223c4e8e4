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
  Result<VkTensor> run(const ir::GeluBackward& op);
  Result<VkTensor> run(const ir::Reshape& op);
  Result<VkTensor> run(const ir::Permute& op);
  Result<VkTensor> run(const ir::Expand& op);
  Result<VkTensor> run(const ir::Slice& op);
  Result<VkTensor> run(const ir::Reduce& op);
  Result<VkTensor> run(const ir::MatMul& op);
  Result<VkTensor> run(const ir::Linear& op);
  Result<VkTensor> run(const ir::Softmax& op);
  Result<VkTensor> run(const ir::LayerNorm& op);
  Result<std::vector<VkTensor>> run(const ir::LayerNormBackward& op);  // shaders/lnback.comp
  // indexing.cc (shaders/index.comp)
  Result<VkTensor> run(const ir::Arange& op);
  Result<VkTensor> run(const ir::Eye& op);
  Result<VkTensor> run(const ir::RandUniform& op);
  Result<VkTensor> run(const ir::RandNormal& op);
  Result<VkTensor> run(const ir::Bernoulli& op);
  Result<VkTensor> run(const ir::Flip& op);
  Result<VkTensor> run(const ir::Repeat& op);
  Result<VkTensor> run(const ir::Cat& op);
  Result<VkTensor> run(const ir::SliceAssign& op);
  Result<VkTensor> run(const ir::Gather& op);
  Result<VkTensor> run(const ir::IndexSelect& op);
  Result<VkTensor> run(const ir::OneHot& op);
  Result<VkTensor> run(const ir::ScatterAdd& op);
  Result<VkTensor> run(const ir::IndexSelectBackward& op);
  Result<VkTensor> run(const ir::Cumsum& op);
  // optim.cc (shaders/adam.comp): three outputs
  Result<std::vector<VkTensor>> run(const ir::AdamStep& op);
  // attention.cc (shaders/attention.comp)
  Result<VkTensor> run(const ir::ScaledDotProductAttention& op);
  Result<std::vector<VkTensor>> run(const ir::ScaledDotProductAttentionBackward& op);
  // conv.cc (shaders/conv.comp)
  Result<VkTensor> run(const ir::Conv2d& op);
  Result<VkTensor> run(const ir::Conv2dBackwardInput& op);
  Result<VkTensor> run(const ir::Conv2dBackwardWeight& op);
  Result<VkTensor> run(const ir::Pool2d& op);
  Result<VkTensor> run(const ir::Pool2dBackward& op);
  Result<VkTensor> run(const ir::AdaptiveAvgPool2d& op);
  Result<VkTensor> run(const ir::AdaptiveAvgPool2dBackward& op);

  // A contiguous copy of a view (reads of strided tensors, reshapes no view can express).
  Result<VkTensor> contiguous(const VkTensor& t);

  // Attention's operands made contiguous (q, k, v, and grad), the mask expanded to the scores.
  struct Attention {
    VkTensor t[4];  // q, k, v, grad: contiguous
    VkTensor mask;
    bool has_mask = false;
    int64_t bh = 0, tq = 0, tk = 0, d = 0, dv = 0;
  };

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
  // A new tensor of m filled with v (Full's kernel).
  Result<VkTensor> filled(const TensorMeta& m, DType dtype, const ir::Scalar& v);
  // One dispatch of shaders/index.comp in `mode` over `threads` threads, writing into `out`
  // (null: a new tensor of m), reading a and b (either may be null).
  Result<VkTensor> index_dispatch(int32_t mode, IndexParams& p, const TensorMeta& m,
                                  const VkTensor* out, const VkTensor* a, const VkTensor* b,
                                  int32_t cls, int64_t threads, const std::string& op);
  Result<Attention> attention_operands(const ir::In& q, const ir::In& k, const ir::In& v,
                                       const ir::In& mask, const ir::In* grad,
                                       const std::string& op);
  // One dispatch of shaders/conv.comp over the output m's elements, operands made contiguous.
  Result<VkTensor> conv_dispatch(int32_t mode, int32_t kind, ConvParams& p, const TensorMeta& m,
                                 const VkTensor* a, const VkTensor* b, const VkTensor* c,
                                 const std::string& op);
  // dst (a view of a buffer this op owns) = src broadcast to it.
  Result<VkTensor> copy_into(const VkTensor& dst, const VkTensor& src, const std::string& op);
  // An index tensor's values (read back from the device) and their check against [-size, size).
  Result<std::vector<int64_t>> index_values(const VkTensor& index);
  Status check_indices(const VkTensor& index, int64_t size, int64_t dim, const std::string& op);
  // t itself when contiguous, else a contiguous copy (kept in `keep`).
  Result<const VkTensor*> dense(const VkTensor& t, VkTensor& keep);
  // C = A B (+ bias, relu) with A [batch..., M, K] and B [batch..., K, N] as views.
  Result<VkTensor> matmul(const VkTensor& a, const VkTensor& b, const VkTensor* bias, bool relu,
                          const std::string& op);
  // An integer remainder's divisor checked for zero (read back: a sync); OK for other kinds.
  Status check_divisor(ir::BinaryKind k, int32_t cls, const VkTensor& divisor,
                       const std::string& name);
  // The compute class for dtype d, or the refusal naming op and device.
  Result<int32_t> cls_of(DType d, const std::string& op) const;

  Context* ctx_;
  std::string device_;
  TableBackend<VkTensor>* table_;
  const std::vector<TensorMeta>* metas_ = nullptr;
};

}  // namespace tw::vk
