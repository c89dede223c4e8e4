// The graph under construction (importer.h): host values, TensorProto decoding and the emitters.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/half.h"
#include "ir/infer.h"
#include "onnx/importer.h"

namespace tw::onnx_import {

namespace {

template <class T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // the hosts we build for are little-endian, as the bytes are
  return v;
}

double element(const HostTensor& h, int64_t i) {
  const uint8_t* p = h.bytes.data() + i * static_cast<int64_t>(dtype_size(h.meta.dtype));
  switch (h.meta.dtype) {
    case kF32: return load_le<float>(p);
    case kF64: return load_le<double>(p);
    case kI32: return load_le<int32_t>(p);
    case kI64: return static_cast<double>(load_le<int64_t>(p));
    case kU8: return *p;
    case kI8: return static_cast<int8_t>(*p);
    case kBool: return *p != 0;
    case kF16: return f16_to_f32(load_le<uint16_t>(p));
    case kBF16: return bf16_to_f32(load_le<uint16_t>(p));
  }
  return 0;
}

}  // namespace

std::vector<int64_t> HostTensor::ints() const {
  std::vector<int64_t> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) {
    if (meta.dtype == kI64) {
      out[i] = load_le<int64_t>(bytes.data() + i * 8);
    } else {
      out[i] = ir::float_to_int<int64_t>(element(*this, i));
    }
  }
  return out;
}

std::vector<double> HostTensor::doubles() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[i] = element(*this, i);
  return out;
}

HostTensor HostTensor::of_ints(const std::vector<int64_t>& v, Shape shape, DType dtype) {
  HostTensor h;
  h.meta = {std::move(shape), dtype};
  h.bytes.resize(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == kI64) {
      std::memcpy(h.bytes.data() + i * 8, &v[i], 8);
    } else if (dtype == kI32) {
      const int32_t x = static_cast<int32_t>(v[i]);
      std::memcpy(h.bytes.data() + i * 4, &x, 4);
    } else {
      throw Error("internal: HostTensor::of_ints for " + std::string(dtype_name(dtype)));
    }
  }
  return h;
}

std::optional<DType> dtype_of(int32_t t) {
  using P = ::onnx::TensorProto;
  switch (t) {
    case P::FLOAT: return kF32;
    case P::DOUBLE: return kF64;
    case P::INT32: return kI32;
    case P::INT64: return kI64;
    case P::UINT8: return kU8;
    case P::INT8: return kI8;
    case P::BOOL: return kBool;
    case P::FLOAT16: return kF16;
    case P::BFLOAT16: return kBF16;
    // Widened (docs/onnx.md): tensorwire has no 16-bit integers nor unsigned 32/64-bit ones.
    case P::INT16:
    case P::UINT16: return kI32;
    case P::UINT32:
    case P::UINT64: return kI64;
    default: return std::nullopt;
  }
}

const char* onnx_type_name(int32_t t) {
  if (::onnx::TensorProto_DataType_IsValid(t)) {
    return ::onnx::TensorProto_DataType_Name(static_cast<::onnx::TensorProto_DataType>(t)).c_str();
  }
  return "unknown";
}

