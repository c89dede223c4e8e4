// Differential tests: the CPU backend against the torch backend (PyTorch's kernels) on identical
// random inputs. Each test draws cases for one family of ops from a fixed seed: random shapes
// (0-d, empty and size-1 dims included), broadcast patterns, memory layouts (contiguous,
// transposed, strided, expanded), dtypes and value distributions (uniform, ties, NaN, infinities,
// limits of the dtype, values that overflow), runs each case on Device::cpu() and on
// Device::torch() through the public API, and compares:
//   - integer and bool results exactly;
//   - float results of copies, selections, comparisons, casts, rounding and min/max exactly
//     (NaN matches NaN; the sign of a zero must match, except for the max/min reductions,
//     which may return either of two equal zeros);
//   - other float results within twice the op suite's tolerance for the op's family (op_cases.h:
//     each backend is within one tolerance of the exact value, so within two of the other);
//   - errors: when one backend fails (an index out of range, integer remainder by zero), the
//     other must fail with the same message.
// A mismatch prints the op, its attributes, every input (shape, dtype, layout, generator), the
// result's dtype and shape, and the first differing element with both values.
//
// The random ops (rand, randn, bernoulli) must give identical bits: both backends use
// tensorwire's counter-based generator.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>

#include "tensorwire/autograd.h"
#include "tensorwire/tensorwire.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

// Cases per family (TW_DIFF_CASES overrides it, to search harder); a failing case names its
// index, and its draw depends only on the family's name and the index.
int cases_per_family() {
  static const int n = [] {
    const char* e = std::getenv("TW_DIFF_CASES");
    return e && std::atoi(e) > 0 ? std::atoi(e) : 120;
  }();
  return n;
}

const std::vector<DType> kNumeric = {kF32, kF64, kI32, kI64, kU8};
const std::vector<DType> kCompute = {kF32, kF64, kI32, kI64, kU8, kBool};
const std::vector<DType> kAny = {kF32, kF64, kI32, kI64, kU8, kBool, kF16, kBF16};
const std::vector<DType> kFloats = {kF32, kF64};

uint32_t seed_of(const std::string& s, int k) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  return h ^ (static_cast<uint32_t>(k) * 2654435761u);
}

// Draws the parts of a case.
class Draw {
 public:
  explicit Draw(uint32_t seed) : rng_(seed) {}
  int64_t between(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T>
  const T& pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(between(0, static_cast<int64_t>(v.size()) - 1))];
  }
  uint32_t seed() { return static_cast<uint32_t>(rng_()); }

  // Rank 0 to max_rank, dims 1 to max_dim; now and then a dim of size 0.
  Shape shape(int64_t min_rank = 0, int64_t max_rank = 4, int64_t max_dim = 5) {
    Shape s(static_cast<size_t>(between(min_rank, max_rank)));
    for (int64_t& d : s) d = chance(0.04) ? 0 : between(1, max_dim);
    return s;
  }
  // A shape that broadcasts with s: some dims set to 1, some leading dims dropped.
  Shape broadcast_partner(const Shape& s) {
    Shape r(s.begin() + between(0, static_cast<int64_t>(s.size())), s.end());
    if (chance(0.3)) r = Shape(s.begin() + between(0, static_cast<int64_t>(s.size())), s.end());
    for (int64_t& d : r) {
      if (chance(0.35)) d = 1;
    }
    return chance(0.2) ? s : r;
  }
  Layout layout() {
    static const std::vector<Layout> kAll = {Layout::kContig,     Layout::kContig,
                                             Layout::kTransposed, Layout::kStrided,
                                             Layout::kExpanded,   Layout::kComposite};
    return pick(kAll);
  }
  // A value generator; `edges` adds the ones with infinities, NaN and dtype limits.
  Gen gen(bool edges = true) {
    static const std::vector<Gen> kTame = {Gen::kUniform, Gen::kUniform,  Gen::kHalves,
                                           Gen::kTies,    Gen::kIntegral, Gen::kEdgeFinite};
    static const std::vector<Gen> kWild = {Gen::kSpecial, Gen::kEdge, Gen::kWithNaN, Gen::kWrap};
    return edges && chance(0.35) ? pick(kWild) : pick(kTame);
  }
  InputSpec input(Shape s, DType d, bool edges = true) {
    InputSpec in{std::move(s), d, gen(edges)};
    in.lo = -static_cast<double>(between(1, 8));
    in.hi = static_cast<double>(between(1, 8));
    in.layout = layout();
    return in;
  }
  Scalar scalar() {
    static const std::vector<double> kFloatValues = {
        0.0, -0.0, 0.5, -1.5, 2.5, 3.0, 1e10, -1e-3, INFINITY, -INFINITY, NAN, 255.5, 1e300};
    static const std::vector<int64_t> kIntValues = {
        0, 1, -1, 2, 3, -7, 127, 255, 256, 300, -129, int64_t{1} << 40, INT64_MIN, INT64_MAX};
    return chance(0.5) ? Scalar(pick(kFloatValues)) : Scalar(pick(kIntValues));
  }
  int64_t dim(int64_t rank) {
    return rank == 0 ? pick(std::vector<int64_t>{0, -1}) : between(-rank, rank - 1);
  }

 private:
  std::mt19937 rng_;
};

