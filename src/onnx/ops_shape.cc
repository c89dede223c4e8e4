// Movement, indexing and creation ONNX ops. Their shape-like inputs (Reshape's shape, Slice's
// starts, ...) must be known at load: shapes are fixed when the trace is built.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "onnx/importer.h"

namespace tw::onnx_import {

namespace {

using BK = ir::BinaryKind;

Shape shape_of(Node& n, size_t i) { return n.input_meta(i).shape; }

// Indices may be negative (counting from the end of a dim of `size`): index + size where < 0.
TensorId wrap_negative(Builder& b, TensorId idx, int64_t size) {
  const DType d = b.meta(idx).dtype;
  if (d != kI64 && d != kI32) idx = b.cast(idx, kI64);
  TensorId neg = b.scalar(BK::kLt, idx, int64_t{0});
  return b.where(neg, b.scalar(BK::kAdd, idx, size), idx);
}

// Axes from attribute `name` (opsets before `input_since`) or from input `i`; nullopt: absent.
std::optional<std::vector<int64_t>> axes_of(Node& n, const char* name, int64_t input_since,
                                            size_t i) {
  if (n.opset < input_since) {
    if (!n.has_attr(name)) return std::nullopt;
    return n.attr_ints(name);
  }
  if (!n.has_input(i)) return std::nullopt;
  return n.ints_input(i, name);
}

void reshape_op(Node& n) {
  n.check_attrs({"allowzero", "shape"});
  const Shape in = shape_of(n, 0);
  std::vector<int64_t> shape = n.opset < 5 ? n.attr_ints("shape") : n.ints_input(1, "shape");
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0 && !allowzero) {
      if (d >= in.size())
        n.fail("shape entry " + std::to_string(d) + " is 0 but the input has rank " +
               std::to_string(in.size()));
      shape[d] = in[d];
    }
  }
  n.set_output(0, n.b.reshape(n.input(0), shape));
}

void transpose_op(Node& n) {
  n.check_attrs({"perm"});
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (perm.empty()) {
    for (int64_t d = n.rank(0) - 1; d >= 0; --d) perm.push_back(d);
  }
  n.set_output(0, n.b.permute(n.input(0), perm));
}

void expand_op(Node& n) {
  n.check_attrs({});
  const std::vector<int64_t> shape = n.ints_input(1, "shape");
  Result<Shape> out = broadcast_shapes(shape_of(n, 0), shape, "expand");
  if (!out.ok()) n.fail(out.status().message());
  const TensorId x = n.input(0);
  n.set_output(0, *out == n.b.meta(x).shape ? n.b.copy(x) : n.b.expand(x, *out));
}

void slice_op(Node& n) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset < 10) {
    n.check_attrs({"starts", "ends", "axes"});
    starts = n.attr_ints("starts");
    ends = n.attr_ints("ends");
    axes = n.attr_ints("axes");
  } else {
    n.check_attrs({});
    starts = n.ints_input(1, "starts");
    ends = n.ints_input(2, "ends");
    if (n.has_input(3)) axes = n.ints_input(3, "axes");
    if (n.has_input(4)) steps = n.ints_input(4, "steps");
  }
  const Shape s = shape_of(n, 0);
  const int64_t rank = static_cast<int64_t>(s.size());
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    n.fail("starts, ends, axes and steps differ in length");
  }
  std::vector<int64_t> st(s.size(), 0), en(s), sp(s.size(), 1);
  std::vector<int64_t> flips;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = n.axis(axes[i], rank, "axes entry");
    const int64_t dim = s[a];
    int64_t b = starts[i], e = ends[i], step = steps[i];
    if (step == 0) n.fail("steps entry " + std::to_string(i) + " is 0");
    auto wrap = [dim](int64_t v) {
      return v < 0 ? (v < std::numeric_limits<int64_t>::min() + dim ? -1 - dim : v + dim) : v;
    };
    b = wrap(b);
    e = wrap(e);
    if (step > 0) {
      st[a] = std::clamp<int64_t>(b, 0, dim);
      en[a] = std::clamp<int64_t>(e, 0, dim);
      sp[a] = step;
    } else {
      // ONNX clamps start to [0, dim - 1] and end to [-1, dim - 1]; on the flipped dim (index
      // i' = dim - 1 - i) that is a slice forward by -step.
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      st[a] = dim - 1 - b;
      en[a] = std::max<int64_t>(dim - 1 - e, st[a]);
      if (dim == 0) st[a] = en[a] = 0;
      sp[a] =
          step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
      flips.push_back(a);
    }
  }
  TensorId x = n.input(0);
  if (!flips.empty()) x = n.b.flip(x, flips);
  n.set_output(0, n.b.slice(x, st, en, sp));
}

