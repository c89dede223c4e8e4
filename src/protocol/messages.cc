#include "protocol/messages.h"

#include "ir/codec.h"
#include "ir/graph_codec.h"

namespace tw::protocol {

const char* refuse_reason_name(RefuseReason r) {
  switch (r) {
    case RefuseReason::kBadVersion: return "unsupported protocol version";
    case RefuseReason::kBadDeviceIndex: return "no such device";
    case RefuseReason::kUnauthorized: return "unauthorised";
    case RefuseReason::kServerBusy: return "server busy";
    case RefuseReason::kMalformed: return "malformed handshake";
    case RefuseReason::kCannotHost: return "device cannot be hosted";
  }
  return "refused";
}

uint64_t OutFrame::payload_size() const {
  uint64_t n = head.size();
  for (const auto& s : segments) n += s.data.size();
  return n;
}

namespace {

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

void put_device(WireWriter& w, const DeviceInfo& d) {
  w.str(d.name);
  w.str(d.backend);
  w.u64(d.memory_bytes);
  w.u32(d.dtype_mask);
}

Status get_device(WireReader& r, DeviceInfo& d) {
  TW_RETURN_NOT_OK(r.str(d.name, kMaxStringBytes));
  TW_RETURN_NOT_OK(r.str(d.backend, kMaxStringBytes));
  TW_RETURN_NOT_OK(r.u64(d.memory_bytes));
  return r.u32(d.dtype_mask);
}

void put_meta(WireWriter& w, const TensorMeta& m) {
  w.u8(static_cast<uint8_t>(m.dtype));
  w.u32(static_cast<uint32_t>(m.shape.size()));
  for (int64_t x : m.shape) w.i64(x);
}

Status get_meta(WireReader& r, TensorMeta& m) {
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

}  // namespace

void encode_hello(const Hello& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ClientMsg::kHello));
  w.u32(kMagic);
  w.u16(m.min_version);
  w.u16(m.max_version);
  w.u32(m.device_index);
  w.str(m.credential);
}

void encode_welcome(const Welcome& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kWelcome));
  w.u16(m.version);
  w.u64(m.session_id);
  w.str(m.server_id);
  w.u32(m.device_index);
  w.u32(static_cast<uint32_t>(m.devices.size()));
  for (const auto& d : m.devices) put_device(w, d);
  w.u64(m.limits.max_frame_bytes);
  w.u64(m.limits.session_memory_bytes);
  w.u32(m.limits.max_sessions);
  w.u32(m.limits.session_queue_depth);
}

void encode_refuse(const Refuse& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kRefuse));
  w.u8(static_cast<uint8_t>(m.reason));
  w.str(m.message);
}

void encode_session_error(const Status& s, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kSessionError));
  put_status(w, s);
}

void encode_read_result(uint64_t request_id, const Result<TensorData>& r, OutFrame& f) {
  WireWriter w(f.head, &f.segments);
  w.u8(static_cast<uint8_t>(ServerMsg::kReadResult));
  w.u64(request_id);
  put_status(w, r.status());
  if (!r.ok()) return;
  const TensorData& d = *r;
  put_meta(w, d.meta);
  w.u64(d.bytes.size());
  w.raw_ref(d.bytes);
}

size_t read_result_data_offset(const uint8_t* payload, size_t n) {
  constexpr uint8_t kType = static_cast<uint8_t>(ServerMsg::kReadResult);
  constexpr size_t kStatusAt = 1 + 8, kRankAt = kStatusAt + 1 + 1;  // then dtype, rank
  if (n == 0) return kNeedMoreBytes;
  if (payload[0] != kType) return 0;
  if (n <= kStatusAt) return kNeedMoreBytes;
  if (payload[kStatusAt] != 0) return 0;  // a refusal carries no tensor
  if (n < kRankAt + 4) return kNeedMoreBytes;
  uint32_t rank = 0;
  for (size_t i = 0; i < 4; ++i) rank |= uint32_t{payload[kRankAt + i]} << (8 * i);
  if (rank > kMaxRank) return 0;  // the decoder's to reject; nothing to align
  return kRankAt + 4 + 8 * size_t{rank} + 8;
}

