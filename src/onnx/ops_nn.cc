// Neural-network ONNX ops: MatMul, Gemm, softmaxes, Conv, pooling, normalisations and the two
// losses, onto MatMul, Softmax, Conv2d, Pool2d, LayerNorm and elementwise ops.
#include <algorithm>
#include <cmath>
#include <limits>

#include "onnx/importer.h"

namespace tw::onnx_import {

namespace {

using BK = ir::BinaryKind;
using UK = ir::UnaryKind;
using RK = ir::ReduceKind;

TensorId per_channel(Builder& b, TensorId v, int64_t rank);

void matmul_op(Node& n) {
  n.check_attrs({});
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId a = computable(n, 0), c = computable(n, 1);
  Shape as = b.meta(a).shape, cs = b.meta(c).shape;
  // numpy matmul: a 1-D left operand is a row, a 1-D right one a column; both dims are dropped.
  const bool a1 = as.size() == 1, c1 = cs.size() == 1;
  if (a1) a = b.reshape(a, {1, as[0]});
  if (c1) c = b.reshape(c, {cs[0], 1});
  TensorId out = b.matmul(a, c);
  if (a1 || c1) {
    Shape os = b.meta(out).shape;
    if (c1) os.pop_back();
    if (a1) os.erase(os.end() - 1);
    out = b.reshape(out, os);
  }
  n.set_output(0, b.cast(out, d));
}

void gemm_op(Node& n) {
  n.check_attrs({"alpha", "beta", "transA", "transB", "broadcast"});
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId a = computable(n, 0), c = computable(n, 1);
  if (n.rank(0) != 2 || n.rank(1) != 2) n.fail("A and B must be 2-D");
  if (n.attr_int("transA", 0)) a = b.permute(a, {1, 0});
  if (n.attr_int("transB", 0)) c = b.permute(c, {1, 0});
  const double alpha = n.attr_float("alpha", 1.0), beta = n.attr_float("beta", 1.0);
  TensorId y = b.matmul(a, c);
  const DType yd = b.meta(y).dtype;
  auto sc = [&](double v) {
    return is_float(yd) ? ir::Scalar(v) : ir::Scalar(static_cast<int64_t>(v));
  };
  if (alpha != 1.0) y = b.scalar(BK::kMul, y, sc(alpha));
  if (n.has_input(2) && beta != 0.0) {
    TensorId bias = computable(n, 2);
    if (beta != 1.0) bias = b.scalar(BK::kMul, bias, sc(beta));
    y = b.binary(BK::kAdd, y, bias);
  }
  n.set_output(0, b.cast(y, d));
}

// Softmax, LogSoftmax, Hardmax: before opset 13 the input is viewed as 2-D [prod(dims < axis),
// prod(dims >= axis)] and normalised over its second dim; from 13 over `axis` alone.
void softmax_like(Node& n, int kind /*0 softmax, 1 log, 2 hardmax*/) {
  n.check_attrs({"axis"});
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = computable(n, 0);
  const Shape s = b.meta(x).shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  const bool coerced = n.opset < 13;
  const int64_t axis = n.axis(n.attr_int("axis", coerced ? 1 : -1), std::max<int64_t>(rank, 1));
  int64_t dim = axis;
  if (coerced) {
    int64_t outer = 1, inner = 1;
    for (int64_t k = 0; k < rank; ++k) (k < axis ? outer : inner) *= s[k];
    x = b.reshape(x, {outer, inner});
    dim = 1;
  }
  TensorId out;
  if (kind == 2) {
    const int64_t size = b.meta(x).shape[dim];
    TensorId am = b.reduce(RK::kArgmax, x, {dim}, true);
    Shape rs(b.meta(x).shape.size(), 1);
    rs[dim] = size;
    TensorId classes = b.reshape(b.arange(size), rs);
    out = b.cast(b.binary(BK::kEq, am, classes), b.meta(x).dtype);
  } else {
    out = b.softmax(x, dim, kind == 1);
  }
  if (coerced) out = b.reshape(out, s);
  n.set_output(0, b.cast(out, d));
}

// pads [b0, b1, ..., e0, e1, ...] for the spatial dims, from pads or auto_pad.
std::vector<int64_t> spatial_pads(Node& n, const Shape& in, const std::vector<int64_t>& kernel,
                                  const std::vector<int64_t>& strides,
                                  const std::vector<int64_t>& dilations) {
  const size_t k = kernel.size();
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads = n.attr_ints("pads");
  if (auto_pad == "NOTSET") {
    if (pads.empty()) pads.assign(2 * k, 0);
    if (pads.size() != 2 * k) n.fail("attribute pads must have 2 entries per spatial dim");
    return pads;
  }
  pads.assign(2 * k, 0);
  if (auto_pad == "VALID") return pads;
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER") {
    n.fail("attribute auto_pad='" + auto_pad + "' is not supported");
  }
  for (size_t i = 0; i < k; ++i) {
    const int64_t size = in[2 + i];
    const int64_t out = (size + strides[i] - 1) / strides[i];
    const int64_t total =
        std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - size);
    const int64_t small = total / 2, large = total - small;
    pads[i] = auto_pad == "SAME_UPPER" ? small : large;
    pads[i + k] = auto_pad == "SAME_UPPER" ? large : small;
  }
  return pads;
}