std::string layout_name(Layout l) {
  switch (l) {
    case Layout::kContig: return "contiguous";
    case Layout::kTransposed: return "transposed";
    case Layout::kStrided: return "strided";
    case Layout::kExpanded: return "expanded";
    case Layout::kComposite: return "composite";
  }
  return "?";
}

std::string ints_str(const std::vector<int64_t>& v) { return ref::shape_str(v); }

std::string scalar_str(const std::optional<Scalar>& s) {
  if (!s) return "none";
  std::ostringstream os;
  os.precision(17);
  if (s->is_float)
    os << s->f;
  else
    os << s->i << " (int)";
  return os.str();
}

std::string describe(const OpCase& c) {
  std::ostringstream os;
  os << "op " << c.op << " (case " << c.name << ")\n  inputs:";
  for (const InputSpec& in : c.inputs) {
    os << " " << dtype_name(in.dtype) << ref::shape_str(in.shape) << " " << layout_name(in.layout)
       << " gen " << static_cast<int>(in.gen) << " [" << in.lo << ", " << in.hi << "];";
  }
  const Attrs& a = c.attrs;
  os << "\n  attrs: dim " << a.dim << " dim2 " << a.dim2 << " dims " << ints_str(a.dims)
     << " shape " << ints_str(a.shape) << " keepdim " << a.keepdim << " reverse " << a.reverse
     << " start " << a.start << " end " << a.end << " step " << a.step << " n " << a.n << " s0 "
     << scalar_str(a.s0) << " s1 " << scalar_str(a.s1) << " s2 " << scalar_str(a.s2) << " dtype "
     << (a.dtype ? std::string(dtype_name(*a.dtype)) : "none") << " eps " << a.eps << " flag "
     << a.flag;
  if (!a.kernel.empty() || !a.stride.empty()) {
    os << " kernel " << ints_str(a.kernel) << " stride " << ints_str(a.stride) << " padding "
       << ints_str(a.padding) << " dilation " << ints_str(a.dilation) << " groups " << a.groups;
  }
  return os.str();
}

// What a case gives on one device: its results (one per output), or the error it failed with.
struct Outcome {
  bool failed = false;
  std::string error;
  std::vector<ref::HostTensor> values;
};

using Runner = std::function<std::vector<ref::HostTensor>(
    const OpCase&, const std::vector<ref::HostTensor>&, const Device&)>;

// An op of the registry (tests/unit/ops/op_registry.cc): its one result.
std::vector<ref::HostTensor> run_op(const OpCase& c, const std::vector<ref::HostTensor>& in,
                                    const Device& dev) {
  return {download(run_on_device(c, in, dev))};
}

Outcome outcome(const Runner& run, const OpCase& c, const std::vector<ref::HostTensor>& in,
                const Device& dev) {
  Outcome o;
  try {
    o.values = run(c, in, dev);
  } catch (const std::exception& e) {
    o.failed = true;
    o.error = e.what();
  }
  return o;
}

std::string value_str(const ref::HostTensor& t, int64_t k) {
  std::ostringstream os;
  os.precision(17);
  if (t.is_float_dtype())
    os << t.f[k];
  else
    os << t.i[k];
  return os.str();
}

// Whether the sign of a zero result is specified: not for max/min/maximum/minimum/clamp, which
// may return either of two equal zeros (+0 and -0 compare equal; docs/ops.md).
enum class ZeroSign : bool { kIgnore, kMatters };

ZeroSign zero_sign_of(const std::string& op) {
  for (const char* p : {"max", "min", "maximum", "minimum", "clamp"}) {
    if (op == p || op.rfind(std::string(p) + "_", 0) == 0) return ZeroSign::kIgnore;
  }
  return ZeroSign::kMatters;
}

bool agree(double a, double b, Family family, DType dtype, ZeroSign zero_sign) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (family == Family::kExact)
    return a == b && (zero_sign == ZeroSign::kIgnore || std::signbit(a) == std::signbit(b));
  if (a == b) return true;
  if (std::isinf(a) || std::isinf(b)) return false;
  const Tol t = tolerance(family, dtype);
  return std::fabs(a - b) <= 2 * (t.atol + t.rtol * std::max(std::fabs(a), std::fabs(b)));
}