void encode_sync_result(uint64_t request_id, const Status& s, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kSyncResult));
  w.u64(request_id);
  put_status(w, s);
}

void encode_stats_result(uint64_t request_id, const ServerStats& s, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kStatsResult));
  w.u64(request_id);
  w.u32(s.sessions);
  w.u64(s.bytes_held);
  w.u64(s.session_bytes_held);
  w.u64(s.ops_executed);
  w.u64(s.frames_in);
  w.u64(s.frames_out);
  w.u64(s.bytes_in);
  w.u64(s.bytes_out);
  w.u64(s.sessions_opened);
  w.u32(static_cast<uint32_t>(s.per_session_bytes.size()));
  for (auto& [id, b] : s.per_session_bytes) {
    w.u64(id);
    w.u64(b);
  }
}

void encode_graph_result(uint64_t request_id, const Result<ir::GraphId>& r, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kGraphResult));
  w.u64(request_id);
  put_status(w, r.status());
  if (r.ok()) w.u64(*r);
}

void encode_capability_result(uint64_t request_id, const Result<Exported>& r, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kCapabilityResult));
  w.u64(request_id);
  put_status(w, r.status());
  if (!r.ok()) return;
  w.str(r->capability);
  put_meta(w, r->meta);
}

void encode_fetch(const Fetch& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ClientMsg::kFetch));
  w.u64(m.request_id);
  w.u64(m.session_id);
  w.u64(m.tensor);
  w.str(m.capability);
}

void encode_attach_segment(const AttachSegment& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ClientMsg::kAttachSegment));
  w.u64(m.request_id);
  w.u64(m.segment);
  w.u64(m.capacity);
}

void encode_read_result_in_segment(uint64_t request_id, const TensorMeta& meta, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kReadResultInSegment));
  w.u64(request_id);
  put_meta(w, meta);
  w.u64(static_cast<uint64_t>(numel(meta.shape)) * dtype_size(meta.dtype));
}

// ---- batches ----
BatchWriter::BatchWriter() { take(); }

OutFrame BatchWriter::take() {
  OutFrame out = std::move(frame_);
  frame_ = OutFrame();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(ClientMsg::kBatch));
  w.u32(0);  // task count, patched as tasks are added
  count_ = 0;
  last_head_ = 0;
  return out;
}

void BatchWriter::begin_task() {
  last_head_ = frame_.head.size();
  last_segments_ = frame_.segments.size();
}

void BatchWriter::patch_count() {
  ++count_;
  for (int i = 0; i < 4; ++i) frame_.head[1 + i] = static_cast<uint8_t>(count_ >> (8 * i));
}

void BatchWriter::remove_last() {
  if (count_ == 0 || last_head_ < kEmptyBytes) return;
  frame_.head.resize(last_head_);
  frame_.segments.resize(last_segments_);
  --count_;
  for (int i = 0; i < 4; ++i) frame_.head[1 + i] = static_cast<uint8_t>(count_ >> (8 * i));
  last_head_ = 0;
}

void BatchWriter::add_op(const ir::Op& op) {
  begin_task();
  WireWriter w(frame_.head, &frame_.segments);
  w.u8(static_cast<uint8_t>(TaskKind::kOp));
  ir::encode_op(op, w);
  patch_count();
}

void BatchWriter::add_read(uint64_t request_id, ir::TensorId id) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(TaskKind::kRead));
  w.u64(request_id);
  w.u64(id);
  patch_count();
}

void BatchWriter::add_sync(uint64_t request_id) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(TaskKind::kSync));
  w.u64(request_id);
  patch_count();
}

