// The host side of the ops that move elements by position or draw them: Cat, Flip, Repeat and
// SliceAssign as copies through strided views (the elementwise kernel's copy, writing a strided
// output view where needed); Gather, IndexSelect, OneHot, ScatterAdd and IndexSelectBackward
// through the index kernels (index_math.h: one thread per output element, additions in index
// order, no atomics); Cumsum (a thread per line, in the cpu backend's order); the random ops
// (Philox, core/philox.h: the cpu backend's counters, so the same seed gives the same tensor);
// AdamStep (the cpu backend's rounded operations) and GeluBackward.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cuda/kernels.h"
#include "ir/convert.h"

namespace tw::cuda {
namespace {

int64_t norm_dim(int64_t d, size_t rank) { return d < 0 ? d + static_cast<int64_t>(rank) : d; }

Status float_only(const char* op, DType d, const std::string& device, bool halves = false) {
  if (d == kF32 || d == kF64 || (halves && (d == kF16 || d == kBF16))) return Status::OK();
  return unsupported_dtype(op, d, device, "as on the cpu backend: floating dtypes only");
}

}  // namespace

IndexCheck::~IndexCheck() {
  if (word) (void)cudaFreeHost(word);
}

Status IndexCheck::take(int64_t upto) {
  if (!word || word[1] == 0) {
    launches.erase(launches.begin(), launches.upper_bound(upto));
    return Status::OK();
  }
  const int64_t value = word[0], at = word[1];
  word[1] = 0;
  auto it = launches.find(at);
  const Launch l = it == launches.end() ? Launch{"an index op", 0, 0, false} : it->second;
  launches.erase(launches.begin(), launches.upper_bound(std::max(upto, at)));
  if (l.one_hot) {
    return out_of_range(l.op + ": value " + std::to_string(value) +
                        " out of range for num_classes " + std::to_string(l.size) +
                        " (found by the device after the op was queued)");
  }
  return out_of_range(l.op + ": index " + std::to_string(value) + " out of range for dim " +
                      std::to_string(l.dim) + " of size " + std::to_string(l.size) + " (expected " +
                      std::to_string(-l.size) + ".." + std::to_string(l.size - 1) +
                      "; found by the device after the op was queued)");
}

Result<std::shared_ptr<IndexCheck>> make_index_check(Device* dev) {
  auto c = std::make_shared<IndexCheck>();
  void* p = nullptr;
  TW_RETURN_NOT_OK(dev->check(cudaHostAlloc(&p, 2 * sizeof(int64_t), cudaHostAllocMapped),
                              "cudaHostAlloc (the index check word)"));
  c->word = static_cast<int64_t*>(p);
  c->word[0] = 0;
  c->word[1] = 0;
  return c;
}

Status Kernels::copy_into(const CuTensor& x, const CuTensor& dst, const std::string& op) {
  if (dst.numel() == 0) return Status::OK();
  // The destination view is operand kMaxOperands - 1 (out_at); operand 1 is unused.
  const View target = dst;
  TW_ASSIGN_OR_RETURN(EwArgs a,
                      elementwise_args(dst.shape, dst.dtype, {x, x, target}, op, device_));
  a.family = kEwUnary;
  a.kind = x.dtype == dst.dtype ? kCopyKind : kCastKind;
  a.cls = cls_of(x.dtype);
  a.out_at = 1;
  a.in[0] = x.data();
  a.in[1] = x.data();
  a.out = const_cast<void*>(dst.data());
  return launched(launch_elementwise(a, ex_->stream->s), op);
}

Result<CuTensor> Kernels::run(const ir::Cat& op) {
  const TensorMeta& m = out_meta();
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(m));
  if (out.numel() == 0) return out;
  const auto dim = static_cast<size_t>(norm_dim(op.dim, m.shape.size()));
  int64_t at = 0;
  for (const ir::In& i : op.xs) {
    TW_ASSIGN_OR_RETURN(const CuTensor* x, in(i));
    if (x->numel() == 0) {
      if (x->shape.size() == m.shape.size()) at += x->shape[dim];
      continue;
    }
    CuTensor dst = out;
    dst.shape[dim] = x->shape[dim];
    dst.offset = at * out.strides[dim];
    TW_RETURN_NOT_OK(copy_into(*x, dst, "cat"));
    at += x->shape[dim];
  }
  return out;
}

