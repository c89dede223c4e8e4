// ScaledDotProductAttention and its backward, without the [Tq, Tk] score matrix.
//
// Forward (FlashAttention's scheme): each task takes one batch-head and a block of kQueryBlock
// queries, walks the keys in blocks of kKeyBlock, and keeps per query row the running max m, the
// running sum l of exp(s - m) and the unnormalised output; a new key block rescales them by
// exp(m_old - m_new). Memory per task: one kQueryBlock x kKeyBlock score tile.
//
// Backward: each task takes one batch-head and walks its query blocks in order; for each it
// recomputes the block's full rows of probabilities P (kQueryBlock x Tk, exact softmax), then
//   dV += P^T dO, dP = dO V^T, dS = P (dP - rowsum(P dP)) scale, dQ = dS K, dK += dS^T Q,
// with dS = 0 for a pair (query, key) that is not attended (masked or causal).
// Memory per task: two kQueryBlock x Tk tiles, O(T), not O(T^2). dK and dV sum over query
// blocks in block order inside one task, so no sum crosses a task.
//
// The tiles' products run on oneDNN's sgemm (f32) on one thread each, tasks split over oneDNN's
// threads; f64 runs the plain loops below. Tasks and tile sizes depend only on the problem, so
// results do not depend on the thread count. Causal attention skips key blocks wholly above
// the diagonal (key j > query i), unless a NaN or inf there would reach the result through
// 0 x inf (Dims::key_end).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "backend/cpu/structured_util.h"
#include "backend/cpu/vec_math.h"
#include "core/cancel.h"

namespace tw::cpu {
namespace {

// Query rows per task (forward and backward) and keys per forward tile: a 64 x 256 f32 score tile
// (64 KiB) stays in L2 beside the K and V blocks it is made from.
constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 256;

// C = alpha op(A) op(B) + beta C, row-major; beta 0 ignores C's contents.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
          int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
      }
      c[i * ldc + j] = alpha * s + (beta == 0 ? 0.0 : beta * c[i * ldc + j]);
    }
  }
}

// x[i] = exp(x[i] - m); returns their sum (8 lanes then the tail, in a fixed order).
float exp_sub_sum(float* x, int64_t n, float m) {
  int64_t i = 0;
  float sum = 0;
#ifdef TW_VEC_MATH_AVX2
  __m256 acc = _mm256_setzero_ps();
  const __m256 mv = _mm256_set1_ps(m);
  for (; i + 8 <= n; i += 8) {
    const __m256 e = vm::exp_f32(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) +
        ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
#endif
  for (; i < n; ++i) {
    x[i] = vm::exp_f32(x[i] - m);
    sum += x[i];
  }
  return sum;
}

double exp_sub_sum(double* x, int64_t n, double m) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  return sum;
}

// Which scores a query row attends: the mask (broadcast to the scores [..., Tq, Tk]) and the
// causal rule (key j <= query i).
struct Attends {
  const uint8_t* mask = nullptr;      // null: no mask
  std::vector<int64_t> batch_offset;  // the mask's offset per batch-head
  int64_t si = 0, sj = 0;             // the mask's strides along queries and keys
  bool causal = false;

  // Sets s[c] (scores of query i, keys j0 + c) to `fill` (-inf by default) where not attended;
  // returns whether any key is attended (a score of -inf from the data is attended, and gives
  // 0/0 when all are).
  template <class T>
  bool apply(T* s, int64_t bh, int64_t i, int64_t j0, int64_t cols,
             T fill = -std::numeric_limits<T>::infinity()) const {
    if (causal) {
      const int64_t limit = std::clamp<int64_t>(i - j0 + 1, 0, cols);
      std::fill(s + limit, s + cols, fill);
      cols = limit;
    }
    if (!mask) return cols > 0;
    const uint8_t* mr = mask + batch_offset[static_cast<size_t>(bh)] + i * si + j0 * sj;
    bool any = false;
    for (int64_t c = 0; c < cols; ++c) {
      if (!mr[c * sj]) {
        s[c] = fill;
      } else {
        any = true;
      }
    }
    return any;
  }
};

// The maximum of a row of scores, NaN when one is NaN (std::max would skip it).
template <class T>
T row_max(const T* s, int64_t cols) {
  T mx = -std::numeric_limits<T>::infinity();
  bool nan = false;
  for (int64_t c = 0; c < cols; ++c) {
    mx = std::max(mx, s[c]);
    nan |= s[c] != s[c];
  }
  return nan ? std::numeric_limits<T>::quiet_NaN() : mx;
}