namespace {
void put_varint(WireWriter& w, uint64_t v) {
  while (v >= 0x80) {
    w.u8(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  w.u8(static_cast<uint8_t>(v));
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

Status get_packed_ids(WireReader& r, std::vector<ir::TensorId>& ids) {
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
}  // namespace

void BatchWriter::put_ids(WireWriter& w, const std::vector<ir::TensorId>& ids) const {
  if (!packed_ids_) {
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

void BatchWriter::add_drop(const std::vector<ir::TensorId>& ids) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(packed_ids_ ? TaskKind::kDropPacked : TaskKind::kDrop));
  put_ids(w, ids);
  patch_count();
}

void BatchWriter::add_stats(uint64_t request_id) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(TaskKind::kStats));
  w.u64(request_id);
  patch_count();
}

void BatchWriter::add_register_graph(uint64_t request_id, const ir::Graph& graph) {
  begin_task();
  WireWriter w(frame_.head, &frame_.segments);
  w.u8(static_cast<uint8_t>(TaskKind::kRegisterGraph));
  w.u64(request_id);
  ir::encode_graph(graph, w);
  patch_count();
}

void BatchWriter::add_run_graph(ir::GraphId graph, const std::vector<ir::TensorId>& inputs,
                                const std::vector<ir::TensorId>& outputs) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(packed_ids_ ? TaskKind::kRunGraphPacked : TaskKind::kRunGraph));
  w.u64(graph);
  put_ids(w, inputs);
  put_ids(w, outputs);
  patch_count();
}

void BatchWriter::add_export(uint64_t request_id, ir::TensorId id) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(TaskKind::kExport));
  w.u64(request_id);
  w.u64(id);
  patch_count();
}

void BatchWriter::add_move(TaskKind kind, ir::TensorId id, const TensorMeta& meta,
                           const TensorSource& source) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(kind));
  w.u64(id);
  put_meta(w, meta);
  w.u64(source.session_id);
  w.u64(source.tensor);
  w.str(source.capability);
  if (kind == TaskKind::kImport) {
    w.str(source.url);
    w.str(source.fingerprint);
  }
  patch_count();
}

void BatchWriter::add_collective(const CollectiveSpec& c) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(TaskKind::kCollective));
  w.u8(static_cast<uint8_t>(c.kind));
  w.u8(static_cast<uint8_t>(c.reduce));
  w.u32(c.rank);
  w.u32(c.size);
  w.u32(c.root);
  w.str(c.group);
  w.str(c.store_url);
  w.str(c.fingerprint);
  w.u32(c.timeout_ms);
  w.u64(c.input);
  w.u64(c.output);
  put_meta(w, c.out_meta);
  patch_count();
}

namespace {
void put_range(WireWriter& w, const SegmentRange& r, bool with_sequence) {
  w.u64(r.segment);
  w.u64(r.offset);
  w.u64(r.length);
  if (with_sequence) w.u64(r.sequence);
}
}  // namespace

void BatchWriter::add_from_segment(ir::TensorId id, const TensorMeta& meta,
                                   const SegmentRange& range) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(TaskKind::kFromSegment));
  w.u64(id);
  put_meta(w, meta);
  put_range(w, range, true);
  patch_count();
}

void BatchWriter::add_read_to_segment(uint64_t request_id, ir::TensorId id,
                                      const SegmentRange& range) {
  begin_task();
  WireWriter w(frame_.head);
  w.u8(static_cast<uint8_t>(TaskKind::kReadToSegment));
  w.u64(request_id);
  w.u64(id);
  put_range(w, range, false);
  patch_count();
}

void encode_store_request(const StoreRequest& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ClientMsg::kStore));
  w.u64(m.request_id);
  w.u8(static_cast<uint8_t>(m.op));
  w.str(m.key);
  w.str(m.value);
}

