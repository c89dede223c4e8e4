// The wire form of every field type that tasks (tasks.h) and messages (messages.h) are declared
// with: FieldWriter puts a field, FieldReader gets it back with bounds checks (never allocating
// more than the input holds), FieldSize counts the bytes FieldWriter puts. A task or message
// lists its fields once (TW_FIELDS, as ir/ops.h declares an op's) and these three walk that
// list, so its encoder, decoder and size cannot disagree. docs/protocol.md §4 gives each form.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor_data.h"
#include "core/wire.h"
#include "ir/collective.h"
#include "ir/graph.h"
#include "ir/ops.h"

namespace tw::protocol {

// Strings (names, reasons, credentials) longer than this are malformed.
inline constexpr size_t kMaxStringBytes = 64 * 1024;

// An id list is a u32 count and each id as a u64, or, packed (protocol 4), a varint count and
// each id as the zigzag varint of its difference from the one before: a training step's replay
// and its drops take ~1 byte per id instead of 8.
using IdList = std::vector<ir::TensorId>;

struct FieldWriter {
  WireWriter& w;
  bool packed = false;  // id lists packed

  void put(uint32_t v) { w.u32(v); }
  void put(uint64_t v) { w.u64(v); }
  void put(const std::string& s) { w.str(s); }
  void put(ir::CollectiveKind k) { w.u8(static_cast<uint8_t>(k)); }
  void put(ir::CollectiveReduce k) { w.u8(static_cast<uint8_t>(k)); }
  void put(const TensorMeta& m);  // u8 dtype, u32 rank, rank x i64 dims
  void put(const IdList& ids);
  void put(const ir::Op& op);        // ir/codec.h
  void put(const ir::Graph& graph);  // ir/graph_codec.h
  template <class T>
  void operator()(const char*, const T& v) {
    put(v);
  }
};

// Gets fields in order until one fails; status says why (the fields after it are left alone).
struct FieldReader {
  explicit FieldReader(WireReader& reader, bool packed_ids = false)
      : r(reader), packed(packed_ids) {}
  WireReader& r;
  bool packed = false;
  Status status;

  Status get(uint32_t& v) { return r.u32(v); }
  Status get(uint64_t& v) { return r.u64(v); }
  Status get(std::string& s) { return r.str(s, kMaxStringBytes); }
  Status get(ir::CollectiveKind& k);
  Status get(ir::CollectiveReduce& k);
  Status get(TensorMeta& m);
  Status get(IdList& ids);
  Status get(ir::Op& op);
  Status get(ir::Graph& graph);
  template <class T>
  void operator()(const char*, T& v) {
    if (status.ok()) status = get(v);
  }
};

// The bytes FieldWriter puts (ops and graphs have no size here: their encoding is their size).
struct FieldSize {
  bool packed = false;
  uint64_t bytes = 0;

  static constexpr uint64_t of(uint32_t) { return 4; }
  static constexpr uint64_t of(uint64_t) { return 8; }
  static uint64_t of(const std::string& s) { return 4 + s.size(); }
  static constexpr uint64_t of(ir::CollectiveKind) { return 1; }
  static constexpr uint64_t of(ir::CollectiveReduce) { return 1; }
  static uint64_t of(const TensorMeta& m) { return 1 + 4 + 8 * uint64_t{m.shape.size()}; }
  uint64_t of(const IdList& ids) const;
  template <class T>
  void operator()(const char*, const T& v) {
    bytes += of(v);
  }
};

// Status: u8 code, and the message string unless OK.
void put_status(WireWriter& w, const Status& s);
Status get_status(WireReader& r, Status& out);

}  // namespace tw::protocol
