// The data-driven op suite: a table of cases (op_cases.cc), each naming an op of the Tensor API,
// its inputs (shape, dtype, how values are generated, and the memory layout the op sees), its
// attributes and its tolerance family. A case runs on a device and is compared with the
// reference (reference.h), with itself at another thread count, or with another device.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tensorwire/tensor.h"
#include "unit/ops/reference.h"

namespace tw::optest {

// How an input's values are drawn (deterministically, from the case's seed).
enum class Gen : uint8_t {
  kUniform,  // floats uniform in [lo, hi]; integers uniform in [lo, hi] ∩ dtype; bool fair coin
  kHalves,   // multiples of 0.5 in [lo, hi] (rounding ties); integers as kUniform
  kSpecial,  // cycles through edge values of the dtype (±0, ±inf, NaN, limits, out of range)
  kEdge,     // cycles through math edge values: ±0, ±0.5, ±1, ±2.5, ±100, ±inf, NaN
  kEdgeFinite,  // kEdge without ±inf and NaN
  kWrap,        // integers uniform over the whole dtype range (overflow); floats as kUniform
  kDistinct,    // no two values equal (max/argmax without ties)
  kTies,        // values from a set of three (ties, first occurrence)
  kNonZero,     // |v| >= 0.25 (floats) or >= 1 (integers), either sign: divisors
  kIntegral,    // floats holding integer values in [lo, hi]
  kWithNaN,     // as kUniform with about one element in five NaN
  kWithNegInf,  // as kUniform with about one element in three -inf (masked attention scores)
  kLogUniform,  // positive floats 10^u with u uniform in [lo, hi] (tiny to huge, subnormals)
};

// The memory layout the op sees; values are always those of the logical tensor.
enum class Layout : uint8_t {
  kContig,
  kTransposed,  // uploaded with dims 0 and -1 swapped, then transposed back (a strided view)
  kStrided,     // uploaded with every other element of the last dim, then sliced with step 2
  kExpanded,    // dim 0 uploaded with size 1, then expanded (stride 0); values repeat along dim 0
  kComposite,   // kStrided of the transpose, transposed back: strided in both swapped dims
};

struct InputSpec {
  Shape shape;
  DType dtype = kF32;
  Gen gen = Gen::kUniform;
  double lo = -2.0, hi = 2.0;
  Layout layout = Layout::kContig;

  InputSpec with(Gen g) const {
    InputSpec r = *this;
    r.gen = g;
    return r;
  }
  InputSpec range(double l, double h) const {
    InputSpec r = *this;
    r.lo = l;
    r.hi = h;
    return r;
  }
  InputSpec as(Layout l) const {
    InputSpec r = *this;
    r.layout = l;
    return r;
  }
};
inline InputSpec In(Shape shape, DType dtype) { return InputSpec{std::move(shape), dtype}; }

// Tolerance families (the numbers live in tolerance() in op_case_runner.cc). Integer and bool
// outputs are always compared exactly, whatever the family.
enum class Family : uint8_t {
  kExact,         // copies, comparisons, selections, casts, rounding, min/max: bit-exact values
  kArith,         // correctly rounded IEEE ops (+ - * / sqrt): f32 1e-6 rel, f64 1e-14 rel
  kTranscend,     // exp, log, sin, pow, ... : f32 1e-5 rel + 1e-6 abs, f64 1e-13 rel + 1e-15 abs
  kTranscendRel,  // as kTranscend, absolute slack only for subnormal results (tiny results must be
                  // accurate)
  kRemainder,     // a - floor(a/b)*b cancels: f32 1e-5 rel + 1e-5 abs, f64 1e-12 both
  kReduce,        // sums in another order: f32 1e-5 rel + 1e-4 abs, f64 1e-12 both
  kMatmul,        // dot products (matmul, conv2d): as kReduce
  kNeural,        // softmax, layer_norm, adaptive pool: f32 1e-5 rel + 1e-5 abs, f64 1e-12 both
};
struct Tol {
  double rtol = 0.0, atol = 0.0;
  bool exact() const { return rtol == 0.0 && atol == 0.0; }
};
Tol tolerance(Family family, DType out);

struct Attrs {
  Shape shape{};                // reshape, expand, full, layer_norm, adaptive pool
  std::vector<int64_t> dims{};  // permute, flip, repeat, multi-dim reductions
  std::vector<int64_t> kernel{}, stride{}, padding{}, dilation{};
  int64_t dim = 0, dim2 = -1;              // one dim; transpose's / flatten's second dim
  int64_t start = 0, end = 0, step = 1;    // slice; narrow's length is `end`
  int64_t n = 0, m = -1, groups = 1;       // eye (m < 0: square), one_hot classes, conv groups
  bool keepdim = false, reverse = false;   // reverse: scalar on the left (s - a)
  std::optional<Scalar> s0{}, s1{}, s2{};  // scalar operand / bounds / fill / arange args
  std::optional<DType> dtype{};            // cast target, creation dtype
  double eps = 1e-5;
  bool flag = false;  // op-specific switch (documented at the op)
};

struct OpCase {
  std::string name;  // unique; letters, digits, underscores
  std::string op;    // a key of the op registry (op_cases.cc)
  std::vector<InputSpec> inputs;
  Attrs attrs;
  Family family = Family::kExact;
  uint32_t seed = 0;
};

// The case table (small inputs, checked against the reference on every device).
const std::vector<OpCase>& op_cases();
// Large inputs (split across threads), one or more per op family, for thread-count identity.
const std::vector<OpCase>& large_op_cases();

// ---- running a case (op_case_runner.cc) ----
std::vector<ref::HostTensor> make_host_inputs(const OpCase& c);
// Uploads the inputs in the case's layouts and calls the op through the Tensor API.
Tensor run_on_device(const OpCase& c, const std::vector<ref::HostTensor>& inputs,
                     const Device& device);
ref::HostTensor run_reference(const OpCase& c, const std::vector<ref::HostTensor>& inputs);
ref::HostTensor download(const Tensor& t);

struct DeviceResult {
  Shape shape;
  DType dtype = kF32;
  std::vector<uint8_t> bytes;
};

// Every case of `cases` on `device`, each result's read sent before the first is waited for, so
// that a remote device answers them as one stream rather than a round trip each. In the order
// of `cases`; a case whose op threw has `error` set instead of a result.
struct CaseRun {
  DeviceResult result;
  std::string error;
};
std::vector<CaseRun> run_all_bytes(const std::vector<OpCase>& cases, const Device& device);
// The two runs of a case gave the same bytes (and neither threw).
::testing::AssertionResult same_run(const CaseRun& a, const CaseRun& b);

// The case on `device` agrees with the reference within the case's tolerance. With `refusal`
// given, a device's declared refusal of the op or dtype (support/local_backends.h: is_refusal)
// is not a failure: its message goes there instead.
::testing::AssertionResult matches_reference(const OpCase& c, const Device& device,
                                             std::string* refusal = nullptr);
// Two results are identical: shape, dtype and every byte.
::testing::AssertionResult bit_identical(const DeviceResult& a, const DeviceResult& b);

// ---- the op registry (op_cases.cc) ----
using DeviceFn = std::function<Tensor(const std::vector<Tensor>&, const Attrs&, const Device&)>;
using RefFn = std::function<ref::HostTensor(const std::vector<ref::HostTensor>&, const Attrs&)>;
struct OpDef {
  DeviceFn run;
  RefFn ref;
};
const OpDef& op_def(const std::string& op);
std::vector<std::string> registered_ops();

}  // namespace tw::optest
