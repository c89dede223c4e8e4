#include "protocol/fields.h"

#include "ir/codec.h"
#include "ir/graph_codec.h"

namespace tw::protocol {

namespace {

void put_varint(WireWriter& w, uint64_t v) {
  while (v >= 0x80) {
    w.u8(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  w.u8(static_cast<uint8_t>(v));
}

uint64_t varint_size(uint64_t v) {
  uint64_t n = 1;
  for (; v >= 0x80; v >>= 7) ++n;
  return n;
}

Status get_varint(WireReader& r, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    uint8_t b = 0;
    TW_RETURN_NOT_OK(r.u8(b));
    // The tenth byte holds bit 63 only.
    if (shift == 63 && b > 1) return data_loss("varint overflows 64 bits");
    if (b == 0 && shift > 0) return data_loss("overlong varint");  // one encoding per value
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return Status::OK();
  }
  return data_loss("varint longer than 10 bytes");
}

// Differences are taken modulo 2^64, so every sequence of ids has one encoding.
uint64_t zigzag(uint64_t delta) {
  const int64_t d = static_cast<int64_t>(delta);
  return (static_cast<uint64_t>(d) << 1) ^ static_cast<uint64_t>(d >> 63);
}
uint64_t unzigzag(uint64_t z) { return (z >> 1) ^ (~(z & 1) + 1); }

}  // namespace

void FieldWriter::put(const TensorMeta& m) {
  w.u8(static_cast<uint8_t>(m.dtype));
  w.u32(static_cast<uint32_t>(m.shape.size()));
  for (int64_t x : m.shape) w.i64(x);
}

void FieldWriter::put(const TensorData& d) {
  put(d.meta);
  w.u64(d.bytes.size());
  w.raw_ref(d.bytes);
}

void FieldWriter::put(const InSegment& s) {
  put(s.meta);
  w.u64(s.bytes());
}

void FieldWriter::put(const IdList& ids) {
  if (!packed) {
    w.u32(static_cast<uint32_t>(ids.size()));
    for (auto id : ids) w.u64(id);
    return;
  }
  put_varint(w, ids.size());
  uint64_t prev = 0;
  for (auto id : ids) {
    put_varint(w, zigzag(id - prev));
    prev = id;
  }
}

void FieldWriter::put(const ir::Op& op) { ir::encode_op(op, w); }
void FieldWriter::put(const ir::Graph& graph) { ir::encode_graph(graph, w); }

namespace {
// An enum whose wire values are 1..last; `what` names it in the error.
template <class E>
Status get_enum(WireReader& r, E& e, uint8_t last, const char* what) {
  uint8_t v = 0;
  TW_RETURN_NOT_OK(r.u8(v));
  if (v < 1 || v > last) return data_loss(std::string("unknown ") + what + " " + std::to_string(v));
  e = static_cast<E>(v);
  return Status::OK();
}
}  // namespace

Status FieldReader::get(bool& b) {
  uint8_t v = 0;
  TW_RETURN_NOT_OK(r.u8(v));
  if (v > 1) return data_loss("flag " + std::to_string(v) + " is neither 0 nor 1");
  b = v == 1;
  return Status::OK();
}

Status FieldReader::unknown(const char* what, uint8_t v) {
  return data_loss(std::string("unknown ") + what + " " + std::to_string(v));
}

Status FieldReader::in_field(const char* field) const {
  return Status(status.code(), std::string(what) + "." + field + ": " + status.message());
}

Status FieldReader::get(ir::CollectiveKind& k) { return get_enum(r, k, 4, "collective kind"); }
Status FieldReader::get(ir::CollectiveReduce& k) { return get_enum(r, k, 3, "reduction"); }

Status FieldReader::get(TensorMeta& m) {
  uint8_t dt = 0;
  uint32_t rank = 0;
  TW_RETURN_NOT_OK(r.u8(dt));
  if (!dtype_valid(dt)) return data_loss("unknown dtype code " + std::to_string(dt));
  m.dtype = static_cast<DType>(dt);
  TW_RETURN_NOT_OK(r.count(rank, 8));
  m.shape.resize(rank);
  for (auto& x : m.shape) TW_RETURN_NOT_OK(r.i64(x));
  return validate_shape(m.shape);
}

Status FieldReader::get(TensorData& d) {
  TW_RETURN_NOT_OK(get(d.meta));
  uint64_t n = 0;
  TW_RETURN_NOT_OK(r.u64(n));
  const uint64_t expect = meta_bytes(d.meta);
  if (n != expect || n > r.remaining()) {
    return data_loss("tensor carries " + std::to_string(n) + " bytes, expected " +
                     std::to_string(expect));
  }
  return r.bytes(static_cast<size_t>(n), d.bytes);
}

Status FieldReader::get(InSegment& s) {
  TW_RETURN_NOT_OK(get(s.meta));
  uint64_t n = 0;
  TW_RETURN_NOT_OK(r.u64(n));
  if (n != s.bytes()) {
    return data_loss("segment says " + std::to_string(n) + " bytes, expected " +
                     std::to_string(s.bytes()));
  }
  return Status::OK();
}

Status FieldReader::get(IdList& ids) {
  if (!packed) {
    uint32_t k = 0;
    TW_RETURN_NOT_OK(r.count(k, 8));
    ids.resize(k);
    for (auto& id : ids) TW_RETURN_NOT_OK(r.u64(id));
    return Status::OK();
  }
  uint64_t n = 0;
  TW_RETURN_NOT_OK(get_varint(r, n));
  if (n > r.remaining()) {  // every id takes at least one byte
    return data_loss("packed id list of " + std::to_string(n) + " ids in " +
                     std::to_string(r.remaining()) + " bytes");
  }
  ids.resize(static_cast<size_t>(n));
  uint64_t prev = 0;
  for (auto& id : ids) {
    uint64_t z = 0;
    TW_RETURN_NOT_OK(get_varint(r, z));
    prev += unzigzag(z);
    id = prev;
  }
  return Status::OK();
}

Status FieldReader::get(ir::Op& op) {
  auto got = ir::decode_op(r);
  if (!got.ok()) return got.status();
  op = std::move(got).value();
  return Status::OK();
}

Status FieldReader::get(ir::Graph& graph) {
  auto got = ir::decode_graph(r);
  if (!got.ok()) return got.status();
  graph = std::move(got).value();
  return Status::OK();
}

uint64_t FieldSize::of(const IdList& ids) const {
  if (!packed) return 4 + 8 * uint64_t{ids.size()};
  uint64_t n = varint_size(ids.size()), prev = 0;
  for (auto id : ids) {
    n += varint_size(zigzag(id - prev));
    prev = id;
  }
  return n;
}

void put_status(WireWriter& w, const Status& s) {
  w.u8(static_cast<uint8_t>(s.code()));
  if (!s.ok()) w.str(s.message());
}

Status get_status(WireReader& r, Status& out) {
  uint8_t code = 0;
  TW_RETURN_NOT_OK(r.u8(code));
  if (code > static_cast<uint8_t>(StatusCode::kInternal)) {
    return data_loss("unknown status code " + std::to_string(code));
  }
  if (code == 0) {
    out = Status::OK();
    return Status::OK();
  }
  std::string msg;
  TW_RETURN_NOT_OK(r.str(msg, kMaxStringBytes));
  out = Status(static_cast<StatusCode>(code), std::move(msg));
  return Status::OK();
}

}  // namespace tw::protocol