namespace {

// INT16, UINT16, UINT32 and UINT64 tensors, widened to the dtype_of() gives (i32, i64); a UINT64
// value above the i64 range is refused.
HostTensor widened(const ::onnx::TensorProto& t, const std::string& what, DType d) {
  using P = ::onnx::TensorProto;
  HostTensor h;
  h.meta.dtype = d;
  for (int64_t dim : t.dims()) {
    if (dim < 0) throw Error(what + ": negative dim " + std::to_string(dim));
    h.meta.shape.push_back(dim);
  }
  Status st = validate_shape(h.meta.shape);
  if (!st.ok()) throw Error(what + ": " + st.message());
  const size_t n = static_cast<size_t>(h.numel());
  const int32_t type = t.data_type();
  const size_t src_size = type == P::INT16 || type == P::UINT16 ? 2 : type == P::UINT32 ? 4 : 8;
  // 16-bit types keep their values in int32_data, the unsigned 32/64-bit ones in uint64_data.
  const size_t held = t.has_raw_data() ? t.raw_data().size() / src_size
                      : type == P::INT16 || type == P::UINT16
                          ? static_cast<size_t>(t.int32_data_size())
                          : static_cast<size_t>(t.uint64_data_size());
  if (held != n || (t.has_raw_data() && t.raw_data().size() % src_size != 0)) {
    throw Error(what + ": " + std::to_string(held) + " values for shape " +
                shape_str(h.meta.shape));
  }
  h.bytes.resize(n * dtype_size(d));
  const uint8_t* raw =
      t.has_raw_data() ? reinterpret_cast<const uint8_t*>(t.raw_data().data()) : nullptr;
  for (size_t i = 0; i < n; ++i) {
    int64_t v = 0;
    const int k = static_cast<int>(i);
    switch (type) {
      case P::INT16:
        v = raw ? load_le<int16_t>(raw + 2 * i) : static_cast<int16_t>(t.int32_data(k));
        break;
      case P::UINT16:
        v = raw ? load_le<uint16_t>(raw + 2 * i) : static_cast<uint16_t>(t.int32_data(k));
        break;
      case P::UINT32:
        v = raw ? load_le<uint32_t>(raw + 4 * i) : static_cast<uint32_t>(t.uint64_data(k));
        break;
      default: {
        const uint64_t u = raw ? load_le<uint64_t>(raw + 8 * i) : t.uint64_data(k);
        if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          throw Error(what + ": UINT64 value " + std::to_string(u) + " (element " +
                      std::to_string(i) + ") is beyond INT64, the dtype UINT64 loads as");
        v = static_cast<int64_t>(u);
      }
    }
    if (d == kI32) {
      const int32_t x = static_cast<int32_t>(v);
      std::memcpy(h.bytes.data() + 4 * i, &x, 4);
    } else {
      std::memcpy(h.bytes.data() + 8 * i, &v, 8);
    }
  }
  return h;
}

}  // namespace

HostTensor host_tensor(const ::onnx::TensorProto& t, const std::string& what) {
  using P = ::onnx::TensorProto;
  std::optional<DType> d = dtype_of(t.data_type());
  if (!d) {
    throw Error(what + ": data type " + onnx_type_name(t.data_type()) +
                " has no tensorwire dtype (supported: FLOAT, DOUBLE, INT32, INT64, UINT8, INT8, "
                "BOOL, FLOAT16, BFLOAT16; INT16 and UINT16 load as INT32, UINT32 and UINT64 as "
                "INT64)");
  }
  if (t.data_location() == P::EXTERNAL) throw Error(what + ": external data is not supported");
  const int32_t type = t.data_type();
  if (type == P::INT16 || type == P::UINT16 || type == P::UINT32 || type == P::UINT64) {
    return widened(t, what, *d);
  }
  HostTensor h;
  h.meta.dtype = *d;
  for (int64_t dim : t.dims()) {
    if (dim < 0) throw Error(what + ": negative dim " + std::to_string(dim));
    h.meta.shape.push_back(dim);
  }
  Status st = validate_shape(h.meta.shape);
  if (!st.ok()) throw Error(what + ": " + st.message());
  const size_t n = static_cast<size_t>(h.numel()), es = dtype_size(*d);
  // The values the message holds, checked against the shape before any memory is taken for it
  // (a shape of 2^40 elements with a few values is an error, not an allocation failure).
  size_t held = 0;
  if (t.has_raw_data()) {
    held = t.raw_data().size() / es;
  } else {
    switch (*d) {
      case kF32: held = static_cast<size_t>(t.float_data_size()); break;
      case kF64: held = static_cast<size_t>(t.double_data_size()); break;
      case kI64: held = static_cast<size_t>(t.int64_data_size()); break;
      default: held = static_cast<size_t>(t.int32_data_size()); break;
    }
  }
  if (held != n) {
    throw Error(what + ": " + std::to_string(held) + " values for shape " +
                shape_str(h.meta.shape));
  }
  h.bytes.resize(n * es);
  auto count = [&](size_t have) {
    if (have != n) {
      throw Error(what + ": " + std::to_string(have) + " values for shape " +
                  shape_str(h.meta.shape));
    }
  };
  // An empty tensor's repeated field may have no storage at all (data() null): nothing to copy.
  auto copy = [&](const void* from) {
    if (!h.bytes.empty()) std::memcpy(h.bytes.data(), from, h.bytes.size());
  };
  if (t.has_raw_data()) {
    count(t.raw_data().size() / es);
    if (t.raw_data().size() % es != 0)
      throw Error(what + ": raw_data size is not a whole element count");
    copy(t.raw_data().data());
    return h;
  }
  switch (*d) {
    case kF32:
      count(t.float_data_size());
      copy(t.float_data().data());
      break;
    case kF64:
      count(t.double_data_size());
      copy(t.double_data().data());
      break;
    case kI64:
      count(t.int64_data_size());
      copy(t.int64_data().data());
      break;
    case kI32:
      count(t.int32_data_size());
      copy(t.int32_data().data());
      break;
    case kU8:
    case kI8:  // two's complement: the low byte of each int32
    case kBool:
      count(t.int32_data_size());
      for (size_t i = 0; i < n; ++i)
        h.bytes[i] = static_cast<uint8_t>(t.int32_data(static_cast<int>(i)));
      break;
    case kF16:
    case kBF16:  // the 16 bits of each value in an int32
      count(t.int32_data_size());
      for (size_t i = 0; i < n; ++i) {
        const uint16_t bits = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
        std::memcpy(h.bytes.data() + 2 * i, &bits, 2);
      }
      break;
  }
  return h;
}