void encode_store_reply(const StoreReply& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kStoreResult));
  w.u64(m.request_id);
  put_status(w, m.status);
  w.u8(m.present ? 1 : 0);
  w.str(m.value);
}

// ---- decoding ----
namespace {
Status get_ids(WireReader& r, std::vector<ir::TensorId>& ids) {
  uint32_t k = 0;
  TW_RETURN_NOT_OK(r.count(k, 8));
  ids.resize(k);
  for (auto& id : ids) TW_RETURN_NOT_OK(r.u64(id));
  return Status::OK();
}
}  // namespace

Result<ClientMsg> peek_client_msg(const Buffer& payload) {
  if (payload.size() == 0) return data_loss("empty frame");
  uint8_t k = payload.as<const uint8_t>()[0];
  if (k != static_cast<uint8_t>(ClientMsg::kHello) &&
      k != static_cast<uint8_t>(ClientMsg::kBatch) &&
      k != static_cast<uint8_t>(ClientMsg::kFetch) &&
      k != static_cast<uint8_t>(ClientMsg::kStore) &&
      k != static_cast<uint8_t>(ClientMsg::kAttachSegment)) {
    return data_loss("unknown client message type " + std::to_string(k));
  }
  return static_cast<ClientMsg>(k);
}

namespace {

// Reads a message's type byte and checks it is `want`; the error names what was `expected`
// ("a Fetch message") and what came.
Status expect_type(WireReader& r, uint8_t want, const char* expected) {
  uint8_t kind = 0;
  TW_RETURN_NOT_OK(r.u8(kind));
  if (kind != want) {
    return data_loss(std::string("expected ") + expected + ", got message type " +
                     std::to_string(kind));
  }
  return Status::OK();
}

}  // namespace

Result<Hello> decode_hello(const Buffer& payload) {
  WireReader r(payload);
  uint32_t magic = 0;
  TW_RETURN_NOT_OK(
      expect_type(r, static_cast<uint8_t>(ClientMsg::kHello), "a Hello message first"));
  TW_RETURN_NOT_OK(r.u32(magic));
  if (magic != kMagic) return data_loss("bad magic number: not a tensorwire client");
  Hello h;
  TW_RETURN_NOT_OK(r.u16(h.min_version));
  TW_RETURN_NOT_OK(r.u16(h.max_version));
  TW_RETURN_NOT_OK(r.u32(h.device_index));
  TW_RETURN_NOT_OK(r.str(h.credential, kMaxStringBytes));
  if (!r.done()) return data_loss("trailing bytes after Hello");
  return h;
}

Result<Fetch> decode_fetch(const Buffer& payload) {
  WireReader r(payload);
  TW_RETURN_NOT_OK(expect_type(r, static_cast<uint8_t>(ClientMsg::kFetch), "a Fetch message"));
  Fetch m;
  TW_RETURN_NOT_OK(r.u64(m.request_id));
  TW_RETURN_NOT_OK(r.u64(m.session_id));
  TW_RETURN_NOT_OK(r.u64(m.tensor));
  TW_RETURN_NOT_OK(r.str(m.capability, kMaxStringBytes));
  if (!r.done()) return data_loss("trailing bytes after Fetch");
  return m;
}

Result<AttachSegment> decode_attach_segment(const Buffer& payload) {
  WireReader r(payload);
  TW_RETURN_NOT_OK(expect_type(r, static_cast<uint8_t>(ClientMsg::kAttachSegment), "an AttachSegment message"));
  AttachSegment m;
  TW_RETURN_NOT_OK(r.u64(m.request_id));
  TW_RETURN_NOT_OK(r.u64(m.segment));
  TW_RETURN_NOT_OK(r.u64(m.capacity));
  if (!r.done()) return data_loss("trailing bytes after AttachSegment");
  return m;
}

