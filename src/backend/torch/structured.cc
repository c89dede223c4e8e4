// Reductions, matmul, movement, indexing, neural ops and their gradients through ATen, adapted to
// docs/ops.md where ATen differs: argmax/argmin of bool (ATen has no kernel), prod over several
// dims (ATen takes one), integral means (computed in double), index checks that report the
// first bad index in row-major order (ATen's messages differ), integer index dtypes (ATen's
// gather and scatter take i64 only), empty inputs (ATen's pooling refuses them; its convolution
// with no input channels gives a wrong shape) and layer_norm (composed; see there).
#include <algorithm>
#include <limits>
#include <numeric>

#include "backend/torch/torch_ops.h"
#include "ir/infer.h"

namespace tw::torch {
namespace {

using ir::ReduceKind;

int64_t norm_dim(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

Status index_error(const char* op, const BadIndex& bad, int64_t dim, int64_t size) {
  return out_of_range(std::string(op) + ": index " + std::to_string(bad.value) +
                      " out of range for dim " + std::to_string(dim) + " of size " +
                      std::to_string(size) + " (expected " + std::to_string(-size) + ".." +
                      std::to_string(size - 1) + ")");
}

at::Tensor zeros(const TensorMeta& m) { return at::zeros(sizes(m.shape), options(m.dtype)); }

}  // namespace

// ---- reductions ----

Result<at::Tensor> run(const ir::Reduce& op, const Ctx& ctx) {
  at::Tensor x = ctx.in(op.x);
  if (x.dim() == 0) x = x.reshape({1});  // a 0-d input reduces as one element
  const int64_t rank = x.dim();
  std::vector<int64_t> dims;
  if (op.dims.empty() || ctx.in(op.x).dim() == 0) {
    dims.resize(static_cast<size_t>(rank));
    std::iota(dims.begin(), dims.end(), int64_t{0});
  } else {
    for (int64_t d : op.dims) dims.push_back(norm_dim(d, rank));
  }
  const TensorMeta& out = ctx.out();
  at::Tensor r;  // reduced with keepdim; reshaped to the inferred shape below
  switch (op.kind) {
    case ReduceKind::kSum: r = at::sum(x, dims, true, scalar_type(out.dtype)); break;
    case ReduceKind::kMean:
      // Integral means are computed in double (docs/ops.md), then converted.
      r = x.is_floating_point()
              ? at::mean(x, dims, true)
              : at::mean(x.to(at::kDouble), dims, true).to(scalar_type(out.dtype));
      break;
    case ReduceKind::kProd: {
      // ATen's prod takes one dim: move the reduced dims last and flatten them into one.
      std::vector<int64_t> order, flat;
      int64_t reduced = 1;
      for (int64_t d = 0; d < rank; ++d) {
        if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
          reduced *= x.size(d);
        } else {
          order.push_back(d);
          flat.push_back(x.size(d));
        }
      }
      order.insert(order.end(), dims.begin(), dims.end());
      flat.push_back(reduced);
      r = at::prod(x.permute(order).reshape(flat), -1, false, scalar_type(out.dtype));
      break;
    }
    case ReduceKind::kMax: r = at::amax(x, dims, true); break;
    case ReduceKind::kMin: r = at::amin(x, dims, true); break;
    case ReduceKind::kArgmax:
    case ReduceKind::kArgmin: {
      // ATen has no bool kernel; as u8 the order (false < true) and the first occurrence hold.
      const at::Tensor v = x.scalar_type() == at::kBool ? x.to(at::kByte) : x;
      const bool all = op.dims.empty();
      const at::Tensor src = all ? v.reshape({-1}) : v;
      const int64_t d = all ? 0 : dims.at(0);
      r = op.kind == ReduceKind::kArgmax ? at::argmax(src, d, true) : at::argmin(src, d, true);
      break;
    }
    case ReduceKind::kCount: return internal_error("reduce: unknown kind");
  }
  return r.reshape(sizes(out.shape));
}

Result<at::Tensor> run(const ir::Cumsum& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  return at::cumsum(x, x.dim() == 0 ? 0 : norm_dim(op.dim, x.dim()), scalar_type(ctx.out().dtype));
}

// ---- linear algebra ----

Result<at::Tensor> run(const ir::MatMul& op, const Ctx& ctx) {
  const at::Tensor &a = ctx.in(op.a), &b = ctx.in(op.b);
  // bf16 x bf16 gives f32 (docs/ops.md): the exact products of the bf16 values summed in f32.
  if (a.scalar_type() == at::kBFloat16) return at::matmul(a.to(at::kFloat), b.to(at::kFloat));
  return at::matmul(a, b);
}

// ---- movement ----

Result<at::Tensor> run(const ir::Reshape& op, const Ctx& ctx) {
  return ctx.in(op.x).reshape(sizes(ctx.out().shape));
}

Result<at::Tensor> run(const ir::Permute& op, const Ctx& ctx) {
  return ctx.in(op.x).permute(op.dims);
}

Result<at::Tensor> run(const ir::Expand& op, const Ctx& ctx) {
  return ctx.in(op.x).expand(sizes(ctx.out().shape));
}

namespace {

// The slice of t as a view (shares t's storage), bounds normalised as inference does.
Result<at::Tensor> slice_view(const at::Tensor& t, const std::vector<int64_t>& starts,
                              const std::vector<int64_t>& ends, const std::vector<int64_t>& steps) {
  std::vector<int64_t> size(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> stride(t.strides().begin(), t.strides().end());
  int64_t offset = t.storage_offset();
  bool empty = false;
  for (size_t d = 0; d < size.size(); ++d) {
    TW_ASSIGN_OR_RETURN(ir::SliceDim s,
                        ir::normalize_slice(starts.at(d), ends.at(d), steps.at(d), size[d]));
    empty |= s.size == 0;
    offset += s.start * stride[d];
    size[d] = s.size;
    stride[d] *= s.step;
  }
  if (empty) return at::empty(size, t.options());
  return t.as_strided(size, stride, offset);
}

}  // namespace

Result<at::Tensor> run(const ir::Slice& op, const Ctx& ctx) {
  return slice_view(ctx.in(op.x), op.starts, op.ends, op.steps);
}

Result<at::Tensor> run(const ir::SliceAssign& op, const Ctx& ctx) {
  at::Tensor out = ctx.in(op.x).clone(at::MemoryFormat::Contiguous);
  TW_ASSIGN_OR_RETURN(at::Tensor region, slice_view(out, op.starts, op.ends, op.steps));
  if (region.numel() > 0) region.copy_(ctx.in(op.src));  // src broadcasts to the region
  return out;
}

Result<at::Tensor> run(const ir::Cat& op, const Ctx& ctx) {
  std::vector<at::Tensor> xs;
  for (const ir::In& in : op.xs) xs.push_back(ctx.in(in));
  return at::cat(xs, norm_dim(op.dim, xs.at(0).dim()));
}

Result<at::Tensor> run(const ir::Flip& op, const Ctx& ctx) {
  if (op.dims.empty()) return ctx.in(op.x);
  return at::flip(ctx.in(op.x), op.dims);
}

Result<at::Tensor> run(const ir::Repeat& op, const Ctx& ctx) {
  return ctx.in(op.x).repeat(op.repeats);
}

// ---- indexing ----

Result<at::Tensor> run(const ir::Gather& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const at::Tensor& index = ctx.in(op.index);
  const int64_t dim = x.dim() == 0 ? 0 : norm_dim(op.dim, x.dim());
  const int64_t size = x.dim() == 0 ? 1 : x.size(dim);
  if (index.numel() == 0) return at::empty(sizes(ctx.out().shape), x.options());
  const BadIndex bad = find_bad_index(index, size);
  if (bad.pos >= 0) return index_error("gather", bad, dim, size);
  return at::gather(x, dim, wrap_index(index, size));
}

Result<at::Tensor> run(const ir::ScatterAdd& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const at::Tensor& index = ctx.in(op.index);
  const int64_t dim = x.dim() == 0 ? 0 : norm_dim(op.dim, x.dim());
  const int64_t size = x.dim() == 0 ? 1 : x.size(dim);
  if (index.numel() == 0) return x;
  const BadIndex bad = find_bad_index(index, size);
  if (bad.pos >= 0) return index_error("scatter_add", bad, dim, size);
  return at::scatter_add(x, dim, wrap_index(index, size), ctx.in(op.src));
}

Result<at::Tensor> run(const ir::IndexSelect& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const at::Tensor& index = ctx.in(op.index);
  const int64_t dim = x.dim() == 0 ? 0 : norm_dim(op.dim, x.dim());
  const int64_t size = x.dim() == 0 ? 1 : x.size(dim);
  const BadIndex bad = find_bad_index(index, size);
  if (bad.pos >= 0) return index_error("index_select", bad, dim, size);
  return at::index_select(x, dim, wrap_index(index, size));
}

Result<at::Tensor> run(const ir::IndexSelectBackward& op, const Ctx& ctx) {
  const at::Tensor& grad = ctx.in(op.grad);
  const at::Tensor& index = ctx.in(op.index);
  const TensorMeta& out = ctx.out();
  const int64_t rank = static_cast<int64_t>(op.x_shape.size());
  const int64_t dim = rank == 0 ? 0 : norm_dim(op.dim, rank);
  const int64_t size = rank == 0 ? 1 : op.x_shape[static_cast<size_t>(dim)];
  const BadIndex bad = find_bad_index(index, size);
  if (bad.pos >= 0) return index_error("index_select_backward", bad, dim, size);
  if (rank == 0) return grad.clone();
  return at::zeros(sizes(out.shape), options(out.dtype))
      .index_add_(dim, wrap_index(index, size), grad);
}

Result<at::Tensor> run(const ir::OneHot& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const BadIndex bad = find_bad_index(x, op.num_classes, /*negatives=*/false);
  if (bad.pos >= 0) {
    return out_of_range("one_hot: value " + std::to_string(bad.value) +
                        " out of range for num_classes " + std::to_string(op.num_classes));
  }
  return at::one_hot(x.to(at::kLong), op.num_classes);
}

// ---- neural ----

Result<at::Tensor> run(const ir::Softmax& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const int64_t dim = x.dim() == 0 ? 0 : norm_dim(op.dim, x.dim());
  return op.log ? at::log_softmax(x, dim) : at::softmax(x, dim);
}

Result<at::Tensor> run(const ir::Conv2d& op, const Ctx& ctx) {
  const TensorMeta& out = ctx.out();
  const at::Tensor& x = ctx.in(op.x);
  const at::Tensor& w = ctx.in(op.w);
  c10::optional<at::Tensor> bias;
  if (ctx.has(op.bias)) bias = ctx.in(op.bias);
  if (numel(out.shape) == 0) return at::empty(sizes(out.shape), options(out.dtype));
  if (x.numel() == 0 || w.numel() == 0) {
    // No input channels (or an empty kernel): every output is its bias. ATen's convolution
    // gets the shape of this case wrong.
    if (!bias) return zeros(out);
    return bias->reshape({1, -1, 1, 1}).expand(sizes(out.shape)).contiguous();
  }
  return at::conv2d(x, w, bias, op.stride, op.padding, op.dilation, op.groups);
}

Result<at::Tensor> run(const ir::Pool2d& op, const Ctx& ctx) {
  const TensorMeta& out = ctx.out();
  const at::Tensor& x = ctx.in(op.x);
  if (numel(out.shape) == 0) return at::empty(sizes(out.shape), options(out.dtype));
  if (op.kind == ir::PoolKind::kMax) {
    return at::max_pool2d(x, op.kernel, op.stride, op.padding, {1, 1}, false);
  }
  // Padding counts as zeros: the divisor is always kH * kW (count_include_pad).
  return at::avg_pool2d(x, op.kernel, op.stride, op.padding, false, true, c10::nullopt);
}

Result<at::Tensor> run(const ir::AdaptiveAvgPool2d& op, const Ctx& ctx) {
  const TensorMeta& out = ctx.out();
  if (numel(out.shape) == 0) return at::empty(sizes(out.shape), options(out.dtype));
  return at::adaptive_avg_pool2d(ctx.in(op.x), op.output_size);
}

// y = (x - mean) / sqrt(var + eps) * weight + bias, composed as docs/ops.md and the CPU kernel
// state it: mean and biased variance in two passes in double, then (x - mean) * rstd in x's
// dtype. ATen's fused kernel computes x * rstd - mean * rstd instead, which cancels badly when
// the variance is small next to eps (a constant f32 row came out 4e-5 away from its bias).
Result<at::Tensor> run(const ir::LayerNorm& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const TensorMeta& out = ctx.out();
  if (x.numel() == 0) return at::empty(sizes(out.shape), options(out.dtype));
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - op.normalized_dims; d < x.dim(); ++d) dims.push_back(d);
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor mean = at::mean(xd, dims, true);
  const at::Tensor var = at::mean(at::square(xd - mean), dims, true);
  const at::Tensor rstd = at::reciprocal(at::sqrt(var + op.eps)).to(x.scalar_type());
  at::Tensor y = at::mul(x - mean.to(x.scalar_type()), rstd);
  if (ctx.has(op.weight)) y.mul_(ctx.in(op.weight));
  if (ctx.has(op.bias)) y.add_(ctx.in(op.bias));
  return y;
}

// LayerNorm's gradients as the CPU kernel states them: the row statistics as above, then every
// quantity in double, each output rounded once. xhat = (x - mean) * rstd, gh = grad * weight:
// dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), dweight = sum(grad * xhat) and dbias =
// sum(grad) over the leading dims.
Result<std::vector<at::Tensor>> run(const ir::LayerNormBackward& op, const Ctx& ctx) {
  const at::Tensor& x = ctx.in(op.x);
  const int64_t k = op.normalized_dims;
  const std::vector<int64_t> normalized(x.sizes().end() - k, x.sizes().end());
  if (x.numel() == 0) {
    return std::vector<at::Tensor>{at::zeros_like(x), at::zeros(normalized, x.options()),
                                   at::zeros(normalized, x.options())};
  }
  std::vector<int64_t> dims, batch;
  for (int64_t d = 0; d < x.dim(); ++d) (d >= x.dim() - k ? dims : batch).push_back(d);
  const at::Tensor xd = x.to(at::kDouble);
  const at::Tensor g = ctx.in(op.grad).to(at::kDouble);
  const at::Tensor mean = at::mean(xd, dims, true);
  const at::Tensor rstd =
      at::reciprocal(at::sqrt(at::mean(at::square(xd - mean), dims, true) + op.eps));
  const at::Tensor xhat = (xd - mean) * rstd;
  const at::Tensor gh = ctx.has(op.weight) ? g * ctx.in(op.weight).to(at::kDouble) : g;
  const at::Tensor dx =
      rstd * (gh - at::mean(gh, dims, true) - xhat * at::mean(gh * xhat, dims, true));
  // at::sum over an empty dim list would sum everything: no leading dims, nothing to add.
  const at::Tensor dw = batch.empty() ? g * xhat : at::sum(g * xhat, batch);
  const at::Tensor db = batch.empty() ? g : at::sum(g, batch);
  const at::ScalarType t = x.scalar_type();
  return std::vector<at::Tensor>{dx.to(t).contiguous(), dw.to(t).contiguous(),
                                 db.to(t).contiguous()};
}

// ---- gradients ----

Result<at::Tensor> run(const ir::Conv2dBackwardInput& op, const Ctx& ctx) {
  const TensorMeta& out = ctx.out();
  const at::Tensor& grad = ctx.in(op.grad);
  const at::Tensor& w = ctx.in(op.w);
  if (numel(out.shape) == 0) return at::empty(sizes(out.shape), options(out.dtype));
  if (grad.numel() == 0 || w.numel() == 0) return zeros(out);  // no tap reaches x
  // ATen takes x itself; only its shape matters for this gradient.
  const at::Tensor x = at::empty(sizes(op.x_shape), grad.options());
  auto r = at::convolution_backward(grad, x, w, c10::nullopt, op.stride, op.padding, op.dilation,
                                    false, {0, 0}, op.groups, {true, false, false});
  return std::get<0>(r);
}

Result<at::Tensor> run(const ir::Conv2dBackwardWeight& op, const Ctx& ctx) {
  const TensorMeta& out = ctx.out();
  const at::Tensor& grad = ctx.in(op.grad);
  const at::Tensor& x = ctx.in(op.x);
  if (numel(out.shape) == 0) return at::empty(sizes(out.shape), options(out.dtype));
  if (grad.numel() == 0 || x.numel() == 0) return zeros(out);
  // ATen takes w itself; only its shape matters for this gradient.
  const at::Tensor w = at::empty(sizes(op.w_shape), grad.options());
  auto r = at::convolution_backward(grad, x, w, c10::nullopt, op.stride, op.padding, op.dilation,
                                    false, {0, 0}, op.groups, {false, true, false});
  return std::get<1>(r);
}

Result<at::Tensor> run(const ir::Pool2dBackward& op, const Ctx& ctx) {
  const TensorMeta& out = ctx.out();
  const at::Tensor& grad = ctx.in(op.grad);
  const at::Tensor& x = ctx.in(op.x);
  if (numel(out.shape) == 0) return at::empty(sizes(out.shape), options(out.dtype));
  if (op.kind == ir::PoolKind::kMax) {
    // The positions the forward pass chose (first of equal values, NaN wins), as Pool2d.
    const auto fwd =
        at::max_pool2d_with_indices(x, op.kernel, op.stride, op.padding, {1, 1}, false);
    return at::max_pool2d_with_indices_backward(grad, x, op.kernel, op.stride, op.padding, {1, 1},
                                                false, std::get<1>(fwd));
  }
  return at::avg_pool2d_backward(grad, x, op.kernel, op.stride, op.padding, false, true,
                                 c10::nullopt);
}

Result<at::Tensor> run(const ir::AdaptiveAvgPool2dBackward& op, const Ctx& ctx) {
  const TensorMeta& out = ctx.out();
  const at::Tensor& grad = ctx.in(op.grad);
  if (numel(out.shape) == 0) return at::empty(sizes(out.shape), options(out.dtype));
  // ATen takes the forward input; only its shape matters for this gradient.
  const at::Tensor x = at::empty(sizes(out.shape), grad.options());
  return at::_adaptive_avg_pool2d_backward(grad, x);
}

// ---- attention ----
// Composed from ATen (torch 1.13 has no fused attention): the [..., Tq, Tk] probabilities are
// materialised. A row with no attended key gives zeros (softmax over only -inf would give NaN).

namespace {

// Which pairs (query, key) are attended, broadcast to the scores [..., Tq, Tk].
at::Tensor attended_pairs(const at::Tensor& s, const at::Tensor& mask, bool causal) {
  const int64_t tq = s.size(-2), tk = s.size(-1);
  at::Tensor allowed = at::ones({tq, tk}, s.options().dtype(at::kBool));
  if (causal) allowed = at::tril(allowed);
  if (mask.defined()) allowed = at::logical_and(allowed, mask);
  return allowed.expand(s.sizes());
}

// softmax(scale q k^T) over the attended keys, zero rows where none is attended.
at::Tensor attention_probs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& mask,
                           bool causal, double scale) {
  at::Tensor s = at::matmul(q, k.transpose(-2, -1)).mul(scale);
  const at::Tensor allowed = attended_pairs(s, mask, causal);
  s = s.masked_fill(at::logical_not(allowed), -std::numeric_limits<double>::infinity());
  at::Tensor p = at::softmax(s, -1);
  return at::where(allowed.any(-1, true), p, at::zeros({}, p.options()));
}

at::Tensor optional_in(const Ctx& ctx, ir::In in) {
  return ctx.has(in) ? ctx.in(in) : at::Tensor();
}

}  // namespace