// CPU and torch agree on `what` (a result computed on each device from the same inputs).
::testing::AssertionResult same_on_both(const std::string& what, Family family, ZeroSign zero_sign,
                                        const Outcome& cpu, const Outcome& torch) {
  if (cpu.failed || torch.failed) {
    if (cpu.failed && torch.failed && cpu.error == torch.error)
      return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << what << "\n  cpu " << (cpu.failed ? "failed: " + cpu.error : "succeeded")
           << "\n  torch " << (torch.failed ? "failed: " + torch.error : "succeeded");
  }
  if (cpu.values.size() != torch.values.size()) {
    return ::testing::AssertionFailure() << what << "\n  cpu gives " << cpu.values.size()
                                         << " results, torch " << torch.values.size();
  }
  for (size_t r = 0; r < cpu.values.size(); ++r) {
    const ref::HostTensor& a = cpu.values[r];
    const ref::HostTensor& b = torch.values[r];
    const std::string which = cpu.values.size() > 1 ? " (result " + std::to_string(r) + ")" : "";
    if (a.shape != b.shape || a.dtype != b.dtype) {
      return ::testing::AssertionFailure()
             << what << "\n  cpu gives " << dtype_name(a.dtype) << ref::shape_str(a.shape)
             << ", torch " << dtype_name(b.dtype) << ref::shape_str(b.shape) << which;
    }
    int64_t bad = 0, first = -1;
    for (int64_t k = 0; k < a.numel(); ++k) {
      const bool ok =
          a.is_float_dtype() ? agree(a.f[k], b.f[k], family, a.dtype, zero_sign) : a.i[k] == b.i[k];
      if (!ok && bad++ == 0) first = k;
    }
    if (bad == 0) continue;
    const bool exact = family == Family::kExact || !a.is_float_dtype();
    const Tol t = tolerance(family, a.dtype);
    return ::testing::AssertionFailure()
           << what << "\n  result" << which << " " << dtype_name(a.dtype) << ref::shape_str(a.shape)
           << ": " << bad << " of " << a.numel() << " elements differ ("
           << (exact
                   ? std::string("exact")
                   : "rtol " + std::to_string(2 * t.rtol) + ", atol " + std::to_string(2 * t.atol))
           << "); first at " << ref::shape_str(ref::unravel(first, a.shape)) << " (flat " << first
           << "): cpu " << value_str(a, first) << ", torch " << value_str(b, first);
  }
  return ::testing::AssertionSuccess();
}

// Runs one case on both backends.
::testing::AssertionResult cpu_matches_torch(const OpCase& c, const Runner& run) {
  const std::vector<ref::HostTensor> inputs = make_host_inputs(c);
  const Outcome cpu = outcome(run, c, inputs, Device::cpu());
  const Outcome torch = outcome(run, c, inputs, Device::torch());
  return same_on_both(describe(c), c.family, zero_sign_of(c.op), cpu, torch);
}

using CaseFn = std::function<OpCase(Draw&)>;

// Draws cases_per_family() cases with `make` and checks each; stops after a few failures.
void run_family(const std::string& family, const CaseFn& make, const Runner& run = run_op) {
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no torch backend";
  int failures = 0;
  for (int k = 0; k < cases_per_family() && failures < 5; ++k) {
    Draw draw(seed_of(family, k));
    OpCase c = make(draw);
    c.name = family + "_" + std::to_string(k);
    c.seed = draw.seed();
    const ::testing::AssertionResult r = cpu_matches_torch(c, run);
    if (!r) ++failures;
    EXPECT_TRUE(r);
  }
}

OpCase make_case(std::string op, std::vector<InputSpec> inputs, Attrs attrs, Family family) {
  return OpCase{"", std::move(op), std::move(inputs), std::move(attrs), family, 0};
}

// ---------------------------------------------------------------------------- families

TEST(CpuVsTorch, Unary) {
  struct U {
    const char* op;
    Family family;
    bool numeric_only;
  };
  const std::vector<U> ops = {
      {"neg", Family::kExact, true},          {"abs", Family::kExact, true},
      {"sign", Family::kExact, true},         {"square", Family::kArith, true},
      {"relu", Family::kExact, true},         {"floor", Family::kExact, true},
      {"ceil", Family::kExact, true},         {"round", Family::kExact, true},
      {"exp", Family::kTranscend, false},     {"log", Family::kTranscend, false},
      {"log1p", Family::kTranscend, false},   {"sqrt", Family::kArith, false},
      {"rsqrt", Family::kTranscend, false},   {"sin", Family::kTranscend, false},
      {"cos", Family::kTranscend, false},     {"tanh", Family::kTranscend, false},
      {"sigmoid", Family::kTranscend, false}, {"gelu", Family::kTranscend, false},
      {"erf", Family::kTranscend, false},     {"reciprocal", Family::kArith, false},
      {"logical_not", Family::kExact, false},
  };
  run_family("unary", [&](Draw& d) {
    const U& u = d.pick(ops);
    const DType dt = d.pick(u.numeric_only ? kNumeric : kCompute);
    InputSpec in = d.input(d.shape(), dt);
    // sin and cos of huge arguments: the libraries reduce them differently; the op suite checks
    // those against the exact reference.
    if ((std::string(u.op) == "sin" || std::string(u.op) == "cos") && in.gen == Gen::kSpecial)
      in.gen = Gen::kEdge;
    // gelu's gradient (inputs x, the upstream gradient).
    if (std::string(u.op) == "gelu" && is_float(dt) && d.chance(0.4))
      return make_case("gelu_backward", {in, d.input(in.shape, dt)}, {}, u.family);
    return make_case(u.op, {in}, {}, u.family);
  });
}

const std::vector<std::pair<const char*, Family>> kBinaryOps = {
    {"add", Family::kArith},         {"sub", Family::kArith},
    {"mul", Family::kArith},         {"div", Family::kArith},
    {"pow", Family::kTranscend},     {"maximum", Family::kExact},
    {"minimum", Family::kExact},     {"remainder", Family::kRemainder},
    {"eq", Family::kExact},          {"ne", Family::kExact},
    {"lt", Family::kExact},          {"le", Family::kExact},
    {"gt", Family::kExact},          {"ge", Family::kExact},
    {"logical_and", Family::kExact}, {"logical_or", Family::kExact},
    {"logical_xor", Family::kExact},
};