std::vector<int64_t> ints_or(Node& n, const char* name, size_t count, int64_t dflt) {
  std::vector<int64_t> v = n.attr_ints(name);
  if (v.empty()) v.assign(count, dflt);
  if (v.size() != count)
    n.fail(std::string("attribute ") + name + " must have " + std::to_string(count) + " entries");
  return v;
}

// The convolution of Conv's attributes over float x and w (and bias, 0 for none), in their dtype.
TensorId conv_of(Node& n, TensorId x, TensorId w, TensorId bias) {
  Builder& b = n.b;
  const Shape xs = b.meta(x).shape, ws = b.meta(w).shape;
  if (xs.size() < 3 || xs.size() > 5) {
    n.fail("only 1-D, 2-D and 3-D convolutions are supported (input rank " +
           std::to_string(xs.size()) + ")");
  }
  size_t k = xs.size() - 2;
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != kernel) {
    n.fail("attribute kernel_shape differs from the weight's shape");
  }
  std::vector<int64_t> strides = ints_or(n, "strides", k, 1);
  std::vector<int64_t> dil = ints_or(n, "dilations", k, 1);
  std::vector<int64_t> pads = spatial_pads(n, xs, kernel, strides, dil);
  const bool one_d = k == 1;
  if (one_d) {  // as 2-D with a height of 1
    x = b.reshape(x, {xs[0], xs[1], 1, xs[2]});
    w = b.reshape(w, {ws[0], ws[1], 1, ws[2]});
    kernel = {1, kernel[0]};
    strides = {1, strides[0]};
    dil = {1, dil[0]};
    pads = {0, pads[0], 0, pads[1]};
    k = 2;
  }
  // Conv2d pads height and width alike: asymmetric pads are added as zeros first, as are a 3-D
  // convolution's depth pads.
  std::vector<int64_t> sym(2), before(k + 2, 0), after(k + 2, 0);
  for (size_t i = 0; i < k; ++i) {
    if (k == 3 && i == 0) {
      before[2] = pads[0];
      after[2] = pads[k];
      continue;
    }
    const size_t j = i - (k - 2);
    sym[j] = std::min(pads[i], pads[i + k]);
    before[2 + i] = pads[i] - sym[j];
    after[2 + i] = pads[i + k] - sym[j];
  }
  x = b.pad_constant(x, before, after, 0.0);
  const int64_t group = n.attr_int("group", 1);
  const std::vector<int64_t> s2(strides.end() - 2, strides.end()), d2(dil.end() - 2, dil.end());
  auto conv2d = [&](TensorId in, TensorId weight, TensorId with_bias) {
    const TensorId out = b.new_id();
    b.append(ir::Conv2d{{in}, {weight}, {with_bias}, s2, sym, d2, group, {out}});
    return out;
  };
  TensorId out;
  if (k == 2) {
    out = conv2d(x, w, bias);
  } else {
    // 3-D: one Conv2d per depth tap over the depth positions it reaches (folded into the batch),
    // summed in tap order.
    const Shape ps = b.meta(x).shape;
    const int64_t depth = (ps[2] - dil[0] * (kernel[0] - 1) - 1) / strides[0] + 1;
    if (depth < 1) n.fail("the kernel does not fit the padded input's depth");
    TensorId acc = 0;
    for (int64_t t = 0; t < kernel[0]; ++t) {
      std::vector<int64_t> st(5, 0), en(ps), sp(5, 1);
      st[2] = t * dil[0];
      en[2] = st[2] + (depth - 1) * strides[0] + 1;
      sp[2] = strides[0];
      TensorId xt = b.permute(b.slice(x, st, en, sp), {0, 2, 1, 3, 4});
      xt = b.reshape(xt, {ps[0] * depth, ps[1], ps[3], ps[4]});
      TensorId wt = b.reshape(b.narrow(w, 2, t, t + 1), {ws[0], ws[1], ws[3], ws[4]});
      TensorId yt = conv2d(xt, wt, 0);
      acc = acc == 0 ? yt : b.binary(BK::kAdd, acc, yt);
    }
    const Shape ys = b.meta(acc).shape;
    out = b.permute(b.reshape(acc, {ps[0], depth, ys[1], ys[2], ys[3]}), {0, 2, 1, 3, 4});
    if (bias) out = b.binary(BK::kAdd, out, b.reshape(bias, {1, ws[0], 1, 1, 1}));
  }
  if (one_d) {
    Shape os = b.meta(out).shape;
    out = b.reshape(out, {os[0], os[1], os[3]});
  }
  return out;
}

void conv_op(Node& n) {
  n.check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  const DType d = n.input_meta(0).dtype;
  const TensorId x = computable(n, 0), w = computable(n, 1);
  const TensorId bias = n.has_input(2) ? computable(n, 2) : 0;
  n.set_output(0, n.b.cast(conv_of(n, x, w, bias), d));
}

