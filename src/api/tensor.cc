// The Tensor API: each call builds one op of the IR and emits it (api/emit.cc), which validates
// it with ir::infer against its inputs' metadata (so errors surface at the call site), gives its
// output a fresh id and submits it to the inputs' device.
#include "tensorwire/tensor.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

#include "api/autograd.h"
#include "api/emit.h"
#include "api/sink.h"
#include "backend/copy_meta.h"
#include "core/splitmix.h"
#include "core/thread_pool.h"
#include "tensorwire/autograd.h"

namespace tw {

using detail::Sink;
using detail::TensorImpl;

namespace detail {
void throw_dtype_mismatch(const char* what, DType have, DType want) {
  throw Error(std::string(what) + ": tensor has dtype " + std::string(dtype_name(have)) + " but " +
              std::string(dtype_name(want)) + " was requested; convert first with .to(tw::k" +
              std::string(dtype_name(want)) + ")");
}
}  // namespace detail

namespace {

const TensorImpl& impl_of(const Tensor& t, const char* what) {
  if (!t.defined())
    throw Error(std::string(what) + ": the tensor is undefined (default-constructed)");
  return *t.impl();
}

ir::Scalar to_ir(Scalar s) { return s.is_float ? ir::Scalar(s.f) : ir::Scalar(s.i); }

using detail::emit;
using detail::in;

Tensor emit1(const Tensor& x, ir::Op op, std::initializer_list<const Tensor*> inputs) {
  // (The op's name only for the error: it is a string built per op.)
  if (!x.defined()) impl_of(x, ir::op_name(op).c_str());
  return emit(x.impl()->sink, std::move(op), inputs);
}

Tensor unary(const Tensor& x, ir::UnaryKind k) { return emit1(x, ir::Unary{k, in(x), {}}, {&x}); }
Tensor binary(const Tensor& a, const Tensor& b, ir::BinaryKind k) {
  impl_of(b, ir::kind_name(k));
  return emit1(a, ir::Binary{k, in(a), in(b), {}}, {&a, &b});
}
Tensor binary_scalar(const Tensor& a, Scalar s, ir::BinaryKind k, bool reverse = false) {
  return emit1(a, ir::BinaryScalar{k, in(a), to_ir(s), reverse, {}}, {&a});
}
Tensor reduce(const Tensor& x, ir::ReduceKind k, std::vector<int64_t> dims, bool keepdim) {
  return emit1(x, ir::Reduce{k, in(x), std::move(dims), keepdim, {}}, {&x});
}

int64_t norm_dim(int64_t dim, int64_t rank, const char* what) {
  auto d = normalize_dim(dim, rank, what);
  if (!d.ok()) throw Error(d.status().message());
  return *d;
}

}  // namespace

// ---- metadata ----
const Shape& Tensor::shape() const { return impl_of(*this, "shape").meta.shape; }
int64_t Tensor::dim() const { return static_cast<int64_t>(shape().size()); }
int64_t Tensor::size(int64_t d) const { return shape()[norm_dim(d, dim(), "size")]; }
int64_t Tensor::numel() const { return tw::numel(shape()); }
DType Tensor::dtype() const { return impl_of(*this, "dtype").meta.dtype; }
Device Tensor::device() const { return Device(impl_of(*this, "device").sink); }
uint64_t Tensor::id() const { return impl_of(*this, "id").id; }

// ---- values ----
namespace {
detail::HostValues to_host_values(Result<TensorData> data) {
  if (!data.ok()) throw Error(data.status().message());
  // Element pointers address the values: bytes that arrived unaligned are copied (rarely: the
  // client lands a read result's bytes aligned).
  const size_t elem = dtype_size(data->meta.dtype);
  const bool aligned = reinterpret_cast<uintptr_t>(data->bytes.data()) % elem == 0;
  const Buffer held =
      aligned ? std::move(data->bytes) : Buffer::copy_of(data->bytes.data(), data->bytes.size());
  detail::HostValues v;
  v.shape = std::move(data->meta.shape);
  v.dtype = data->meta.dtype;
  v.numel = tw::numel(v.shape);
  v.data = held.data();
  v.owner = held.keep_alive();
  return v;
}
}  // namespace

namespace {
// The bytes a tensor of `m` holds (what a read returns).
uint64_t meta_bytes(const TensorMeta& m) {
  return static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
}
}  // namespace

detail::HostValues Tensor::host_values() const {
  const TensorImpl& impl = impl_of(*this, "read");
  return to_host_values(impl.sink->read(impl.id, meta_bytes(impl.meta)));
}

std::function<detail::HostValues()> Tensor::host_values_async() const {
  const TensorImpl& impl = impl_of(*this, "read");
  auto fut = std::make_shared<std::future<Result<TensorData>>>(
      impl.sink->read_async(impl.id, meta_bytes(impl.meta)));
  // The sink waits so that a remote device's waiting thread can read the reply itself.
  return [sink = impl.sink, fut] { return to_host_values(sink->await(*fut)); };
}

detail::PendingValues Tensor::host_values_pending() const {
  const TensorImpl& impl = impl_of(*this, "read");
  auto fut = std::make_shared<std::future<Result<TensorData>>>(
      impl.sink->read_async(impl.id, meta_bytes(impl.meta)));
  // A remote device's reply completes the future on the client's I/O thread when no caller is
  // reading the stream (client/reader.cc), so ready() turns true without anyone waiting.
  return {[fut] { return fut->wait_for(std::chrono::seconds(0)) == std::future_status::ready; },
          [sink = impl.sink, fut] { return to_host_values(sink->await(*fut)); }};
}

std::vector<uint8_t> Tensor::to_bytes() const {
  detail::HostValues v = host_values();
  const uint8_t* p = static_cast<const uint8_t*>(v.data);
  return std::vector<uint8_t>(p, p + v.numel * static_cast<int64_t>(dtype_size(v.dtype)));
}

namespace {
double element_as_double(const detail::HostValues& v, int64_t i) {
  const void* p = v.data;
  switch (v.dtype) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF64: return static_cast<const double*>(p)[i];
    case DType::kI32: return static_cast<const int32_t*>(p)[i];
    case DType::kI64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DType::kU8: return static_cast<const uint8_t*>(p)[i];
    case DType::kI8: return static_cast<const int8_t*>(p)[i];
    case DType::kBool: return static_cast<const uint8_t*>(p)[i] ? 1 : 0;
    default: return 0;
  }
}

void format_element(std::ostringstream& os, const detail::HostValues& v, int64_t i) {
  if (v.dtype == DType::kI64) {
    os << static_cast<const int64_t*>(v.data)[i];
  } else if (v.dtype == DType::kBool) {
    os << (static_cast<const uint8_t*>(v.data)[i] ? "true" : "false");
  } else if (is_float(v.dtype)) {
    double x = element_as_double(v, i);
    if (std::isnan(x)) {
      os << "nan";
    } else if (std::isinf(x)) {
      os << (x > 0 ? "inf" : "-inf");
    } else {
      os << std::fixed << std::setprecision(4) << x;
    }
  } else {
    os << static_cast<int64_t>(element_as_double(v, i));
  }
}

// Prints dim `d` starting at element offset `off`; dims longer than 6 show 3 + ... + 3 when the
// tensor is large.
void format_dim(std::ostringstream& os, const detail::HostValues& v, size_t d, int64_t off,
                bool summarize, int indent) {
  if (d == v.shape.size()) {
    format_element(os, v, off);
    return;
  }
  int64_t n = v.shape[d];
  int64_t stride = 1;
  for (size_t k = d + 1; k < v.shape.size(); ++k) stride *= v.shape[k];
  os << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 6 && i == 3) {
      os << (d + 1 == v.shape.size() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      i = n - 3;
    }
    format_dim(os, v, d + 1, off + i * stride, summarize, indent + 1);
    if (i + 1 < n) os << (d + 1 == v.shape.size() ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}
}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  if (is_storage_only(dtype())) {
    os << "<" << numel() << " values>";
  } else {
    detail::HostValues v = host_values();
    format_dim(os, v, 0, 0, v.numel > 1000, 7);
  }
  os << ", dtype=" << dtype_name(dtype());
  if (dim() != 1 || numel() == 0) os << ", shape=" << shape_str(shape());
  if (impl_->sink->kind() != Device::Kind::kCpu) os << ", device=" << impl_->sink->str();
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

// ---- conversion ----
Tensor Tensor::to(DType dtype) const {
  return emit1(*this, ir::Cast{in(*this), dtype, {}}, {this});
}

Tensor Tensor::to(const Device& device) const {
  const TensorImpl& src = impl_of(*this, "to");
  auto out = std::make_shared<TensorImpl>();
  out->sink = device.sink();
  out->id = out->sink->new_id();
  out->meta = src.meta;
  Status st;
  {
    const CopyMetaScope known(src.meta);
    st = src.sink->copy_to(src.id, *out->sink, out->id);
  }
  if (!st.ok()) {
    out->id = 0;  // nothing was made under it
    throw Error(st.message());
  }
  return Tensor(std::move(out));
}

// ---- elementwise ----
// One method per kind, named by the kind lists' api_name column (ir/ops.h).
#define TW_UNARY_METHOD(Kind, ir_name, api_name, ...) \
  Tensor Tensor::api_name() const { return unary(*this, ir::UnaryKind::k##Kind); }
TW_UNARY_KINDS(TW_UNARY_METHOD)
#undef TW_UNARY_METHOD

#define TW_BINARY_METHOD(Kind, ir_name, api_name, ...) \
  Tensor Tensor::api_name(const Tensor& o) const {     \
    return binary(*this, o, ir::BinaryKind::k##Kind);  \
  }
TW_BINARY_KINDS(TW_BINARY_METHOD)
#undef TW_BINARY_METHOD

// The tensor-scalar form, for the kinds whose scalar column is kScalarApi.
#define TW_BINARY_SCALAR_METHOD(Kind, ir_name, api_name, grad, scalar) \
  TW_BINARY_SCALAR_METHOD_##scalar(Kind, api_name)
#define TW_BINARY_SCALAR_METHOD_kNoScalarApi(Kind, api_name)
#define TW_BINARY_SCALAR_METHOD_kScalarApi(Kind, api_name)   \
  Tensor Tensor::api_name(Scalar s) const {                  \
    return binary_scalar(*this, s, ir::BinaryKind::k##Kind); \
  }
TW_BINARY_KINDS(TW_BINARY_SCALAR_METHOD)
#undef TW_BINARY_SCALAR_METHOD
#undef TW_BINARY_SCALAR_METHOD_kNoScalarApi
#undef TW_BINARY_SCALAR_METHOD_kScalarApi

Tensor Tensor::clamp(std::optional<Scalar> lo, std::optional<Scalar> hi) const {
  ir::Clamp op{in(*this),
               lo.has_value(),
               lo ? to_ir(*lo) : ir::Scalar(),
               hi.has_value(),
               hi ? to_ir(*hi) : ir::Scalar(),
               {}};
  return emit1(*this, op, {this});
}

Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const {
  return emit1(*this, ir::MaskedFill{in(*this), in(mask), to_ir(value), {}}, {this, &mask});
}

// ---- reductions ----
// The forms tensorwire/tensor.h declares from the kind list.
#define TW_REDUCE_METHODS(Kind, ir_name, api_name, grad, dims)                                  \
  Tensor Tensor::api_name() const { return reduce(*this, ir::ReduceKind::k##Kind, {}, false); } \
  Tensor Tensor::api_name(int64_t d, bool keepdim) const {                                      \
    return reduce(*this, ir::ReduceKind::k##Kind, {d}, keepdim);                                \
  }                                                                                             \
  Tensor Tensor::api_name(std::optional<int64_t> d, bool keepdim) const {                       \
    return reduce(*this, ir::ReduceKind::k##Kind,                                               \
                  d ? std::vector<int64_t>{*d} : std::vector<int64_t>{}, keepdim);              \
  }                                                                                             \
  TW_REDUCE_DIMS_METHOD_##dims(Kind, api_name)
#define TW_REDUCE_DIMS_METHOD_kDimList(Kind, api_name)                            \
  Tensor Tensor::api_name(const std::vector<int64_t>& dims, bool keepdim) const { \
    return reduce(*this, ir::ReduceKind::k##Kind, dims, keepdim);                 \
  }
#define TW_REDUCE_DIMS_METHOD_kOneDim(Kind, api_name)
TW_REDUCE_KINDS(TW_REDUCE_METHODS)
#undef TW_REDUCE_METHODS
#undef TW_REDUCE_DIMS_METHOD_kDimList
#undef TW_REDUCE_DIMS_METHOD_kOneDim
Tensor Tensor::cumsum(int64_t d) const {
  return emit1(*this, ir::Cumsum{in(*this), d, {}}, {this});
}

// ---- linear algebra ----
Tensor Tensor::matmul(const Tensor& o) const {
  impl_of(*this, "matmul");
  impl_of(o, "matmul");
  if (dim() == 0 || o.dim() == 0) {
    throw Error("matmul: both arguments need at least 1 dimension, got " + shape_str(shape()) +
                " and " + shape_str(o.shape()));
  }
  if (dim() == 1 && o.dim() == 1) return unsqueeze(0).matmul(o.unsqueeze(1)).reshape({});
  if (dim() == 1) return unsqueeze(0).matmul(o).squeeze(-2);
  if (o.dim() == 1) return matmul(o.unsqueeze(1)).squeeze(-1);
  if (autocast_dtype() == kBF16 && dtype() == kF32 && o.dtype() == kF32) {
    return autograd::autocast_matmul(*this, o);
  }
  return emit1(*this, ir::MatMul{in(*this), in(o), {}}, {this, &o});
}

// ---- movement ----
Tensor Tensor::reshape(const Shape& s) const {
  return emit1(*this, ir::Reshape{in(*this), s, {}}, {this});
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  int64_t r = dim();
  if (r == 0) return reshape({1});
  int64_t s = norm_dim(start_dim, r, "flatten"), e = norm_dim(end_dim, r, "flatten");
  if (s > e)
    throw Error("flatten: start_dim " + std::to_string(start_dim) + " comes after end_dim " +
                std::to_string(end_dim));
  Shape out(shape().begin(), shape().begin() + s);
  int64_t n = 1;
  for (int64_t i = s; i <= e; ++i) n *= shape()[i];
  out.push_back(n);
  out.insert(out.end(), shape().begin() + e + 1, shape().end());
  return reshape(out);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  return emit1(*this, ir::Permute{in(*this), dims, {}}, {this});
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t r = dim();
  if (r == 0) return reshape({});
  int64_t a = norm_dim(d0, r, "transpose"), b = norm_dim(d1, r, "transpose");
  std::vector<int64_t> p(r);
  for (int64_t i = 0; i < r; ++i) p[i] = i;
  std::swap(p[a], p[b]);
  return permute(p);
}

Tensor Tensor::t() const {
  if (dim() > 2)
    throw Error("t: expects a tensor of at most 2 dims, got " + shape_str(shape()) +
                "; use transpose(d0, d1)");
  return dim() < 2 ? reshape(shape()) : transpose(0, 1);
}

Tensor Tensor::expand(const Shape& s) const {
  return emit1(*this, ir::Expand{in(*this), s, {}}, {this});
}

Tensor Tensor::squeeze() const {
  Shape out;
  for (int64_t d : shape())
    if (d != 1) out.push_back(d);
  return reshape(out);
}

Tensor Tensor::squeeze(int64_t d) const {
  int64_t r = dim();
  if (r == 0) return reshape({});
  int64_t k = norm_dim(d, r, "squeeze");
  Shape out = shape();
  if (out[k] == 1) out.erase(out.begin() + k);
  return reshape(out);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int64_t k = norm_dim(d, dim() + 1, "unsqueeze");
  Shape out = shape();
  out.insert(out.begin() + k, 1);
  return reshape(out);
}

namespace {
struct SliceSpec {
  std::vector<int64_t> starts, ends, steps;
};
SliceSpec full_slice(int64_t rank, int64_t dim, int64_t start, int64_t end, int64_t step) {
  SliceSpec s{std::vector<int64_t>(rank, 0),
              std::vector<int64_t>(rank, std::numeric_limits<int64_t>::max()),
              std::vector<int64_t>(rank, 1)};
  s.starts[dim] = start;
  s.ends[dim] = end;
  s.steps[dim] = step;
  return s;
}
}  // namespace

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  int64_t k = norm_dim(d, dim(), "slice");
  if (dim() == 0) throw Error("slice: cannot slice a 0-d tensor");
  SliceSpec s = full_slice(dim(), k, start, end, step);
  return emit1(*this, ir::Slice{in(*this), s.starts, s.ends, s.steps, {}}, {this});
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  if (dim() == 0) throw Error("narrow: cannot narrow a 0-d tensor");
  int64_t k = norm_dim(d, dim(), "narrow");
  int64_t n = shape()[k];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n) {
    throw Error("narrow: range [" + std::to_string(start) + ", " + std::to_string(start + length) +
                ") is outside dim " + std::to_string(d) + " of size " + std::to_string(n));
  }
  return slice(k, start, start + length, 1);
}

Tensor Tensor::slice_assign(int64_t d, int64_t start, int64_t end, int64_t step,
                            const Tensor& src) const {
  if (dim() == 0) throw Error("slice_assign: cannot slice a 0-d tensor");
  int64_t k = norm_dim(d, dim(), "slice_assign");
  SliceSpec s = full_slice(dim(), k, start, end, step);
  return emit1(*this, ir::SliceAssign{in(*this), in(src), s.starts, s.ends, s.steps, {}},
               {this, &src});
}

Tensor Tensor::flip(const std::vector<int64_t>& dims) const {
  return emit1(*this, ir::Flip{in(*this), dims, {}}, {this});
}
Tensor Tensor::repeat(const std::vector<int64_t>& repeats) const {
  return emit1(*this, ir::Repeat{in(*this), repeats, {}}, {this});
}

// ---- indexing ----
Tensor Tensor::gather(int64_t d, const Tensor& index) const {
  return emit1(*this, ir::Gather{in(*this), d, in(index), {}}, {this, &index});
}
Tensor Tensor::scatter_add(int64_t d, const Tensor& index, const Tensor& src) const {
  return emit1(*this, ir::ScatterAdd{in(*this), d, in(index), in(src), {}}, {this, &index, &src});
}
Tensor Tensor::index_select(int64_t d, const Tensor& index) const {
  return emit1(*this, ir::IndexSelect{in(*this), d, in(index), {}}, {this, &index});
}

// ---- neural ----
Tensor Tensor::softmax(int64_t d) const {
  return emit1(*this, ir::Softmax{in(*this), d, false, {}}, {this});
}
Tensor Tensor::log_softmax(int64_t d) const {
  return emit1(*this, ir::Softmax{in(*this), d, true, {}}, {this});
}

// ---- operators ----
Tensor operator-(const Tensor& a) { return a.neg(); }
Tensor operator+(const Tensor& a, const Tensor& b) { return a.add(b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return a.sub(b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return a.mul(b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return a.div(b); }
Tensor operator+(const Tensor& a, Scalar b) { return a.add(b); }
Tensor operator-(const Tensor& a, Scalar b) { return a.sub(b); }
Tensor operator*(const Tensor& a, Scalar b) { return a.mul(b); }
Tensor operator/(const Tensor& a, Scalar b) { return a.div(b); }
Tensor operator+(Scalar a, const Tensor& b) {
  return binary_scalar(b, a, ir::BinaryKind::kAdd, true);
}
Tensor operator-(Scalar a, const Tensor& b) {
  return binary_scalar(b, a, ir::BinaryKind::kSub, true);
}
Tensor operator*(Scalar a, const Tensor& b) {
  return binary_scalar(b, a, ir::BinaryKind::kMul, true);
}
Tensor operator/(Scalar a, const Tensor& b) {
  return binary_scalar(b, a, ir::BinaryKind::kDiv, true);
}
Tensor operator==(const Tensor& a, const Tensor& b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return a.ne(b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return a.le(b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return a.ge(b); }
Tensor operator==(const Tensor& a, Scalar b) { return a.eq(b); }
Tensor operator!=(const Tensor& a, Scalar b) { return a.ne(b); }
Tensor operator<(const Tensor& a, Scalar b) { return a.lt(b); }
Tensor operator<=(const Tensor& a, Scalar b) { return a.le(b); }
Tensor operator>(const Tensor& a, Scalar b) { return a.gt(b); }
Tensor operator>=(const Tensor& a, Scalar b) { return a.ge(b); }
Tensor operator&&(const Tensor& a, const Tensor& b) { return a.logical_and(b); }
Tensor operator||(const Tensor& a, const Tensor& b) { return a.logical_or(b); }
Tensor operator!(const Tensor& a) { return a.logical_not(); }

// ---- factories ----
namespace {
Tensor create(const Device& device, ir::Op op) { return emit(device.sink(), std::move(op), {}); }
}  // namespace

Tensor full(const Shape& shape, Scalar value, DType dtype, const Device& device) {
  return create(device, ir::Full{{}, shape, dtype, to_ir(value)});
}
Tensor zeros(const Shape& shape, DType dtype, const Device& device) {
  return full(shape, 0, dtype, device);
}
Tensor ones(const Shape& shape, DType dtype, const Device& device) {
  return full(shape, 1, dtype, device);
}
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, Scalar value) {
  return full(t.shape(), value, t.dtype(), t.device());
}

Tensor arange(Scalar end, const Device& device) { return arange(0, end, 1, std::nullopt, device); }
Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<DType> dtype,
              const Device& device) {
  DType d = dtype ? *dtype : (start.is_float || end.is_float || step.is_float ? kF32 : kI64);
  return create(device, ir::Arange{{}, to_ir(start), to_ir(end), to_ir(step), d});
}
Tensor eye(int64_t n, std::optional<int64_t> m, DType dtype, const Device& device) {
  return create(device, ir::Eye{{}, n, m ? *m : n, dtype});
}

Tensor from_bytes(std::span<const uint8_t> bytes, const Shape& shape, DType dtype,
                  const Device& device) {
  return create(
      device,
      ir::FromHost{
          {}, shape, dtype, ir::Bytes{device.sink()->host_copy(bytes.data(), bytes.size())}});
}

template <class T>
Tensor from_vector(std::span<const T> values, const Shape& shape, const Device& device) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> b(values.begin(), values.end());
    return from_bytes(b, shape, kBool, device);
  } else {
    return from_bytes(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(values.data()),
                                               values.size() * sizeof(T)),
                      shape, detail::dtype_of_v<T>, device);
  }
}
template <class T>
Tensor from_vector(std::vector<T>&& values, const Shape& shape, const Device& device) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> b(values.begin(), values.end());  // (std::vector<bool> packs bits)
    return from_bytes(b, shape, kBool, device);
  } else {
    auto held = std::make_shared<std::vector<T>>(std::move(values));
    const size_t n = held->size() * sizeof(T);
    Buffer bytes = Buffer::wrap(held->data(), n, held);
    return create(device,
                  ir::FromHost{{}, shape, detail::dtype_of_v<T>, ir::Bytes{std::move(bytes)}});
  }
}
template TW_API Tensor from_vector<float>(std::vector<float>&&, const Shape&, const Device&);
template TW_API Tensor from_vector<double>(std::vector<double>&&, const Shape&, const Device&);
template TW_API Tensor from_vector<int32_t>(std::vector<int32_t>&&, const Shape&, const Device&);
template TW_API Tensor from_vector<int64_t>(std::vector<int64_t>&&, const Shape&, const Device&);
template TW_API Tensor from_vector<uint8_t>(std::vector<uint8_t>&&, const Shape&, const Device&);
template TW_API Tensor from_vector<int8_t>(std::vector<int8_t>&&, const Shape&, const Device&);
template TW_API Tensor from_vector<bool>(std::vector<bool>&&, const Shape&, const Device&);

template TW_API Tensor from_vector<float>(std::span<const float>, const Shape&, const Device&);
template TW_API Tensor from_vector<double>(std::span<const double>, const Shape&, const Device&);
template TW_API Tensor from_vector<int32_t>(std::span<const int32_t>, const Shape&, const Device&);
template TW_API Tensor from_vector<int64_t>(std::span<const int64_t>, const Shape&, const Device&);
template TW_API Tensor from_vector<uint8_t>(std::span<const uint8_t>, const Shape&, const Device&);
template TW_API Tensor from_vector<int8_t>(std::span<const int8_t>, const Shape&, const Device&);
template TW_API Tensor from_vector<bool>(std::span<const bool>, const Shape&, const Device&);

// ---- random ----
namespace {
std::atomic<uint64_t> g_seed_base{0x5eed};
std::atomic<uint64_t> g_seed_counter{0};
uint64_t splitmix64(uint64_t x) { return splitmix64_next(x); }  // x's successor's output
}  // namespace

void manual_seed(uint64_t seed) {
  g_seed_base.store(seed);
  g_seed_counter.store(0);
}
RngState rng_state() { return {g_seed_base.load(), g_seed_counter.load()}; }
void set_rng_state(const RngState& state) {
  g_seed_base.store(state.seed);
  g_seed_counter.store(state.counter);
}
uint64_t next_seed() {
  return splitmix64(g_seed_base.load() ^ splitmix64(g_seed_counter.fetch_add(1)));
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype, const Device& device) {
  return create(device, ir::RandUniform{{}, shape, dtype, next_seed(), low, high});
}
Tensor normal(const Shape& shape, double mean, double std, DType dtype, const Device& device) {
  return create(device, ir::RandNormal{{}, shape, dtype, next_seed(), mean, std});
}
Tensor rand(const Shape& shape, DType dtype, const Device& device) {
  return uniform(shape, 0, 1, dtype, device);
}
Tensor randn(const Shape& shape, DType dtype, const Device& device) {
  return normal(shape, 0, 1, dtype, device);
}
Tensor bernoulli(const Tensor& p) { return emit1(p, ir::Bernoulli{in(p), {}, next_seed()}, {&p}); }

// ---- free functions ----
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return emit1(cond, ir::Where{in(cond), in(a), in(b), {}}, {&cond, &a, &b});
}
Tensor matmul(const Tensor& a, const Tensor& b) { return a.matmul(b); }

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) throw Error("cat: expects at least one tensor");
  ir::Cat op{{}, dim, {}};
  std::vector<const Tensor*> inputs;
  for (const Tensor& x : xs) {
    impl_of(x, "cat");
    op.xs.push_back(in(x));
    inputs.push_back(&x);
  }
  return emit(xs[0].impl()->sink, std::move(op), inputs);
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  if (xs.empty()) throw Error("stack: expects at least one tensor");
  int64_t d = norm_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> us;
  us.reserve(xs.size());
  for (const Tensor& x : xs) {
    if (x.shape() != xs[0].shape()) {
      throw Error("stack: all tensors need the same shape, got " + shape_str(xs[0].shape()) +
                  " and " + shape_str(x.shape()));
    }
    us.push_back(x.unsqueeze(d));
  }
  return cat(us, d);
}

Tensor quantize(const Tensor& x, const Tensor& scale, const Tensor& zero_point, DType dtype,
                int64_t axis, int64_t block) {
  return emit1(x, ir::Quantize{in(x), in(scale), in(zero_point), axis, block, dtype, {}},
               {&x, &scale, &zero_point});
}
Tensor dequantize(const Tensor& q, const Tensor& scale, const Tensor& zero_point, int64_t axis,
                  int64_t block) {
  return emit1(q, ir::Dequantize{in(q), in(scale), in(zero_point), axis, block, {}},
               {&q, &scale, &zero_point});
}
Tensor pack_blocks(const Tensor& x, BlockFormat format) {
  return emit1(x, ir::PackBlocks{in(x), format, {}}, {&x});
}
Tensor unpack_blocks(const Tensor& packed, BlockFormat format) {
  return emit1(packed, ir::UnpackBlocks{in(packed), format, {}}, {&packed});
}
Tensor linear_blocks(const Tensor& x, const Tensor& w_packed, BlockFormat format,
                     const Tensor& bias) {
  return emit1(x, ir::LinearBlocks{in(x), in(w_packed), in(bias), format, {}},
               {&x, &w_packed, &bias});
}
Tensor linear_int8(const Tensor& x, const Tensor& w, const Tensor& w_scale, const Tensor& bias) {
  return emit1(x, ir::LinearInt8{in(x), in(w), in(w_scale), in(bias), {}},
               {&x, &w, &w_scale, &bias});
}
std::pair<Tensor, Tensor> quantize_weight_int8(const Tensor& w) {
  if (w.dim() != 2) {
    throw Error("quantize_weight_int8: w must be 2-D [out, in], got " + shape_str(w.shape()));
  }
  // A row of zeros gets scale 1 (its codes are all 0 either way).
  const Tensor amax = w.abs().max(1);
  const Tensor scale = where(amax.gt(0), amax / 127.0, ones_like(amax));
  return {quantize(w, scale, {}, kI8, 0, 0), scale};
}

Tensor one_hot(const Tensor& x, int64_t num_classes) {
  return emit1(x, ir::OneHot{in(x), num_classes, {}}, {&x});
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  if (weight.dim() != 2)
    throw Error("embedding: weight must be 2-D [num_embeddings, dim], got " +
                shape_str(weight.shape()));
  Shape out = indices.shape();
  out.push_back(weight.size(1));
  return weight.index_select(0, indices.reshape({-1})).reshape(out);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              std::vector<int64_t> stride, std::vector<int64_t> padding,
              std::vector<int64_t> dilation, int64_t groups) {
  return emit1(x,
               ir::Conv2d{in(x),
                          in(weight),
                          in(bias),
                          std::move(stride),
                          std::move(padding),
                          std::move(dilation),
                          groups,
                          {}},
               {&x, &weight, &bias});
}

namespace {
Tensor pool(ir::PoolKind kind, const Tensor& x, std::vector<int64_t> kernel,
            std::vector<int64_t> stride, std::vector<int64_t> padding) {
  if (stride.empty()) stride = kernel;
  return emit1(
      x, ir::Pool2d{kind, in(x), std::move(kernel), std::move(stride), std::move(padding), {}},
      {&x});
}
}  // namespace

Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  return pool(ir::PoolKind::kMax, x, std::move(kernel), std::move(stride), std::move(padding));
}
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride,
                  std::vector<int64_t> padding) {
  return pool(ir::PoolKind::kAvg, x, std::move(kernel), std::move(stride), std::move(padding));
}
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size) {
  return emit1(x, ir::AdaptiveAvgPool2d{in(x), std::move(output_size), {}}, {&x});
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const Shape& s = impl_of(x, "layer_norm").meta.shape;
  size_t k = normalized_shape.size();
  if (k == 0 || k > s.size() ||
      !std::equal(normalized_shape.begin(), normalized_shape.end(), s.end() - k)) {
    throw Error("layer_norm: normalized_shape " + shape_str(normalized_shape) +
                " must equal the trailing dims of the input " + shape_str(s));
  }
  return emit1(x, ir::LayerNorm{in(x), in(weight), in(bias), static_cast<int64_t>(k), eps, {}},
               {&x, &weight, &bias});
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& mask, bool causal, std::optional<double> scale) {
  const Shape& qs = impl_of(q, "scaled_dot_product_attention").meta.shape;
  const double d = qs.empty() ? 1.0 : static_cast<double>(qs.back());
  const double s = scale ? *scale : (d > 0 ? 1.0 / std::sqrt(d) : 1.0);
  return emit1(q, ir::ScaledDotProductAttention{in(q), in(k), in(v), in(mask), causal, s, {}},
               {&q, &k, &v, &mask});
}
Tensor softmax(const Tensor& x, int64_t dim) { return x.softmax(dim); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return x.log_softmax(dim); }

}  // namespace tw
