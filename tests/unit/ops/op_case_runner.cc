// Runs op cases: input generation, upload in the case's layout, download, comparison.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <sstream>

#include "support/local_backends.h"
#include "unit/ops/op_cases.h"

namespace tw::optest {
namespace {

double dtype_min(DType d) {
  switch (d) {
    case kI32: return std::numeric_limits<int32_t>::min();
    case kI64: return -9.2e18;
    case kU8:
    case kBool: return 0;
    case kI8: return -128;
    default: return -INFINITY;
  }
}
double dtype_max(DType d) {
  switch (d) {
    case kI32: return std::numeric_limits<int32_t>::max();
    case kI64: return 9.2e18;
    case kU8: return 255;
    case kI8: return 127;
    case kBool: return 1;
    default: return INFINITY;
  }
}

// Edge values for casts and limits. Each is rounded to the input's dtype when generated.
const std::vector<double> kFloatSpecials = {
    0.0,
    -0.0,
    0.5,
    -0.5,
    1.0,
    -1.0,
    1.5,
    -1.5,
    2.5,
    -2.5,
    1.7,
    -1.7,
    127.9,
    128.0,
    255.5,
    256.0,
    300.0,
    -129.0,
    65504.0,
    65520.0,
    1e-8,
    3e9,
    -3e9,
    2147483647.0,
    2147483648.0,
    -2147483649.0,
    1e19,
    -1e19,
    1e300,
    INFINITY,
    -INFINITY,
    NAN,
    1.0 + 0x1p-11 +
        0x1p-40,  // f64 -> f16 through f32 rounds to 1.0; a direct rounding gives 1 + 2^-10
    1e-40,        // an f32 subnormal
    9223372036854775808.0,
    -9223372036854775808.0,  // ±2^63: i64 saturates above, is exact below
    9223371487098961920.0,   // 2^63 - 2^39, the largest f32 below 2^63: exact in i64
    -0.9,
    255.9,
    4294967296.0,
};
const std::vector<double> kMathEdges = {0.0,  -0.0,  0.5,    -0.5,     1.0,       -1.0, 2.5,
                                        -2.5, 100.0, -100.0, INFINITY, -INFINITY, NAN};
const size_t kFiniteMathEdges = 10;  // the first ten
const std::vector<int64_t> kIntSpecials = {
    0,
    1,
    -1,
    2,
    127,
    128,
    255,
    256,
    -128,
    -129,
    32767,
    65535,
    2147483647,
    -2147483647 - 1,
    2147483648LL,
    4294967295LL,
    std::numeric_limits<int64_t>::max(),
    std::numeric_limits<int64_t>::min(),
    (int64_t{1} << 40) + 12345,
    -(int64_t{1} << 53) - 1,
};

ref::HostTensor generate(const InputSpec& spec, const Shape& shape, std::mt19937& rng) {
  ref::HostTensor t = ref::alloc(shape, spec.dtype);
  const int64_t n = t.numel();
  const DType d = spec.dtype;
  const bool fl = is_float(d);
  auto uni = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto uint_in = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const auto ilo = static_cast<int64_t>(std::ceil(std::max(spec.lo, dtype_min(d))));
  const auto ihi = static_cast<int64_t>(std::floor(std::min(spec.hi, dtype_max(d))));
  std::vector<int64_t> perm;
  if (spec.gen == Gen::kDistinct) {
    perm.resize(n);
    for (int64_t k = 0; k < n; ++k) perm[k] = k;
    std::shuffle(perm.begin(), perm.end(), rng);
  }
  for (int64_t k = 0; k < n; ++k) {
    ref::Num v;
    switch (spec.gen) {
      case Gen::kUniform:
      case Gen::kWithNaN:
        if (fl)
          v = {true, uni(spec.lo, spec.hi), 0};
        else
          v = {false, 0, d == kBool ? uint_in(0, 1) : uint_in(ilo, ihi)};
        if (spec.gen == Gen::kWithNaN && fl && uint_in(0, 4) == 0) v.f = NAN;
        break;
      case Gen::kWithNegInf:
        if (fl)
          v = {true, uint_in(0, 2) == 0 ? -INFINITY : uni(spec.lo, spec.hi), 0};
        else
          v = {false, 0, uint_in(ilo, ihi)};
        break;
      case Gen::kLogUniform:
        if (fl)
          v = {true, std::pow(10.0, uni(spec.lo, spec.hi)), 0};
        else
          v = {false, 0, uint_in(std::max<int64_t>(ilo, 0), ihi)};
        break;
      case Gen::kHalves:
        if (fl)
          v = {true,
               0.5 * static_cast<double>(uint_in(static_cast<int64_t>(2 * spec.lo),
                                                 static_cast<int64_t>(2 * spec.hi))),
               0};
        else
          v = {false, 0, uint_in(ilo, ihi)};
        break;
      case Gen::kSpecial:
        if (fl)
          v = {true, kFloatSpecials[k % kFloatSpecials.size()], 0};
        else
          v = {false, 0, kIntSpecials[k % kIntSpecials.size()]};
        break;
      case Gen::kEdge:
      case Gen::kEdgeFinite: {
        size_t m = spec.gen == Gen::kEdge ? kMathEdges.size() : kFiniteMathEdges;
        if (fl)
          v = {true, kMathEdges[k % m], 0};
        else
          v = {false, 0, kIntSpecials[k % kIntSpecials.size()]};
        break;
      }
      case Gen::kWrap:
        if (fl)
          v = {true, uni(spec.lo, spec.hi), 0};
        else if (d == kI64)
          v = {false, 0, std::uniform_int_distribution<int64_t>()(rng) * (uint_in(0, 1) ? 1 : -1)};
        else
          v = {false, 0,
               uint_in(static_cast<int64_t>(dtype_min(d)), static_cast<int64_t>(dtype_max(d)))};
        break;
      case Gen::kDistinct:
        // Evenly spaced values in [lo, hi], shuffled; spaced widely enough to stay distinct in f16.
        if (fl)
          v = {true,
               spec.lo + (spec.hi - spec.lo) * (static_cast<double>(perm[k]) + 0.5) /
                             static_cast<double>(n),
               0};
        else
          v = {false, 0, ilo + perm[k]};
        break;
      case Gen::kTies:
        if (fl)
          v = {true, std::vector<double>{-1.0, 0.5, 2.0}[uint_in(0, 2)], 0};
        else
          v = {false, 0, d == kBool ? uint_in(0, 1) : uint_in(0, 2)};
        break;
      case Gen::kNonZero:
        if (fl)
          v = {true, uni(0.25, std::max(spec.hi, 0.5)) * (spec.lo < 0 && uint_in(0, 1) ? -1 : 1),
               0};
        else
          v = {false, 0,
               uint_in(1, std::max<int64_t>(ihi, 1)) * (ilo < 0 && uint_in(0, 1) ? -1 : 1)};
        break;
      case Gen::kIntegral:
        v = {fl, 0, 0};
        if (fl)
          v.f = static_cast<double>(uint_in(ilo, ihi));
        else
          v.i = uint_in(ilo, ihi);
        break;
    }
    ref::set(t, k, ref::convert(v, d));
  }
  return t;
}

// Puts a host tensor on the device so that the op sees `layout`.
Tensor upload(const ref::HostTensor& h, Layout layout, const Device& device) {
  auto put = [&](const ref::HostTensor& x) {
    std::vector<uint8_t> bytes = ref::to_bytes(x);
    return from_bytes(std::span<const uint8_t>(bytes), x.shape, x.dtype, device);
  };
  const size_t rank = h.shape.size();
  switch (layout) {
    case Layout::kContig: break;
    case Layout::kTransposed:
      if (rank >= 2) return put(ref::transpose(h, 0, -1)).transpose(0, -1);
      break;
    case Layout::kStrided:
      if (rank >= 1) {
        // Twice the last dim plus one, h's values at the even positions, filler elsewhere.
        Shape wide = h.shape;
        wide.back() = 2 * h.shape.back() + 1;
        ref::HostTensor w = ref::full(wide, Scalar(7), h.dtype);
        for (int64_t k = 0; k < h.numel(); ++k) {
          auto idx = ref::unravel(k, h.shape);
          idx.back() *= 2;
          ref::set(w, ref::ravel(idx, wide), ref::get(h, k));
        }
        return put(w).slice(-1, 0, 2 * h.shape.back(), 2);
      }
      break;
    case Layout::kComposite:
      if (rank >= 2)
        return upload(ref::transpose(h, 0, -1), Layout::kStrided, device).transpose(0, -1);
      break;
    case Layout::kExpanded:
      if (rank >= 1 && h.shape[0] > 0) return put(ref::slice(h, 0, 0, 1, 1)).expand(h.shape);
      break;
  }
  return put(h);
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

bool close(double got, double want, Tol tol) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (got == want) return true;  // also equal infinities
  if (std::isinf(want) || std::isinf(got)) return false;
  return std::fabs(got - want) <= tol.atol + tol.rtol * std::fabs(want);
}

}  // namespace

Tol tolerance(Family family, DType out) {
  if (!is_float(out) || family == Family::kExact) return {};
  const bool f64 = out == kF64;
  switch (family) {
    case Family::kExact: return {};
    case Family::kArith: return f64 ? Tol{1e-14, 0} : Tol{1e-6, 0};
    case Family::kTranscend: return f64 ? Tol{1e-13, 1e-15} : Tol{1e-5, 1e-6};
    // Absolute slack only below the smallest normal, where subnormal results carry few bits.
    case Family::kTranscendRel: return f64 ? Tol{1e-13, 1e-300} : Tol{1e-5, 1e-37};
    case Family::kRemainder: return f64 ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-5};
    case Family::kReduce:
    case Family::kMatmul: return f64 ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-4};
    case Family::kNeural: return f64 ? Tol{1e-12, 1e-12} : Tol{1e-5, 1e-5};
  }
  return {};
}

