// The backward rule of every differentiable op: the file an op author edits (the engine that
// runs them is api/autograd.cc; see api/autograd.h for the data model).
//
// A rule is chosen per op struct of the IR, so composite API calls (stack, embedding, squeeze,
// 1-D matmul, ...) are differentiated through the primitive ops they emit. Rules capture only the
// handles they need and compute only the gradients of inputs that require grad. Backward runs
// with grad mode off: its ops are not recorded (no gradients of gradients).
//
// Which ops and kinds have a rule is declared in ir/ops.h (each op's kAutograd, the kind lists'
// grad column), not here: an op declared kRule or kByKind without an overload below, or one
// declared kNone with one, does not compile; tests/unit/autograd checks the kinds.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdlib>
#include <numbers>
#include <string_view>

#include "api/autograd.h"
#include "api/emit.h"
#include "core/env.h"
#include "tensorwire/autograd.h"

namespace tw::autograd {

namespace {

using Grads = std::vector<Tensor>;

// ================================ helpers for rules ================================

Scalar to_api(const ir::Scalar& s) { return s.is_float ? Scalar(s.f) : Scalar(s.i); }

// Sums a broadcast gradient back to the shape of the operand that was broadcast.
Tensor sum_to(const Tensor& g, const Shape& shape) {
  const Shape& gs = g.shape();
  if (gs == shape) return g;
  const int64_t lead = static_cast<int64_t>(gs.size()) - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  bool inner = false;  // a size-1 dim of shape was stretched
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1 && gs[lead + i] != 1) {
      dims.push_back(lead + static_cast<int64_t>(i));
      inner = true;
    }
  }
  // Only new leading dims (a bias added to a batch): one reduction gives the shape directly.
  if (!inner) return g.sum(dims);
  Tensor r = g.sum(dims, /*keepdim=*/true);
  return r.shape() == shape ? r : r.reshape(shape);
}

