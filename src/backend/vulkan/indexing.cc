// The structured ops through one shader (shaders/index.comp, a mode per op family): creation
// (Arange, Eye, RandUniform, Bernoulli), copies into views (SliceAssign, Cat) and through views
// (Flip, Repeat: the elementwise copy of a view), index reads (Gather, IndexSelect, OneHot) and
// in-order accumulations (ScatterAdd, IndexSelectBackward, Cumsum: a thread per row, adding in
// index order, so no float atomics and the cpu backend's order).
//
// Index values come from data: each indexing op reads its index tensor back and checks every
// value first (the cpu backend's message for the first bad one), so the shader only reads in
// range. That read waits for the device (a sync per indexing op).
#include <cstring>

#include "backend/vulkan/kernels.h"
#include "ir/infer.h"

namespace tw::vk {
namespace {

int64_t norm_dim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

void split64(uint64_t v, uint32_t* lo_hi) {
  lo_hi[0] = static_cast<uint32_t>(v);
  lo_hi[1] = static_cast<uint32_t>(v >> 32);
}
void split_double(double d, uint32_t* lo_hi) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof d);
  split64(bits, lo_hi);
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof f);
  return u;
}

Status index_error(const std::string& op, int64_t value, int64_t dim, int64_t size) {
  return out_of_range(op + ": index " + std::to_string(value) + " out of range for dim " +
                      std::to_string(dim) + " of size " + std::to_string(size) + " (expected " +
                      std::to_string(-size) + ".." + std::to_string(size - 1) + ")");
}

// s without dim d.
template <class V>
V drop(const V& s, int64_t d) {
  V r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (static_cast<int64_t>(i) != d) r.push_back(s[i]);
  }
  return r;
}

}  // namespace

Result<std::vector<int64_t>> Kernels::index_values(const VkTensor& index) {
  std::vector<int64_t> v(static_cast<size_t>(index.numel()));
  if (v.empty()) return v;
  VkTensor keep;
  TW_ASSIGN_OR_RETURN(const VkTensor* dense_index, dense(index, keep));
  const uint64_t es = dtype_size(index.dtype);
  TW_ASSIGN_OR_RETURN(
      Buffer bytes, ctx_->download(*dense_index->storage, dense_index->offset * es, v.size() * es));
  for (size_t i = 0; i < v.size(); ++i) {
    const auto* at = reinterpret_cast<const uint8_t*>(bytes.data()) + i * es;
    switch (index.dtype) {
      case kI32: {
        int32_t x;
        std::memcpy(&x, at, 4);
        v[i] = x;
        break;
      }
      case kU8:
      case kBool: v[i] = *at; break;
      case kI8: v[i] = static_cast<int8_t>(*at); break;
      default: std::memcpy(&v[i], at, 8); break;
    }
  }
  return v;
}

Result<VkTensor> Kernels::index_dispatch(int32_t mode, IndexParams& p, const TensorMeta& m,
                                         const VkTensor* out, const VkTensor* a, const VkTensor* b,
                                         int32_t cls, int64_t threads, const std::string& op) {
  if (threads >= (int64_t{1} << 31)) {
    return unimplemented(op + " of " + std::to_string(threads) +
                         " elements: not supported by the " + device_ +
                         " backend (at most 2^31 - 1 per dispatch)");
  }
  VkTensor result;
  if (out) {
    result = *out;
  } else {
    TW_ASSIGN_OR_RETURN(result, fresh(m));
  }
  if (threads == 0) return result;
  p.n = static_cast<uint32_t>(threads);
  const bool f64 = cls == kClsF64 || m.dtype == kF64 || (a && a->dtype == kF64);
  if (f64 && !ctx_->info().f64) {
    return unsupported_dtype(op, kF64, device_, "the device lacks shaderFloat64");
  }
  const std::vector<int32_t> spec = {mode, static_cast<int32_t>(a ? a->dtype : m.dtype),
                                     static_cast<int32_t>(b ? b->dtype : kI64),
                                     static_cast<int32_t>(m.dtype), cls};
  const std::vector<Binding> bindings = {
      {result.storage.get()}, {a ? a->storage.get() : nullptr}, {b ? b->storage.get() : nullptr}};
  const uint32_t groups =
      static_cast<uint32_t>(std::min<int64_t>((threads + kGroupSize - 1) / kGroupSize, 65535));
  // One shader variant per mode (vulkan.cmake): "index_<mode>".
  TW_RETURN_NOT_OK(
      ctx_->dispatch("index_" + std::to_string(mode), f64, spec, bindings, &p, sizeof p, groups));
  return result;
}

