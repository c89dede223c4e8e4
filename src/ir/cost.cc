// Op cost estimates (cost.h): one cost_of overload per op struct, dispatched with std::visit, so an
// op added to TW_OP_LIST without one does not compile; the kinds' transcendental counts are
// switches over the kind lists without a default, so a new kind without one fails -Wswitch.
// Estimates are upper ones of what tensorwire's own kernels do: views count as the copies they may
// become, a causal mask as the full square, broadcast inputs as their output's size.
#include "ir/cost.h"

#include <algorithm>
#include <cstdio>
#include <unordered_map>
#include <variant>

namespace tw::ir {
namespace {

double n_of(const TensorMeta& m) { return static_cast<double>(numel(m.shape)); }
double bytes_of(const TensorMeta& m) { return n_of(m) * static_cast<double>(dtype_size(m.dtype)); }

// What every overload reads: the inputs' and outputs' metas.
class C {
 public:
  C(const MetaLookup& lookup, const std::vector<TensorMeta>& outs) : lookup_(lookup), outs_(outs) {}
  // An input's meta (an absent optional input, id 0: empty). infer accepted the op, so every
  // present input is found.
  TensorMeta in(const In& x) const {
    if (x.id == 0) return {};
    Result<TensorMeta> m = lookup_(x.id);
    return m.ok() ? std::move(m).value() : TensorMeta{};
  }
  double in_bytes(const In& x) const { return x.id ? bytes_of(in(x)) : 0; }
  const TensorMeta& out(size_t i = 0) const {
    static const TensorMeta kNone{};
    return i < outs_.size() ? outs_[i] : kNone;
  }
  double out_n() const { return n_of(out()); }
  double out_bytes() const {
    double b = 0;
    for (const TensorMeta& m : outs_) b += bytes_of(m);
    return b;
  }
  // An elementwise op over the output: `flops` and `trans` per element, reading `read` bytes.
  OpCost elementwise(double read, double flops = 1, double trans = 0) const {
    return {flops * out_n(), read + out_bytes(), trans * out_n()};
  }