void concat_op(Node& n) {
  n.check_attrs({"axis"});
  // Opsets before 4 default axis to 1; from 4 it is required.
  if (!n.has_attr("axis") && n.opset >= 4) n.fail("attribute axis is required");
  const int64_t axis = n.axis(n.attr_int("axis", 1), n.rank(0));
  std::vector<TensorId> xs;
  for (size_t i = 0; i < n.num_inputs(); ++i) {
    if (n.has_input(i)) xs.push_back(n.input(i));
  }
  n.set_output(0, xs.size() == 1 ? n.b.copy(xs[0]) : n.b.cat(xs, axis));
}

void flatten_op(Node& n) {
  n.check_attrs({"axis"});
  const Shape s = shape_of(n, 0);
  const int64_t rank = static_cast<int64_t>(s.size());
  int64_t axis = n.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank)
    n.fail("axis " + std::to_string(n.attr_int("axis", 1)) + " is out of range for rank " +
           std::to_string(rank));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) (d < axis ? outer : inner) *= s[d];
  n.set_output(0, n.b.reshape(n.input(0), {outer, inner}));
}

void squeeze_op(Node& n) {
  n.check_attrs({"axes"});
  const Shape s = shape_of(n, 0);
  const int64_t rank = static_cast<int64_t>(s.size());
  std::optional<std::vector<int64_t>> axes = axes_of(n, "axes", 13, 1);
  std::vector<bool> drop(s.size(), false);
  if (axes) {
    for (int64_t a : *axes) {
      const int64_t d = n.axis(a, rank, "axes entry");
      if (s[d] != 1)
        n.fail("cannot squeeze dim " + std::to_string(d) + " of size " + std::to_string(s[d]));
      drop[d] = true;
    }
  } else {
    for (size_t d = 0; d < s.size(); ++d) drop[d] = s[d] == 1;
  }
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (!drop[d]) out.push_back(s[d]);
  }
  n.set_output(0, n.b.reshape(n.input(0), out));
}

void unsqueeze_op(Node& n) {
  n.check_attrs({"axes"});
  const Shape s = shape_of(n, 0);
  std::optional<std::vector<int64_t>> axes = axes_of(n, "axes", 13, 1);
  if (!axes) n.fail("axes are required");
  const int64_t out_rank = static_cast<int64_t>(s.size() + axes->size());
  std::vector<bool> inserted(static_cast<size_t>(out_rank), false);
  for (int64_t a : *axes) {
    const int64_t d = n.axis(a, out_rank, "axes entry");
    if (inserted[d]) n.fail("axes entry " + std::to_string(a) + " is repeated");
    inserted[d] = true;
  }
  Shape out;
  size_t k = 0;
  for (int64_t d = 0; d < out_rank; ++d) out.push_back(inserted[d] ? 1 : s[k++]);
  n.set_output(0, n.b.reshape(n.input(0), out));
}

void constant_op(Node& n) {
  if (n.proto.attribute_size() != 1) n.fail("expects exactly one attribute");
  const ::onnx::AttributeProto& a = n.proto.attribute(0);
  const std::string& name = a.name();
  if (name == "value") {
    n.set_constant_output(0, host_tensor(a.t(), n.b.context + "attribute value"));
  } else if (name == "value_float" || name == "value_floats") {
    std::vector<float> v = name == "value_float"
                               ? std::vector<float>{a.f()}
                               : std::vector<float>(a.floats().begin(), a.floats().end());
    HostTensor h;
    h.meta = {name == "value_float" ? Shape{} : Shape{static_cast<int64_t>(v.size())}, kF32};
    h.bytes.resize(v.size() * 4);
    std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
    n.set_constant_output(0, std::move(h));
  } else if (name == "value_int") {
    n.set_constant_output(0, HostTensor::of_ints({a.i()}, {}));
  } else if (name == "value_ints") {
    std::vector<int64_t> v(a.ints().begin(), a.ints().end());
    n.set_constant_output(0, HostTensor::of_ints(v, {static_cast<int64_t>(v.size())}));
  } else {
    n.fail("attribute '" + name + "' is not supported");
  }
}