bool arithmetic(const std::string& op) {
  return op == "add" || op == "sub" || op == "mul" || op == "pow" || op == "maximum" ||
         op == "minimum" || op == "remainder";
}

TEST(CpuVsTorch, BinaryBroadcasting) {
  run_family("binary", [&](Draw& d) {
    const auto& [op, family] = d.pick(kBinaryOps);
    DType da = d.pick(kCompute), db = d.chance(0.6) ? da : d.pick(kCompute);
    if (arithmetic(op) && da == kBool && db == kBool) db = kI32;  // both bool: an error by design
    Shape sa = d.shape();
    Shape sb = d.broadcast_partner(sa);
    if (d.chance(0.5)) std::swap(sa, sb);
    InputSpec a = d.input(sa, da), b = d.input(sb, db);
    // Integer remainder by zero fails on both (checked below); keep most divisors nonzero.
    if (std::string(op) == "remainder" && d.chance(0.9)) b.gen = Gen::kNonZero;
    return make_case(op, {a, b}, {}, family);
  });
}

TEST(CpuVsTorch, BinaryScalar) {
  const std::vector<std::pair<const char*, Family>> ops = {
      {"add_scalar", Family::kArith},     {"sub_scalar", Family::kArith},
      {"mul_scalar", Family::kArith},     {"div_scalar", Family::kArith},
      {"pow_scalar", Family::kTranscend}, {"remainder_scalar", Family::kRemainder},
      {"eq_scalar", Family::kExact},      {"ne_scalar", Family::kExact},
      {"lt_scalar", Family::kExact},      {"le_scalar", Family::kExact},
      {"gt_scalar", Family::kExact},      {"ge_scalar", Family::kExact},
  };
  run_family("binary_scalar", [&](Draw& d) {
    const auto& [op, family] = d.pick(ops);
    const std::string name = op;
    Attrs a;
    a.s0 = d.scalar();
    const bool reversible = name == "add_scalar" || name == "sub_scalar" || name == "mul_scalar" ||
                            name == "div_scalar";
    a.reverse = reversible && d.chance(0.4);
    InputSpec x = d.input(d.shape(), d.pick(kCompute));
    // A huge integer exponent makes pow spend its time squaring; keep exponents moderate.
    if (name == "pow_scalar" && !a.s0->is_float && (a.s0->i > 300 || a.s0->i < -300))
      a.s0 = Scalar(int64_t{3});
    return make_case(op, {x}, a, family);
  });
}

TEST(CpuVsTorch, WhereClampMaskedFill) {
  run_family("select", [&](Draw& d) {
    const int which = static_cast<int>(d.between(0, 2));
    Shape s = d.shape();
    if (which == 0) {
      Shape sa = d.broadcast_partner(s), sb = d.broadcast_partner(s);
      InputSpec cond = d.input(d.broadcast_partner(s), kBool);
      if (d.chance(0.3))
        cond.shape = s;
      else
        sa = s;
      return make_case("where",
                       {cond, d.input(sa, d.pick(kCompute)), d.input(sb, d.pick(kCompute))}, {},
                       Family::kExact);
    }
    if (which == 1) {
      Attrs a;
      if (d.chance(0.8)) a.s0 = d.scalar();
      if (d.chance(0.8)) a.s1 = d.scalar();
      return make_case("clamp", {d.input(s, d.pick(kNumeric))}, a, Family::kExact);
    }
    Attrs a;
    a.s0 = d.scalar();
    return make_case("masked_fill",
                     {d.input(s, d.pick(kCompute)), d.input(d.broadcast_partner(s), kBool)}, a,
                     Family::kExact);
  });
}

TEST(CpuVsTorch, Cast) {
  run_family("cast", [&](Draw& d) {
    Attrs a;
    a.dtype = d.pick(kAny);
    InputSpec x = d.input(d.shape(), d.pick(kAny));
    if (d.chance(0.5)) x.gen = Gen::kSpecial;
    return make_case("cast", {x}, a, Family::kExact);
  });
}

TEST(CpuVsTorch, Reductions) {
  run_family("reduce", [&](Draw& d) {
    static const std::vector<std::string> kinds = {"sum", "mean",   "prod",  "max",
                                                   "min", "argmax", "argmin"};
    const std::string k = d.pick(kinds);
    const Family family =
        k == "sum" || k == "mean" || k == "prod" ? Family::kReduce : Family::kExact;
    InputSpec x = d.input(d.shape(0, 4, 6), d.pick(kCompute));
    // Products of many large factors overflow to inf or wrap; keep them in a sane range.
    if (k == "prod") {
      x.gen = d.chance(0.5) ? Gen::kTies : Gen::kUniform;
      x.lo = -2;
      x.hi = 2;
    }
    const int64_t rank = static_cast<int64_t>(x.shape.size());
    Attrs a;
    a.keepdim = d.chance(0.5);
    const int form = static_cast<int>(d.between(0, (k == "sum" || k == "mean") ? 2 : 1));
    if (form == 0) return make_case(k, {x}, a, family);
    if (form == 1) {
      a.dim = d.dim(rank);
      return make_case(k + "_dim", {x}, a, family);
    }
    for (int64_t i = 0; i < rank; ++i) {
      if (d.chance(0.5)) a.dims.push_back(d.chance(0.5) ? i : i - rank);
    }
    return make_case(k + "_dims", {x}, a, family);
  });
}