 private:
  const MetaLookup& lookup_;
  const std::vector<TensorMeta>& outs_;
};

// Transcendental evaluations per element, and other flops per element, of each kind.
double transcendentals(UnaryKind k) {
  switch (k) {
    case UnaryKind::kExp:
    case UnaryKind::kLog:
    case UnaryKind::kLog1p:
    case UnaryKind::kSin:
    case UnaryKind::kCos:
    case UnaryKind::kTanh:
    case UnaryKind::kSigmoid:
    case UnaryKind::kGelu:
    case UnaryKind::kErf: return 1;
    case UnaryKind::kNeg:
    case UnaryKind::kAbs:
    case UnaryKind::kSqrt:
    case UnaryKind::kRsqrt:
    case UnaryKind::kRelu:
    case UnaryKind::kRecip:
    case UnaryKind::kFloor:
    case UnaryKind::kCeil:
    case UnaryKind::kRound:
    case UnaryKind::kSign:
    case UnaryKind::kSquare:
    case UnaryKind::kLogicalNot:
    case UnaryKind::kCount: return 0;
  }
  return 1;
}
double transcendentals(BinaryKind k) {
  switch (k) {
    case BinaryKind::kPow: return 2;  // exp(b log a)
    case BinaryKind::kAdd:
    case BinaryKind::kSub:
    case BinaryKind::kMul:
    case BinaryKind::kDiv:
    case BinaryKind::kMaximum:
    case BinaryKind::kMinimum:
    case BinaryKind::kRemainder:
    case BinaryKind::kEq:
    case BinaryKind::kNe:
    case BinaryKind::kLt:
    case BinaryKind::kLe:
    case BinaryKind::kGt:
    case BinaryKind::kGe:
    case BinaryKind::kLogicalAnd:
    case BinaryKind::kLogicalOr:
    case BinaryKind::kLogicalXor:
    case BinaryKind::kCount: return 0;
  }
  return 2;
}
double flops_per_element(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum:
    case ReduceKind::kMean:
    case ReduceKind::kProd:
    case ReduceKind::kMax:
    case ReduceKind::kMin: return 1;
    case ReduceKind::kArgmax:
    case ReduceKind::kArgmin:
    case ReduceKind::kCount: return 2;  // compare and keep the index
  }
  return 2;
}
double flops_per_window_element(PoolKind k) {
  switch (k) {
    case PoolKind::kMax:
    case PoolKind::kAvg:
    case PoolKind::kCount: return 1;
  }
  return 1;
}

// -- creation --
OpCost cost_of(const Full&, const C& c) { return c.elementwise(0); }
OpCost cost_of(const Arange&, const C& c) { return c.elementwise(0); }
OpCost cost_of(const Eye&, const C& c) { return c.elementwise(0); }
OpCost cost_of(const FromHost& o, const C& c) {
  return {0, static_cast<double>(o.data.data.size()) + c.out_bytes(), 0};
}
OpCost cost_of(const RandUniform&, const C& c) { return c.elementwise(0, 12); }    // Philox
OpCost cost_of(const RandNormal&, const C& c) { return c.elementwise(0, 16, 2); }  // log, cos
OpCost cost_of(const Bernoulli& o, const C& c) { return c.elementwise(c.in_bytes(o.p), 13); }

// -- elementwise --
OpCost cost_of(const Unary& o, const C& c) {
  return c.elementwise(c.in_bytes(o.x), 1, transcendentals(o.kind));
}
OpCost cost_of(const Binary& o, const C& c) {
  return c.elementwise(c.in_bytes(o.a) + c.in_bytes(o.b), 1, transcendentals(o.kind));
}
OpCost cost_of(const BinaryScalar& o, const C& c) {
  return c.elementwise(c.in_bytes(o.a), 1, transcendentals(o.kind));
}
OpCost cost_of(const Where& o, const C& c) {
  return c.elementwise(c.in_bytes(o.cond) + c.in_bytes(o.a) + c.in_bytes(o.b));
}
OpCost cost_of(const Clamp& o, const C& c) { return c.elementwise(c.in_bytes(o.x), 2); }
OpCost cost_of(const MaskedFill& o, const C& c) {
  return c.elementwise(c.in_bytes(o.x) + c.in_bytes(o.mask));
}
OpCost cost_of(const Cast& o, const C& c) { return c.elementwise(c.in_bytes(o.x)); }

// -- reductions: every input element is visited --
OpCost cost_of(const Reduce& o, const C& c) {
  const TensorMeta x = c.in(o.x);
  return {flops_per_element(o.kind) * n_of(x), bytes_of(x) + c.out_bytes(), 0};
}
OpCost cost_of(const Cumsum& o, const C& c) { return c.elementwise(c.in_bytes(o.x)); }

// -- linear algebra: 2 flops per multiply-add, out numel x the inner dimension --
OpCost cost_of(const MatMul& o, const C& c) {
  const TensorMeta a = c.in(o.a), b = c.in(o.b);
  const double k = a.shape.empty() ? 1 : static_cast<double>(a.shape.back());
  return {2 * c.out_n() * k, bytes_of(a) + bytes_of(b) + c.out_bytes(), 0};
}

// -- movement: copies at most --
OpCost cost_of(const Reshape& o, const C& c) { return c.elementwise(c.in_bytes(o.x), 0); }
OpCost cost_of(const Permute& o, const C& c) { return c.elementwise(c.in_bytes(o.x), 0); }
OpCost cost_of(const Expand& o, const C& c) { return c.elementwise(c.in_bytes(o.x), 0); }
OpCost cost_of(const Slice&, const C& c) { return c.elementwise(0, 0); }
OpCost cost_of(const SliceAssign& o, const C& c) {
  return c.elementwise(c.in_bytes(o.x) + c.in_bytes(o.src), 0);
}
OpCost cost_of(const Cat& o, const C& c) {
  double read = 0;
  for (const In& x : o.xs) read += c.in_bytes(x);
  return c.elementwise(read, 0);
}
OpCost cost_of(const Flip& o, const C& c) { return c.elementwise(c.in_bytes(o.x), 0); }
OpCost cost_of(const Repeat& o, const C& c) { return c.elementwise(c.in_bytes(o.x), 0); }

// -- indexing --
OpCost cost_of(const Gather& o, const C& c) {
  return c.elementwise(c.in_bytes(o.x) + c.in_bytes(o.index));
}
OpCost cost_of(const ScatterAdd& o, const C& c) {
  const TensorMeta src = c.in(o.src);
  return {n_of(src) + c.out_n(),
          c.in_bytes(o.x) + c.in_bytes(o.index) + 2 * bytes_of(src) + c.out_bytes(), 0};
}
OpCost cost_of(const IndexSelect& o, const C& c) { return c.elementwise(c.in_bytes(o.index), 0); }
OpCost cost_of(const OneHot& o, const C& c) { return c.elementwise(c.in_bytes(o.x)); }

// -- neural --
OpCost cost_of(const Softmax& o, const C& c) {  // max, exp, sum, scale: two passes over x
  return c.elementwise(2 * c.in_bytes(o.x), 4, 1);
}
// Conv: each output element is a dot product over (C / groups) x kH x kW, which is w's numel per
// output channel. The same count for both backward passes (each is one such product per
// element of what it makes, or of grad).
double conv_flops(double grad_or_out_n, const Shape& w_shape) {
  if (w_shape.empty() || w_shape[0] <= 0) return 0;
  return 2 * grad_or_out_n * static_cast<double>(numel(w_shape)) / static_cast<double>(w_shape[0]);
}
OpCost cost_of(const Conv2d& o, const C& c) {
  const TensorMeta w = c.in(o.w);
  return {conv_flops(c.out_n(), w.shape) + c.out_n(),
          c.in_bytes(o.x) + bytes_of(w) + c.in_bytes(o.bias) + c.out_bytes(), 0};
}
double window(const std::vector<int64_t>& kernel) {
  double k = 1;
  for (int64_t v : kernel) k *= static_cast<double>(v);
  return k;
}
OpCost cost_of(const Pool2d& o, const C& c) {
  return {flops_per_window_element(o.kind) * c.out_n() * window(o.kernel),
          c.in_bytes(o.x) + c.out_bytes(), 0};
}
OpCost cost_of(const AdaptiveAvgPool2d& o, const C& c) {
  // Windows overlap by at most one element per dim: about in + out elements visited per plane.
  const TensorMeta x = c.in(o.x);
  return {n_of(x) * 4 + c.out_n(), bytes_of(x) + c.out_bytes(), 0};
}
OpCost cost_of(const LayerNorm& o, const C& c) {  // mean, variance, normalise, scale and shift
  return c.elementwise(2 * c.in_bytes(o.x) + c.in_bytes(o.weight) + c.in_bytes(o.bias), 8);
}

// -- gradients --
OpCost cost_of(const Conv2dBackwardInput& o, const C& c) {
  const TensorMeta g = c.in(o.grad), w = c.in(o.w);
  return {conv_flops(n_of(g), w.shape), bytes_of(g) + bytes_of(w) + c.out_bytes(), 0};
}
OpCost cost_of(const Conv2dBackwardWeight& o, const C& c) {
  const TensorMeta g = c.in(o.grad);
  return {conv_flops(n_of(g), o.w_shape), bytes_of(g) + c.in_bytes(o.x) + c.out_bytes(), 0};
}
OpCost cost_of(const Pool2dBackward& o, const C& c) {
  const TensorMeta g = c.in(o.grad);
  return {n_of(g) * window(o.kernel) * 2 + c.out_n(), bytes_of(g) + c.in_bytes(o.x) + c.out_bytes(),
          0};
}
OpCost cost_of(const IndexSelectBackward& o, const C& c) {
  const TensorMeta g = c.in(o.grad);
  return {n_of(g) + c.out_n(), bytes_of(g) + c.in_bytes(o.index) + c.out_bytes(), 0};
}
OpCost cost_of(const LayerNormBackward& o, const C& c) {
  const TensorMeta x = c.in(o.x);
  return {14 * n_of(x), 3 * bytes_of(x) + c.in_bytes(o.grad) + c.in_bytes(o.weight) + c.out_bytes(),
          0};
}
OpCost cost_of(const GeluBackward& o, const C& c) {  // Phi (erf) and phi (exp) per element
  return c.elementwise(c.in_bytes(o.grad) + c.in_bytes(o.x), 6, 2);
}
OpCost cost_of(const AdaptiveAvgPool2dBackward& o, const C& c) {
  const TensorMeta g = c.in(o.grad);
  return {c.out_n() * 4 + n_of(g), bytes_of(g) + c.out_bytes(), 0};
}

// -- quantization: elementwise over x (Pack/Unpack: a few flops per value, the block max too) --
OpCost cost_of(const Quantize& o, const C& c) {
  return c.elementwise(c.in_bytes(o.x) + c.in_bytes(o.scale) + c.in_bytes(o.zero_point), 4);
}
OpCost cost_of(const Dequantize& o, const C& c) {
  return c.elementwise(c.in_bytes(o.x) + c.in_bytes(o.scale) + c.in_bytes(o.zero_point), 2);
}
OpCost cost_of(const PackBlocks& o, const C& c) {
  return {4 * n_of(c.in(o.x)), c.in_bytes(o.x) + c.out_bytes(), 0};
}
OpCost cost_of(const UnpackBlocks& o, const C& c) { return c.elementwise(c.in_bytes(o.x), 2); }
// out [N, M] from x [N, K]: 2 K flops per output, plus unpacking (LinearBlocks) or quantizing x.
OpCost cost_of(const LinearBlocks& o, const C& c) {
  const TensorMeta x = c.in(o.x);
  const double k = x.shape.size() == 2 ? static_cast<double>(x.shape[1]) : 1;
  return {2 * c.out_n() * k + c.out_n(),
          bytes_of(x) + c.in_bytes(o.w) + c.in_bytes(o.bias) + c.out_bytes(), 0};
}
OpCost cost_of(const LinearInt8& o, const C& c) {
  const TensorMeta x = c.in(o.x);
  const double k = x.shape.size() == 2 ? static_cast<double>(x.shape[1]) : 1;
  return {
      2 * c.out_n() * k + 4 * n_of(x) + 2 * c.out_n(),
      bytes_of(x) + c.in_bytes(o.w) + c.in_bytes(o.w_scale) + c.in_bytes(o.bias) + c.out_bytes(),
      0};
}

// -- fused --
OpCost cost_of(const Linear& o, const C& c) {  // out [N, out] = x [N, in] w^T
  const TensorMeta x = c.in(o.x), w = c.in(o.w);
  const double in = x.shape.empty() ? 1 : static_cast<double>(x.shape.back());
  return {2 * c.out_n() * in + 2 * c.out_n(),
          bytes_of(x) + bytes_of(w) + c.in_bytes(o.bias) + c.out_bytes(), 0};
}

// -- attention: q [..., Tq, d], k [..., Tk, d], v [..., Tk, dv]; out [..., Tq, dv] --
// Per score: d multiply-adds for q k^T and dv for p v, scale, mask, max, exp, sum, rescale; a
// causal mask is counted as the full square (an upper estimate).
struct AttentionDims {
  double scores = 0, d = 0, dv = 0;
};
AttentionDims attention_dims(const TensorMeta& q, const TensorMeta& k, const TensorMeta& v) {
  AttentionDims a;
  if (q.shape.size() < 2 || k.shape.size() < 2 || v.shape.empty()) return a;
  const double tq = static_cast<double>(q.shape[q.shape.size() - 2]);
  const double tk = static_cast<double>(k.shape[k.shape.size() - 2]);
  a.d = static_cast<double>(q.shape.back());
  a.dv = static_cast<double>(v.shape.back());
  double bh = 1;
  for (size_t i = 0; i + 2 < q.shape.size(); ++i) bh *= static_cast<double>(q.shape[i]);
  a.scores = bh * tq * tk;
  return a;
}
OpCost cost_of(const ScaledDotProductAttention& o, const C& c) {
  const TensorMeta q = c.in(o.query), k = c.in(o.key), v = c.in(o.value);
  const AttentionDims a = attention_dims(q, k, v);
  return {a.scores * (2 * (a.d + a.dv) + 6),
          bytes_of(q) + bytes_of(k) + bytes_of(v) + c.in_bytes(o.mask) + c.out_bytes(), a.scores};
}
OpCost cost_of(const ScaledDotProductAttentionBackward& o, const C& c) {
  // Scores recomputed (q k^T, exp), then dv, dp, dq and dk: five products per score.
  const TensorMeta q = c.in(o.query), k = c.in(o.key), v = c.in(o.value);
  const AttentionDims a = attention_dims(q, k, v);
  return {a.scores * (2 * (3 * a.d + 2 * a.dv) + 10),
          c.in_bytes(o.grad) + bytes_of(q) + bytes_of(k) + bytes_of(v) + c.in_bytes(o.mask) +
              c.out_bytes(),
          a.scores};
}

// -- optimizer steps --
OpCost cost_of(const AdamStep& o, const C& c) {
  const TensorMeta p = c.in(o.param);
  return {14 * n_of(p),
          bytes_of(p) + c.in_bytes(o.grad) + c.in_bytes(o.exp_avg) + c.in_bytes(o.exp_avg_sq) +
              c.out_bytes(),
          0};
}

OpCost cost_of(const std::monostate&, const C&) { return {}; }

}  // namespace