void shape_op(Node& n) {
  n.check_attrs({"start", "end"});
  const Shape s = shape_of(n, 0);
  const int64_t rank = static_cast<int64_t>(s.size());
  auto clampd = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clampd(n.attr_int("start", 0)), end = clampd(n.attr_int("end", rank));
  std::vector<int64_t> v;
  for (int64_t d = start; d < end; ++d) v.push_back(s[d]);
  n.set_constant_output(0, HostTensor::of_ints(v, {static_cast<int64_t>(v.size())}));
}

void constant_of_shape_op(Node& n) {
  n.check_attrs({"value"});
  const std::vector<int64_t> shape = n.ints_input(0, "shape");
  DType d = kF32;
  ir::Scalar v(0.0);
  if (const auto* a = n.attr("value")) {
    const HostTensor h = host_tensor(a->t(), n.b.context + "attribute value");
    if (h.numel() != 1) n.fail("attribute value must hold one element");
    d = h.meta.dtype;
    v = is_float(d) ? ir::Scalar(h.doubles()[0]) : ir::Scalar(h.ints()[0]);
  }
  n.set_output(0, n.b.full(shape, d, v));
}

void tile_op(Node& n) {
  n.check_attrs({});
  if (n.opset < 6)
    n.fail("opset " + std::to_string(n.opset) + " Tile (tiles and axis inputs) is not supported");
  const std::vector<int64_t> reps = n.ints_input(1, "repeats");
  if (static_cast<int64_t>(reps.size()) != n.rank(0)) n.fail("repeats must have one entry per dim");
  const TensorId x = n.input(0);
  n.set_output(0, [&] {
    const TensorId id = n.b.new_id();
    n.b.append(ir::Repeat{{x}, reps, {id}});
    return id;
  }());
}

void gather_op(Node& n) {
  n.check_attrs({"axis"});
  const Shape s = shape_of(n, 0);
  const int64_t axis = n.axis(n.attr_int("axis", 0), static_cast<int64_t>(s.size()));
  Builder& b = n.b;
  const Shape is = shape_of(n, 1);
  TensorId idx = wrap_negative(b, n.input(1), s[axis]);
  TensorId flat = b.reshape(idx, {numel(is)});
  TensorId out = b.index_select(n.input(0), axis, flat);
  Shape os(s.begin(), s.begin() + axis);
  os.insert(os.end(), is.begin(), is.end());
  os.insert(os.end(), s.begin() + axis + 1, s.end());
  n.set_output(0, b.reshape(out, os));
}

void gather_elements_op(Node& n) {
  n.check_attrs({"axis"});
  const Shape s = shape_of(n, 0);
  const int64_t axis = n.axis(n.attr_int("axis", 0), static_cast<int64_t>(s.size()));
  TensorId idx = wrap_negative(n.b, n.input(1), s[axis]);
  n.set_output(0, n.b.gather(n.input(0), axis, idx));
}

// ScatterElements (and the older Scatter): reduction none writes src where index points (as
// x + scatter_add(src - x) would not be exact, it selects: where a position received a write,
// the written value; ONNX leaves duplicate indices undefined for none); add is ScatterAdd.
void scatter_elements_op(Node& n) {
  n.check_attrs({"axis", "reduction"});
  const std::string reduction = n.attr_string("reduction", "none");
  Builder& b = n.b;
  TensorId x = n.input(0);
  const Shape s = b.meta(x).shape;
  const DType d = b.meta(x).dtype;
  const int64_t axis = n.axis(n.attr_int("axis", 0), static_cast<int64_t>(s.size()));
  TensorId idx = wrap_negative(b, n.input(1), s[axis]);
  TensorId src = n.input(2);
  auto scatter_add = [&](TensorId into, TensorId what) {
    const TensorId out = b.new_id();
    b.append(ir::ScatterAdd{{into}, axis, {idx}, {what}, {out}});
    return out;
  };
  if (reduction == "add") {
    n.set_output(0, scatter_add(x, src));
    return;
  }
  if (reduction != "none") n.fail("attribute reduction='" + reduction + "' is not supported");
  const DType cd = d == kBool ? kU8 : d;  // ScatterAdd takes numbers
  TensorId hits =
      scatter_add(b.full(s, kI32, int64_t{0}), b.full(b.meta(src).shape, kI32, int64_t{1}));
  TensorId written = scatter_add(b.full(s, cd, int64_t{0}), b.cast(src, cd));
  TensorId out = b.where(b.scalar(BK::kGt, hits, int64_t{0}), b.cast(written, d), x);
  n.set_output(0, b.cast(out, d));
}