Result<CuTensor> Kernels::run(const ir::Flip& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  CuTensor v = *x;
  static_cast<View&>(v) = flip_view(*x, op.dims);
  return contiguous(v);
}

Result<CuTensor> Kernels::run(const ir::Repeat& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  CuTensor v = *x;
  static_cast<View&>(v) = repeat_view(*x, op.repeats);
  TW_ASSIGN_OR_RETURN(CuTensor tiled, contiguous(v));
  return strided::reshape_view(tiled, out_meta().shape);
}

Result<CuTensor> Kernels::run(const ir::SliceAssign& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const CuTensor* src, in(op.src));
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  TW_RETURN_NOT_OK(copy_into(*x, out, "slice_assign"));
  TW_ASSIGN_OR_RETURN(CuTensor dst, strided::slice_view(out, op.starts, op.ends, op.steps));
  TW_RETURN_NOT_OK(copy_into(*src, dst, "slice_assign"));
  return out;
}

Result<CuTensor> Kernels::index_launch(IxArgs a, const CuTensor* x, const CuTensor& index,
                                       const CuTensor* src, const TensorMeta& m,
                                       const std::string& op) {
  if (index.dtype != kI64 && index.dtype != kI32 && index.dtype != kU8) {
    return unsupported_dtype(op, index.dtype, device_, "index dtypes are i64, i32 and u8");
  }
  if (!ex_->index_check) {
    return unavailable(op + " on " + device_ +
                       ": no mapped host memory for the index checks (cudaHostAlloc failed)");
  }
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(m));
  if (a.n == 0) return out;
  if (a.size == 0 && a.mode != kIxOneHot) {
    return out_of_range(op + ": an index into dim " + std::to_string(a.dim) + " of size 0");
  }
  IndexCheck& check = *ex_->index_check;
  a.x = x ? x->data() : nullptr;
  a.index = index.data();
  a.src = src ? src->data() : nullptr;
  a.out = out.storage->ptr;
  a.x_dtype = static_cast<int32_t>(x ? x->dtype : m.dtype);
  a.index_dtype = static_cast<int32_t>(index.dtype);
  a.out_dtype = static_cast<int32_t>(m.dtype);
  a.bad = check.word;
  a.seq = ++check.seq;
  check.launches[a.seq] = IndexCheck::Launch{op, a.dim, a.size, a.mode == kIxOneHot};
  TW_RETURN_NOT_OK(launched(launch_index(a, ex_->stream->s), op));
  return out;
}

Result<CuTensor> Kernels::run(const ir::Gather& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const CuTensor* index, in(op.index));
  const TensorMeta& m = out_meta();
  TW_ASSIGN_OR_RETURN(IxArgs a, gather_args(*x, *index, op.dim, m.shape, "gather", device_));
  return index_launch(a, x, *index, nullptr, m, "gather");
}

Result<CuTensor> Kernels::run(const ir::IndexSelect& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const CuTensor* index, in(op.index));
  const TensorMeta& m = out_meta();
  if (x->shape.empty()) {
    return unsupported_dtype("index_select", x->dtype, device_, "a 0-d x is not supported here");
  }
  TW_ASSIGN_OR_RETURN(IxArgs a,
                      index_select_args(*x, *index, op.dim, m.shape, "index_select", device_));
  return index_launch(a, x, *index, nullptr, m, "index_select");
}

Result<CuTensor> Kernels::run(const ir::IndexSelectBackward& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* grad, in(op.grad));
  TW_ASSIGN_OR_RETURN(const CuTensor* index, in(op.index));
  const TensorMeta& m = out_meta();
  TW_RETURN_NOT_OK(float_only("index_select_backward", m.dtype, device_));
  TW_ASSIGN_OR_RETURN(IxArgs a, index_select_backward_args(*grad, *index, op.dim, m.shape,
                                                           "index_select_backward", device_));
  return index_launch(a, nullptr, *index, grad, m, "index_select_backward");
}

