#include "unit/ops/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <numeric>
#include <stdexcept>

namespace tw::ref {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("reference: " + msg); }

bool is_numeric(DType d) { return d == kF32 || d == kF64 || is_integral(d); }
void require_numeric(const std::string& op, DType d) {
  if (!is_numeric(d)) fail(op + ": dtype " + std::string(dtype_name(d)) + " is not numeric");
}
void require_not_storage(const std::string& op, DType d) {
  if (is_storage_only(d)) fail(op + ": dtype " + std::string(dtype_name(d)) + " is storage-only");
}
void require_compute_float(const std::string& op, DType d) {
  if (d != kF32 && d != kF64)
    fail(op + ": dtype " + std::string(dtype_name(d)) + " is not f32/f64");
}

// Wrapping 64-bit arithmetic (two's complement), the base of every integral result.
int64_t wadd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wsub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wmul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

Num fnum(double v) { return Num{true, v, 0}; }
Num inum(int64_t v) { return Num{false, 0.0, v}; }
bool truthy(Num v) { return v.is_float ? v.f != 0.0 : v.i != 0; }  // NaN is true

// Copies element `from` of `src` into element `to` of `dst` (same dtype).
void copy_elem(HostTensor& dst, int64_t to, const HostTensor& src, int64_t from) {
  if (dst.is_float_dtype())
    dst.f[to] = src.f[from];
  else
    dst.i[to] = src.i[from];
}

// out[k] = x[src_of(unravel(k, out_shape))]: every movement op is one such index map.
template <class F>
HostTensor map_index(const HostTensor& x, const Shape& out_shape, F src_of) {
  HostTensor out = alloc(out_shape, x.dtype);
  for (int64_t k = 0; k < out.numel(); ++k) copy_elem(out, k, x, src_of(unravel(k, out_shape)));
  return out;
}

std::vector<int64_t> norm_dims(std::vector<int64_t> dims, int64_t rank, const std::string& op) {
  for (auto& d : dims) d = norm_dim(d, rank);
  std::vector<int64_t> sorted = dims;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) fail(op + ": repeated dim");
  return dims;
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t int_pow(int64_t base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2 == 0) ? 1 : -1;
    return 0;
  }
  int64_t r = 1, b = base;
  while (e > 0) {
    if (e & 1) r = wmul(r, b);
    b = wmul(b, b);
    e >>= 1;
  }
  return r;
}

bool is_comparison_kind(const std::string& k) {
  return k == "eq" || k == "ne" || k == "lt" || k == "le" || k == "gt" || k == "ge";
}
bool is_logical_kind(const std::string& k) {
  return k == "logical_and" || k == "logical_or" || k == "logical_xor";
}

// One binary op on two values already converted to the compute dtype `ct`; the result is in
// the op's output dtype (bool for comparisons/logical, f32 for integral div, else ct).
Num apply_binary(const std::string& kind, Num x, Num y, DType ct) {
  if (is_logical_kind(kind)) {
    bool a = truthy(x), b = truthy(y);
    bool r = kind == "logical_and" ? (a && b) : kind == "logical_or" ? (a || b) : (a != b);
    return inum(r);
  }
  if (is_comparison_kind(kind)) {
    int c;  // -1, 0, 1, or 2 for unordered (NaN)
    if (x.is_float)
      c = x.f < y.f ? -1 : x.f > y.f ? 1 : x.f == y.f ? 0 : 2;
    else
      c = x.i < y.i ? -1 : x.i > y.i ? 1 : 0;
    bool r = kind == "eq"   ? c == 0
             : kind == "ne" ? c != 0
             : kind == "lt" ? c == -1
             : kind == "le" ? (c == -1 || c == 0)
             : kind == "gt" ? c == 1
                            : (c == 1 || c == 0);
    return inum(r);
  }
  if (kind == "div") {
    if (is_float(ct)) return fnum(round_to_float(x.f / y.f, ct));
    return fnum(round_to_float(static_cast<double>(x.i) / static_cast<double>(y.i), kF32));
  }
  if (is_float(ct)) {
    double a = x.f, b = y.f, r;
    if (kind == "add")
      r = a + b;
    else if (kind == "sub")
      r = a - b;
    else if (kind == "mul")
      r = a * b;
    else if (kind == "pow")
      r = std::pow(a, b);
    else if (kind == "maximum")
      r = std::max(a, b);
    else if (kind == "minimum")
      r = std::min(a, b);
    else if (kind == "remainder")
      r = a - std::floor(a / b) * b;
    else
      fail("binary: unknown kind " + kind);
    return fnum(round_to_float(r, ct));
  }
  if (ct == kBool) fail(kind + ": both operands are bool");
  int64_t a = x.i, b = y.i, r;
  if (kind == "add")
    r = wadd(a, b);
  else if (kind == "sub")
    r = wsub(a, b);
  else if (kind == "mul")
    r = wmul(a, b);
  else if (kind == "pow")
    r = int_pow(a, b);
  else if (kind == "maximum")
    r = std::max(a, b);
  else if (kind == "minimum")
    r = std::min(a, b);
  else if (kind == "remainder") {
    if (b == 0) fail("remainder: integral remainder by zero");
    r = (b == -1) ? 0 : wsub(a, wmul(floor_div(a, b), b));
  } else
    fail("binary: unknown kind " + kind);
  return inum(wrap_int(r, ct));
}

DType binary_out_dtype(const std::string& kind, DType ct) {
  if (is_logical_kind(kind) || is_comparison_kind(kind)) return kBool;
  if (kind == "div") return is_float(ct) ? ct : kF32;
  return ct;
}

}  // namespace

// ================================ basics ================================

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
int64_t HostTensor::numel() const { return ref::numel(shape); }

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t k = 0; k < s.size(); ++k) r += (k ? ", " : "") + std::to_string(s[k]);
  return r + "]";
}

HostTensor alloc(const Shape& shape, DType dtype) {
  HostTensor t;
  t.shape = shape;
  t.dtype = dtype;
  if (is_float(dtype))
    t.f.assign(numel(shape), 0.0);
  else
    t.i.assign(numel(shape), 0);
  return t;
}

Num get(const HostTensor& t, int64_t k) { return t.is_float_dtype() ? fnum(t.f[k]) : inum(t.i[k]); }
void set(HostTensor& t, int64_t k, Num v) {
  if (t.is_float_dtype())
    t.f[k] = v.f;
  else
    t.i[k] = v.i;
}

// ================================ conversions ================================

uint16_t encode_f16(float v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(v));
  if (std::isnan(v)) return sign | 0x7e00;
  // 65520 is halfway between the largest f16 (65504, odd significand) and 2^16: ties go up.
  if (a >= 65520.0) return sign | 0x7c00;
  if (a == 0.0) return sign;
  int e = std::max(std::ilogb(a), -14);      // f16 normals have exponents -14..15
  double ulp = std::ldexp(1.0, e - 10);      // 10 stored significand bits
  double r = std::nearbyint(a / ulp) * ulp;  // round half to even (default mode)
  if (r == 0.0) return sign;
  if (r < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(r / std::ldexp(1.0, -24));
  int re = std::ilogb(r);
  auto man = static_cast<uint16_t>((r / std::ldexp(1.0, re) - 1.0) * 1024.0);
  return sign | static_cast<uint16_t>((re + 15) << 10) | man;
}

uint16_t encode_bf16(float v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(v));
  if (std::isnan(v)) return sign | 0x7fc0;
  if (std::isinf(v)) return sign | 0x7f80;
  if (a == 0.0) return sign;
  int e = std::max(std::ilogb(a), -126);
  double ulp = std::ldexp(1.0, e - 7);  // 7 stored significand bits
  double r = std::nearbyint(a / ulp) * ulp;
  double max_bf16 = (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127);
  if (r > max_bf16) return sign | 0x7f80;
  if (r == 0.0) return sign;
  if (r < std::ldexp(1.0, -126)) return sign | static_cast<uint16_t>(r / std::ldexp(1.0, -133));
  int re = std::ilogb(r);
  auto man = static_cast<uint16_t>((r / std::ldexp(1.0, re) - 1.0) * 128.0);
  return sign | static_cast<uint16_t>((re + 127) << 7) | man;
}

double decode_f16(uint16_t bits) {
  double sign = (bits & 0x8000) ? -1.0 : 1.0;
  int exp = (bits >> 10) & 0x1f;
  int man = bits & 0x3ff;
  if (exp == 0x1f) return man ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * man * std::ldexp(1.0, -24);
  return sign * (1.0 + man / 1024.0) * std::ldexp(1.0, exp - 15);
}