Attends make_attends(const KernelContext& ctx, ir::In mask_in, bool causal, const Shape& scores,
                     int64_t bh_count) {
  Attends a;
  a.causal = causal;
  if (!ctx.has(mask_in)) return a;
  const CpuTensor& m = ctx.in(mask_in);
  a.mask = m.data<uint8_t>();
  const int64_t r = static_cast<int64_t>(scores.size()), lead = r - m.rank();
  Strides st(static_cast<size_t>(r), 0);
  for (int64_t d = lead; d < r; ++d) st[d] = m.shape[d - lead] == 1 ? 0 : m.strides[d - lead];
  a.si = st[r - 2];
  a.sj = st[r - 1];
  a.batch_offset.assign(static_cast<size_t>(bh_count), 0);
  for (int64_t b = 0; b < bh_count; ++b) {
    int64_t rem = b, off = 0;
    for (int64_t d = r - 3; d >= 0; --d) {
      off += (rem % scores[d]) * st[d];
      rem /= scores[d];
    }
    a.batch_offset[static_cast<size_t>(b)] = off;
  }
  return a;
}

// Whether any of p[0, n) is NaN or infinite (exponent bits all set; vectorises).
template <class T>
bool any_nonfinite(const T* p, int64_t n) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  constexpr U kExp = sizeof(T) == 4 ? U(0x7f800000u) : U(0x7ff0000000000000ull);
  U hit = 0;
  for (int64_t i = 0; i < n; ++i) {
    U b;
    std::memcpy(&b, p + i, sizeof b);
    hit |= U((b & kExp) == kExp);
  }
  return hit != 0;
}

// The problem's sizes: bh batch-heads of q [tq, d], k [tk, d], v [tk, dv].
struct Dims {
  int64_t bh = 0, tq = 0, tk = 0, d = 0, dv = 0;
  static Dims of(const Shape& q, const Shape& v) {
    const size_t r = q.size();
    Dims s{1, q[r - 2], v[r - 2], q[r - 1], v[r - 1]};
    for (size_t i = 0; i + 2 < r; ++i) s.bh *= q[i];
    return s;
  }
  int64_t query_blocks() const { return (tq + kQueryBlock - 1) / kQueryBlock; }
  // Keys a block of queries [i0, i0 + rows) may attend: causal attention skips the keys after
  // them, whose pairs with the block contribute exact zeros (0 x a finite value) to the formula.
  // They do not when a value they meet is NaN or infinite (0 x inf is NaN): the block then
  // takes every key, so that the result is the formula's over all pairs, as docs/ops.md says.
  // Forward, a skipped pair (i, j) adds 0 x v_j; backward, 0 x g_i to dv_j, 0 x (g_i . v_j) to
  // row i's sum, 0 x k_j to dq_i and 0 x q_i to dk_j. `rows_nonfinite` says whether the block's
  // own rows of q (and g) hold one.
  template <class T>
  int64_t key_end(bool causal, int64_t i0, int64_t rows, const T* keys_k, const T* keys_v,
                  bool rows_nonfinite) const {
    if (!causal) return tk;
    const int64_t end = std::min(tk, i0 + rows);
    if (end == tk) return end;
    const bool dense = rows_nonfinite || any_nonfinite(keys_v + end * dv, (tk - end) * dv) ||
                       (keys_k != nullptr && any_nonfinite(keys_k + end * d, (tk - end) * d));
    return dense ? tk : end;
  }
  Shape scores(const Shape& q) const {
    Shape s(q.begin(), q.end() - 1);
    s.push_back(tk);
    return s;
  }
};