Result<StoreRequest> decode_store_request(const Buffer& payload) {
  WireReader r(payload);
  uint8_t op = 0;
  TW_RETURN_NOT_OK(expect_type(r, static_cast<uint8_t>(ClientMsg::kStore), "a Store message"));
  StoreRequest m;
  TW_RETURN_NOT_OK(r.u64(m.request_id));
  TW_RETURN_NOT_OK(r.u8(op));
  if (op != static_cast<uint8_t>(StoreOp::kSet) && op != static_cast<uint8_t>(StoreOp::kGet)) {
    return data_loss("unknown store operation " + std::to_string(op));
  }
  m.op = static_cast<StoreOp>(op);
  TW_RETURN_NOT_OK(r.str(m.key, kMaxStringBytes));
  TW_RETURN_NOT_OK(r.str(m.value, kMaxStringBytes));
  if (!r.done()) return data_loss("trailing bytes after Store");
  return m;
}

Result<StoreReply> decode_store_reply(const Buffer& payload) {
  WireReader r(payload);
  uint8_t present = 0;
  TW_RETURN_NOT_OK(
      expect_type(r, static_cast<uint8_t>(ServerMsg::kStoreResult), "a StoreResult message"));
  StoreReply m;
  TW_RETURN_NOT_OK(r.u64(m.request_id));
  TW_RETURN_NOT_OK(get_status(r, m.status));
  TW_RETURN_NOT_OK(r.u8(present));
  if (present > 1) return data_loss("StoreResult: present flag " + std::to_string(present));
  m.present = present == 1;
  TW_RETURN_NOT_OK(r.str(m.value, kMaxStringBytes));
  if (!r.done()) return data_loss("trailing bytes after StoreResult");
  return m;
}