TEST(CpuVsTorch, Cumsum) {
  run_family("cumsum", [&](Draw& d) {
    InputSpec x = d.input(d.shape(0, 3, 40), d.pick(kCompute));
    Attrs a;
    a.dim = d.dim(static_cast<int64_t>(x.shape.size()));
    return make_case("cumsum", {x}, a, Family::kReduce);
  });
}

TEST(CpuVsTorch, Matmul) {
  run_family("matmul", [&](Draw& d) {
    const DType dt = d.pick(std::vector<DType>{kF32, kF64, kI32, kI64});
    const int64_t n = d.between(1, 9), k = d.chance(0.05) ? 0 : d.between(1, 17),
                  m = d.between(1, 9);
    Shape batch = d.shape(0, 2, 3);
    Shape sa = batch, sb = d.broadcast_partner(batch);
    if (d.chance(0.5)) std::swap(sa, sb);
    sa.insert(sa.end(), {n, k});
    sb.insert(sb.end(), {k, m});
    InputSpec a = d.input(sa, dt), b = d.input(sb, dt);
    if (dt == kF32 || dt == kF64)
      a.gen = b.gen = Gen::kUniform;  // sums of infinities are NaN either way
    return make_case("matmul", {a, b}, {}, Family::kMatmul);
  });
}

TEST(CpuVsTorch, Movement) {
  run_family("movement", [&](Draw& d) {
    const DType dt = d.pick(kAny);
    Shape s = d.shape(1, 4, 5);
    const int64_t rank = static_cast<int64_t>(s.size());
    InputSpec x = d.input(s, dt);
    Attrs a;
    switch (d.between(0, 9)) {
      case 0: {  // reshape into a random factorisation, sometimes with -1
        Shape t = {ref::numel(s)};
        if (t[0] > 0 && t[0] % 2 == 0 && d.chance(0.7)) t = {2, t[0] / 2};
        if (d.chance(0.4)) t[0] = -1;
        if (t[0] == 0) t = {0, 1};
        a.shape = t;
        return make_case("reshape", {x}, a, Family::kExact);
      }
      case 1: {
        a.dims.resize(static_cast<size_t>(rank));
        for (int64_t i = 0; i < rank; ++i) a.dims[i] = i;
        for (int64_t i = rank - 1; i > 0; --i) std::swap(a.dims[i], a.dims[d.between(0, i)]);
        return make_case("permute", {x}, a, Family::kExact);
      }
      case 2: {
        Shape small = s;
        for (int64_t& v : small) {
          if (d.chance(0.5)) v = 1;
        }
        x.shape = small;
        a.shape = s;
        if (d.chance(0.4)) a.shape.insert(a.shape.begin(), d.between(0, 3));
        return make_case("expand", {x}, a, Family::kExact);
      }
      case 3:
        a.dim = d.dim(rank);
        a.start = d.between(-7, 7);
        a.end = d.between(-7, 9);
        a.step = d.between(1, 3);
        return make_case("slice", {x}, a, Family::kExact);
      case 4: {
        a.dim = d.between(0, rank - 1);
        a.start = d.between(0, s[a.dim]);
        a.end = d.between(a.start, s[a.dim] + 2);
        a.step = d.between(1, 2);
        const int64_t len =
            a.end > a.start ? (std::min(a.end, s[a.dim]) - a.start + a.step - 1) / a.step : 0;
        Shape region = s;
        region[a.dim] = std::max<int64_t>(len, 0);
        InputSpec src = d.input(d.chance(0.5) ? region : d.broadcast_partner(region), dt);
        return make_case("slice_assign", {x, src}, a, Family::kExact);
      }
      case 5: {
        a.dim = d.dim(rank);
        std::vector<InputSpec> xs = {x};
        const int64_t nd = a.dim < 0 ? a.dim + rank : a.dim;
        for (int64_t i = d.between(0, 2); i > 0; --i) {
          Shape t = s;
          t[nd] = d.between(0, 3);
          xs.push_back(d.input(t, dt));
        }
        return make_case("cat", xs, a, Family::kExact);
      }
      case 6:
        for (int64_t i = 0; i < rank; ++i) {
          if (d.chance(0.5)) a.dims.push_back(i);
        }
        return make_case("flip", {x}, a, Family::kExact);
      case 7:
        for (int64_t i = rank + d.between(0, 1); i > 0; --i) a.dims.push_back(d.between(0, 3));
        return make_case("repeat", {x}, a, Family::kExact);
      case 8:
        a.dim = d.dim(rank);
        a.dim2 = d.dim(rank);
        return make_case("transpose", {x}, a, Family::kExact);
      default:
        a.dim = d.between(-rank - 1, rank);
        return make_case("unsqueeze", {x}, a, Family::kExact);
    }
  });
}