double decode_bf16(uint16_t bits) {
  double sign = (bits & 0x8000) ? -1.0 : 1.0;
  int exp = (bits >> 7) & 0xff;
  int man = bits & 0x7f;
  if (exp == 0xff) return man ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (exp == 0) return sign * man * std::ldexp(1.0, -133);
  return sign * (1.0 + man / 128.0) * std::ldexp(1.0, exp - 127);
}

double round_to_float(double v, DType d) {
  switch (d) {
    case kF64: return v;
    case kF32: return static_cast<double>(static_cast<float>(v));
    case kF16: return decode_f16(encode_f16(static_cast<float>(v)));  // f64 -> f32 -> f16
    case kBF16: return decode_bf16(encode_bf16(static_cast<float>(v)));
    default: fail("round_to_float: not a float dtype");
  }
}

int64_t wrap_int(int64_t v, DType d) {
  switch (d) {
    case kI64: return v;
    case kI32: return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint64_t>(v)));
    case kU8: return static_cast<int64_t>(static_cast<uint64_t>(v) & 0xffu);
    case kI8: return static_cast<int8_t>(static_cast<uint8_t>(static_cast<uint64_t>(v) & 0xffu));
    case kBool: return v != 0;
    default: fail("wrap_int: not an integral dtype");
  }
}

Num convert(Num v, DType to) {
  if (to == kBool) return inum(truthy(v));
  if (is_float(to)) {
    if (v.is_float) return fnum(round_to_float(v.f, to));
    if (to == kF64) return fnum(static_cast<double>(v.i));
    // One rounding from the integer to f32 (a detour through double could round twice).
    return fnum(round_to_float(static_cast<double>(static_cast<float>(v.i)), to));
  }
  if (!v.is_float) return inum(wrap_int(v.i, to));
  // float -> integral: truncate toward zero, NaN -> 0, saturate out of range.
  if (std::isnan(v.f)) return inum(0);
  double t = std::trunc(v.f);
  double lo, hi;
  int64_t lo_i, hi_i;
  switch (to) {
    case kI32:
      lo_i = std::numeric_limits<int32_t>::min();
      hi_i = std::numeric_limits<int32_t>::max();
      break;
    case kU8:
      lo_i = 0;
      hi_i = 255;
      break;
    case kI8:
      lo_i = -128;
      hi_i = 127;
      break;
    default:
      lo_i = std::numeric_limits<int64_t>::min();
      hi_i = std::numeric_limits<int64_t>::max();
      break;
  }
  lo = static_cast<double>(lo_i);                                           // exact: -2^k or 0
  hi = to == kI64 ? 9223372036854775808.0 : static_cast<double>(hi_i) + 1;  // first value above
  if (t < lo) return inum(lo_i);
  if (t >= hi) return inum(hi_i);
  return inum(static_cast<int64_t>(t));
}

Num scalar_num(const Scalar& s) { return s.is_float ? fnum(s.f) : inum(s.i); }

HostTensor cast(const HostTensor& x, DType to) {
  HostTensor out = alloc(x.shape, to);
  for (int64_t k = 0; k < x.numel(); ++k) set(out, k, convert(get(x, k), to));
  return out;
}

DType promote_types(DType a, DType b) {
  auto rank = [](DType d) {
    switch (d) {
      case kBool: return 0;
      case kU8: return 1;
      case kI8: return 1;
      case kI32: return 2;
      case kI64: return 3;
      case kF32: return 4;
      case kF64: return 5;
      default: fail("promote: storage-only dtype");
    }
  };
  if (a != b && rank(a) == 1 && rank(b) == 1) return kI32;  // u8 with i8
  return rank(a) >= rank(b) ? a : b;
}

std::vector<uint8_t> to_bytes(const HostTensor& t) {
  size_t es = dtype_size(t.dtype);
  std::vector<uint8_t> out(t.numel() * es);
  for (int64_t k = 0; k < t.numel(); ++k) {
    uint8_t* p = out.data() + k * es;
    switch (t.dtype) {
      case kF32: {
        float v = static_cast<float>(t.f[k]);
        std::memcpy(p, &v, 4);
        break;
      }
      case kF64: {
        std::memcpy(p, &t.f[k], 8);
        break;
      }
      case kF16: {
        uint16_t v = encode_f16(static_cast<float>(t.f[k]));
        std::memcpy(p, &v, 2);
        break;
      }
      case kBF16: {
        uint16_t v = encode_bf16(static_cast<float>(t.f[k]));
        std::memcpy(p, &v, 2);
        break;
      }
      case kI32: {
        auto v = static_cast<int32_t>(t.i[k]);
        std::memcpy(p, &v, 4);
        break;
      }
      case kI64: {
        std::memcpy(p, &t.i[k], 8);
        break;
      }
      case kU8:
      case kI8:
      case kBool: *p = static_cast<uint8_t>(t.i[k]); break;
    }
  }
  return out;
}

HostTensor from_bytes(const std::vector<uint8_t>& bytes, const Shape& shape, DType dtype) {
  HostTensor t = alloc(shape, dtype);
  size_t es = dtype_size(dtype);
  if (bytes.size() != t.numel() * es) fail("from_bytes: size mismatch");
  for (int64_t k = 0; k < t.numel(); ++k) {
    const uint8_t* p = bytes.data() + k * es;
    switch (dtype) {
      case kF32: {
        float v;
        std::memcpy(&v, p, 4);
        t.f[k] = v;
        break;
      }
      case kF64: {
        std::memcpy(&t.f[k], p, 8);
        break;
      }
      case kF16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        t.f[k] = decode_f16(v);
        break;
      }
      case kBF16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        t.f[k] = decode_bf16(v);
        break;
      }
      case kI32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        t.i[k] = v;
        break;
      }
      case kI64: {
        std::memcpy(&t.i[k], p, 8);
        break;
      }
      case kU8: t.i[k] = *p; break;
      case kI8: t.i[k] = static_cast<int8_t>(*p); break;
      case kBool: t.i[k] = *p ? 1 : 0; break;
    }
  }
  return t;
}

// ================================ index helpers ================================

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t k = 0; k < r; ++k) {
    int64_t da = k < r - a.size() ? 1 : a[k - (r - a.size())];
    int64_t db = k < r - b.size() ? 1 : b[k - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      fail("cannot broadcast " + shape_str(a) + " with " + shape_str(b));
    out[k] = da == 1 ? db : da;
  }
  return out;
}

int64_t norm_dim(int64_t dim, int64_t rank) {
  int64_t r = std::max<int64_t>(rank, 1);
  if (dim < -r || dim >= r)
    fail("dim " + std::to_string(dim) + " out of range for rank " + std::to_string(rank));
  return dim < 0 ? dim + r : dim;
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = flat % shape[k];
    flat /= shape[k];
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t k = 0; k < shape.size(); ++k) flat = flat * shape[k] + idx[k];
  return flat;
}

int64_t broadcast_index(const std::vector<int64_t>& out_idx, const Shape& in) {
  size_t off = out_idx.size() - in.size();
  int64_t flat = 0;
  for (size_t k = 0; k < in.size(); ++k) flat = flat * in[k] + (in[k] == 1 ? 0 : out_idx[off + k]);
  return flat;
}

// ================================ creation ================================

HostTensor full(const Shape& shape, const Scalar& value, DType dtype) {
  HostTensor out = alloc(shape, dtype);
  Num v = convert(scalar_num(value), dtype);
  for (int64_t k = 0; k < out.numel(); ++k) set(out, k, v);
  return out;
}

HostTensor arange(const Scalar& start, const Scalar& end, const Scalar& step, DType dtype) {
  require_numeric("arange", dtype);
  double s = start.is_float ? start.f : static_cast<double>(start.i);
  double e = end.is_float ? end.f : static_cast<double>(end.i);
  double st = step.is_float ? step.f : static_cast<double>(step.i);
  if (st == 0) fail("arange: step 0");
  if (e != s && ((e - s > 0) != (st > 0))) fail("arange: step does not move towards end");
  auto n = static_cast<int64_t>(std::max(0.0, std::ceil((e - s) / st)));
  HostTensor out = alloc({n}, dtype);
  bool exact_int = is_integral(dtype) && !start.is_float && !step.is_float;
  for (int64_t k = 0; k < n; ++k) {
    Num v = exact_int ? inum(wadd(start.i, wmul(k, step.i)))
                      : fnum(std::fma(static_cast<double>(k), st, s));
    set(out, k, convert(v, dtype));
  }
  return out;
}

