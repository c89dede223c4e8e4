// The op case table: every op of docs/ops.md with every dtype it allows, plus edge cases (0-d
// tensors, zero-size dims, size-1 broadcasting, negative dims, non-contiguous inputs made by a
// transpose, a strided slice or an expand before the op). Each case is data: op name, inputs
// (shape, dtype, value generator, layout), attributes and tolerance family (op_cases.h states the
// tolerances). Seeds derive from the case name, so adding a case changes no other case's inputs.
#include "unit/ops/op_cases.h"

#include <cmath>
#include <set>

namespace tw::optest {
namespace {

const std::vector<DType> kNumeric = {kF32, kF64, kI32, kI64, kU8, kI8};
const std::vector<DType> kNonStorage = {kF32, kF64, kI32, kI64, kU8, kI8, kBool};
const std::vector<DType> kAnyDtype = {kF32, kF64, kI32, kI64, kU8, kI8, kBool, kF16, kBF16};
const std::vector<DType> kFloats = {kF32, kF64};
const std::vector<DType> kMatmulDtypes = {kF32, kF64, kI32, kI64};
const std::vector<DType> kIndexDtypes = {kI32, kI64};

Scalar I(int64_t v) { return Scalar(v); }
Scalar F(double v) { return Scalar(v); }

// A rotating choice of layout, so that the main case of each dtype sees a different one.
Layout rotate(size_t k) {
  static const Layout kOrder[] = {Layout::kContig, Layout::kTransposed, Layout::kStrided,
                                  Layout::kExpanded, Layout::kComposite};
  return kOrder[k % 5];
}

class Table {
 public:
  void add(const std::string& op, std::vector<InputSpec> inputs, Attrs attrs = {},
           Family family = Family::kExact, const std::string& tag = "") {
    std::string name = op;
    if (!tag.empty()) name += "_" + tag;
    for (const auto& in : inputs) name += "_" + std::string(dtype_name(in.dtype));
    if (inputs.empty() && attrs.dtype) name += "_" + std::string(dtype_name(*attrs.dtype));
    std::string unique = name;
    for (int k = 2; !names_.insert(unique).second; ++k) unique = name + "_" + std::to_string(k);
    cases_.push_back(
        OpCase{unique, op, std::move(inputs), std::move(attrs), family, fnv1a(unique)});
  }
  std::vector<OpCase> take() { return std::move(cases_); }

