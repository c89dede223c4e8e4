// Elementwise ONNX ops: unary math and activations, binary arithmetic, comparisons and logic,
// the variadic Sum/Mean/Min/Max, Where, Clip, Cast. ONNX broadcasting is numpy's, as Binary's.
// float16/bfloat16 are storage-only in tensorwire: they compute through f32 and are cast back.
#include <cmath>
#include <limits>

#include "onnx/importer.h"

namespace tw::onnx_import {

namespace {

using UK = ir::UnaryKind;
using BK = ir::BinaryKind;

// The operands of a binary op (legacy broadcasting before opset 7 applied to B), computable.
std::pair<TensorId, TensorId> operands(Node& n) {
  const TensorId a = computable(n, 0);
  TensorId c = n.input_broadcast(1, 0);
  if (storage_only(n.b.meta(c).dtype)) c = n.b.cast(c, kF32);
  return {a, c};
}

// A scalar of tensor dtype d's kind (an integer scalar keeps integer arithmetic).
ir::Scalar scalar_for(DType d, double v) {
  if (is_float(d)) return ir::Scalar(v);
  return ir::Scalar(static_cast<int64_t>(v));
}

void unary_op(const char* name, UK kind) {
  op_table()[name] = [kind](Node& n) {
    n.check_attrs({});
    const DType d = n.input_meta(0).dtype;
    n.set_output(0, n.b.cast(n.b.unary(kind, computable(n, 0)), d));
  };
}

// An op computed by `fn` from input 0 (in f32 for storage-only dtypes), cast back to its dtype.
void composed_unary(const char* name, std::initializer_list<const char*> attrs,
                    std::function<TensorId(Node&, TensorId)> fn) {
  std::vector<const char*> known(attrs);
  op_table()[name] = [fn, known](Node& n) {
    for (const auto& a : n.proto.attribute()) {
      bool ok = false;
      for (const char* k : known) ok = ok || a.name() == k;
      if (!ok) n.fail("attribute '" + a.name() + "' is not supported");
    }
    const DType d = n.input_meta(0).dtype;
    n.set_output(0, n.b.cast(fn(n, computable(n, 0)), d));
  };
}

void binary_op(const char* name, BK kind, bool keep_dtype) {
  op_table()[name] = [kind, keep_dtype](Node& n) {
    const auto [a, c] = operands(n);
    n.check_attrs({});
    const DType d = n.input_meta(0).dtype;
    const TensorId out = n.b.binary(kind, a, c);
    n.set_output(0, keep_dtype ? n.b.cast(out, d) : out);
  };
}

// Sum, Mean, Min, Max over 1 or more inputs, left to right.
void variadic_op(const char* name, BK kind, bool mean) {
  op_table()[name] = [kind, mean](Node& n) {
    n.check_attrs({});
    if (n.num_inputs() == 0) n.fail("needs at least one input");
    const DType d = n.input_meta(0).dtype;
    TensorId acc = computable(n, 0);
    for (size_t i = 1; i < n.num_inputs(); ++i) acc = n.b.binary(kind, acc, computable(n, i));
    if (mean) {
      acc = n.b.scalar(BK::kDiv, acc, static_cast<double>(n.num_inputs()));
    } else if (n.num_inputs() == 1) {
      acc = n.b.copy(acc);
    }
    n.set_output(0, n.b.cast(acc, d));
  };
}

TensorId where_neg(Builder& b, TensorId x, TensorId if_neg, TensorId otherwise) {
  const DType d = b.meta(x).dtype;
  return b.where(b.scalar(BK::kLt, x, scalar_for(d, 0)), if_neg, otherwise);
}

TensorId zeros_like(Builder& b, TensorId x) { return b.full({}, b.meta(x).dtype, int64_t{0}); }

}  // namespace

void register_elementwise_ops() {
  unary_op("Abs", UK::kAbs);
  unary_op("Neg", UK::kNeg);
  unary_op("Exp", UK::kExp);
  unary_op("Log", UK::kLog);
  unary_op("Sqrt", UK::kSqrt);
  unary_op("Reciprocal", UK::kRecip);
  unary_op("Sin", UK::kSin);
  unary_op("Cos", UK::kCos);
  unary_op("Tanh", UK::kTanh);
  unary_op("Sigmoid", UK::kSigmoid);
  unary_op("Relu", UK::kRelu);
  unary_op("Erf", UK::kErf);
  unary_op("Floor", UK::kFloor);
  unary_op("Ceil", UK::kCeil);
  unary_op("Round", UK::kRound);  // half to even, as ONNX
  unary_op("Sign", UK::kSign);
  op_table()["Not"] = [](Node& n) { n.set_output(0, n.b.unary(UK::kLogicalNot, n.input(0))); };

  composed_unary("Tan", {}, [](Node& n, TensorId x) {
    return n.b.binary(BK::kDiv, n.b.unary(UK::kSin, x), n.b.unary(UK::kCos, x));
  });
  composed_unary("Sinh", {}, [](Node& n, TensorId x) {
    Builder& b = n.b;
    TensorId e = b.unary(UK::kExp, x), em = b.unary(UK::kExp, b.unary(UK::kNeg, x));
    return b.scalar(BK::kMul, b.binary(BK::kSub, e, em), 0.5);
  });
  composed_unary("Cosh", {}, [](Node& n, TensorId x) {
    Builder& b = n.b;
    TensorId e = b.unary(UK::kExp, x), em = b.unary(UK::kExp, b.unary(UK::kNeg, x));
    return b.scalar(BK::kMul, b.binary(BK::kAdd, e, em), 0.5);
  });
  composed_unary("Softplus", {}, [](Node& n, TensorId x) {  // log(exp(x) + 1)
    return n.b.unary(UK::kLog, n.b.scalar(BK::kAdd, n.b.unary(UK::kExp, x), 1.0));
  });
  composed_unary("Softsign", {}, [](Node& n, TensorId x) {  // x / (1 + |x|)
    return n.b.binary(BK::kDiv, x, n.b.scalar(BK::kAdd, n.b.unary(UK::kAbs, x), 1.0));
  });
  composed_unary("Elu", {"alpha"}, [](Node& n, TensorId x) {
    const double alpha = n.attr_float("alpha", 1.0);
    Builder& b = n.b;
    TensorId neg = b.scalar(BK::kMul, b.scalar(BK::kSub, b.unary(UK::kExp, x), 1.0), alpha);
    return where_neg(b, x, neg, x);
  });
  composed_unary("Selu", {"alpha", "gamma"}, [](Node& n, TensorId x) {
    const double alpha = n.attr_float("alpha", 1.67326319217681884765625);
    const double gamma = n.attr_float("gamma", 1.05070102214813232421875);
    Builder& b = n.b;
    TensorId neg = b.scalar(BK::kSub, b.scalar(BK::kMul, b.unary(UK::kExp, x), alpha), alpha);
    TensorId le0 = b.scalar(BK::kLe, x, 0.0);
    return b.scalar(BK::kMul, b.where(le0, neg, x), gamma);
  });
  composed_unary("Celu", {"alpha"}, [](Node& n, TensorId x) {
    // max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    const double alpha = n.attr_float("alpha", 1.0);
    Builder& b = n.b;
    TensorId e = b.scalar(
        BK::kMul, b.scalar(BK::kSub, b.unary(UK::kExp, b.scalar(BK::kDiv, x, alpha)), 1.0), alpha);
    return b.binary(BK::kAdd, b.clamp(x, ir::Scalar(0.0), std::nullopt),
                    b.clamp(e, std::nullopt, ir::Scalar(0.0)));
  });
  composed_unary("HardSigmoid", {"alpha", "beta"}, [](Node& n, TensorId x) {
    const double alpha = n.attr_float("alpha", 0.2), beta = n.attr_float("beta", 0.5);
    Builder& b = n.b;
    return b.clamp(b.scalar(BK::kAdd, b.scalar(BK::kMul, x, alpha), beta), ir::Scalar(0.0),
                   ir::Scalar(1.0));
  });
  composed_unary("HardSwish", {}, [](Node& n, TensorId x) {  // x * max(0, min(1, x / 6 + 0.5))
    Builder& b = n.b;
    TensorId hs = b.clamp(b.scalar(BK::kAdd, b.scalar(BK::kMul, x, 1.0 / 6.0), 0.5),
                          ir::Scalar(0.0), ir::Scalar(1.0));
    return b.binary(BK::kMul, x, hs);
  });
  composed_unary("LeakyRelu", {"alpha"}, [](Node& n, TensorId x) {
    const double alpha = n.attr_float("alpha", 0.01);
    return where_neg(n.b, x, n.b.scalar(BK::kMul, x, alpha), x);
  });
  composed_unary("ThresholdedRelu", {"alpha"}, [](Node& n, TensorId x) {
    const double alpha = n.attr_float("alpha", 1.0);
    return n.b.where(n.b.scalar(BK::kGt, x, alpha), x, zeros_like(n.b, x));
  });
  composed_unary("Shrink", {"bias", "lambd"}, [](Node& n, TensorId x) {
    const double bias = n.attr_float("bias", 0.0), lambd = n.attr_float("lambd", 0.5);
    Builder& b = n.b;
    const DType d = b.meta(x).dtype;
    TensorId lo = b.scalar(BK::kLt, x, scalar_for(d, -lambd));
    TensorId hi = b.scalar(BK::kGt, x, scalar_for(d, lambd));
    TensorId upper = b.where(hi, b.scalar(BK::kSub, x, scalar_for(d, bias)), zeros_like(b, x));
    return b.where(lo, b.scalar(BK::kAdd, x, scalar_for(d, bias)), upper);
  });
  op_table()["PRelu"] = [](Node& n) {
    n.check_attrs({});
    const DType d = n.input_meta(0).dtype;
    TensorId x = computable(n, 0), slope = computable(n, 1);
    const Shape xs = n.b.meta(x).shape, ss = n.b.meta(slope).shape;
    if (n.opset < 7 && ss.size() == 1 && xs.size() > 2 && ss[0] == xs[1] && ss[0] != 1) {
      Shape per_channel(xs.size() - 1, 1);  // before opset 7 a 1-D slope is per channel (dim 1)
      per_channel[0] = ss[0];
      slope = n.b.reshape(slope, per_channel);
    }
    TensorId out = where_neg(n.b, x, n.b.binary(BK::kMul, x, slope), x);
    n.set_output(0, n.b.cast(n.b.expand(out, n.b.meta(x).shape), d));
  };
  op_table()["IsNaN"] = [](Node& n) {
    TensorId x = computable(n, 0);
    n.set_output(0, n.b.binary(BK::kNe, x, x));
  };
  op_table()["IsInf"] = [](Node& n) {
    n.check_attrs({"detect_negative", "detect_positive"});
    const bool neg = n.attr_int("detect_negative", 1) != 0,
               pos = n.attr_int("detect_positive", 1) != 0;
    TensorId x = computable(n, 0);
    const double inf = std::numeric_limits<double>::infinity();
    TensorId p = n.b.scalar(BK::kEq, x, inf), m = n.b.scalar(BK::kEq, x, -inf);
    TensorId out = pos && neg ? n.b.binary(BK::kLogicalOr, p, m)
                   : pos      ? p
                   : neg      ? m
                              : n.b.full(n.b.meta(x).shape, kBool, int64_t{0});
    n.set_output(0, out);
  };

  binary_op("Add", BK::kAdd, true);
  binary_op("Sub", BK::kSub, true);
  binary_op("Mul", BK::kMul, true);
  binary_op("Pow", BK::kPow, true);  // the result has the base's dtype (opset 12: T, T1)
  binary_op("Equal", BK::kEq, false);
  binary_op("Less", BK::kLt, false);
  binary_op("Greater", BK::kGt, false);
  binary_op("LessOrEqual", BK::kLe, false);
  binary_op("GreaterOrEqual", BK::kGe, false);
  binary_op("And", BK::kLogicalAnd, false);
  binary_op("Or", BK::kLogicalOr, false);
  binary_op("Xor", BK::kLogicalXor, false);
  variadic_op("Sum", BK::kAdd, false);
  variadic_op("Mean", BK::kAdd, true);
  variadic_op("Min", BK::kMinimum, false);
  variadic_op("Max", BK::kMaximum, false);

  op_table()["Div"] = [](Node& n) {
    auto [a, c] = operands(n);
    n.check_attrs({});
    const DType d = n.input_meta(0).dtype;
    if (!is_float(d)) {  // integer division truncates toward zero: exact through f64
      a = n.b.cast(a, kF64);
      c = n.b.cast(c, kF64);
    }
    n.set_output(0, n.b.cast(n.b.binary(BK::kDiv, a, c), d));
  };
  op_table()["Mod"] = [](Node& n) {
    n.check_attrs({"fmod"});
    const DType d = n.input_meta(0).dtype;
    const bool fmod = n.attr_int("fmod", 0) != 0;
    if (is_float(d) && !fmod) n.fail("attribute fmod=0 is invalid for floating-point inputs");
    Builder& b = n.b;
    TensorId a = computable(n, 0), c = computable(n, 1);
    TensorId r = b.binary(BK::kRemainder, a, c);  // Python's: the divisor's sign
    if (fmod) {
      // C's fmod has the dividend's sign: where r != 0 and sign(r) != sign(a), r - c.
      const DType cd = b.meta(r).dtype;
      TensorId nonzero = b.scalar(BK::kNe, r, scalar_for(cd, 0));
      TensorId differ = b.binary(BK::kNe, b.scalar(BK::kLt, r, scalar_for(cd, 0)),
                                 b.scalar(BK::kLt, a, scalar_for(cd, 0)));
      r = b.where(b.binary(BK::kLogicalAnd, nonzero, differ), b.binary(BK::kSub, r, c), r);
    }
    n.set_output(0, b.cast(r, d));
  };
  op_table()["Where"] = [](Node& n) {
    const DType d = n.input_meta(1).dtype;
    TensorId out = n.b.where(n.input(0), computable(n, 1), computable(n, 2));
    n.set_output(0, n.b.cast(out, d));
  };
  op_table()["Clip"] = [](Node& n) {
    const DType d = n.input_meta(0).dtype;
    Builder& b = n.b;
    TensorId x = computable(n, 0);
    std::optional<ir::Scalar> lo, hi;
    if (n.opset < 11) {
      n.check_attrs({"min", "max"});
      if (n.has_attr("min")) lo = ir::Scalar(n.attr_float("min", 0));
      if (n.has_attr("max")) hi = ir::Scalar(n.attr_float("max", 0));
      n.set_output(0, b.cast(b.clamp(x, lo, hi), d));
      return;
    }
    n.check_attrs({});
    // Bounds known at load are a Clamp; bounds computed at run time are maximum/minimum.
    auto bound = [&](size_t i, BK kind) {
      if (!n.has_input(i)) return;
      if (n.has_constant(i)) {
        const double v = n.constant(i, "bound").doubles().at(0);
        if (kind == BK::kMaximum)
          lo = scalar_for(b.meta(x).dtype, v);
        else
          hi = scalar_for(b.meta(x).dtype, v);
      } else {
        x = b.binary(kind, x, computable(n, i));
      }
    };
    bound(1, BK::kMaximum);
    bound(2, BK::kMinimum);
    if (lo || hi)
      x = b.clamp(x, lo, hi);
    else if (!n.has_input(1) && !n.has_input(2))
      x = b.copy(x);
    n.set_output(0, b.cast(x, d));
  };
  op_table()["Cast"] = [](Node& n) {
    n.check_attrs({"to", "saturate"});
    int64_t to = n.attr_int("to", 0);
    if (n.opset < 6) {  // `to` was the type's name
      ::onnx::TensorProto_DataType t;
      const std::string name = n.attr_string("to", "");
      if (!::onnx::TensorProto_DataType_Parse(name, &t))
        n.fail("attribute to='" + name + "' is not a type");
      to = t;
    }
    std::optional<DType> d = dtype_of(static_cast<int32_t>(to));
    if (!d)
      n.fail(std::string("attribute to=") + onnx_type_name(static_cast<int32_t>(to)) +
             " is not supported");
    const TensorId x = n.input(0);
    n.set_output(0, n.b.meta(x).dtype == *d ? n.b.copy(x) : n.b.cast(x, *d));
  };
  op_table()["CastLike"] = [](Node& n) {
    n.check_attrs({"saturate"});
    const TensorId x = n.input(0);
    const DType d = n.input_meta(1).dtype;
    n.set_output(0, n.b.meta(x).dtype == d ? n.b.copy(x) : n.b.cast(x, d));
  };
}

}  // namespace tw::onnx_import