HostTensor eye(int64_t n, int64_t m, DType dtype) {
  HostTensor out = alloc({n, m}, dtype);
  for (int64_t k = 0; k < std::min(n, m); ++k) set(out, k * m + k, convert(inum(1), dtype));
  return out;
}

// ================================ elementwise ================================

HostTensor unary(const std::string& kind, const HostTensor& x) {
  require_not_storage(kind, x.dtype);
  if (kind == "logical_not") {
    HostTensor out = alloc(x.shape, kBool);
    for (int64_t k = 0; k < x.numel(); ++k) out.i[k] = !truthy(get(x, k));
    return out;
  }
  static const char* kSameDtype[] = {"neg",  "abs",   "sign", "square",
                                     "relu", "floor", "ceil", "round"};
  bool same = std::find_if(std::begin(kSameDtype), std::end(kSameDtype),
                           [&](const char* s) { return kind == s; }) != std::end(kSameDtype);
  if (same) {
    require_numeric(kind, x.dtype);
    HostTensor out = alloc(x.shape, x.dtype);
    for (int64_t k = 0; k < x.numel(); ++k) {
      if (x.is_float_dtype()) {
        double v = x.f[k], r;
        if (kind == "neg")
          r = -v;
        else if (kind == "abs")
          r = std::fabs(v);
        else if (kind == "sign")
          r = v > 0 ? 1.0 : v < 0 ? -1.0 : 0.0;
        else if (kind == "square")
          r = v * v;
        else if (kind == "relu")
          r = v > 0 ? v : 0.0;
        else if (kind == "floor")
          r = std::floor(v);
        else if (kind == "ceil")
          r = std::ceil(v);
        else
          r = std::nearbyint(v);  // round half to even in the default rounding mode
        out.f[k] = round_to_float(r, x.dtype);
      } else {
        int64_t v = x.i[k], r;
        if (kind == "neg")
          r = wsub(0, v);
        else if (kind == "abs")
          r = v < 0 ? wsub(0, v) : v;
        else if (kind == "sign")
          r = (v > 0) - (v < 0);
        else if (kind == "square")
          r = wmul(v, v);
        else if (kind == "relu")
          r = std::max<int64_t>(v, 0);
        else
          r = v;  // floor, ceil, round are the identity on integers
        out.i[k] = wrap_int(r, x.dtype);
      }
    }
    return out;
  }
  DType od = is_float(x.dtype) ? x.dtype : kF32;
  HostTensor out = alloc(x.shape, od);
  for (int64_t k = 0; k < x.numel(); ++k) {
    double v = convert(get(x, k), od).f, r;
    if (kind == "exp")
      r = std::exp(v);
    else if (kind == "log")
      r = std::log(v);
    else if (kind == "log1p")
      r = std::log1p(v);
    else if (kind == "sqrt")
      r = std::sqrt(v);
    else if (kind == "rsqrt")
      r = 1.0 / std::sqrt(v);
    else if (kind == "sin")
      r = std::sin(v);
    else if (kind == "cos")
      r = std::cos(v);
    else if (kind == "tanh")
      r = std::tanh(v);
    else if (kind == "sigmoid")
      r = 1.0 / (1.0 + std::exp(-v));
    else if (kind == "gelu")
      r = v * 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
    else if (kind == "erf")
      r = std::erf(v);
    else if (kind == "recip")
      r = 1.0 / v;
    else
      fail("unary: unknown kind " + kind);
    out.f[k] = round_to_float(r, od);
  }
  return out;
}

HostTensor binary(const std::string& kind, const HostTensor& a, const HostTensor& b) {
  require_not_storage(kind, a.dtype);
  require_not_storage(kind, b.dtype);
  // Both operands bool is an error for arithmetic, except div (bool / bool gives f32).
  bool arith = !is_comparison_kind(kind) && !is_logical_kind(kind) && kind != "div";
  if (arith && a.dtype == kBool && b.dtype == kBool) fail(kind + ": both operands are bool");
  DType ct = promote_types(a.dtype, b.dtype);
  Shape shape = broadcast_shapes(a.shape, b.shape);
  HostTensor out = alloc(shape, binary_out_dtype(kind, ct));
  for (int64_t k = 0; k < out.numel(); ++k) {
    auto idx = unravel(k, shape);
    Num x = convert(get(a, broadcast_index(idx, a.shape)), ct);
    Num y = convert(get(b, broadcast_index(idx, b.shape)), ct);
    set(out, k, apply_binary(kind, x, y, ct));
  }
  return out;
}

HostTensor binary_scalar(const std::string& kind, const HostTensor& a, const Scalar& s,
                         bool reverse) {
  require_not_storage(kind, a.dtype);
  bool arith = !is_comparison_kind(kind) && !is_logical_kind(kind);
  DType ct = a.dtype;
  if (s.is_float && !is_float(a.dtype))
    ct = kF32;
  else if (!s.is_float && a.dtype == kBool && arith)
    ct = kI64;
  Num sv = convert(scalar_num(s), ct);
  HostTensor out = alloc(a.shape, binary_out_dtype(kind, ct));
  for (int64_t k = 0; k < a.numel(); ++k) {
    Num x = convert(get(a, k), ct);
    set(out, k, reverse ? apply_binary(kind, sv, x, ct) : apply_binary(kind, x, sv, ct));
  }
  return out;
}

HostTensor where(const HostTensor& cond, const HostTensor& a, const HostTensor& b) {
  if (cond.dtype != kBool) fail("where: cond must be bool");
  require_not_storage("where", a.dtype);
  require_not_storage("where", b.dtype);
  DType ct = promote_types(a.dtype, b.dtype);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.shape, a.shape), b.shape);
  HostTensor out = alloc(shape, ct);
  for (int64_t k = 0; k < out.numel(); ++k) {
    auto idx = unravel(k, shape);
    bool c = cond.i[broadcast_index(idx, cond.shape)] != 0;
    set(out, k,
        c ? convert(get(a, broadcast_index(idx, a.shape)), ct)
          : convert(get(b, broadcast_index(idx, b.shape)), ct));
  }
  return out;
}

HostTensor clamp(const HostTensor& x, const std::optional<Scalar>& lo,
                 const std::optional<Scalar>& hi) {
  require_numeric("clamp", x.dtype);
  HostTensor out = x;
  std::optional<Num> l, h;
  if (lo) l = convert(scalar_num(*lo), x.dtype);
  if (hi) h = convert(scalar_num(*hi), x.dtype);
  for (int64_t k = 0; k < x.numel(); ++k) {
    if (x.is_float_dtype()) {
      double v = x.f[k];
      if (std::isnan(v)) continue;
      if (l) v = std::max(v, l->f);
      if (h) v = std::min(v, h->f);
      out.f[k] = v;
    } else {
      int64_t v = x.i[k];
      if (l) v = std::max(v, l->i);
      if (h) v = std::min(v, h->i);
      out.i[k] = v;
    }
  }
  return out;
}

HostTensor masked_fill(const HostTensor& x, const HostTensor& mask, const Scalar& value) {
  require_not_storage("masked_fill", x.dtype);
  if (mask.dtype != kBool) fail("masked_fill: mask must be bool");
  if (broadcast_shapes(mask.shape, x.shape) != x.shape)
    fail("masked_fill: mask does not broadcast to x");
  HostTensor out = x;
  Num v = convert(scalar_num(value), x.dtype);
  for (int64_t k = 0; k < x.numel(); ++k) {
    if (mask.i[broadcast_index(unravel(k, x.shape), mask.shape)]) set(out, k, v);
  }
  return out;
}

// ================================ reductions ================================