 private:
  static uint32_t fnv1a(const std::string& s) {
    uint32_t h = 2166136261u;
    for (unsigned char c : s) h = (h ^ c) * 16777619u;
    return h;
  }
  std::vector<OpCase> cases_;
  std::set<std::string> names_;
};

// ================================ creation ================================
void creation_cases(Table& t) {
  for (DType d : kAnyDtype) {
    t.add("full", {}, {.shape = {2, 3}, .s0 = F(1.5), .dtype = d});
    t.add("full", {}, {.shape = {}, .s0 = I(-3), .dtype = d}, Family::kExact, "scalar0d");
    t.add("full", {}, {.shape = {0, 4}, .s0 = I(1), .dtype = d}, Family::kExact, "empty");
    t.add("zeros", {}, {.shape = {3, 2}, .dtype = d});
    t.add("ones", {}, {.shape = {3, 2}, .dtype = d});
    t.add("eye", {}, {.n = 3, .dtype = d});
    t.add("eye", {}, {.n = 2, .m = 4, .dtype = d}, Family::kExact, "wide");
    t.add("zeros_like", {In({2, 3}, d)});
    t.add("ones_like", {In({2, 3}, d)});
    t.add("full_like", {In({2, 3}, d)}, {.s0 = I(1)});
    t.add("to_device", {In({2, 3}, d)});
  }
  // Value conversion into the dtype follows the Cast rules.
  t.add("full", {}, {.shape = {3}, .s0 = I(300), .dtype = kU8}, Family::kExact, "int_wraps");
  t.add("full", {}, {.shape = {3}, .s0 = F(300.5), .dtype = kU8}, Family::kExact,
        "float_saturates");
  t.add("full", {}, {.shape = {3}, .s0 = F(-1.5), .dtype = kU8}, Family::kExact,
        "negative_saturates");
  t.add("full", {}, {.shape = {3}, .s0 = F(1e10), .dtype = kI32}, Family::kExact, "saturates");
  t.add("full", {}, {.shape = {3}, .s0 = F(-2.7), .dtype = kI64}, Family::kExact, "truncates");
  t.add("full", {}, {.shape = {3}, .s0 = I((int64_t{1} << 62) + 1), .dtype = kI64}, Family::kExact,
        "exact_i64");
  t.add("full", {}, {.shape = {3}, .s0 = F(0.5), .dtype = kBool}, Family::kExact, "nonzero_true");
  t.add("full", {}, {.shape = {3}, .s0 = F(0.1), .dtype = kF16}, Family::kExact, "rounds");
  t.add("full", {}, {.shape = {3}, .s0 = F(0.1), .dtype = kBF16}, Family::kExact, "rounds");
  t.add("full", {}, {.shape = {3}, .s0 = F(0.1), .dtype = kF32}, Family::kExact, "rounds");
  t.add("full", {}, {.shape = {2}, .s0 = F(NAN), .dtype = kF32}, Family::kExact, "nan");
  t.add("full", {}, {.shape = {2}, .s0 = F(NAN), .dtype = kI32}, Family::kExact, "nan_to_zero");
  t.add("full_like", {In({2, 2}, kI32)}, {.s0 = F(2.9)}, Family::kExact, "truncates");

  t.add("eye", {}, {.n = 4, .m = 2, .dtype = kF32}, Family::kExact, "tall");
  t.add("eye", {}, {.n = 0, .m = 3, .dtype = kF32}, Family::kExact, "empty");
  t.add("eye", {}, {.n = 1, .dtype = kI64}, Family::kExact, "one");

  // arange: s0 start, s1 end, s2 step; no s0 means arange(end).
  t.add("arange", {}, {.s1 = I(5)}, Family::kExact, "end_int");
  t.add("arange", {}, {.s1 = F(2.5)}, Family::kExact, "end_float");
  t.add("arange", {}, {.s0 = I(0), .s1 = I(10), .s2 = I(3)}, Family::kExact, "default_i64");
  t.add("arange", {}, {.s0 = I(5), .s1 = I(0), .s2 = I(-1)}, Family::kExact, "down");
  t.add("arange", {}, {.s0 = I(0), .s1 = I(0), .s2 = I(1)}, Family::kExact, "empty");
  t.add("arange", {}, {.s0 = I(0), .s1 = F(1), .s2 = F(0.3)}, Family::kExact, "default_f32");
  t.add("arange", {}, {.s0 = I(0), .s1 = I(1), .s2 = F(0.1), .dtype = kF32}, Family::kExact,
        "tenths");
  t.add("arange", {}, {.s0 = F(-1), .s1 = F(1), .s2 = F(0.25), .dtype = kF64});
  t.add("arange", {}, {.s0 = I(2), .s1 = I(8), .s2 = I(2), .dtype = kF32});
  t.add("arange", {}, {.s0 = I(0), .s1 = I(5), .s2 = F(1.5), .dtype = kI32}, Family::kExact,
        "float_step_truncates");
  t.add("arange", {}, {.s0 = I(10), .s1 = I(0), .s2 = I(-3), .dtype = kI32}, Family::kExact,
        "down");
  t.add("arange", {}, {.s0 = I(0), .s1 = I(10), .s2 = I(2), .dtype = kU8});
  t.add("arange", {}, {.s0 = F(0.5), .s1 = I(3), .s2 = I(1), .dtype = kI64}, Family::kExact,
        "float_start");
  t.add("arange", {}, {.s0 = I(-5), .s1 = I(5), .s2 = I(1), .dtype = kF64});
  // Many elements: start + i * step in double, not an f32 running sum.
  t.add("arange", {}, {.s0 = F(0.1), .s1 = F(1e5), .s2 = F(0.3), .dtype = kF32}, Family::kExact,
        "many");
  t.add("full", {}, {.shape = {2}, .s0 = F(65520.0), .dtype = kF16}, Family::kExact,
        "overflow_inf");
  t.add("full", {}, {.shape = {2}, .s0 = F(1e39), .dtype = kBF16}, Family::kExact, "overflow_inf");
  // 2^60 + 1 has no double: integer start and step must use exact integer arithmetic.
  t.add("arange", {},
        {.s0 = I((int64_t{1} << 60) + 1),
         .s1 = I((int64_t{1} << 60) + 769),
         .s2 = I(256),
         .dtype = kI64},
        Family::kExact, "exact_large");
}

// ================================ unary ================================
void unary_cases(Table& t) {
  struct K {
    const char* op;
    bool float_out;  // exp..recip: integral and bool inputs give f32
    double lo, hi;   // float input range
  };
  const K kKinds[] = {
      {"neg", false, -3, 3},    {"abs", false, -3, 3},       {"sign", false, -3, 3},
      {"square", false, -3, 3}, {"relu", false, -3, 3},      {"floor", false, -4, 4},
      {"ceil", false, -4, 4},   {"round", false, -4, 4},     {"exp", true, -5, 5},
      {"log", true, 0.1, 5},    {"log1p", true, -0.9, 5},    {"sqrt", true, 0, 9},
      {"rsqrt", true, 0.1, 9},  {"sin", true, -6, 6},        {"cos", true, -6, 6},
      {"tanh", true, -4, 4},    {"sigmoid", true, -8, 8},    {"gelu", true, -4, 4},
      {"erf", true, -3, 3},     {"reciprocal", true, -4, 4},
  };
  for (const K& k : kKinds) {
    const std::string op = k.op;
    const Family fam = !k.float_out                           ? Family::kExact
                       : (op == "sqrt" || op == "reciprocal") ? Family::kArith
                                                              : Family::kTranscend;
    const bool positive = op == "log" || op == "sqrt" || op == "rsqrt";
    const std::vector<DType>& dtypes = k.float_out ? kNonStorage : kNumeric;
    for (size_t j = 0; j < dtypes.size(); ++j) {
      DType d = dtypes[j];
      InputSpec x = In({3, 4, 5}, d).range(k.lo, k.hi).as(rotate(j));
      if (!is_float(d))
        x = x.range(positive || op == "log1p" ? (d == kBool ? 0 : 1) : -5, positive ? 9 : 5);
      if (op == "reciprocal") x = x.with(Gen::kNonZero);
      if ((op == "floor" || op == "ceil" || op == "round") && is_float(d)) x = x.with(Gen::kHalves);
      t.add(op, {x}, {}, fam);
    }
    t.add(op, {In({}, kF32).range(k.lo, k.hi)}, {}, fam, "scalar0d");
    t.add(op, {In({0, 3}, kF32)}, {}, fam, "empty");
    t.add(op, {In({4, 6}, kF32).range(k.lo, k.hi).as(Layout::kTransposed)}, {}, fam, "transposed");
    t.add(op, {In({5, 3}, kF64).range(k.lo, k.hi).as(Layout::kStrided)}, {}, fam, "strided");
    // Edge values: ±0, ±1, ±0.5, ±2.5, ±100, ±inf, NaN (sign, relu and gelu leave NaN/inf out:
    // the spec does not say what sign(NaN), relu(NaN) or gelu(-inf) give).
    const bool finite_only = op == "sign" || op == "relu" || op == "gelu";
    for (DType d : kFloats)
      t.add(op, {In({26}, d).with(finite_only ? Gen::kEdgeFinite : Gen::kEdge)}, {}, fam, "edge");
    if (!k.float_out) {
      // Integral limits: neg/abs/square wrap, u8 neg is modulo 256.
      for (DType d : {kI32, kI64, kU8})
        t.add(op, {In({20}, d).with(Gen::kSpecial)}, {}, fam, "limits");
      for (DType d : {kI32, kI64, kU8}) t.add(op, {In({64}, d).with(Gen::kWrap)}, {}, fam, "wrap");
    }
  }
  // gelu's gradient (inputs x, the upstream gradient): through 0 near x = -0.75 (gelu's
  // minimum), the far tails, edge values.
  for (DType d : kFloats) {
    const Family fam = Family::kTranscend;
    t.add("gelu_backward", {In({3, 4, 5}, d).range(-4, 4), In({3, 4, 5}, d).range(-2, 2)}, {}, fam);
    t.add(
        "gelu_backward",
        {In({4, 6}, d).range(-12, 12).as(Layout::kTransposed), In({4, 6}, d).as(Layout::kStrided)},
        {}, fam, "wide");
    t.add("gelu_backward", {In({26}, d).with(Gen::kEdgeFinite), In({26}, d)}, {}, fam, "edge");
    t.add("gelu_backward", {In({37}, d).range(-0.8, -0.7), In({37}, d)}, {}, fam, "minimum");
    t.add("gelu_backward", {In({}, d), In({}, d)}, {}, fam, "scalar0d");
    t.add("gelu_backward", {In({0, 3}, d), In({0, 3}, d)}, {}, fam, "empty");
  }
  // Accuracy near zero (log1p(x) ~ x, sin, tanh, erf) and over wide ranges (overflow to inf,
  // subnormal results, large arguments), where vectorised approximations go wrong first.
  struct R {
    const char* op;
    Gen gen;
    double lo, hi;
    Family fam;
    const char* tag;
  };
  const R kRanges[] = {
      {"log1p", Gen::kUniform, -1e-6, 1e-6, Family::kTranscendRel, "tiny"},
      {"sin", Gen::kUniform, -1e-6, 1e-6, Family::kTranscendRel, "tiny"},
      {"tanh", Gen::kUniform, -1e-6, 1e-6, Family::kTranscendRel, "tiny"},
      {"erf", Gen::kUniform, -1e-6, 1e-6, Family::kTranscendRel, "tiny"},
      {"gelu", Gen::kUniform, -1e-6, 1e-6, Family::kTranscendRel, "tiny"},
      {"exp", Gen::kUniform, -110, 95, Family::kTranscendRel, "wide"},
      {"exp", Gen::kUniform, -1e-6, 1e-6, Family::kTranscendRel, "tiny"},
      {"log", Gen::kLogUniform, -37, 38, Family::kTranscendRel, "wide"},
      {"sqrt", Gen::kLogUniform, -37, 38, Family::kArith, "wide"},
      {"rsqrt", Gen::kLogUniform, -37, 37, Family::kTranscendRel, "wide"},
      {"reciprocal", Gen::kLogUniform, -37, 37, Family::kArith, "wide"},
      {"sin", Gen::kUniform, -1000, 1000, Family::kTranscend, "wide"},
      {"cos", Gen::kUniform, -1000, 1000, Family::kTranscend, "wide"},
      {"tanh", Gen::kUniform, -20, 20, Family::kTranscend, "wide"},
      {"sigmoid", Gen::kUniform, -100, 100, Family::kTranscend, "wide"},
      {"erf", Gen::kUniform, -6, 6, Family::kTranscend, "wide"},
      {"gelu", Gen::kUniform, -12, 12, Family::kTranscend, "wide"},
      {"log1p", Gen::kUniform, -0.999999, 1e6, Family::kTranscend, "wide"},
  };
  for (const R& r : kRanges) {
    for (DType d : kFloats)
      t.add(r.op, {In({500}, d).with(r.gen).range(r.lo, r.hi)}, {}, r.fam, r.tag);
  }

  for (size_t j = 0; j < kNonStorage.size(); ++j) {
    t.add("logical_not", {In({3, 4, 5}, kNonStorage[j]).with(Gen::kTies).as(rotate(j))});
  }
  t.add("logical_not", {In({32}, kF32).with(Gen::kSpecial)}, {}, Family::kExact, "edge");
  t.add("logical_not", {In({}, kI32)}, {}, Family::kExact, "scalar0d");
  t.add("op_neg", {In({3, 4}, kF32)});
  t.add("op_neg", {In({3, 4}, kU8)});
  t.add("op_not", {In({3, 4}, kBool)});
}

// ================================ binary ================================
void binary_cases(Table& t) {
  const std::vector<std::string> kArith = {"add", "sub",     "mul",     "div",
                                           "pow", "maximum", "minimum", "remainder"};
  const std::vector<std::string> kCompare = {"eq", "ne", "lt", "le", "gt", "ge"};
  const std::vector<std::string> kLogical = {"logical_and", "logical_or", "logical_xor"};
  auto family = [](const std::string& op) {
    if (op == "pow") return Family::kTranscend;
    if (op == "remainder") return Family::kRemainder;
    if (op == "add" || op == "sub" || op == "mul" || op == "div") return Family::kArith;
    return Family::kExact;
  };
  // Operand generators by op: divisors non-zero, pow bases positive for floats, comparisons
  // with ties, logical ops with zeros.
  auto lhs = [](const std::string& op, Shape s, DType d) {
    InputSpec x = In(std::move(s), d);
    if (op == "pow") return is_float(d) ? x.range(0.1, 3) : x.range(-3, 5);
    if (op == "remainder") return x.range(-6, 6);
    if (op == "eq" || op == "ne" || op == "lt" || op == "le" || op == "gt" || op == "ge")
      return x.with(Gen::kTies);
    if (op.rfind("logical", 0) == 0) return x.with(Gen::kHalves).range(-1, 1);
    return x.range(-5, 5);
  };
  auto rhs = [&](const std::string& op, Shape s, DType d) {
    InputSpec y = lhs(op, std::move(s), d);
    if (op == "div" || op == "remainder") return y.with(Gen::kNonZero).range(-4, 4);
    if (op == "pow") return is_float(d) ? y.range(-2, 2) : y.range(d == kU8 ? 0 : -1, 5);
    return y;
  };
  for (const auto& ops : {kArith, kCompare, kLogical}) {
    for (const std::string& op : ops) {
      const Family fam = family(op);
      const bool arith = ops == kArith;
      const std::vector<DType>& dtypes = arith ? kNumeric : kNonStorage;
      for (size_t j = 0; j < dtypes.size(); ++j) {
        DType d = dtypes[j];
        t.add(op, {lhs(op, {3, 4}, d).as(rotate(j)), rhs(op, {3, 4}, d).as(rotate(j + 1))}, {},
              fam);
      }
      for (DType d : {kF32, kI32}) {
        t.add(op, {lhs(op, {2, 1, 4}, d), rhs(op, {3, 1}, d)}, {}, fam, "bcast");
        t.add(op, {lhs(op, {}, d), rhs(op, {3, 4}, d)}, {}, fam, "scalar0d_lhs");
        t.add(op, {lhs(op, {3, 4}, d), rhs(op, {}, d)}, {}, fam, "scalar0d_rhs");
        t.add(op, {lhs(op, {}, d), rhs(op, {}, d)}, {}, fam, "both0d");
        t.add(op, {lhs(op, {0, 3}, d), rhs(op, {1, 3}, d)}, {}, fam, "empty");
        t.add(op,
              {lhs(op, {5, 4}, d).as(Layout::kTransposed), rhs(op, {5, 4}, d).as(Layout::kStrided)},
              {}, fam, "noncontig");
        t.add(op, {lhs(op, {3, 4}, d).as(Layout::kExpanded), rhs(op, {4}, d)}, {}, fam, "expanded");
      }
      // Type promotion: bool < u8 < i32 < i64 < f32 < f64 (at most one bool operand here).
      const std::pair<DType, DType> kPairs[] = {
          {kBool, kU8},  {kU8, kBool}, {kU8, kI32},  {kI32, kI64},  {kI64, kF32}, {kF32, kF64},
          {kBool, kF32}, {kU8, kF64},  {kI32, kF32}, {kBool, kI64}, {kF64, kI32}};
      for (auto [a, b] : kPairs)
        t.add(op, {lhs(op, {3, 4}, a), rhs(op, {4}, b)}, {}, fam, "promote");
      if (!arith) t.add(op, {lhs(op, {2, 3}, kBool), rhs(op, {3}, kBool)}, {}, fam, "bools");
    }
  }
  // Integral overflow wraps (two's complement; u8 modulo 256).
  for (const char* op : {"add", "sub", "mul"}) {
    for (DType d : {kI32, kI64, kU8})
      t.add(op, {In({64}, d).with(Gen::kWrap), In({64}, d).with(Gen::kWrap)}, {}, Family::kExact,
            "wrap");
  }
  t.add("pow", {In({40}, kI32).range(-9, 9), In({40}, kI32).range(0, 25)}, {}, Family::kExact,
        "wrap");
  t.add("pow", {In({40}, kI64).range(-9, 9), In({40}, kI64).range(0, 45)}, {}, Family::kExact,
        "wrap");
  t.add("pow", {In({40}, kU8).range(0, 9), In({40}, kU8).range(0, 12)}, {}, Family::kExact, "wrap");
  // Negative integer exponents: 1 for base 1, ±1 for base -1, 0 otherwise (0 ** -1 included).
  t.add("pow", {In({40}, kI32).range(-2, 2), In({40}, kI32).range(-3, -1)}, {}, Family::kExact,
        "negative_exponent");
  t.add("pow", {In({40}, kI64).range(-2, 2), In({40}, kI64).range(-3, -1)}, {}, Family::kExact,
        "negative_exponent");
  // Float pow with negative bases and integral exponents (and NaN for fractional ones).
  t.add("pow", {In({40}, kF32).range(-3, 3), In({40}, kF32).with(Gen::kIntegral).range(-3, 3)}, {},
        Family::kTranscend, "negative_base");
  t.add("pow", {In({40}, kF64).range(-3, 3), In({40}, kF64).with(Gen::kHalves).range(-2, 2)}, {},
        Family::kTranscend, "negative_base");
  // bool / bool is allowed and gives f32 (1/0 = inf, 0/0 = NaN).
  t.add("div", {In({4, 4}, kBool), In({4}, kBool)}, {}, Family::kArith, "bools");
  // More broadcasting: both sides stretch, high rank, a size-1 dim against 0.
  t.add("add", {In({3, 1, 5}, kF32), In({1, 4, 1}, kF32)}, {}, Family::kArith, "bcast_both");
  t.add("mul", {In({2, 1, 3, 1, 2, 1}, kI64), In({1, 2, 1, 2, 1, 3}, kI64).as(Layout::kTransposed)},
        {}, Family::kExact, "bcast_6d");
  t.add("sub", {In({1}, kF64), In({0}, kF64)}, {}, Family::kArith, "bcast_to_empty");
  t.add("maximum", {In({4, 5}, kU8).as(Layout::kComposite), In({5}, kU8).as(Layout::kStrided)}, {},
        Family::kExact, "composite");
  // INT_MIN % -1 is 0 (and must not trap); every sign of divisor against the limits.
  for (DType d : {kI32, kI64}) {
    t.add("remainder",
          {In({20}, d).with(Gen::kSpecial), In({20}, d).with(Gen::kNonZero).range(-1, 1)}, {},
          Family::kExact, "limits_by_one");
    t.add("remainder", {In({20}, d).with(Gen::kSpecial), In({20}, d).with(Gen::kWrap)}, {},
          Family::kExact, "limits");
  }
  // Integer pow with exponents up to 2^63 (repeated squaring; wraps) and negative ones.
  t.add("pow", {In({64}, kI64).range(-3, 3), In({64}, kI64).with(Gen::kWrap)}, {}, Family::kExact,
        "huge_exponent");
  t.add("pow", {In({64}, kI32).range(-3, 3), In({64}, kI32).with(Gen::kWrap)}, {}, Family::kExact,
        "huge_exponent");
  // Integral true division by zero gives ±inf / NaN in f32; float remainder by zero gives NaN.
  t.add("div", {In({30}, kI32).range(-2, 2), In({30}, kI32).range(-1, 1)}, {}, Family::kArith,
        "by_zero");
  t.add("div",
        {In({30}, kF32).with(Gen::kHalves).range(-2, 2),
         In({30}, kF32).with(Gen::kHalves).range(-0.5, 0.5)},
        {}, Family::kArith, "by_zero");
  t.add("remainder",
        {In({30}, kF32).range(-3, 3), In({30}, kF32).with(Gen::kHalves).range(-0.5, 0.5)}, {},
        Family::kRemainder, "by_zero");
  // Remainder takes the divisor's sign, for every sign combination.
  for (DType d : kNumeric) {
    t.add("remainder", {In({50}, d).range(-9, 9), In({50}, d).with(Gen::kNonZero).range(-4, 4)}, {},
          Family::kRemainder, "signs");
  }
  t.add("remainder",
        {In({64}, kI64).with(Gen::kWrap), In({64}, kI64).with(Gen::kNonZero).range(-1000, 1000)},
        {}, Family::kExact, "large");
  // NaN in comparisons: only ne is true.
  for (const std::string& op : kCompare) {
    t.add(op, {In({32}, kF32).with(Gen::kSpecial), In({32}, kF32).with(Gen::kWithNaN)}, {},
          Family::kExact, "nan");
  }
  t.add("logical_and", {In({32}, kF32).with(Gen::kSpecial), In({32}, kF64).with(Gen::kSpecial)}, {},
        Family::kExact, "nan_true");
  // i64 beyond 2^53 compares exactly.
  t.add("lt", {In({64}, kI64).with(Gen::kWrap), In({64}, kI64).with(Gen::kWrap)}, {},
        Family::kExact, "large");
  // Operators.
  t.add("op_add", {In({2, 3}, kF32), In({3}, kF32)}, {}, Family::kArith);
  t.add("op_add", {In({2, 3}, kI32), In({3}, kU8)}, {}, Family::kExact);
  t.add("op_sub", {In({2, 3}, kF64), In({2, 3}, kI64)}, {}, Family::kArith);
  t.add("op_mul", {In({2, 3}, kI64), In({1}, kI64)});
  t.add("op_div", {In({2, 3}, kI32), In({2, 3}, kI32).with(Gen::kNonZero)}, {}, Family::kArith);
  for (const char* op : {"op_eq", "op_ne", "op_lt", "op_le", "op_gt", "op_ge"}) {
    t.add(op, {In({2, 3}, kI32).with(Gen::kTies), In({2, 3}, kF32).with(Gen::kTies)});
  }
  t.add("op_and", {In({2, 3}, kBool), In({2, 3}, kBool)});
  t.add("op_or", {In({2, 3}, kBool), In({3}, kI32).with(Gen::kTies)});
}

// ================================ tensor-scalar ================================
void scalar_cases(Table& t) {
  const std::vector<std::string> kArith = {"add", "sub", "mul", "div", "pow", "remainder"};
  const std::vector<std::string> kCompare = {"eq", "ne", "lt", "le", "gt", "ge"};
  for (const std::string& op : kArith) {
    const Family fam = op == "pow"         ? Family::kTranscend
                       : op == "remainder" ? Family::kRemainder
                                           : Family::kArith;
    for (size_t j = 0; j < kNonStorage.size(); ++j) {
      DType d = kNonStorage[j];
      InputSpec x = In({3, 4}, d).range(op == "pow" ? 0.1 : -5, 5).as(rotate(j));
      Scalar si = op == "pow" ? I(3) : op == "remainder" ? I(-3) : I(3);
      Scalar sf = op == "pow" ? F(0.5) : op == "remainder" ? F(1.5) : F(2.5);
      if (op == "pow" && !is_float(d))
        x = x.range(0, 3);  // pow 0.5 of a negative is NaN; keep it real
      // A bool tensor with an integer scalar computes in i64, with a float scalar in f32.
      t.add(op + "_scalar", {x}, {.s0 = si}, fam, "int");
      t.add(op + "_scalar", {x}, {.s0 = sf}, fam, "float");
    }
  }
  for (const char* op : {"add", "sub", "mul", "div"}) {
    const Family fam = Family::kArith;
    for (DType d : kNonStorage) {
      InputSpec x = In({3, 4}, d).range(-5, 5);
      if (std::string(op) == "div") x = x.with(Gen::kNonZero);
      t.add(std::string(op) + "_scalar", {x}, {.reverse = true, .s0 = I(7)}, fam, "rev_int");
      t.add(std::string(op) + "_scalar", {x}, {.reverse = true, .s0 = F(-1.5)}, fam, "rev_float");
    }
  }
  for (const std::string& op : kCompare) {
    for (DType d : kNonStorage) {
      InputSpec x = In({3, 4}, d).with(Gen::kTies);
      // A bool tensor compares in bool (0 and 1 mean the same under either reading of the spec).
      t.add(op + "_scalar", {x}, {.s0 = I(1)}, Family::kExact, "int");
      t.add(op + "_scalar", {x}, {.s0 = F(d == kBool ? 0.0 : 0.5)}, Family::kExact, "float");
    }
    t.add(op + "_scalar", {In({32}, kF32).with(Gen::kSpecial)}, {.s0 = F(NAN)}, Family::kExact,
          "nan");
    // The scalar takes the tensor's dtype: 0.1 becomes f32(0.1), so x == 0.1 is true for f32(0.1).
    t.add(op + "_scalar", {In({8}, kF32).with(Gen::kIntegral).range(0, 1)}, {.s0 = F(0.1)},
          Family::kExact, "f32_rounding");
  }
  // The scalar takes the tensor's dtype: f32(0.1), u8(300) = 44, u8(-1) = 255, i32 * 2.5 in f32.
  t.add("add_scalar", {In({3, 4}, kF32)}, {.s0 = F(0.1)}, Family::kArith, "f32_rounding");
  t.add("add_scalar", {In({3, 4}, kF64)}, {.s0 = F(0.1)}, Family::kArith, "f64");
  t.add("add_scalar", {In({3, 4}, kU8).with(Gen::kWrap)}, {.s0 = I(300)}, Family::kExact,
        "u8_wraps");
  t.add("sub_scalar", {In({3, 4}, kU8).with(Gen::kWrap)}, {.s0 = I(-1)}, Family::kExact,
        "u8_wraps");
  t.add("lt_scalar", {In({64}, kU8).with(Gen::kWrap)}, {.s0 = I(300)}, Family::kExact,
        "u8_scalar_wraps");
  t.add("mul_scalar", {In({3, 4}, kI32).with(Gen::kWrap)}, {.s0 = I(3)}, Family::kExact, "wrap");
  t.add("mul_scalar", {In({3, 4}, kI32)}, {.s0 = F(2.5)}, Family::kArith, "to_f32");
  t.add("add_scalar", {In({3, 4}, kI64).with(Gen::kWrap)}, {.s0 = I((int64_t{1} << 62) + 1)},
        Family::kExact, "i64_exact");
  t.add("pow_scalar", {In({20}, kI32).range(-2, 2)}, {.s0 = I(-1)}, Family::kExact,
        "negative_exponent");
  t.add("pow_scalar", {In({20}, kI32).range(-9, 9)}, {.s0 = I(11)}, Family::kExact, "wrap");
  t.add("div_scalar", {In({20}, kI32).range(-2, 2)}, {.s0 = I(0)}, Family::kArith, "by_zero");
  t.add("remainder_scalar", {In({20}, kF32).range(-3, 3)}, {.s0 = F(0.0)}, Family::kRemainder,
        "by_zero");
  t.add("remainder_scalar", {In({20}, kI32).range(-9, 9)}, {.s0 = I(4)}, Family::kExact,
        "positive");
  t.add("remainder_scalar", {In({20}, kU8).with(Gen::kWrap)}, {.s0 = I(7)}, Family::kExact, "u8");
  t.add("sub_scalar", {In({3, 4}, kBool)}, {.reverse = true, .s0 = I(1)}, Family::kExact,
        "bool_to_i64");
  t.add("add_scalar", {In({}, kF32)}, {.s0 = I(1)}, Family::kArith, "scalar0d");
  t.add("mul_scalar", {In({0, 2}, kI32)}, {.s0 = I(2)}, Family::kExact, "empty");
  t.add("mul_scalar", {In({4, 5}, kF32).as(Layout::kTransposed)}, {.s0 = F(-2.0)}, Family::kArith,
        "transposed");
}

// ================================ where, clamp, masked_fill, cast ================================
void select_cases(Table& t) {
  for (size_t j = 0; j < kNonStorage.size(); ++j) {
    DType d = kNonStorage[j];
    t.add("where", {In({3, 1}, kBool), In({1, 4}, d), In({3, 4}, d).as(rotate(j))});
  }
  const std::pair<DType, DType> kPairs[] = {
      {kI32, kF32}, {kBool, kU8}, {kU8, kI64}, {kF32, kF64}, {kI64, kBool}};
  for (auto [a, b] : kPairs)
    t.add("where", {In({2, 3}, kBool), In({2, 3}, a), In({3}, b)}, {}, Family::kExact, "promote");
  t.add("where", {In({}, kBool), In({2, 2}, kF32), In({}, kF32)}, {}, Family::kExact, "scalar0d");
  t.add("where", {In({2, 1, 1, 3}, kBool), In({4, 1}, kI32), In({}, kI64)}, {}, Family::kExact,
        "cond_widest");
  t.add("where", {In({0, 4}, kBool), In({4}, kI32), In({1, 4}, kI32)}, {}, Family::kExact, "empty");
  t.add("where",
        {In({4, 5}, kBool).as(Layout::kTransposed), In({4, 5}, kF64).as(Layout::kStrided),
         In({4, 5}, kF64).as(Layout::kExpanded)},
        {}, Family::kExact, "noncontig");

  for (size_t j = 0; j < kNumeric.size(); ++j) {
    DType d = kNumeric[j];
    const bool fl = is_float(d);
    InputSpec x = In({4, 5}, d).range(-5, 9).as(rotate(j));
    Scalar lo = fl ? F(-0.5) : I(d == kU8 ? 2 : -1), hi = fl ? F(0.75) : I(d == kU8 ? 7 : 1);
    t.add("clamp", {x}, {.s0 = lo, .s1 = hi});
    t.add("clamp", {x}, {.s0 = lo}, Family::kExact, "lo");
    t.add("clamp", {x}, {.s1 = hi}, Family::kExact, "hi");
    // Bounds are converted to x's dtype: float bounds truncate toward zero for integers.
    t.add("clamp", {x}, {.s0 = F(d == kU8 ? 2.9 : -1.7), .s1 = F(6.2)}, Family::kExact,
          "float_bounds");
    // lo > hi: min(max(x, lo), hi) is hi everywhere.
    t.add("clamp", {x}, {.s0 = I(3), .s1 = I(1)}, Family::kExact, "crossed");
  }
  for (DType d : kFloats)
    t.add("clamp", {In({30}, d).with(Gen::kWithNaN)}, {.s0 = F(-1), .s1 = F(1)}, Family::kExact,
          "nan");
  t.add("clamp", {In({20}, kF32).with(Gen::kSpecial)}, {.s0 = F(-1e30), .s1 = F(0.1)},
        Family::kExact, "edge");
  t.add("clamp", {In({}, kI64)}, {.s0 = I(0)}, Family::kExact, "scalar0d");
  t.add("clamp", {In({0, 2}, kF32)}, {.s0 = I(0), .s1 = I(1)}, Family::kExact, "empty");

  for (size_t j = 0; j < kNonStorage.size(); ++j) {
    DType d = kNonStorage[j];
    t.add("masked_fill", {In({3, 4}, d).as(rotate(j)), In({1, 4}, kBool)}, {.s0 = I(5)});
    t.add("masked_fill", {In({3, 4}, d), In({3, 4}, kBool)}, {.s0 = F(2.5)}, Family::kExact,
          "float_value");
  }
  t.add("masked_fill", {In({2, 3}, kF32), In({}, kBool)}, {.s0 = F(NAN)}, Family::kExact, "mask0d");
  t.add("masked_fill", {In({2, 3}, kU8), In({2, 3}, kBool)}, {.s0 = I(300)}, Family::kExact,
        "u8_int_wraps");
  t.add("masked_fill", {In({2, 3}, kU8), In({2, 3}, kBool)}, {.s0 = F(300.7)}, Family::kExact,
        "u8_float_saturates");
  t.add("masked_fill", {In({2, 3}, kI32), In({3}, kBool)}, {.s0 = F(-2.7)}, Family::kExact,
        "truncates");
  t.add("masked_fill", {In({0, 3}, kF32), In({1, 3}, kBool)}, {.s0 = I(1)}, Family::kExact,
        "empty");
  t.add("masked_fill",
        {In({4, 5}, kF64).as(Layout::kTransposed), In({4, 5}, kBool).as(Layout::kStrided)},
        {.s0 = F(-1)}, Family::kExact, "noncontig");

  // Cast: every pair of dtypes, on the edge values (NaN, ±inf, out of range, fractions, limits).
  for (DType from : kAnyDtype) {
    for (DType to : kAnyDtype) {
      const bool fl = is_float(from);
      t.add("cast", {In({fl ? 41 : 20}, from).with(Gen::kSpecial)}, {.dtype = to}, Family::kExact,
            std::string("to_") + std::string(dtype_name(to)));
      if (fl && !is_float(to)) {
        t.add("cast", {In({40}, from).range(-300, 300)}, {.dtype = to}, Family::kExact,
              std::string("uniform_to_") + std::string(dtype_name(to)));
      }
      if (!fl && from != kBool && from != to) {
        t.add("cast", {In({40}, from).with(Gen::kWrap)}, {.dtype = to}, Family::kExact,
              std::string("wrap_to_") + std::string(dtype_name(to)));
      }
    }
  }
  t.add("cast", {In({4, 6}, kF32).range(-300, 300).as(Layout::kTransposed)}, {.dtype = kI32},
        Family::kExact, "transposed");
  t.add("cast", {In({4, 6}, kF16).as(Layout::kStrided)}, {.dtype = kF32}, Family::kExact,
        "strided");
  t.add("cast", {In({4, 6}, kBF16).as(Layout::kExpanded)}, {.dtype = kF64}, Family::kExact,
        "expanded");
  t.add("cast", {In({}, kF64)}, {.dtype = kF16}, Family::kExact, "scalar0d");
  t.add("cast", {In({0, 5}, kI32)}, {.dtype = kF32}, Family::kExact, "empty");
}

// ================================ reductions ================================
void reduction_cases(Table& t) {
  for (const std::string op : {"sum", "mean", "prod"}) {
    for (size_t j = 0; j < kNonStorage.size(); ++j) {
      DType d = kNonStorage[j];
      const bool fl = is_float(d);
      const Family fam = fl ? Family::kReduce : op == "mean" ? Family::kArith : Family::kExact;
      Shape s = op == "prod" ? Shape{3, 4, 2} : Shape{3, 4, 5};
      InputSpec x = In(s, d).range(op == "prod" ? 0.5 : -1, op == "prod" ? 1.5 : 1).as(rotate(j));
      if (!fl) x = x.range(op == "prod" ? -3 : -9, op == "prod" ? 3 : 9);
      t.add(op, {x}, {}, fam);
      t.add(op + "_dim", {x}, {.dim = 1}, fam);
      t.add(op + "_dim", {x}, {.dim = -1, .keepdim = true}, fam, "keepdim");
      t.add(op + "_dim", {x.as(Layout::kTransposed)}, {.dim = 0}, fam, "transposed");
      if (op != "prod") {
        t.add(op + "_dims", {x}, {.dims = {0, 2}}, fam);
        t.add(op + "_dims", {x}, {.dims = {-1, 0}, .keepdim = true}, fam, "keepdim");
        t.add(op + "_dims", {x}, {.dims = {}, .keepdim = true}, fam, "all_keepdim");
      }
      t.add(op, {In({}, d)}, {}, fam, "scalar0d");
      t.add(op + "_dim", {In({}, d)}, {.dim = -1}, fam, "scalar0d");
      // Empty: sum 0, prod 1, mean NaN.
      t.add(op + "_dim", {In({0, 3}, d)}, {.dim = 0}, fam, "empty");
      t.add(op, {In({2, 0}, d)}, {}, fam, "empty");
      t.add(op + "_dim", {In({2, 0}, d)}, {.dim = 0}, fam, "empty_out");
    }
  }
  t.add("sum", {In({1000}, kF32).range(-1, 1)}, {}, Family::kReduce, "long");
  // 100k positive values: a naive running f32 sum drifts by ~1e-4 relative; blocked/pairwise
  // accumulation (docs/ops.md) stays within rounding.
  t.add("sum", {In({100000}, kF32).range(0, 1)}, {}, Family::kReduce, "100k");
  t.add("mean_dim", {In({4, 50000}, kF32).range(0, 1)}, {.dim = 1}, Family::kReduce, "50k");
  t.add("sum_dims", {In({3, 4, 5, 6}, kF32).as(Layout::kComposite)},
        {.dims = {0, 2}, .keepdim = true}, Family::kReduce, "composite");
  t.add("max_dim", {In({5, 6}, kF32).with(Gen::kDistinct).as(Layout::kComposite)}, {.dim = 0},
        Family::kExact, "composite");
  t.add("sum_dim", {In({64, 64}, kF32).range(-1, 1)}, {.dim = 0}, Family::kReduce, "long");
  t.add("mean", {In({999}, kF64).range(-1, 1)}, {}, Family::kReduce, "long");
  t.add("sum", {In({64}, kI64).with(Gen::kWrap)}, {}, Family::kExact, "wrap");
  t.add("sum", {In({64}, kI32).with(Gen::kWrap)}, {}, Family::kExact, "i32_to_i64_no_wrap");
  t.add("sum_dim", {In({8, 40}, kU8).with(Gen::kWrap)}, {.dim = 1}, Family::kExact, "u8_to_i64");
  t.add("prod", {In({30}, kI64).range(-9, 9)}, {}, Family::kExact, "wrap");
  t.add("mean_dim", {In({4, 5}, kI64).with(Gen::kWrap)}, {.dim = 1}, Family::kArith, "large");
  t.add("sum", {In({20}, kF32).with(Gen::kWithNaN)}, {}, Family::kReduce, "nan");

  for (const std::string op : {"max", "min", "argmax", "argmin"}) {
    for (size_t j = 0; j < kNonStorage.size(); ++j) {
      DType d = kNonStorage[j];
      InputSpec x = In({3, 4, 5}, d)
                        .with(d == kBool ? Gen::kUniform : Gen::kDistinct)
                        .range(-60, 60)
                        .as(rotate(j));
      if (d == kU8) x = x.range(0, 255);
      t.add(op, {x});
      t.add(op + "_dim", {x}, {.dim = 1});
      t.add(op + "_dim", {x}, {.dim = -1, .keepdim = true}, Family::kExact, "keepdim");
      t.add(op + "_dim", {x.as(Layout::kTransposed)}, {.dim = 0}, Family::kExact, "transposed");
      // Ties: the first occurrence wins.
      t.add(op, {In({4, 6}, d).with(Gen::kTies)}, {}, Family::kExact, "ties");
      t.add(op + "_dim", {In({4, 6}, d).with(Gen::kTies)}, {.dim = 1}, Family::kExact, "ties");
      t.add(op, {In({}, d)}, {}, Family::kExact, "scalar0d");
      t.add(op + "_dim", {In({}, d)}, {.dim = 0}, Family::kExact, "scalar0d");
      t.add(op + "_dim", {In({0, 4}, d).with(Gen::kDistinct)}, {.dim = 1}, Family::kExact,
            "empty_other_dim");
    }
    // NaN propagates (max/min) and counts as the maximum and the minimum (argmax/argmin).
    for (DType d : kFloats) {
      t.add(op, {In({4, 6}, d).with(Gen::kWithNaN)}, {}, Family::kExact, "nan");
      t.add(op + "_dim", {In({6, 5}, d).with(Gen::kWithNaN)}, {.dim = 0}, Family::kExact, "nan");
      t.add(op + "_dim", {In({6, 5}, d).with(Gen::kSpecial)}, {.dim = 1}, Family::kExact, "edge");
    }
    t.add(op, {In({64}, kI64).with(Gen::kWrap)}, {}, Family::kExact, "large");
  }

  for (size_t j = 0; j < kNonStorage.size(); ++j) {
    DType d = kNonStorage[j];
    const Family fam = is_float(d) ? Family::kReduce : Family::kExact;
    t.add("cumsum", {In({3, 4, 5}, d).range(-9, 9).as(rotate(j))}, {.dim = 1}, fam);
    t.add("cumsum", {In({3, 4, 5}, d).range(-9, 9)}, {.dim = -1}, fam, "last");
    t.add("cumsum", {In({4, 5}, d).range(-9, 9).as(Layout::kTransposed)}, {.dim = 0}, fam,
          "transposed");
    t.add("cumsum", {In({}, d)}, {.dim = 0}, fam, "scalar0d");
    t.add("cumsum", {In({0, 3}, d)}, {.dim = 1}, fam, "empty");
  }
  t.add("cumsum", {In({300}, kF32).range(-1, 1)}, {.dim = 0}, Family::kReduce, "long");
  t.add("cumsum", {In({64}, kI64).with(Gen::kWrap)}, {.dim = 0}, Family::kExact, "wrap");
}

// ================================ matmul ================================
void matmul_cases(Table& t) {
  for (DType d : kMatmulDtypes) {
    const Family fam = Family::kMatmul;
    auto M = [&](Shape s) { return In(std::move(s), d).range(-5, 5); };
    t.add("matmul", {M({3, 4}), M({4, 5})}, {}, fam);
    t.add("matmul", {M({2, 3, 4}), M({4, 5})}, {}, fam, "batched_lhs");
    t.add("matmul", {M({3, 4}), M({2, 4, 5})}, {}, fam, "batched_rhs");
    t.add("matmul", {M({2, 1, 3, 4}), M({3, 4, 2})}, {}, fam, "bcast_batch");
    t.add("matmul", {M({4}), M({4, 5})}, {}, fam, "vec_mat");
    t.add("matmul", {M({3, 4}), M({4})}, {}, fam, "mat_vec");
    t.add("matmul", {M({4}), M({4})}, {}, fam, "dot");
    t.add("matmul", {M({2, 3, 4}), M({4})}, {}, fam, "batched_vec");
    t.add("matmul", {M({3, 0}), M({0, 2})}, {}, fam, "k0");
    t.add("matmul", {M({0, 4}), M({4, 2})}, {}, fam, "n0");
    t.add("matmul", {M({2, 0, 3}), M({3, 2})}, {}, fam, "batch_with_n0");
    t.add("matmul", {M({4, 6}).as(Layout::kTransposed), M({6, 3}).as(Layout::kStrided)}, {}, fam,
          "noncontig");
    t.add("matmul", {M({3, 4, 5}).as(Layout::kExpanded), M({5, 2})}, {}, fam, "expanded");
    t.add("matmul", {M({33, 17}), M({17, 9})}, {}, fam, "odd");
    t.add("matmul_fn", {M({2, 3}), M({3, 2})}, {}, fam);
  }
  t.add("matmul", {In({64, 64}, kF32).range(-1, 1), In({64, 64}, kF32).range(-1, 1)}, {},
        Family::kMatmul, "square64");
  t.add("matmul", {In({3, 4}, kI32).with(Gen::kWrap), In({4, 5}, kI32).with(Gen::kWrap)}, {},
        Family::kExact, "wrap");
}

// ================================ movement ================================
void movement_cases(Table& t) {
  for (size_t j = 0; j < kAnyDtype.size(); ++j) {
    DType d = kAnyDtype[j];
    const InputSpec x = In({2, 3, 4}, d).range(-9, 9).as(rotate(j));
    t.add("reshape", {x}, {.shape = {4, -1}});
    t.add("view", {x}, {.shape = {6, 4}});
    t.add("flatten", {x}, {.dim = 1, .dim2 = -1});
    t.add("permute", {x}, {.dims = {2, 0, 1}});
    t.add("transpose", {x}, {.dim = 0, .dim2 = -1});
    t.add("expand", {In({3, 1}, d).as(rotate(j))}, {.shape = {2, 3, 4}});
    t.add("squeeze", {In({1, 3, 1, 2}, d)});
    t.add("unsqueeze", {x}, {.dim = 1});
    t.add("slice", {In({5, 6}, d).as(rotate(j))}, {.dim = 1, .start = 1, .end = 5, .step = 2});
    t.add("narrow", {In({5, 6}, d).as(rotate(j))}, {.dim = 1, .start = 2, .end = 3});
    t.add("slice_assign", {In({4, 5}, d).as(rotate(j)), In({4, 2}, d)},
          {.dim = 1, .start = 1, .end = 5, .step = 2});
    t.add("cat", {In({2, 3}, d).as(rotate(j)), In({4, 3}, d), In({1, 3}, d)}, {.dim = 0});
    t.add("stack", {In({2, 3}, d), In({2, 3}, d).as(rotate(j)), In({2, 3}, d)}, {.dim = 0});
    t.add("flip", {x}, {.dims = {0, 2}});
    t.add("repeat", {In({2, 3}, d).as(rotate(j))}, {.dims = {2, 1, 3}});
  }
  // reshape / view / flatten
  t.add("reshape", {In({}, kF32)}, {.shape = {1}}, Family::kExact, "scalar0d");
  t.add("reshape", {In({1}, kF32)}, {.shape = {}}, Family::kExact, "to0d");
  t.add("reshape", {In({2, 3, 4}, kF32).as(Layout::kTransposed)}, {.shape = {24}}, Family::kExact,
        "transposed");
  t.add("reshape", {In({0, 3}, kF32)}, {.shape = {3, 0}}, Family::kExact, "empty");
  t.add("reshape", {In({6}, kI32).as(Layout::kStrided)}, {.shape = {2, 3}}, Family::kExact,
        "strided");
  t.add("reshape", {In({2, 3, 4}, kI64)}, {.shape = {2, -1, 2}}, Family::kExact, "infer_middle");
  t.add("flatten", {In({2, 3, 4}, kF32)}, {.dim = 0, .dim2 = -1}, Family::kExact, "all");
  t.add("flatten", {In({2, 3, 4, 5}, kF32).as(Layout::kTransposed)}, {.dim = 1, .dim2 = 2},
        Family::kExact, "middle");
  // permute / transpose
  t.add("permute", {In({2, 3, 4}, kF32)}, {.dims = {-1, -3, -2}}, Family::kExact, "negative");
  t.add("permute", {In({}, kF32)}, {.dims = {}}, Family::kExact, "scalar0d");
  t.add("permute", {In({2, 0, 3}, kF32)}, {.dims = {1, 2, 0}}, Family::kExact, "empty");
  t.add("permute", {In({3, 4, 5}, kF64).as(Layout::kStrided)}, {.dims = {1, 0, 2}}, Family::kExact,
        "strided");
  t.add("transpose", {In({3, 5}, kI32)}, {.dim = 1, .dim2 = 0}, Family::kExact, "2d");
  t.add("t", {In({3, 5}, kF32)});
  t.add("t", {In({3, 5}, kF16).as(Layout::kTransposed)}, {}, Family::kExact, "transposed");
  // expand
  t.add("expand", {In({1}, kF32)}, {.shape = {5}}, Family::kExact, "from1");
  t.add("expand", {In({}, kI32)}, {.shape = {2, 2}}, Family::kExact, "scalar0d");
  t.add("expand", {In({3, 1}, kF32)}, {.shape = {-1, 4}}, Family::kExact, "keep");
  t.add("expand", {In({1, 3}, kF32)}, {.shape = {0, 3}}, Family::kExact, "to_empty");
  t.add("expand", {In({3, 1}, kF64).as(Layout::kTransposed)}, {.shape = {2, 3, 5}}, Family::kExact,
        "transposed");
  t.add("expand", {In({3, 1}, kBool).as(Layout::kExpanded)}, {.shape = {3, 3}}, Family::kExact,
        "expanded");
  t.add("expand_as", {In({1, 4}, kF32), In({3, 4}, kI32)});
  // squeeze / unsqueeze
  t.add("squeeze_dim", {In({3, 1, 2}, kF32)}, {.dim = 1});
  t.add("squeeze_dim", {In({3, 2, 1}, kF32)}, {.dim = -1}, Family::kExact, "negative");
  t.add("squeeze", {In({1, 1}, kI64)}, {}, Family::kExact, "to0d");
  t.add("unsqueeze", {In({2, 3}, kF32)}, {.dim = -1}, Family::kExact, "last");
  t.add("unsqueeze", {In({2, 3}, kF32)}, {.dim = 0}, Family::kExact, "first");
  t.add("unsqueeze", {In({}, kF32)}, {.dim = 0}, Family::kExact, "scalar0d");
  t.add("unsqueeze", {In({2, 3}, kI32).as(Layout::kTransposed)}, {.dim = 1}, Family::kExact,
        "transposed");
  // slice (Python semantics: negative bounds count from the end, then clamp)
  t.add("slice", {In({5, 6}, kF32)}, {.dim = 0, .start = -3, .end = 100, .step = 1}, Family::kExact,
        "clamp_end");
  t.add("slice", {In({5, 6}, kF32)}, {.dim = -1, .start = 5, .end = 2, .step = 1}, Family::kExact,
        "empty");
  t.add("slice", {In({5, 6}, kF32)}, {.dim = 1, .start = -100, .end = -1, .step = 3},
        Family::kExact, "clamp_start");
  t.add("slice", {In({5, 6}, kF32)}, {.dim = 0, .start = 0, .end = 5, .step = 7}, Family::kExact,
        "big_step");
  t.add("slice", {In({5, 6}, kF32)}, {.dim = 1, .start = 6, .end = 10, .step = 1}, Family::kExact,
        "past_end");
  t.add("slice", {In({5, 6}, kI64).as(Layout::kTransposed)},
        {.dim = 0, .start = 1, .end = 4, .step = 1}, Family::kExact, "transposed");
  t.add("slice", {In({4, 7}, kU8).as(Layout::kStrided)},
        {.dim = 1, .start = 1, .end = -1, .step = 2}, Family::kExact, "strided");
  t.add("slice", {In({0, 4}, kF32)}, {.dim = 0, .start = 0, .end = 3, .step = 1}, Family::kExact,
        "from_empty");
  t.add("narrow", {In({4, 6}, kF32)}, {.dim = 0, .start = 1, .end = 0}, Family::kExact,
        "zero_length");
  t.add("narrow", {In({4, 6}, kF32)}, {.dim = -1, .start = 0, .end = 6}, Family::kExact, "whole");
  // slice_assign (src broadcasts to the slice)
  t.add("slice_assign", {In({4, 5}, kF32), In({1, 2}, kF32)},
        {.dim = 1, .start = 1, .end = 5, .step = 2}, Family::kExact, "bcast_row");
  t.add("slice_assign", {In({4, 5}, kI32), In({2}, kI32)},
        {.dim = 1, .start = 1, .end = 5, .step = 2}, Family::kExact, "bcast_1d");
  t.add("slice_assign", {In({4, 5}, kF64), In({}, kF64)},
        {.dim = 0, .start = 1, .end = 3, .step = 1}, Family::kExact, "scalar0d_src");
  t.add("slice_assign", {In({4, 5}, kF32), In({2, 5}, kF32)},
        {.dim = 0, .start = -2, .end = 100, .step = 1}, Family::kExact, "negative_start");
  t.add("slice_assign", {In({4, 5}, kF32), In({4, 0}, kF32)},
        {.dim = 1, .start = 3, .end = 3, .step = 1}, Family::kExact, "empty_slice");
  t.add("slice_assign",
        {In({4, 5}, kF32).as(Layout::kTransposed), In({2, 5}, kF32).as(Layout::kTransposed)},
        {.dim = 0, .start = 0, .end = 4, .step = 3}, Family::kExact, "noncontig");
  t.add("slice_assign", {In({2, 3, 4}, kBF16), In({2, 3, 1}, kBF16)},
        {.dim = -1, .start = 2, .end = 3, .step = 1}, Family::kExact, "last_dim");
  // cat / stack
  t.add("cat", {In({2, 3}, kF32), In({2, 0}, kF32), In({2, 2}, kF32)}, {.dim = 1}, Family::kExact,
        "dim1_with_empty");
  t.add("cat", {In({2, 3, 2}, kI64), In({2, 3, 1}, kI64).as(Layout::kStrided)}, {.dim = -1},
        Family::kExact, "last");
  t.add("cat", {In({3, 4}, kF16)}, {.dim = 0}, Family::kExact, "single");
  t.add("cat", {In({3, 4}, kF32).as(Layout::kTransposed), In({2, 4}, kF32).as(Layout::kExpanded)},
        {.dim = 0}, Family::kExact, "noncontig");
  t.add("cat", {In({0, 4}, kU8), In({0, 4}, kU8)}, {.dim = 0}, Family::kExact, "all_empty");
  {
    std::vector<InputSpec> many;
    for (size_t k = 0; k < 12; ++k)
      many.push_back(In({3, static_cast<int64_t>(k % 4)}, kI32).as(rotate(k)));
    t.add("cat", many, {.dim = 1}, Family::kExact, "twelve");
  }
  t.add("permute", {In({2, 3, 4, 5}, kF32).as(Layout::kComposite)}, {.dims = {3, 1, 0, 2}},
        Family::kExact, "composite");
  t.add("reshape", {In({4, 6}, kI64).as(Layout::kComposite)}, {.shape = {3, 8}}, Family::kExact,
        "composite");
  t.add("stack", {In({2, 3}, kF32), In({2, 3}, kF32)}, {.dim = -1}, Family::kExact, "last");
  t.add("stack", {In({2, 3}, kI32), In({2, 3}, kI32), In({2, 3}, kI32)}, {.dim = 1}, Family::kExact,
        "middle");
  t.add("stack", {In({}, kF64), In({}, kF64), In({}, kF64)}, {.dim = 0}, Family::kExact, "scalars");
  // flip / repeat
  t.add("flip", {In({3, 4, 5}, kF32)}, {.dims = {-1}}, Family::kExact, "last");
  t.add("flip", {In({3, 4}, kF32)}, {.dims = {}}, Family::kExact, "none");
  t.add("flip", {In({}, kI32)}, {.dims = {0}}, Family::kExact, "scalar0d");
  t.add("flip", {In({3, 4}, kI64).as(Layout::kTransposed)}, {.dims = {0, 1}}, Family::kExact,
        "transposed");
  t.add("repeat", {In({2, 3}, kF32)}, {.dims = {1, 1}}, Family::kExact, "ones");
  t.add("repeat", {In({2, 3}, kF32)}, {.dims = {0, 2}}, Family::kExact, "zero");
  t.add("repeat", {In({}, kI32)}, {.dims = {3, 2}}, Family::kExact, "scalar0d");
  t.add("repeat", {In({2, 3}, kF64).as(Layout::kTransposed)}, {.dims = {2, 2}}, Family::kExact,
        "transposed");
}

// ================================ indexing ================================
void indexing_cases(Table& t) {
  for (size_t j = 0; j < kAnyDtype.size(); ++j) {
    DType d = kAnyDtype[j];
    DType id = kIndexDtypes[j % 2];
    t.add("gather", {In({4, 5}, d).as(rotate(j)), In({4, 3}, id).range(0, 4)}, {.dim = 1});
    t.add("gather", {In({4, 5}, d), In({7, 5}, id).range(0, 3)}, {.dim = 0}, Family::kExact,
          "longer");
    t.add("index_select", {In({5, 4}, d).as(rotate(j)), In({7}, id).range(0, 4)}, {.dim = 0});
    t.add("embedding", {In({10, 4}, d), In({2, 3}, id).range(0, 9)});
  }
  for (DType id : kIndexDtypes) {
    t.add("gather", {In({4, 5}, kF32), In({2, 3}, id).range(0, 3)}, {.dim = 0}, Family::kExact,
          "smaller");
    t.add("gather", {In({3, 4, 5}, kI64), In({3, 2, 5}, id).range(0, 4)}, {.dim = -1},
          Family::kExact, "last_3d");
    t.add("gather",
          {In({4, 5}, kF32).as(Layout::kTransposed),
           In({4, 5}, id).range(0, 3).as(Layout::kTransposed)},
          {.dim = 0}, Family::kExact, "noncontig");
    t.add("gather", {In({}, kF32), In({}, id).range(0, 0)}, {.dim = 0}, Family::kExact, "scalar0d");
    t.add("gather", {In({4, 5}, kF32), In({0, 5}, id)}, {.dim = 0}, Family::kExact, "empty");
    t.add("index_select", {In({3, 5}, kF32), In({4}, id).range(0, 4)}, {.dim = -1}, Family::kExact,
          "last");
    t.add("index_select", {In({3, 5}, kI32), In({0}, id)}, {.dim = 1}, Family::kExact,
          "empty_index");
    t.add("index_select", {In({}, kF64), In({1}, id).range(0, 0)}, {.dim = 0}, Family::kExact,
          "scalar0d");
    t.add(
        "index_select",
        {In({2, 5, 3}, kF64).as(Layout::kTransposed), In({6}, id).range(0, 4).as(Layout::kStrided)},
        {.dim = 1}, Family::kExact, "noncontig");
  }
  // index_select's gradient (inputs x, index, upstream gradient): repeated indices add up.
  for (DType d : kFloats) {
    for (DType id : kIndexDtypes) {
      t.add("index_select_backward", {In({5, 4}, d), In({9}, id).range(0, 4), In({9, 4}, d)},
            {.dim = 0}, Family::kReduce);
      t.add("index_select_backward",
            {In({2, 5, 3}, d), In({6}, id).range(0, 4).as(Layout::kStrided),
             In({2, 6, 3}, d).as(Layout::kTransposed)},
            {.dim = 1}, Family::kReduce, "dim1");
      t.add("index_select_backward", {In({3, 5}, d), In({7}, id).range(0, 4), In({3, 7}, d)},
            {.dim = -1}, Family::kReduce, "last");
      t.add("index_select_backward", {In({3, 5}, d), In({0}, id), In({0, 5}, d)}, {.dim = 0},
            Family::kReduce, "empty_index");
      t.add("index_select_backward", {In({}, d), In({1}, id).range(0, 0), In({}, d)}, {.dim = 0},
            Family::kReduce, "scalar0d");
    }
  }
  for (size_t j = 0; j < kNumeric.size(); ++j) {
    DType d = kNumeric[j];
    DType id = kIndexDtypes[j % 2];
    const Family fam = is_float(d) ? Family::kReduce : Family::kExact;
    InputSpec x = In({4, 5}, d).range(-9, 9);
    if (d == kU8) x = x.with(Gen::kWrap);  // sums wrap modulo 256
    t.add(
        "scatter_add",
        {x.as(rotate(j)), In({6, 5}, id).range(0, 3), In({6, 5}, d).range(-9, 9).as(rotate(j + 1))},
        {.dim = 0}, fam);
    t.add("scatter_add", {In({4, 5}, d), In({4, 3}, id).range(0, 4), In({4, 3}, d)}, {.dim = -1},
          fam, "last");
    t.add("scatter_add", {In({4, 5}, d), In({3, 4}, id).range(0, 3), In({7, 6}, d)}, {.dim = 0},
          fam, "src_larger");
  }
  t.add("scatter_add",
        {In({3}, kF32).range(0, 0), In({500}, kI64).range(0, 2), In({500}, kF32).range(-1, 1)},
        {.dim = 0}, Family::kReduce, "many_duplicates");
  t.add("scatter_add", {In({}, kI32), In({}, kI64).range(0, 0), In({}, kI32)}, {.dim = 0},
        Family::kExact, "scalar0d");
  t.add("scatter_add", {In({4, 5}, kF64), In({0, 5}, kI64), In({2, 5}, kF64)}, {.dim = 0},
        Family::kExact, "empty_index");
  for (DType d : {kI32, kI64, kU8}) {
    t.add("one_hot", {In({5}, d).range(0, 5)}, {.n = 6});
    t.add("one_hot", {In({2, 3}, d).range(0, 3)}, {.n = 4}, Family::kExact, "2d");
    t.add("one_hot", {In({}, d).range(0, 2)}, {.n = 3}, Family::kExact, "scalar0d");
  }
  t.add("one_hot", {In({0}, kI64)}, {.n = 2}, Family::kExact, "empty");
  t.add("one_hot", {In({3, 4}, kI32).range(0, 1).as(Layout::kTransposed)}, {.n = 2}, Family::kExact,
        "transposed");
  t.add("embedding", {In({6, 3}, kF32).as(Layout::kTransposed), In({5}, kI64).range(0, 5)}, {},
        Family::kExact, "noncontig");
  t.add("embedding", {In({6, 3}, kF32), In({}, kI64).range(0, 5)}, {}, Family::kExact, "scalar0d");
}

// ================================ neural ================================
void neural_cases(Table& t) {
  for (DType d : kFloats) {
    for (const char* op : {"softmax", "log_softmax"}) {
      t.add(op, {In({3, 5}, d).range(-3, 3)}, {.dim = -1}, Family::kNeural);
      t.add(op, {In({3, 5}, d).range(-3, 3)}, {.dim = 0}, Family::kNeural, "dim0");
      t.add(op, {In({2, 3, 4}, d).range(-3, 3).as(Layout::kTransposed)}, {.dim = 1},
            Family::kNeural, "transposed");
      t.add(op, {In({4, 6}, d).range(-80, 80)}, {.dim = 1}, Family::kNeural, "large_values");
      t.add(op, {In({}, d)}, {.dim = 0}, Family::kNeural, "scalar0d");
      t.add(op, {In({0, 4}, d)}, {.dim = 1}, Family::kNeural, "empty");
      t.add(op, {In({2, 3}, d).as(Layout::kExpanded)}, {.dim = 0}, Family::kNeural, "equal_values");
    }
    // Masked scores: -inf entries give 0 (softmax) / -inf (log_softmax); a row of only -inf
    // gives NaN by the max-subtracted formula (-inf - -inf).
    t.add("softmax", {In({40, 4}, d).with(Gen::kWithNegInf)}, {.dim = 1}, Family::kNeural,
          "neg_inf");
    t.add("log_softmax", {In({40, 4}, d).with(Gen::kWithNegInf)}, {.dim = 1}, Family::kNeural,
          "neg_inf");
    t.add("softmax", {In({4, 5, 6}, d).as(Layout::kComposite)}, {.dim = 0}, Family::kNeural,
          "composite");
    t.add("layer_norm", {In({6, 8}, d).range(1, 1), In({8}, d), In({8}, d)}, {.shape = {8}},
          Family::kNeural, "constant_rows");
    t.add("conv2d", {In({1, 2, 10, 10}, d).range(-1, 1), In({2, 2, 2, 2}, d).range(-1, 1)},
          {.stride = {3, 3}, .padding = {1, 1}, .dilation = {2, 2}}, Family::kMatmul,
          "stride_gt_kernel");
    t.add(
        "conv2d",
        {In({3, 2, 6, 6}, d).range(-1, 1).as(Layout::kExpanded), In({2, 2, 3, 3}, d).range(-1, 1)},
        {.stride = {1, 1}, .padding = {0, 0}, .dilation = {1, 1}}, Family::kMatmul, "expanded");
    t.add("softmax_fn", {In({2, 7}, d)}, {.dim = 1}, Family::kNeural);
    t.add("log_softmax_fn", {In({2, 7}, d)}, {.dim = -1}, Family::kNeural);

    auto X = [&](Shape s) { return In(std::move(s), d).range(-1, 1); };
    const Family fam = Family::kMatmul;
    const std::vector<int64_t> one = {1, 1}, zero = {0, 0};
    t.add("conv2d", {X({2, 3, 7, 7}), X({4, 3, 3, 3}), X({4})},
          {.stride = one, .padding = zero, .dilation = one}, fam);
    t.add("conv2d", {X({2, 3, 7, 7}), X({4, 3, 3, 3})},
          {.stride = one, .padding = zero, .dilation = one}, fam, "no_bias");
    t.add("conv2d", {X({1, 3, 8, 9}), X({2, 3, 3, 3}), X({2})},
          {.stride = {2, 2}, .padding = {1, 1}, .dilation = one}, fam, "stride_pad");
    t.add("conv2d", {X({1, 2, 9, 9}), X({3, 2, 3, 3})},
          {.stride = one, .padding = {2, 2}, .dilation = {2, 2}}, fam, "dilation");
    t.add("conv2d", {X({1, 6, 6, 6}), X({6, 2, 3, 3}), X({6})},
          {.stride = one, .padding = {1, 1}, .dilation = one, .groups = 3}, fam, "groups");
    t.add("conv2d", {X({2, 4, 5, 5}), X({4, 1, 3, 3})},
          {.stride = one, .padding = {1, 1}, .dilation = one, .groups = 4}, fam, "depthwise");
    t.add("conv2d", {X({1, 3, 6, 7}), X({2, 3, 2, 3}), X({2})},
          {.stride = {1, 2}, .padding = {1, 0}, .dilation = {2, 1}}, fam, "rect");
    t.add("conv2d", {X({2, 3, 4, 4}), X({5, 3, 1, 1})},
          {.stride = one, .padding = zero, .dilation = one}, fam, "1x1");
    t.add("conv2d", {X({2, 3, 5, 6}).as(Layout::kTransposed), X({2, 3, 3, 3}).as(Layout::kStrided)},
          {.stride = one, .padding = {1, 1}, .dilation = one}, fam, "noncontig");
    t.add("conv2d", {X({1, 1, 3, 3}), X({1, 1, 3, 3})},
          {.stride = one, .padding = zero, .dilation = one}, fam, "1x1_output");
    // N, C and O may be 0.
    t.add("conv2d", {X({0, 3, 5, 5}), X({2, 3, 3, 3}), X({2})},
          {.stride = one, .padding = zero, .dilation = one}, fam, "n0");
    t.add("conv2d", {X({1, 3, 5, 5}), X({0, 3, 3, 3}), X({0})},
          {.stride = one, .padding = zero, .dilation = one}, fam, "o0");
    t.add("conv2d", {X({1, 0, 5, 5}), X({2, 0, 3, 3}), X({2})},
          {.stride = one, .padding = zero, .dilation = one}, fam, "c0");

    for (const char* op : {"max_pool2d", "avg_pool2d"}) {
      const Family pf = std::string(op) == "max_pool2d" ? Family::kExact : Family::kReduce;
      t.add(op, {X({2, 3, 6, 6}).with(Gen::kDistinct)}, {.kernel = {2, 2}, .padding = zero}, pf);
      t.add(op, {X({2, 3, 7, 6})}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}, pf,
            "pad");
      t.add(op, {X({1, 2, 5, 7})}, {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}}, pf,
            "rect");
      t.add(op, {X({1, 2, 5, 5}).range(-3, -1)},
            {.kernel = {3, 3}, .stride = {1, 1}, .padding = {1, 1}}, pf, "negative_pad");
      t.add(op, {X({2, 3, 6, 5}).as(Layout::kTransposed)},
            {.kernel = {2, 2}, .stride = {2, 1}, .padding = zero}, pf, "transposed");
    }
    t.add("adaptive_avg_pool2d", {X({2, 3, 7, 5})}, {.shape = {3, 2}}, Family::kNeural);
    t.add("adaptive_avg_pool2d", {X({2, 3, 7, 5})}, {.shape = {1, 1}}, Family::kNeural, "global");
    t.add("adaptive_avg_pool2d", {X({1, 2, 7, 5})}, {.shape = {7, 5}}, Family::kNeural, "identity");
    t.add("adaptive_avg_pool2d", {X({1, 2, 3, 3})}, {.shape = {5, 4}}, Family::kNeural, "upsample");
    t.add("adaptive_avg_pool2d", {X({1, 2, 6, 8}).as(Layout::kStrided)}, {.shape = {4, 3}},
          Family::kNeural, "strided");