// The row-major linear position in data's first bd + k dims of each index row of `idx` (shape
// [rows..., k], the batch dims first, as GatherND's and ScatterND's indices), negative entries
// wrapped: ((batch * d[bd]) + i0) * d[bd + 1] + i1 ...; shape `rows` (idx's shape without k).
TensorId nd_linear_index(Node& n, TensorId idx, const Shape& ds, int64_t bd) {
  Builder& b = n.b;
  const Shape is = b.meta(idx).shape;
  if (is.empty()) n.fail("indices must have rank >= 1");
  const int64_t k = is.back();
  const int64_t rank = static_cast<int64_t>(ds.size());
  if (bd < 0 || bd + k > rank || bd >= static_cast<int64_t>(is.size()))
    n.fail("batch_dims and the index depth do not fit data");
  for (int64_t i = 0; i < bd; ++i) {
    if (ds[i] != is[i]) n.fail("data and indices differ in batch dim " + std::to_string(i));
  }
  idx = b.cast(idx, kI64);
  const Shape rows(is.begin(), is.end() - 1);
  TensorId linear = 0;
  if (bd > 0) {
    int64_t batches = 1;
    for (int64_t i = 0; i < bd; ++i) batches *= ds[i];
    Shape bs(rows.size(), 1);
    std::copy(ds.begin(), ds.begin() + bd, bs.begin());
    Shape flat_b(is.begin(), is.begin() + bd);
    linear = b.reshape(b.arange(batches), flat_b);
    linear = b.expand(b.reshape(linear, bs), rows);
  }
  for (int64_t j = 0; j < k; ++j) {
    const int64_t dim = ds[bd + j];
    TensorId c = b.reshape(b.narrow(idx, static_cast<int64_t>(is.size()) - 1, j, j + 1), rows);
    c = wrap_negative(b, c, dim);
    linear = linear == 0 ? c : b.binary(BK::kAdd, b.scalar(BK::kMul, linear, dim), c);
  }
  if (linear == 0) linear = b.full(rows, kI64, int64_t{0});  // k = 0: the whole of data
  return linear;
}

// GatherND: each index row (the last dim of indices, k entries) picks a slice of data after the
// batch dims; computed as one IndexSelect over data's leading dims flattened.
void gather_nd_op(Node& n) {
  n.check_attrs({"batch_dims"});
  Builder& b = n.b;
  const Shape ds = n.input_meta(0).shape, is = n.input_meta(1).shape;
  const int64_t bd = n.attr_int("batch_dims", 0);
  TensorId linear = nd_linear_index(n, n.input(1), ds, bd);
  const int64_t k = is.back();
  const Shape rows(is.begin(), is.end() - 1);
  int64_t lead = 1;
  for (int64_t i = 0; i < bd + k; ++i) lead *= ds[i];
  Shape flat{lead};
  flat.insert(flat.end(), ds.begin() + bd + k, ds.end());
  TensorId data = b.reshape(n.input(0), flat);
  TensorId picked = b.index_select(data, 0, b.reshape(linear, {numel(rows)}));
  Shape out = rows;
  out.insert(out.end(), ds.begin() + bd + k, ds.end());
  n.set_output(0, b.reshape(picked, out));
}

