// AdamStep: one Adam/AdamW update in one pass over the parameter, its gradient and both moments
// (docs/ops.md). Each element goes through the same IEEE operations, in the same order and with
// the same scalars rounded to the dtype, as the unfused ops tw::optim::Adam issues where the op
// is not available (BinaryScalar, Binary, Unary sqrt), so the fused and unfused updates give
// the same bits: one rounded operation at a time (this file is compiled with -ffp-contract=off,
// so that no a * b + c becomes an FMA).
#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

template <class T>
struct AdamScalars {
  T step_size, bias2_sqrt, one_minus_beta1, beta2, one_minus_beta2, eps, decay, shrink;
};

// Elements [0, n) of one chunk. The weight decay's form is a template argument and the arrays
// do not alias (outputs are fresh), so the loop vectorises.
template <class T, bool kCoupled, bool kDecoupled>
void adam_chunk(const T* __restrict p, const T* __restrict g, const T* __restrict m,
                const T* __restrict v, T* __restrict p_out, T* __restrict m_out,
                T* __restrict v_out, int64_t n, const AdamScalars<T> s) {
  for (int64_t i = 0; i < n; ++i) {
    T value = p[i];
    T grad = g[i];
    if constexpr (kDecoupled) value = value * s.shrink;
    if constexpr (kCoupled) {
      const T wd = value * s.decay;
      grad = grad + wd;
    }
    const T diff = grad - m[i];
    const T m_step = diff * s.one_minus_beta1;
    const T m_new = m[i] + m_step;
    const T v_old = v[i] * s.beta2;
    const T g2 = grad * grad;
    const T g2_scaled = g2 * s.one_minus_beta2;
    const T v_new = v_old + g2_scaled;
    const T root = std::sqrt(v_new);
    const T corrected = root / s.bias2_sqrt;
    const T denom = corrected + s.eps;
    const T ratio = m_new / denom;
    const T update = ratio * s.step_size;
    p_out[i] = value - update;
    m_out[i] = m_new;
    v_out[i] = v_new;
  }
}

}  // namespace

Status run(const ir::AdamStep& op, KernelContext& ctx) {
  const CpuTensor* in[4] = {&ctx.in(op.param), &ctx.in(op.grad), &ctx.in(op.exp_avg),
                            &ctx.in(op.exp_avg_sq)};
  CpuTensor copies[4];
  for (int k = 0; k < 4; ++k) {
    if (!in[k]->is_contiguous()) {
      copies[k] = contiguous(*in[k]);
      in[k] = &copies[k];
    }
  }
  const DType dtype = in[0]->dtype;
  TW_RETURN_NOT_OK(check_out_dtype("adam_step", ctx.meta(op.param_out), dtype));
  return visit_float(dtype, "adam_step", [&](auto tag) -> Status {
    using T = typename decltype(tag)::type;
    const T* p = in[0]->template data<T>();
    const T* g = in[1]->template data<T>();
    const T* m = in[2]->template data<T>();
    const T* v = in[3]->template data<T>();
    // The scalars as the unfused ops' attributes carry them (ir::Scalar, then the dtype).
    const AdamScalars<T> s{*ctx.in(op.step_size).template data<T>(),
                           *ctx.in(op.bias2_sqrt).template data<T>(),
                           scalar_to<T>(ir::Scalar(1.0 - op.beta1)),
                           scalar_to<T>(ir::Scalar(op.beta2)),
                           scalar_to<T>(ir::Scalar(1.0 - op.beta2)),
                           scalar_to<T>(ir::Scalar(op.eps)),
                           scalar_to<T>(ir::Scalar(op.weight_decay)),
                           scalar_to<T>(ir::Scalar(1.0 - op.lr * op.weight_decay))};
    const bool coupled = op.weight_decay != 0 && !op.decoupled;
    const bool decoupled = op.weight_decay != 0 && op.decoupled;
    T* p_out = ctx.alloc(op.param_out).template data<T>();
    T* m_out = ctx.alloc(op.exp_avg_out).template data<T>();
    T* v_out = ctx.alloc(op.exp_avg_sq_out).template data<T>();
    const int64_t n = in[0]->numel();
    parallel_chunks(n, chunk_grain(n), [&](int64_t, int64_t b, int64_t e) {
      auto chunk = [&](auto fn) {
        fn(p + b, g + b, m + b, v + b, p_out + b, m_out + b, v_out + b, e - b, s);
      };
      if (coupled) {
        chunk(adam_chunk<T, true, false>);
      } else if (decoupled) {
        chunk(adam_chunk<T, false, true>);
      } else {
        chunk(adam_chunk<T, false, false>);
      }
    });
    return Status::OK();
  });
}

}  // namespace tw::cpu
