// Resize and Upsample: separable, one axis at a time (the last first, as ONNX's reference
// interpolates), each output position a weighted sum of input positions along the axis. The
// positions and weights depend only on sizes and attributes, so they are computed here, at load,
// following ONNX's definition (onnx/backend/test/case/node/resize.py): the taps are IndexSelects
// with constant indices, the weights constant tensors.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "onnx/importer.h"

namespace tw::onnx_import {

namespace {

using BK = ir::BinaryKind;

struct ResizeAttrs {
  std::string mode = "nearest", transform = "half_pixel", nearest_mode = "round_prefer_floor";
  double cubic_a = -0.75, extrapolation = 0;
  bool exclude_outside = false;
};

// The source coordinate of output position o along an axis of input size L, output size M.
double source_coordinate(const ResizeAttrs& a, double o, double scale, int64_t L, int64_t M,
                         double roi_start, double roi_end) {
  const std::string& t = a.transform;
  // ONNX's reference divides by scale * L - 1, the unrounded output size.
  if (t == "align_corners")
    return M == 1 ? 0 : o * static_cast<double>(L - 1) / (scale * static_cast<double>(L) - 1);
  if (t == "asymmetric") return o / scale;
  if (t == "pytorch_half_pixel") return M != 1 ? (o + 0.5) / scale - 0.5 : -0.5;
  if (t == "tf_half_pixel_for_nn") return (o + 0.5) / scale;
  if (t == "tf_crop_and_resize") {
    const double len = static_cast<double>(L - 1);
    return M > 1 ? roi_start * len + o * (roi_end - roi_start) * len / static_cast<double>(M - 1)
                 : 0.5 * (roi_start + roi_end) * len;
  }
  return (o + 0.5) / scale - 0.5;  // half_pixel
}

// Weights of the taps base - 1 .. base + 2 (cubic) or base, base + 1 (linear, nearest), where
// ratio = x - base lies in (0, 1] (ONNX prefers the left neighbour).
std::vector<double> coefficients(const ResizeAttrs& a, double ratio, bool integral) {
  if (a.mode == "nearest") {
    if (integral) return {0, 1};
    const std::string& m = a.nearest_mode;
    if (m == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (m == "floor") return {1, 0};
    if (m == "ceil") return {0, 1};
    return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};  // round_prefer_floor
  }
  if (a.mode == "linear") return {1 - ratio, ratio};
  const double A = a.cubic_a, r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
  return {((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A,
          ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1, ((A + 2) * q - (A + 3)) * q * q + 1,
          ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A};
}

HostTensor values_of(const std::vector<double>& v, const Shape& shape, DType d) {
  HostTensor h;
  h.meta = {shape, d};
  h.bytes.resize(v.size() * dtype_size(d));
  for (size_t i = 0; i < v.size(); ++i) {
    if (d == kF64) {
      std::memcpy(h.bytes.data() + 8 * i, &v[i], 8);
    } else {
      const float f = static_cast<float>(v[i]);
      std::memcpy(h.bytes.data() + 4 * i, &f, 4);
    }
  }
  return h;
}

// Resizes x along `axis` to M.
TensorId resize_axis(Builder& b, TensorId x, int64_t axis, int64_t M, double scale,
                     const ResizeAttrs& a, double roi_start, double roi_end) {
  const Shape xs = b.meta(x).shape;
  const int64_t L = xs[axis];
  const DType d = b.meta(x).dtype;
  const size_t taps = a.mode == "cubic" ? 4 : 2;
  const int64_t first = a.mode == "cubic" ? -1 : 0;  // tap j is position base + first + j
  std::vector<std::vector<int64_t>> index(taps, std::vector<int64_t>(static_cast<size_t>(M)));
  std::vector<std::vector<double>> weight(taps, std::vector<double>(static_cast<size_t>(M)));
  std::vector<bool> outside(static_cast<size_t>(M), false);
  bool identity = M == L;
  for (int64_t o = 0; o < M; ++o) {
    const double x0 = source_coordinate(a, static_cast<double>(o), scale, L, M, roi_start, roi_end);
    if (a.transform == "tf_crop_and_resize" && (x0 < 0 || x0 > static_cast<double>(L - 1))) {
      outside[o] = true;
    }
    const bool integral = x0 == std::floor(x0);
    const int64_t base = static_cast<int64_t>(std::ceil(x0)) - 1;
    const double ratio = x0 - static_cast<double>(base);
    std::vector<double> c = coefficients(a, ratio, integral);
    if (a.exclude_outside) {
      double sum = 0;
      for (size_t j = 0; j < taps; ++j) {
        const int64_t p = base + first + static_cast<int64_t>(j);
        if (p < 0 || p >= L) c[j] = 0;
        sum += c[j];
      }
      for (double& v : c) v /= sum;
    }
    for (size_t j = 0; j < taps; ++j) {
      const int64_t p = std::clamp<int64_t>(base + first + static_cast<int64_t>(j), 0, L - 1);
      index[j][o] = p;
      weight[j][o] = c[j];
      if (c[j] != 0 && (c[j] != 1 || p != o)) identity = false;
    }
  }
  if (identity && a.transform != "tf_crop_and_resize") return x;
  Shape ws(xs.size(), 1);
  ws[axis] = M;
  TensorId out = 0;
  if (a.mode == "nearest") {  // one-hot weights: select the chosen tap's position
    std::vector<int64_t> pick(static_cast<size_t>(M));
    for (int64_t o = 0; o < M; ++o) pick[o] = weight[0][o] != 0 ? index[0][o] : index[1][o];
    out = b.index_select(x, axis, b.constant_id(HostTensor::of_ints(pick, {M})));
  }
  for (size_t j = 0; j < taps && a.mode != "nearest"; ++j) {
    bool all_zero = true;
    for (double w : weight[j]) all_zero = all_zero && w == 0;
    if (all_zero) continue;
    TensorId idx = b.constant_id(HostTensor::of_ints(index[j], {M}));
    TensorId tap = b.index_select(x, axis, idx);
    tap = b.binary(BK::kMul, tap, b.constant_id(values_of(weight[j], ws, d)));
    out = out == 0 ? tap : b.binary(BK::kAdd, out, tap);
  }
  if (out == 0) {  // every weight 0 (possible only with exclude_outside): zeros
    Shape os = xs;
    os[axis] = M;
    out = b.full(os, d, 0.0);
  }
  bool any_outside = false;
  for (bool o : outside) any_outside = any_outside || o;
  if (any_outside) {
    std::vector<int64_t> mask(outside.begin(), outside.end());
    HostTensor m = HostTensor::of_ints(mask, ws);
    TensorId cond = b.cast(b.constant_id(m), kBool);
    out = b.where(cond, b.full({}, d, a.extrapolation), out);
  }
  return out;
}

void resize_op(Node& n) {
  const bool upsample = n.proto.op_type() == "Upsample";
  ResizeAttrs a;
  a.mode = n.attr_string("mode", "nearest");
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  std::vector<double> roi;
  const Shape xs = n.input_meta(0).shape;
  const size_t rank = xs.size();
  if (upsample || n.opset < 11) {
    n.check_attrs({"mode", "scales"});
    // Upsample and Resize-10: asymmetric coordinates, nearest rounds down.
    a.transform = "asymmetric";
    a.nearest_mode = "floor";
    if (upsample && n.opset < 9) {
      for (float s : n.attr_floats("scales")) scales.push_back(s);
    } else {
      scales = n.constant(1, "scales").doubles();
    }
  } else {
    n.check_attrs({"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                   "extrapolation_value", "mode", "nearest_mode"});
    a.transform = n.attr_string("coordinate_transformation_mode", "half_pixel");
    a.nearest_mode = n.attr_string("nearest_mode", "round_prefer_floor");
    a.cubic_a = n.attr_float("cubic_coeff_a", -0.75);
    a.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
    a.extrapolation = n.attr_float("extrapolation_value", 0.0);
    // Inputs: X, roi, scales, sizes; an empty tensor stands for an absent one.
    if (n.has_input(1)) roi = n.constant(1, "roi").doubles();
    if (n.has_input(2)) scales = n.constant(2, "scales").doubles();
    if (n.has_input(3)) sizes = n.ints_input(3, "sizes");
  }
  static const char* kTransforms[] = {"half_pixel",           "asymmetric",
                                      "align_corners",        "pytorch_half_pixel",
                                      "tf_half_pixel_for_nn", "tf_crop_and_resize"};
  if (std::find_if(std::begin(kTransforms), std::end(kTransforms),
                   [&](const char* t) { return a.transform == t; }) == std::end(kTransforms)) {
    n.fail("attribute coordinate_transformation_mode='" + a.transform + "' is not supported");
  }
  if (a.mode != "nearest" && a.mode != "linear" && a.mode != "cubic") {
    n.fail("attribute mode='" + a.mode + "' is not supported");
  }
  if (a.mode == "nearest" && a.nearest_mode != "round_prefer_floor" &&
      a.nearest_mode != "round_prefer_ceil" && a.nearest_mode != "floor" &&
      a.nearest_mode != "ceil") {
    n.fail("attribute nearest_mode='" + a.nearest_mode + "' is not supported");
  }
  if (scales.empty() == sizes.empty()) n.fail("exactly one of scales and sizes must be given");
  if ((!scales.empty() && scales.size() != rank) || (!sizes.empty() && sizes.size() != rank)) {
    n.fail("scales or sizes must have one entry per dim");
  }
  const bool crop = a.transform == "tf_crop_and_resize";
  if (crop && roi.size() != 2 * rank) n.fail("input roi must have 2 * rank entries");
  Builder& b = n.b;
  const DType d = n.input_meta(0).dtype;
  TensorId x = n.input(0);
  if (a.mode != "nearest" && !is_float(d))
    n.fail(a.mode + " resizing of " + std::string(dtype_name(d)) + " is not supported");
  if (storage_only(d)) x = b.cast(x, kF32);
  for (size_t i = rank; i-- > 0;) {
    const int64_t L = xs[i];
    double scale;
    int64_t M;
    const double roi_start = crop ? roi[i] : 0, roi_end = crop ? roi[i + rank] : 1;
    if (!sizes.empty()) {
      M = sizes[i];
      scale = static_cast<double>(M) / static_cast<double>(L);
    } else {
      scale = scales[i];
      if (!(scale > 0)) n.fail("scales must be positive");
      M = static_cast<int64_t>(std::floor(static_cast<double>(L) * (roi_end - roi_start) * scale));
    }
    if (M < 0 || (M > 0 && L == 0)) n.fail("cannot resize dim " + std::to_string(i));
    x = resize_axis(b, x, static_cast<int64_t>(i), M, scale, a, roi_start, roi_end);
  }
  n.set_output(0, b.cast(x == n.input(0) ? b.copy(x) : x, d));
}

// GridSample (opset 16): each output position samples X at the grid's (x, y) in [-1, 1], mapped
// to pixel coordinates as align_corners says; border padding clamps the coordinate, reflection
// reflects it into range, zeros gives taps outside X weight 0. Bilinear is four taps, nearest one
// (rounded half to even), bicubic sixteen (each tap padded, as PyTorch's); each tap one Gather
// over X's flattened pixels. Computed from the grid at run time: the grid is a tensor.
void grid_sample_op(Node& n) {
  n.check_attrs({"align_corners", "mode", "padding_mode"});
  Builder& b = n.b;
  const std::string mode = n.attr_string("mode", "bilinear");
  const std::string padding = n.attr_string("padding_mode", "zeros");
  const bool align = n.attr_int("align_corners", 0) != 0;
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    n.fail("attribute mode='" + mode + "' is not supported (bilinear, nearest, bicubic)");
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    n.fail("attribute padding_mode='" + padding + "' is not supported");
  TensorId x = computable(n, 0), grid = computable(n, 1);
  const DType out_dtype = n.input_meta(0).dtype;
  const Shape xs = b.meta(x).shape, gs = b.meta(grid).shape;
  if (xs.size() != 4 || gs.size() != 4 || gs[3] != 2 || gs[0] != xs[0])
    n.fail("X " + shape_str(xs) + " and grid " + shape_str(gs) +
           " must be [N, C, H, W] and [N, H_out, W_out, 2]");
  const DType cd = b.meta(x).dtype;
  grid = b.cast(grid, cd);
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], P = gs[1] * gs[2];
  grid = b.reshape(grid, {N, 1, P, 2});
  // Pixel coordinate along a dim of `size` from the normalised one.
  auto unnormalize = [&](TensorId g, int64_t size) {
    const double sz = static_cast<double>(size);
    return align ? b.scalar(BK::kMul, b.scalar(BK::kAdd, g, 1.0), (sz - 1) / 2)
                 : b.scalar(
                       BK::kMul,
                       b.scalar(BK::kSub, b.scalar(BK::kMul, b.scalar(BK::kAdd, g, 1.0), sz), 1.0),
                       0.5);
  };
  // The padding mode's coordinate (border: clamped; reflection: reflected, then clamped).
  auto padded = [&](TensorId c, int64_t size) {
    const double sz = static_cast<double>(size);
    if (padding == "border") {
      c = b.clamp(c, ir::Scalar(0.0), ir::Scalar(sz - 1));
    } else if (padding == "reflection") {
      // Reflect into [lo, hi] (pixel centres with align_corners, else pixel edges), then clamp.
      const double lo = align ? 0.0 : -0.5, hi = align ? sz - 1 : sz - 0.5, span = hi - lo;
      if (span <= 0) {
        c = b.scalar(BK::kMul, c, 0.0);
      } else {
        TensorId d = b.unary(ir::UnaryKind::kAbs, b.scalar(BK::kSub, c, lo));
        TensorId flips = b.unary(ir::UnaryKind::kFloor, b.scalar(BK::kDiv, d, span));
        TensorId extra = b.binary(BK::kSub, d, b.scalar(BK::kMul, flips, span));
        TensorId even = b.scalar(BK::kEq, b.scalar(BK::kRemainder, flips, 2.0), 0.0);
        c = b.where(even, b.scalar(BK::kAdd, extra, lo), b.scalar(BK::kSub, extra, hi, true));
      }
      c = b.clamp(c, ir::Scalar(0.0), ir::Scalar(sz - 1));
    }
    return c;
  };
  const TensorId ux = unnormalize(b.reshape(b.narrow(grid, 3, 0, 1), {N, 1, P}), W);
  const TensorId uy = unnormalize(b.reshape(b.narrow(grid, 3, 1, 2), {N, 1, P}), H);
  // Bicubic pads each of its taps (as PyTorch's grid_sample); the others the coordinate.
  const TensorId ix = mode == "bicubic" ? ux : padded(ux, W);
  const TensorId iy = mode == "bicubic" ? uy : padded(uy, H);
  const TensorId flat = b.reshape(x, {N, C, H * W});
  // X at integral coordinates (cx, cy) ([N, 1, P], as floats) times weight w; 0 outside.
  auto tap = [&](TensorId cx, TensorId cy, TensorId w) {
    TensorId inside = b.binary(BK::kLogicalAnd,
                               b.binary(BK::kLogicalAnd, b.scalar(BK::kGe, cx, 0.0),
                                        b.scalar(BK::kLe, cx, static_cast<double>(W - 1))),
                               b.binary(BK::kLogicalAnd, b.scalar(BK::kGe, cy, 0.0),
                                        b.scalar(BK::kLe, cy, static_cast<double>(H - 1))));
    TensorId xi = b.cast(b.clamp(cx, ir::Scalar(0.0), ir::Scalar(double(W - 1))), kI64);
    TensorId yi = b.cast(b.clamp(cy, ir::Scalar(0.0), ir::Scalar(double(H - 1))), kI64);
    TensorId lin = b.binary(BK::kAdd, b.scalar(BK::kMul, yi, W), xi);
    TensorId v = b.gather(flat, 2, b.expand(lin, {N, C, P}));
    TensorId weight = b.where(inside, w, b.full({N, 1, P}, cd, 0.0));
    return b.binary(BK::kMul, v, weight);
  };
  TensorId out;
  if (mode == "bicubic") {
    // Taps floor(c) - 1 .. floor(c) + 2 with the cubic convolution weights (A = -0.75) of the
    // fraction t: w0 = k2(t + 1), w1 = k1(t), w2 = k1(1 - t), w3 = k2(2 - t), where
    // k1(s) = ((A + 2) s - (A + 3)) s^2 + 1 and k2(s) = ((A s - 5A) s + 8A) s - 4A.
    constexpr double A = -0.75;
    auto k1 = [&](TensorId s) {
      TensorId p = b.scalar(BK::kSub, b.scalar(BK::kMul, s, A + 2), A + 3);
      return b.scalar(BK::kAdd, b.binary(BK::kMul, b.binary(BK::kMul, p, s), s), 1.0);
    };
    auto k2 = [&](TensorId s) {
      TensorId p = b.scalar(BK::kSub, b.scalar(BK::kMul, s, A), 5 * A);
      p = b.scalar(BK::kAdd, b.binary(BK::kMul, p, s), 8 * A);
      return b.scalar(BK::kSub, b.binary(BK::kMul, p, s), 4 * A);
    };
    auto weights = [&](TensorId t) {
      return std::vector<TensorId>{k2(b.scalar(BK::kAdd, t, 1.0)), k1(t),
                                   k1(b.scalar(BK::kSub, t, 1.0, true)),
                                   k2(b.scalar(BK::kSub, t, 2.0, true))};
    };
    const TensorId fx = b.unary(ir::UnaryKind::kFloor, ix), fy = b.unary(ir::UnaryKind::kFloor, iy);
    const std::vector<TensorId> wx = weights(b.binary(BK::kSub, ix, fx));
    const std::vector<TensorId> wy = weights(b.binary(BK::kSub, iy, fy));
    std::vector<TensorId> cx, cy;
    for (int k = 0; k < 4; ++k) {
      cx.push_back(padded(b.scalar(BK::kAdd, fx, static_cast<double>(k - 1)), W));
      cy.push_back(padded(b.scalar(BK::kAdd, fy, static_cast<double>(k - 1)), H));
    }
    out = 0;
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        const TensorId t = tap(cx[i], cy[j], b.binary(BK::kMul, wx[i], wy[j]));
        out = out == 0 ? t : b.binary(BK::kAdd, out, t);
      }
    }
  } else if (mode == "nearest") {
    out = tap(b.unary(ir::UnaryKind::kRound, ix), b.unary(ir::UnaryKind::kRound, iy),
              b.full({N, 1, P}, cd, 1.0));
  } else {
    const TensorId x0 = b.unary(ir::UnaryKind::kFloor, ix), y0 = b.unary(ir::UnaryKind::kFloor, iy);
    const TensorId x1 = b.scalar(BK::kAdd, x0, 1.0), y1 = b.scalar(BK::kAdd, y0, 1.0);
    const TensorId wx1 = b.binary(BK::kSub, ix, x0), wy1 = b.binary(BK::kSub, iy, y0);
    const TensorId wx0 = b.scalar(BK::kSub, wx1, 1.0, true),
                   wy0 = b.scalar(BK::kSub, wy1, 1.0, true);
    out = tap(x0, y0, b.binary(BK::kMul, wx0, wy0));
    out = b.binary(BK::kAdd, out, tap(x1, y0, b.binary(BK::kMul, wx1, wy0)));
    out = b.binary(BK::kAdd, out, tap(x0, y1, b.binary(BK::kMul, wx0, wy1)));
    out = b.binary(BK::kAdd, out, tap(x1, y1, b.binary(BK::kMul, wx1, wy1)));
  }
  n.set_output(0, b.cast(b.reshape(out, {N, C, gs[1], gs[2]}), out_dtype));
}

}  // namespace

void register_resize_ops() {
  op_table()["Resize"] = resize_op;
  op_table()["Upsample"] = resize_op;
  op_table()["GridSample"] = grid_sample_op;
}

}  // namespace tw::onnx_import