// ScatterND (what an exporter writes for a slice assignment x[a:b] = v): data is viewed as
// [lead, rest] (lead: its first k dims flattened), each index row names one of the lead rows and
// its update row replaces it (none: as ScatterElements, a position that received a write takes
// the written value), is added to it (add: ScatterAdd), or multiplies it (mul, max, min: one
// select per index row, so at most kMaxRowsUnrolled rows).
void scatter_nd_op(Node& n) {
  constexpr int64_t kMaxRowsUnrolled = 1024;
  n.check_attrs({"reduction"});
  const std::string reduction = n.attr_string("reduction", "none");
  Builder& b = n.b;
  TensorId x = n.input(0);
  const Shape ds = b.meta(x).shape, is = n.input_meta(1).shape, us = n.input_meta(2).shape;
  const DType d = b.meta(x).dtype;
  TensorId linear = nd_linear_index(n, n.input(1), ds, 0);
  const int64_t k = is.back();
  const Shape rows(is.begin(), is.end() - 1);
  const int64_t nrows = numel(rows);
  int64_t lead = 1;
  for (int64_t i = 0; i < k; ++i) lead *= ds[i];
  const Shape rest(ds.begin() + k, ds.end());
  Shape want_us = rows;
  want_us.insert(want_us.end(), rest.begin(), rest.end());
  if (us != want_us)
    n.fail("updates have shape " + shape_str(us) + ", want " + shape_str(want_us) +
           " (indices' rows, then data's dims after the first " + std::to_string(k) + ")");
  const int64_t width = numel(rest);
  TensorId data = b.reshape(x, {lead, width});
  TensorId upd = b.reshape(n.input(2), {nrows, width});
  TensorId lin = b.reshape(linear, {nrows, 1});
  TensorId out = 0;
  auto scatter_add = [&](TensorId into, TensorId what) {
    const TensorId id = b.new_id();
    b.append(ir::ScatterAdd{{into}, 0, {b.expand(lin, {nrows, width})}, {what}, {id}});
    return id;
  };
  const DType cd = d == kBool ? kU8 : d;  // ScatterAdd takes numbers
  if (reduction == "none") {
    TensorId hits = scatter_add(b.full({lead, width}, kI32, int64_t{0}),
                                b.full({nrows, width}, kI32, int64_t{1}));
    TensorId written = scatter_add(b.full({lead, width}, cd, int64_t{0}), b.cast(upd, cd));
    out = b.where(b.scalar(BK::kGt, hits, int64_t{0}), b.cast(written, d), data);
  } else if (reduction == "add") {
    if (d == kBool) n.fail("reduction='add' on bool data is not supported");
    out = scatter_add(data, upd);
  } else if (reduction == "mul" || reduction == "max" || reduction == "min") {
    if (nrows > kMaxRowsUnrolled)
      n.fail("reduction='" + reduction + "' is unrolled per index row: " + std::to_string(nrows) +
             " rows, at most " + std::to_string(kMaxRowsUnrolled));
    if (d == kBool) n.fail("reduction='" + reduction + "' on bool data is not supported");
    const BK kind = reduction == "mul"   ? BK::kMul
                    : reduction == "max" ? BK::kMaximum
                                         : BK::kMinimum;
    TensorId positions = b.reshape(b.arange(lead), {lead, 1});
    out = data;
    for (int64_t r = 0; r < nrows; ++r) {
      TensorId at = b.narrow(lin, 0, r, r + 1);  // [1, 1]
      TensorId cur = b.index_select(out, 0, b.reshape(at, {1}));
      TensorId val = b.cast(b.binary(kind, cur, b.narrow(upd, 0, r, r + 1)), d);
      out = b.where(b.binary(BK::kEq, positions, at), b.expand(val, {lead, width}), out);
    }
  } else {
    n.fail("attribute reduction='" + reduction + "' is not supported");
  }
  n.set_output(0, b.reshape(b.cast(out, d), ds));
}

// Compress with its condition known at load: an IndexSelect of the selected positions.
void compress_op(Node& n) {
  n.check_attrs({"axis"});
  Builder& b = n.b;
  const std::vector<int64_t> cond = n.ints_input(1, "condition");
  TensorId x = n.input(0);
  int64_t axis = 0;
  if (n.has_attr("axis")) {
    axis = n.axis(n.attr_int("axis", 0), n.rank(0));
  } else {
    x = b.reshape(x, {numel(b.meta(x).shape)});
  }
  const int64_t size = b.meta(x).shape[axis];
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < static_cast<int64_t>(cond.size()) && i < size; ++i) {
    if (cond[i] != 0) keep.push_back(i);
  }
  if (static_cast<int64_t>(cond.size()) > size) n.fail("condition is longer than the axis");
  TensorId idx = b.constant_id(HostTensor::of_ints(keep, {static_cast<int64_t>(keep.size())}));
  n.set_output(0, b.index_select(x, axis, idx));
}

void range_op(Node& n) {
  n.check_attrs({});
  const HostTensor& start = n.constant(0, "start");
  const HostTensor& limit = n.constant(1, "limit");
  const HostTensor& delta = n.constant(2, "delta");
  const DType d = start.meta.dtype;
  Builder& b = n.b;
  if (is_float(d)) {
    const double s0 = start.doubles()[0], l = limit.doubles()[0], st = delta.doubles()[0];
    if (st == 0) n.fail("delta is 0");
    const int64_t count = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((l - s0) / st)));
    // element i = start + i * delta, as ONNX defines it (in the input dtype).
    TensorId i = b.cast(b.arange(count), d);
    TensorId v = b.scalar(BK::kAdd, b.scalar(BK::kMul, i, st), s0);
    n.set_output(0, b.cast(v, d));
    return;
  }
  const int64_t s0 = start.ints()[0], l = limit.ints()[0], st = delta.ints()[0];
  if (st == 0) n.fail("delta is 0");
  int64_t count = 0;
  if ((st > 0 && l > s0) || (st < 0 && l < s0)) {
    count = (l - s0 + st + (st > 0 ? -1 : 1)) / st;
  }
  TensorId v = b.scalar(BK::kAdd, b.scalar(BK::kMul, b.arange(count), st), s0);
  n.set_output(0, b.cast(v, d));
}

