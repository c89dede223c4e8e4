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

#include <map>
#include <optional>
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

struct SdpaPlans;  // cuDNN's fused attention plans (attention_cudnn.cc)
// TW_CUDA_SDPA: f16/bf16 attention on cuDNN where it serves the case, else this backend's f32
// kernels (auto); cuDNN only, a refusal being the op's error (cudnn); the kernels only (kernel).
enum class SdpaMode : uint8_t { kAuto, kCudnn, kKernel };

// What one backend (a session) owns on its device: its stream, cuBLASLt's workspace on it.
struct Exec {
  Device* dev = nullptr;
  std::shared_ptr<Stream> stream;
  cublasLtHandle_t lt = nullptr;
  Storage workspace;  // cuBLASLt's, kWorkspaceBytes
  bool tf32 = false;  // TW_CUDA_TF32=1: f32 GEMMs may use TF32 tensor cores
#if TW_CUDA_CUDNN
  cudnnHandle_t dnn = nullptr;      // on `stream`
  std::shared_ptr<SdpaPlans> sdpa;  // made on first use, for `dnn`
#endif
  SdpaMode sdpa_mode = SdpaMode::kAuto;
  std::string last_op;  // the last op queued: named by errors found at a later sync
  std::shared_ptr<struct IndexCheck> index_check;  // null: index ops are refused
  uint64_t launches = 0;  // device work this backend queued (what a CUDA Graph holds of it)
  // A graph run's arena (recording or serving a capture; null: the pool), and inside a capture
  // the host memory its uploads read, kept with the CUDA Graph (cuda_backend.cc).
  std::shared_ptr<GraphArena> arena;
  struct CaptureHost* capture = nullptr;
  void count_dispatch() {
    ++launches;
    dev->count_dispatch();
  }
};

// Inside a capture: the pinned staging of the graph's uploads (from_host ops), taken before the
// capture began (one per upload, in op order: no cudaMallocHost inside it) and kept with the
// CUDA Graph, which copies from it at every launch.
struct CaptureHost {
  std::vector<std::shared_ptr<void>> staging;
  size_t next = 0;
};

// The index ops' checks on the device (launch.h, IxArgs): a bad value and its launch's sequence
// number land in host memory mapped for the device; a sync or read after it reports the error
// with the cpu backend's message (the op itself was queued without one).
struct IndexCheck {
  struct Launch {
    std::string op;
    int64_t dim = 0, size = 0;
    bool one_hot = false;
  };
  int64_t* word = nullptr;  // [value, sequence number (0: none)], cudaHostAllocMapped
  int64_t seq = 0;
  std::map<int64_t, Launch> launches;  // since the last check
  ~IndexCheck();
  // Called once the work up to launch `upto` is done: the error a launch found, if any; forgets
  // the launches it covers.
  Status take(int64_t upto);
};
Result<std::shared_ptr<IndexCheck>> make_index_check(Device* dev);
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
  Result<std::vector<CuTensor>> run(const ir::LayerNormBackward& op);
  // index.cc: movement by copies, the index ops, cumsum, the random ops, AdamStep, the gelu
  // gradient
  Result<CuTensor> run(const ir::Cat& op);
  Result<CuTensor> run(const ir::Flip& op);
  Result<CuTensor> run(const ir::Repeat& op);
  Result<CuTensor> run(const ir::SliceAssign& op);
  Result<CuTensor> run(const ir::Gather& op);
  Result<CuTensor> run(const ir::IndexSelect& op);
  Result<CuTensor> run(const ir::IndexSelectBackward& op);
  Result<CuTensor> run(const ir::OneHot& op);
  Result<CuTensor> run(const ir::ScatterAdd& op);
  Result<CuTensor> run(const ir::Cumsum& op);
  Result<CuTensor> run(const ir::RandUniform& op);
  Result<CuTensor> run(const ir::RandNormal& op);
  Result<CuTensor> run(const ir::Bernoulli& op);
  Result<CuTensor> run(const ir::GeluBackward& op);
  Result<std::vector<CuTensor>> run(const ir::AdamStep& op);
  Result<CuTensor> run(const ir::AdaptiveAvgPool2d& op);
  Result<CuTensor> run(const ir::AdaptiveAvgPool2dBackward& op);
  // attention.cc: fused kernels of this backend (attention.cu), in f32 (f16/bf16 converted)
  Result<CuTensor> run(const ir::ScaledDotProductAttention& op);
  Result<std::vector<CuTensor>> run(const ir::ScaledDotProductAttentionBackward& op);
#if TW_CUDA_CUDNN
  Result<CuTensor> run(const ir::Conv2d& op);  // conv.cc: cuDNN
  Result<CuTensor> run(const ir::Conv2dBackwardInput& op);
  Result<CuTensor> run(const ir::Conv2dBackwardWeight& op);
  Result<CuTensor> run(const ir::Pool2d& op);
  Result<CuTensor> run(const ir::Pool2dBackward& op);
#endif

  // A contiguous copy of a view (reads of strided tensors, reshapes no view can express).
  Result<CuTensor> contiguous(const CuTensor& t);
  // x copied (bits, or converted when the dtypes differ) into `dst`, a view of a fresh tensor's
  // buffer.
  Status copy_into(const CuTensor& x, const CuTensor& dst, const std::string& op);
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
  // One index-kernel launch (a's shapes and strides set) writing a fresh tensor of meta m.
  Result<CuTensor> index_launch(IxArgs a, const CuTensor* x, const CuTensor& index,
                                const CuTensor* src, const TensorMeta& m, const std::string& op);
#if TW_CUDA_CUDNN
  // conv.cc: the pooling descriptors (a ConvDescs) of x and the pool's output; cuDNN's dtype.
  Result<int> pool_descs(void* descs, const CuTensor& x, bool max,
                         const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride,
                         const std::vector<int64_t>& padding, const std::string& name);
#endif
  // t as a dense f32 tensor: itself, or a copy (converted from f16/bf16) kept in `keep`.
  Result<const CuTensor*> dense_f32(const CuTensor& t, CuTensor& keep);
  // t (f32) rounded to `dtype` (itself when it is f32).
  Result<CuTensor> round_to(CuTensor t, DType dtype, const std::string& op);
  // f16/bf16 attention (grad: its backward) on cuDNN (attention_cudnn.cc): the outputs, or none
  // where cuDNN does not serve the case (the f32 kernels run it), or the refusal as an error under
  // TW_CUDA_SDPA=cudnn.
  Result<std::optional<std::vector<CuTensor>>> try_cudnn(const ir::In& query, const ir::In& key,
                                                         const ir::In& value, const ir::In& mask,
                                                         bool causal, double scale,
                                                         const ir::In* grad, const std::string& op);
#if TW_CUDA_CUDNN
  Result<std::optional<std::vector<CuTensor>>> cudnn_attention(const CuTensor& q, const CuTensor& k,
                                                               const CuTensor& v,
                                                               const CuTensor* grad, double scale,
                                                               std::string* why);
#endif
  // Attention's argument block: q, k, v dense f32 (copies in keep[0..2]), the mask's strides.
  Result<AttnArgs> attention_args(const ir::In& query, const ir::In& key, const ir::In& value,
                                  const ir::In& mask, bool causal, double scale,
                                  const std::string& op, CuTensor (&keep)[4]);
  // AdaptiveAvgPool2d (backward: its gradient) of `input`, x of x_shape [N, C, H, W].
  Result<CuTensor> adaptive(const ir::In& input, const Shape& x_shape, bool backward,
                            const std::string& op);
  Result<CuTensor> random(EwArgs a, const CuTensor* p, DType dtype, const std::string& op);
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