Result<at::Tensor> run(const ir::ScaledDotProductAttention& op, const Ctx& ctx) {
  const at::Tensor& q = ctx.in(op.query);
  const at::Tensor& v = ctx.in(op.value);
  const TensorMeta& out = ctx.out();
  if (v.numel() == 0 || ctx.in(op.key).size(-2) == 0) {
    return at::zeros(sizes(out.shape), options(out.dtype));
  }
  const at::Tensor p =
      attention_probs(q, ctx.in(op.key), optional_in(ctx, op.mask), op.causal, op.scale);
  return at::matmul(p, v).contiguous();
}

Result<std::vector<at::Tensor>> run(const ir::ScaledDotProductAttentionBackward& op,
                                    const Ctx& ctx) {
  const at::Tensor& g = ctx.in(op.grad);
  const at::Tensor& q = ctx.in(op.query);
  const at::Tensor& k = ctx.in(op.key);
  const at::Tensor& v = ctx.in(op.value);
  // No key: nothing reaches q, k or v. (An empty grad with keys, as with Dv = 0, still gives
  // dS = P (0 - 0): NaN where P is, which reaches d query and d key.)
  if (k.size(-2) == 0) {
    return std::vector<at::Tensor>{at::zeros_like(q), at::zeros_like(k), at::zeros_like(v)};
  }
  const at::Tensor p = attention_probs(q, k, optional_in(ctx, op.mask), op.causal, op.scale);
  const at::Tensor dv = at::matmul(p.transpose(-2, -1), g);
  const at::Tensor dp = at::matmul(g, v.transpose(-2, -1));
  // A pair not attended has no score gradient: 0, also where dp is not finite.
  const at::Tensor ds =
      p.mul(dp.sub(p.mul(dp).sum(-1, true)))
          .mul(op.scale)
          .masked_fill(at::logical_not(attended_pairs(dp, optional_in(ctx, op.mask), op.causal)),
                       0.0);
  return std::vector<at::Tensor>{at::matmul(ds, k).contiguous(),
                                 at::matmul(ds.transpose(-2, -1), q).contiguous(), dv.contiguous()};
}