Result<CuTensor> Kernels::run(const ir::OneHot& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(IxArgs a, one_hot_args(*x, op.num_classes, "one_hot", device_));
  return index_launch(a, nullptr, *x, nullptr, out_meta(), "one_hot");
}

Result<CuTensor> Kernels::run(const ir::ScatterAdd& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  TW_ASSIGN_OR_RETURN(const CuTensor* index, in(op.index));
  TW_ASSIGN_OR_RETURN(const CuTensor* src, in(op.src));
  const TensorMeta& m = out_meta();
  if (m.dtype == kF16 || m.dtype == kBF16) {
    return unsupported_dtype("scatter_add", m.dtype, device_, "as on the cpu backend");
  }
  TW_ASSIGN_OR_RETURN(IxArgs a,
                      scatter_add_args(x, *index, *src, op.dim, m.shape, "scatter_add", device_));
  if (index->numel() == 0) a.len = 0;
  return index_launch(a, x, *index, src, m, "scatter_add");
}

Result<CuTensor> Kernels::run(const ir::Cumsum& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x0, in(op.x));
  if (x0->dtype == kF16 || x0->dtype == kBF16) {
    return unsupported_dtype("cumsum", x0->dtype, device_, "as on the cpu backend");
  }
  CuTensor keep;
  TW_ASSIGN_OR_RETURN(const CuTensor* x, dense(*x0, keep));
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  ScanArgs a = scan_args(x->shape, op.dim);
  a.x = x->data();
  a.out = out.storage->ptr;
  a.x_dtype = static_cast<int32_t>(x->dtype);
  a.out_dtype = static_cast<int32_t>(out.dtype);
  TW_RETURN_NOT_OK(launched(launch_scan(a, ex_->stream->s), "cumsum"));
  return out;
}

Result<CuTensor> Kernels::random(EwArgs a, const CuTensor* p, DType dtype, const std::string& op) {
  TW_RETURN_NOT_OK(float_only(op.c_str(), dtype, device_));
  a.family = kEwIota;
  a.cls = kClsF64;
  if (p) return elementwise(a, {p}, out_meta(), op);
  return elementwise(a, {}, out_meta(), op);
}

Result<CuTensor> Kernels::run(const ir::RandUniform& op) {
  EwArgs a;
  a.kind = kIotaUniform;
  a.s0.i = static_cast<int64_t>(op.seed);
  a.s0.f = static_cast<float>(op.low);
  a.s1.f = static_cast<float>(op.high) - a.s0.f;  // the range in the dtype, as the cpu backend
  a.s0.d = op.low;
  a.s1.d = op.high - op.low;
  return random(a, nullptr, op.dtype, "rand_uniform");
}

Result<CuTensor> Kernels::run(const ir::RandNormal& op) {
  EwArgs a;
  a.kind = kIotaNormal;
  a.s0.i = static_cast<int64_t>(op.seed);
  a.s0.d = op.mean;
  a.s1.d = op.std;
  return random(a, nullptr, op.dtype, "rand_normal");
}

Result<CuTensor> Kernels::run(const ir::Bernoulli& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* p, in(op.p));
  EwArgs a;
  a.kind = kIotaBernoulli;
  a.s0.i = static_cast<int64_t>(op.seed);
  return random(a, p, p->dtype, "bernoulli");
}

Result<CuTensor> Kernels::run(const ir::GeluBackward& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* g, in(op.grad));
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  TW_RETURN_NOT_OK(float_only("gelu_backward", x->dtype, device_, /*halves=*/true));
  EwArgs a;
  a.family = kEwUnary;
  a.kind = kGeluGradKind;
  a.cls = cls_of(x->dtype);
  return elementwise(a, {g, x}, out_meta(), "gelu_backward");
}

