#include "backend/cuda/plan.h"

#include <algorithm>

namespace tw::cuda {

Launch launch_1d(int64_t n, int32_t block, int32_t max_blocks) {
  Launch l;
  l.block = block;
  const int64_t blocks = (n + block - 1) / block;
  l.grid = static_cast<int32_t>(std::clamp<int64_t>(blocks, 1, max_blocks));
  return l;
}

Result<EwArgs> elementwise_args(const Shape& out, DType out_dtype, const std::vector<View>& in,
                                const std::string& op, const std::string& device) {
  if (in.size() > static_cast<size_t>(kMaxOperands)) {
    return internal_error(op + ": " + std::to_string(in.size()) + " operands, at most " +
                          std::to_string(kMaxOperands));
  }
  std::vector<std::vector<int64_t>> strides;
  for (const View& v : in) strides.push_back(strided::broadcast_strides(v.shape, v.strides, out));
  TW_ASSIGN_OR_RETURN(strided::Indexing ix,
                      strided::merge_dims(out, strides, kMaxRank, op, device));
  EwArgs a;
  a.n = numel(out);
  a.out_dtype = static_cast<int32_t>(out_dtype);
  a.rank = static_cast<int32_t>(ix.shape.size());
  for (size_t d = 0; d < ix.shape.size(); ++d) {
    a.shape[d] = ix.shape[d];
    for (size_t k = 0; k < in.size(); ++k) a.strides[k][d] = ix.strides[k][d];
  }
  for (size_t k = 0; k < in.size(); ++k) a.in_dtype[k] = static_cast<int32_t>(in[k].dtype);
  const Launch l = launch_1d(a.n);
  a.grid = l.grid;
  a.block = l.block;
  return a;
}

Result<ReduceArgs> reduce_args(const View& x, const std::vector<int64_t>& dims,
                               const std::string& op, const std::string& device) {
  const size_t rank = x.shape.size();
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims) {  // (a 0-d tensor's dim 0 or -1 names the tensor itself)
    if (rank > 0) reduced[static_cast<size_t>(d < 0 ? d + static_cast<int64_t>(rank) : d)] = true;
  }
  Shape kept_shape, red_shape;
  std::vector<int64_t> kept_strides, red_strides;
  for (size_t d = 0; d < rank; ++d) {
    (reduced[d] ? red_shape : kept_shape).push_back(x.shape[d]);
    (reduced[d] ? red_strides : kept_strides).push_back(x.strides[d]);
  }
  TW_ASSIGN_OR_RETURN(strided::Indexing k,
                      strided::merge_dims(kept_shape, {kept_strides}, kMaxRank, op, device));
  TW_ASSIGN_OR_RETURN(strided::Indexing r,
                      strided::merge_dims(red_shape, {red_strides}, kMaxRank, op, device));
  ReduceArgs a;
  a.n_out = numel(kept_shape);
  a.n_red = numel(red_shape);
  a.kept_rank = static_cast<int32_t>(k.shape.size());
  a.red_rank = static_cast<int32_t>(r.shape.size());
  for (size_t d = 0; d < k.shape.size(); ++d) {
    a.kshape[d] = k.shape[d];
    a.kstride[d] = k.strides[0][d];
  }
  for (size_t d = 0; d < r.shape.size(); ++d) {
    a.rshape[d] = r.shape[d];
    a.rstride[d] = r.strides[0][d];
  }
  a.in_dtype = static_cast<int32_t>(x.dtype);
  a.grid = static_cast<int32_t>(std::clamp<int64_t>(a.n_out, 1, kMaxBlocks));
  return a;
}

uint32_t pointer_alignment(uint64_t byte_offset) {
  uint32_t a = 256;
  while (a > 1 && byte_offset % a != 0) a /= 2;
  return a;
}

namespace {

// The stored column-major matrix for a row-major operand whose element (i, j) of a rows x cols
// logical matrix sits at i * s_i + j * s_j, as cuBLASLt's operand for the logical transpose
// (cols x rows): in place when s_j == 1 (op N, ld s_i) or s_i == 1 (op T, ld s_j). Size-1 dims
// take whatever stride makes the read valid.
GemmOperand transposed_operand(int64_t rows, int64_t cols, int64_t s_i, int64_t s_j) {
  GemmOperand o;
  if (cols == 1) s_j = 1;
  if (rows == 1) s_i = std::max<int64_t>(cols, 1);
  if (s_j == 1 && s_i >= std::max<int64_t>(cols, 1)) {
    o.transpose = false;  // column-major cols x rows, ld s_i: the logical transpose as stored
    o.rows = cols;
    o.cols = rows;
    o.ld = s_i;
    return o;
  }
  if (rows > 1 && s_i == 1 && s_j >= rows) {
    o.transpose = true;  // column-major rows x cols, ld s_j, read transposed
    o.rows = rows;
    o.cols = cols;
    o.ld = s_j;
    return o;
  }
  o.copy = true;
  return o;
}

}  // namespace

Result<GemmPlan> plan_gemm(const View& a, const View& b, const Shape& out, bool tf32,
                           const std::string& op, const std::string& device) {
  GemmPlan p;
  switch (a.dtype) {
    case kF32: p.compute = tf32 ? GemmCompute::kTF32 : GemmCompute::kF32; break;
    case kF64: p.compute = GemmCompute::kF64; break;
    case kF16: p.compute = GemmCompute::kF16F32; break;
    case kBF16: p.compute = GemmCompute::kBF16F32; break;
    default:
      return unimplemented(op + " on " + std::string(dtype_name(a.dtype)) +
                           ": not supported by the " + device +
                           " backend (cuBLASLt multiplies floating-point matrices only); cast "
                           "it, or run it on a device whose backend supports it (such as cpu)");
  }
  const size_t ra = a.shape.size(), rb = b.shape.size(), ro = out.size();
  const int64_t M = out[ro - 2], N = out[ro - 1], K = a.shape[ra - 1];
  p.m = N;
  p.n = M;
  p.k = K;
  p.ldc = std::max<int64_t>(N, 1);
  p.batch_stride_c = M * N;
  // cuBLASLt's A: our B^T (N x K), from B[k, n] at k * b_k + n * b_n.
  p.a = transposed_operand(K, N, b.strides[rb - 2], b.strides[rb - 1]);
  // cuBLASLt's B: our A^T (K x M), from A[m, k] at m * a_m + k * a_k.
  p.b = transposed_operand(M, K, a.strides[ra - 2], a.strides[ra - 1]);
  p.a.offset = b.offset;
  p.b.offset = a.offset;
  // The batch dims, broadcast against the output's and merged: one dim (or none) runs as a
  // strided batch; more need both operands copied to the output's batch shape.
  const Shape batch(out.begin(), out.end() - 2);
  p.batch = numel(batch);
  auto batch_strides = [&](const View& v) {
    return strided::broadcast_strides(Shape(v.shape.begin(), v.shape.end() - 2),
                                      std::vector<int64_t>(v.strides.begin(), v.strides.end() - 2),
                                      batch);
  };
  TW_ASSIGN_OR_RETURN(
      strided::Indexing ix,
      strided::merge_dims(batch, {batch_strides(b), batch_strides(a)}, kMaxRank, op, device));
  if (ix.shape.size() > 1) {
    p.a.copy = p.b.copy = true;
  } else if (ix.shape.size() == 1) {
    p.a.batch_stride = ix.strides[0][0];
    p.b.batch_stride = ix.strides[1][0];
  }
  return p;
}

}  // namespace tw::cuda