HostTensor reduce(const std::string& kind, const HostTensor& x, std::vector<int64_t> dims,
                  bool keepdim) {
  require_not_storage(kind, x.dtype);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  bool all = dims.empty();
  dims = norm_dims(dims, rank, kind);
  bool arg = kind == "argmax" || kind == "argmin";
  if (arg && dims.size() > 1) fail(kind + ": at most one dim");
  if ((kind == "max" || kind == "min" || arg) && x.dtype != kBool) require_numeric(kind, x.dtype);
  std::vector<bool> red(rank, all);
  for (int64_t d : dims)
    if (rank > 0) red[d] = true;
  Shape oshape;
  for (int64_t d = 0; d < rank; ++d) {
    if (!red[d])
      oshape.push_back(x.shape[d]);
    else if (keepdim)
      oshape.push_back(1);
  }
  // Each output element's inputs, in row-major order (so a position in the group is the index
  // along the single reduced dim, or the flat index when reducing everything).
  std::vector<std::vector<int64_t>> groups(numel(oshape));
  for (int64_t k = 0; k < x.numel(); ++k) {
    auto idx = unravel(k, x.shape);
    std::vector<int64_t> oidx;
    for (int64_t d = 0; d < rank; ++d) {
      if (!red[d])
        oidx.push_back(idx[d]);
      else if (keepdim)
        oidx.push_back(0);
    }
    groups[ravel(oidx, oshape)].push_back(k);
  }
  bool fl = x.is_float_dtype();
  DType od;
  if (kind == "sum" || kind == "prod")
    od = fl ? x.dtype : kI64;
  else if (kind == "mean")
    od = fl ? x.dtype : kF32;
  else if (kind == "max" || kind == "min")
    od = x.dtype;
  else if (arg)
    od = kI64;
  else
    fail("reduce: unknown kind " + kind);
  HostTensor out = alloc(oshape, od);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& grp = groups[g];
    if ((kind == "max" || kind == "min" || arg) && grp.empty()) fail(kind + ": empty reduction");
    if (kind == "sum" || kind == "prod" || kind == "mean") {
      bool prod = kind == "prod";
      if (fl || kind == "mean") {
        double acc = prod ? 1.0 : 0.0;
        for (int64_t k : grp) acc = prod ? acc * x.as_double(k) : acc + x.as_double(k);
        if (kind == "mean")
          acc = grp.empty() ? std::numeric_limits<double>::quiet_NaN() : acc / grp.size();
        out.f[g] = round_to_float(acc, od);
      } else {
        int64_t acc = prod ? 1 : 0;
        for (int64_t k : grp) acc = prod ? wmul(acc, x.i[k]) : wadd(acc, x.i[k]);
        out.i[g] = acc;
      }
    } else {
      // max/min and argmax/argmin: a NaN beats every number and the first NaN wins; among
      // numbers the comparison is strict, so the first occurrence wins ties.
      bool want_max = kind == "max" || kind == "argmax";
      auto better = [&](int64_t a, int64_t b) {  // is element a strictly better than b?
        if (fl) {
          if (std::isnan(x.f[b])) return false;
          if (std::isnan(x.f[a])) return true;
          return want_max ? x.f[a] > x.f[b] : x.f[a] < x.f[b];
        }
        return want_max ? x.i[a] > x.i[b] : x.i[a] < x.i[b];
      };
      size_t best = 0;
      for (size_t j = 1; j < grp.size(); ++j)
        if (better(grp[j], grp[best])) best = j;
      if (arg)
        out.i[g] = static_cast<int64_t>(best);
      else
        copy_elem(out, g, x, grp[best]);
    }
  }
  return out;
}

HostTensor cumsum(const HostTensor& x, int64_t dim) {
  require_not_storage("cumsum", x.dtype);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t d = norm_dim(dim, rank);
  DType od = x.is_float_dtype() ? x.dtype : kI64;
  if (rank == 0) return cast(x, od);
  HostTensor out = alloc(x.shape, od);
  int64_t inner = 1;
  for (int64_t k = d + 1; k < rank; ++k) inner *= x.shape[k];
  int64_t len = x.shape[d];
  int64_t outer = x.numel() / std::max<int64_t>(len * inner, 1);
  if (len == 0 || inner == 0) return out;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      double facc = 0;
      int64_t iacc = 0;
      for (int64_t j = 0; j < len; ++j) {
        int64_t k = (o * len + j) * inner + in;
        if (x.is_float_dtype())
          out.f[k] = round_to_float(facc += x.f[k], od);
        else
          out.i[k] = iacc = wadd(iacc, x.i[k]);
      }
    }
  }
  return out;
}

// ================================ linear algebra ================================

HostTensor matmul(const HostTensor& a0, const HostTensor& b0) {
  if (a0.dtype != b0.dtype) fail("matmul: dtypes differ");
  DType dt = a0.dtype;
  if (dt != kF32 && dt != kF64 && dt != kI32 && dt != kI64) fail("matmul: dtype not allowed");
  if (a0.shape.empty() || b0.shape.empty()) fail("matmul: 0-d operand");
  bool a1 = a0.shape.size() == 1, b1 = b0.shape.size() == 1;
  HostTensor a = a1 ? unsqueeze(a0, 0) : a0;
  HostTensor b = b1 ? unsqueeze(b0, 1) : b0;
  size_t ra = a.shape.size(), rb = b.shape.size();
  int64_t n = a.shape[ra - 2], k = a.shape[ra - 1], k2 = b.shape[rb - 2], m = b.shape[rb - 1];
  if (k != k2) fail("matmul: inner dimensions differ");
  Shape ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  Shape batch = broadcast_shapes(ba, bb);
  Shape oshape = batch;
  oshape.push_back(n);
  oshape.push_back(m);
  HostTensor out = alloc(oshape, dt);
  for (int64_t bi = 0; bi < numel(batch); ++bi) {
    auto bidx = unravel(bi, batch);
    int64_t ao = broadcast_index(bidx, ba) * n * k, bo = broadcast_index(bidx, bb) * k * m;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        double facc = 0;
        int64_t iacc = 0;
        for (int64_t p = 0; p < k; ++p) {
          if (is_float(dt))
            facc += a.f[ao + i * k + p] * b.f[bo + p * m + j];
          else
            iacc = wadd(iacc, wmul(a.i[ao + i * k + p], b.i[bo + p * m + j]));
        }
        int64_t o = (bi * n + i) * m + j;
        if (is_float(dt))
          out.f[o] = round_to_float(facc, dt);
        else
          out.i[o] = wrap_int(iacc, dt);
      }
    }
  }
  if (a1) out = squeeze(out, -2);
  if (b1) out = squeeze(out, -1);
  return out;
}

// ================================ movement ================================

HostTensor reshape(const HostTensor& x, Shape shape) {
  int64_t infer = -1, known = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == -1) {
      if (infer >= 0) fail("reshape: two -1");
      infer = static_cast<int64_t>(k);
    } else {
      known *= shape[k];
    }
  }
  if (infer >= 0) {
    if (known == 0) fail("reshape: cannot infer -1 with a zero-size dim");
    shape[infer] = x.numel() / known;
  }
  if (numel(shape) != x.numel()) fail("reshape: numel mismatch");
  HostTensor out = x;
  out.shape = shape;
  return out;
}

HostTensor flatten(const HostTensor& x, int64_t start_dim, int64_t end_dim) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) return reshape(x, {1});
  int64_t s = norm_dim(start_dim, rank), e = norm_dim(end_dim, rank);
  Shape shape(x.shape.begin(), x.shape.begin() + s);
  int64_t n = 1;
  for (int64_t k = s; k <= e; ++k) n *= x.shape[k];
  shape.push_back(n);
  shape.insert(shape.end(), x.shape.begin() + e + 1, x.shape.end());
  return reshape(x, shape);
}

HostTensor permute(const HostTensor& x, std::vector<int64_t> dims) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (static_cast<int64_t>(dims.size()) != rank) fail("permute: wrong number of dims");
  dims = norm_dims(dims, rank, "permute");
  Shape oshape(rank);
  for (int64_t k = 0; k < rank; ++k) oshape[k] = x.shape[dims[k]];
  return map_index(x, oshape, [&](const std::vector<int64_t>& oi) {
    std::vector<int64_t> ii(rank);
    for (int64_t k = 0; k < rank; ++k) ii[dims[k]] = oi[k];
    return ravel(ii, x.shape);
  });
}

HostTensor transpose(const HostTensor& x, int64_t d0, int64_t d1) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) return x;
  std::vector<int64_t> dims(rank);
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[norm_dim(d0, rank)], dims[norm_dim(d1, rank)]);
  return permute(x, dims);
}

HostTensor expand(const HostTensor& x, const Shape& shape) {
  size_t rank = x.shape.size();
  if (shape.size() < rank) fail("expand: fewer dims than the input");
  size_t off = shape.size() - rank;
  Shape oshape(shape.size());
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k < off) {
      if (shape[k] < 0) fail("expand: -1 for a new leading dim");
      oshape[k] = shape[k];
    } else {
      int64_t have = x.shape[k - off];
      int64_t want = shape[k] == -1 ? have : shape[k];
      if (want != have && have != 1) fail("expand: dim changes from a size other than 1");
      oshape[k] = want;
    }
  }
  return map_index(x, oshape,
                   [&](const std::vector<int64_t>& oi) { return broadcast_index(oi, x.shape); });
}

