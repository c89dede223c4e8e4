// Linear: relu?(x w^T + bias). One oneDNN matmul primitive adds the bias to each output tile as it
// leaves the GEMM; the ReLU then runs in place over the output while it is still in cache (not
// as oneDNN's post-op, whose max(x, 0) turns a NaN into 0: a ReLU here propagates NaN, as the
// Unary op does). x is read in place when row- or column-major (else copied), w's transpose is w
// read with swapped strides. Primitives are cached per shape and layout, as MatMul's.
#include <optional>

#include "backend/cpu/dnnl_util.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/strided.h"
#include "core/thread_pool.h"

namespace tw::cpu {
namespace {

struct LinearPrimitive {
  dnnl::primitive prim;
  dnnl::memory::desc x_md, w_md, bias_md, y_md, scratchpad;
};

DnnlCache<LinearPrimitive>& linear_cache() {
  static DnnlCache<LinearPrimitive> cache;
  return cache;
}

// The strides oneDNN reads matrix t with (gemm_layout), when it takes them.
bool matrix_strides(const CpuTensor& t, int64_t& rs, int64_t& cs) {
  rs = t.strides[0];
  cs = t.strides[1];
  return gemm_layout(t.shape[0], t.shape[1], rs, cs);
}

}  // namespace

Status run(const ir::Linear& op, KernelContext& ctx) {
  TW_RETURN_NOT_OK(check_out_dtype("linear", ctx.meta(op.out), kF32));
  const CpuTensor* x = &ctx.in(op.x);
  const CpuTensor* w = &ctx.in(op.w);
  const bool has_bias = ctx.has(op.bias);
  CpuTensor x_copy, w_copy, b_copy;
  int64_t xrs = 0, xcs = 0, wrs = 0, wcs = 0;
  if (!matrix_strides(*x, xrs, xcs)) {
    x_copy = contiguous(*x);
    x = &x_copy;
    matrix_strides(*x, xrs, xcs);
  }
  if (!matrix_strides(*w, wrs, wcs)) {
    w_copy = contiguous(*w);
    w = &w_copy;
    matrix_strides(*w, wrs, wcs);
  }
  const CpuTensor* bias = has_bias ? &ctx.in(op.bias) : nullptr;
  if (bias && !bias->is_contiguous()) {
    b_copy = contiguous(*bias);
    bias = &b_copy;
  }
  const int64_t n = x->shape[0], k = x->shape[1], m = w->shape[0];
  CpuTensor& y = ctx.alloc(op.out);
  if (n == 0 || m == 0) return Status::OK();
  if (k == 0) {  // an empty sum: the bias (or zeros), then the activation
    float* out = y.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        const float v = bias ? bias->data<float>()[j] : 0.0f;
        out[i * m + j] = op.relu && v < 0.0f ? 0.0f : v;
      }
    }
    return Status::OK();
  }
  const DnnlThreadsFor dnnl_threads(n * k * m);
  const std::vector<int64_t> key = {dnnl_threads.threads(), n, k, m, xrs, xcs, wrs, wcs, has_bias};
  using dims = dnnl::memory::dims;
  auto made = linear_cache().get(key, "linear", [&] {
    LinearPrimitive p;
    const auto f32 = dnnl::memory::data_type::f32;
    p.x_md = dnnl::memory::desc(dims{n, k}, f32, dims{xrs, xcs});
    // w^T: [k, m] read from w [m, k] with its strides swapped.
    p.w_md = dnnl::memory::desc(dims{k, m}, f32, dims{wcs, wrs});
    p.y_md = dnnl::memory::desc(dims{n, m}, f32, dims{m, 1});
    const dnnl::primitive_attr attr = dnnl_attr();
    std::optional<dnnl::matmul::desc> d;
    if (has_bias) {
      p.bias_md = dnnl::memory::desc(dims{1, m}, f32, dims{m, 1});
      d.emplace(p.x_md, p.w_md, p.bias_md, p.y_md);
    } else {
      d.emplace(p.x_md, p.w_md, p.y_md);
    }
    dnnl::matmul::primitive_desc pd(*d, attr, dnnl_engine());
    p.scratchpad = pd.scratchpad_desc();
    p.prim = dnnl::matmul(pd);
    return p;
  });
  TW_RETURN_NOT_OK(made.status());
  const LinearPrimitive& p = **made;
  try {
    std::unordered_map<int, dnnl::memory> args = {
        {DNNL_ARG_SRC, dnnl::memory(p.x_md, dnnl_engine(), x->data<float>())},
        {DNNL_ARG_WEIGHTS, dnnl::memory(p.w_md, dnnl_engine(), w->data<float>())},
        {DNNL_ARG_DST, dnnl::memory(p.y_md, dnnl_engine(), y.data<float>())}};
    if (bias)
      args.emplace(DNNL_ARG_BIAS, dnnl::memory(p.bias_md, dnnl_engine(), bias->data<float>()));
    TW_RETURN_NOT_OK(dnnl_run("linear", p.prim, p.scratchpad, std::move(args)));
  } catch (const std::exception& e) {
    return dnnl_status("linear", e);
  }
  if (op.relu) {
    float* out = y.data<float>();
    const int64_t total = n * m;
    parallel_chunks(total, chunk_grain(total), [&](int64_t, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = out[i] < 0.0f ? 0.0f : out[i];
    });
  }
  return Status::OK();
}

}  // namespace tw::cpu