    t.add("layer_norm", {X({3, 4, 5}), X({5}), X({5})}, {.shape = {5}}, Family::kNeural);
    t.add("layer_norm", {X({3, 4, 5}), X({4, 5}), X({4, 5})}, {.shape = {4, 5}}, Family::kNeural,
          "two_dims");
    t.add("layer_norm", {X({3, 4, 5})}, {.shape = {5}}, Family::kNeural, "no_affine");
    t.add("layer_norm", {X({3, 4, 5}), X({5})}, {.shape = {5}}, Family::kNeural, "weight_only");
    t.add("layer_norm", {X({3, 4, 5}), X({5})}, {.shape = {5}, .flag = true}, Family::kNeural,
          "bias_only");
    t.add("layer_norm", {X({6, 8}), X({8}), X({8})}, {.shape = {8}, .eps = 0.1}, Family::kNeural,
          "eps");
    t.add("layer_norm", {X({6, 8}).as(Layout::kTransposed), X({8}), X({8})}, {.shape = {8}},
          Family::kNeural, "transposed");
    t.add("layer_norm", {X({2, 3, 4})}, {.shape = {2, 3, 4}}, Family::kNeural, "all_dims");
    // layer_norm's gradients: inputs x, the upstream gradient, then weight and bias as above.
    // 400 rows of 64 are 3 chunks of the CPU kernel's dweight/dbias partials.
    const std::string lnb = "layer_norm_backward";
    const Family nf = Family::kNeural;
    t.add(lnb, {X({3, 4, 5}), X({3, 4, 5}), X({5}), X({5})}, {.shape = {5}}, nf);
    t.add(lnb, {X({3, 4, 5}), X({3, 4, 5}), X({4, 5}), X({4, 5})}, {.shape = {4, 5}}, nf,
          "two_dims");
    t.add(lnb, {X({3, 4, 5}), X({3, 4, 5})}, {.shape = {5}}, nf, "no_affine");
    t.add(lnb, {X({3, 4, 5}), X({3, 4, 5}), X({5})}, {.shape = {5}}, nf, "weight_only");
    t.add(lnb, {X({3, 4, 5}), X({3, 4, 5}), X({5})}, {.shape = {5}, .flag = true}, nf, "bias_only");
    t.add(lnb, {X({6, 8}), X({6, 8}), X({8}), X({8})}, {.shape = {8}, .eps = 0.1}, nf, "eps");
    t.add(lnb, {X({6, 8}).as(Layout::kTransposed), X({6, 8}).as(Layout::kStrided), X({8}), X({8})},
          {.shape = {8}}, nf, "noncontig");
    t.add(lnb, {X({2, 3, 4}), X({2, 3, 4}), X({2, 3, 4})}, {.shape = {2, 3, 4}}, nf, "all_dims");
    t.add(lnb, {In({6, 8}, d).range(1, 1), X({6, 8}), X({8}), X({8})}, {.shape = {8}}, nf,
          "constant_rows");
    t.add(lnb, {X({0, 5}), X({0, 5}), X({5}), X({5})}, {.shape = {5}}, nf, "no_rows");
    t.add(lnb, {X({400, 64}), X({400, 64}), X({64}), X({64})}, {.shape = {64}}, nf, "chunks");