std::vector<ref::HostTensor> make_host_inputs(const OpCase& c) {
  std::mt19937 rng(c.seed);
  std::vector<ref::HostTensor> out;
  for (const InputSpec& spec : c.inputs) {
    if (spec.layout == Layout::kExpanded && !spec.shape.empty() && spec.shape[0] > 0) {
      // Values repeat along dim 0: draw one row, then broadcast it.
      Shape row = spec.shape;
      row[0] = 1;
      out.push_back(ref::expand(generate(spec, row, rng), spec.shape));
    } else {
      out.push_back(generate(spec, spec.shape, rng));
    }
  }
  return out;
}

Tensor run_on_device(const OpCase& c, const std::vector<ref::HostTensor>& inputs,
                     const Device& device) {
  std::vector<Tensor> ts;
  for (size_t k = 0; k < inputs.size(); ++k)
    ts.push_back(upload(inputs[k], c.inputs[k].layout, device));
  return op_def(c.op).run(ts, c.attrs, device);
}

ref::HostTensor run_reference(const OpCase& c, const std::vector<ref::HostTensor>& inputs) {
  return op_def(c.op).ref(inputs, c.attrs);
}

ref::HostTensor download(const Tensor& t) {
  return ref::from_bytes(t.to_bytes(), t.shape(), t.dtype());
}