namespace {
// The shape and the three operands' strides (a, b, out) with dims merged, into p.
Status fill_dims(IndexParams& p, const Shape& shape, const std::vector<int64_t>& sa,
                 const std::vector<int64_t>& sb, const std::vector<int64_t>& so,
                 const std::string& op) {
  const std::vector<Operand> ops = {{nullptr, sa}, {nullptr, sb}, {nullptr, so}};
  TW_ASSIGN_OR_RETURN(Indexing ix, merge_dims(shape, ops, op));
  p.rank = static_cast<uint32_t>(ix.shape.size());
  for (size_t d = 0; d < ix.shape.size(); ++d) {
    p.shape[d] = static_cast<uint32_t>(ix.shape[d]);
    p.sa[d] = static_cast<int32_t>(ix.strides[0][d]);
    p.sb[d] = static_cast<int32_t>(ix.strides[1][d]);
    p.so[d] = static_cast<int32_t>(ix.strides[2][d]);
  }
  return Status::OK();
}
std::vector<int64_t> zeros(size_t n) { return std::vector<int64_t>(n, 0); }
}  // namespace

// ---- creation ----

Result<VkTensor> Kernels::run(const ir::Arange& op) {
  const TensorMeta& m = out_meta();
  IndexParams p;
  int32_t cls = kClsI64;
  if (is_integral(op.dtype) && !op.start.is_float && !op.step.is_float) {
    split64(static_cast<uint64_t>(op.start.i), &p.u[0]);
    split64(static_cast<uint64_t>(op.step.i), &p.u[2]);
  } else {
    // fma(i, step, start) in double, as the cpu backend: one rounding.
    if (!ctx_->info().f64) {
      return unsupported_dtype("arange", op.dtype, device_,
                               "a float arange computes in double; the device lacks "
                               "shaderFloat64");
    }
    cls = kClsF64;
    split_double(op.start.as_double(), &p.u[0]);
    split_double(op.step.as_double(), &p.u[2]);
  }
  return index_dispatch(kIxArange, p, m, nullptr, nullptr, nullptr, cls, numel(m.shape), "arange");
}

Result<VkTensor> Kernels::run(const ir::Eye& op) {
  IndexParams p;
  p.u[0] = static_cast<uint32_t>(op.m);
  return index_dispatch(kIxEye, p, out_meta(), nullptr, nullptr, nullptr, kClsI64,
                        numel(out_meta().shape), "eye");
}

Result<VkTensor> Kernels::run(const ir::RandUniform& op) {
  const TensorMeta& m = out_meta();
  if (m.dtype != kF32 && m.dtype != kF64) {
    return unsupported_dtype("rand_uniform", m.dtype, device_, "f32 and f64 only");
  }
  IndexParams p;
  split64(op.seed, &p.u[0]);
  if (m.dtype == kF64) {
    split_double(op.low, &p.u[2]);
    split_double(op.high - op.low, &p.u[4]);
  } else {
    const float low = static_cast<float>(op.low);
    p.u[2] = float_bits(low);
    p.u[4] = float_bits(static_cast<float>(op.high) - low);
  }
  // The shader's variant with doubles where the device has them: f32's fused low + range * u
  // computes in double there (shaders/index.comp, fused()).
  const int32_t cls = m.dtype == kF64 || ctx_->info().f64 ? kClsF64 : kClsF32;
  return index_dispatch(kIxRandUniform, p, m, nullptr, nullptr, nullptr, cls, numel(m.shape),
                        "rand_uniform");
}

Result<VkTensor> Kernels::run(const ir::RandNormal& op) {
  const TensorMeta& m = out_meta();
  if (m.dtype != kF32 && m.dtype != kF64) {
    return unsupported_dtype("rand_normal", m.dtype, device_, "f32 and f64 only");
  }
  if (!ctx_->info().f64) {
    return unsupported_dtype("rand_normal", m.dtype, device_,
                             "Box-Muller runs in double; the device lacks shaderFloat64");
  }
  IndexParams p;
  split64(op.seed, &p.u[0]);
  split_double(op.mean, &p.u[2]);
  split_double(op.std, &p.u[4]);
  return index_dispatch(kIxRandNormal, p, m, nullptr, nullptr, nullptr, kClsF64, numel(m.shape),
                        "rand_normal");
}