    // Attention: query, key, value (then the upstream gradient for the backward), then the mask;
    // flag causal, s0 the scale. Tq 70 and Tk 300 cross the CPU kernel's query (64) and key (256)
    // blocks without filling them; a 3-key mask leaves some rows with no key (zeros).
    for (const char* op :
         {"scaled_dot_product_attention", "scaled_dot_product_attention_backward"}) {
      const bool bw = std::string(op) != "scaled_dot_product_attention";
      auto qkv = [&](Shape q, Shape k, Shape v) {
        std::vector<InputSpec> in = {X(q), X(k), X(v)};
        if (bw) {
          q.back() = v.back();
          in.push_back(X(q));
        }
        return in;
      };
      auto with = [](std::vector<InputSpec> in, InputSpec extra) {
        in.push_back(std::move(extra));
        return in;
      };
      const Family fam = Family::kMatmul;
      t.add(op, qkv({2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 6}), {}, fam);
      t.add(op, qkv({2, 9, 4}, {2, 9, 4}, {2, 9, 3}), {.flag = true}, fam, "causal");
      t.add(op, qkv({1, 4, 6}, {1, 7, 6}, {1, 7, 6}), {.flag = true}, fam, "causal_rect");
      t.add(op, qkv({5, 4}, {7, 4}, {7, 2}), {.s0 = Scalar(0.3)}, fam, "rank2_scale");
      t.add(op, with(qkv({2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}), In({5, 7}, kBool)), {}, fam,
            "mask");
      t.add(op, with(qkv({2, 3, 5, 4}, {2, 3, 7, 4}, {2, 3, 7, 4}), In({2, 1, 5, 7}, kBool)),
            {.flag = true}, fam, "mask_causal");
      t.add(op, with(qkv({2, 6, 4}, {2, 3, 4}, {2, 3, 5}), In({6, 3}, kBool)), {}, fam,
            "mask_empty_rows");
      t.add(op, with(qkv({1, 2, 70, 8}, {1, 2, 300, 8}, {1, 2, 300, 8}), In({2, 1, 300}, kBool)),
            {.flag = true}, fam, "blocks_mask_causal");
      t.add(op, qkv({1, 70, 8}, {1, 300, 8}, {1, 300, 8}), {}, fam, "blocks");
      t.add(op, qkv({130, 8}, {130, 8}, {130, 8}), {.flag = true}, fam, "blocks_causal");
      // Upstream gradient of a [2, 5, 3] output, for the two cases below that list their inputs.
      auto grad = [&](std::vector<InputSpec> in) {
        return bw ? with(std::move(in), X({2, 5, 3})) : in;
      };
      t.add(op,
            grad({In({2, 5, 4}, d).range(-30, 30), In({2, 6, 4}, d).range(-30, 30), X({2, 6, 3})}),
            {}, fam, "large_scores");
      t.add(op,
            grad({X({2, 5, 4}).as(Layout::kTransposed), X({2, 6, 4}).as(Layout::kStrided),
                  X({2, 6, 3}).as(Layout::kExpanded)}),
            {}, fam, "layouts");
      t.add(op, qkv({2, 5, 4}, {2, 0, 4}, {2, 0, 3}), {}, fam, "no_keys");
      t.add(op, qkv({2, 0, 4}, {2, 6, 4}, {2, 6, 3}), {}, fam, "no_queries");
      t.add(op, qkv({2, 5, 0}, {2, 6, 0}, {2, 6, 3}), {}, fam, "d0");
    }
  }
}

