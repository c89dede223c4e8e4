// The wire form of every field type that tasks (tasks.h) and messages (messages.h) are declared
// with: FieldWriter puts a field, FieldReader gets it back with bounds checks (never allocating
// more than the input holds), FieldSize counts the bytes FieldWriter puts. A task or message
// lists its fields once (TW_FIELDS, as ir/ops.h declares an op's) and these three walk that
// list, so its encoder, decoder and size cannot disagree. docs/protocol.md §4 gives each form.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor_data.h"
#include "core/wire.h"
#include "ir/collective.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::protocol {

// Strings (names, reasons, credentials) longer than this are malformed.
inline constexpr size_t kMaxStringBytes = 64 * 1024;

// The bytes of a tensor of this meta (what a tensor field's byte count must say).
inline uint64_t meta_bytes(const TensorMeta& m) {
  return static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
}

// A tensor whose bytes travel elsewhere (a shared-memory segment): on the wire its meta and the
// byte count that meta gives, which a reader checks.
struct InSegment {
  TensorMeta meta;
  uint64_t bytes() const { return meta_bytes(meta); }
};

// An id list is a u32 count and each id as a u64, or, packed (protocol 4), a varint count and
// each id as the zigzag varint of its difference from the one before: a training step's replay
// and its drops take ~1 byte per id instead of 8.
using IdList = std::vector<ir::TensorId>;

// Status: u8 code, and the message string unless OK.
void put_status(WireWriter& w, const Status& s);
Status get_status(WireReader& r, Status& out);

// A struct that declares its fields (TW_FIELDS) nests: its fields in order, nothing around them.
template <class T>
concept Declared = requires(const T& t) {
  t.tie();
};

// An enum sent as its u8 wire value. Specialise it beside the enum: values outside
// [kFirst, kLast] are malformed ("unknown <kWhat> N").
template <class E>
struct WireEnum;
template <class E>
concept WireEnumType = requires {
  WireEnum<E>::kFirst;
  WireEnum<E>::kLast;
  WireEnum<E>::kWhat;
};

struct FieldWriter {
  WireWriter& w;
  bool packed = false;  // id lists packed

  void put(bool b) { w.u8(b ? 1 : 0); }
  void put(uint16_t v) { w.u16(v); }
  void put(uint32_t v) { w.u32(v); }
  void put(uint64_t v) { w.u64(v); }
  void put(const std::string& s) { w.str(s); }
  void put(const Status& s) { put_status(w, s); }
  template <WireEnumType E>
  void put(E e) {
    w.u8(static_cast<uint8_t>(e));
  }
  void put(ir::CollectiveKind k) { w.u8(static_cast<uint8_t>(k)); }
  void put(ir::CollectiveReduce k) { w.u8(static_cast<uint8_t>(k)); }
  void put(const TensorMeta& m);  // u8 dtype, u32 rank, rank x i64 dims
  void put(const TensorData& d);  // its meta, a u64 byte count, the bytes (a segment when large)
  void put(const InSegment& s);   // its meta and the u64 byte count of that meta
  void put(const IdList& ids);
  void put(const ir::Op& op);        // ir/codec.h
  void put(const ir::Graph& graph);  // ir/graph_codec.h
  template <Declared T>
  void put(const T& t) {
    t.fields(*this);
  }
  template <class A, class B>
  void put(const std::pair<A, B>& p) {
    put(p.first);
    put(p.second);
  }
  // An outcome: its status, then its value only when OK.
  template <class T>
  void put(const Result<T>& r) {
    put(r.status());
    if (r.ok()) put(*r);
  }
  // A list of anything but ids (IdList above): a u32 count, then each item.
  template <class T>
  void put(const std::vector<T>& items) {
    w.u32(static_cast<uint32_t>(items.size()));
    for (const auto& x : items) put(x);
  }
  template <class T>
  void operator()(const char*, const T& v) {
    put(v);
  }
};

// The bytes FieldWriter puts (ops and graphs have no size here: their encoding is their size).
struct FieldSize {
  bool packed = false;
  uint64_t bytes = 0;