// ---- quantized ops (docs/onnx.md): onto Quantize/Dequantize and exact integer arithmetic ----

// Input i (an integer tensor) minus zero point `zp` (an input index; absent: 0) in `d`: a zero
// point of one element, or one per entry of dim `dim` of the input (ONNX's per-row/per-column
// and per-output-channel zero points).
TensorId minus_zero_point(Node& n, size_t i, size_t zp, DType d, int64_t dim) {
  Builder& b = n.b;
  const TensorId x = b.cast(n.input(i), d);
  if (!n.has_input(zp)) return x;
  TensorId z = b.cast(n.input(zp), d);
  const Shape xs = b.meta(x).shape, zs = b.meta(z).shape;
  if (numel(zs) != 1) {
    const int64_t rank = static_cast<int64_t>(xs.size());
    const int64_t a = dim < 0 ? dim + rank : dim;
    if (zs.size() != 1 || a < 0 || a >= rank || zs[0] != xs[a]) {
      n.fail("zero point " + shape_str(zs) + " must have one element or " +
             (a >= 0 && a < rank ? std::to_string(xs[a]) : std::string("?")) + " (input " +
             std::to_string(i) + " " + shape_str(xs) + ")");
    }
    Shape s(xs.size(), 1);
    s[a] = zs[0];
    z = b.reshape(z, s);
  } else {
    z = b.reshape(z, {});
  }
  return b.binary(BK::kSub, x, z);
}

// A scale input as f32 (0-d when it has one element).
TensorId scale_input(Node& n, size_t i) {
  TensorId s = n.b.cast(n.input(i), kF32);
  return numel(n.b.meta(s).shape) == 1 ? n.b.reshape(s, {}) : s;
}

// The quantized dtype of a zero-point input (absent: u8, ONNX's default).
DType zero_point_dtype(Node& n, size_t i) {
  const DType d = n.has_input(i) ? n.input_meta(i).dtype : kU8;
  if (d != kU8 && d != kI8)
    n.fail("zero point dtype " + std::string(dtype_name(d)) + ": u8 or i8 only");
  return d;
}

TensorId quantize_to(Node& n, TensorId x, TensorId scale, size_t zp, int64_t axis) {
  Builder& b = n.b;
  const DType d = zero_point_dtype(n, zp);
  TensorId z = n.has_input(zp) ? n.input(zp) : 0;
  if (z && numel(b.meta(z).shape) == 1) z = b.reshape(z, {});
  const TensorId out = b.new_id();
  b.append(ir::Quantize{{x}, {scale}, {z}, axis, 0, d, {out}});
  return out;
}

void quantize_linear_op(Node& n) {
  n.check_attrs({"axis"});
  const TensorId x = n.b.cast(n.input(0), kF32);
  n.set_output(0, quantize_to(n, x, scale_input(n, 1), 2, n.attr_int("axis", 1)));
}

void dequantize_linear_op(Node& n) {
  n.check_attrs({"axis"});
  Builder& b = n.b;
  const TensorId x = n.input(0);
  TensorId z = n.has_input(2) ? n.input(2) : 0;
  if (z && numel(b.meta(z).shape) == 1) z = b.reshape(z, {});
  const TensorId out = b.new_id();
  b.append(ir::Dequantize{{x}, {scale_input(n, 1)}, {z}, n.attr_int("axis", 1), 0, {out}});
  n.set_output(0, out);
}

// y_scale = (max(x, 0) - min(x, 0)) / 255, y_zero_point = clamp(round(-min / y_scale), 0, 255),
// y = saturate(round(x / y_scale) + y_zero_point) in u8 (halves to even throughout).
void dynamic_quantize_linear_op(Node& n) {
  n.check_attrs({});
  Builder& b = n.b;
  const TensorId x = b.cast(n.input(0), kF32);
  const TensorId lo = b.scalar(BK::kMinimum, b.reduce(RK::kMin, x, {}, false), 0.0);
  const TensorId hi = b.scalar(BK::kMaximum, b.reduce(RK::kMax, x, {}, false), 0.0);
  const TensorId scale = b.scalar(BK::kDiv, b.binary(BK::kSub, hi, lo), 255.0);
  const TensorId zf = b.clamp(b.unary(UK::kRound, b.binary(BK::kDiv, b.unary(UK::kNeg, lo), scale)),
                              ir::Scalar(0.0), ir::Scalar(255.0));
  const TensorId zp = b.cast(zf, kU8);
  const TensorId y = b.new_id();
  b.append(ir::Quantize{{x}, {scale}, {zp}, 1, 0, kU8, {y}});
  n.set_output(0, y);
  if (n.wants_output(1)) n.set_output(1, scale);
  if (n.wants_output(2)) n.set_output(2, zp);
}

// (A - a_zp)(B - b_zp) exactly in i32: a_zp per row of A (dim -2) or one, b_zp per column of B.
TensorId integer_matmul(Node& n, size_t a, size_t azp, size_t bb, size_t bzp) {
  Builder& b = n.b;
  const TensorId x = minus_zero_point(n, a, azp, kI32, -2),
                 y = minus_zero_point(n, bb, bzp, kI32, -1);
  if (b.meta(x).shape.size() < 2 || b.meta(y).shape.size() < 2)
    n.fail("1-D operands are not supported");
  return b.matmul(x, y);
}