double cost_seconds(const OpCost& c, const DeviceRate& r) {
  return c.flops / r.flops + c.bytes / r.bytes + c.transcendentals / r.transcendentals;
}

OpCost size_bound(double max_input_numel, double input_bytes,
                  const std::vector<TensorMeta>& outputs) {
  double out_numel = 0, out_bytes = 0;
  for (const TensorMeta& m : outputs) {
    const double n = static_cast<double>(numel(m.shape));
    out_numel += n;
    out_bytes += n * static_cast<double>(dtype_size(m.dtype));
  }
  const double work = kSizeBoundWork * std::max(1.0, out_numel) * std::max(1.0, max_input_numel);
  return OpCost{work, 4 * (input_bytes + out_bytes), work};
}

OpCost op_cost(const Op& op, const MetaLookup& lookup, const std::vector<TensorMeta>& outputs) {
  const C c(lookup, outputs);
  return std::visit([&](const auto& o) { return cost_of(o, c); }, op);
}

Result<std::vector<OpCost>> graph_op_costs(const Graph& graph) {
  if (graph.input_ids.size() != graph.inputs.size()) return invalid_argument("graph: bad inputs");
  std::unordered_map<TensorId, TensorMeta> metas;
  for (size_t i = 0; i < graph.input_ids.size(); ++i) metas[graph.input_ids[i]] = graph.inputs[i];
  const MetaLookup lookup = [&](TensorId id) -> Result<TensorMeta> {
    auto it = metas.find(id);
    if (it == metas.end()) return not_found("graph: no tensor " + std::to_string(id));
    return it->second;
  };
  std::vector<OpCost> costs;
  costs.reserve(graph.ops.size());
  for (const Op& op : graph.ops) {
    TW_ASSIGN_OR_RETURN(std::vector<TensorMeta> outs, infer(op, lookup));
    costs.push_back(op_cost(op, lookup, outs));
    const std::vector<TensorId> ids = op_outputs(op);
    for (size_t k = 0; k < ids.size() && k < outs.size(); ++k) metas[ids[k]] = outs[k];
  }
  return costs;
}

std::string cost_str(const OpCost& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.3g FLOPs, %.3g bytes, %.3g transcendentals", c.flops, c.bytes,
                c.transcendentals);
  return buf;
}

}  // namespace tw::ir