  static constexpr uint64_t of(bool) { return 1; }
  static constexpr uint64_t of(uint16_t) { return 2; }
  static constexpr uint64_t of(uint32_t) { return 4; }
  static constexpr uint64_t of(uint64_t) { return 8; }
  static uint64_t of(const std::string& s) { return 4 + s.size(); }
  static uint64_t of(const Status& s) { return s.ok() ? 1 : 1 + 4 + s.message().size(); }
  static constexpr uint64_t of(ir::CollectiveKind) { return 1; }
  static constexpr uint64_t of(ir::CollectiveReduce) { return 1; }
  template <WireEnumType E>
  static constexpr uint64_t of(E) {
    return 1;
  }
  static uint64_t of(const TensorMeta& m) { return 1 + 4 + 8 * uint64_t{m.shape.size()}; }
  static uint64_t of(const TensorData& d) { return of(d.meta) + 8 + d.bytes.size(); }
  static uint64_t of(const InSegment& s) { return of(s.meta) + 8; }
  uint64_t of(const IdList& ids) const;
  template <Declared T>
  uint64_t of(const T& t) const {
    FieldSize inner{packed};
    t.fields(inner);
    return inner.bytes;
  }
  template <class A, class B>
  uint64_t of(const std::pair<A, B>& p) const {
    return of(p.first) + of(p.second);
  }
  template <class T>
  uint64_t of(const Result<T>& r) const {
    return of(r.status()) + (r.ok() ? of(*r) : 0);
  }
  template <class T>
  uint64_t of(const std::vector<T>& items) const {
    uint64_t n = 4;
    for (const auto& x : items) n += of(x);
    return n;
  }
  template <class T>
  void operator()(const char*, const T& v) {
    bytes += of(v);
  }
};

// Gets fields in order until one fails; status says why (the fields after it are left alone),
// prefixed "<what>.<field>: " when `what` names the message.
struct FieldReader {
  explicit FieldReader(WireReader& reader, bool packed_ids = false, const char* message = nullptr)
      : r(reader), packed(packed_ids), what(message) {}
  WireReader& r;
  bool packed = false;
  const char* what = nullptr;
  Status status;

  Status get(bool& b);
  Status get(uint16_t& v) { return r.u16(v); }
  Status get(uint32_t& v) { return r.u32(v); }
  Status get(uint64_t& v) { return r.u64(v); }
  Status get(std::string& s) { return r.str(s, kMaxStringBytes); }
  Status get(Status& s) { return get_status(r, s); }
  Status get(ir::CollectiveKind& k);
  Status get(ir::CollectiveReduce& k);
  Status get(TensorMeta& m);
  // The byte count must be the meta's (and there must be that many): the bytes are a slice of
  // the input, not a copy.
  Status get(TensorData& d);
  Status get(InSegment& s);
  Status get(IdList& ids);
  Status get(ir::Op& op);
  Status get(ir::Graph& graph);
  template <WireEnumType E>
  Status get(E& e) {
    uint8_t v = 0;
    TW_RETURN_NOT_OK(r.u8(v));
    // One unsigned comparison: [0, 255] must not read as an always-false test.
    if (static_cast<unsigned>(v - WireEnum<E>::kFirst) >
        0u + WireEnum<E>::kLast - WireEnum<E>::kFirst) {
      return unknown(WireEnum<E>::kWhat, v);
    }
    e = static_cast<E>(v);
    return Status::OK();
  }
  template <Declared T>
  Status get(T& t) {
    FieldReader inner(r, packed);
    t.fields(inner);
    return inner.status;
  }
  template <class A, class B>
  Status get(std::pair<A, B>& p) {
    TW_RETURN_NOT_OK(get(p.first));
    return get(p.second);
  }
  // Into an outcome that may hold an earlier one: an OK value is read in place (a reused
  // message keeps its allocations).
  template <class T>
  Status get(Result<T>& r) {
    Status s;
    TW_RETURN_NOT_OK(get(s));
    if (!s.ok()) {
      r = Result<T>(std::move(s));
      return Status::OK();
    }
    if (!r.ok()) r = Result<T>(T{});
    return get(*r);
  }
  // The count is checked against the bytes left (each item takes at least the bytes of a
  // default one) before anything is allocated.
  template <class T>
  Status get(std::vector<T>& items) {
    uint32_t n = 0;
    TW_RETURN_NOT_OK(r.count(n, static_cast<size_t>(FieldSize{packed}.of(T{}))));
    items.resize(n);
    for (auto& x : items) TW_RETURN_NOT_OK(get(x));
    return Status::OK();
  }
  template <class T>
  void operator()(const char* field, T& v) {
    if (!status.ok()) return;
    if constexpr (Declared<T>) {
      if (what) {  // its own fields' errors read "<what>.<field>.<its field>: "
        const std::string name = std::string(what) + "." + field;
        FieldReader inner(r, packed, name.c_str());
        v.fields(inner);
        status = std::move(inner.status);
        return;
      }
    }
    status = get(v);
    if (!status.ok() && what) status = in_field(field);
  }

 private:
  static Status unknown(const char* what, uint8_t v);
  Status in_field(const char* field) const;
};

}  // namespace tw::protocol
TW_INTERNAL_END
