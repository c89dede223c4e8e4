// Conv2d (forward, and both gradients) and Pool2d through cuDNN's convolution and pooling API
// (cuDNN 9), NCHW. The parameters come from plan_conv and plan_pool (plan.h, tested on the host).
// f32 computes with FMA math only (no TF32: exact f32, as the cpu backend), f64 in f64; each
// call takes the first algorithm cuDNN ranks for the problem among the deterministic ones
// (CUDNN_DETERMINISTIC) with FMA math that fit the workspace, so the bits repeat run to run; max
// pooling is CUDNN_POOLING_MAX_DETERMINISTIC and propagates NaN; average pooling counts padding
// as zeros (docs/ops.md). Built where CMake finds cuDNN (TW_CUDA_CUDNN); without it these ops are
// refused by name.
#if TW_CUDA_CUDNN
#include <cudnn.h>

#include <memory>

#include "backend/cuda/kernels.h"

namespace tw::cuda {
namespace {

Status dnn_check(cudnnStatus_t st, const std::string& what, const std::string& device) {
  if (st == CUDNN_STATUS_SUCCESS) return Status::OK();
  return internal_error(device + ": " + what + " failed: " + cudnnGetErrorString(st));
}

Result<cudnnDataType_t> dnn_type(DType d, const std::string& op, const std::string& device) {
  if (d == kF32) return CUDNN_DATA_FLOAT;
  if (d == kF64) return CUDNN_DATA_DOUBLE;
  return unsupported_dtype(op, d, device, "cuDNN runs it in f32 and f64 here");
}

// The descriptors of one call, destroyed with it.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  ~ConvDescs() {
    if (pool) cudnnDestroyPoolingDescriptor(pool);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
  }
};

Status tensor4d(cudnnTensorDescriptor_t* d, cudnnDataType_t t, int n, int c, int h, int w,
                const std::string& device) {
  TW_RETURN_NOT_OK(dnn_check(cudnnCreateTensorDescriptor(d), "tensor descriptor", device));
  return dnn_check(cudnnSetTensor4dDescriptor(*d, CUDNN_TENSOR_NCHW, t, n, c, h, w),
                   "cudnnSetTensor4dDescriptor", device);
}

Status conv_descs(ConvDescs& d, const ConvPlan& p, cudnnDataType_t t, const std::string& device) {
  TW_RETURN_NOT_OK(tensor4d(&d.x, t, p.n, p.c, p.h, p.w, device));
  TW_RETURN_NOT_OK(tensor4d(&d.y, t, p.n, p.k, p.p, p.q, device));
  TW_RETURN_NOT_OK(dnn_check(cudnnCreateFilterDescriptor(&d.w), "filter descriptor", device));
  TW_RETURN_NOT_OK(
      dnn_check(cudnnSetFilter4dDescriptor(d.w, t, CUDNN_TENSOR_NCHW, p.k, p.cg, p.r, p.s),
                "cudnnSetFilter4dDescriptor", device));
  TW_RETURN_NOT_OK(
      dnn_check(cudnnCreateConvolutionDescriptor(&d.conv), "convolution descriptor", device));
  TW_RETURN_NOT_OK(
      dnn_check(cudnnSetConvolution2dDescriptor(d.conv, p.pad_h, p.pad_w, p.stride_h, p.stride_w,
                                                p.dil_h, p.dil_w, CUDNN_CROSS_CORRELATION, t),
                "cudnnSetConvolution2dDescriptor", device));
  TW_RETURN_NOT_OK(dnn_check(cudnnSetConvolutionGroupCount(d.conv, p.groups),
                             "cudnnSetConvolutionGroupCount", device));
  return dnn_check(cudnnSetConvolutionMathType(d.conv, CUDNN_FMA_MATH),
                   "cudnnSetConvolutionMathType", device);
}