TEST(CpuVsTorch, Indexing) {
  run_family("indexing", [&](Draw& d) {
    const DType id = d.pick(std::vector<DType>{kI32, kI64});
    Shape s = d.shape(1, 3, 5);
    const int64_t rank = static_cast<int64_t>(s.size());
    Attrs a;
    a.dim = d.dim(rank);
    const int64_t nd = a.dim < 0 ? a.dim + rank : a.dim;
    // Now and then an index out of range: both must fail with the same message.
    const double bad = d.chance(0.1) ? 2 : 0;
    // Index values in [0, size) (or [-2, size + 2) for the bad ones); no index fits a dim of
    // size 0, so those give 0, out of range on both.
    auto index = [&](Shape shape, int64_t size) {
      InputSpec in{std::move(shape), id, Gen::kUniform, -bad,
                   static_cast<double>(std::max<int64_t>(size - 1, 0)) + bad};
      in.layout = d.chance(0.3) ? Layout::kTransposed : Layout::kContig;
      return in;
    };
    switch (d.between(0, 3)) {
      case 0: {
        Shape is = s;
        for (int64_t i = 0; i < rank; ++i)
          is[i] = i == nd ? d.between(0, 6) : d.between(std::min<int64_t>(s[i], 1), s[i]);
        return make_case("gather", {d.input(s, d.pick(kAny)), index(is, s[nd])}, a, Family::kExact);
      }
      case 1: {
        const DType dt = d.pick(kNumeric);
        Shape src = s, is = s;
        for (int64_t i = 0; i < rank; ++i) {
          src[i] = i == nd ? d.between(1, 6) : s[i] + d.between(0, 2);
          const int64_t most = i == nd ? src[i] : std::min(src[i], s[i]);
          is[i] = d.between(std::min<int64_t>(1, most), most);
        }
        InputSpec values = d.input(src, dt, false);
        return make_case("scatter_add", {d.input(s, dt, false), index(is, s[nd]), values}, a,
                         is_float(dt) ? Family::kReduce : Family::kExact);
      }
      case 2:
        return make_case("index_select",
                         {d.input(s, d.pick(kAny)), index({d.between(0, 7)}, s[nd])}, a,
                         Family::kExact);
      default: {
        a.n = d.between(1, 6);
        InputSpec x{d.shape(0, 3, 4), d.pick(std::vector<DType>{kI32, kI64, kU8}), Gen::kUniform,
                    -bad, static_cast<double>(a.n - 1) + bad};
        return make_case("one_hot", {x}, a, Family::kExact);
      }
    }
  });
}

TEST(CpuVsTorch, Neural) {
  run_family("neural", [&](Draw& d) {
    const DType dt = d.pick(kFloats);
    Attrs a;
    switch (d.between(0, 6)) {
      case 0: {
        InputSpec x = d.input(d.shape(0, 3, 7), dt);
        x.gen = d.chance(0.3) ? Gen::kWithNegInf : Gen::kUniform;
        a.dim = d.dim(static_cast<int64_t>(x.shape.size()));
        return make_case(d.chance(0.5) ? "softmax" : "log_softmax", {x}, a, Family::kNeural);
      }
      case 1: {
        const int64_t groups = d.between(1, 3);
        const int64_t c = groups * d.between(d.chance(0.05) ? 0 : 1, 2),
                      o = groups * d.between(d.chance(0.05) ? 0 : 1, 3);
        a.kernel = {};
        a.groups = groups;
        a.stride = {d.between(1, 3), d.between(1, 3)};
        a.padding = {d.between(0, 2), d.between(0, 2)};
        a.dilation = {d.between(1, 2), d.between(1, 2)};
        const int64_t kh = d.between(1, 3), kw = d.between(1, 3);
        const int64_t h = a.dilation[0] * (kh - 1) + 1 - 2 * a.padding[0] + d.between(0, 6);
        const int64_t w = a.dilation[1] * (kw - 1) + 1 - 2 * a.padding[1] + d.between(0, 6);
        std::vector<InputSpec> in = {
            InputSpec{{d.between(0, 2), c, std::max<int64_t>(h, 1), std::max<int64_t>(w, 1)}, dt},
            InputSpec{{o, groups ? c / groups : 0, kh, kw}, dt}};
        if (d.chance(0.6)) in.push_back(InputSpec{{o}, dt});
        for (InputSpec& i : in) i.layout = d.layout();
        return make_case("conv2d", in, a, Family::kMatmul);
      }
      case 2:
      case 3: {
        a.kernel = {d.between(1, 3), d.between(1, 3)};
        a.stride = {d.between(1, 3), d.between(1, 3)};
        a.padding = {d.between(0, a.kernel[0] / 2), d.between(0, a.kernel[1] / 2)};
        Shape s = {d.between(0, 2), d.between(1, 3), a.kernel[0] + d.between(0, 5),
                   a.kernel[1] + d.between(0, 5)};
        InputSpec x = d.input(s, dt);
        if (d.chance(0.3)) x.gen = Gen::kWithNaN;
        const bool max = d.chance(0.5);
        return make_case(max ? "max_pool2d" : "avg_pool2d", {x}, a,
                         max ? Family::kExact : Family::kNeural);
      }
      case 4: {
        a.shape = {d.between(1, 5), d.between(1, 5)};
        InputSpec x = d.input({d.between(0, 2), d.between(1, 3), d.between(1, 7), d.between(1, 7)},
                              dt, false);
        return make_case("adaptive_avg_pool2d", {x}, a, Family::kNeural);
      }
      case 5: {  // attention or its gradients (op registry: inputs q, k, v, [grad], [mask])
        Shape batch;
        for (int64_t i = d.between(0, 2); i > 0; --i) batch.push_back(d.between(1, 3));
        const int64_t tq = d.between(0, 70), tk = d.between(0, 70), dh = d.between(1, 8),
                      dv = d.between(1, 8);
        auto with = [&](int64_t rows, int64_t cols) {
          Shape s = batch;
          s.push_back(rows);
          s.push_back(cols);
          return InputSpec{s, dt};
        };
        const bool backward = d.chance(0.5);
        std::vector<InputSpec> in = {with(tq, dh), with(tk, dh), with(tk, dv)};
        if (backward) in.push_back(with(tq, dv));
        if (d.chance(0.4)) in.push_back(InputSpec{{tq, tk}, kBool});
        for (InputSpec& i : in) i.layout = d.layout();
        a.flag = d.chance(0.5);
        return make_case(
            backward ? "scaled_dot_product_attention_backward" : "scaled_dot_product_attention", in,
            a, Family::kMatmul);
      }
      default: {
        InputSpec x = d.input(d.shape(1, 3, 6), dt, false);
        const int64_t rank = static_cast<int64_t>(x.shape.size());
        const int64_t nd = d.between(1, rank);
        a.shape = Shape(x.shape.end() - nd, x.shape.end());
        a.eps = d.pick(std::vector<double>{1e-5, 0.1, 0.0});
        if (a.eps == 0.0) {
          // A constant row over eps 0 is 0/0, and whether a backend sees exactly 0 there depends
          // on the rounding of its mean: keep rows varied.
          x.gen = Gen::kUniform;
          x.layout = Layout::kContig;
          if (ref::numel(a.shape) < 2) a.eps = 1e-5;
        }
        std::vector<InputSpec> in = {x};
        const int affine = static_cast<int>(d.between(0, 3));
        if (affine == 1 || affine == 3) in.push_back(InputSpec{a.shape, dt});
        if (affine >= 2) in.push_back(InputSpec{a.shape, dt});
        a.flag = affine == 2;  // bias only
        // Or its gradients (inputs x, the upstream gradient, then weight and bias).
        if (d.chance(0.5)) {
          InputSpec g{x.shape, dt};
          g.layout = d.layout();
          in.insert(in.begin() + 1, g);
          return make_case("layer_norm_backward", in, a, Family::kNeural);
        }
        return make_case("layer_norm", in, a, Family::kNeural);
      }
    }
  });
}