template <class T>
void forward_block(const Dims& z, const Attends& at, T scale, const T* q, const T* k, const T* v,
                   T* out, int64_t bh, int64_t i0) {
  constexpr T kInf = std::numeric_limits<T>::infinity(), kNegInf = -kInf;
  const int64_t rows = std::min(kQueryBlock, z.tq - i0);
  const T* qb = q + (bh * z.tq + i0) * z.d;
  const T* kb = k + bh * z.tk * z.d;
  const T* vb = v + bh * z.tk * z.dv;
  T* ob = out + (bh * z.tq + i0) * z.dv;
  // A skipped key's score is masked whatever q and k hold: only its value matters.
  const int64_t kend = z.key_end<T>(at.causal, i0, rows, nullptr, vb, false);
  std::vector<T> s(static_cast<size_t>(rows * std::min(kKeyBlock, std::max<int64_t>(kend, 1))));
  std::vector<T> m(static_cast<size_t>(rows), kNegInf), l(static_cast<size_t>(rows), 0);
  // Whether the row attends any key: l == 0 then means 0/0 (NaN), not "nothing attended" (0).
  std::vector<uint8_t> attends(static_cast<size_t>(rows), 0);
  std::fill(ob, ob + rows * z.dv, T(0));
  const std::atomic<bool>* flag = cancel_flag();
  for (int64_t j0 = 0; j0 < kend; j0 += kKeyBlock) {
    if (cancelled(flag)) return;  // (the output is poisoned: core/cancel.h)
    const int64_t cols = std::min(kKeyBlock, kend - j0);
    gemm(false, true, rows, cols, z.d, scale, qb, z.d, kb + j0 * z.d, z.d, T(0), s.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      T* sr = s.data() + r * cols;
      attends[r] |= at.apply(sr, bh, i0 + r, j0, cols);
      const T mx = row_max(sr, cols);
      // A NaN or +inf score (inf - inf) makes the row's softmax NaN: l stays NaN from here.
      if (!(mx < kInf)) l[r] = std::numeric_limits<T>::quiet_NaN();
      if (!(mx > kNegInf && mx < kInf)) {  // nothing attended in this tile, or NaN above
        std::fill(sr, sr + cols, T(0));
        continue;
      }
      const T m_new = std::max(m[r], mx);
      const T corr = m[r] == kNegInf ? T(0) : static_cast<T>(std::exp(m[r] - m_new));
      const T sum = exp_sub_sum(sr, cols, m_new);
      l[r] = l[r] * corr + sum;
      m[r] = m_new;
      if (corr != T(1)) {
        T* orow = ob + r * z.dv;
        for (int64_t c = 0; c < z.dv; ++c) orow[c] *= corr;
      }
    }
    gemm(false, false, rows, z.dv, cols, T(1), s.data(), cols, vb + j0 * z.dv, z.dv, T(1), ob,
         z.dv);
  }
  for (int64_t r = 0; r < rows; ++r) {
    T* orow = ob + r * z.dv;
    if (l[r] > 0) {
      const T inv = T(1) / l[r];
      for (int64_t c = 0; c < z.dv; ++c) orow[c] *= inv;
    } else {  // no attended key: zeros; else a NaN or inf score, or all -inf: NaN, as softmax
      const T fill = attends[r] ? std::numeric_limits<T>::quiet_NaN() : T(0);
      std::fill(orow, orow + z.dv, fill);
    }
  }
}

template <class T>
void backward_head(const Dims& z, const Attends& at, T scale, const T* g, const T* q, const T* k,
                   const T* v, T* dq, T* dk, T* dv, int64_t bh) {
  constexpr T kInf = std::numeric_limits<T>::infinity(), kNegInf = -kInf;
  const T* kb = k + bh * z.tk * z.d;
  const T* vb = v + bh * z.tk * z.dv;
  T* dkb = dk + bh * z.tk * z.d;
  T* dvb = dv + bh * z.tk * z.dv;
  std::fill(dkb, dkb + z.tk * z.d, T(0));
  std::fill(dvb, dvb + z.tk * z.dv, T(0));
  std::vector<T> p(static_cast<size_t>(kQueryBlock * std::max<int64_t>(z.tk, 1)));
  std::vector<T> dp(p.size());
  const std::atomic<bool>* flag = cancel_flag();
  for (int64_t i0 = 0; i0 < z.tq; i0 += kQueryBlock) {
    if (cancelled(flag)) return;
    const int64_t rows = std::min(kQueryBlock, z.tq - i0);
    const T* qb = q + (bh * z.tq + i0) * z.d;
    const T* gb = g + (bh * z.tq + i0) * z.dv;
    T* dqb = dq + (bh * z.tq + i0) * z.d;
    const int64_t kend = z.key_end<T>(
        at.causal, i0, rows, kb, vb,
        at.causal && (any_nonfinite(qb, rows * z.d) || any_nonfinite(gb, rows * z.dv)));
    if (kend == 0) {
      std::fill(dqb, dqb + rows * z.d, T(0));
      continue;
    }
    gemm(false, true, rows, kend, z.d, scale, qb, z.d, kb, z.d, T(0), p.data(), kend);
    for (int64_t r = 0; r < rows; ++r) {
      T* pr = p.data() + r * kend;
      const bool attends = at.apply(pr, bh, i0 + r, 0, kend);
      const T mx = row_max(pr, kend);
      // Nothing attended: zeros; a NaN or +inf score, or only -inf ones: NaN (as the forward).
      if (!(mx > kNegInf && mx < kInf)) {
        std::fill(pr, pr + kend, attends ? std::numeric_limits<T>::quiet_NaN() : T(0));
        continue;
      }
      const T inv = T(1) / exp_sub_sum(pr, kend, mx);
      for (int64_t c = 0; c < kend; ++c) pr[c] *= inv;
    }
    gemm(true, false, kend, z.dv, rows, T(1), p.data(), kend, gb, z.dv, T(1), dvb, z.dv);
    gemm(false, true, rows, kend, z.dv, T(1), gb, z.dv, vb, z.dv, T(0), dp.data(), kend);
    for (int64_t r = 0; r < rows; ++r) {
      const T* pr = p.data() + r * kend;
      T* dr = dp.data() + r * kend;
      T delta = 0;
      for (int64_t c = 0; c < kend; ++c) delta += pr[c] * dr[c];
      for (int64_t c = 0; c < kend; ++c) dr[c] = pr[c] * (dr[c] - delta) * scale;
      // A pair not attended has no score gradient (docs/ops.md): 0, not 0 x (NaN - NaN) when
      // the upstream gradient of this row is not finite.
      at.apply(dr, bh, i0 + r, 0, kend, T(0));
    }
    gemm(false, false, rows, z.d, kend, T(1), dp.data(), kend, kb, z.d, T(0), dqb, z.d);
    gemm(true, false, kend, z.d, rows, T(1), dp.data(), kend, qb, z.d, T(1), dkb, z.d);
  }
}