void quantization_cases(Table& t);  // below, beside the large cases

std::vector<OpCase> build_cases() {
  Table t;
  creation_cases(t);
  unary_cases(t);
  binary_cases(t);
  scalar_cases(t);
  select_cases(t);
  reduction_cases(t);
  matmul_cases(t);
  movement_cases(t);
  indexing_cases(t);
  neural_cases(t);
  quantization_cases(t);
  return t.take();
}

// docs/ops.md, "Quantization": axis .dim, block .n, quantized dtype .dtype, Q4_0 when .flag.
void quantization_cases(Table& t) {
  const Family E = Family::kExact, M = Family::kMatmul;
  const InputSpec x = In({4, 6}, kF32).range(-3, 3);
  const InputSpec s0 = In({}, kF32).range(0.01, 0.05);
  for (DType d : {kI8, kU8}) {
    t.add("quantize", {x, s0}, {.dtype = d}, E, "per_tensor");
    t.add("quantize",
          {x, In({1}, kF32).range(0.02, 0.03),
           In({1}, d).range(d == kI8 ? -10 : 100, d == kI8 ? 10 : 150)},
          {.dtype = d}, E, "zero_point");
    t.add(
        "quantize",
        {In({3, 4, 5}, kF32).range(-2, 2), In({4}, kF32).range(0.01, 0.1), In({4}, d).range(0, 20)},
        {.dim = 1, .dtype = d}, E, "per_channel");
    t.add("quantize", {In({5, 3}, kF32).as(Layout::kTransposed), In({5}, kF32).range(0.01, 0.1)},
          {.dim = 0, .dtype = d}, E, "axis0_transposed");
    t.add("quantize",
          {In({2, 70}, kF32).range(-2, 2), In({2, 3}, kF32).range(0.01, 0.1),
           In({2, 3}, d).range(0, 9)},
          {.dim = -1, .n = 32, .dtype = d}, E, "per_block");
    t.add("quantize", {In({24}, kF32).with(Gen::kHalves).range(-4, 4), In({}, kF32).range(1, 1)},
          {.dtype = d}, E, "ties_to_even");
    t.add("quantize", {In({16}, kF32).with(Gen::kSpecial), In({}, kF32).range(0.5, 0.5)},
          {.dtype = d}, E, "special");
    t.add("dequantize", {In({4, 6}, d).with(Gen::kWrap), In({}, kF32).range(0.01, 0.1)}, {}, E,
          "per_tensor");
    t.add("dequantize",
          {In({3, 4, 5}, d).with(Gen::kWrap), In({4}, kF32).range(0.01, 0.1),
           In({4}, d).with(Gen::kWrap)},
          {.dim = 1}, E, "per_channel");
    t.add("dequantize",
          {In({2, 70}, d).with(Gen::kWrap).as(Layout::kStrided), In({2, 3}, kF32).range(0.01, 0.1),
           In({2, 3}, d).with(Gen::kWrap)},
          {.dim = 1, .n = 32}, E, "per_block");
  }
  t.add("dequantize",
        {In({4, 6}, kI32).with(Gen::kWrap), In({6}, kF32).range(0.01, 0.1),
         In({6}, kI32).with(Gen::kWrap)},
        {.dim = -1}, E, "i32");
  for (bool q4 : {false, true}) {
    const std::string f = q4 ? "q4_0" : "q8_0";
    t.add("pack_blocks", {In({3, 64}, kF32).range(-2, 2)}, {.flag = q4}, E, f);
    t.add("pack_blocks", {In({2, 32}, kF32).range(0, 0)}, {.flag = q4}, E, f + "_zeros");
    t.add("pack_blocks", {In({2, 2, 32}, kF32).with(Gen::kHalves).as(Layout::kTransposed)},
          {.flag = q4}, E, f + "_halves");
    t.add("unpack_blocks", {In({3, q4 ? 36 : 68}, kU8).with(Gen::kWrap)}, {.flag = q4}, E, f);
    t.add("linear_blocks", {In({5, 64}, kF32), In({3, 64}, kF32), In({3}, kF32)}, {.flag = q4}, M,
          f);
    t.add("linear_blocks", {In({1, 96}, kF32).as(Layout::kStrided), In({7, 96}, kF32)},
          {.flag = q4}, M, f + "_row");
    t.add("linear_blocks", {In({0, 32}, kF32), In({2, 32}, kF32)}, {.flag = q4}, M, f + "_empty");
  }
  t.add("linear_int8",
        {In({5, 64}, kF32), In({3, 64}, kI8).range(-127, 127), In({3}, kF32).range(0.001, 0.01),
         In({3}, kF32)},
        {}, M);
  t.add("linear_int8",
        {In({2, 40}, kF32).range(0.5, 2).as(Layout::kTransposed), In({6, 40}, kI8).range(-127, 127),
         In({6}, kF32).range(0.001, 0.01)},
        {}, M, "positive");
  t.add("linear_int8",
        {In({3, 16}, kF32).range(-2, -1), In({4, 16}, kI8).range(-127, 127),
         In({4}, kF32).range(0.001, 0.01)},
        {}, M, "negative");
}