void matmul_integer_op(Node& n) {
  n.check_attrs({});
  n.set_output(0, integer_matmul(n, 0, 2, 1, 3));
}

// y = saturate(round((A - a_zp)(B - b_zp) a_scale b_scale / y_scale) + y_zp): the integer product
// exact, scaled in f32, then quantized as QuantizeLinear.
void qlinear_matmul_op(Node& n) {
  n.check_attrs({});
  Builder& b = n.b;
  for (size_t s : {1, 4, 6}) {
    if (numel(n.input_meta(s).shape) != 1) n.fail("only per-tensor scales are supported");
  }
  const TensorId acc = b.cast(integer_matmul(n, 0, 2, 3, 5), kF32);
  const TensorId ab = b.binary(BK::kMul, scale_input(n, 1), scale_input(n, 4));
  n.set_output(0, quantize_to(n, b.binary(BK::kMul, acc, ab), scale_input(n, 6), 7, 1));
}

// The convolution of x - x_zp and w - w_zp (per output channel or one) in f64, exact for the
// sizes f64 sums integers exactly (< 2^53), as i32.
TensorId integer_conv(Node& n, size_t x, size_t xzp, size_t w, size_t wzp) {
  const TensorId xs = minus_zero_point(n, x, xzp, kF64, 1);
  const TensorId ws = minus_zero_point(n, w, wzp, kF64, 0);
  return conv_of(n, xs, ws, 0);
}

void conv_integer_op(Node& n) {
  n.check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  n.set_output(0, n.b.cast(integer_conv(n, 0, 2, 1, 3), kI32));
}

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias?): the integer
// convolution plus the i32 bias, times x_scale * w_scale (per output channel or one) in f32,
// quantized with y_scale and y_zp.
void qlinear_conv_op(Node& n) {
  n.check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  Builder& b = n.b;
  if (numel(n.input_meta(1).shape) != 1 || numel(n.input_meta(6).shape) != 1) {
    n.fail("x_scale and y_scale must be per tensor");
  }
  TensorId acc = integer_conv(n, 0, 2, 3, 5);  // f64 [N, O, ...]
  const int64_t rank = static_cast<int64_t>(b.meta(acc).shape.size());
  auto per_out_channel = [&](TensorId v) {
    if (numel(b.meta(v).shape) == 1) return b.reshape(v, {});
    Shape s(static_cast<size_t>(rank), 1);
    s[1] = numel(b.meta(v).shape);
    return b.reshape(v, s);
  };
  if (n.has_input(8)) acc = b.binary(BK::kAdd, acc, per_out_channel(b.cast(n.input(8), kF64)));
  const TensorId scale = b.binary(BK::kMul, scale_input(n, 1), per_out_channel(scale_input(n, 4)));
  n.set_output(
      0, quantize_to(n, b.binary(BK::kMul, b.cast(acc, kF32), scale), scale_input(n, 6), 7, 1));
}

