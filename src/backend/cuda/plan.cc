#include "backend/cuda/plan.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <utility>

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

namespace {

int64_t norm_dim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

Result<IxArgs> ix_base(const Shape& out, int64_t dim, const std::string& op,
                       const std::string& device) {
  if (out.size() > static_cast<size_t>(kMaxIxRank)) {
    return unimplemented(op + ": " + std::to_string(out.size()) + " dims, the " + device +
                         " backend's index kernels take at most " + std::to_string(kMaxIxRank));
  }
  IxArgs a;
  a.n = numel(out);
  a.rank = static_cast<int32_t>(out.size());
  a.dim = static_cast<int32_t>(norm_dim(dim, out.size()));
  for (size_t d = 0; d < out.size(); ++d) {
    a.shape[d] = out[d];
    a.ishape[d] = out[d];
  }
  const Launch l = launch_1d(a.n);
  a.grid = l.grid;
  a.block = l.block;
  return a;
}

}  // namespace

Result<IxArgs> gather_args(const View& x, const View& index, int64_t dim, const Shape& out,
                           const std::string& op, const std::string& device) {
  TW_ASSIGN_OR_RETURN(IxArgs a, ix_base(out, dim, op, device));
  a.mode = kIxGather;
  // A 0-d x is one element along its only "dim".
  a.size = x.shape.empty() ? 1 : x.shape[static_cast<size_t>(a.dim)];
  a.x_dim_stride = x.shape.empty() ? 0 : x.strides[static_cast<size_t>(a.dim)];
  for (size_t d = 0; d < out.size(); ++d) {
    a.xs[d] = static_cast<int32_t>(d) == a.dim ? 0 : x.strides[d];
    a.is[d] = index.strides[d];
  }
  return a;
}

Result<IxArgs> index_select_args(const View& x, const View& index, int64_t dim, const Shape& out,
                                 const std::string& op, const std::string& device) {
  TW_ASSIGN_OR_RETURN(IxArgs a, ix_base(out, dim, op, device));
  a.mode = kIxGather;
  a.size = x.shape.empty() ? 1 : x.shape[static_cast<size_t>(a.dim)];
  a.x_dim_stride = x.shape.empty() ? 0 : x.strides[static_cast<size_t>(a.dim)];
  const int64_t istride = index.strides.empty() ? 0 : index.strides[0];
  for (size_t d = 0; d < out.size(); ++d) {
    const bool along = static_cast<int32_t>(d) == a.dim;
    a.xs[d] = along ? 0 : x.strides[d];
    a.is[d] = along ? istride : 0;
  }
  return a;
}

Result<IxArgs> one_hot_args(const View& x, int64_t classes, const std::string& op,
                            const std::string& device) {
  Shape out = x.shape;
  out.push_back(classes);
  TW_ASSIGN_OR_RETURN(IxArgs a, ix_base(out, -1, op, device));
  a.mode = kIxOneHot;
  a.size = classes;
  for (size_t d = 0; d < x.shape.size(); ++d) a.is[d] = x.strides[d];
  return a;
}

Result<IxArgs> scatter_add_args(const View* x, const View& index, const View& src, int64_t dim,
                                const Shape& out, const std::string& op,
                                const std::string& device) {
  TW_ASSIGN_OR_RETURN(IxArgs a, ix_base(out, dim, op, device));
  a.mode = kIxScatter;
  const auto d0 = static_cast<size_t>(a.dim);
  a.size = out.empty() ? 1 : out[d0];
  a.len = out.empty() ? 1 : index.shape[d0];
  a.i_dim_stride = out.empty() ? 0 : index.strides[d0];
  a.s_dim_stride = out.empty() ? 0 : src.strides[d0];
  for (size_t d = 0; d < out.size(); ++d) {
    const bool along = d == d0;
    if (x) a.xs[d] = x->strides[d];
    a.is[d] = along ? 0 : index.strides[d];
    a.ss[d] = along ? 0 : src.strides[d];
    a.ishape[d] = index.shape[d];
  }
  return a;
}

Result<IxArgs> index_select_backward_args(const View& grad, const View& index, int64_t dim,
                                          const Shape& out, const std::string& op,
                                          const std::string& device) {
  TW_ASSIGN_OR_RETURN(IxArgs a, ix_base(out, dim, op, device));
  a.mode = kIxScatter;
  const auto d0 = static_cast<size_t>(a.dim);
  a.size = out.empty() ? 1 : out[d0];
  a.len = tw::numel(index.shape);
  a.i_dim_stride = index.strides.empty() ? 0 : index.strides[0];
  a.s_dim_stride = out.empty() ? 0 : grad.strides[d0];
  for (size_t d = 0; d < out.size(); ++d) a.ss[d] = d == d0 ? 0 : grad.strides[d];
  return a;
}

ScanArgs scan_args(const Shape& shape, int64_t dim) {
  ScanArgs a;
  const int64_t d0 = shape.empty() ? 0 : norm_dim(dim, shape.size());
  a.outer = 1;
  a.inner = 1;
  for (int64_t d = 0; d < d0; ++d) a.outer *= shape[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(d0) + 1; d < shape.size(); ++d) a.inner *= shape[d];
  a.len = shape.empty() ? 1 : shape[static_cast<size_t>(d0)];
  const Launch l = launch_1d(a.outer * a.inner, 128);
  a.grid = l.grid;
  a.block = l.block;
  return a;
}