HostTensor squeeze(const HostTensor& x) {
  Shape s;
  for (int64_t d : x.shape)
    if (d != 1) s.push_back(d);
  return reshape(x, s);
}

HostTensor squeeze(const HostTensor& x, int64_t dim) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) return x;
  int64_t d = norm_dim(dim, rank);
  if (x.shape[d] != 1) return x;
  Shape s = x.shape;
  s.erase(s.begin() + d);
  return reshape(x, s);
}

HostTensor unsqueeze(const HostTensor& x, int64_t dim) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (dim < -(rank + 1) || dim > rank) fail("unsqueeze: dim out of range");
  if (dim < 0) dim += rank + 1;
  Shape s = x.shape;
  s.insert(s.begin() + dim, 1);
  return reshape(x, s);
}

namespace {
struct SliceRange {
  int64_t start, size, step;
};
SliceRange slice_range(int64_t start, int64_t end, int64_t step, int64_t n) {
  if (step < 1) fail("slice: step must be >= 1");
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, 0, n);
  int64_t size = end > start ? (end - start + step - 1) / step : 0;
  return {start, size, step};
}
}  // namespace

HostTensor slice(const HostTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t d = norm_dim(dim, rank);
  SliceRange r = slice_range(start, end, step, x.shape[d]);
  Shape oshape = x.shape;
  oshape[d] = r.size;
  return map_index(x, oshape, [&](std::vector<int64_t> oi) {
    oi[d] = r.start + oi[d] * r.step;
    return ravel(oi, x.shape);
  });
}

HostTensor narrow(const HostTensor& x, int64_t dim, int64_t start, int64_t length) {
  int64_t d = norm_dim(dim, static_cast<int64_t>(x.shape.size()));
  if (start < 0) start += x.shape[d];
  if (start < 0 || length < 0 || start + length > x.shape[d]) fail("narrow: out of range");
  return slice(x, d, start, start + length, 1);
}

HostTensor slice_assign(const HostTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step,
                        const HostTensor& src) {
  if (src.dtype != x.dtype) fail("slice_assign: dtypes differ");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t d = norm_dim(dim, rank);
  SliceRange r = slice_range(start, end, step, x.shape[d]);
  Shape sshape = x.shape;
  sshape[d] = r.size;
  HostTensor s = expand(src, sshape);  // src broadcasts to the slice's shape
  if (s.shape != sshape) fail("slice_assign: src does not broadcast to the slice");
  HostTensor out = x;
  for (int64_t k = 0; k < s.numel(); ++k) {
    auto idx = unravel(k, sshape);
    idx[d] = r.start + idx[d] * r.step;
    copy_elem(out, ravel(idx, x.shape), s, k);
  }
  return out;
}

HostTensor cat(const std::vector<HostTensor>& xs, int64_t dim) {
  if (xs.empty()) fail("cat: no inputs");
  int64_t rank = static_cast<int64_t>(xs[0].shape.size());
  int64_t d = norm_dim(dim, rank);
  Shape oshape = xs[0].shape;
  oshape[d] = 0;
  for (const auto& x : xs) {
    if (x.dtype != xs[0].dtype || static_cast<int64_t>(x.shape.size()) != rank)
      fail("cat: dtype/rank mismatch");
    for (int64_t k = 0; k < rank; ++k)
      if (k != d && x.shape[k] != xs[0].shape[k]) fail("cat: sizes differ");
    oshape[d] += x.shape[d];
  }
  HostTensor out = alloc(oshape, xs[0].dtype);
  for (int64_t k = 0; k < out.numel(); ++k) {
    auto idx = unravel(k, oshape);
    size_t which = 0;
    while (idx[d] >= xs[which].shape[d]) idx[d] -= xs[which++].shape[d];
    copy_elem(out, k, xs[which], ravel(idx, xs[which].shape));
  }
  return out;
}

HostTensor stack(const std::vector<HostTensor>& xs, int64_t dim) {
  std::vector<HostTensor> u;
  for (const auto& x : xs) u.push_back(unsqueeze(x, dim));
  if (dim < 0) dim += static_cast<int64_t>(xs.at(0).shape.size()) + 1;
  return cat(u, dim);
}

HostTensor flip(const HostTensor& x, std::vector<int64_t> dims) {
  int64_t rank = static_cast<int64_t>(x.shape.size());
  dims = norm_dims(dims, rank, "flip");
  return map_index(x, x.shape, [&](std::vector<int64_t> oi) {
    for (int64_t d : dims)
      if (rank > 0) oi[d] = x.shape[d] - 1 - oi[d];
    return ravel(oi, x.shape);
  });
}

HostTensor repeat(const HostTensor& x, const std::vector<int64_t>& repeats) {
  if (repeats.size() < x.shape.size()) fail("repeat: fewer repeats than dims");
  Shape in(repeats.size() - x.shape.size(), 1);
  in.insert(in.end(), x.shape.begin(), x.shape.end());
  Shape oshape(repeats.size());
  for (size_t k = 0; k < repeats.size(); ++k) {
    if (repeats[k] < 0) fail("repeat: negative");
    oshape[k] = in[k] * repeats[k];
  }
  return map_index(x, oshape, [&](std::vector<int64_t> oi) {
    for (size_t k = 0; k < oi.size(); ++k) oi[k] %= in[k];
    return ravel(oi, in);
  });
}

// ================================ indexing ================================

namespace {
// An index in [-size, size), a negative one counting from the end (docs/ops.md, Indexing).
int64_t checked_index(const HostTensor& index, int64_t k, int64_t size, const std::string& op) {
  int64_t v = index.i[k];
  if (v < -size || v >= size) fail(op + ": index " + std::to_string(v) + " out of range");
  return v < 0 ? v + size : v;
}
void require_index_dtype(const std::string& op, DType d) {
  if (d != kI32 && d != kI64) fail(op + ": index must be i32 or i64");
}
}  // namespace

HostTensor gather(const HostTensor& x, int64_t dim, const HostTensor& index) {
  require_index_dtype("gather", index.dtype);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (static_cast<int64_t>(index.shape.size()) != rank) fail("gather: rank mismatch");
  int64_t d = norm_dim(dim, rank);
  for (int64_t k = 0; k < rank; ++k)
    if (k != d && index.shape[k] > x.shape[k]) fail("gather: index larger than x");
  HostTensor out = alloc(index.shape, x.dtype);
  for (int64_t k = 0; k < index.numel(); ++k) {
    auto idx = unravel(k, index.shape);
    if (rank > 0)
      idx[d] = checked_index(index, k, x.shape[d], "gather");
    else
      checked_index(index, k, 1, "gather");
    copy_elem(out, k, x, ravel(idx, x.shape));
  }
  return out;
}

HostTensor scatter_add(const HostTensor& x, int64_t dim, const HostTensor& index,
                       const HostTensor& src) {
  require_numeric("scatter_add", x.dtype);
  require_index_dtype("scatter_add", index.dtype);
  if (src.dtype != x.dtype) fail("scatter_add: src dtype differs");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (static_cast<int64_t>(index.shape.size()) != rank ||
      static_cast<int64_t>(src.shape.size()) != rank)
    fail("scatter_add: rank mismatch");
  int64_t d = norm_dim(dim, rank);
  for (int64_t k = 0; k < rank; ++k) {
    if (index.shape[k] > src.shape[k]) fail("scatter_add: index larger than src");
    if (k != d && index.shape[k] > x.shape[k]) fail("scatter_add: index larger than x");
  }
  HostTensor out = x;
  for (int64_t k = 0; k < index.numel(); ++k) {
    auto idx = unravel(k, index.shape);
    int64_t s = ravel(idx, src.shape);
    if (rank > 0) idx[d] = checked_index(index, k, x.shape[d], "scatter_add");
    int64_t t = ravel(idx, x.shape);
    if (x.is_float_dtype())
      out.f[t] += src.f[s];  // in double; rounded below
    else
      out.i[t] = wrap_int(wadd(out.i[t], src.i[s]), x.dtype);
  }
  if (x.is_float_dtype())
    for (auto& v : out.f) v = round_to_float(v, x.dtype);
  return out;
}