// ConvTranspose is Conv2d's gradient with respect to its input (Conv2dBackwardInput): X plays
// the gradient, W [C_in, C_out / group, kH, kW] the convolution's weight. Asymmetric pads are
// taken as the smaller pad on both sides, then the excess cropped.
void conv_transpose_op(Node& n) {
  n.check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape",
                 "pads", "strides"});
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = computable(n, 0), w = computable(n, 1);
  Shape xs = b.meta(x).shape, ws = b.meta(w).shape;
  if (xs.size() != 3 && xs.size() != 4) {
    n.fail("only 1-D and 2-D transposed convolutions are supported (input rank " +
           std::to_string(xs.size()) + ")");
  }
  const size_t k = xs.size() - 2;
  std::vector<int64_t> kernel(ws.begin() + 2, ws.end());
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != kernel) {
    n.fail("attribute kernel_shape differs from the weight's shape");
  }
  std::vector<int64_t> strides = ints_or(n, "strides", k, 1);
  std::vector<int64_t> dil = ints_or(n, "dilations", k, 1);
  std::vector<int64_t> out_pad = ints_or(n, "output_padding", k, 0);
  const int64_t group = n.attr_int("group", 1);
  std::vector<int64_t> pads = n.attr_ints("pads");
  if (pads.empty()) pads.assign(2 * k, 0);
  if (pads.size() != 2 * k) n.fail("attribute pads must have 2 entries per spatial dim");
  std::vector<int64_t> out_shape = n.attr_ints("output_shape");
  if (out_shape.size() == k + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> full(k), extra(k, 0);
  for (size_t i = 0; i < k; ++i) {
    full[i] = strides[i] * (xs[2 + i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1;
    if (out_pad[i] >= strides[i] && out_pad[i] >= dil[i])
      n.fail("output_padding must be smaller than the stride or the dilation");
  }
  if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    if (out_shape.empty()) {
      for (size_t i = 0; i < k; ++i) out_shape.push_back(xs[2 + i] * strides[i]);
    }
    if (out_shape.size() != k) n.fail("attribute output_shape must have one entry per spatial dim");
    for (size_t i = 0; i < k; ++i) {
      int64_t total = full[i] - out_shape[i];
      // An output_shape beyond the full output extends it at the end; nothing reaches those
      // positions (as output_padding): zeros, then the bias.
      if (total < 0) {
        extra[i] = -total;
        total = 0;
      }
      const bool lower = auto_pad == "SAME_LOWER";
      pads[i] = lower ? total - total / 2 : total / 2;
      pads[i + k] = lower ? total / 2 : total - total / 2;
    }
  } else if (auto_pad != "NOTSET" && auto_pad != "VALID") {
    n.fail("attribute auto_pad='" + auto_pad + "' is not supported");
  } else if (auto_pad == "VALID") {
    pads.assign(2 * k, 0);
  }
  if (k == 1) {  // as 2-D with a height of 1
    x = b.reshape(x, {xs[0], xs[1], 1, xs[2]});
    w = b.reshape(w, {ws[0], ws[1], 1, ws[2]});
    xs = b.meta(x).shape;
    kernel.insert(kernel.begin(), 1);
    strides.insert(strides.begin(), 1);
    dil.insert(dil.begin(), 1);
    full.insert(full.begin(), 1);
    extra.insert(extra.begin(), 0);
    pads = {0, pads[0], 0, pads[1]};
  }
  std::vector<int64_t> sym(2);
  Shape target{xs[0], ws[1] * group, 0, 0};
  for (size_t i = 0; i < 2; ++i) {
    sym[i] = std::min(pads[i], pads[i + 2]);
    if (sym[i] < 0) n.fail("negative pads are not supported");
    target[2 + i] = full[i] - 2 * sym[i];
  }
  TensorId out = b.new_id();
  b.append(ir::Conv2dBackwardInput{{x}, {w}, target, strides, sym, dil, group, {out}});
  for (size_t i = 0; i < 2; ++i) {
    const int64_t begin = pads[i] - sym[i], end = pads[i + 2] - sym[i];
    if (begin || end) out = b.narrow(out, static_cast<int64_t>(2 + i), begin, target[2 + i] - end);
  }
  out = b.pad_constant(out, {0, 0, 0, 0}, {0, 0, extra[0], extra[1]}, 0.0);
  if (n.has_input(2)) out = b.binary(BK::kAdd, out, per_channel(b, computable(n, 2), 4));
  if (k == 1) {
    const Shape os = b.meta(out).shape;
    out = b.reshape(out, {os[0], os[1], os[3]});
  }
  n.set_output(0, b.cast(out, d));
}

// Pooling by visiting the window's taps, for what Pool2d lacks (dilations, 3-D windows): x is
// already padded; each tap is a strided slice of it, combined by maximum, or summed and divided by
// `count` (a tensor: the in-range elements of each window) or by the window size.
TensorId pool_taps(Builder& b, TensorId x, bool avg, const std::vector<int64_t>& kernel,
                   const std::vector<int64_t>& strides, const std::vector<int64_t>& dil,
                   TensorId count) {
  const Shape xs = b.meta(x).shape;
  const size_t k = kernel.size();
  std::vector<int64_t> out(k);
  int64_t taps = 1;
  for (size_t i = 0; i < k; ++i) {
    out[i] = (xs[2 + i] - dil[i] * (kernel[i] - 1) - 1) / strides[i] + 1;
    if (out[i] < 1) b.fail("the window does not fit the padded input");
    taps *= kernel[i];
  }
  auto sum_taps = [&](TensorId src, bool max) {
    TensorId acc = 0;
    for (int64_t t = 0; t < taps; ++t) {
      std::vector<int64_t> starts(xs.size(), 0), ends(xs), steps(xs.size(), 1);
      for (size_t i = k, rest = static_cast<size_t>(t); i-- > 0;) {
        const int64_t tap = static_cast<int64_t>(rest % kernel[i]);
        rest /= kernel[i];
        starts[2 + i] = tap * dil[i];
        ends[2 + i] = starts[2 + i] + (out[i] - 1) * strides[i] + 1;
        steps[2 + i] = strides[i];
      }
      TensorId v = b.slice(src, starts, ends, steps);
      acc = acc == 0 ? v : b.binary(max ? BK::kMaximum : BK::kAdd, acc, v);
    }
    return acc;
  };
  if (!avg) return sum_taps(x, true);
  const TensorId sum = sum_taps(x, false);
  if (count != 0) return b.binary(BK::kDiv, sum, sum_taps(count, false));
  return b.scalar(BK::kDiv, sum, static_cast<double>(taps));
}

void pool_op(Node& n, ir::PoolKind kind) {
  const bool avg = kind == ir::PoolKind::kAvg;
  if (avg)
    n.check_attrs(
        {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"});
  else
    n.check_attrs(
        {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
  if (n.wants_output(1)) n.fail("output Indices is not supported");
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = computable(n, 0);
  // Pool2d takes floats: integer max pooling runs in f64, exact for every u8 and i32 value.
  if (!avg && !is_float(d)) x = b.cast(x, kF64);
  const Shape xs = b.meta(x).shape;
  if (xs.size() < 3) n.fail("input must have rank >= 3");
  const size_t k = xs.size() - 2;
  const std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
  if (kernel.size() != k)
    n.fail("attribute kernel_shape must have " + std::to_string(k) + " entries");
  const std::vector<int64_t> strides = ints_or(n, "strides", k, 1);
  const std::vector<int64_t> dil = ints_or(n, "dilations", k, 1);
  std::vector<int64_t> pads = spatial_pads(n, xs, kernel, strides, dil);
  const bool ceil = n.attr_int("ceil_mode", 0) != 0;
  const bool include_pad = n.attr_int("count_include_pad", 0) != 0;
  if (ceil) {
    // The last window may start past the end (in the right padding or beyond): pad the end so
    // floor division gives ceil's count, as long as that window starts inside the input or the
    // left padding (PyTorch's and ONNX's rule).
    for (size_t i = 0; i < k; ++i) {
      const int64_t window = dil[i] * (kernel[i] - 1) + 1;
      const int64_t span = xs[2 + i] + pads[i] + pads[i + k] - window;
      int64_t out = (span + strides[i] - 1) / strides[i] + 1;
      if ((out - 1) * strides[i] >= xs[2 + i] + pads[i]) --out;
      const int64_t need = (out - 1) * strides[i] + window - (xs[2 + i] + pads[i] + pads[i + k]);
      if (need > 0) {
        if (avg && include_pad) n.fail("ceil_mode=1 with count_include_pad=1 is not supported");
        pads[i + k] += need;
      }
    }
  }
  bool dilated = false;
  for (int64_t v : dil) dilated = dilated || v != 1;
  const bool taps = dilated || k > 2;
  const bool one_d = !taps && k == 1;
  if (one_d) {
    x = b.reshape(x, {xs[0], xs[1], 1, xs[2]});
    pads = {0, pads[0], 0, pads[1]};
  }
  const size_t kk = one_d ? 2 : k;
  const std::vector<int64_t> kw = one_d ? std::vector<int64_t>{1, kernel[0]} : kernel;
  const std::vector<int64_t> sw = one_d ? std::vector<int64_t>{1, strides[0]} : strides;
  // Pool2d pads both sides alike with at most kernel / 2: otherwise pad explicitly (-inf for
  // max; for avg zeros, with the count corrected below).
  bool explicit_pad = taps || (avg && !include_pad);
  for (size_t i = 0; i < kk; ++i) {
    explicit_pad = explicit_pad || pads[i] != pads[i + kk] || pads[i] > kw[i] / 2;
  }
  std::vector<int64_t> pool_pad(kk, 0);
  TensorId ones = 0;
  if (explicit_pad) {
    const size_t rank = kk + 2;
    std::vector<int64_t> before(rank, 0), after(rank, 0);
    for (size_t i = 0; i < kk; ++i) {
      before[2 + i] = pads[i];
      after[2 + i] = pads[i + kk];
    }
    const double fill = avg ? 0.0 : -std::numeric_limits<double>::infinity();
    if (avg && !include_pad) {
      Shape os = b.meta(x).shape;
      os[0] = os[1] = 1;
      ones = b.pad_constant(b.full(os, b.meta(x).dtype, 1.0), before, after, 0.0);
    }
    x = b.pad_constant(x, before, after, fill);
  } else {
    for (size_t i = 0; i < kk; ++i) pool_pad[i] = pads[i];
  }
  TensorId out;
  if (taps) {
    out = pool_taps(b, x, avg, kernel, strides, dil, ones);
  } else {
    out = b.new_id();
    b.append(ir::Pool2d{kind, {x}, kw, sw, pool_pad, {out}});
    if (ones != 0) {  // the average over in-range elements only: sum / count
      TensorId count = b.new_id();
      b.append(ir::Pool2d{kind, {ones}, kw, sw, pool_pad, {count}});
      out = b.binary(BK::kDiv, out, count);
    }
  }
  if (one_d) {
    Shape os = b.meta(out).shape;
    out = b.reshape(out, {os[0], os[1], os[3]});
  }
  n.set_output(0, b.cast(out, d));
}

void global_pool_op(Node& n, RK kind) {
  n.check_attrs({});
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = computable(n, 0);
  std::vector<int64_t> dims;
  for (int64_t i = 2; i < n.rank(0); ++i) dims.push_back(i);
  n.set_output(0, b.cast(b.reduce(kind, x, dims, true), d));
}

// [C] -> [1, C, 1, ...] for an input of `rank`.
TensorId per_channel(Builder& b, TensorId v, int64_t rank) {
  Shape s(static_cast<size_t>(rank), 1);
  s[1] = numel(b.meta(v).shape);
  return b.reshape(v, s);
}

void batch_norm_op(Node& n) {
  n.check_attrs({"epsilon", "momentum", "spatial", "training_mode", "is_test"});
  n.require_attr_int("spatial", 1);
  if (n.opset < 7 && n.attr_int("is_test", 0) == 0) {
    n.fail("attribute is_test=0 (training) is not supported before opset 7");
  }
  // Training (opset 14's training_mode=1): normalise with the batch's statistics and output the
  // updated running mean and (population) variance. Before 14, extra outputs meant training.
  const bool training = n.attr_int("training_mode", 0) != 0;
  if (!training) {
    for (size_t i = 1; i < 5; ++i) {
      if (n.wants_output(i))
        n.fail("output " + std::to_string(i) + " (training statistics) is not supported");
    }
  }
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = computable(n, 0);
  const int64_t rank = n.rank(0);
  const double eps = n.attr_float("epsilon", 1e-5);
  TensorId scale = per_channel(b, computable(n, 1), rank),
           bias = per_channel(b, computable(n, 2), rank);
  TensorId mean = per_channel(b, computable(n, 3), rank),
           var = per_channel(b, computable(n, 4), rank);
  if (training) {
    const double momentum = n.attr_float("momentum", 0.9);
    std::vector<int64_t> dims{0};
    for (int64_t i = 2; i < rank; ++i) dims.push_back(i);
    TensorId bmean = b.reduce(RK::kMean, x, dims, true);
    TensorId centred = b.binary(BK::kSub, x, bmean);
    TensorId bvar = b.reduce(RK::kMean, b.binary(BK::kMul, centred, centred), dims, true);
    auto running = [&](TensorId old, TensorId now) {
      TensorId r = b.binary(BK::kAdd, b.scalar(BK::kMul, old, momentum),
                            b.scalar(BK::kMul, now, 1.0 - momentum));
      return b.cast(b.reshape(r, {numel(b.meta(r).shape)}), d);
    };
    n.set_output(1, running(mean, bmean));
    n.set_output(2, running(var, bvar));
    mean = bmean;
    var = bvar;
  }
  // (x - mean) / sqrt(var + eps) * scale + bias
  TensorId den = b.unary(UK::kSqrt, b.scalar(BK::kAdd, var, eps));
  TensorId y = b.binary(BK::kDiv, b.binary(BK::kSub, x, mean), den);
  y = b.binary(BK::kAdd, b.binary(BK::kMul, y, scale), bias);
  n.set_output(0, b.cast(y, d));
}

// Mean and biased variance over `dims` (kept), and (x - mean) / sqrt(var + eps).
struct Normalized {
  TensorId mean, inv_std, y;
};
Normalized normalize(Builder& b, TensorId x, const std::vector<int64_t>& dims, double eps) {
  TensorId mean = b.reduce(RK::kMean, x, dims, true);
  TensorId centred = b.binary(BK::kSub, x, mean);
  TensorId var = b.reduce(RK::kMean, b.binary(BK::kMul, centred, centred), dims, true);
  TensorId inv = b.unary(UK::kRsqrt, b.scalar(BK::kAdd, var, eps));
  return {mean, inv, b.binary(BK::kMul, centred, inv)};
}

void layer_norm_op(Node& n) {
  n.check_attrs({"axis", "epsilon", "stash_type"});
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = computable(n, 0);
  const Shape s = b.meta(x).shape;
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t axis = n.axis(n.attr_int("axis", -1), rank);
  const double eps = n.attr_float("epsilon", 1e-5);
  TensorId scale = computable(n, 1);
  TensorId bias = n.has_input(2) ? computable(n, 2) : 0;
  const Shape normalized(s.begin() + axis, s.end());
  const bool fused =
      b.meta(scale).shape == normalized && (bias == 0 || b.meta(bias).shape == normalized) &&
      b.meta(scale).dtype == b.meta(x).dtype && !n.wants_output(1) && !n.wants_output(2);
  if (fused) {
    TensorId out = b.new_id();
    b.append(ir::LayerNorm{{x}, {scale}, {bias}, rank - axis, eps, {out}});
    n.set_output(0, b.cast(out, d));
    return;
  }
  std::vector<int64_t> dims;
  for (int64_t i = axis; i < rank; ++i) dims.push_back(i);
  Normalized z = normalize(b, x, dims, eps);
  TensorId y = b.binary(BK::kMul, z.y, scale);
  if (bias) y = b.binary(BK::kAdd, y, bias);
  n.set_output(0, b.cast(y, d));
  n.set_output(1, z.mean);
  n.set_output(2, z.inv_std);
}

void instance_norm_op(Node& n) {
  n.check_attrs({"epsilon"});
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = computable(n, 0);
  const int64_t rank = n.rank(0);
  std::vector<int64_t> dims;
  for (int64_t i = 2; i < rank; ++i) dims.push_back(i);
  Normalized z = normalize(b, x, dims, n.attr_float("epsilon", 1e-5));
  TensorId y = b.binary(BK::kMul, z.y, per_channel(b, computable(n, 1), rank));
  y = b.binary(BK::kAdd, y, per_channel(b, computable(n, 2), rank));
  n.set_output(0, b.cast(y, d));
}

void mvn_op(Node& n) {
  n.check_attrs({"axes"});
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = computable(n, 0);
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (axes.empty()) axes = {0, 2, 3};
  for (int64_t& a : axes) a = n.axis(a, n.rank(0), "axes entry");
  // ONNX's definition: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9).
  TensorId mean = b.reduce(RK::kMean, x, axes, true);
  TensorId mean_sq = b.reduce(RK::kMean, b.binary(BK::kMul, x, x), axes, true);
  TensorId var = b.binary(BK::kSub, mean_sq, b.binary(BK::kMul, mean, mean));
  TensorId den = b.scalar(BK::kAdd, b.unary(UK::kSqrt, var), 1e-9);
  n.set_output(0, b.cast(b.binary(BK::kDiv, b.binary(BK::kSub, x, mean), den), d));
}

// NegativeLogLikelihoodLoss over log-probabilities `logp` [N, C, d...] and targets [N, d...].
TensorId nll(Node& n, TensorId logp, TensorId target, TensorId weight) {
  Builder& b = n.b;
  const int64_t ignore = n.attr_int("ignore_index", std::numeric_limits<int64_t>::min());
  const bool has_ignore = n.has_attr("ignore_index");
  const std::string reduction = n.attr_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none") {
    n.fail("attribute reduction='" + reduction + "' is not supported");
  }
  const Shape ls = b.meta(logp).shape;
  const DType fd = b.meta(logp).dtype;
  target = b.cast(target, kI64);
  TensorId keep = has_ignore ? b.scalar(BK::kNe, target, ignore) : 0;
  TensorId t = keep ? b.where(keep, target, b.full({}, kI64, int64_t{0})) : target;
  Shape ts = b.meta(t).shape;
  Shape us = ts;
  us.insert(us.begin() + 1, 1);
  TensorId picked = b.reshape(b.gather(logp, 1, b.reshape(t, us)), ts);
  TensorId w = 0;  // per-element weight, or none (all ones)
  if (weight) w = b.reshape(b.index_select(weight, 0, b.reshape(t, {numel(ts)})), ts);
  if (keep) {
    TensorId kf = b.cast(keep, fd);
    w = w ? b.binary(BK::kMul, w, kf) : kf;
  }
  TensorId loss = b.unary(UK::kNeg, picked);
  if (w) loss = b.binary(BK::kMul, loss, w);
  if (reduction == "none") return loss;
  TensorId sum = b.reduce(RK::kSum, loss, {}, false);
  if (reduction == "sum") return sum;
  if (!w) return b.reduce(RK::kMean, loss, {}, false);
  return b.binary(BK::kDiv, sum, b.reduce(RK::kSum, w, {}, false));
}

void nll_op(Node& n) {
  n.check_attrs({"ignore_index", "reduction"});
  const DType d = n.input_meta(0).dtype;
  TensorId out = nll(n, computable(n, 0), n.input(1), n.has_input(2) ? computable(n, 2) : 0);
  n.set_output(0, n.b.cast(out, d));
}

void softmax_cross_entropy_op(Node& n) {
  n.check_attrs({"ignore_index", "reduction"});
  const DType d = n.input_meta(0).dtype;
  TensorId logp = n.b.softmax(computable(n, 0), 1, true);
  TensorId out = nll(n, logp, n.input(1), n.has_input(2) ? computable(n, 2) : 0);
  n.set_output(0, n.b.cast(out, d));
  if (n.wants_output(1)) n.set_output(1, n.b.cast(logp, d));
}

}  // namespace

void register_nn_ops() {
  auto& t = op_table();
  t["MatMul"] = matmul_op;
  t["Gemm"] = gemm_op;
  t["Softmax"] = [](Node& n) { softmax_like(n, 0); };
  t["LogSoftmax"] = [](Node& n) { softmax_like(n, 1); };
  t["Hardmax"] = [](Node& n) { softmax_like(n, 2); };
  t["Conv"] = conv_op;
  t["QuantizeLinear"] = quantize_linear_op;
  t["DequantizeLinear"] = dequantize_linear_op;
  t["DynamicQuantizeLinear"] = dynamic_quantize_linear_op;
  t["MatMulInteger"] = matmul_integer_op;
  t["QLinearMatMul"] = qlinear_matmul_op;
  t["ConvInteger"] = conv_integer_op;
  t["QLinearConv"] = qlinear_conv_op;
  t["ConvTranspose"] = conv_transpose_op;
  t["MaxPool"] = [](Node& n) { pool_op(n, ir::PoolKind::kMax); };
  t["AveragePool"] = [](Node& n) { pool_op(n, ir::PoolKind::kAvg); };
  t["GlobalAveragePool"] = [](Node& n) { global_pool_op(n, RK::kMean); };
  t["GlobalMaxPool"] = [](Node& n) { global_pool_op(n, RK::kMax); };
  t["BatchNormalization"] = batch_norm_op;
  t["LayerNormalization"] = layer_norm_op;
  t["InstanceNormalization"] = instance_norm_op;
  t["MeanVarianceNormalization"] = mvn_op;
  t["NegativeLogLikelihoodLoss"] = nll_op;
  t["SoftmaxCrossEntropyLoss"] = softmax_cross_entropy_op;
}

}  // namespace tw::onnx_import