void one_hot_op(Node& n) {
  n.check_attrs({"axis"});
  Builder& b = n.b;
  const int64_t depth = static_cast<int64_t>(n.constant(1, "depth").doubles().at(0));
  const HostTensor& values = n.constant(2, "values");
  if (values.numel() != 2) n.fail("values must hold [off, on]");
  const Shape s = shape_of(n, 0);
  const int64_t out_rank = static_cast<int64_t>(s.size()) + 1;
  const int64_t axis = n.axis(n.attr_int("axis", -1), out_rank);
  TensorId idx = b.cast(n.input(0), kI64);  // float indices are truncated, as ONNX casts them
  idx = wrap_negative(b, idx, depth);
  Shape us = s;
  us.insert(us.begin() + axis, 1);
  idx = b.reshape(idx, us);
  Shape rs(static_cast<size_t>(out_rank), 1);
  rs[axis] = depth;
  TensorId classes = b.reshape(b.arange(depth), rs);
  TensorId hot = b.binary(BK::kEq, idx, classes);
  TensorId off = b.constant_id([&] {
    HostTensor h = values;
    h.meta.shape = {};
    h.bytes.resize(dtype_size(h.meta.dtype));
    return h;
  }());
  TensorId on = b.constant_id([&] {
    HostTensor h = values;
    h.meta.shape = {};
    const size_t es = dtype_size(h.meta.dtype);
    h.bytes.assign(values.bytes.begin() + static_cast<std::ptrdiff_t>(es), values.bytes.end());
    return h;
  }());
  n.set_output(0, b.where(hot, on, off));
}

// Rows and columns of the last two dims: col - row, shaped [rows, cols] (i64).
TensorId diagonal_offsets(Builder& b, int64_t rows, int64_t cols) {
  TensorId r = b.reshape(b.arange(rows), {rows, 1});
  TensorId c = b.reshape(b.arange(cols), {1, cols});
  return b.binary(BK::kSub, c, r);
}

void trilu_op(Node& n) {
  n.check_attrs({"upper"});
  const bool upper = n.attr_int("upper", 1) != 0;
  const int64_t k = n.has_input(1) ? n.ints_input(1, "k").at(0) : 0;
  const Shape s = shape_of(n, 0);
  if (s.size() < 2) n.fail("input must have rank >= 2");
  Builder& b = n.b;
  TensorId off = diagonal_offsets(b, s[s.size() - 2], s.back());
  TensorId keep = upper ? b.scalar(BK::kGe, off, k) : b.scalar(BK::kLe, off, k);
  TensorId x = n.input(0);
  TensorId zero = b.full({}, b.meta(x).dtype, int64_t{0});
  n.set_output(0, b.where(keep, x, zero));
}

void eye_like_op(Node& n) {
  n.check_attrs({"dtype", "k"});
  const Shape s = shape_of(n, 0);
  if (s.size() != 2) n.fail("input must be 2-D");
  DType d = n.input_meta(0).dtype;
  if (n.has_attr("dtype")) {
    std::optional<DType> t = dtype_of(static_cast<int32_t>(n.attr_int("dtype", 1)));
    if (!t) n.fail("attribute dtype is not supported");
    d = *t;
  }
  Builder& b = n.b;
  TensorId eq = b.scalar(BK::kEq, diagonal_offsets(b, s[0], s[1]), n.attr_int("k", 0));
  n.set_output(0, b.cast(eq, d));
}

void cumsum_op(Node& n) {
  n.check_attrs({"exclusive", "reverse"});
  const int64_t axis = n.axis(n.ints_input(1, "axis").at(0), n.rank(0));
  const bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
  Builder& b = n.b;
  TensorId x = n.input(0);
  const DType d = b.meta(x).dtype;
  if (storage_only(d)) x = b.cast(x, kF32);
  if (reverse) x = b.flip(x, {axis});
  if (exclusive) {  // shift by one along axis: a zero first, the last element dropped
    const Shape s = b.meta(x).shape;
    std::vector<int64_t> before(s.size(), 0), after(s.size(), 0);
    before[axis] = 1;
    x = b.narrow(b.pad_constant(x, before, after, int64_t{0}), axis, 0, s[axis]);
  }
  TensorId out = b.new_id();
  b.append(ir::Cumsum{{x}, axis, {out}});
  if (reverse) out = b.flip(out, {axis});
  n.set_output(0, b.cast(out, d));
}