// ---- quantization: tensorwire's CPU kernels through the host runner (torch_ops.h says why) ----
namespace {
template <class O>
Result<at::Tensor> on_host(const O& op, const Ctx& ctx) {
  O host = op;
  host.fields([&](const char*, auto& f) {
    using F = std::decay_t<decltype(f)>;
    if constexpr (std::is_same_v<F, ir::In>) {
      if (f.id != 0) f = ctx.host().put(ctx.in(f));
    } else if constexpr (std::is_same_v<F, ir::Out>) {
      f = ctx.host().fresh();
    }
  });
  return ctx.host().run(host);
}
}  // namespace

Result<at::Tensor> run(const ir::Quantize& op, const Ctx& ctx) { return on_host(op, ctx); }
Result<at::Tensor> run(const ir::Dequantize& op, const Ctx& ctx) { return on_host(op, ctx); }
Result<at::Tensor> run(const ir::PackBlocks& op, const Ctx& ctx) { return on_host(op, ctx); }
Result<at::Tensor> run(const ir::UnpackBlocks& op, const Ctx& ctx) { return on_host(op, ctx); }
Result<at::Tensor> run(const ir::LinearBlocks& op, const Ctx& ctx) { return on_host(op, ctx); }
Result<at::Tensor> run(const ir::LinearInt8& op, const Ctx& ctx) { return on_host(op, ctx); }

}  // namespace tw::torch