Result<std::vector<CuTensor>> Kernels::run(const ir::AdamStep& op) {
  const ir::In* ins[6] = {&op.param,      &op.grad,      &op.exp_avg,
                          &op.exp_avg_sq, &op.step_size, &op.bias2_sqrt};
  CuTensor keep[6];
  const CuTensor* t[6];
  for (int k = 0; k < 6; ++k) {
    TW_ASSIGN_OR_RETURN(const CuTensor* x, in(*ins[k]));
    TW_ASSIGN_OR_RETURN(t[k], dense(*x, keep[k]));
  }
  const DType d = t[0]->dtype;
  TW_RETURN_NOT_OK(float_only("adam_step", d, device_));
  AdamArgs a;
  a.n = t[0]->numel();
  a.dtype = static_cast<int32_t>(d);
  // The scalars as the unfused ops' attributes carry them (ir::Scalar, then the dtype).
  auto scalar = [](double v) {
    ScalarArg s;
    s.f = ir::scalar_to<float>(ir::Scalar(v));
    s.d = ir::scalar_to<double>(ir::Scalar(v));
    return s;
  };
  a.one_minus_beta1 = scalar(1.0 - op.beta1);
  a.beta2 = scalar(op.beta2);
  a.one_minus_beta2 = scalar(1.0 - op.beta2);
  a.eps = scalar(op.eps);
  a.decay = scalar(op.weight_decay);
  a.shrink = scalar(1.0 - op.lr * op.weight_decay);
  a.coupled = op.weight_decay != 0 && !op.decoupled;
  a.decoupled = op.weight_decay != 0 && op.decoupled;
  std::vector<CuTensor> outs;
  for (size_t k = 0; k < 3; ++k) {
    TW_ASSIGN_OR_RETURN(CuTensor o, fresh((*metas_)[k]));
    outs.push_back(std::move(o));
  }
  if (a.n == 0) return outs;
  a.p = t[0]->data();
  a.g = t[1]->data();
  a.m = t[2]->data();
  a.v = t[3]->data();
  a.step_size = t[4]->data();
  a.bias2_sqrt = t[5]->data();
  a.p_out = outs[0].storage->ptr;
  a.m_out = outs[1].storage->ptr;
  a.v_out = outs[2].storage->ptr;
  const Launch l = launch_1d(a.n);
  a.grid = l.grid;
  a.block = l.block;
  TW_RETURN_NOT_OK(launched(launch_adam(a, ex_->stream->s), "adam_step"));
  return outs;
}

Result<CuTensor> Kernels::adaptive(const ir::In& input, const Shape& x_shape, bool backward,
                                   const std::string& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* t0, in(input));
  TW_RETURN_NOT_OK(float_only(op.c_str(), t0->dtype, device_));
  CuTensor keep;
  TW_ASSIGN_OR_RETURN(const CuTensor* t, dense(*t0, keep));
  const TensorMeta& m = out_meta();
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(m));
  if (out.numel() == 0) return out;
  const Shape& small = backward ? t->shape : m.shape;  // [N, C, ho, wo]
  AdaptArgs a;
  a.planes = x_shape[0] * x_shape[1];
  a.h = x_shape[2];
  a.w = x_shape[3];
  a.ho = small[2];
  a.wo = small[3];
  a.in = t->data();
  a.out = out.storage->ptr;
  a.dtype = static_cast<int32_t>(t->dtype);
  a.backward = backward ? 1 : 0;
  const Launch l = launch_1d(out.numel());
  a.grid = l.grid;
  a.block = l.block;
  TW_RETURN_NOT_OK(launched(launch_adaptive(a, ex_->stream->s), op));
  return out;
}

Result<CuTensor> Kernels::run(const ir::AdaptiveAvgPool2d& op) {
  TW_ASSIGN_OR_RETURN(const CuTensor* x, in(op.x));
  return adaptive(op.x, x->shape, false, "adaptive_avg_pool2d");
}

Result<CuTensor> Kernels::run(const ir::AdaptiveAvgPool2dBackward& op) {
  return adaptive(op.grad, out_meta().shape, true, "adaptive_avg_pool2d_backward");
}

}  // namespace tw::cuda