// ---- Builder ----

TensorId Builder::add_input(const TensorMeta& meta) {
  const TensorId id = new_id();
  graph_.input_ids.push_back(id);
  graph_.inputs.push_back(meta);
  metas_.emplace(id, meta);
  return id;
}

void Builder::append(ir::Op op) {
  const ir::MetaLookup lookup = [&](TensorId id) -> Result<TensorMeta> {
    auto it = metas_.find(id);
    if (it == metas_.end()) return not_found("unknown tensor");
    return it->second;
  };
  Result<std::vector<TensorMeta>> out = ir::infer(op, lookup);
  if (!out.ok()) fail(out.status().message());
  const std::vector<TensorId> ids = ir::op_outputs(op);
  for (size_t k = 0; k < ids.size(); ++k) metas_.emplace(ids[k], out->at(k));
  graph_.ops.push_back(std::move(op));
}

TensorId Builder::constant_id(const HostTensor& h) {
  const TensorId id = new_id();
  append(ir::FromHost{{id},
                      h.meta.shape,
                      h.meta.dtype,
                      ir::Bytes{Buffer::copy_of(h.bytes.data(), h.bytes.size())}});
  return id;
}

#define TW_EMIT(...)            \
  const TensorId id = new_id(); \
  append(__VA_ARGS__);          \
  return id

