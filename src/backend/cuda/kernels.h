// The cuda backend's tensors and the host side of its kernels: one run() per op it executes (an
// op without one is refused by the backend's supports(), cuda_backend.cc). elementwise.cc (every
// unary and binary kind, casts, where, clamp, masked fill, full, arange, eye: one kernel,
// kernels.cu), movement.cc (views; reshape copies when no view can express it), reduce.cc
// (Reduce; softmax, log_softmax, layer_norm: row kernels), matmul.cc (MatMul and Linear through
// cuBLASLt), conv.cc (Conv2d, its gradients and Pool2d through cuDNN, where the build has it).
// Kernels may assume ir::infer accepted the op; they refuse, naming op, dtype and device
// (unsupported_dtype), what the device does not run.
#pragma once
#include <cublasLt.h>
#if TW_CUDA_CUDNN
#include <cudnn.h>
#endif

#include <string>
#include <vector>

#include "backend/cuda/context.h"
#include "backend/cuda/plan.h"
#include "backend/table_backend.h"
#include "ir/ops.h"

namespace tw::cuda {

// A view of a device buffer (plan.h's View) and the buffer.
struct CuTensor : View {
  Storage storage;  // null for an empty tensor
  TensorMeta meta() const { return TensorMeta{shape, dtype}; }
  // The address of element 0 of the view.
  const void* data() const {
    return storage ? static_cast<const char*>(storage->ptr) + offset * dtype_size(dtype) : nullptr;
  }
};

// What one backend (a session) owns on its device: its stream, cuBLASLt's workspace on it.
struct Exec {
  Device* dev = nullptr;
  std::shared_ptr<Stream> stream;
  cublasLtHandle_t lt = nullptr;
  Storage workspace;  // cuBLASLt's, kWorkspaceBytes
  bool tf32 = false;  // TW_CUDA_TF32=1: f32 GEMMs may use TF32 tensor cores
#if TW_CUDA_CUDNN
  cudnnHandle_t dnn = nullptr;  // on `stream`
#endif
  std::string last_op;  // the last op queued: named by errors found at a later sync
};
inline constexpr uint64_t kWorkspaceBytes = 32ull << 20;

class Kernels {
 public:
  Kernels(Exec* ex, std::string device, TableBackend<CuTensor>* table)
      : ex_(ex), device_(std::move(device)), table_(table) {}
  void set_metas(const std::vector<TensorMeta>* metas) { metas_ = metas; }

  Result<CuTensor> run(const ir::FromHost& op);
  Result<CuTensor> run(const ir::Full& op);
  Result<CuTensor> run(const ir::Arange& op);
  Result<CuTensor> run(const ir::Eye& op);
  Result<CuTensor> run(const ir::Unary& op);
  Result<CuTensor> run(const ir::Binary& op);
  Result<CuTensor> run(const ir::BinaryScalar& op);
  Result<CuTensor> run(const ir::Where& op);
  Result<CuTensor> run(const ir::Clamp& op);
  Result<CuTensor> run(const ir::MaskedFill& op);
  Result<CuTensor> run(const ir::Cast& op);
  Result<CuTensor> run(const ir::Reshape& op);
  Result<CuTensor> run(const ir::Permute& op);
  Result<CuTensor> run(const ir::Expand& op);
  Result<CuTensor> run(const ir::Slice& op);
  Result<CuTensor> run(const ir::Reduce& op);
  Result<CuTensor> run(const ir::MatMul& op);
  Result<CuTensor> run(const ir::Linear& op);
  Result<CuTensor> run(const ir::Softmax& op);
  Result<CuTensor> run(const ir::LayerNorm& op);
#if TW_CUDA_CUDNN
  Result<CuTensor> run(const ir::Conv2d& op);  // conv.cc: cuDNN
  Result<CuTensor> run(const ir::Conv2dBackwardInput& op);
  Result<CuTensor> run(const ir::Conv2dBackwardWeight& op);
  Result<CuTensor> run(const ir::Pool2d& op);
#endif

  // A contiguous copy of a view (reads of strided tensors, reshapes no view can express).
  Result<CuTensor> contiguous(const CuTensor& t);
  // A fresh contiguous tensor of meta m on this backend's stream.
  Result<CuTensor> fresh(const TensorMeta& m);

 private:
  const TensorMeta& out_meta() const { return (*metas_)[0]; }
  Result<const CuTensor*> in(const ir::In& i) const { return table_->tensor(i.id); }
  // One elementwise launch: `inputs` (up to three) read through strides against m's shape.
  Result<CuTensor> elementwise(EwArgs proto, const std::vector<const CuTensor*>& inputs,
                               const TensorMeta& m, const std::string& op);
  // Counts a launch and turns its error into a Status naming the op.
  Status launched(int err, const std::string& op);
  // t itself when contiguous from its buffer's start, else such a copy (kept in `keep`).
  Result<const CuTensor*> dense(const CuTensor& t, CuTensor& keep);
  // An input as a dense NCHW tensor from its buffer's start (cuDNN's descriptors): itself, or a
  // copy kept in `keep`.
  Result<const CuTensor*> nchw(const ir::In& id, CuTensor& keep);
  // One launch of the row kernel over dense x (a's op, rows, len, inner, eps and w, b set).
  Result<CuTensor> rows(RowsArgs a, const CuTensor& x, const std::string& op);
  Result<CuTensor> matmul(const CuTensor& a, const CuTensor& b, const CuTensor* bias, bool relu,
                          const std::string& op);
  // The compute class of dtype d.
  static int32_t cls_of(DType d);

  Exec* ex_;
  std::string device_;
  TableBackend<CuTensor>* table_;
  const std::vector<TensorMeta>* metas_ = nullptr;
};

}  // namespace tw::cuda

namespace tw {
template <>
struct TableTraits<cuda::CuTensor> {
  static TensorMeta meta(const cuda::CuTensor& t) { return t.meta(); }
  static uint64_t nbytes(const cuda::CuTensor& t) {
    return static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype);
  }
  static std::pair<const void*, size_t> storage(const cuda::CuTensor& t) {
    if (!t.storage) return {nullptr, 0};
    return {t.storage.get(), t.storage->size};
  }
};
}  // namespace tw