void pad_op(Node& n) {
  std::string mode;
  std::vector<int64_t> pads;
  double value = 0;
  if (n.opset < 11) {
    n.check_attrs({"mode", "pads", "paddings", "value"});
    pads = n.attr_ints(n.opset < 2 ? "paddings" : "pads");
    value = n.attr_float("value", 0);
  } else {
    n.check_attrs({"mode"});
    pads = n.ints_input(1, "pads");
    if (n.has_input(2)) value = n.constant(2, "constant_value").doubles().at(0);
    if (n.has_input(3)) n.fail("input axes is not supported");
  }
  mode = n.attr_string("mode", "constant");
  const Shape s = shape_of(n, 0);
  const size_t rank = s.size();
  if (pads.size() != 2 * rank) n.fail("pads must have 2 * rank entries");
  Builder& b = n.b;
  TensorId x = n.input(0);
  const DType d = b.meta(x).dtype;
  // Negative pads crop first.
  std::vector<int64_t> before(rank), after(rank);
  for (size_t i = 0; i < rank; ++i) {
    if (pads[i] < 0 || pads[i + rank] < 0) {
      x = b.narrow(x, static_cast<int64_t>(i), -std::min<int64_t>(pads[i], 0),
                   s[i] + std::min<int64_t>(pads[i + rank], 0));
    }
    before[i] = std::max<int64_t>(pads[i], 0);
    after[i] = std::max<int64_t>(pads[i + rank], 0);
  }
  if (mode == "constant") {
    n.set_output(0, b.pad_constant(
                        x, before, after,
                        is_float(d) ? ir::Scalar(value) : ir::Scalar(static_cast<int64_t>(value))));
    return;
  }
  if (mode != "edge" && mode != "reflect") n.fail("attribute mode='" + mode + "' is not supported");
  for (size_t i = 0; i < rank; ++i) {
    if (before[i] == 0 && after[i] == 0) continue;
    const int64_t dim = static_cast<int64_t>(i), size = b.meta(x).shape[i];
    std::vector<TensorId> parts;
    if (mode == "edge") {
      if (size == 0) n.fail("cannot edge-pad an empty dim");
      Shape es = b.meta(x).shape;
      if (before[i] > 0) {
        es[i] = before[i];
        parts.push_back(b.expand(b.narrow(x, dim, 0, 1), es));
      }
      parts.push_back(x);
      if (after[i] > 0) {
        es[i] = after[i];
        parts.push_back(b.expand(b.narrow(x, dim, size - 1, size), es));
      }
    } else {
      if (before[i] >= size || after[i] >= size)
        n.fail("reflect pads must be smaller than the dim");
      if (before[i] > 0) parts.push_back(b.flip(b.narrow(x, dim, 1, before[i] + 1), {dim}));
      parts.push_back(x);
      if (after[i] > 0)
        parts.push_back(b.flip(b.narrow(x, dim, size - 1 - after[i], size - 1), {dim}));
    }
    x = b.cat(parts, dim);
  }
  n.set_output(0, x);
}

void split_op(Node& n) {
  n.check_attrs({"axis", "split", "num_outputs"});
  const Shape s = shape_of(n, 0);
  const int64_t axis = n.axis(n.attr_int("axis", 0), static_cast<int64_t>(s.size()));
  std::vector<int64_t> sizes =
      n.opset < 13 ? n.attr_ints("split")
                   : (n.has_input(1) ? n.ints_input(1, "split") : std::vector<int64_t>{});
  const int64_t parts = static_cast<int64_t>(n.num_outputs());
  if (sizes.empty()) {
    const int64_t each = (s[axis] + parts - 1) / parts;
    for (int64_t k = 0, left = s[axis]; k < parts; ++k, left -= each)
      sizes.push_back(std::min(each, left));
  }
  if (static_cast<int64_t>(sizes.size()) != parts)
    n.fail("split has a different count than the outputs");
  const TensorId x = n.input(0);
  int64_t at = 0;
  for (int64_t k = 0; k < parts; ++k) {
    n.set_output(static_cast<size_t>(k), n.b.narrow(x, axis, at, at + sizes[k]));
    at += sizes[k];
  }
  if (at != s[axis]) n.fail("split sizes do not add up to dim " + std::to_string(s[axis]));
}