TensorId Builder::unary(ir::UnaryKind k, TensorId x) { TW_EMIT(ir::Unary{k, {x}, {id}}); }
TensorId Builder::binary(ir::BinaryKind k, TensorId a, TensorId b) {
  TW_EMIT(ir::Binary{k, {a}, {b}, {id}});
}
TensorId Builder::scalar(ir::BinaryKind k, TensorId a, ir::Scalar s, bool reverse) {
  TW_EMIT(ir::BinaryScalar{k, {a}, s, reverse, {id}});
}
TensorId Builder::cast(TensorId x, DType d) {
  if (meta(x).dtype == d) return x;
  TW_EMIT(ir::Cast{{x}, d, {id}});
}
TensorId Builder::reduce(ir::ReduceKind k, TensorId x, std::vector<int64_t> dims, bool keepdim) {
  TW_EMIT(ir::Reduce{k, {x}, std::move(dims), keepdim, {id}});
}
TensorId Builder::reshape(TensorId x, Shape shape) {
  TW_EMIT(ir::Reshape{{x}, std::move(shape), {id}});
}
TensorId Builder::permute(TensorId x, std::vector<int64_t> dims) {
  TW_EMIT(ir::Permute{{x}, std::move(dims), {id}});
}
TensorId Builder::expand(TensorId x, Shape shape) {
  if (meta(x).shape == shape) return x;
  TW_EMIT(ir::Expand{{x}, std::move(shape), {id}});
}
TensorId Builder::slice(TensorId x, std::vector<int64_t> starts, std::vector<int64_t> ends,
                        std::vector<int64_t> steps) {
  TW_EMIT(ir::Slice{{x}, std::move(starts), std::move(ends), std::move(steps), {id}});
}
TensorId Builder::narrow(TensorId x, int64_t dim, int64_t begin, int64_t end) {
  const Shape& s = meta(x).shape;
  std::vector<int64_t> starts(s.size(), 0), ends(s), steps(s.size(), 1);
  starts[dim] = std::clamp<int64_t>(begin, 0, s[dim]);
  ends[dim] = std::clamp<int64_t>(end, 0, s[dim]);
  return slice(x, starts, ends, steps);
}
TensorId Builder::cat(std::vector<TensorId> xs, int64_t dim) {
  if (xs.size() == 1) return xs[0];
  std::vector<ir::In> in;
  for (TensorId x : xs) in.push_back({x});
  TW_EMIT(ir::Cat{std::move(in), dim, {id}});
}
TensorId Builder::flip(TensorId x, std::vector<int64_t> dims) {
  TW_EMIT(ir::Flip{{x}, std::move(dims), {id}});
}
TensorId Builder::where(TensorId c, TensorId a, TensorId b) {
  TW_EMIT(ir::Where{{c}, {a}, {b}, {id}});
}
TensorId Builder::full(Shape shape, DType d, ir::Scalar v) {
  TW_EMIT(ir::Full{{id}, std::move(shape), d, v});
}
TensorId Builder::arange(int64_t n) {
  if (n == 0) return full({0}, kI64, int64_t{0});
  TW_EMIT(ir::Arange{{id}, int64_t{0}, n, int64_t{1}, kI64});
}
TensorId Builder::matmul(TensorId a, TensorId b) { TW_EMIT(ir::MatMul{{a}, {b}, {id}}); }
TensorId Builder::softmax(TensorId x, int64_t dim, bool log) {
  TW_EMIT(ir::Softmax{{x}, dim, log, {id}});
}
TensorId Builder::index_select(TensorId x, int64_t dim, TensorId index) {
  TW_EMIT(ir::IndexSelect{{x}, dim, {index}, {id}});
}
TensorId Builder::gather(TensorId x, int64_t dim, TensorId index) {
  TW_EMIT(ir::Gather{{x}, dim, {index}, {id}});
}
TensorId Builder::clamp(TensorId x, std::optional<ir::Scalar> lo, std::optional<ir::Scalar> hi) {
  TW_EMIT(ir::Clamp{{x},
                    lo.has_value(),
                    lo.value_or(ir::Scalar()),
                    hi.has_value(),
                    hi.value_or(ir::Scalar()),
                    {id}});
}
#undef TW_EMIT

TensorId Builder::pad_constant(TensorId x, const std::vector<int64_t>& before,
                               const std::vector<int64_t>& after, ir::Scalar value) {
  for (size_t d = 0; d < before.size(); ++d) {
    if (before[d] == 0 && after[d] == 0) continue;
    const TensorMeta m = meta(x);
    std::vector<TensorId> parts;
    Shape s = m.shape;
    if (before[d] > 0) {
      s[d] = before[d];
      parts.push_back(full(s, m.dtype, value));
    }
    parts.push_back(x);
    if (after[d] > 0) {
      s[d] = after[d];
      parts.push_back(full(s, m.dtype, value));
    }
    x = cat(parts, static_cast<int64_t>(d));
  }
  return x;
}

// ---- Node ----

Builder::Value& Node::value(size_t i) {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is required");
  auto it = values_.find(proto.input(static_cast<int>(i)));
  if (it == values_.end())
    fail("input '" + proto.input(static_cast<int>(i)) + "' is not defined before this node");
  return it->second;
}

TensorId Node::input(size_t i) {
  Builder::Value& v = value(i);
  v.used_as_tensor = true;
  if (v.id == 0) v.id = b.constant_id(*v.constant);
  return v.id;
}

const TensorMeta& Node::input_meta(size_t i) { return value(i).meta; }

