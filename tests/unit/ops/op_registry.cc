// The op registry: for every op name used in the case table, how to call it through the Tensor
// API and how to compute it with the reference. Inputs arrive in the order of OpCase::inputs.
#include <map>
#include <stdexcept>

#include "ir/ops.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

using Ts = std::vector<Tensor>;
using Hs = std::vector<ref::HostTensor>;
using Member0 = Tensor (Tensor::*)() const;
using Member1 = Tensor (Tensor::*)(const Tensor&) const;
using MemberS = Tensor (Tensor::*)(Scalar) const;

// Reductions in the three API forms: x.sum(), x.sum(dim, keepdim), x.sum(dims, keepdim).
enum class Form { kAll, kDim, kDims };

Tensor call_reduce(const std::string& k, Form f, const Tensor& x, const Attrs& a) {
#define TW_REDUCE_CALL(Kind, ir_name, api_name, ...)          \
  if (k == #api_name) {                                       \
    if (f == Form::kAll) return x.api_name();                 \
    if (f == Form::kDim) return x.api_name(a.dim, a.keepdim); \
  }
  TW_REDUCE_KINDS(TW_REDUCE_CALL)
#undef TW_REDUCE_CALL
  if (f == Form::kDims) {
    if (k == "sum") return x.sum(a.dims, a.keepdim);
    if (k == "mean") return x.mean(a.dims, a.keepdim);
  }
  throw std::invalid_argument("no reduction form for " + k);
}

Tensor opt(const Ts& x, size_t k) { return k < x.size() ? x[k] : Tensor(); }
std::optional<ref::HostTensor> opt(const Hs& x, size_t k) {
  return k < x.size() ? std::optional<ref::HostTensor>(x[k]) : std::nullopt;
}

BlockFormat fmt(const Attrs& a) { return a.flag ? BlockFormat::kQ4_0 : BlockFormat::kQ8_0; }

DType arange_dtype(const Attrs& a) {
  if (a.dtype) return *a.dtype;
  bool ints = !a.s0->is_float && !a.s1->is_float && !(a.s2 && a.s2->is_float);
  return ints ? kI64 : kF32;
}