Result<VkTensor> Kernels::run(const ir::Bernoulli& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.p));
  if (x->dtype != kF32 && x->dtype != kF64) {
    return unsupported_dtype("bernoulli", x->dtype, device_, "f32 and f64 only");
  }
  if (!ctx_->info().f64) {
    return unsupported_dtype("bernoulli", x->dtype, device_,
                             "its uniforms are doubles; the device lacks shaderFloat64");
  }
  IndexParams p;
  split64(op.seed, &p.u[0]);
  const TensorMeta& m = out_meta();
  TW_RETURN_NOT_OK(fill_dims(p, m.shape, broadcast_operand(*x, m.shape).strides,
                             zeros(m.shape.size()), contiguous_strides(m.shape), "bernoulli"));
  p.oa = static_cast<uint32_t>(x->offset);
  return index_dispatch(kIxBernoulli, p, m, nullptr, x, nullptr, kClsF64, numel(m.shape),
                        "bernoulli");
}

// ---- copies into and through views ----

Result<VkTensor> Kernels::copy_into(const VkTensor& dst, const VkTensor& src,
                                    const std::string& op) {
  IndexParams p;
  TW_RETURN_NOT_OK(fill_dims(p, dst.shape, broadcast_operand(src, dst.shape).strides,
                             zeros(dst.shape.size()), dst.strides, op));
  p.oa = static_cast<uint32_t>(src.offset);
  p.oo = static_cast<uint32_t>(dst.offset);
  return index_dispatch(kIxCopy, p, dst.meta(), &dst, &src, nullptr, kClsI64, dst.numel(), op);
}

Result<VkTensor> Kernels::run(const ir::Flip& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  VkTensor v = *x;
  for (int64_t d : op.dims) {
    if (x->shape.empty()) break;  // a 0-d tensor has nothing to flip
    d = norm_dim(d, x->shape.size());
    if (x->shape[d] == 0) return fresh(out_meta());
    v.offset += (x->shape[d] - 1) * x->strides[d];
    v.strides[d] = -x->strides[d];
  }
  return contiguous(v);
}

Result<VkTensor> Kernels::run(const ir::Repeat& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  // x seen as [r0, s0, r1, s1, ...] with stride 0 over each repeat dim, copied contiguous.
  VkTensor v = *x;
  v.shape.clear();
  v.strides.clear();
  const size_t rank = op.repeats.size(), lead = rank - x->shape.size();
  for (size_t i = 0; i < rank; ++i) {
    v.shape.insert(v.shape.end(), {op.repeats[i], i < lead ? 1 : x->shape[i - lead]});
    v.strides.insert(v.strides.end(), {0, i < lead ? 0 : x->strides[i - lead]});
  }
  if (v.numel() == 0) return fresh(out_meta());
  TW_ASSIGN_OR_RETURN(VkTensor out, contiguous(v));
  out.shape = out_meta().shape;
  out.strides = contiguous_strides(out.shape);
  return out;
}

Result<VkTensor> Kernels::run(const ir::Cat& op) {
  const TensorMeta m = out_meta();
  TW_ASSIGN_OR_RETURN(VkTensor out, fresh(m));
  if (out.numel() == 0) return out;
  const int64_t dim = norm_dim(op.dim, m.shape.size());
  int64_t at = 0;
  for (const ir::In& i : op.xs) {
    TW_ASSIGN_OR_RETURN(const VkTensor* t, in(i));
    if (t->numel() > 0) {
      VkTensor region = out;
      region.shape = t->shape;
      region.offset = at * out.strides[dim];
      TW_RETURN_NOT_OK(copy_into(region, *t, "cat").status());
    }
    at += t->shape[dim];
  }
  return out;
}

Result<VkTensor> Kernels::run(const ir::SliceAssign& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const VkTensor* src, in(op.src));
  if (x->numel() == 0) return fresh(out_meta());
  TW_ASSIGN_OR_RETURN(VkTensor out, contiguous(*x));  // always a new buffer
  TW_ASSIGN_OR_RETURN(VkTensor region, strided::slice_view(out, op.starts, op.ends, op.steps));
  if (region.numel() == 0) return out;
  TW_RETURN_NOT_OK(copy_into(region, *src, "slice_assign").status());
  return out;
}

// ---- index reads ----

Status Kernels::check_indices(const VkTensor& index, int64_t size, int64_t dim,
                              const std::string& op) {
  TW_ASSIGN_OR_RETURN(std::vector<int64_t> v, index_values(index));
  for (int64_t x : v) {
    if (x < -size || x >= size) return index_error(op, x, dim, size);
  }
  return Status::OK();
}