HostTensor index_select(const HostTensor& x, int64_t dim, const HostTensor& index) {
  require_index_dtype("index_select", index.dtype);
  if (index.shape.size() != 1) fail("index_select: index must be 1-D");
  int64_t rank = static_cast<int64_t>(x.shape.size());
  if (rank == 0) {  // as in PyTorch: a 0-d x takes one index, 0, and gives a 0-d result
    if (index.numel() != 1) fail("index_select: a 0-d x takes exactly one index");
    checked_index(index, 0, 1, "index_select");
    return x;
  }
  int64_t d = norm_dim(dim, rank);
  Shape oshape = x.shape;
  oshape[d] = index.shape[0];
  return map_index(x, oshape, [&](std::vector<int64_t> oi) {
    oi[d] = checked_index(index, oi[d], x.shape[d], "index_select");
    return ravel(oi, x.shape);
  });
}

HostTensor one_hot(const HostTensor& x, int64_t num_classes) {
  if (x.dtype != kI32 && x.dtype != kI64 && x.dtype != kU8) fail("one_hot: x must be i32/i64/u8");
  if (num_classes < 1) fail("one_hot: num_classes < 1");
  Shape oshape = x.shape;
  oshape.push_back(num_classes);
  HostTensor out = alloc(oshape, kI64);
  for (int64_t k = 0; k < x.numel(); ++k)
    out.i[k * num_classes + checked_index(x, k, num_classes, "one_hot")] = 1;
  return out;
}

HostTensor embedding(const HostTensor& weight, const HostTensor& indices) {
  if (weight.shape.size() != 2) fail("embedding: weight must be 2-D");
  require_index_dtype("embedding", indices.dtype);
  int64_t dim = weight.shape[1];
  Shape oshape = indices.shape;
  oshape.push_back(dim);
  return map_index(weight, oshape, [&](const std::vector<int64_t>& oi) {
    std::vector<int64_t> ii(oi.begin(), oi.end() - 1);
    int64_t row = checked_index(indices, ravel(ii, indices.shape), weight.shape[0], "embedding");
    return row * dim + oi.back();
  });
}

// ================================ neural ================================

HostTensor softmax(const HostTensor& x, int64_t dim, bool log) {
  require_compute_float("softmax", x.dtype);
  int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t d = norm_dim(dim, rank);
  HostTensor out = alloc(x.shape, x.dtype);
  if (x.numel() == 0) return out;
  int64_t len = rank ? x.shape[d] : 1;
  int64_t inner = 1;
  for (int64_t k = d + 1; k < rank; ++k) inner *= x.shape[k];
  int64_t outer = x.numel() / (len * inner);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t j) { return (o * len + j) * inner + in; };
      double m = -INFINITY, s = 0;
      for (int64_t j = 0; j < len; ++j) m = std::max(m, x.f[at(j)]);
      for (int64_t j = 0; j < len; ++j) s += std::exp(x.f[at(j)] - m);
      for (int64_t j = 0; j < len; ++j) {
        double v = x.f[at(j)] - m;
        out.f[at(j)] = round_to_float(log ? v - std::log(s) : std::exp(v) / s, x.dtype);
      }
    }
  }
  return out;
}

HostTensor conv2d(const HostTensor& x, const HostTensor& w, const std::optional<HostTensor>& bias,
                  std::vector<int64_t> stride, std::vector<int64_t> padding,
                  std::vector<int64_t> dilation, int64_t groups) {
  require_compute_float("conv2d", x.dtype);
  if (w.dtype != x.dtype || (bias && bias->dtype != x.dtype)) fail("conv2d: dtypes differ");
  if (x.shape.size() != 4 || w.shape.size() != 4) fail("conv2d: rank");
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t O = w.shape[0], Cg = w.shape[1], KH = w.shape[2], KW = w.shape[3];
  if (groups < 1 || C % groups || O % groups || Cg != C / groups) fail("conv2d: groups");
  int64_t Ho = (H + 2 * padding[0] - dilation[0] * (KH - 1) - 1) / stride[0] + 1;
  int64_t Wo = (W + 2 * padding[1] - dilation[1] * (KW - 1) - 1) / stride[1] + 1;
  if (Ho < 1 || Wo < 1) fail("conv2d: empty output");
  HostTensor out = alloc({N, O, Ho, Wo}, x.dtype);
  int64_t Og = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double acc = bias ? bias->f[o] : 0.0;
          int64_t g = o / Og;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t a = 0; a < KH; ++a)
              for (int64_t b = 0; b < KW; ++b) {
                int64_t h = i * stride[0] - padding[0] + a * dilation[0];
                int64_t ww = j * stride[1] - padding[1] + b * dilation[1];
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                acc += x.f[((n * C + g * Cg + c) * H + h) * W + ww] *
                       w.f[((o * Cg + c) * KH + a) * KW + b];
              }
          out.f[((n * O + o) * Ho + i) * Wo + j] = round_to_float(acc, x.dtype);
        }
  return out;
}

HostTensor pool2d(const std::string& kind, const HostTensor& x, std::vector<int64_t> kernel,
                  std::vector<int64_t> stride, std::vector<int64_t> padding) {
  require_compute_float(kind + "_pool2d", x.dtype);
  if (x.shape.size() != 4) fail("pool2d: rank");
  if (stride.empty()) stride = kernel;
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t Ho = (H + 2 * padding[0] - kernel[0]) / stride[0] + 1;
  int64_t Wo = (W + 2 * padding[1] - kernel[1]) / stride[1] + 1;
  if (Ho < 1 || Wo < 1) fail("pool2d: empty output");
  HostTensor out = alloc({N, C, Ho, Wo}, x.dtype);
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        double acc = kind == "max" ? -INFINITY : 0.0;
        for (int64_t a = 0; a < kernel[0]; ++a)
          for (int64_t b = 0; b < kernel[1]; ++b) {
            int64_t h = i * stride[0] - padding[0] + a, w = j * stride[1] - padding[1] + b;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;  // padding: -inf for max, 0 for avg
            double v = x.f[(nc * H + h) * W + w];
            if (kind == "max")
              acc = (std::isnan(v) || std::isnan(acc)) ? NAN : std::max(acc, v);
            else
              acc += v;
          }
        if (kind == "avg") acc /= static_cast<double>(kernel[0] * kernel[1]);
        out.f[(nc * Ho + i) * Wo + j] = round_to_float(acc, x.dtype);
      }
  return out;
}

HostTensor adaptive_avg_pool2d(const HostTensor& x, std::vector<int64_t> output_size) {
  require_compute_float("adaptive_avg_pool2d", x.dtype);
  if (x.shape.size() != 4) fail("adaptive_avg_pool2d: rank");
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t Ho = output_size[0], Wo = output_size[1];
  HostTensor out = alloc({N, C, Ho, Wo}, x.dtype);
  auto lo = [](int64_t i, int64_t in, int64_t o) { return (i * in) / o; };                // floor
  auto hi = [](int64_t i, int64_t in, int64_t o) { return ((i + 1) * in + o - 1) / o; };  // ceil
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        double acc = 0;
        int64_t h0 = lo(i, H, Ho), h1 = hi(i, H, Ho), w0 = lo(j, W, Wo), w1 = hi(j, W, Wo);
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) acc += x.f[(nc * H + h) * W + w];
        out.f[(nc * Ho + i) * Wo + j] =
            round_to_float(acc / static_cast<double>((h1 - h0) * (w1 - w0)), x.dtype);
      }
  return out;
}

HostTensor layer_norm(const HostTensor& x, const Shape& normalized_shape,
                      const std::optional<HostTensor>& weight,
                      const std::optional<HostTensor>& bias, double eps) {
  require_compute_float("layer_norm", x.dtype);
  size_t nd = normalized_shape.size();
  if (nd < 1 || nd > x.shape.size()) fail("layer_norm: normalized dims");
  if (!std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape.end() - nd))
    fail("layer_norm: normalized_shape does not match x");
  if (weight && weight->shape != normalized_shape) fail("layer_norm: weight shape");
  if (bias && bias->shape != normalized_shape) fail("layer_norm: bias shape");
  int64_t inner = numel(normalized_shape);
  HostTensor out = alloc(x.shape, x.dtype);
  if (inner == 0) return out;
  for (int64_t o = 0; o < x.numel() / inner; ++o) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < inner; ++j) mean += x.f[o * inner + j];
    mean /= static_cast<double>(inner);
    for (int64_t j = 0; j < inner; ++j)
      var += (x.f[o * inner + j] - mean) * (x.f[o * inner + j] - mean);
    var /= static_cast<double>(inner);
    for (int64_t j = 0; j < inner; ++j) {
      double y = (x.f[o * inner + j] - mean) / std::sqrt(var + eps);
      if (weight) y *= weight->f[j];
      if (bias) y += bias->f[j];
      out.f[o * inner + j] = round_to_float(y, x.dtype);
    }
  }
  return out;
}