void depth_to_space_op(Node& n, bool to_space) {
  n.check_attrs(to_space ? std::initializer_list<const char*>{"blocksize", "mode"}
                         : std::initializer_list<const char*>{"blocksize"});
  const Shape s = shape_of(n, 0);
  if (s.size() != 4) n.fail("input must be 4-D");
  const int64_t bs = n.attr_int("blocksize", 0);
  if (bs <= 0) n.fail("attribute blocksize must be positive");
  const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
  Builder& b = n.b;
  TensorId x = n.input(0);
  if (to_space) {
    if (C % (bs * bs) != 0) n.fail("channels are not divisible by blocksize^2");
    const int64_t c = C / (bs * bs);
    if (n.attr_string("mode", "DCR") == "DCR") {
      x = b.permute(b.reshape(x, {N, bs, bs, c, H, W}), {0, 3, 4, 1, 5, 2});
    } else if (n.attr_string("mode", "DCR") == "CRD") {
      x = b.permute(b.reshape(x, {N, c, bs, bs, H, W}), {0, 1, 4, 2, 5, 3});
    } else {
      n.fail("attribute mode='" + n.attr_string("mode", "") + "' is not supported");
    }
    n.set_output(0, b.reshape(x, {N, c, H * bs, W * bs}));
  } else {
    if (H % bs != 0 || W % bs != 0) n.fail("height and width are not divisible by blocksize");
    x = b.permute(b.reshape(x, {N, C, H / bs, bs, W / bs, bs}), {0, 3, 5, 1, 2, 4});
    n.set_output(0, b.reshape(x, {N, C * bs * bs, H / bs, W / bs}));
  }
}

void dropout_op(Node& n) {
  // Inference: the identity, with an all-true mask. Training mode (random) is refused.
  if (n.opset < 12) {
    n.check_attrs({"ratio", "is_test", "seed"});
    // Before opset 7, is_test=0 (the default) meant training: random.
    if (n.opset < 7 && n.attr_int("is_test", 0) == 0 && n.attr_float("ratio", 0.5) != 0) {
      n.fail("attribute is_test=0 (training, random) is not supported");
    }
  } else {
    n.check_attrs({"seed"});
    const double ratio = n.has_input(1) ? n.constant(1, "ratio").doubles().at(0) : 0.5;
    if (n.has_input(2) && n.constant(2, "training_mode").ints().at(0) != 0 && ratio != 0) {
      n.fail("input training_mode=true with ratio " + std::to_string(ratio) +
             " is not supported (random; only ratio 0 is the identity)");
    }
  }
  const TensorId x = n.input(0);
  n.set_output(0, n.b.copy(x));
  if (n.wants_output(1)) {
    n.set_output(1,
                 n.b.full(n.b.meta(x).shape, n.opset < 10 ? n.b.meta(x).dtype : kBool, int64_t{1}));
  }
}

}  // namespace

void register_shape_ops() {
  auto& t = op_table();
  t["Reshape"] = reshape_op;
  t["Transpose"] = transpose_op;
  t["Expand"] = expand_op;
  t["Slice"] = slice_op;
  t["Concat"] = concat_op;
  t["Flatten"] = flatten_op;
  t["Squeeze"] = squeeze_op;
  t["Unsqueeze"] = unsqueeze_op;
  t["Identity"] = [](Node& n) { n.forward(0, 0); };
  t["Constant"] = constant_op;
  t["Shape"] = shape_op;
  t["Size"] = [](Node& n) {
    n.set_constant_output(0, HostTensor::of_ints({numel(shape_of(n, 0))}, {}));
  };
  t["ConstantOfShape"] = constant_of_shape_op;
  t["Tile"] = tile_op;
  t["Gather"] = gather_op;
  t["GatherElements"] = gather_elements_op;
  t["GatherND"] = gather_nd_op;
  t["ScatterElements"] = scatter_elements_op;
  t["Scatter"] = scatter_elements_op;
  t["ScatterND"] = scatter_nd_op;
  t["Compress"] = compress_op;
  t["Range"] = range_op;
  t["OneHot"] = one_hot_op;
  t["Trilu"] = trilu_op;
  t["EyeLike"] = eye_like_op;
  t["CumSum"] = cumsum_op;
  t["Pad"] = pad_op;
  t["Split"] = split_op;
  t["DepthToSpace"] = [](Node& n) { depth_to_space_op(n, true); };
  t["SpaceToDepth"] = [](Node& n) { depth_to_space_op(n, false); };
  t["Dropout"] = dropout_op;
}

}  // namespace tw::onnx_import