namespace {
// The fields of a collective task after its kind.
Status get_collective(WireReader& r, CollectiveSpec& c) {
  uint8_t kind = 0, reduce = 0;
  TW_RETURN_NOT_OK(r.u8(kind));
  TW_RETURN_NOT_OK(r.u8(reduce));
  if (kind < 1 || kind > 4) return data_loss("unknown collective kind " + std::to_string(kind));
  if (reduce < 1 || reduce > 3) return data_loss("unknown reduction " + std::to_string(reduce));
  c.kind = static_cast<CollectiveKind>(kind);
  c.reduce = static_cast<ReduceKind>(reduce);
  TW_RETURN_NOT_OK(r.u32(c.rank));
  TW_RETURN_NOT_OK(r.u32(c.size));
  TW_RETURN_NOT_OK(r.u32(c.root));
  TW_RETURN_NOT_OK(r.str(c.group, kMaxStringBytes));
  TW_RETURN_NOT_OK(r.str(c.store_url, kMaxStringBytes));
  TW_RETURN_NOT_OK(r.str(c.fingerprint, kMaxStringBytes));
  TW_RETURN_NOT_OK(r.u32(c.timeout_ms));
  TW_RETURN_NOT_OK(r.u64(c.input));
  TW_RETURN_NOT_OK(r.u64(c.output));
  return get_meta(r, c.out_meta);
}

// The fields of an import or same-server move task after its kind.
Status get_move(WireReader& r, Task& t) {
  TW_RETURN_NOT_OK(r.u64(t.id));
  TW_RETURN_NOT_OK(get_meta(r, t.meta));
  TW_RETURN_NOT_OK(r.u64(t.source.session_id));
  TW_RETURN_NOT_OK(r.u64(t.source.tensor));
  TW_RETURN_NOT_OK(r.str(t.source.capability, kMaxStringBytes));
  if (t.kind != TaskKind::kImport) return Status::OK();
  TW_RETURN_NOT_OK(r.str(t.source.url, kMaxStringBytes));
  return r.str(t.source.fingerprint, kMaxStringBytes);
}
Status decode_task(WireReader& r, Task& t) {
  uint8_t tk = 0;
  TW_RETURN_NOT_OK(r.u8(tk));
  t.kind = static_cast<TaskKind>(tk);
  switch (t.kind) {
    case TaskKind::kOp: {
      auto op = ir::decode_op(r);
      if (!op.ok()) return op.status();
      t.op = std::move(op).value();
      return Status::OK();
    }
    case TaskKind::kRead:
    case TaskKind::kExport: TW_RETURN_NOT_OK(r.u64(t.request_id)); return r.u64(t.id);
    case TaskKind::kSync:
    case TaskKind::kStats: return r.u64(t.request_id);
    case TaskKind::kDrop: return get_ids(r, t.ids);
    case TaskKind::kRegisterGraph: {
      TW_RETURN_NOT_OK(r.u64(t.request_id));
      auto g = ir::decode_graph(r);
      if (!g.ok()) return g.status();
      t.graph = std::move(g).value();
      return Status::OK();
    }
    case TaskKind::kRunGraph:
      TW_RETURN_NOT_OK(r.u64(t.graph_id));
      TW_RETURN_NOT_OK(get_ids(r, t.ids));
      return get_ids(r, t.outputs);
    case TaskKind::kDropPacked:
      t.kind = TaskKind::kDrop;
      t.packed_ids = true;
      return get_packed_ids(r, t.ids);
    case TaskKind::kRunGraphPacked:
      t.kind = TaskKind::kRunGraph;
      t.packed_ids = true;
      TW_RETURN_NOT_OK(r.u64(t.graph_id));
      TW_RETURN_NOT_OK(get_packed_ids(r, t.ids));
      return get_packed_ids(r, t.outputs);
    case TaskKind::kImport:
    case TaskKind::kMoveLocal: return get_move(r, t);
    case TaskKind::kCollective: return get_collective(r, t.collective);
    case TaskKind::kFromSegment:
      TW_RETURN_NOT_OK(r.u64(t.id));
      TW_RETURN_NOT_OK(get_meta(r, t.meta));
      TW_RETURN_NOT_OK(r.u64(t.range.segment));
      TW_RETURN_NOT_OK(r.u64(t.range.offset));
      TW_RETURN_NOT_OK(r.u64(t.range.length));
      return r.u64(t.range.sequence);
    case TaskKind::kReadToSegment:
      TW_RETURN_NOT_OK(r.u64(t.request_id));
      TW_RETURN_NOT_OK(r.u64(t.id));
      TW_RETURN_NOT_OK(r.u64(t.range.segment));
      TW_RETURN_NOT_OK(r.u64(t.range.offset));
      return r.u64(t.range.length);
  }
  return data_loss("unknown task kind " + std::to_string(tk));
}
}  // namespace

void clear_task(Task& t) {
  switch (t.kind) {  // what a kind set beyond the scalars and id lists (decode_task)
    case TaskKind::kOp: t.op = ir::Op{}; break;
    case TaskKind::kRegisterGraph: t.graph = ir::Graph{}; break;
    case TaskKind::kImport:
    case TaskKind::kMoveLocal: t.source = TensorSource{}; break;
    case TaskKind::kCollective: t.collective = CollectiveSpec{}; break;
    default: break;
  }
  // A long id list (a drop of a whole model, say) is freed rather than kept by a Task that a
  // server holds on to between batches.
  constexpr size_t kKeptIds = 1024;
  t.kind = TaskKind::kOp;
  t.request_id = 0;
  t.id = 0;
  if (t.ids.capacity() > kKeptIds) t.ids = {};
  t.ids.clear();
  t.graph_id = 0;
  if (t.outputs.capacity() > kKeptIds) t.outputs = {};
  t.outputs.clear();
  t.packed_ids = false;
  t.meta.shape.clear();
  t.meta.dtype = TensorMeta{}.dtype;
  t.range = SegmentRange{};
}