HostTensor layer_norm_backward(const HostTensor& grad, const HostTensor& x,
                               const Shape& normalized_shape,
                               const std::optional<HostTensor>& weight, bool has_bias, double eps) {
  require_compute_float("layer_norm_backward", x.dtype);
  const size_t nd = normalized_shape.size();
  if (nd < 1 || nd > x.shape.size()) fail("layer_norm_backward: normalized dims");
  if (!std::equal(normalized_shape.begin(), normalized_shape.end(), x.shape.end() - nd))
    fail("layer_norm_backward: normalized_shape does not match x");
  if (grad.shape != x.shape) fail("layer_norm_backward: grad shape");
  if (weight && weight->shape != normalized_shape) fail("layer_norm_backward: weight shape");
  const int64_t n = numel(normalized_shape);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  std::vector<double> dx(static_cast<size_t>(x.numel())), dw(static_cast<size_t>(n), 0.0),
      db(static_cast<size_t>(n), 0.0), xhat(static_cast<size_t>(n)), gh(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x.f.data() + r * n;
    const double* gr = grad.f.data() + r * n;
    double mean = 0, var = 0;
    for (int64_t j = 0; j < n; ++j) mean += xr[j];
    mean /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean);
    var /= static_cast<double>(n);
    const double rstd = 1 / std::sqrt(var + eps);
    double mean_gh = 0, mean_ghx = 0;
    for (int64_t j = 0; j < n; ++j) {
      xhat[j] = (xr[j] - mean) * rstd;
      gh[j] = weight ? gr[j] * weight->f[j] : gr[j];
      mean_gh += gh[j];
      mean_ghx += gh[j] * xhat[j];
      dw[j] += gr[j] * xhat[j];
      db[j] += gr[j];
    }
    mean_gh /= static_cast<double>(n);
    mean_ghx /= static_cast<double>(n);
    for (int64_t j = 0; j < n; ++j) dx[r * n + j] = rstd * (gh[j] - mean_gh - xhat[j] * mean_ghx);
  }
  std::vector<const std::vector<double>*> parts = {&dx};
  if (weight) parts.push_back(&dw);
  if (has_bias) parts.push_back(&db);
  size_t total = 0;
  for (const auto* p : parts) total += p->size();
  HostTensor out = alloc({static_cast<int64_t>(total)}, x.dtype);
  size_t o = 0;
  for (const auto* p : parts)
    for (double v : *p) out.f[o++] = round_to_float(v, x.dtype);
  return out;
}

HostTensor gelu_backward(const HostTensor& grad, const HostTensor& x) {
  require_compute_float("gelu_backward", x.dtype);
  if (grad.shape != x.shape) fail("gelu_backward: grad shape");
  HostTensor out = alloc(x.shape, x.dtype);
  const double inv_sqrt_2pi = 0.5 * std::numbers::inv_sqrtpi * std::numbers::sqrt2;
  for (size_t i = 0; i < out.f.size(); ++i) {
    const double v = x.f[i];
    const double cdf = 0.5 * (1 + std::erf(v / std::numbers::sqrt2));
    const double pdf = std::exp(-0.5 * v * v) * inv_sqrt_2pi;
    out.f[i] = round_to_float(grad.f[i] * (cdf + v * pdf), x.dtype);
  }
  return out;
}

namespace {

// Attention's sizes and the probabilities of one query row (zeros where not attended, all zeros
// when no key is attended).
struct Attention {
  const HostTensor &q, &k, &v;
  const std::optional<HostTensor>& mask;
  bool causal;
  int64_t tq, d, tk, dv, batch;
  double scale;
  Shape scores;

  Attention(const HostTensor& q_, const HostTensor& k_, const HostTensor& v_,
            const std::optional<HostTensor>& mask_, bool causal_, std::optional<double> s)
      : q(q_), k(k_), v(v_), mask(mask_), causal(causal_) {
    require_compute_float("scaled_dot_product_attention", q.dtype);
    const size_t r = q.shape.size();
    if (r < 2 || k.shape.size() != r || v.shape.size() != r)
      fail("scaled_dot_product_attention: ranks");
    tq = q.shape[r - 2], d = q.shape[r - 1], tk = k.shape[r - 2], dv = v.shape[r - 1];
    scale = s ? *s : (d > 0 ? 1.0 / std::sqrt(static_cast<double>(d)) : 1.0);
    scores.assign(q.shape.begin(), q.shape.end() - 1);
    scores.push_back(tk);
    if (mask && broadcast_shapes(mask->shape, scores) != scores)
      fail("scaled_dot_product_attention: mask does not broadcast to the scores");
    batch = numel(scores) == 0 ? 0 : numel(scores) / (tq * tk);
  }

  std::vector<double> probs(int64_t b, int64_t i) const {
    std::vector<double> w(static_cast<size_t>(tk), 0.0);
    std::vector<bool> att(static_cast<size_t>(tk), false);
    double mx = -std::numeric_limits<double>::infinity();
    bool any = false;
    for (int64_t j = 0; j < tk; ++j) {
      bool a = !causal || j <= i;
      if (a && mask)
        a = mask->i[broadcast_index(unravel((b * tq + i) * tk + j, scores), mask->shape)];
      if (!a) continue;
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += q.f[(b * tq + i) * d + c] * k.f[(b * tk + j) * d + c];
      w[j] = scale * dot;
      att[j] = true;
      mx = std::max(mx, w[j]);
      any = true;
    }
    if (!any) return std::vector<double>(static_cast<size_t>(tk), 0.0);
    double sum = 0;
    for (int64_t j = 0; j < tk; ++j)
      if (att[j]) sum += (w[j] = std::exp(w[j] - mx));
    for (int64_t j = 0; j < tk; ++j) w[j] = att[j] ? w[j] / sum : 0.0;
    return w;
  }
};

}  // namespace

HostTensor scaled_dot_product_attention(const HostTensor& q, const HostTensor& k,
                                        const HostTensor& v, const std::optional<HostTensor>& mask,
                                        bool causal, std::optional<double> scale) {
  const Attention a(q, k, v, mask, causal, scale);
  Shape out_shape = q.shape;
  out_shape.back() = a.dv;
  HostTensor out = alloc(out_shape, q.dtype);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t i = 0; i < a.tq; ++i) {
      const std::vector<double> p = a.probs(b, i);
      for (int64_t c = 0; c < a.dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < a.tk; ++j) acc += p[j] * v.f[(b * a.tk + j) * a.dv + c];
        out.f[(b * a.tq + i) * a.dv + c] = round_to_float(acc, q.dtype);
      }
    }
  }
  return out;
}

HostTensor scaled_dot_product_attention_backward(const HostTensor& grad, const HostTensor& q,
                                                 const HostTensor& k, const HostTensor& v,
                                                 const std::optional<HostTensor>& mask, bool causal,
                                                 std::optional<double> scale) {
  const Attention a(q, k, v, mask, causal, scale);
  std::vector<double> dq(q.f.size(), 0.0), dk(k.f.size(), 0.0), dv(v.f.size(), 0.0);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t i = 0; i < a.tq; ++i) {
      const std::vector<double> p = a.probs(b, i);
      const double* g = grad.f.data() + (b * a.tq + i) * a.dv;
      std::vector<double> dp(static_cast<size_t>(a.tk), 0.0);
      double delta = 0;
      for (int64_t j = 0; j < a.tk; ++j) {
        for (int64_t c = 0; c < a.dv; ++c) {
          dv[(b * a.tk + j) * a.dv + c] += p[j] * g[c];
          dp[j] += g[c] * v.f[(b * a.tk + j) * a.dv + c];
        }
        delta += p[j] * dp[j];
      }
      for (int64_t j = 0; j < a.tk; ++j) {
        const double ds = p[j] * (dp[j] - delta) * a.scale;
        for (int64_t c = 0; c < a.d; ++c) {
          dq[(b * a.tq + i) * a.d + c] += ds * k.f[(b * a.tk + j) * a.d + c];
          dk[(b * a.tk + j) * a.d + c] += ds * q.f[(b * a.tq + i) * a.d + c];
        }
      }
    }
  }
  HostTensor out = alloc({static_cast<int64_t>(dq.size() + dk.size() + dv.size())}, q.dtype);
  size_t o = 0;
  for (const std::vector<double>* part : {&dq, &dk, &dv})
    for (double x : *part) out.f[o++] = round_to_float(x, q.dtype);
  return out;
}

