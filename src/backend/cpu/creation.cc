// Creation kernels: Full, Arange, Eye, FromHost and the Philox-based random ops.
#include <cmath>

#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"
#include "backend/upload.h"
#include "core/philox.h"

namespace tw::cpu {
namespace {

// A Philox draw costs ten rounds of 32-bit multiplies, so random chunks are smaller than the
// elementwise ones.
constexpr int64_t kRandomGrain = int64_t{1} << 13;

template <class T>
void fill(T* out, int64_t n, T value) {
  parallel_chunks(n, chunk_grain(n),
                  [&](int64_t, int64_t b, int64_t e) { std::fill(out + b, out + e, value); });
}

}  // namespace

Status run(const ir::Full& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("full", ctx.meta(op.out), op.dtype));
  CpuTensor& out = ctx.alloc(op.out);
  return visit_dtype(op.dtype, "full", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill(out.data<T>(), out.numel(), scalar_to<T>(op.value));
    return Status::OK();
  });
}

Status run(const ir::Arange& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("arange", ctx.meta(op.out), op.dtype));
  CpuTensor& out = ctx.alloc(op.out);
  const int64_t n = out.numel();
  return visit_numeric(op.dtype, "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    if (std::is_integral_v<T> && !op.start.is_float && !op.step.is_float) {
      // Exact: start + i * step in 64-bit two's complement, then wrapped to T.
      const uint64_t start = static_cast<uint64_t>(op.start.i);
      const uint64_t step = static_cast<uint64_t>(op.step.i);
      parallel_chunks(n, chunk_grain(n), [&](int64_t, int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          o[i] = convert<T>(static_cast<int64_t>(start + static_cast<uint64_t>(i) * step));
        }
      });
    } else {
      const double start = op.start.as_double();
      const double step = op.step.as_double();
      parallel_chunks(n, chunk_grain(n), [&](int64_t, int64_t b, int64_t e) {
        // One rounding (a fused multiply-add), whatever the compiler's contraction settings.
        for (int64_t i = b; i < e; ++i)
          o[i] = convert<T>(std::fma(static_cast<double>(i), step, start));
      });
    }
    return Status::OK();
  });
}

Status run(const ir::Eye& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("eye", ctx.meta(op.out), op.dtype));
  CpuTensor& out = ctx.alloc(op.out);
  return visit_dtype(op.dtype, "eye", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    fill(o, out.numel(), convert<T>(int64_t{0}));
    const T one = convert<T>(int64_t{1});
    const int64_t diag = std::min(op.n, op.m);
    for (int64_t i = 0; i < diag; ++i) o[i * op.m + i] = one;
    return Status::OK();
  });
}

Status run(const ir::FromHost& op, KernelContext& ctx) {
  const TensorMeta& meta = ctx.meta(op.out);
  TW_RETURN_NOT_OK(check_out_dtype("from_host", meta, op.dtype));
  CpuTensor t;
  TW_ASSIGN_OR_RETURN(t.buffer, from_host_storage(op, meta));
  t.shape = meta.shape;
  t.strides = contiguous_strides(meta.shape);
  t.dtype = op.dtype;
  return ctx.set_view(op.out, std::move(t));
}

Status run(const ir::RandUniform& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("rand_uniform", ctx.meta(op.out), op.dtype));
  CpuTensor& out = ctx.alloc(op.out);
  return visit_float(op.dtype, "rand_uniform", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T low = static_cast<T>(op.low);
    const T range = static_cast<T>(op.high) - low;
    parallel_chunks(out.numel(), chunk_grain(out.numel(), kRandomGrain),
                    [&](int64_t, int64_t b, int64_t e) {
                      for (int64_t i = b; i < e; ++i) {
                        const uint64_t k = static_cast<uint64_t>(i);
                        // One fused multiply-add, written out: the bits then do not depend on
                        // whether the compiler contracts (GCC does at -O2 for x86-64-v3, not at
                        // -O1), and the cuda and vulkan kernels compute the same expression.
                        if constexpr (std::is_same_v<T, float>) {
                          o[i] = std::fma(range, philox_uniform_f32(op.seed, k), low);
                        } else if constexpr (std::is_same_v<T, double>) {
                          o[i] = std::fma(range, philox_uniform_f64(op.seed, k), low);
                        } else {
                          o[i] = low + range * philox_uniform_f64(op.seed, k);
                        }
                      }
                    });
    return Status::OK();
  });
}

Status run(const ir::RandNormal& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("rand_normal", ctx.meta(op.out), op.dtype));
  CpuTensor& out = ctx.alloc(op.out);
  return visit_float(op.dtype, "rand_normal", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    parallel_chunks(
        out.numel(), chunk_grain(out.numel(), kRandomGrain), [&](int64_t, int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            // One fused multiply-add in f64, written out (as for RandUniform above).
            o[i] = static_cast<T>(
                std::fma(op.std, philox_normal(op.seed, static_cast<uint64_t>(i)), op.mean));
          }
        });
    return Status::OK();
  });
}

Status run(const ir::Bernoulli& op, KernelContext& ctx) {
  const CpuTensor& p = ctx.in(op.p);
  TW_RETURN_NOT_OK(check_out_dtype("bernoulli", ctx.meta(op.out), p.dtype));
  CpuTensor& out = ctx.alloc(op.out);
  return visit_float(p.dtype, "bernoulli", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = out.data<T>();
    const T* base = p.data<T>();
    // Element i is drawn with counter i, its row-major position, whatever p's layout.
    auto seg = [&](int64_t pos, const Run<1>& off, const Run<1>& st, int64_t len) {
      for (int64_t i = 0; i < len; ++i) {
        const double u = philox_uniform_f64(op.seed, static_cast<uint64_t>(pos + i));
        o[pos + i] = u < static_cast<double>(base[off[0] + i * st[0]]) ? T(1) : T(0);
      }
    };
    for_each_run<1>(p.shape, {p.strides}, kRandomGrain, seg);
    return Status::OK();
  });
}

}  // namespace tw::cpu