BatchDecoder::BatchDecoder(const Buffer& payload) : r_(payload) {
  uint8_t kind = 0;
  status_ = r_.u8(kind);
  if (status_.ok() && kind != static_cast<uint8_t>(ClientMsg::kBatch)) {
    status_ = data_loss("expected a Batch message, got message type " + std::to_string(kind));
  }
  if (status_.ok()) status_ = r_.count(count_, 1);  // every task takes at least one byte
  if (status_.ok() && count_ == 0 && !r_.done()) {
    status_ = data_loss(std::to_string(r_.remaining()) + " trailing bytes after batch");
  }
}

bool BatchDecoder::decode_one(Task& t) {
  Status s = decode_task(r_, t);
  if (!s.ok()) {
    status_ =
        s.with_context("batch task " + std::to_string(index_) + " of " + std::to_string(count_));
    return false;
  }
  if (++index_ == count_ && !r_.done()) {
    status_ = data_loss(std::to_string(r_.remaining()) + " trailing bytes after batch");
  }
  return true;
}

bool BatchDecoder::next(std::vector<Task>& tasks, size_t max) {
  const size_t before = tasks.size();
  for (size_t k = 0; k < max && more(); ++k) {
    if (!decode_one(tasks.emplace_back())) {  // decoded in place: a Task is large to move
      tasks.pop_back();
      break;
    }
  }
  return tasks.size() > before;
}

size_t BatchDecoder::next_reusing(std::vector<Task>& tasks, size_t max) {
  size_t n = 0;
  for (; n < max && more(); ++n) {
    Task& t = n < tasks.size() ? tasks[n] : tasks.emplace_back();
    if (!decode_one(t)) {
      clear_task(t);  // (a partly decoded task is not handed out)
      break;
    }
  }
  return n;
}

Status decode_batch(const Buffer& payload, std::vector<Task>& tasks) {
  BatchDecoder d(payload);
  while (d.next(tasks, 256)) {
  }
  return d.status();
}

Result<ServerMessage> decode_server_message(const Buffer& payload) {
  ServerMessage m;
  TW_RETURN_NOT_OK(decode_server_message(payload, m));
  return m;
}