HostTensor index_select_backward(const HostTensor& grad, int64_t dim, const HostTensor& index,
                                 const Shape& x_shape) {
  require_compute_float("index_select_backward", grad.dtype);
  HostTensor out = alloc(x_shape, grad.dtype);
  if (x_shape.empty()) {
    out.f[0] = grad.f[0];
    return out;
  }
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  if (dim < 0) dim += rank;
  std::vector<double> acc(out.f.size(), 0.0);
  for (int64_t k = 0; k < grad.numel(); ++k) {
    std::vector<int64_t> idx = unravel(k, grad.shape);
    idx[dim] = checked_index(index, idx[dim], x_shape[dim], "index_select_backward");
    int64_t flat = 0;
    for (int64_t d = 0; d < rank; ++d) flat = flat * x_shape[d] + idx[d];
    acc[flat] += grad.f[k];
  }
  for (size_t k = 0; k < acc.size(); ++k) out.f[k] = round_to_float(acc[k], grad.dtype);
  return out;
}

// ================================ quantization ================================

namespace {
// The parameter index of element k of x (docs/ops.md: per tensor, channel or block along axis).
int64_t quant_param(const Shape& x, const Shape& scale, int64_t axis, int64_t block, int64_t k) {
  if (numel(scale) == 1 && scale.size() <= 1 && block == 0) return 0;
  const int64_t a = norm_dim(axis, static_cast<int64_t>(x.size()));
  std::vector<int64_t> idx = unravel(k, x);
  if (block == 0) return idx[a];
  idx[a] /= block;
  return ravel(idx, scale);
}
int64_t int_range_lo(DType d) { return d == kI8 ? -128 : 0; }
int64_t int_range_hi(DType d) { return d == kI8 ? 127 : 255; }
}  // namespace

HostTensor quantize(const HostTensor& x, const HostTensor& scale,
                    const std::optional<HostTensor>& zero_point, DType dtype, int64_t axis,
                    int64_t block) {
  HostTensor out = alloc(x.shape, dtype);
  for (int64_t k = 0; k < x.numel(); ++k) {
    const int64_t p = quant_param(x.shape, scale.shape, axis, block, k);
    const float q = static_cast<float>(x.f[k]) / static_cast<float>(scale.f[p]);
    double r = std::nearbyint(static_cast<double>(q));  // half to even
    if (std::isnan(r)) r = 0;
    r += zero_point ? static_cast<double>(zero_point->i[p]) : 0.0;
    r = std::clamp(r, static_cast<double>(int_range_lo(dtype)),
                   static_cast<double>(int_range_hi(dtype)));
    out.i[k] = static_cast<int64_t>(r);
  }
  return out;
}

HostTensor dequantize(const HostTensor& x, const HostTensor& scale,
                      const std::optional<HostTensor>& zero_point, int64_t axis, int64_t block) {
  HostTensor out = alloc(x.shape, kF32);
  for (int64_t k = 0; k < x.numel(); ++k) {
    const int64_t p = quant_param(x.shape, scale.shape, axis, block, k);
    const int64_t diff = x.i[k] - (zero_point ? zero_point->i[p] : 0);
    out.f[k] = static_cast<float>(static_cast<float>(diff) * static_cast<float>(scale.f[p]));
  }
  return out;
}

namespace {
constexpr int64_t kBlock = 32;
int64_t block_bytes_of(int format) { return format == 0 ? 34 : 18; }
}  // namespace

// ggml's reference quantizers, step by step in f32.
HostTensor pack_blocks(const HostTensor& x, int format) {
  const int64_t k = x.shape.back(), bb = block_bytes_of(format);
  Shape s = x.shape;
  s.back() = k / kBlock * bb;
  HostTensor out = alloc(s, kU8);
  for (int64_t b = 0; b < x.numel() / kBlock; ++b) {
    float v[kBlock];
    for (int64_t j = 0; j < kBlock; ++j) v[j] = static_cast<float>(x.f[b * kBlock + j]);
    int64_t* o = out.i.data() + b * bb;
    float d = 0;
    if (format == 0) {
      float amax = 0;
      for (float e : v) amax = std::max(amax, std::fabs(e));
      d = amax / 127.0f;
    } else {
      float amax = 0, max = 0;
      for (float e : v) {
        if (amax < std::fabs(e)) {
          amax = std::fabs(e);
          max = e;
        }
      }
      d = max / -8.0f;
    }
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t h = encode_f16(d);
    o[0] = h & 0xff;
    o[1] = h >> 8;
    if (format == 0) {
      for (int64_t j = 0; j < kBlock; ++j) {
        const volatile float p = v[j] * id;  // rounded to f32 (never contracted)
        o[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(p)));
      }
    } else {
      for (int64_t j = 0; j < kBlock / 2; ++j) {
        // Each product rounded to f32 before the sum (volatile: never contracted to an FMA).
        const volatile float m0 = v[j] * id, m1 = v[kBlock / 2 + j] * id;
        const float p0 = m0 + 8.5f, p1 = m1 + 8.5f;
        const int64_t q0 = std::min<int64_t>(15, static_cast<int64_t>(p0));
        const int64_t q1 = std::min<int64_t>(15, static_cast<int64_t>(p1));
        o[2 + j] = q0 | (q1 << 4);
      }
    }
  }
  return out;
}

HostTensor unpack_blocks(const HostTensor& packed, int format) {
  const int64_t bb = block_bytes_of(format);
  Shape s = packed.shape;
  s.back() = s.back() / bb * kBlock;
  HostTensor out = alloc(s, kF32);
  for (int64_t b = 0; b < packed.numel() / bb; ++b) {
    const int64_t* p = packed.i.data() + b * bb;
    const auto d = static_cast<float>(decode_f16(static_cast<uint16_t>(p[0] | (p[1] << 8))));
    for (int64_t j = 0; j < kBlock; ++j) {
      int64_t q = 0;
      if (format == 0) {
        q = static_cast<int8_t>(static_cast<uint8_t>(p[2 + j]));
      } else {
        const int64_t byte = p[2 + j % (kBlock / 2)];
        q = (j < kBlock / 2 ? byte & 0x0f : byte >> 4) - 8;
      }
      out.f[b * kBlock + j] = d * static_cast<float>(q);
    }
  }
  return out;
}

namespace {
// x [N, K] (doubles) times w [M, K] transposed plus bias, in double, rounded to f32.
HostTensor rows_times(const HostTensor& x, const std::vector<double>& w, int64_t m,
                      const std::optional<HostTensor>& bias) {
  const int64_t n = x.shape[0], k = x.shape[1];
  HostTensor out = alloc({n, m}, kF32);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < m; ++j) {
      double acc = bias ? bias->f[j] : 0.0;
      for (int64_t c = 0; c < k; ++c) acc += x.f[r * k + c] * w[j * k + c];
      out.f[r * m + j] = round_to_float(acc, kF32);
    }
  }
  return out;
}
}  // namespace

HostTensor linear_blocks(const HostTensor& x, const HostTensor& w, int format,
                         const std::optional<HostTensor>& bias) {
  const HostTensor wf = unpack_blocks(w, format);
  return rows_times(x, wf.f, w.shape[0], bias);
}

// Activations: per tensor to 0..127 over the range [min(x, 0), max(x, 0)]; then exact integer
// sums, scaled by x's and the row's scale.
HostTensor linear_int8(const HostTensor& x, const HostTensor& w, const HostTensor& w_scale,
                       const std::optional<HostTensor>& bias) {
  float lo = 0, hi = 0;
  for (double v : x.f) {
    lo = std::min(lo, static_cast<float>(v));
    hi = std::max(hi, static_cast<float>(v));
  }
  const float span = hi - lo;
  const float s = span > 0 ? span / 127.0f : 1.0f;
  const double zp = std::clamp(std::nearbyint(static_cast<double>(-lo / s)), 0.0, 127.0);
  HostTensor xq = x;
  for (double& v : xq.f) {
    const double q = std::nearbyint(static_cast<double>(static_cast<float>(v) / s)) + zp;
    v = std::clamp(q, 0.0, 127.0) - zp;
  }
  const int64_t m = w.shape[0], k = w.shape[1];
  std::vector<double> wf(static_cast<size_t>(m * k));
  for (int64_t j = 0; j < m; ++j) {
    const double row_scale = static_cast<float>(s * static_cast<float>(w_scale.f[j]));
    for (int64_t c = 0; c < k; ++c) wf[j * k + c] = static_cast<double>(w.i[j * k + c]) * row_scale;
  }
  return rows_times(xq, wf, m, bias);
}

}  // namespace tw::ref
