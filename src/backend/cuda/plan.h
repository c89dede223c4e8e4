// The host-side decisions of the cuda backend as pure functions of shapes, strides and dtypes, so
// that they are tested on every machine (tests/unit/cuda), GPU or not: launch configurations,
// the argument blocks of the elementwise and reduce kernels (operand strides against the output,
// merged dims), and the parameters of a cuBLASLt matmul (which operand is transposed, leading
// dims, batch strides, pointer alignments, compute type). No CUDA header here: context.cc and
// matmul.cc turn these numbers into API calls.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/launch.h"
#include "backend/strided_view.h"
#include "core/shape.h"
#include "core/status.h"
#include "tensorwire/dtype.h"

namespace tw::cuda {

// A tensor of the backend without its storage: shape, strides and offset in elements, dtype.
struct View {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  DType dtype = kF32;
  int64_t numel() const { return tw::numel(shape); }
  bool contiguous() const { return strided::is_contiguous(shape, strides); }
};

// One-dimensional launch: `block` threads a block, enough blocks for n elements but at most
// `max_blocks` (the kernels stride over the rest), at least one.
struct Launch {
  int32_t grid = 1, block = 256;
};
inline constexpr int32_t kMaxBlocks = 65535 * 4;
Launch launch_1d(int64_t n, int32_t block = 256, int32_t max_blocks = kMaxBlocks);

// The elementwise kernel's arguments for an output of `out` (contiguous) and up to three
// operand views broadcast against it; pointers are left for the caller. Refuses (naming op and
// device) more than kMaxRank unmergeable dims.
Result<EwArgs> elementwise_args(const Shape& out, DType out_dtype, const std::vector<View>& in,
                                const std::string& op, const std::string& device);

// The reduce kernel's arguments: x reduced over `dims` (empty: all; negative from the end).
Result<ReduceArgs> reduce_args(const View& x, const std::vector<int64_t>& dims,
                               const std::string& op, const std::string& device);

// ---- index ops (index_math.h) ----
// The index kernel's arguments (pointers and dtypes left for the caller, except the shapes and
// strides); `dim` may be negative (from the end). Refuse more than kMaxIxRank dims, naming op
// and device.
// Gather: out[c] = x[c with c[dim] = index[c]] (index of out's shape).
Result<IxArgs> gather_args(const View& x, const View& index, int64_t dim, const Shape& out,
                           const std::string& op, const std::string& device);
// IndexSelect: out[c] = x[c with c[dim] = index[c[dim]]] (index 1-d).
Result<IxArgs> index_select_args(const View& x, const View& index, int64_t dim, const Shape& out,
                                 const std::string& op, const std::string& device);
// OneHot: out[c, k] = x[c] == k, out of x.shape + [classes].
Result<IxArgs> one_hot_args(const View& x, int64_t classes, const std::string& op,
                            const std::string& device);
// ScatterAdd (x given: out = x plus src at index along dim) and IndexSelectBackward (x null, a
// 1-d index broadcast over grad's other dims: src = grad).
Result<IxArgs> scatter_add_args(const View* x, const View& index, const View& src, int64_t dim,
                                const Shape& out, const std::string& op, const std::string& device);
Result<IxArgs> index_select_backward_args(const View& grad, const View& index, int64_t dim,
                                          const Shape& out, const std::string& op,
                                          const std::string& device);
// Cumsum over dim of a contiguous x of `shape`.
ScanArgs scan_args(const Shape& shape, int64_t dim);
// Repeat as one copy: x read through `view` (x's strides over the interleaved shape [r0, s0, r1,
// s1, ...], 0 along each repeat) into a contiguous output of that shape, which is the repeated
// tensor's layout.
View repeat_view(const View& x, const std::vector<int64_t>& repeats);
// Flip as a view: negative strides along `dims` from the last element of each.
View flip_view(const View& x, const std::vector<int64_t>& dims);

// ---- cuBLASLt ----
// Row-major C[M, N] = A[M, K] B[K, N] (batched) runs as the column-major product
// C^T[N, M] = B^T[N, K] A^T[K, M]: cuBLASLt's "A" is our B and its "B" our A, each read in place
// when one of its two strides is 1 (transposed or not), else copied to contiguous first.
struct GemmOperand {
  bool transpose = false;              // cuBLASLt's op(X) = X^T
  int64_t rows = 0, cols = 0, ld = 0;  // the stored column-major matrix
  int64_t batch_stride = 0;            // elements between batch matrices (0: broadcast)
  int64_t offset = 0;                  // elements from the buffer's start
  bool copy = false;                   // must be made contiguous (and batch-expanded) first
};
enum class GemmCompute { kF32, kTF32, kF64, kF16F32, kBF16F32 };
struct GemmPlan {
  int64_t m = 0, n = 0, k = 0;  // of the column-major call: m = N, n = M, k = K
  GemmOperand a, b;             // cuBLASLt's A (our B) and B (our A)
  int64_t ldc = 0, batch_stride_c = 0, batch = 1;
  GemmCompute compute = GemmCompute::kF32;
};
// A [batch..., M, K] @ B [batch..., K, N] -> `out` (batch dims broadcast). `tf32`: allow TF32
// for f32 (TW_CUDA_TF32=1; exact f32 otherwise). Integer and bool dtypes are refused, naming
// op, dtype and device.
Result<GemmPlan> plan_gemm(const View& a, const View& b, const Shape& out, bool tf32,
                           const std::string& op, const std::string& device);
// The largest power of two (up to 256, cudaMalloc's alignment) dividing a byte offset: what
// cuBLASLt's heuristic is told of a pointer's alignment.
uint32_t pointer_alignment(uint64_t byte_offset);

// ---- cuDNN ----
// A 2-d convolution's parameters as cuDNN's 4-d descriptors take them (NCHW, ints): x [n, c, h,
// w], filter [k, c / groups, r, s], output [n, k, p, q]. Refuses (naming op and device) a dim
// beyond int32, which the descriptors cannot hold.
struct ConvPlan {
  int32_t n = 0, c = 0, h = 0, w = 0;   // x
  int32_t k = 0, cg = 0, r = 0, s = 0;  // filter (cg = c / groups)
  int32_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, groups = 1;
  int32_t p = 0, q = 0;  // output height and width
};
Result<ConvPlan> plan_conv(const Shape& x, const Shape& w, const std::vector<int64_t>& stride,
                           const std::vector<int64_t>& padding,
                           const std::vector<int64_t>& dilation, int64_t groups,
                           const std::string& op, const std::string& device);
// A 2-d pooling window as cudnnSetPooling2dDescriptor takes it, with x's and the output's dims.
struct PoolPlan {
  int32_t n = 0, c = 0, h = 0, w = 0;
  int32_t win_h = 0, win_w = 0, pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1;
  int32_t p = 0, q = 0;
};
Result<PoolPlan> plan_pool(const Shape& x, const std::vector<int64_t>& kernel,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                           const std::string& op, const std::string& device);

}  // namespace tw::cuda