Result<VkTensor> Kernels::run(const ir::Gather& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const VkTensor* index, in(op.index));
  const TensorMeta m = out_meta();
  const int64_t dim = x->shape.empty() ? 0 : norm_dim(op.dim, x->shape.size());
  const int64_t size = x->shape.empty() ? 1 : x->shape[dim];
  if (numel(m.shape) == 0) return fresh(m);
  TW_RETURN_NOT_OK(check_indices(*index, size, dim, "gather"));
  IndexParams p;
  std::vector<int64_t> xs = x->strides;
  if (!xs.empty()) xs[dim] = 0;
  p.size = static_cast<uint32_t>(size);
  p.da = x->shape.empty() ? 0 : static_cast<int32_t>(x->strides[dim]);
  // x's strides over the index's positions (a dim of x larger than the index's is read up to
  // the index's size), with dim's contribution from the index value.
  TW_RETURN_NOT_OK(
      fill_dims(p, m.shape, xs, index->strides, contiguous_strides(m.shape), "gather"));
  p.oa = static_cast<uint32_t>(x->offset);
  p.ob = static_cast<uint32_t>(index->offset);
  return index_dispatch(kIxGather, p, m, nullptr, x, index, kClsI64, numel(m.shape), "gather");
}

Result<VkTensor> Kernels::run(const ir::IndexSelect& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const VkTensor* index, in(op.index));
  const TensorMeta m = out_meta();
  const int64_t dim = x->shape.empty() ? 0 : norm_dim(op.dim, x->shape.size());
  const int64_t size = x->shape.empty() ? 1 : x->shape[dim];
  TW_RETURN_NOT_OK(check_indices(*index, size, dim, "index_select"));
  if (numel(m.shape) == 0) return fresh(m);
  IndexParams p;
  std::vector<int64_t> xs = x->strides, is = zeros(m.shape.size());
  if (!xs.empty()) {
    xs[dim] = 0;
    is[dim] = index->shape.empty() ? 0 : index->strides[0];
  }
  p.size = static_cast<uint32_t>(size);
  p.da = x->shape.empty() ? 0 : static_cast<int32_t>(x->strides[dim]);
  TW_RETURN_NOT_OK(fill_dims(p, m.shape, xs, is, contiguous_strides(m.shape), "index_select"));
  p.oa = static_cast<uint32_t>(x->offset);
  p.ob = static_cast<uint32_t>(index->offset);
  return index_dispatch(kIxGather, p, m, nullptr, x, index, kClsI64, numel(m.shape),
                        "index_select");
}

Result<VkTensor> Kernels::run(const ir::OneHot& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(std::vector<int64_t> v, index_values(*x));
  for (int64_t c : v) {
    if (c < 0 || c >= op.num_classes) {
      return out_of_range("one_hot: value " + std::to_string(c) + " out of range for num_classes " +
                          std::to_string(op.num_classes));
    }
  }
  const TensorMeta m = out_meta();
  IndexParams p;
  // x's dims merged first, then the class dim last (its coordinate is the class).
  const std::vector<Operand> xo = {{nullptr, x->strides}};
  TW_ASSIGN_OR_RETURN(Indexing ix, merge_dims(x->shape, xo, "one_hot"));
  if (ix.shape.size() + 1 > static_cast<size_t>(kMaxRank)) {
    return unimplemented("one_hot of a view of " + std::to_string(ix.shape.size()) +
                         " unmergeable dims: not supported by the " + device_ + " backend");
  }
  p.rank = static_cast<uint32_t>(ix.shape.size() + 1);
  for (size_t d = 0; d < ix.shape.size(); ++d) {
    p.shape[d] = static_cast<uint32_t>(ix.shape[d]);
    p.sa[d] = static_cast<int32_t>(ix.strides[0][d]);
  }
  p.shape[ix.shape.size()] = static_cast<uint32_t>(op.num_classes);
  p.dim = static_cast<uint32_t>(ix.shape.size());
  p.oa = static_cast<uint32_t>(x->offset);
  return index_dispatch(kIxOneHot, p, m, nullptr, x, nullptr, kClsI64, numel(m.shape), "one_hot");
}

// ---- in-order accumulations ----