::testing::AssertionResult matches_reference(const OpCase& c, const Device& device,
                                             std::string* refusal) {
  std::vector<ref::HostTensor> inputs = make_host_inputs(c);
  ref::HostTensor want;
  try {
    want = run_reference(c, inputs);
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure()
           << "the reference rejects the case (a bad case): " << e.what();
  }
  ref::HostTensor got;
  try {
    got = download(run_on_device(c, inputs, device));
  } catch (const std::exception& e) {
    if (refusal && testing::is_refusal(e.what())) {
      *refusal = e.what();
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "the op threw: " << e.what();
  }
  if (got.shape != want.shape || got.dtype != want.dtype) {
    return ::testing::AssertionFailure()
           << "result is " << dtype_name(got.dtype) << ref::shape_str(got.shape) << ", expected "
           << dtype_name(want.dtype) << ref::shape_str(want.shape);
  }
  const Tol tol = tolerance(c.family, want.dtype);
  int64_t bad = 0;
  std::ostringstream detail;
  for (int64_t k = 0; k < want.numel(); ++k) {
    bool ok = want.is_float_dtype() ? (tol.exact() ? close(got.f[k], want.f[k], Tol{})
                                                   : close(got.f[k], want.f[k], tol))
                                    : got.i[k] == want.i[k];
    if (ok) continue;
    if (++bad <= 8) {
      detail << "\n  at " << ref::shape_str(ref::unravel(k, want.shape)) << ": got "
             << value_str(got, k) << ", expected " << value_str(want, k);
      if (c.inputs.size() == 1 && inputs[0].numel() == want.numel())
        detail << " (input " << value_str(inputs[0], k) << ")";
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << want.numel() << " elements of " << dtype_name(want.dtype)
         << ref::shape_str(want.shape) << " differ (rtol " << tol.rtol << ", atol " << tol.atol
         << "):" << detail.str();
}

::testing::AssertionResult bit_identical(const DeviceResult& a, const DeviceResult& b) {
  if (a.shape != b.shape || a.dtype != b.dtype) {
    return ::testing::AssertionFailure() << dtype_name(a.dtype) << ref::shape_str(a.shape) << " vs "
                                         << dtype_name(b.dtype) << ref::shape_str(b.shape);
  }
  if (a.bytes.size() != b.bytes.size()) {
    return ::testing::AssertionFailure() << a.bytes.size() << " bytes vs " << b.bytes.size();
  }
  const size_t es = std::max<size_t>(dtype_size(a.dtype), 1);
  int64_t bad = 0, first = -1;
  for (size_t k = 0; k < a.bytes.size(); k += es) {
    if (std::memcmp(a.bytes.data() + k, b.bytes.data() + k, es) != 0) {
      if (first < 0) first = static_cast<int64_t>(k / es);
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  ref::HostTensor ha = ref::from_bytes(a.bytes, a.shape, a.dtype),
                  hb = ref::from_bytes(b.bytes, b.shape, b.dtype);
  return ::testing::AssertionFailure()
         << bad << " of " << a.bytes.size() / es << " elements differ; first at "
         << ref::shape_str(ref::unravel(first, a.shape)) << ": " << value_str(ha, first) << " vs "
         << value_str(hb, first);
}

std::vector<CaseRun> run_all_bytes(const std::vector<OpCase>& cases, const Device& device) {
  // Reads in flight at once: enough that round trips stop mattering, few enough that the
  // results waiting on the server stay small.
  constexpr size_t kWindow = 128;
  std::vector<CaseRun> runs(cases.size());
  for (size_t start = 0; start < cases.size(); start += kWindow) {
    const size_t end = std::min(cases.size(), start + kWindow);
    std::vector<std::function<detail::HostValues()>> reads(end - start);
    for (size_t k = start; k < end; ++k) {
      try {
        reads[k - start] =
            run_on_device(cases[k], make_host_inputs(cases[k]), device).host_values_async();
      } catch (const std::exception& e) {
        runs[k].error = e.what();
      }
    }
    for (size_t k = start; k < end; ++k) {
      if (!reads[k - start]) continue;
      try {
        const detail::HostValues v = reads[k - start]();
        const auto* p = static_cast<const uint8_t*>(v.data);
        runs[k].result = DeviceResult{
            v.shape, v.dtype,
            std::vector<uint8_t>(p, p + v.numel * static_cast<int64_t>(dtype_size(v.dtype)))};
      } catch (const std::exception& e) {
        runs[k].error = e.what();
      }
    }
  }
  return runs;
}

::testing::AssertionResult same_run(const CaseRun& a, const CaseRun& b) {
  // A device's declared refusal is a result too. Where one side declined, the other may have
  // run the API's composite fallback for the op (the API asks a local device's supports(), but
  // a remote device's answer is the protocol's, not its backend's, until the Welcome describes
  // each device), so there is nothing to compare.
  if (testing::is_refusal(a.error) || testing::is_refusal(b.error)) {
    return ::testing::AssertionSuccess();
  }
  if (!a.error.empty() || !b.error.empty()) {
    return ::testing::AssertionFailure()
           << "the op threw: " << (a.error.empty() ? b.error : a.error);
  }
  return bit_identical(a.result, b.result);
}

}  // namespace tw::optest
