// LayerNorm over the last `normalized_dims` dims: y = (x - mean) / sqrt(var + eps) * w + b with
// the biased variance. Mean and variance are two passes in double (for f32 too: the f32 result
// then differs from the exact one by the final rounding only), each summed in 8 fixed partial
// sums that vectorise. One row per task: results do not depend on the thread count.
#include <cmath>

#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

constexpr int kPartials = 8;

double combine(const double (&acc)[kPartials]) {
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

template <class T>
double row_sum(const T* x, int64_t n) {
  double acc[kPartials] = {};
  const int64_t body = n / kPartials * kPartials;
  for (int64_t i = 0; i < body; i += kPartials) {
    for (int j = 0; j < kPartials; ++j) acc[j] += static_cast<double>(x[i + j]);
  }
  for (int64_t i = body; i < n; ++i) acc[i - body] += static_cast<double>(x[i]);
  return combine(acc);
}

template <class T>
double row_sq_dev(const T* x, int64_t n, double mean) {
  double acc[kPartials] = {};
  const int64_t body = n / kPartials * kPartials;
  for (int64_t i = 0; i < body; i += kPartials) {
    for (int j = 0; j < kPartials; ++j) {
      const double d = static_cast<double>(x[i + j]) - mean;
      acc[j] += d * d;
    }
  }
  for (int64_t i = body; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mean;
    acc[i - body] += d * d;
  }
  return combine(acc);
}

template <class T>
void layer_norm(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t n, double eps) {
  parallel_chunks(rows, rows_per_chunk(n), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      const double mean = row_sum(xr, n) / static_cast<double>(n);
      const double var = row_sq_dev(xr, n, mean) / static_cast<double>(n);
      const T m = static_cast<T>(mean);
      const T rstd = static_cast<T>(1.0 / std::sqrt(var + eps));
      if (w && b) {
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * rstd * w[i] + b[i];
      } else if (w) {
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * rstd * w[i];
      } else if (b) {
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * rstd + b[i];
      } else {
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m) * rstd;
      }
    }
  });
}

}  // namespace

Status run(const ir::LayerNorm& op, KernelContext& ctx) {
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  int64_t n = 1;
  for (int64_t d = x.rank() - op.normalized_dims; d < x.rank(); ++d) n *= x.shape[d];
  const int64_t rows = x.numel() / n;
  const CpuTensor w = ctx.has(op.weight) ? contiguous(ctx.in(op.weight)) : CpuTensor{};
  const CpuTensor b = ctx.has(op.bias) ? contiguous(ctx.in(op.bias)) : CpuTensor{};
  dispatch_float(x.dtype, [&]<class T>() {
    layer_norm<T>(x.data<T>(), ctx.has(op.weight) ? w.data<T>() : nullptr,
                  ctx.has(op.bias) ? b.data<T>() : nullptr, out.data<T>(), rows, n, op.eps);
  });
  return Status::OK();
}

}  // namespace tw::cpu