View repeat_view(const View& x, const std::vector<int64_t>& repeats) {
  View v;
  v.dtype = x.dtype;
  v.offset = x.offset;
  const size_t lead = repeats.size() - x.shape.size();
  for (size_t d = 0; d < repeats.size(); ++d) {
    const bool is_new = d < lead;
    v.shape.push_back(repeats[d]);
    v.strides.push_back(0);
    v.shape.push_back(is_new ? 1 : x.shape[d - lead]);
    v.strides.push_back(is_new ? 0 : x.strides[d - lead]);
  }
  return v;
}

View flip_view(const View& x, const std::vector<int64_t>& dims) {
  View v = x;
  for (int64_t d0 : dims) {
    const auto d = static_cast<size_t>(norm_dim(d0, x.shape.size()));
    if (x.shape[d] == 0) continue;
    v.offset += (x.shape[d] - 1) * x.strides[d];
    v.strides[d] = -x.strides[d];
  }
  return v;
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

namespace {
// A value cuDNN's int parameters can hold, or the refusal naming it.
Status fits_int(int64_t v, const char* what, const std::string& op, const std::string& device) {
  if (v >= 0 && v <= INT32_MAX) return Status::OK();
  return unimplemented(op + ": " + what + " " + std::to_string(v) + " is not supported by the " +
                       device + " backend (cuDNN's descriptors take 32-bit ints)");
}
// (size + 2 pad - dilation (window - 1) - 1) / stride + 1: a window's positions along a dim.
int64_t window_positions(int64_t size, int64_t window, int64_t stride, int64_t pad,
                         int64_t dilation) {
  return (size + 2 * pad - dilation * (window - 1) - 1) / stride + 1;
}
}  // namespace

Result<ConvPlan> plan_conv(const Shape& x, const Shape& w, const std::vector<int64_t>& stride,
                           const std::vector<int64_t>& padding,
                           const std::vector<int64_t>& dilation, int64_t groups,
                           const std::string& op, const std::string& device) {
  const int64_t p = window_positions(x[2], w[2], stride[0], padding[0], dilation[0]);
  const int64_t q = window_positions(x[3], w[3], stride[1], padding[1], dilation[1]);
  const std::pair<int64_t, const char*> all[] = {
      {x[0], "batch"},           {x[1], "channels"},        {x[2], "height"},
      {x[3], "width"},           {w[0], "filters"},         {w[1], "filter channels"},
      {w[2], "kernel height"},   {w[3], "kernel width"},    {padding[0], "padding"},
      {padding[1], "padding"},   {stride[0], "stride"},     {stride[1], "stride"},
      {dilation[0], "dilation"}, {dilation[1], "dilation"}, {groups, "groups"},
      {p, "output height"},      {q, "output width"}};
  for (const auto& [v, what] : all) TW_RETURN_NOT_OK(fits_int(v, what, op, device));
  ConvPlan c;
  c.n = static_cast<int32_t>(x[0]);
  c.c = static_cast<int32_t>(x[1]);
  c.h = static_cast<int32_t>(x[2]);
  c.w = static_cast<int32_t>(x[3]);
  c.k = static_cast<int32_t>(w[0]);
  c.cg = static_cast<int32_t>(w[1]);
  c.r = static_cast<int32_t>(w[2]);
  c.s = static_cast<int32_t>(w[3]);
  c.pad_h = static_cast<int32_t>(padding[0]);
  c.pad_w = static_cast<int32_t>(padding[1]);
  c.stride_h = static_cast<int32_t>(stride[0]);
  c.stride_w = static_cast<int32_t>(stride[1]);
  c.dil_h = static_cast<int32_t>(dilation[0]);
  c.dil_w = static_cast<int32_t>(dilation[1]);
  c.groups = static_cast<int32_t>(groups);
  c.p = static_cast<int32_t>(p);
  c.q = static_cast<int32_t>(q);
  return c;
}

Result<PoolPlan> plan_pool(const Shape& x, const std::vector<int64_t>& kernel,
                           const std::vector<int64_t>& stride, const std::vector<int64_t>& padding,
                           const std::string& op, const std::string& device) {
  const int64_t p = window_positions(x[2], kernel[0], stride[0], padding[0], 1);
  const int64_t q = window_positions(x[3], kernel[1], stride[1], padding[1], 1);
  for (int64_t v : {x[0], x[1], x[2], x[3], kernel[0], kernel[1], p, q}) {
    TW_RETURN_NOT_OK(fits_int(v, "dim", op, device));
  }
  PoolPlan l;
  l.n = static_cast<int32_t>(x[0]);
  l.c = static_cast<int32_t>(x[1]);
  l.h = static_cast<int32_t>(x[2]);
  l.w = static_cast<int32_t>(x[3]);
  l.win_h = static_cast<int32_t>(kernel[0]);
  l.win_w = static_cast<int32_t>(kernel[1]);
  l.pad_h = static_cast<int32_t>(padding[0]);
  l.pad_w = static_cast<int32_t>(padding[1]);
  l.stride_h = static_cast<int32_t>(stride[0]);
  l.stride_w = static_cast<int32_t>(stride[1]);
  l.p = static_cast<int32_t>(p);
  l.q = static_cast<int32_t>(q);
  return l;
}

}  // namespace tw::cuda
