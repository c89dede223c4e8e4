// Einsum and TopK, composed of existing IR ops. Einsum: each operand loses its repeated labels
// (a diagonal: the two dims flattened and sliced by step size + 1) and the labels no one else
// needs (summed), then operands are contracted pairwise, left to right, as one batched MatMul
// each (permuted to [batch..., free, contracted] x [batch..., contracted, free]); the result is
// summed and permuted to the output's labels. TopK: k rounds of ArgMax (ArgMin for smallest)
// over the axis, each masking the position it took, so values come sorted and equal values in
// index order, as ONNX defines them.
#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "onnx/importer.h"

namespace tw::onnx_import {

namespace {

using BK = ir::BinaryKind;
using RK = ir::ReduceKind;

// An operand under contraction: a tensor and one label per dim. Labels are chars; an ellipsis's
// dims get labels from kEllipsisBase, numbered from the right so that they align as broadcasting
// aligns them.
struct Term {
  TensorId id = 0;
  std::string labels;
};
constexpr char kEllipsisBase = 'A' - 32;  // below every letter: '!' onwards

std::string parse_term(Node& n, const std::string& s, int64_t rank, int64_t* ell_dims) {
  std::string out;
  const size_t dots = s.find("...");
  const std::string before = dots == std::string::npos ? s : s.substr(0, dots);
  const std::string after = dots == std::string::npos ? "" : s.substr(dots + 3);
  for (const std::string* part : {&before, &after}) {
    for (char c : *part) {
      if (!std::isalpha(static_cast<unsigned char>(c)))
        n.fail("equation term '" + s + "' has character '" + std::string(1, c) + "'");
    }
  }
  const int64_t named = static_cast<int64_t>(before.size() + after.size());
  if (dots == std::string::npos) {
    if (named != rank && rank >= 0)
      n.fail("equation term '" + s + "' has " + std::to_string(named) + " labels for rank " +
             std::to_string(rank));
    *ell_dims = 0;
    return s;
  }
  const int64_t e = rank >= 0 ? rank - named : *ell_dims;
  if (e < 0) n.fail("equation term '" + s + "' has more labels than the operand's rank");
  *ell_dims = e;
  out = before;
  for (int64_t i = 0; i < e; ++i) out += static_cast<char>(kEllipsisBase + (e - 1 - i));
  return out + after;
}

void einsum_op(Node& n) {
  n.check_attrs({"equation"});
  Builder& b = n.b;
  std::string eq;
  for (char c : n.attr_string("equation", "")) {
    if (c != ' ') eq += c;
  }
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    parts.push_back(lhs.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (parts.size() != n.num_inputs())
    n.fail("equation '" + eq + "' has " + std::to_string(parts.size()) + " operands but the node " +
           std::to_string(n.num_inputs()) + " inputs");
  std::vector<Term> terms;
  std::map<char, int64_t> sizes;
  int64_t max_ell = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    Term t;
    t.id = computable(n, i);
    const Shape s = b.meta(t.id).shape;
    int64_t e = 0;
    t.labels = parse_term(n, parts[i], static_cast<int64_t>(s.size()), &e);
    max_ell = std::max(max_ell, e);
    for (size_t d = 0; d < s.size(); ++d) {
      const char l = t.labels[d];
      auto it = sizes.find(l);
      if (it == sizes.end() || it->second == 1) {
        sizes[l] = s[d];
      } else if (s[d] != 1 && s[d] != it->second) {
        n.fail("label '" + std::string(1, l) + "' has sizes " + std::to_string(it->second) +
               " and " + std::to_string(s[d]));
      }
    }
    terms.push_back(t);
  }
  std::string out_labels;
  if (arrow == std::string::npos) {  // implicit: ellipsis dims, then labels used once, sorted
    for (int64_t i = max_ell - 1; i >= 0; --i) out_labels += static_cast<char>(kEllipsisBase + i);
    std::map<char, int> count;
    for (const Term& t : terms) {
      for (char c : t.labels) {
        if (std::isalpha(static_cast<unsigned char>(c))) ++count[c];
      }
    }
    for (const auto& [c, k] : count) {
      if (k == 1) out_labels += c;
    }
  } else {
    int64_t e = max_ell;
    out_labels = parse_term(n, eq.substr(arrow + 2), -1, &e);
  }
  for (char c : out_labels) {
    if (!sizes.count(c)) n.fail("output label '" + std::string(1, c) + "' is in no operand");
  }

  // Labels needed outside term i (by the output or by another operand).
  auto needed_elsewhere = [&](size_t skip, char c) {
    if (out_labels.find(c) != std::string::npos) return true;
    for (size_t j = 0; j < terms.size(); ++j) {
      if (j != skip && terms[j].labels.find(c) != std::string::npos) return true;
    }
    return false;
  };
  // Diagonals, then sums of labels only this operand has.
  auto simplify = [&](Term& t, size_t index) {
    for (;;) {
      size_t i = 0, j = std::string::npos;
      for (; i < t.labels.size() && j == std::string::npos; ++i) {
        j = t.labels.find(t.labels[i], i + 1);
      }
      if (j == std::string::npos) break;
      --i;
      // Move dims i and j last, flatten them, keep every (size + 1)-th element.
      std::vector<int64_t> perm;
      std::string labels;
      for (size_t d = 0; d < t.labels.size(); ++d) {
        if (d != i && d != j) {
          perm.push_back(static_cast<int64_t>(d));
          labels += t.labels[d];
        }
      }
      perm.push_back(static_cast<int64_t>(i));
      perm.push_back(static_cast<int64_t>(j));
      TensorId x = b.permute(t.id, perm);
      Shape s = b.meta(x).shape;
      const int64_t m = s.back();
      if (s[s.size() - 2] != m) n.fail("a repeated label needs equal dims");
      s.pop_back();
      s.back() = m * m;
      x = b.reshape(x, s);
      std::vector<int64_t> starts(s.size(), 0), ends(s.begin(), s.end()), steps(s.size(), 1);
      steps.back() = m + 1;
      t.id = b.slice(x, starts, ends, steps);
      t.labels = labels + t.labels[i];
    }
    std::vector<int64_t> dims;
    std::string kept;
    for (size_t d = 0; d < t.labels.size(); ++d) {
      if (needed_elsewhere(index, t.labels[d])) {
        kept += t.labels[d];
      } else {
        dims.push_back(static_cast<int64_t>(d));
      }
    }
    if (!dims.empty()) {
      t.id = b.reduce(RK::kSum, t.id, dims, false);
      t.labels = kept;
    }
  };
  for (size_t i = 0; i < terms.size(); ++i) simplify(terms[i], i);

  Term acc = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) {
    Term& o = terms[k];
    // Needed after this contraction: by the output or by an operand after k.
    auto later = [&](char c) {
      if (out_labels.find(c) != std::string::npos) return true;
      for (size_t j = k + 1; j < terms.size(); ++j) {
        if (terms[j].labels.find(c) != std::string::npos) return true;
      }
      return false;
    };
    std::string batch, contract, a_only, b_only;
    for (char c : acc.labels) {
      if (o.labels.find(c) != std::string::npos) {
        (later(c) ? batch : contract) += c;
      } else {
        a_only += c;
      }
    }
    for (char c : o.labels) {
      if (acc.labels.find(c) == std::string::npos) b_only += c;
    }
    auto order = [&](const Term& t, const std::string& want) {
      std::vector<int64_t> perm;
      for (char c : want) perm.push_back(static_cast<int64_t>(t.labels.find(c)));
      return b.permute(t.id, perm);
    };
    auto dims_of = [&](const Term& t, const std::string& ls) {
      Shape s;
      for (char c : ls) s.push_back(b.meta(t.id).shape[t.labels.find(c)]);
      return s;
    };
    auto prod = [&](const Shape& ds) {
      int64_t p = 1;
      for (int64_t v : ds) p *= v;
      return p;
    };
    for (char c : contract) {
      const int64_t sa = dims_of(acc, std::string(1, c))[0], so = dims_of(o, std::string(1, c))[0];
      if (sa != so) n.fail("label '" + std::string(1, c) + "' is contracted over unequal dims");
    }
    TensorId a = order(acc, batch + a_only + contract);
    TensorId bb = order(o, batch + contract + b_only);
    Shape as = dims_of(acc, batch), bs = dims_of(o, batch);
    const Shape a_free = dims_of(acc, a_only), b_free = dims_of(o, b_only);
    as.push_back(prod(a_free));
    as.push_back(prod(dims_of(acc, contract)));
    bs.push_back(prod(dims_of(o, contract)));
    bs.push_back(prod(b_free));
    TensorId m = b.matmul(b.reshape(a, as), b.reshape(bb, bs));
    Shape rs(b.meta(m).shape.begin(), b.meta(m).shape.end() - 2);
    rs.insert(rs.end(), a_free.begin(), a_free.end());
    rs.insert(rs.end(), b_free.begin(), b_free.end());
    acc.id = b.reshape(m, rs);
    acc.labels = batch + a_only + b_only;
  }
  // The single remaining operand: sum what the output lacks, then order.
  std::vector<int64_t> dims;
  std::string kept;
  for (size_t d = 0; d < acc.labels.size(); ++d) {
    if (out_labels.find(acc.labels[d]) == std::string::npos) {
      dims.push_back(static_cast<int64_t>(d));
    } else {
      kept += acc.labels[d];
    }
  }
  TensorId x = acc.id;
  if (!dims.empty()) x = b.reduce(RK::kSum, x, dims, false);
  std::vector<int64_t> perm;
  for (char c : out_labels) perm.push_back(static_cast<int64_t>(kept.find(c)));
  x = b.permute(x, perm);
  const DType d = n.input_meta(0).dtype;
  n.set_output(0, b.cast(x, d));
}

// TopK over `axis`: k rounds, each an ArgMax (ArgMin) of a key in which the positions already
// taken are pushed past every value (floats: keys in f64, where taken is -inf / +inf and an input
// infinity stays finite; integers: keys in i64, taken the i64 extreme).
void top_k_op(Node& n) {
  constexpr int64_t kMaxK = 4096;
  n.check_attrs({"axis", "k", "largest", "sorted"});
  Builder& b = n.b;
  const TensorId x = n.input(0);
  const Shape s = b.meta(x).shape;
  const DType d = b.meta(x).dtype;
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t axis = n.axis(n.attr_int("axis", -1), rank);
  const int64_t k = n.opset < 10 ? n.attr_int("k", 0) : n.ints_input(1, "K").at(0);
  const bool largest = n.attr_int("largest", 1) != 0;
  if (k < 0 || k > s[axis])
    n.fail("K=" + std::to_string(k) + " is outside [0, " + std::to_string(s[axis]) + "]");
  if (k > kMaxK)
    n.fail("K=" + std::to_string(k) + " is unrolled one ArgMax per element: at most " +
           std::to_string(kMaxK));
  if (d == kBool) n.fail("bool input is not supported");
  Shape pos_shape(s.size(), 1);
  pos_shape[axis] = s[axis];
  const TensorId positions = b.reshape(b.arange(s[axis]), pos_shape);
  TensorId key;
  ir::Scalar taken;
  if (is_float(d)) {
    key = b.cast(x, kF64);
    const double big = std::numeric_limits<double>::max();
    key = b.clamp(key, ir::Scalar(-big), ir::Scalar(big));
    taken = ir::Scalar(largest ? -std::numeric_limits<double>::infinity()
                               : std::numeric_limits<double>::infinity());
  } else {
    key = b.cast(x, kI64);
    taken = ir::Scalar(largest ? std::numeric_limits<int64_t>::min()
                               : std::numeric_limits<int64_t>::max());
  }
  std::vector<TensorId> vals, idxs;
  for (int64_t j = 0; j < k; ++j) {
    const TensorId at = b.reduce(largest ? RK::kArgmax : RK::kArgmin, key, {axis}, true);
    idxs.push_back(at);
    vals.push_back(b.gather(x, axis, at));
    if (j + 1 < k) {
      const TensorId hit = b.binary(BK::kEq, positions, at);
      const TensorId fill = b.full(s, b.meta(key).dtype, taken);
      key = b.where(hit, fill, key);
    }
  }
  Shape os = s;
  os[axis] = k;
  auto join = [&](const std::vector<TensorId>& v, DType dt) {
    return v.empty() ? b.full(os, dt, int64_t{0}) : v.size() == 1 ? v[0] : b.cat(v, axis);
  };
  const TensorId values = join(vals, d), indices = join(idxs, kI64);
  n.set_output(0, values);
  if (n.wants_output(1)) n.set_output(1, indices);
}

}  // namespace

void register_linalg_ops() {
  op_table()["Einsum"] = einsum_op;
  op_table()["TopK"] = top_k_op;
}

}  // namespace tw::onnx_import
