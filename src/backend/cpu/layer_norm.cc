// LayerNorm over the last `normalized_dims` dims: y = (x - mean) / sqrt(var + eps) * w + b with
// the biased variance. Mean and variance are two passes in double (for f32 too: the f32 result
// then differs from the exact one by the final rounding only), each summed in 8 fixed partial
// sums that vectorise; four rows' sums run interleaved, each row's in its own fixed order. Rows
// are split into chunks by the shape alone: results do not depend on the thread count.
//
// LayerNormBackward recomputes a row's statistics the same way and works in double from there,
// rounding each output once: dx per row; dweight and dbias as one partial sum per fixed chunk of
// rows (rows in order), the chunks' partials then added in chunk order.
#include <algorithm>
#include <cmath>
#include <vector>

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

struct RowStats {
  double mean, rstd;
};

// The mean and rstd = 1 / sqrt(var + eps) of R rows (row r at x + r * n): per row, the sum of x,
// then of (x - mean)^2, each in 8 fixed partial sums (element i into partial i mod 8), combined
// as `combine` does. The R rows' partial sums are independent chains that keep the adders busy
// where one row's would wait on each other; each row's result does not depend on R.
template <int R, class T>
void rows_stats(const T* x, int64_t n, double eps, RowStats* st) {
  const int64_t body = n / kPartials * kPartials;
  double acc[R][kPartials] = {};
  for (int64_t i = 0; i < body; i += kPartials) {
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < kPartials; ++j) acc[r][j] += static_cast<double>(x[r * n + i + j]);
    }
  }
  for (int64_t i = body; i < n; ++i) {
    for (int r = 0; r < R; ++r) acc[r][i - body] += static_cast<double>(x[r * n + i]);
  }
  double mean[R];
  for (int r = 0; r < R; ++r) {
    mean[r] = combine(acc[r]) / static_cast<double>(n);
    for (int j = 0; j < kPartials; ++j) acc[r][j] = 0;
  }
  for (int64_t i = 0; i < body; i += kPartials) {
    for (int r = 0; r < R; ++r) {
      for (int j = 0; j < kPartials; ++j) {
        const double d = static_cast<double>(x[r * n + i + j]) - mean[r];
        acc[r][j] += d * d;
      }
    }
  }
  for (int64_t i = body; i < n; ++i) {
    for (int r = 0; r < R; ++r) {
      const double d = static_cast<double>(x[r * n + i]) - mean[r];
      acc[r][i - body] += d * d;
    }
  }
  for (int r = 0; r < R; ++r) {
    st[r] = {mean[r], 1.0 / std::sqrt(combine(acc[r]) / static_cast<double>(n) + eps)};
  }
}