// Runs task(i) for i in [0, n) on oneDNN's threads, one thread each (the tiles' sgemm included).
Status run_tasks(int64_t n, int64_t macs, const std::function<void(int64_t)>& task) {
  const DnnlThreadsFor threads(macs);
  return dnnl_parallel_chunks("scaled_dot_product_attention", n, [&](int64_t i) {
    const DnnlSingleThread one_thread;
    task(i);
    return Status::OK();
  });
}

}  // namespace

Status run(const ir::ScaledDotProductAttention& op, KernelContext& ctx) {
  const CpuTensor q = contiguous(ctx.in(op.query)), k = contiguous(ctx.in(op.key)),
                  v = contiguous(ctx.in(op.value));
  CpuTensor& out = ctx.alloc(op.out);
  if (out.numel() == 0) return Status::OK();
  const Dims z = Dims::of(q.shape, v.shape);
  const Attends at = make_attends(ctx, op.mask, op.causal, z.scores(q.shape), z.bh);
  const int64_t blocks = z.query_blocks();
  Status st;
  dispatch_float(q.dtype, [&]<class T>() {
    const T scale = static_cast<T>(op.scale);
    st = run_tasks(z.bh * blocks, z.bh * z.tq * z.tk * (z.d + z.dv), [&](int64_t t) {
      forward_block<T>(z, at, scale, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(),
                       t / blocks, t % blocks * kQueryBlock);
    });
  });
  return st;
}

Status run(const ir::ScaledDotProductAttentionBackward& op, KernelContext& ctx) {
  const CpuTensor g = contiguous(ctx.in(op.grad)), q = contiguous(ctx.in(op.query)),
                  k = contiguous(ctx.in(op.key)), v = contiguous(ctx.in(op.value));
  CpuTensor& dq = ctx.alloc(op.grad_query);
  CpuTensor& dk = ctx.alloc(op.grad_key);
  CpuTensor& dv = ctx.alloc(op.grad_value);
  const Dims z = Dims::of(q.shape, v.shape);
  if (z.bh == 0) return Status::OK();
  if (z.tq == 0) {  // no query: no gradient reaches k or v
    std::memset(dk.bytes(), 0, static_cast<size_t>(dk.numel()) * dtype_size(dk.dtype));
    std::memset(dv.bytes(), 0, static_cast<size_t>(dv.numel()) * dtype_size(dv.dtype));
    return Status::OK();
  }
  const Attends at = make_attends(ctx, op.mask, op.causal, z.scores(q.shape), z.bh);
  Status st;
  dispatch_float(q.dtype, [&]<class T>() {
    const T scale = static_cast<T>(op.scale);
    st = run_tasks(z.bh, 2 * z.bh * z.tq * z.tk * (z.d + z.dv), [&](int64_t bh) {
      backward_head<T>(z, at, scale, g.data<T>(), q.data<T>(), k.data<T>(), v.data<T>(),
                       dq.data<T>(), dk.data<T>(), dv.data<T>(), bh);
    });
  });
  return st;
}

}  // namespace tw::cpu