TEST(CpuVsTorch, Creation) {
  run_family("creation", [&](Draw& d) {
    Attrs a;
    switch (d.between(0, 2)) {
      case 0:
        a.shape = d.shape();
        a.s0 = d.scalar();
        a.dtype = d.pick(kAny);
        return make_case("full", {}, a, Family::kExact);
      case 1: {
        const bool ints = d.chance(0.5);
        const double start = static_cast<double>(d.between(-20, 20));
        const double step = ints ? static_cast<double>(d.between(1, 4))
                                 : d.pick(std::vector<double>{0.1, 0.25, 0.3, 1.5});
        const double sign = d.chance(0.3) ? -1 : 1;
        const double end = start + sign * static_cast<double>(d.between(0, 40)) * step / 2;
        a.s0 = ints ? Scalar(static_cast<int64_t>(start)) : Scalar(start);
        a.s1 = ints ? Scalar(static_cast<int64_t>(end)) : Scalar(end);
        a.s2 = ints ? Scalar(static_cast<int64_t>(sign * step)) : Scalar(sign * step);
        if (d.chance(0.7)) a.dtype = d.pick(kNumeric);
        return make_case("arange", {}, a, Family::kExact);
      }
      default:
        a.n = d.between(0, 6);
        a.m = d.chance(0.5) ? -1 : d.between(0, 6);
        a.dtype = d.pick(kAny);
        return make_case("eye", {}, a, Family::kExact);
    }
  });
}

// ---------------------------------------------------------------------------- random ops

TEST(CpuVsTorch, RandomTensorsBitIdentical) {
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no torch backend";
  for (DType dt : kFloats) {
    for (const Shape& s : {Shape{}, Shape{0}, Shape{7}, Shape{3, 1000}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + ref::shape_str(s));
      auto both = [&](const std::function<Tensor(const Device&)>& f) {
        manual_seed(1234);
        const std::vector<uint8_t> a = f(Device::cpu()).to_bytes();
        manual_seed(1234);
        const std::vector<uint8_t> b = f(Device::torch()).to_bytes();
        return a == b;
      };
      EXPECT_TRUE(both([&](const Device& dev) { return rand(s, dt, dev); })) << "rand";
      EXPECT_TRUE(both([&](const Device& dev) { return randn(s, dt, dev); })) << "randn";
      EXPECT_TRUE(both([&](const Device& dev) { return uniform(s, -3.0, 5.0, dt, dev); }))
          << "uniform";
      EXPECT_TRUE(both([&](const Device& dev) { return normal(s, 2.0, 0.5, dt, dev); }))
          << "normal";
      EXPECT_TRUE(both([&](const Device& dev) {
        return bernoulli(rand(s, dt, dev).mul(1.2).sub(0.1));
      })) << "bernoulli";
      // p seen through a transpose: element i is drawn with counter i, its row-major position.
      if (s.size() == 2) {
        EXPECT_TRUE(both([&](const Device& dev) {
          return bernoulli(rand({s[1], s[0]}, dt, dev).t());
        })) << "bernoulli of a transposed p";
      }
    }
  }
}