template <class T>
void layer_norm(const T* x, const T* w, const T* b, T* y, int64_t rows, int64_t n, double eps) {
  constexpr int kBlock = 4;  // rows whose statistics are summed interleaved
  parallel_chunks(rows, rows_per_chunk(n), [&](int64_t, int64_t begin, int64_t end) {
    RowStats stats[kBlock];
    for (int64_t r = begin; r < end; ++r) {
      const int64_t k = (r - begin) % kBlock;
      if (k == 0) {
        if (r + kBlock <= end) {
          rows_stats<kBlock>(x + r * n, n, eps, stats);
        } else {
          for (int64_t q = r; q < end; ++q) rows_stats<1>(x + q * n, n, eps, stats + (q - r));
        }
      }
      const T* xr = x + r * n;
      T* yr = y + r * n;
      const T m = static_cast<T>(stats[k].mean);
      const T rstd = static_cast<T>(stats[k].rstd);
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

// At most this many chunks of rows, each with its own dweight/dbias partials (2 n doubles): the
// scratch stays under 64 n doubles whatever the row count.
constexpr int64_t kMaxBackwardChunks = 32;
// Rows whose statistics are summed interleaved (rows_stats).
constexpr int kRowBlock = 4;

// R rows from row r0 of the backward below; pw, pb: the chunk's dweight/dbias partials, xhat and
// gh: scratch for R rows.
template <int R, class T>
void layer_norm_backward_rows(const T* g, const T* x, const T* w, T* dx, int64_t r0, int64_t n,
                              double eps, double* __restrict pw, double* __restrict pb,
                              double* __restrict xhat, double* __restrict gh) {
  RowStats st[R];
  rows_stats<R>(x + r0 * n, n, eps, st);
  double sum_gh[R], sum_ghx[R];
  const int64_t body = n / kPartials * kPartials;
  for (int r = 0; r < R; ++r) {  // rows in order: each partial adds its rows in row order
    const T* __restrict gr = g + (r0 + r) * n;
    const T* __restrict xr = x + (r0 + r) * n;
    double* __restrict xh = xhat + r * n;
    double* __restrict ghr = gh + r * n;
    const double mean = st[r].mean, rstd = st[r].rstd;
    // One pass per row, the sums of gh and gh * xhat in 8 fixed partial sums (as rows_stats); the
    // weight a template argument so that the loop has no branch.
    double acc_a[kPartials] = {}, acc_ab[kPartials] = {};
    auto pass = [&](auto weight) {
      auto one = [&](int64_t i, int j) {
        xh[i] = (static_cast<double>(xr[i]) - mean) * rstd;
        const double gv = static_cast<double>(gr[i]);
        pw[i] += gv * xh[i];
        pb[i] += gv;
        ghr[i] = gv * weight(i);
        acc_a[j] += ghr[i];
        acc_ab[j] += ghr[i] * xh[i];
      };
      for (int64_t i = 0; i < body; i += kPartials) {
        for (int j = 0; j < kPartials; ++j) one(i + j, j);
      }
      for (int64_t i = body; i < n; ++i) one(i, static_cast<int>(i - body));
    };
    if (w) {
      pass([w](int64_t i) { return static_cast<double>(w[i]); });
    } else {
      pass([](int64_t) { return 1.0; });
    }
    sum_gh[r] = combine(acc_a);
    sum_ghx[r] = combine(acc_ab);
  }
  const double inv_n = 1.0 / static_cast<double>(n);
  for (int r = 0; r < R; ++r) {
    const double a = sum_gh[r] * inv_n, b = sum_ghx[r] * inv_n, rstd = st[r].rstd;
    const double* __restrict xh = xhat + r * n;
    const double* __restrict ghr = gh + r * n;
    T* __restrict dxr = dx + (r0 + r) * n;
    for (int64_t i = 0; i < n; ++i) dxr[i] = static_cast<T>(rstd * (ghr[i] - a - xh[i] * b));
  }
}

// Per row, with xhat = (x - mean) * rstd and gh = g * w (g without a weight):
//   dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat));
// dw = sum over rows of g * xhat, db = sum over rows of g.
template <class T>
void layer_norm_backward(const T* g, const T* x, const T* w, T* dx, T* dw, T* db, int64_t rows,
                         int64_t n, double eps) {
  const int64_t per_chunk =
      std::max(rows_per_chunk(3 * n), (rows + kMaxBackwardChunks - 1) / kMaxBackwardChunks);
  const int64_t chunks = (rows + per_chunk - 1) / per_chunk;
  std::vector<double> partials(static_cast<size_t>(chunks * 2 * n), 0.0);
  parallel_chunks(rows, per_chunk, [&](int64_t c, int64_t begin, int64_t end) {
    std::vector<double> scratch(static_cast<size_t>(2 * kRowBlock * n));
    double* pw = partials.data() + c * 2 * n;
    double* pb = pw + n;
    double* xhat = scratch.data();
    double* gh = xhat + kRowBlock * n;
    int64_t r = begin;
    for (; r + kRowBlock <= end; r += kRowBlock)
      layer_norm_backward_rows<kRowBlock>(g, x, w, dx, r, n, eps, pw, pb, xhat, gh);
    for (; r < end; ++r) layer_norm_backward_rows<1>(g, x, w, dx, r, n, eps, pw, pb, xhat, gh);
  });
  parallel_chunks(n, rows_per_chunk(chunks), [&](int64_t, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double sw = 0, sb = 0;
      for (int64_t c = 0; c < chunks; ++c) {
        sw += partials[static_cast<size_t>(c * 2 * n + i)];
        sb += partials[static_cast<size_t>(c * 2 * n + n + i)];
      }
      dw[i] = static_cast<T>(sw);
      db[i] = static_cast<T>(sb);
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

Status run(const ir::LayerNormBackward& op, KernelContext& ctx) {
  const CpuTensor g = contiguous(ctx.in(op.grad));
  const CpuTensor x = contiguous(ctx.in(op.x));
  CpuTensor& dx = ctx.alloc(op.grad_x);
  CpuTensor& dw = ctx.alloc(op.grad_weight);
  CpuTensor& db = ctx.alloc(op.grad_bias);
  const int64_t n = dw.numel();
  if (n == 0) return Status::OK();
  const int64_t rows = x.numel() / n;
  const CpuTensor w = ctx.has(op.weight) ? contiguous(ctx.in(op.weight)) : CpuTensor{};
  dispatch_float(x.dtype, [&]<class T>() {
    layer_norm_backward<T>(g.data<T>(), x.data<T>(), ctx.has(op.weight) ? w.data<T>() : nullptr,
                           dx.data<T>(), dw.data<T>(), db.data<T>(), rows, n, op.eps);
  });
  return Status::OK();
}

}  // namespace tw::cpu