// Large inputs: past the chunk size of every parallel kernel, so that work is split across
// threads (>= 1M elements for elementwise ops and reductions, 256x256 matmul, 8x16x32x32 conv).
std::vector<OpCase> build_large_cases() {
  Table t;
  const Shape big = {1024, 1024};
  const Family E = Family::kExact;
  t.add("exp", {In(big, kF32)}, {}, E);
  t.add("sqrt", {In(big, kF64).range(0, 9)}, {}, E);
  t.add("gelu", {In(big, kF32)}, {}, E);
  t.add("neg", {In(big, kI32).with(Gen::kWrap)}, {}, E);
  t.add("logical_not", {In(big, kU8).with(Gen::kTies)}, {}, E);
  t.add("add", {In(big, kF32), In({1024}, kF32)}, {}, E, "bcast");
  t.add("mul", {In(big, kI64).with(Gen::kWrap), In(big, kI64).with(Gen::kWrap)}, {}, E);
  t.add("div", {In(big, kI32), In(big, kI32).with(Gen::kNonZero)}, {}, E);
  t.add("pow", {In(big, kF32).range(0.1, 3), In(big, kF32)}, {}, E);
  t.add("remainder", {In(big, kF64).range(-9, 9), In(big, kF64).with(Gen::kNonZero)}, {}, E);
  t.add("lt", {In(big, kF32).as(Layout::kTransposed), In(big, kF32)}, {}, E, "transposed");
  t.add("mul_scalar", {In(big, kF32)}, {.s0 = F(0.1)}, E);
  t.add("where", {In(big, kBool), In(big, kF32), In({1024, 1}, kF32)}, {}, E);
  t.add("clamp", {In(big, kF32).with(Gen::kWithNaN)}, {.s0 = F(-1), .s1 = F(1)}, E);
  t.add("masked_fill", {In(big, kI32), In({1024}, kBool)}, {.s0 = I(-1)}, E);
  t.add("cast", {In(big, kF32).range(-1e5, 1e5)}, {.dtype = kF16}, E, "to_f16");
  t.add("cast", {In(big, kF64).range(-3e9, 3e9)}, {.dtype = kI32}, E, "to_i32");
  for (const std::string op : {"sum", "mean", "prod", "max", "min", "argmax", "argmin"}) {
    DType d = op == "prod" ? kF64 : kF32;
    InputSpec x = In(big, d).range(op == "prod" ? 0.999 : -1, op == "prod" ? 1.001 : 1);
    t.add(op, {x}, {}, E);
    t.add(op + "_dim", {x}, {.dim = 0}, E);
    t.add(op + "_dim", {x}, {.dim = 1}, E);
  }
  t.add("sum", {In(big, kI64).with(Gen::kWrap)}, {}, E);
  t.add("mean_dims", {In({64, 128, 128}, kF32)}, {.dims = {0, 2}}, E);
  t.add("cumsum", {In(big, kF32)}, {.dim = 1}, E);
  t.add("cumsum", {In(big, kF64)}, {.dim = 0}, E);
  t.add("cumsum", {In(big, kI32)}, {.dim = 1}, E);
  t.add("matmul", {In({256, 256}, kF32), In({256, 256}, kF32)}, {}, E, "256");
  t.add("matmul", {In({256, 256}, kF64), In({256, 256}, kF64)}, {}, E, "256");
  t.add("matmul", {In({8, 64, 64}, kF32), In({64, 64}, kF32)}, {}, E, "batched");
  t.add("matmul", {In({256, 256}, kI32).range(-9, 9), In({256, 256}, kI32).range(-9, 9)}, {}, E,
        "256");
  t.add("matmul", {In({256, 512}, kF32).as(Layout::kTransposed), In({512, 128}, kF32)}, {}, E,
        "transposed");
  // Large enough that b is first reordered to the kernel's blocked layout (matmul.cc, reorders_b).
  t.add("matmul", {In({256, 512}, kF32), In({512, 1536}, kF32)}, {}, E, "blocked_b");
  t.add("matmul", {In({2, 128, 512}, kF32), In({512, 1536}, kF32)}, {}, E,
        "batches_as_rows_blocked_b");
  t.add("matmul", {In({2, 256, 512}, kF32), In({2, 512, 1536}, kF32)}, {}, E, "batched_blocked_b");
  // Shapes where a GEMM library may split the reduction dim k across threads.
  t.add("matmul", {In({8, 131072}, kF32), In({131072, 8}, kF32)}, {}, E, "long_k");
  t.add("matmul", {In({1, 65536}, kF32), In({65536, 64}, kF32)}, {}, E, "row_long_k");
  t.add("permute", {In({64, 128, 128}, kF32)}, {.dims = {2, 0, 1}}, E);
  t.add("cat", {In({512, 1024}, kF32), In({600, 1024}, kF32)}, {.dim = 0}, E);
  t.add("cat", {In({1024, 512}, kI64), In({1024, 600}, kI64)}, {.dim = 1}, E);
  t.add("flip", {In(big, kF32)}, {.dims = {0, 1}}, E);
  t.add("repeat", {In({512, 512}, kF32)}, {.dims = {2, 2}}, E);
  t.add("slice", {In({2048, 1024}, kF32)}, {.dim = 0, .start = 1, .end = 2048, .step = 2}, E);
  t.add("slice_assign", {In(big, kF32), In({1024, 300}, kF32)},
        {.dim = 1, .start = 100, .end = 1000, .step = 3}, E);
  t.add("expand", {In({1024, 1}, kF32)}, {.shape = {1024, 1024}}, E);
  t.add("gather", {In(big, kF32), In(big, kI64).range(0, 1023)}, {.dim = 1}, E);
  t.add("scatter_add",
        {In({1024, 64}, kF32), In({16384, 64}, kI64).range(0, 1023), In({16384, 64}, kF32)},
        {.dim = 0}, E);
  t.add("index_select", {In(big, kF32), In({2048}, kI32).range(0, 1023)}, {.dim = 0}, E);
  t.add("index_select_backward",
        {In({1000, 64}, kF32), In({20000}, kI64).range(0, 999), In({20000, 64}, kF32)}, {.dim = 0},
        E);
  t.add("one_hot", {In({1 << 17}, kI64).range(0, 9)}, {.n = 10}, E);
  t.add("softmax", {In(big, kF32)}, {.dim = -1}, E);
  t.add("softmax", {In(big, kF32)}, {.dim = 0}, E, "dim0");
  t.add("log_softmax", {In(big, kF64)}, {.dim = -1}, E);
  t.add("layer_norm", {In(big, kF32), In({1024}, kF32), In({1024}, kF32)}, {.shape = {1024}}, E);
  // A transformer's [tokens, d_model]: 32 chunks of dweight/dbias partials.
  t.add("layer_norm_backward",
        {In({2048, 192}, kF32), In({2048, 192}, kF32), In({192}, kF32), In({192}, kF32)},
        {.shape = {192}}, E);
  t.add("gelu_backward", {In(big, kF32), In(big, kF32)}, {}, E);
  const std::vector<int64_t> one = {1, 1};
  t.add("conv2d", {In({8, 16, 32, 32}, kF32), In({16, 16, 3, 3}, kF32), In({16}, kF32)},
        {.stride = one, .padding = one, .dilation = one}, E);
  t.add("conv2d", {In({8, 16, 32, 32}, kF64), In({16, 16, 3, 3}, kF64)},
        {.stride = one, .padding = one, .dilation = one}, E);
  t.add("conv2d", {In({8, 16, 32, 32}, kF32), In({16, 4, 3, 3}, kF32)},
        {.stride = {2, 2}, .padding = one, .dilation = one, .groups = 4}, E, "groups");
  t.add("conv2d", {In({1, 512, 8, 8}, kF32), In({8, 512, 3, 3}, kF32)},
        {.stride = one, .padding = one, .dilation = one}, E, "many_channels");
  // Attention: past the thresholds where oneDNN's threads split the work (and 8 batch-heads for
  // the backward's tasks), with a causal mask and an explicit one.
  const Shape qkv = {2, 4, 300, 64};
  t.add("scaled_dot_product_attention", {In(qkv, kF32), In(qkv, kF32), In(qkv, kF32)},
        {.flag = true}, E);
  t.add("scaled_dot_product_attention_backward",
        {In(qkv, kF32), In(qkv, kF32), In(qkv, kF32), In(qkv, kF32), In({300, 300}, kBool)},
        {.flag = true}, E);
  t.add("max_pool2d", {In({8, 16, 64, 64}, kF32)},
        {.kernel = {3, 3}, .stride = {2, 2}, .padding = one}, E);
  t.add("avg_pool2d", {In({8, 16, 64, 64}, kF32)},
        {.kernel = {3, 3}, .stride = {2, 2}, .padding = one}, E);
  t.add("adaptive_avg_pool2d", {In({8, 16, 64, 64}, kF32)}, {.shape = {7, 7}}, E);
  t.add("full", {}, {.shape = big, .s0 = F(0.5), .dtype = kF32}, E);
  t.add("arange", {}, {.s0 = I(0), .s1 = I(1 << 20), .s2 = F(0.5), .dtype = kF32}, E);
  t.add("eye", {}, {.n = 1024, .dtype = kF64}, E);
  t.add("quantize", {In(big, kF32), In({1024}, kF32).range(0.01, 0.1)}, {.dim = 0, .dtype = kI8},
        E);
  t.add("dequantize", {In(big, kU8).with(Gen::kWrap), In({1024, 32}, kF32).range(0.01, 0.1)},
        {.dim = 1, .n = 32}, E);
  t.add("pack_blocks", {In({512, 1024}, kF32)}, {.flag = true}, E);
  t.add("unpack_blocks", {In({512, 34 * 32}, kU8).with(Gen::kWrap)}, {}, E);
  t.add("linear_blocks", {In({7, 512}, kF32), In({600, 512}, kF32)}, {.flag = false}, E, "q8_0");
  t.add("linear_blocks", {In({3, 512}, kF32), In({600, 512}, kF32)}, {.flag = true}, E, "q4_0");
  t.add("linear_int8",
        {In({64, 512}, kF32), In({300, 512}, kI8).range(-127, 127),
         In({300}, kF32).range(0.001, 0.01)},
        {}, E);
  return t.take();
}

}  // namespace

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> cases = build_cases();
  return cases;
}

const std::vector<OpCase>& large_op_cases() {
  static const std::vector<OpCase> cases = build_large_cases();
  return cases;
}

}  // namespace tw::optest