// The first of cuDNN's ranked algorithms that is deterministic, FMA-only and fits `limit`.
template <class Perf>
Result<Perf> pick(const Perf* perf, int count, uint64_t limit, const std::string& op,
                  const std::string& device) {
  for (int i = 0; i < count; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC &&
        perf[i].mathType == CUDNN_FMA_MATH && perf[i].memory <= limit) {
      return perf[i];
    }
  }
  return unimplemented(op + ": not supported by the " + device +
                       " backend for this problem (cuDNN offers no deterministic FMA algorithm "
                       "within the workspace)");
}

constexpr int kMaxAlgos = 16;

// cuDNN's alpha (1) and beta (0) in the descriptors' compute type.
struct AlphaBeta {
  explicit AlphaBeta(cudnnDataType_t t) : f64(t == CUDNN_DATA_DOUBLE) {}
  const void* one() const { return f64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return f64 ? static_cast<const void*>(&d0) : &f0; }
  bool f64;
  double d1 = 1, d0 = 0;
  float f1 = 1, f0 = 0;
};

}  // namespace

Result<const CuTensor*> Kernels::nchw(const ir::In& id, CuTensor& keep) {
  TW_ASSIGN_OR_RETURN(const CuTensor* t, in(id));
  return dense(*t, keep);
}

namespace {
// One cuDNN convolution call on `ex`'s stream: cuDNN's ranked algorithms (find(perf, &found)),
// the first deterministic FMA one that fits the workspace, then call(algo, alpha, beta).
template <class Perf, class Find, class Call>
Status conv_call(Exec* ex, cudnnDataType_t t, const std::string& op, const std::string& device,
                 Find find, Call call) {
  Perf perf[kMaxAlgos];
  int found = 0;
  TW_RETURN_NOT_OK(dnn_check(find(perf, &found), op + ": choosing an algorithm", device));
  TW_ASSIGN_OR_RETURN(Perf algo, pick(perf, found, kWorkspaceBytes, op, device));
  const AlphaBeta ab(t);
  TW_RETURN_NOT_OK(dnn_check(call(algo.algo, ab.one(), ab.zero()), op, device));
  ex->count_dispatch();
  ex->last_op = op;
  return Status::OK();
}
}  // namespace

Result<CuTensor> Kernels::run(const ir::Conv2d& op) {
  CuTensor kx, kw, kb;
  TW_ASSIGN_OR_RETURN(const CuTensor* x, nchw(op.x, kx));
  TW_ASSIGN_OR_RETURN(const CuTensor* w, nchw(op.w, kw));
  TW_ASSIGN_OR_RETURN(cudnnDataType_t t, dnn_type(x->dtype, "conv2d", device_));
  TW_ASSIGN_OR_RETURN(ConvPlan p, plan_conv(x->shape, w->shape, op.stride, op.padding, op.dilation,
                                            op.groups, "conv2d", device_));
  ConvDescs d;
  TW_RETURN_NOT_OK(conv_descs(d, p, t, device_));
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  void* y = out.storage->ptr;
  TW_RETURN_NOT_OK(conv_call<cudnnConvolutionFwdAlgoPerf_t>(
      ex_, t, "conv2d", device_,
      [&](cudnnConvolutionFwdAlgoPerf_t* perf, int* found) {
        return cudnnGetConvolutionForwardAlgorithm_v7(ex_->dnn, d.x, d.w, d.conv, d.y, kMaxAlgos,
                                                      found, perf);
      },
      [&](cudnnConvolutionFwdAlgo_t algo, const void* one, const void* zero) {
        return cudnnConvolutionForward(ex_->dnn, one, d.x, x->data(), d.w, w->data(), d.conv, algo,
                                       ex_->workspace->ptr, kWorkspaceBytes, zero, d.y, y);
      }));
  if (op.bias.id != 0) {
    TW_ASSIGN_OR_RETURN(const CuTensor* b, nchw(op.bias, kb));
    TW_RETURN_NOT_OK(tensor4d(&d.bias, t, 1, p.k, 1, 1, device_));
    const AlphaBeta ab(t);
    TW_RETURN_NOT_OK(
        dnn_check(cudnnAddTensor(ex_->dnn, ab.one(), d.bias, b->data(), ab.one(), d.y, y),
                  "cudnnAddTensor (conv2d bias)", device_));
    ex_->count_dispatch();
  }
  return out;
}

