// The recurrent ONNX ops (RNN, GRU, LSTM), unrolled over the sequence at load: the sequence length
// is fixed by the input's shape, so each step is a MatMul of the hidden state with R^T plus the
// input's projection (one MatMul for every step), and the gates are elementwise ops. Directions
// forward, reverse and bidirectional; initial states; sequence_lens (a step at or past a batch
// entry's length keeps its state and writes zeros to Y, which also gives the reverse direction
// its per-sequence start); peepholes, clip, input_forget, linear_before_reset; the activations of
// the ONNX spec with their alpha/beta.
#include <cctype>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace tw::onnx_import {

namespace {

using BK = ir::BinaryKind;
using UK = ir::UnaryKind;

enum class Cell { kRnn, kGru, kLstm };

struct Activation {
  std::string name;
  double alpha = 0, beta = 0;
};

TensorId activate(Node& n, const Activation& a, TensorId x) {
  Builder& b = n.b;
  const std::string& f = a.name;
  if (f == "Sigmoid") return b.unary(UK::kSigmoid, x);
  if (f == "Tanh") return b.unary(UK::kTanh, x);
  if (f == "Relu") return b.unary(UK::kRelu, x);
  if (f == "Affine") return b.scalar(BK::kAdd, b.scalar(BK::kMul, x, a.alpha), a.beta);
  if (f == "LeakyRelu") {
    return b.where(b.scalar(BK::kGe, x, 0.0), x, b.scalar(BK::kMul, x, a.alpha));
  }
  if (f == "ThresholdedRelu") {
    return b.where(b.scalar(BK::kGt, x, a.alpha), x, b.full(b.meta(x).shape, b.meta(x).dtype, 0.0));
  }
  if (f == "ScaledTanh") {
    return b.scalar(BK::kMul, b.unary(UK::kTanh, b.scalar(BK::kMul, x, a.beta)), a.alpha);
  }
  if (f == "HardSigmoid") {
    return b.clamp(b.scalar(BK::kAdd, b.scalar(BK::kMul, x, a.alpha), a.beta), ir::Scalar(0.0),
                   ir::Scalar(1.0));
  }
  if (f == "Elu") {
    TensorId neg = b.scalar(BK::kMul, b.scalar(BK::kSub, b.unary(UK::kExp, x), 1.0), a.alpha);
    return b.where(b.scalar(BK::kGe, x, 0.0), x, neg);
  }
  if (f == "Softsign") {
    return b.binary(BK::kDiv, x, b.scalar(BK::kAdd, b.unary(UK::kAbs, x), 1.0));
  }
  if (f == "Softplus") return b.unary(UK::kLog1p, b.unary(UK::kExp, x));
  n.fail("activation '" + f + "' is not supported");
}

// The activations of one direction: `per_dir` of them (RNN 1, GRU 2, LSTM 3), from attribute
// activations (with activation_alpha/beta where the function takes them) or the defaults.
std::vector<Activation> activations(Node& n, int64_t dirs, int64_t per_dir,
                                    const std::vector<std::string>& dflt) {
  std::vector<std::string> names;
  if (const auto* a = n.attr("activations")) {
    for (const auto& s : a->strings()) names.push_back(s);
    if (static_cast<int64_t>(names.size()) != dirs * per_dir)
      n.fail("attribute activations has " + std::to_string(names.size()) + " entries, want " +
             std::to_string(dirs * per_dir));
  } else {
    for (int64_t d = 0; d < dirs; ++d) names.insert(names.end(), dflt.begin(), dflt.end());
  }
  const std::vector<float> alphas = n.attr_floats("activation_alpha");
  const std::vector<float> betas = n.attr_floats("activation_beta");
  std::vector<Activation> out;
  size_t ai = 0, bi = 0;
  for (const std::string& name : names) {
    std::string canon = name;
    // ONNX names are case-insensitive in practice (exporters write "tanh", "sigmoid").
    for (const char* known : {"Sigmoid", "Tanh", "Relu", "Affine", "LeakyRelu", "ThresholdedRelu",
                              "ScaledTanh", "HardSigmoid", "Elu", "Softsign", "Softplus"}) {
      std::string a = known, b2 = name;
      for (auto& c : a) c = static_cast<char>(std::tolower(c));
      for (auto& c : b2) c = static_cast<char>(std::tolower(c));
      if (a == b2) canon = known;
    }
    Activation act{canon};
    // Defaults as the spec's: LeakyRelu 0.01, ThresholdedRelu 1, HardSigmoid 0.2/0.5, Elu 1.
    const bool takes_alpha = canon == "Affine" || canon == "LeakyRelu" ||
                             canon == "ThresholdedRelu" || canon == "ScaledTanh" ||
                             canon == "HardSigmoid" || canon == "Elu";
    const bool takes_beta = canon == "Affine" || canon == "ScaledTanh" || canon == "HardSigmoid";
    act.alpha = canon == "LeakyRelu" ? 0.01 : canon == "HardSigmoid" ? 0.2 : 1.0;
    act.beta = canon == "HardSigmoid" ? 0.5 : 0.0;
    if (takes_alpha && ai < alphas.size()) act.alpha = alphas[ai++];
    if (takes_beta && bi < betas.size()) act.beta = betas[bi++];
    out.push_back(act);
  }
  return out;
}

// A [dirs, ...] input's slice for direction d, without the leading dim.
TensorId dir_slice(Builder& b, TensorId x, int64_t d) {
  Shape s = b.meta(x).shape;
  s.erase(s.begin());
  return b.reshape(b.narrow(x, 0, d, d + 1), s);
}

void recurrent_op(Node& n, Cell cell) {
  const int64_t gates = cell == Cell::kLstm ? 4 : cell == Cell::kGru ? 3 : 1;
  if (cell == Cell::kLstm) {
    n.check_attrs({"activation_alpha", "activation_beta", "activations", "clip", "direction",
                   "hidden_size", "input_forget", "layout"});
  } else if (cell == Cell::kGru) {
    n.check_attrs({"activation_alpha", "activation_beta", "activations", "clip", "direction",
                   "hidden_size", "layout", "linear_before_reset"});
  } else {
    n.check_attrs({"activation_alpha", "activation_beta", "activations", "clip", "direction",
                   "hidden_size", "layout"});
  }
  Builder& b = n.b;
  const std::string direction = n.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
    n.fail("attribute direction='" + direction + "' is not supported");
  const int64_t dirs = direction == "bidirectional" ? 2 : 1;
  const int64_t layout = n.attr_int("layout", 0);
  if (layout != 0 && layout != 1)
    n.fail("attribute layout=" + std::to_string(layout) + " is not supported");
  const bool has_clip = n.has_attr("clip");
  const double clip = n.attr_float("clip", 0);
  const bool input_forget = n.attr_int("input_forget", 0) != 0;
  const bool linear_before_reset = n.attr_int("linear_before_reset", 0) != 0;

  TensorId x = n.input(0);
  const DType out_dtype = b.meta(x).dtype;
  if (!is_float(out_dtype)) n.fail("input X must be floating point");
  const DType cd = storage_only(out_dtype) ? kF32 : out_dtype;
  auto comp = [&](size_t i) { return b.cast(n.input(i), cd); };
  x = b.cast(x, cd);
  if (b.meta(x).shape.size() != 3) n.fail("input X must have rank 3");
  if (layout == 1) x = b.permute(x, {1, 0, 2});  // [batch, seq, in] -> [seq, batch, in]
  const int64_t seq = b.meta(x).shape[0], batch = b.meta(x).shape[1], in = b.meta(x).shape[2];
  const TensorId w = comp(1), r = comp(2);
  const Shape ws = b.meta(w).shape;
  if (ws.size() != 3 || ws[0] != dirs || ws[2] != in || ws[1] % gates != 0)
    n.fail("input W has shape " + shape_str(ws) + ", want [" + std::to_string(dirs) + ", " +
           std::to_string(gates) + " * hidden_size, " + std::to_string(in) + "]");
  const int64_t H = ws[1] / gates;
  if (n.has_attr("hidden_size") && n.attr_int("hidden_size", 0) != H)
    n.fail("attribute hidden_size=" + std::to_string(n.attr_int("hidden_size", 0)) +
           " but W gives " + std::to_string(H));
  if (b.meta(r).shape != Shape{dirs, gates * H, H})
    n.fail("input R has shape " + shape_str(b.meta(r).shape) + ", want " +
           shape_str({dirs, gates * H, H}));
  const std::vector<Activation> acts =
      activations(n, dirs,
                  gates == 1   ? 1
                  : gates == 3 ? 2
                               : 3,
                  cell == Cell::kRnn   ? std::vector<std::string>{"Tanh"}
                  : cell == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                       : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"});
  auto state_input = [&](size_t i, const char* what) -> TensorId {
    if (!n.has_input(i)) return 0;
    TensorId s = comp(i);
    if (layout == 1) s = b.permute(s, {1, 0, 2});  // [batch, dirs, H] -> [dirs, batch, H]
    if (b.meta(s).shape != Shape{dirs, batch, H})
      n.fail(std::string("input ") + what + " has shape " + shape_str(b.meta(s).shape) + ", want " +
             shape_str({dirs, batch, H}));
    return s;
  };
  const TensorId h0 = state_input(5, "initial_h");
  const TensorId c0 = cell == Cell::kLstm ? state_input(6, "initial_c") : 0;
  const TensorId bias = n.has_input(3) ? comp(3) : 0;
  if (bias != 0 && b.meta(bias).shape != Shape{dirs, 2 * gates * H})
    n.fail("input B has shape " + shape_str(b.meta(bias).shape) + ", want " +
           shape_str({dirs, 2 * gates * H}));
  const TensorId peep = cell == Cell::kLstm && n.has_input(7) ? comp(7) : 0;
  if (peep != 0 && b.meta(peep).shape != Shape{dirs, 3 * H})
    n.fail("input P has shape " + shape_str(b.meta(peep).shape) + ", want " +
           shape_str({dirs, 3 * H}));
  // sequence_lens: per step a [batch, 1] mask of the entries still running (absent: all).
  TensorId lens = 0;
  if (n.has_input(4)) {
    lens = b.cast(n.input(4), kI64);
    if (b.meta(lens).shape != Shape{batch})
      n.fail("input sequence_lens has shape " + shape_str(b.meta(lens).shape) + ", want [" +
             std::to_string(batch) + "]");
    lens = b.reshape(lens, {batch, 1});
  }
  auto gate = [&](TensorId g, int64_t i) { return b.narrow(g, 1, i * H, (i + 1) * H); };
  auto clipped = [&](TensorId g) {
    return has_clip ? b.clamp(g, ir::Scalar(-clip), ir::Scalar(clip)) : g;
  };

  std::vector<TensorId> ys(dirs), yh(dirs), yc(dirs);
  for (int64_t d = 0; d < dirs; ++d) {
    const bool reverse = direction == "reverse" || d == 1;
    const Activation& f = acts[d * (gates == 1 ? 1 : gates == 3 ? 2 : 3)];
    const Activation& g = gates == 1 ? f : acts[d * (gates == 3 ? 2 : 3) + 1];
    const Activation& hact = gates == 4 ? acts[d * 3 + 2] : g;
    const TensorId wt = b.permute(dir_slice(b, w, d), {1, 0});  // [in, gates * H]
    const TensorId rt = b.permute(dir_slice(b, r, d), {1, 0});  // [H, gates * H]
    // Every step's input projection in one MatMul: [seq * batch, gates * H].
    TensorId xw = b.matmul(b.reshape(x, {seq * batch, in}), wt);
    TensorId wb = 0, rb = 0;
    if (bias != 0) {
      const TensorId bd = dir_slice(b, bias, d);
      wb = b.narrow(bd, 0, 0, gates * H);
      rb = b.narrow(bd, 0, gates * H, 2 * gates * H);
      xw = b.binary(BK::kAdd, xw, wb);
    }
    TensorId pi = 0, po = 0, pf = 0;
    if (peep != 0) {
      const TensorId pd = dir_slice(b, peep, d);
      pi = b.narrow(pd, 0, 0, H);
      po = b.narrow(pd, 0, H, 2 * H);
      pf = b.narrow(pd, 0, 2 * H, 3 * H);
    }
    TensorId h = h0 != 0 ? dir_slice(b, h0, d) : b.full({batch, H}, cd, 0.0);
    TensorId c = cell != Cell::kLstm ? 0
                 : c0 != 0           ? dir_slice(b, c0, d)
                                     : b.full({batch, H}, cd, 0.0);
    // GRU: R^T's z and r columns, and its h columns.
    const TensorId rtz = cell == Cell::kGru ? b.narrow(rt, 1, 0, 2 * H) : 0;
    const TensorId rth = cell == Cell::kGru ? b.narrow(rt, 1, 2 * H, 3 * H) : 0;
    std::vector<TensorId> steps(seq);
    for (int64_t k = 0; k < seq; ++k) {
      const int64_t t = reverse ? seq - 1 - k : k;
      const TensorId xt = b.narrow(xw, 0, t * batch, (t + 1) * batch);  // [batch, gates * H]
      TensorId hn = 0, cn = 0;
      if (cell == Cell::kRnn) {
        TensorId hr = b.matmul(h, rt);
        if (rb != 0) hr = b.binary(BK::kAdd, hr, rb);
        hn = activate(n, f, clipped(b.binary(BK::kAdd, xt, hr)));
      } else if (cell == Cell::kLstm) {
        TensorId hr = b.matmul(h, rt);
        if (rb != 0) hr = b.binary(BK::kAdd, hr, rb);
        const TensorId s = b.binary(BK::kAdd, xt, hr);  // gates i, o, f, c
        TensorId si = gate(s, 0), so = gate(s, 1), sf = gate(s, 2);
        if (pi != 0) si = b.binary(BK::kAdd, si, b.binary(BK::kMul, c, pi));
        const TensorId gi = activate(n, f, clipped(si));
        TensorId gf;
        if (input_forget) {
          gf = b.scalar(BK::kSub, gi, 1.0, /*reverse=*/true);
        } else {
          if (pf != 0) sf = b.binary(BK::kAdd, sf, b.binary(BK::kMul, c, pf));
          gf = activate(n, f, clipped(sf));
        }
        const TensorId gc = activate(n, g, clipped(gate(s, 3)));
        cn = b.binary(BK::kAdd, b.binary(BK::kMul, gf, c), b.binary(BK::kMul, gi, gc));
        if (po != 0) so = b.binary(BK::kAdd, so, b.binary(BK::kMul, cn, po));
        const TensorId go = activate(n, f, clipped(so));
        hn = b.binary(BK::kMul, go, activate(n, hact, cn));
      } else {  // GRU: gates z, r, h
        TensorId hzr = b.matmul(h, rtz);
        if (rb != 0) hzr = b.binary(BK::kAdd, hzr, b.narrow(rb, 0, 0, 2 * H));
        const TensorId zr = b.binary(BK::kAdd, b.narrow(xt, 1, 0, 2 * H), hzr);
        const TensorId z = activate(n, f, clipped(gate(zr, 0)));
        const TensorId rr = activate(n, f, clipped(gate(zr, 1)));
        const TensorId rbh = rb != 0 ? b.narrow(rb, 0, 2 * H, 3 * H) : 0;
        TensorId hh;
        if (linear_before_reset) {
          hh = b.matmul(h, rth);
          if (rbh != 0) hh = b.binary(BK::kAdd, hh, rbh);
          hh = b.binary(BK::kMul, rr, hh);
        } else {
          hh = b.matmul(b.binary(BK::kMul, rr, h), rth);
          if (rbh != 0) hh = b.binary(BK::kAdd, hh, rbh);
        }
        hh = activate(n, g, clipped(b.binary(BK::kAdd, gate(xt, 2), hh)));
        // h' = (1 - z) * hh + z * h
        hn = b.binary(BK::kAdd, b.binary(BK::kMul, b.scalar(BK::kSub, z, 1.0, true), hh),
                      b.binary(BK::kMul, z, h));
      }
      TensorId y = hn;
      if (lens != 0) {
        const TensorId running = b.scalar(BK::kGt, lens, t);  // [batch, 1]
        y = b.where(running, hn, b.full({batch, H}, cd, 0.0));
        hn = b.where(running, hn, h);
        if (cn != 0) cn = b.where(running, cn, c);
      }
      h = hn;
      if (cn != 0) c = cn;
      steps[t] = b.reshape(y, {1, 1, batch, H});
    }
    ys[d] = seq == 1 ? steps[0] : b.cat(steps, 0);  // [seq, 1, batch, H]
    yh[d] = b.reshape(h, {1, batch, H});
    if (cell == Cell::kLstm) yc[d] = b.reshape(c, {1, batch, H});
  }
  auto join = [&](const std::vector<TensorId>& v, int64_t dim) {
    return v.size() == 1 ? v[0] : b.cat(v, dim);
  };
  TensorId y = join(ys, 1);    // [seq, dirs, batch, H]
  TensorId y_h = join(yh, 0);  // [dirs, batch, H]
  TensorId y_c = cell == Cell::kLstm ? join(yc, 0) : 0;
  if (layout == 1) {
    y = b.permute(y, {2, 0, 1, 3});  // [batch, seq, dirs, H]
    y_h = b.permute(y_h, {1, 0, 2});
    if (y_c != 0) y_c = b.permute(y_c, {1, 0, 2});
  }
  if (n.wants_output(0)) n.set_output(0, b.cast(y, out_dtype));
  if (n.wants_output(1)) n.set_output(1, b.cast(y_h, out_dtype));
  if (cell == Cell::kLstm && n.wants_output(2)) n.set_output(2, b.cast(y_c, out_dtype));
}

}  // namespace

void register_rnn_ops() {
  op_table()["RNN"] = [](Node& n) { recurrent_op(n, Cell::kRnn); };
  op_table()["GRU"] = [](Node& n) { recurrent_op(n, Cell::kGru); };
  op_table()["LSTM"] = [](Node& n) { recurrent_op(n, Cell::kLstm); };
}

}  // namespace tw::onnx_import