std::map<std::string, OpDef> build_registry() {
  std::map<std::string, OpDef> r;
  auto def = [&](const std::string& name, DeviceFn run, RefFn ref) {
    if (!r.emplace(name, OpDef{std::move(run), std::move(ref)}).second)
      throw std::logic_error("op registered twice: " + name);
  };

  // One entry to a line or two (name, device call, reference) (clang-format would break it up):
  // clang-format off
  // ---- creation ----
  def("full", [](const Ts&, const Attrs& a, const Device& d) { return full(a.shape, *a.s0, *a.dtype, d); },
      [](const Hs&, const Attrs& a) { return ref::full(a.shape, *a.s0, *a.dtype); });
  def("zeros", [](const Ts&, const Attrs& a, const Device& d) { return zeros(a.shape, *a.dtype, d); },
      [](const Hs&, const Attrs& a) { return ref::full(a.shape, Scalar(0), *a.dtype); });
  def("ones", [](const Ts&, const Attrs& a, const Device& d) { return ones(a.shape, *a.dtype, d); },
      [](const Hs&, const Attrs& a) { return ref::full(a.shape, Scalar(1), *a.dtype); });
  def("zeros_like", [](const Ts& x, const Attrs&, const Device&) { return zeros_like(x[0]); },
      [](const Hs& x, const Attrs&) { return ref::full(x[0].shape, Scalar(0), x[0].dtype); });
  def("ones_like", [](const Ts& x, const Attrs&, const Device&) { return ones_like(x[0]); },
      [](const Hs& x, const Attrs&) { return ref::full(x[0].shape, Scalar(1), x[0].dtype); });
  def("full_like", [](const Ts& x, const Attrs& a, const Device&) { return full_like(x[0], *a.s0); },
      [](const Hs& x, const Attrs& a) { return ref::full(x[0].shape, *a.s0, x[0].dtype); });
  // arange(s1) when s0 is absent; else arange(s0, s1, s2 or 1, dtype).
  def("arange",
      [](const Ts&, const Attrs& a, const Device& d) {
        if (!a.s0) return arange(*a.s1, d);
        return arange(*a.s0, *a.s1, a.s2.value_or(Scalar(1)), a.dtype, d);
      },
      [](const Hs&, const Attrs& a) {
        if (!a.s0) return ref::arange(Scalar(0), *a.s1, Scalar(1), a.s1->is_float ? kF32 : kI64);
        return ref::arange(*a.s0, *a.s1, a.s2.value_or(Scalar(1)), arange_dtype(a));
      });
  def("eye",
      [](const Ts&, const Attrs& a, const Device& d) {
        return eye(a.n, a.m < 0 ? std::nullopt : std::optional<int64_t>(a.m), *a.dtype, d);
      },
      [](const Hs&, const Attrs& a) { return ref::eye(a.n, a.m < 0 ? a.n : a.m, *a.dtype); });
  def("to_device", [](const Ts& x, const Attrs&, const Device& d) { return x[0].to(d); },
      [](const Hs& x, const Attrs&) { return x[0]; });

  // ---- unary (API name, spec kind) ----
  struct U {
    const char* api;
    const char* kind;
    Member0 fn;
  };
#define TW_UNARY_ENTRY(Kind, ir_name, api_name, ...) U{#api_name, #ir_name, &Tensor::api_name},
  for (U u : {TW_UNARY_KINDS(TW_UNARY_ENTRY)}) {
#undef TW_UNARY_ENTRY
    std::string kind = u.kind;
    def(u.api, [fn = u.fn](const Ts& x, const Attrs&, const Device&) { return (x[0].*fn)(); },
        [kind](const Hs& x, const Attrs&) { return ref::unary(kind, x[0]); });
  }

  // ---- binary, tensor-tensor ----
  struct B {
    const char* kind;
    Member1 fn;
  };
#define TW_BINARY_ENTRY(Kind, ir_name, api_name, ...) B{#api_name, &Tensor::api_name},
  for (B b : {TW_BINARY_KINDS(TW_BINARY_ENTRY)}) {
#undef TW_BINARY_ENTRY
    std::string kind = b.kind;
    def(kind, [fn = b.fn](const Ts& x, const Attrs&, const Device&) { return (x[0].*fn)(x[1]); },
        [kind](const Hs& x, const Attrs&) { return ref::binary(kind, x[0], x[1]); });
  }

  // ---- binary, tensor-scalar: "<kind>_scalar", s0 the scalar; reverse (s op a) for + - * / ----
  struct S {
    const char* kind;
    MemberS fn;
  };
  // The kinds whose scalar column (ir/ops.h) is kScalarApi.
#define TW_SCALAR_ENTRY(Kind, ir_name, api_name, grad, scalar) TW_SCALAR_ENTRY_##scalar(api_name)
#define TW_SCALAR_ENTRY_kScalarApi(api_name) S{#api_name, &Tensor::api_name},
#define TW_SCALAR_ENTRY_kNoScalarApi(api_name)
  for (S s : {TW_BINARY_KINDS(TW_SCALAR_ENTRY)}) {
#undef TW_SCALAR_ENTRY
#undef TW_SCALAR_ENTRY_kScalarApi
#undef TW_SCALAR_ENTRY_kNoScalarApi
    std::string kind = s.kind;
    def(kind + "_scalar",
        [fn = s.fn, kind](const Ts& x, const Attrs& a, const Device&) {
          if (!a.reverse) return (x[0].*fn)(*a.s0);
          if (kind == "add") return *a.s0 + x[0];
          if (kind == "sub") return *a.s0 - x[0];
          if (kind == "mul") return *a.s0 * x[0];
          if (kind == "div") return *a.s0 / x[0];
          throw std::invalid_argument("the API has no reversed " + kind);
        },
        [kind](const Hs& x, const Attrs& a) { return ref::binary_scalar(kind, x[0], *a.s0, a.reverse); });
  }

  // ---- operators ----
  def("op_add", [](const Ts& x, const Attrs&, const Device&) { return x[0] + x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("add", x[0], x[1]); });
  def("op_sub", [](const Ts& x, const Attrs&, const Device&) { return x[0] - x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("sub", x[0], x[1]); });
  def("op_mul", [](const Ts& x, const Attrs&, const Device&) { return x[0] * x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("mul", x[0], x[1]); });
  def("op_div", [](const Ts& x, const Attrs&, const Device&) { return x[0] / x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("div", x[0], x[1]); });
  def("op_neg", [](const Ts& x, const Attrs&, const Device&) { return -x[0]; },
      [](const Hs& x, const Attrs&) { return ref::unary("neg", x[0]); });
  def("op_eq", [](const Ts& x, const Attrs&, const Device&) { return x[0] == x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("eq", x[0], x[1]); });
  def("op_ne", [](const Ts& x, const Attrs&, const Device&) { return x[0] != x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("ne", x[0], x[1]); });
  def("op_lt", [](const Ts& x, const Attrs&, const Device&) { return x[0] < x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("lt", x[0], x[1]); });
  def("op_le", [](const Ts& x, const Attrs&, const Device&) { return x[0] <= x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("le", x[0], x[1]); });
  def("op_gt", [](const Ts& x, const Attrs&, const Device&) { return x[0] > x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("gt", x[0], x[1]); });
  def("op_ge", [](const Ts& x, const Attrs&, const Device&) { return x[0] >= x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("ge", x[0], x[1]); });
  def("op_and", [](const Ts& x, const Attrs&, const Device&) { return x[0] && x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("logical_and", x[0], x[1]); });
  def("op_or", [](const Ts& x, const Attrs&, const Device&) { return x[0] || x[1]; },
      [](const Hs& x, const Attrs&) { return ref::binary("logical_or", x[0], x[1]); });
  def("op_not", [](const Ts& x, const Attrs&, const Device&) { return !x[0]; },
      [](const Hs& x, const Attrs&) { return ref::unary("logical_not", x[0]); });

  // ---- other elementwise ----
  def("where", [](const Ts& x, const Attrs&, const Device&) { return where(x[0], x[1], x[2]); },
      [](const Hs& x, const Attrs&) { return ref::where(x[0], x[1], x[2]); });
  // s0: lower bound, s1: upper bound (either may be absent).
  def("clamp", [](const Ts& x, const Attrs& a, const Device&) { return x[0].clamp(a.s0, a.s1); },
      [](const Hs& x, const Attrs& a) { return ref::clamp(x[0], a.s0, a.s1); });
  def("masked_fill", [](const Ts& x, const Attrs& a, const Device&) { return x[0].masked_fill(x[1], *a.s0); },
      [](const Hs& x, const Attrs& a) { return ref::masked_fill(x[0], x[1], *a.s0); });
  def("cast", [](const Ts& x, const Attrs& a, const Device&) { return x[0].to(*a.dtype); },
      [](const Hs& x, const Attrs& a) { return ref::cast(x[0], *a.dtype); });

  // ---- reductions: "<kind>" (all dims), "<kind>_dim" (dim, keepdim), "<kind>_dims" (dims, keepdim) ----
#define TW_REDUCE_NAME(Kind, ir_name, api_name, ...) #api_name,
  for (std::string k : {TW_REDUCE_KINDS(TW_REDUCE_NAME)}) {
#undef TW_REDUCE_NAME
    def(k, [k](const Ts& x, const Attrs& a, const Device&) { return call_reduce(k, Form::kAll, x[0], a); },
        [k](const Hs& x, const Attrs&) { return ref::reduce(k, x[0], {}, false); });
    def(k + "_dim", [k](const Ts& x, const Attrs& a, const Device&) { return call_reduce(k, Form::kDim, x[0], a); },
        [k](const Hs& x, const Attrs& a) { return ref::reduce(k, x[0], {a.dim}, a.keepdim); });
    if (k == "sum" || k == "mean") {
      def(k + "_dims",
          [k](const Ts& x, const Attrs& a, const Device&) { return call_reduce(k, Form::kDims, x[0], a); },
          [k](const Hs& x, const Attrs& a) { return ref::reduce(k, x[0], a.dims, a.keepdim); });
    }
  }
  def("cumsum", [](const Ts& x, const Attrs& a, const Device&) { return x[0].cumsum(a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::cumsum(x[0], a.dim); });

  // ---- linear algebra ----
  def("matmul", [](const Ts& x, const Attrs&, const Device&) { return x[0].matmul(x[1]); },
      [](const Hs& x, const Attrs&) { return ref::matmul(x[0], x[1]); });
  def("matmul_fn", [](const Ts& x, const Attrs&, const Device&) { return matmul(x[0], x[1]); },
      [](const Hs& x, const Attrs&) { return ref::matmul(x[0], x[1]); });

  // ---- movement ----
  def("reshape", [](const Ts& x, const Attrs& a, const Device&) { return x[0].reshape(a.shape); },
      [](const Hs& x, const Attrs& a) { return ref::reshape(x[0], a.shape); });
  def("view", [](const Ts& x, const Attrs& a, const Device&) { return x[0].view(a.shape); },
      [](const Hs& x, const Attrs& a) { return ref::reshape(x[0], a.shape); });
  def("flatten", [](const Ts& x, const Attrs& a, const Device&) { return x[0].flatten(a.dim, a.dim2); },
      [](const Hs& x, const Attrs& a) { return ref::flatten(x[0], a.dim, a.dim2); });
  def("permute", [](const Ts& x, const Attrs& a, const Device&) { return x[0].permute(a.dims); },
      [](const Hs& x, const Attrs& a) { return ref::permute(x[0], a.dims); });
  def("transpose", [](const Ts& x, const Attrs& a, const Device&) { return x[0].transpose(a.dim, a.dim2); },
      [](const Hs& x, const Attrs& a) { return ref::transpose(x[0], a.dim, a.dim2); });
  def("t", [](const Ts& x, const Attrs&, const Device&) { return x[0].t(); },
      [](const Hs& x, const Attrs&) { return ref::transpose(x[0], 0, 1); });
  def("expand", [](const Ts& x, const Attrs& a, const Device&) { return x[0].expand(a.shape); },
      [](const Hs& x, const Attrs& a) { return ref::expand(x[0], a.shape); });
  def("expand_as", [](const Ts& x, const Attrs&, const Device&) { return x[0].expand_as(x[1]); },
      [](const Hs& x, const Attrs&) { return ref::expand(x[0], x[1].shape); });
  def("squeeze", [](const Ts& x, const Attrs&, const Device&) { return x[0].squeeze(); },
      [](const Hs& x, const Attrs&) { return ref::squeeze(x[0]); });
  def("squeeze_dim", [](const Ts& x, const Attrs& a, const Device&) { return x[0].squeeze(a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::squeeze(x[0], a.dim); });
  def("unsqueeze", [](const Ts& x, const Attrs& a, const Device&) { return x[0].unsqueeze(a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::unsqueeze(x[0], a.dim); });
  def("slice", [](const Ts& x, const Attrs& a, const Device&) { return x[0].slice(a.dim, a.start, a.end, a.step); },
      [](const Hs& x, const Attrs& a) { return ref::slice(x[0], a.dim, a.start, a.end, a.step); });
  def("narrow", [](const Ts& x, const Attrs& a, const Device&) { return x[0].narrow(a.dim, a.start, a.end); },
      [](const Hs& x, const Attrs& a) { return ref::narrow(x[0], a.dim, a.start, a.end); });
  def("slice_assign",
      [](const Ts& x, const Attrs& a, const Device&) { return x[0].slice_assign(a.dim, a.start, a.end, a.step, x[1]); },
      [](const Hs& x, const Attrs& a) { return ref::slice_assign(x[0], a.dim, a.start, a.end, a.step, x[1]); });
  def("cat", [](const Ts& x, const Attrs& a, const Device&) { return cat(x, a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::cat(x, a.dim); });
  def("stack", [](const Ts& x, const Attrs& a, const Device&) { return stack(x, a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::stack(x, a.dim); });
  def("flip", [](const Ts& x, const Attrs& a, const Device&) { return x[0].flip(a.dims); },
      [](const Hs& x, const Attrs& a) { return ref::flip(x[0], a.dims); });
  def("repeat", [](const Ts& x, const Attrs& a, const Device&) { return x[0].repeat(a.dims); },
      [](const Hs& x, const Attrs& a) { return ref::repeat(x[0], a.dims); });

  // ---- indexing ----
  def("gather", [](const Ts& x, const Attrs& a, const Device&) { return x[0].gather(a.dim, x[1]); },
      [](const Hs& x, const Attrs& a) { return ref::gather(x[0], a.dim, x[1]); });
  def("scatter_add", [](const Ts& x, const Attrs& a, const Device&) { return x[0].scatter_add(a.dim, x[1], x[2]); },
      [](const Hs& x, const Attrs& a) { return ref::scatter_add(x[0], a.dim, x[1], x[2]); });
  def("index_select", [](const Ts& x, const Attrs& a, const Device&) { return x[0].index_select(a.dim, x[1]); },
      [](const Hs& x, const Attrs& a) { return ref::index_select(x[0], a.dim, x[1]); });
  // Through autograd: inputs x (its shape), index, the upstream gradient; x's gradient.
  def("index_select_backward",
      [](const Ts& x, const Attrs& a, const Device&) {
        Tensor leaf = x[0].detach();
        leaf.set_requires_grad();
        leaf.index_select(a.dim, x[1]).backward(x[2]);
        return leaf.grad();
      },
      [](const Hs& x, const Attrs& a) { return ref::index_select_backward(x[2], a.dim, x[1], x[0].shape); });
  def("one_hot", [](const Ts& x, const Attrs& a, const Device&) { return one_hot(x[0], a.n); },
      [](const Hs& x, const Attrs& a) { return ref::one_hot(x[0], a.n); });
  def("embedding", [](const Ts& x, const Attrs&, const Device&) { return embedding(x[0], x[1]); },
      [](const Hs& x, const Attrs&) { return ref::embedding(x[0], x[1]); });

  // ---- neural ----
  def("softmax", [](const Ts& x, const Attrs& a, const Device&) { return x[0].softmax(a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::softmax(x[0], a.dim, false); });
  def("log_softmax", [](const Ts& x, const Attrs& a, const Device&) { return x[0].log_softmax(a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::softmax(x[0], a.dim, true); });
  def("softmax_fn", [](const Ts& x, const Attrs& a, const Device&) { return softmax(x[0], a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::softmax(x[0], a.dim, false); });
  def("log_softmax_fn", [](const Ts& x, const Attrs& a, const Device&) { return log_softmax(x[0], a.dim); },
      [](const Hs& x, const Attrs& a) { return ref::softmax(x[0], a.dim, true); });
  // inputs: x, w, and bias when present.
  def("conv2d",
      [](const Ts& x, const Attrs& a, const Device&) {
        return conv2d(x[0], x[1], opt(x, 2), a.stride, a.padding, a.dilation, a.groups);
      },
      [](const Hs& x, const Attrs& a) {
        return ref::conv2d(x[0], x[1], opt(x, 2), a.stride, a.padding, a.dilation, a.groups);
      });
  def("max_pool2d", [](const Ts& x, const Attrs& a, const Device&) { return max_pool2d(x[0], a.kernel, a.stride, a.padding); },
      [](const Hs& x, const Attrs& a) { return ref::pool2d("max", x[0], a.kernel, a.stride, a.padding); });
  def("avg_pool2d", [](const Ts& x, const Attrs& a, const Device&) { return avg_pool2d(x[0], a.kernel, a.stride, a.padding); },
      [](const Hs& x, const Attrs& a) { return ref::pool2d("avg", x[0], a.kernel, a.stride, a.padding); });
  def("adaptive_avg_pool2d", [](const Ts& x, const Attrs& a, const Device&) { return adaptive_avg_pool2d(x[0], a.shape); },
      [](const Hs& x, const Attrs& a) { return ref::adaptive_avg_pool2d(x[0], a.shape); });
  // inputs: x, then weight, then bias; flag: the second input is the bias (no weight).
  def("layer_norm",
      [](const Ts& x, const Attrs& a, const Device&) {
        Tensor w = a.flag ? Tensor() : opt(x, 1), b = a.flag ? opt(x, 1) : opt(x, 2);
        return layer_norm(x[0], a.shape, w, b, a.eps);
      },
      [](const Hs& x, const Attrs& a) {
        auto w = a.flag ? std::nullopt : opt(x, 1), b = a.flag ? opt(x, 1) : opt(x, 2);
        return ref::layer_norm(x[0], a.shape, w, b, a.eps);
      });
  // Through autograd: inputs x, the upstream gradient, then weight, then bias (flag: the third
  // input is the bias, no weight); the gradients of x and of the weight and bias given,
  // flattened and concatenated.
  def("layer_norm_backward",
      [](const Ts& x, const Attrs& a, const Device&) {
        Tensor w = a.flag ? Tensor() : opt(x, 2), b = a.flag ? opt(x, 2) : opt(x, 3);
        Tensor xl = x[0].detach();
        std::vector<Tensor*> leaves = {&xl};
        for (Tensor* p : {&w, &b}) {
          if (!p->defined()) continue;
          *p = p->detach();
          leaves.push_back(p);
        }
        for (Tensor* p : leaves) p->set_requires_grad();
        layer_norm(xl, a.shape, w, b, a.eps).backward(x[1]);
        std::vector<Tensor> grads;
        for (Tensor* p : leaves) grads.push_back(p->grad().reshape({-1}));
        return cat(grads);
      },
      [](const Hs& x, const Attrs& a) {
        auto w = a.flag ? std::nullopt : opt(x, 2), b = a.flag ? opt(x, 2) : opt(x, 3);
        return ref::layer_norm_backward(x[1], x[0], a.shape, w, b.has_value(), a.eps);
      });
  // Through autograd: inputs x, the upstream gradient; x's gradient.
  def("gelu_backward",
      [](const Ts& x, const Attrs&, const Device&) {
        Tensor leaf = x[0].detach();
        leaf.set_requires_grad();
        leaf.gelu().backward(x[1]);
        return leaf.grad();
      },
      [](const Hs& x, const Attrs&) { return ref::gelu_backward(x[1], x[0]); });
  // inputs: query, key, value, then the mask; flag: causal; s0: the scale (absent: 1/sqrt(D)).
  def("scaled_dot_product_attention",
      [](const Ts& x, const Attrs& a, const Device&) {
        std::optional<double> scale;
        if (a.s0) scale = a.s0->f;
        return scaled_dot_product_attention(x[0], x[1], x[2], opt(x, 3), a.flag, scale);
      },
      [](const Hs& x, const Attrs& a) {
        std::optional<double> scale;
        if (a.s0) scale = a.s0->f;
        return ref::scaled_dot_product_attention(x[0], x[1], x[2], opt(x, 3), a.flag, scale);
      });
  // Through autograd: inputs query, key, value, the upstream gradient, then the mask; the
  // gradients of query, key and value flattened and concatenated.
  def("scaled_dot_product_attention_backward",
      [](const Ts& x, const Attrs& a, const Device&) {
        std::optional<double> scale;
        if (a.s0) scale = a.s0->f;
        Tensor q = x[0].detach(), k = x[1].detach(), v = x[2].detach();
        for (Tensor* t : {&q, &k, &v}) t->set_requires_grad();
        scaled_dot_product_attention(q, k, v, opt(x, 4), a.flag, scale).backward(x[3]);
        return cat({q.grad().reshape({-1}), k.grad().reshape({-1}), v.grad().reshape({-1})});
      },
      [](const Hs& x, const Attrs& a) {
        std::optional<double> scale;
        if (a.s0) scale = a.s0->f;
        return ref::scaled_dot_product_attention_backward(x[3], x[0], x[1], x[2], opt(x, 4), a.flag, scale);
      });
  // ---- quantization: axis a.dim, block a.n; block format by a.flag (false Q8_0, true Q4_0) ----
  def("quantize", [](const Ts& x, const Attrs& a, const Device&) { return quantize(x[0], x[1], opt(x, 2), *a.dtype, a.dim, a.n); },
      [](const Hs& x, const Attrs& a) { return ref::quantize(x[0], x[1], opt(x, 2), *a.dtype, a.dim, a.n); });
  def("dequantize", [](const Ts& x, const Attrs& a, const Device&) { return dequantize(x[0], x[1], opt(x, 2), a.dim, a.n); },
      [](const Hs& x, const Attrs& a) { return ref::dequantize(x[0], x[1], opt(x, 2), a.dim, a.n); });
  def("pack_blocks", [](const Ts& x, const Attrs& a, const Device&) { return pack_blocks(x[0], fmt(a)); },
      [](const Hs& x, const Attrs& a) { return ref::pack_blocks(x[0], a.flag); });
  def("unpack_blocks", [](const Ts& x, const Attrs& a, const Device&) { return unpack_blocks(x[0], fmt(a)); },
      [](const Hs& x, const Attrs& a) { return ref::unpack_blocks(x[0], a.flag); });
  // w arrives as f32 [M, K] and is packed first (random bytes would make random f16 scales).
  def("linear_blocks", [](const Ts& x, const Attrs& a, const Device&) { return linear_blocks(x[0], pack_blocks(x[1], fmt(a)), fmt(a), opt(x, 2)); },
      [](const Hs& x, const Attrs& a) { return ref::linear_blocks(x[0], ref::pack_blocks(x[1], a.flag), a.flag, opt(x, 2)); });
  def("linear_int8", [](const Ts& x, const Attrs&, const Device&) { return linear_int8(x[0], x[1], x[2], opt(x, 3)); },
      [](const Hs& x, const Attrs&) { return ref::linear_int8(x[0], x[1], x[2], opt(x, 3)); });
  // clang-format on
  return r;
}

const std::map<std::string, OpDef>& registry() {
  static const std::map<std::string, OpDef> r = build_registry();
  return r;
}

}  // namespace

const OpDef& op_def(const std::string& op) {
  auto it = registry().find(op);
  if (it == registry().end()) throw std::invalid_argument("no op '" + op + "' in the registry");
  return it->second;
}

std::vector<std::string> registered_ops() {
  std::vector<std::string> names;
  for (const auto& [name, def] : registry()) names.push_back(name);
  return names;
}

}  // namespace tw::optest