Result<CuTensor> Kernels::run(const ir::Conv2dBackwardInput& op) {
  CuTensor kg, kw;
  TW_ASSIGN_OR_RETURN(const CuTensor* g, nchw(op.grad, kg));
  TW_ASSIGN_OR_RETURN(const CuTensor* w, nchw(op.w, kw));
  const std::string name = "conv2d_backward_input";
  TW_ASSIGN_OR_RETURN(cudnnDataType_t t, dnn_type(g->dtype, name, device_));
  TW_ASSIGN_OR_RETURN(ConvPlan p, plan_conv(op.x_shape, w->shape, op.stride, op.padding,
                                            op.dilation, op.groups, name, device_));
  ConvDescs d;
  TW_RETURN_NOT_OK(conv_descs(d, p, t, device_));
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  TW_RETURN_NOT_OK(conv_call<cudnnConvolutionBwdDataAlgoPerf_t>(
      ex_, t, name, device_,
      [&](cudnnConvolutionBwdDataAlgoPerf_t* perf, int* found) {
        return cudnnGetConvolutionBackwardDataAlgorithm_v7(ex_->dnn, d.w, d.y, d.conv, d.x,
                                                           kMaxAlgos, found, perf);
      },
      [&](cudnnConvolutionBwdDataAlgo_t algo, const void* one, const void* zero) {
        return cudnnConvolutionBackwardData(ex_->dnn, one, d.w, w->data(), d.y, g->data(), d.conv,
                                            algo, ex_->workspace->ptr, kWorkspaceBytes, zero, d.x,
                                            out.storage->ptr);
      }));
  return out;
}

Result<CuTensor> Kernels::run(const ir::Conv2dBackwardWeight& op) {
  CuTensor kg, kx;
  TW_ASSIGN_OR_RETURN(const CuTensor* g, nchw(op.grad, kg));
  TW_ASSIGN_OR_RETURN(const CuTensor* x, nchw(op.x, kx));
  const std::string name = "conv2d_backward_weight";
  TW_ASSIGN_OR_RETURN(cudnnDataType_t t, dnn_type(g->dtype, name, device_));
  TW_ASSIGN_OR_RETURN(ConvPlan p, plan_conv(x->shape, op.w_shape, op.stride, op.padding,
                                            op.dilation, op.groups, name, device_));
  ConvDescs d;
  TW_RETURN_NOT_OK(conv_descs(d, p, t, device_));
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  TW_RETURN_NOT_OK(conv_call<cudnnConvolutionBwdFilterAlgoPerf_t>(
      ex_, t, name, device_,
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* perf, int* found) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(ex_->dnn, d.x, d.y, d.conv, d.w,
                                                             kMaxAlgos, found, perf);
      },
      [&](cudnnConvolutionBwdFilterAlgo_t algo, const void* one, const void* zero) {
        return cudnnConvolutionBackwardFilter(ex_->dnn, one, d.x, x->data(), d.y, g->data(), d.conv,
                                              algo, ex_->workspace->ptr, kWorkspaceBytes, zero, d.w,
                                              out.storage->ptr);
      }));
  return out;
}