TensorId Node::input_broadcast(size_t i, size_t ref) {
  legacy_broadcast_ = true;
  const TensorId x = input(i);
  if (opset >= 7 || attr_int("broadcast", 0) == 0) return x;
  // Before opset 7, with broadcast=1, B's dims align with A's starting at `axis` (default: B's
  // trailing alignment, as numpy).
  const Shape a = input_meta(ref).shape, s = b.meta(x).shape;
  const int64_t ra = static_cast<int64_t>(a.size()), rb = static_cast<int64_t>(s.size());
  const int64_t at = has_attr("axis") ? axis(attr_int("axis", 0), ra) : ra - rb;
  if (at < 0 || at + rb > ra) fail("attribute axis does not place B's shape inside A's");
  Shape out(static_cast<size_t>(ra), 1);
  std::copy(s.begin(), s.end(), out.begin() + at);
  return b.reshape(x, out);
}

bool Node::has_constant(size_t i) { return has_input(i) && value(i).constant.has_value(); }

const HostTensor& Node::constant(size_t i, const char* what) {
  Builder::Value& v = value(i);
  if (!v.constant) {
    fail("input " + std::to_string(i) + " ('" + proto.input(static_cast<int>(i)) + "', " + what +
         ") must be known at load: an initializer, a Constant, or a graph input given by value "
         "(LoadOptions::input_values, --input-value NAME=V)");
  }
  v.constant_used = true;
  return *v.constant;
}

void Node::set_output(size_t i, TensorId id) {
  if (!wants_output(i)) return;
  values_[proto.output(static_cast<int>(i))] = Builder::Value{id, b.meta(id), std::nullopt};
}

void Node::set_constant_output(size_t i, HostTensor h) {
  if (!wants_output(i)) return;
  Builder::Value v;
  v.meta = h.meta;
  v.constant = std::move(h);
  values_[proto.output(static_cast<int>(i))] = std::move(v);
}

void Node::forward(size_t out, size_t in) {
  if (!wants_output(out)) return;
  Builder::Value v = value(in);
  values_[proto.output(static_cast<int>(out))] = std::move(v);
}

const ::onnx::AttributeProto* Node::attr(const std::string& name) const {
  for (const auto& a : proto.attribute()) {
    if (a.name() == name) {
      if (!a.ref_attr_name().empty())
        fail("attribute '" + name + "' refers to a function attribute");
      return &a;
    }
  }
  return nullptr;
}

int64_t Node::attr_int(const std::string& name, int64_t dflt) const {
  const auto* a = attr(name);
  return a ? a->i() : dflt;
}
double Node::attr_float(const std::string& name, double dflt) const {
  const auto* a = attr(name);
  return a ? a->f() : dflt;
}
std::string Node::attr_string(const std::string& name, const std::string& dflt) const {
  const auto* a = attr(name);
  return a ? a->s() : dflt;
}
std::vector<int64_t> Node::attr_ints(const std::string& name) const {
  const auto* a = attr(name);
  return a ? std::vector<int64_t>(a->ints().begin(), a->ints().end()) : std::vector<int64_t>{};
}
std::vector<float> Node::attr_floats(const std::string& name) const {
  const auto* a = attr(name);
  return a ? std::vector<float>(a->floats().begin(), a->floats().end()) : std::vector<float>{};
}

void Node::require_attr_int(const std::string& name, int64_t ok) const {
  const auto* a = attr(name);
  if (a && a->i() != ok) {
    fail("attribute " + name + "=" + std::to_string(a->i()) + " is not supported (only " +
         std::to_string(ok) + ")");
  }
}

void Node::check_attrs(std::initializer_list<const char*> known) const {
  for (const auto& a : proto.attribute()) {
    // A memory-reuse hint of opsets before 6, without effect on values.
    if (a.name() == "consumed_inputs") continue;
    // Binary ops before opset 7: legacy broadcasting (input_broadcast reads these).
    if (opset < 7 && (a.name() == "broadcast" || a.name() == "axis") && legacy_broadcast_) continue;
    bool found = false;
    for (const char* k : known) found = found || a.name() == k;
    if (!found) fail("attribute '" + a.name() + "' is not supported");
  }
}

int64_t Node::axis(int64_t a, int64_t rank, const char* what) const {
  const int64_t n = a < 0 ? a + rank : a;
  if (n < 0 || n >= rank) {
    fail(std::string(what) + " " + std::to_string(a) + " is out of range for rank " +
         std::to_string(rank));
  }
  return n;
}

std::map<std::string, OpFn>& op_table() {
  static std::map<std::string, OpFn> table;
  return table;
}

}  // namespace tw::onnx_import