// Tensor::to moves a tensor between the devices, every dtype, bytes unchanged.
TEST(CpuVsTorch, TransfersBetweenDevicesKeepBytes) {
  if (!Device::torch_available()) GTEST_SKIP() << "this build has no torch backend";
  for (DType dt : kAny) {
    manual_seed(3);
    const Tensor x = randn({3, 5}, kF32).mul(100.0).to(dt).t();  // a strided view
    const Tensor on_torch = x.to(Device::torch());
    EXPECT_EQ(on_torch.device(), Device::torch());
    EXPECT_EQ(on_torch.to(Device::cpu()).to_bytes(), x.to_bytes()) << dtype_name(dt);
  }
}

// ---------------------------------------------------------------------------- gradient ops

// Uploads a case's inputs (contiguous) as tensors that take a gradient, runs the op named by the
// case ("grad_<op>"), and backpropagates sum(out * r) with r drawn from the case's seed. The
// results are the inputs' gradients.
std::vector<ref::HostTensor> run_grad(const OpCase& c, const std::vector<ref::HostTensor>& in,
                                      const Device& dev) {
  std::vector<Tensor> xs;
  for (const ref::HostTensor& h : in) {
    const std::vector<uint8_t> bytes = ref::to_bytes(h);
    xs.push_back(from_bytes(std::span<const uint8_t>(bytes), h.shape, h.dtype, dev));
    xs.back().set_requires_grad();
  }
  const Attrs& a = c.attrs;
  Tensor y;
  if (c.op == "grad_conv2d") {
    y = conv2d(xs[0], xs[1], Tensor(), a.stride, a.padding, a.dilation, a.groups);
  } else if (c.op == "grad_max_pool2d") {
    y = max_pool2d(xs[0], a.kernel, a.stride, a.padding);
  } else if (c.op == "grad_avg_pool2d") {
    y = avg_pool2d(xs[0], a.kernel, a.stride, a.padding);
  } else {
    y = adaptive_avg_pool2d(xs[0], a.shape);
  }
  std::mt19937 rng(c.seed);
  std::vector<double> r(static_cast<size_t>(y.numel()));
  for (double& v : r) v = std::uniform_real_distribution<double>(-1, 1)(rng);
  (y * from_vector<double>(r, y.shape(), dev).to(y.dtype())).sum().backward();
  std::vector<ref::HostTensor> grads;
  for (const Tensor& x : xs) grads.push_back(download(x.grad()));
  return grads;
}

// The backward kernels (Conv2dBackwardInput/Weight, Pool2dBackward, AdaptiveAvgPool2dBackward),
// reached through autograd: the same forward and backward pass on both backends, gradients
// compared within the matmul family's tolerance (or exactly, for max pooling's routing).
TEST(CpuVsTorch, GradientKernels) {
  run_family(
      "gradient",
      [&](Draw& d) {
        // Not an op of the registry: run_grad runs it.
        const DType dt = d.pick(kFloats);
        Attrs a;
        const int which = static_cast<int>(d.between(0, 3));
        if (which == 0) {
          const int64_t groups = d.between(1, 2);
          a.groups = groups;
          a.stride = {d.between(1, 2), d.between(1, 2)};
          a.padding = {d.between(0, 1), d.between(0, 1)};
          a.dilation = {d.between(1, 2), d.between(1, 2)};
          const int64_t c = groups * d.between(1, 2), o = groups * d.between(1, 2),
                        k = d.between(1, 3);
          Shape x = {d.between(1, 2), c, a.dilation[0] * (k - 1) + 1 + d.between(0, 4),
                     a.dilation[1] * (k - 1) + 1 + d.between(0, 4)};
          return make_case("grad_conv2d", {InputSpec{x, dt}, InputSpec{{o, c / groups, k, k}, dt}},
                           a, Family::kMatmul);
        }
        if (which == 3) {
          a.shape = {d.between(1, 4), d.between(1, 4)};
          return make_case("grad_adaptive_avg_pool2d",
                           {InputSpec{{2, 2, d.between(1, 7), d.between(1, 7)}, dt}}, a,
                           Family::kNeural);
        }
        a.kernel = {d.between(1, 3), d.between(1, 3)};
        a.stride = {d.between(1, 3), d.between(1, 3)};
        a.padding = {d.between(0, a.kernel[0] / 2), d.between(0, a.kernel[1] / 2)};
        InputSpec x{{2, 2, a.kernel[0] + d.between(0, 5), a.kernel[1] + d.between(0, 5)}, dt};
        if (d.chance(0.4)) x.gen = Gen::kTies;  // equal values: the first tap takes the gradient
        return make_case(which == 1 ? "grad_max_pool2d" : "grad_avg_pool2d", {x}, a,
                         which == 1 ? Family::kExact : Family::kNeural);
      },
      run_grad);
}

}  // namespace
}  // namespace tw::optest