// The pooling descriptors of x (NCHW, dense) and the pool's output: its dtype for cuDNN.
Result<int> Kernels::pool_descs(void* descs, const CuTensor& x, bool max,
                                const std::vector<int64_t>& kernel,
                                const std::vector<int64_t>& stride,
                                const std::vector<int64_t>& padding, const std::string& name) {
  ConvDescs& d = *static_cast<ConvDescs*>(descs);
  TW_ASSIGN_OR_RETURN(cudnnDataType_t t, dnn_type(x.dtype, name, device_));
  TW_ASSIGN_OR_RETURN(PoolPlan p, plan_pool(x.shape, kernel, stride, padding, name, device_));
  TW_RETURN_NOT_OK(tensor4d(&d.x, t, p.n, p.c, p.h, p.w, device_));
  TW_RETURN_NOT_OK(tensor4d(&d.y, t, p.n, p.c, p.p, p.q, device_));
  TW_RETURN_NOT_OK(dnn_check(cudnnCreatePoolingDescriptor(&d.pool), "pooling descriptor", device_));
  const cudnnPoolingMode_t mode =
      max ? CUDNN_POOLING_MAX_DETERMINISTIC : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  TW_RETURN_NOT_OK(
      dnn_check(cudnnSetPooling2dDescriptor(d.pool, mode, CUDNN_PROPAGATE_NAN, p.win_h, p.win_w,
                                            p.pad_h, p.pad_w, p.stride_h, p.stride_w),
                "cudnnSetPooling2dDescriptor", device_));
  return static_cast<int>(t);
}

Result<CuTensor> Kernels::run(const ir::Pool2d& op) {
  CuTensor kx;
  TW_ASSIGN_OR_RETURN(const CuTensor* x, nchw(op.x, kx));
  const bool max = op.kind == ir::PoolKind::kMax;
  const std::string name = max ? "max_pool2d" : "avg_pool2d";
  ConvDescs d;
  TW_ASSIGN_OR_RETURN(int t, pool_descs(&d, *x, max, op.kernel, op.stride, op.padding, name));
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  const AlphaBeta ab(static_cast<cudnnDataType_t>(t));
  TW_RETURN_NOT_OK(dnn_check(cudnnPoolingForward(ex_->dnn, d.pool, ab.one(), d.x, x->data(),
                                                 ab.zero(), d.y, out.storage->ptr),
                             "cudnnPoolingForward", device_));
  ex_->count_dispatch();
  ex_->last_op = name;
  return out;
}

// cuDNN's pooling backward takes the forward's output: recomputed here (deterministic max
// pooling, so the same as the forward gave).
Result<CuTensor> Kernels::run(const ir::Pool2dBackward& op) {
  CuTensor kx, kg;
  TW_ASSIGN_OR_RETURN(const CuTensor* x, nchw(op.x, kx));
  TW_ASSIGN_OR_RETURN(const CuTensor* g, nchw(op.grad, kg));
  const bool max = op.kind == ir::PoolKind::kMax;
  const std::string name = max ? "max_pool2d_backward" : "avg_pool2d_backward";
  if (g->dtype != x->dtype) {
    return unsupported_dtype(name, g->dtype, device_, "the gradient must have x's dtype here");
  }
  ConvDescs d;
  TW_ASSIGN_OR_RETURN(int t, pool_descs(&d, *x, max, op.kernel, op.stride, op.padding, name));
  TW_ASSIGN_OR_RETURN(CuTensor out, fresh(out_meta()));
  if (out.numel() == 0) return out;
  if (g->numel() == 0) {
    TW_RETURN_NOT_OK(ex_->dev->check(
        cudaMemsetAsync(out.storage->ptr, 0, out.numel() * dtype_size(out.dtype), ex_->stream->s),
        name));
    ex_->count_dispatch();
    return out;
  }
  TW_ASSIGN_OR_RETURN(CuTensor y, fresh(TensorMeta{g->shape, x->dtype}));
  const AlphaBeta ab(static_cast<cudnnDataType_t>(t));
  TW_RETURN_NOT_OK(dnn_check(cudnnPoolingForward(ex_->dnn, d.pool, ab.one(), d.x, x->data(),
                                                 ab.zero(), d.y, y.storage->ptr),
                             "cudnnPoolingForward", device_));
  TW_RETURN_NOT_OK(
      dnn_check(cudnnPoolingBackward(ex_->dnn, d.pool, ab.one(), d.y, y.storage->ptr, d.y,
                                     g->data(), d.x, x->data(), ab.zero(), d.x, out.storage->ptr),
                "cudnnPoolingBackward", device_));
  ex_->count_dispatch();
  ex_->last_op = name;
  return out;
}

}  // namespace tw::cuda
#endif  // TW_CUDA_CUDNN