// The dims a Reduce op reduced, normalised and sorted (empty attribute: all). A 0-d input has
// none, whatever dim it was given (0 and -1 are accepted, as in PyTorch: ir/infer.cc).
std::vector<int64_t> reduced_dims(const std::vector<int64_t>& dims, int64_t rank) {
  std::vector<int64_t> out;
  if (rank == 0) return out;
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d) out.push_back(d);
  } else {
    for (int64_t d : dims) out.push_back(d < 0 ? d + rank : d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// x's shape with the reduced dims kept as 1.
Shape keepdim_shape(const Shape& x, const std::vector<int64_t>& dims) {
  Shape s = x;
  for (int64_t d : dims) s[static_cast<size_t>(d)] = 1;
  return s;
}

// A reduction's output (or its gradient) broadcast back over the reduced dims.
Tensor expand_back(const Tensor& g, const Shape& x_shape, const std::vector<int64_t>& dims) {
  // expand adds leading dims itself: no reshape when keepdim was set or only leading dims went.
  bool leading =
      g.dim() + static_cast<int64_t>(dims.size()) == static_cast<int64_t>(x_shape.size());
  for (size_t i = 0; leading && i < dims.size(); ++i) leading = dims[i] == static_cast<int64_t>(i);
  const Tensor k = g.dim() == static_cast<int64_t>(x_shape.size()) || leading
                       ? g
                       : g.reshape(keepdim_shape(x_shape, dims));
  return k.shape() == x_shape ? k : k.expand(x_shape);
}

int64_t norm(int64_t d, int64_t rank) { return d < 0 ? d + rank : d; }

Tensor emit_like(const Tensor& anchor, ir::Op op, std::initializer_list<const Tensor*> inputs) {
  return detail::emit(anchor.impl()->sink, std::move(op), inputs);
}

// x with the region (starts, ends, steps) replaced by src (broadcast).
Tensor slice_assign_all(const Tensor& x, const Tensor& src, const ir::Slice& region) {
  return emit_like(
      x,
      ir::SliceAssign{detail::in(x), detail::in(src), region.starts, region.ends, region.steps, {}},
      {&x, &src});
}
Tensor slice_all(const Tensor& x, const std::vector<int64_t>& starts,
                 const std::vector<int64_t>& ends, const std::vector<int64_t>& steps) {
  return emit_like(x, ir::Slice{detail::in(x), starts, ends, steps, {}}, {&x});
}

Tensor zeros_as(const TensorMeta& m, const Device& d) { return zeros(m.shape, m.dtype, d); }

// Test-only: TW_TEST_PLANT_GRAD_BUG=sub_broadcast in the environment (read once) plants a wrong
// rule: Sub's gradient for a right operand that was broadcast loses its minus sign. The
// differential fuzzer's test (tests/difffuzz) sets it and requires the fuzzer to report it.
bool planted_sub_bug() {
  static const bool on = [] {
    return env_text(Env::kTEST_PLANT_GRAD_BUG).value_or("") == "sub_broadcast";
  }();
  return on;
}

// ================================ the rules ================================
// One overload per op declared differentiable (ir::Autograd::kRule or kByKind in ir/ops.h);
// the static_asserts below hold the two in step.
struct Rules {
  const RuleInputs& r;

  BackwardFn operator()(const ir::Unary& op) const {
    const Tensor x = r.in[0];
    using K = ir::UnaryKind;
    switch (op.kind) {
      case K::kNeg: return [](const Tensor& g) -> Grads { return {-g}; };
      case K::kAbs: return [x](const Tensor& g) -> Grads { return {g * x.sign()}; };
      case K::kExp: {
        Tensor y = r.saved_out();
        return [y](const Tensor& g) -> Grads { return {g * y}; };
      }
      case K::kLog: return [x](const Tensor& g) -> Grads { return {g / x}; };
      case K::kLog1p: return [x](const Tensor& g) -> Grads { return {g / (x + 1.0)}; };
      case K::kSqrt: {
        Tensor y = r.saved_out();
        return [y](const Tensor& g) -> Grads { return {g / (y * 2.0)}; };
      }
      case K::kRsqrt: {
        Tensor y = r.saved_out();
        return [y](const Tensor& g) -> Grads { return {g * (y.square() * y) * -0.5}; };
      }
      case K::kSin: return [x](const Tensor& g) -> Grads { return {g * x.cos()}; };
      case K::kCos: return [x](const Tensor& g) -> Grads { return {-(g * x.sin())}; };
      case K::kTanh: {
        Tensor y = r.saved_out();
        return [y](const Tensor& g) -> Grads { return {g * (1.0 - y.square())}; };
      }
      case K::kSigmoid: {
        Tensor y = r.saved_out();
        return [y](const Tensor& g) -> Grads { return {g * (y * (1.0 - y))}; };
      }
      case K::kRelu: {
        // g * !(y <= 0): a multiply by the bool mask is several times faster than a
        // masked_fill or where on the CPU (no data-dependent branch). As PyTorch's
        // threshold_backward, a NaN input passes g (NaN <= 0 is false). Unlike PyTorch, a NaN or
        // inf in g where y <= 0 gives NaN there rather than 0.
        Tensor y = r.saved_out();
        return [y](const Tensor& g) -> Grads { return {g * y.le(0).logical_not()}; };
      }
      case K::kGelu:  // d/dx x * Phi(x) = Phi(x) + x * phi(x)
        return [x](const Tensor& g) -> Grads {
          // One kernel where the device has it (protocol 9), else composed.
          if (g.impl()->sink->supports(ir::OpCode::kGeluBackward)) {
            return {emit_like(g, ir::GeluBackward{detail::in(g), detail::in(x), {}}, {&g, &x})};
          }
          const double inv_sqrt_2pi = 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2;
          Tensor cdf = (x * (1.0 / std::numbers::sqrt2)).erf() * 0.5 + 0.5;
          Tensor pdf = (x.square() * -0.5).exp() * inv_sqrt_2pi;
          return {g * (cdf + x * pdf)};
        };
      case K::kErf:
        return [x](const Tensor& g) -> Grads {
          return {g * ((x.square().neg()).exp() * (2.0 * std::numbers::inv_sqrtpi))};
        };
      case K::kRecip: {
        Tensor y = r.saved_out();
        return [y](const Tensor& g) -> Grads { return {-(g * y.square())}; };
      }
      case K::kFloor:
      case K::kCeil:
      case K::kRound:
      case K::kSign: return [](const Tensor& g) -> Grads { return {zeros_like(g)}; };
      case K::kSquare: return [x](const Tensor& g) -> Grads { return {g * (x * 2.0)}; };
      default: return nullptr;
    }
  }

  BackwardFn operator()(const ir::Binary& op) const {
    const bool na = r.needs[0], nb = r.needs[1];
    const Shape as = r.in[0].shape(), bs = r.in[1].shape();
    const Tensor a = r.in[0], b = r.in[1];
    auto pick = [](bool need, const Tensor& t) { return need ? t : Tensor(); };
    using K = ir::BinaryKind;
    switch (op.kind) {
      case K::kAdd:
        return [=](const Tensor& g) -> Grads {
          return {na ? sum_to(g, as) : Tensor(), nb ? sum_to(g, bs) : Tensor()};
        };
      case K::kSub:
        return [=](const Tensor& g) -> Grads {
          if (nb && bs != g.shape() && planted_sub_bug())
            return {na ? sum_to(g, as) : Tensor(), sum_to(g, bs)};
          return {na ? sum_to(g, as) : Tensor(), nb ? sum_to(-g, bs) : Tensor()};
        };
      case K::kMul: {
        Tensor sa = pick(nb, a), sb = pick(na, b);
        return [=](const Tensor& g) -> Grads {
          return {na ? sum_to(g * sb, as) : Tensor(), nb ? sum_to(g * sa, bs) : Tensor()};
        };
      }
      case K::kDiv: {
        Tensor y = nb ? r.saved_out() : Tensor();
        return [=](const Tensor& g) -> Grads {
          return {na ? sum_to(g / b, as) : Tensor(), nb ? sum_to(-(g * y) / b, bs) : Tensor()};
        };
      }
      case K::kPow: {
        Tensor y = nb ? r.saved_out() : Tensor();
        return [=](const Tensor& g) -> Grads {
          Grads out(2);
          // As PyTorch: an exponent of 0 gives a partial of 0 (not 0 * inf), and so does a base
          // of 0 for the exponent's partial when the exponent is >= 0. The partial is masked
          // before g multiplies it, so a NaN in g still gives NaN there, as in PyTorch.
          if (na) out[0] = sum_to(g * (b * a.pow(b - 1.0)).masked_fill(b.eq(0), 0), as);
          if (nb)
            out[1] = sum_to(g * (y * a.log()).masked_fill(a.eq(0).logical_and(b.ge(0)), 0), bs);
          return out;
        };
      }
      case K::kMaximum:
      case K::kMinimum: {
        const bool is_max = op.kind == K::kMaximum;
        return [=](const Tensor& g) -> Grads {
          // Ties split the gradient evenly, as PyTorch does.
          Tensor shared = where(a.eq(b), g * 0.5, g);
          Grads out(2);
          if (na) out[0] = sum_to(shared.masked_fill(is_max ? a.lt(b) : a.gt(b), 0), as);
          if (nb) out[1] = sum_to(shared.masked_fill(is_max ? a.gt(b) : a.lt(b), 0), bs);
          return out;
        };
      }
      case K::kRemainder:
        return [=](const Tensor& g) -> Grads {
          // a - floor(a / b) * b
          return {na ? sum_to(g, as) : Tensor(),
                  nb ? sum_to(-(g * (a / b).floor()), bs) : Tensor()};
        };
      default: return nullptr;  // comparisons and logical kinds give bool
    }
  }

  BackwardFn operator()(const ir::BinaryScalar& op) const {
    const Tensor a = r.in[0];
    const double s = op.s.as_double();
    const bool rev = op.reverse;
    using K = ir::BinaryKind;
    switch (op.kind) {
      case K::kAdd: return [](const Tensor& g) -> Grads { return {g}; };
      case K::kSub: return [rev](const Tensor& g) -> Grads { return {rev ? -g : g}; };
      case K::kMul: {
        const Scalar sc = to_api(op.s);
        return [sc](const Tensor& g) -> Grads { return {g * sc}; };
      }
      case K::kDiv: {
        if (!rev) {
          const Scalar sc = to_api(op.s);
          return [sc](const Tensor& g) -> Grads { return {g / sc}; };
        }
        Tensor y = r.saved_out();  // s / a
        return [a, y](const Tensor& g) -> Grads { return {-(g * y) / a}; };
      }
      case K::kPow: {
        if (rev) {  // s ** a
          Tensor y = r.saved_out();
          return [y, s](const Tensor& g) -> Grads {
            return {s == 0 ? zeros_like(g) : g * y * std::log(s)};
          };
        }
        return [a, s](const Tensor& g) -> Grads {  // a ** s
          return {s == 0 ? zeros_like(g) : g * s * a.pow(s - 1.0)};
        };
      }
      case K::kRemainder:
        if (!rev) return [](const Tensor& g) -> Grads { return {g}; };
        return [a, s](const Tensor& g) -> Grads { return {-(g * (Scalar(s) / a).floor())}; };
      case K::kMaximum:
      case K::kMinimum: {
        const bool is_max = op.kind == K::kMaximum;
        const Scalar sc = to_api(op.s);
        return [a, sc, is_max](const Tensor& g) -> Grads {
          Tensor shared = where(a.eq(sc), g * 0.5, g);
          return {shared.masked_fill(is_max ? a.lt(sc) : a.gt(sc), 0)};
        };
      }
      default: return nullptr;
    }
  }

  BackwardFn operator()(const ir::Where&) const {
    const Tensor cond = r.in[0];
    const bool na = r.needs[1], nb = r.needs[2];
    const Shape as = r.in[1].shape(), bs = r.in[2].shape();
    return [=](const Tensor& g) -> Grads {
      return {Tensor(), na ? sum_to(g.masked_fill(cond.logical_not(), 0), as) : Tensor(),
              nb ? sum_to(g.masked_fill(cond, 0), bs) : Tensor()};
    };
  }

  BackwardFn operator()(const ir::Clamp& op) const {
    const Tensor x = r.in[0];
    const bool has_lo = op.has_lo, has_hi = op.has_hi;
    const Scalar lo = to_api(op.lo), hi = to_api(op.hi);
    return [=](const Tensor& g) -> Grads {
      // As PyTorch: the gradient passes where lo <= x <= hi (so not at NaN).
      Tensor keep;
      if (has_lo) keep = x.ge(lo);
      if (has_hi) keep = keep.defined() ? keep.logical_and(x.le(hi)) : x.le(hi);
      return {keep.defined() ? g.masked_fill(keep.logical_not(), 0) : g};
    };
  }

  BackwardFn operator()(const ir::MaskedFill&) const {
    const Tensor mask = r.in[1];
    return [mask](const Tensor& g) -> Grads { return {g.masked_fill(mask, 0), Tensor()}; };
  }

  BackwardFn operator()(const ir::Cast&) const {
    const DType from = r.in[0].dtype();
    if (!grad_dtype(from)) return nullptr;
    return [from](const Tensor& g) -> Grads { return {g.dtype() == from ? g : g.to(from)}; };
  }

  BackwardFn operator()(const ir::Reduce& op) const {
    const Tensor x = r.in[0];
    const Shape xs = x.shape();
    const std::vector<int64_t> dims = reduced_dims(op.dims, x.dim());
    using K = ir::ReduceKind;
    switch (op.kind) {
      case K::kSum: return [=](const Tensor& g) -> Grads { return {expand_back(g, xs, dims)}; };
      case K::kMean: {
        int64_t count = 1;
        for (int64_t d : dims) count *= xs[static_cast<size_t>(d)];
        return [=](const Tensor& g) -> Grads {
          return {expand_back(g / static_cast<double>(count), xs, dims)};
        };
      }
      case K::kProd: {
        // prod / x where x has no zero in its slice. With one zero, that element gets the product
        // of the others and the rest 0; with several, every element gets 0 (as torch does).
        // Computed with the zeros replaced by 1, so no 0/0 reaches the result.
        const std::vector<int64_t> one_dim = op.dims;
        // Of a 0-d x, prod is x itself: its gradient is g, also where x is inf (inf / inf would
        // give NaN; torch gives g).
        if (xs.empty()) return [](const Tensor& g) -> Grads { return {g}; };
        return [=](const Tensor& g) -> Grads {
          const Tensor zero = x.eq(0.0);
          const Tensor safe = x.masked_fill(zero, 1.0);
          const bool all = dims.empty() || one_dim.empty();
          // Per element: the product of its slice's nonzero elements, and its slice's zeros.
          const Tensor others =
              expand_back(all ? safe.prod() : safe.prod(one_dim[0], /*keepdim=*/true), xs, dims);
          const Tensor zeros = expand_back(
              dims.empty() ? zero.to(x.dtype()) : zero.to(x.dtype()).sum(dims, /*keepdim=*/true),
              xs, dims);
          const Tensor factor = where(zero, others.masked_fill(zeros.ne(1.0), 0.0),
                                      (others / safe).masked_fill(zeros.ne(0.0), 0.0));
          return {expand_back(g, xs, dims) * factor};
        };
      }
      case K::kMax:
      case K::kMin: {
        // To the positions holding the extreme value (a NaN extreme: the NaNs), split evenly
        // between ties; the others get exactly 0, whatever g holds (as torch's masked_fill).
        Tensor y = r.saved_out();
        return [=](const Tensor& g) -> Grads {
          Tensor hit = x.eq(expand_back(y, xs, dims)).logical_or(x.ne(x));
          Tensor count = hit.to(x.dtype());
          if (!dims.empty()) count = count.sum(dims, /*keepdim=*/true);
          return {(expand_back(g, xs, dims) / count).masked_fill(hit.logical_not(), 0.0)};
        };
      }
      default: return nullptr;  // argmax, argmin
    }
  }

  BackwardFn operator()(const ir::Cumsum& op) const {
    const int64_t rank = r.in[0].dim();
    if (rank == 0) return [](const Tensor& g) -> Grads { return {g}; };
    const int64_t d = norm(op.dim, rank);
    return [d](const Tensor& g) -> Grads { return {g.flip({d}).cumsum(d).flip({d})}; };
  }

  BackwardFn operator()(const ir::MatMul&) const {
    const bool na = r.needs[0], nb = r.needs[1];
    const Tensor a = nb ? r.in[0] : Tensor(), b = na ? r.in[1] : Tensor();
    const Shape as = r.in[0].shape(), bs = r.in[1].shape();
    return [=](const Tensor& g) -> Grads {
      return {na ? sum_to(g.matmul(b.transpose(-1, -2)), as) : Tensor(),
              nb ? sum_to(a.transpose(-1, -2).matmul(g), bs) : Tensor()};
    };
  }

  BackwardFn operator()(const ir::Reshape&) const {
    const Shape xs = r.in[0].shape();
    return [xs](const Tensor& g) -> Grads { return {g.reshape(xs)}; };
  }

  BackwardFn operator()(const ir::Permute& op) const {
    const int64_t rank = r.in[0].dim();
    std::vector<int64_t> inverse(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) inverse[static_cast<size_t>(norm(op.dims[i], rank))] = i;
    return [inverse](const Tensor& g) -> Grads { return {g.permute(inverse)}; };
  }

  BackwardFn operator()(const ir::Expand&) const {
    const Shape xs = r.in[0].shape();
    return [xs](const Tensor& g) -> Grads { return {sum_to(g, xs)}; };
  }

  BackwardFn operator()(const ir::Slice& op) const {
    const TensorMeta xm{r.in[0].shape(), r.in[0].dtype()};
    return [xm, op](const Tensor& g) -> Grads {
      return {slice_assign_all(zeros_as(xm, g.device()), g, op)};
    };
  }

  BackwardFn operator()(const ir::SliceAssign& op) const {
    const bool nx = r.needs[0], ns = r.needs[1];
    const Shape src_shape = r.in[1].shape();
    const ir::Slice region{{}, op.starts, op.ends, op.steps, {}};
    return [=](const Tensor& g) -> Grads {
      Grads out(2);
      if (nx) out[0] = slice_assign_all(g, zeros({}, g.dtype(), g.device()), region);
      if (ns) out[1] = sum_to(slice_all(g, region.starts, region.ends, region.steps), src_shape);
      return out;
    };
  }

  BackwardFn operator()(const ir::Cat& op) const {
    const int64_t rank = r.in[0].dim();
    const int64_t d = norm(op.dim, rank);
    std::vector<int64_t> sizes;
    for (const Tensor& t : r.in) sizes.push_back(t.shape()[static_cast<size_t>(d)]);
    const std::vector<bool> needs = r.needs;
    return [=](const Tensor& g) -> Grads {
      Grads out(sizes.size());
      int64_t offset = 0;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (needs[i]) out[i] = g.slice(d, offset, offset + sizes[i]);
        offset += sizes[i];
      }
      return out;
    };
  }

  BackwardFn operator()(const ir::Flip& op) const {
    const std::vector<int64_t> dims = op.dims;
    return [dims](const Tensor& g) -> Grads { return {g.flip(dims)}; };
  }

  BackwardFn operator()(const ir::Repeat& op) const {
    // out dim i is repeats[i] tiles of size s_i: view g as [r_0, s_0, r_1, s_1, ...] (new
    // leading dims have no s) and sum the tile dims.
    const Shape xs = r.in[0].shape();
    const size_t lead = op.repeats.size() - xs.size();
    Shape split;
    std::vector<int64_t> tile_dims;
    for (size_t i = 0; i < op.repeats.size(); ++i) {
      tile_dims.push_back(static_cast<int64_t>(split.size()));
      split.push_back(op.repeats[i]);
      if (i >= lead) split.push_back(xs[i - lead]);
    }
    return [=](const Tensor& g) -> Grads {
      if (tile_dims.empty()) return {g};
      return {g.reshape(split).sum(tile_dims).reshape(xs)};
    };
  }

  BackwardFn operator()(const ir::Gather& op) const {
    const TensorMeta xm{r.in[0].shape(), r.in[0].dtype()};
    const Tensor index = r.in[1];
    const int64_t d = op.dim;
    return [=](const Tensor& g) -> Grads {
      return {zeros_as(xm, g.device()).scatter_add(d, index, g), Tensor()};
    };
  }

  BackwardFn operator()(const ir::ScatterAdd& op) const {
    const bool nx = r.needs[0], ns = r.needs[2];
    const Tensor index = r.in[1];
    const TensorMeta sm{r.in[2].shape(), r.in[2].dtype()};
    const int64_t d = op.dim;
    return [=](const Tensor& g) -> Grads {
      Grads out(3);
      if (nx) out[0] = g;
      if (ns) {
        Tensor gs = g.gather(d, index);
        if (gs.shape() != sm.shape) {  // only the index's extent of src was used
          std::vector<int64_t> starts(sm.shape.size(), 0), steps(sm.shape.size(), 1);
          const ir::Slice region{{}, starts, index.shape(), steps, {}};
          gs = slice_assign_all(zeros_as(sm, g.device()), gs, region);
        }
        out[2] = gs;
      }
      return out;
    };
  }

  BackwardFn operator()(const ir::IndexSelect& op) const {
    const TensorMeta xm{r.in[0].shape(), r.in[0].dtype()};
    const Tensor index = r.in[1];
    const int64_t rank = static_cast<int64_t>(xm.shape.size());
    if (rank == 0) return [](const Tensor& g) -> Grads { return {g, Tensor()}; };
    const int64_t d = norm(op.dim, rank);
    return [=](const Tensor& g) -> Grads {
      // The selected slices added back in one kernel where the device has it (protocol 8).
      if (g.impl()->sink->supports(ir::OpCode::kIndexSelectBackward)) {
        return {
            emit_like(g, ir::IndexSelectBackward{detail::in(g), detail::in(index), d, xm.shape, {}},
                      {&g, &index}),
            Tensor()};
      }
      // Else scatter-add them: the index broadcast along the other dims.
      Shape ishape(static_cast<size_t>(rank), 1);
      ishape[static_cast<size_t>(d)] = index.numel();
      Tensor idx = index.reshape(ishape).expand(g.shape());
      return {zeros_as(xm, g.device()).scatter_add(d, idx, g), Tensor()};
    };
  }

  BackwardFn operator()(const ir::Softmax& op) const {
    Tensor y = r.saved_out();
    const int64_t d = op.dim;
    if (op.log) {
      return [y, d](const Tensor& g) -> Grads { return {g - y.exp() * g.sum(d, true)}; };
    }
    return [y, d](const Tensor& g) -> Grads { return {y * (g - (g * y).sum(d, true))}; };
  }

  BackwardFn operator()(const ir::Conv2d& op) const {
    const bool nx = r.needs[0], nw = r.needs[1], nb = r.needs.size() > 2 && r.needs[2];
    const Tensor x = nw ? r.in[0] : Tensor(), w = nx ? r.in[1] : Tensor();
    const Shape xs = r.in[0].shape(), ws = r.in[1].shape();
    return [=](const Tensor& g) -> Grads {
      Grads out(3);
      if (nx) {
        out[0] = emit_like(g,
                           ir::Conv2dBackwardInput{detail::in(g),
                                                   detail::in(w),
                                                   xs,
                                                   op.stride,
                                                   op.padding,
                                                   op.dilation,
                                                   op.groups,
                                                   {}},
                           {&g, &w});
      }
      if (nw) {
        out[1] = emit_like(g,
                           ir::Conv2dBackwardWeight{detail::in(g),
                                                    detail::in(x),
                                                    ws,
                                                    op.stride,
                                                    op.padding,
                                                    op.dilation,
                                                    op.groups,
                                                    {}},
                           {&g, &x});
      }
      if (nb) out[2] = g.sum({0, 2, 3});
      return out;
    };
  }

  BackwardFn operator()(const ir::Pool2d& op) const {
    const Tensor x = r.in[0];
    return [x, op](const Tensor& g) -> Grads {
      return {emit_like(
          g,
          ir::Pool2dBackward{
              op.kind, detail::in(g), detail::in(x), op.kernel, op.stride, op.padding, {}},
          {&g, &x})};
    };
  }

  BackwardFn operator()(const ir::AdaptiveAvgPool2d&) const {
    const Shape xs = r.in[0].shape();
    return [xs](const Tensor& g) -> Grads {
      return {emit_like(g, ir::AdaptiveAvgPool2dBackward{detail::in(g), {xs[2], xs[3]}, {}}, {&g})};
    };
  }

  BackwardFn operator()(const ir::ScaledDotProductAttention& op) const {
    // One backward kernel gives all three gradients (it recomputes the probabilities); the mask
    // takes none.
    const Tensor q = r.in[0], k = r.in[1], v = r.in[2];
    const Tensor mask = r.in.size() > 3 ? r.in[3] : Tensor();
    const std::vector<bool> needs = r.needs;
    return [=](const Tensor& g) -> Grads {
      std::vector<Tensor> d =
          detail::emit_all(g.impl()->sink,
                           ir::ScaledDotProductAttentionBackward{detail::in(g),
                                                                 detail::in(q),
                                                                 detail::in(k),
                                                                 detail::in(v),
                                                                 detail::in(mask),
                                                                 op.causal,
                                                                 op.scale,
                                                                 {},
                                                                 {},
                                                                 {}},
                           {&g, &q, &k, &v, &mask});
      Grads out(4);
      for (size_t i = 0; i < 3; ++i)
        if (needs[i]) out[i] = std::move(d[i]);
      return out;
    };
  }

  BackwardFn operator()(const ir::LayerNorm& op) const {
    // With xhat = (x - mean) * rstd and gh = g * weight:
    //   dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat)), dweight = sum(g * xhat),
    //   dbias = sum(g), the means over the normalised dims and the sums over the others.
    // One LayerNormBackward kernel gives all three where the device has it (protocol 9); else
    // they are composed, recomputing the normalised input from x (cheaper to keep than the
    // statistics' handles).
    const Tensor x = r.in[0];
    const Tensor w = r.in.size() > 1 ? r.in[1] : Tensor();
    const bool nx = r.needs[0], nw = r.needs.size() > 1 && r.needs[1],
               nb = r.needs.size() > 2 && r.needs[2];
    const int64_t rank = x.dim(), k = op.normalized_dims;
    std::vector<int64_t> norm_dims, batch_dims;
    for (int64_t d = 0; d < rank; ++d) (d >= rank - k ? norm_dims : batch_dims).push_back(d);
    const double eps = op.eps;
    return [=](const Tensor& g) -> Grads {
      Grads out(3);
      if (g.impl()->sink->supports(ir::OpCode::kLayerNormBackward)) {
        std::vector<Tensor> d = detail::emit_all(
            g.impl()->sink,
            ir::LayerNormBackward{detail::in(g), detail::in(x), detail::in(w), k, eps, {}, {}, {}},
            {&g, &x, &w});
        const bool needs[3] = {nx, nw, nb};
        for (size_t i = 0; i < 3; ++i)
          if (needs[i]) out[i] = std::move(d[i]);
        return out;
      }
      Tensor mean = x.mean(norm_dims, true);
      Tensor xc = x - mean;
      Tensor rstd = (xc.square().mean(norm_dims, true) + eps).rsqrt();
      Tensor xhat = xc * rstd;
      if (nx) {
        Tensor gh = w.defined() ? g * w : g;
        out[0] = rstd * (gh - gh.mean(norm_dims, true) - xhat * (gh * xhat).mean(norm_dims, true));
      }
      // sum over an empty dim list would reduce every dim: no leading dims, nothing to add.
      if (nw) out[1] = batch_dims.empty() ? g * xhat : (g * xhat).sum(batch_dims);
      if (nb) out[2] = batch_dims.empty() ? g : g.sum(batch_dims);
      return out;
    };
  }
};

// Whether Rules has an overload for op struct T.
template <class T>
concept HasRule = requires(const Rules& rules, const T& op) {
  { rules(op) } -> std::same_as<BackwardFn>;
};
#define TW_CHECK_RULE(Name, code, since)                                           \
  static_assert(HasRule<ir::Name> == (ir::Name::kAutograd != ir::Autograd::kNone), \
                "ir::" #Name                                                       \
                "'s kAutograd (ir/ops.h) and its rule here disagree: a "           \
                "differentiable op needs a Rules overload, a kNone op must not have one");
TW_OP_LIST(TW_CHECK_RULE)
#undef TW_CHECK_RULE

}  // namespace