Result<VkTensor> Kernels::run(const ir::ScatterAdd& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const VkTensor* index, in(op.index));
  TW_ASSIGN_OR_RETURN(const VkTensor* src, in(op.src));
  const TensorMeta m = out_meta();
  TW_ASSIGN_OR_RETURN(int32_t cls, cls_of(m.dtype, "scatter_add"));
  if (x->numel() == 0) return fresh(m);
  TW_ASSIGN_OR_RETURN(VkTensor out, contiguous(*x));
  if (index->numel() == 0) return out;
  const size_t rank = m.shape.size();
  const int64_t dim = rank == 0 ? 0 : norm_dim(op.dim, rank);
  const int64_t size = rank == 0 ? 1 : m.shape[dim];
  TW_RETURN_NOT_OK(check_indices(*index, size, dim, "scatter_add"));
  IndexParams p;
  // A thread per position of the index outside dim, adding along dim in order.
  const Shape rows = rank == 0 ? Shape{} : drop(index->shape, dim);
  TW_RETURN_NOT_OK(fill_dims(p, rows, rank == 0 ? src->strides : drop(src->strides, dim),
                             rank == 0 ? index->strides : drop(index->strides, dim),
                             rank == 0 ? out.strides : drop(out.strides, dim), "scatter_add"));
  p.len = static_cast<uint32_t>(rank == 0 ? 1 : index->shape[dim]);
  p.da = rank == 0 ? 0 : static_cast<int32_t>(src->strides[dim]);
  p.db = rank == 0 ? 0 : static_cast<int32_t>(index->strides[dim]);
  p.dout = rank == 0 ? 0 : static_cast<int32_t>(out.strides[dim]);
  p.size = static_cast<uint32_t>(size);
  p.oa = static_cast<uint32_t>(src->offset);
  p.ob = static_cast<uint32_t>(index->offset);
  return index_dispatch(kIxScatter, p, m, &out, src, index, cls, numel(rows), "scatter_add");
}

Result<VkTensor> Kernels::run(const ir::IndexSelectBackward& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* grad, in(op.grad));
  TW_ASSIGN_OR_RETURN(const VkTensor* index, in(op.index));
  const TensorMeta m = out_meta();
  const std::string name = "index_select_backward";
  TW_ASSIGN_OR_RETURN(int32_t cls, cls_of(m.dtype, name));
  const size_t rank = m.shape.size();
  const int64_t dim = rank == 0 ? 0 : norm_dim(op.dim, rank);
  const int64_t size = rank == 0 ? 1 : m.shape[dim];
  TW_RETURN_NOT_OK(check_indices(*index, size, dim, name));
  TW_ASSIGN_OR_RETURN(VkTensor out, filled(m, m.dtype, ir::Scalar(int64_t{0})));
  if (out.numel() == 0 || grad->numel() == 0) return out;
  IndexParams p;
  const Shape rows = rank == 0 ? Shape{} : drop(m.shape, dim);
  TW_RETURN_NOT_OK(fill_dims(p, rows, rank == 0 ? grad->strides : drop(grad->strides, dim),
                             zeros(rows.size()), rank == 0 ? out.strides : drop(out.strides, dim),
                             name));
  p.len = static_cast<uint32_t>(index->numel());
  p.da = rank == 0 ? 0 : static_cast<int32_t>(grad->strides[dim]);
  p.db = index->shape.empty() ? 0 : static_cast<int32_t>(index->strides[0]);
  p.dout = rank == 0 ? 0 : static_cast<int32_t>(out.strides[dim]);
  p.size = static_cast<uint32_t>(size);
  p.oa = static_cast<uint32_t>(grad->offset);
  p.ob = static_cast<uint32_t>(index->offset);
  return index_dispatch(kIxScatter, p, m, &out, grad, index, cls, numel(rows), name);
}

Result<VkTensor> Kernels::run(const ir::Cumsum& op) {
  TW_ASSIGN_OR_RETURN(const VkTensor* x, in(op.x));
  const TensorMeta m = out_meta();
  const bool fl = is_float(x->dtype);
  if (fl && !ctx_->info().f64) {
    return unsupported_dtype("cumsum", x->dtype, device_,
                             "a float cumsum accumulates in double; the device lacks "
                             "shaderFloat64");
  }
  const size_t rank = x->shape.size();
  const int64_t dim = rank == 0 ? 0 : norm_dim(op.dim, rank);
  const Shape rows = rank == 0 ? Shape{} : drop(x->shape, dim);
  const std::vector<int64_t> os = contiguous_strides(m.shape);
  IndexParams p;
  TW_RETURN_NOT_OK(fill_dims(p, rows, rank == 0 ? x->strides : drop(x->strides, dim),
                             zeros(rows.size()), rank == 0 ? os : drop(os, dim), "cumsum"));
  p.len = static_cast<uint32_t>(rank == 0 ? 1 : x->shape[dim]);
  p.da = rank == 0 ? 0 : static_cast<int32_t>(x->strides[dim]);
  p.dout = rank == 0 ? 0 : static_cast<int32_t>(os[dim]);
  p.oa = static_cast<uint32_t>(x->offset);
  const int64_t threads = p.len == 0 ? 0 : numel(rows);
  return index_dispatch(kIxCumsum, p, m, nullptr, x, nullptr, fl ? kClsF64 : kClsI64, threads,
                        "cumsum");
}

}  // namespace tw::vk