Status decode_server_message(const Buffer& payload, ServerMessage& m) {
  WireReader r(payload);
  uint8_t kind = 0;
  TW_RETURN_NOT_OK(r.u8(kind));
  m.kind = static_cast<ServerMsg>(kind);
  m.request_id = 0;
  m.status = Status::OK();
  m.graph_id = 0;
  m.data.meta.shape.clear();
  m.data.meta.dtype = TensorMeta{}.dtype;
  m.data.bytes = Buffer();
  m.in_segment_bytes = 0;
  switch (m.kind) {
    case ServerMsg::kWelcome: {
      Welcome& w = m.welcome;
      TW_RETURN_NOT_OK(r.u16(w.version));
      TW_RETURN_NOT_OK(r.u64(w.session_id));
      TW_RETURN_NOT_OK(r.str(w.server_id, kMaxStringBytes));
      TW_RETURN_NOT_OK(r.u32(w.device_index));
      uint32_t n = 0;
      TW_RETURN_NOT_OK(r.count(n, 16));
      w.devices.resize(n);
      for (auto& d : w.devices) TW_RETURN_NOT_OK(get_device(r, d));
      TW_RETURN_NOT_OK(r.u64(w.limits.max_frame_bytes));
      TW_RETURN_NOT_OK(r.u64(w.limits.session_memory_bytes));
      TW_RETURN_NOT_OK(r.u32(w.limits.max_sessions));
      TW_RETURN_NOT_OK(r.u32(w.limits.session_queue_depth));
      break;
    }
    case ServerMsg::kRefuse: {
      uint8_t reason = 0;
      TW_RETURN_NOT_OK(r.u8(reason));
      m.refuse.reason = static_cast<RefuseReason>(reason);
      TW_RETURN_NOT_OK(r.str(m.refuse.message, kMaxStringBytes));
      break;
    }
    case ServerMsg::kReadResult: {
      TW_RETURN_NOT_OK(r.u64(m.request_id));
      TW_RETURN_NOT_OK(get_status(r, m.status));
      if (!m.status.ok()) break;
      TW_RETURN_NOT_OK(get_meta(r, m.data.meta));
      uint64_t nbytes = 0;
      TW_RETURN_NOT_OK(r.u64(nbytes));
      uint64_t expect =
          static_cast<uint64_t>(numel(m.data.meta.shape)) * dtype_size(m.data.meta.dtype);
      if (nbytes != expect || nbytes > r.remaining()) {
        return data_loss("read result carries " + std::to_string(nbytes) + " bytes, expected " +
                         std::to_string(expect));
      }
      TW_RETURN_NOT_OK(r.bytes(static_cast<size_t>(nbytes), m.data.bytes));
      break;
    }
    case ServerMsg::kSyncResult:
      TW_RETURN_NOT_OK(r.u64(m.request_id));
      TW_RETURN_NOT_OK(get_status(r, m.status));
      break;
    case ServerMsg::kStatsResult: {
      ServerStats& s = m.stats;
      TW_RETURN_NOT_OK(r.u64(m.request_id));
      TW_RETURN_NOT_OK(r.u32(s.sessions));
      TW_RETURN_NOT_OK(r.u64(s.bytes_held));
      TW_RETURN_NOT_OK(r.u64(s.session_bytes_held));
      TW_RETURN_NOT_OK(r.u64(s.ops_executed));
      TW_RETURN_NOT_OK(r.u64(s.frames_in));
      TW_RETURN_NOT_OK(r.u64(s.frames_out));
      TW_RETURN_NOT_OK(r.u64(s.bytes_in));
      TW_RETURN_NOT_OK(r.u64(s.bytes_out));
      TW_RETURN_NOT_OK(r.u64(s.sessions_opened));
      uint32_t n = 0;
      TW_RETURN_NOT_OK(r.count(n, 16));
      s.per_session_bytes.resize(n);
      for (auto& [id, b] : s.per_session_bytes) {
        TW_RETURN_NOT_OK(r.u64(id));
        TW_RETURN_NOT_OK(r.u64(b));
      }
      break;
    }
    case ServerMsg::kSessionError: TW_RETURN_NOT_OK(get_status(r, m.status)); break;
    case ServerMsg::kGraphResult:
      TW_RETURN_NOT_OK(r.u64(m.request_id));
      TW_RETURN_NOT_OK(get_status(r, m.status));
      if (m.status.ok()) TW_RETURN_NOT_OK(r.u64(m.graph_id));
      break;
    case ServerMsg::kCapabilityResult:
      TW_RETURN_NOT_OK(r.u64(m.request_id));
      TW_RETURN_NOT_OK(get_status(r, m.status));
      if (!m.status.ok()) break;
      TW_RETURN_NOT_OK(r.str(m.exported.capability, kMaxStringBytes));
      TW_RETURN_NOT_OK(get_meta(r, m.exported.meta));
      break;
    case ServerMsg::kReadResultInSegment: {
      TW_RETURN_NOT_OK(r.u64(m.request_id));
      TW_RETURN_NOT_OK(get_meta(r, m.data.meta));
      TW_RETURN_NOT_OK(r.u64(m.in_segment_bytes));
      const uint64_t expect =
          static_cast<uint64_t>(numel(m.data.meta.shape)) * dtype_size(m.data.meta.dtype);
      if (m.in_segment_bytes != expect) {
        return data_loss("read result in segment says " + std::to_string(m.in_segment_bytes) +
                         " bytes, expected " + std::to_string(expect));
      }
      break;
    }
    default: return data_loss("unknown server message type " + std::to_string(kind));
  }
  if (!r.done()) return data_loss("trailing bytes after server message");
  return Status::OK();
}

}  // namespace tw::protocol