Tensor autocast_matmul(const Tensor& a, const Tensor& b) {
  const Tensor* inputs[] = {&a, &b};
  const bool record = needs_record(inputs);
  Tensor a16, b16, y;
  {
    NoGradGuard no_grad;
    a16 = a.to(kBF16);
    b16 = b.to(kBF16);
    y = a16.matmul(b16);
  }
  if (!record) return y;
  const bool na = a.requires_grad(), nb = b.requires_grad();
  const Shape as = a.shape(), bs = b.shape();
  // The bf16 copies are what the gradients need (half the bytes of the f32 operands).
  record_composite(
      "matmul_bf16", inputs, y,
      [sa = nb ? a16 : Tensor(), sb = na ? b16 : Tensor(), na, nb, as, bs](const Tensor& grad) {
        const Tensor g = grad.to(kBF16);
        Grads grads(2);
        if (na) grads[0] = sum_to(g.matmul(sb.transpose(-1, -2)), as);
        if (nb) grads[1] = sum_to(sa.transpose(-1, -2).matmul(g), bs);
        return grads;
      });
  return y;
}

BackwardFn backward_rule(const ir::Op& op, const RuleInputs& inputs) {
  return std::visit(
      [&](const auto& o) -> BackwardFn {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return nullptr;
        } else if constexpr (T::kAutograd == ir::Autograd::kNone) {
          return nullptr;
        } else {
          return Rules{inputs}(o);
        }
      },
      op);
}

}  // namespace tw::autograd
