#include "protocol/messages.h"

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

namespace {

void put_meta(WireWriter& w, const TensorMeta& m) { FieldWriter{w}.put(m); }

Status get_meta(WireReader& r, TensorMeta& m) { return FieldReader(r).get(m); }

// A message of fields declared once (TW_FIELDS) after its type byte.
template <class M>
void encode_fields(uint8_t type, const M& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(type);
  m.fields(FieldWriter{w});
}

}  // namespace

void encode_hello(const Hello& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ClientMsg::kHello));
  w.u32(kMagic);
  m.fields(FieldWriter{w});
}

void encode_welcome(const Welcome& m, OutFrame& f) {
  encode_fields(static_cast<uint8_t>(ServerMsg::kWelcome), m, f);
}

void encode_refuse(const Refuse& m, OutFrame& f) {
  encode_fields(static_cast<uint8_t>(ServerMsg::kRefuse), m, f);
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
  s.fields(FieldWriter{w});
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
  encode_fields(static_cast<uint8_t>(ClientMsg::kFetch), m, f);
}

void encode_attach_segment(const AttachSegment& m, OutFrame& f) {
  encode_fields(static_cast<uint8_t>(ClientMsg::kAttachSegment), m, f);
}

void encode_read_result_in_segment(uint64_t request_id, const TensorMeta& meta, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ServerMsg::kReadResultInSegment));
  w.u64(request_id);
  put_meta(w, meta);
  w.u64(static_cast<uint64_t>(numel(meta.shape)) * dtype_size(meta.dtype));
}

void encode_store_request(const StoreRequest& m, OutFrame& f) {
  encode_fields(static_cast<uint8_t>(ClientMsg::kStore), m, f);
}

void encode_store_reply(const StoreReply& m, OutFrame& f) {
  encode_fields(static_cast<uint8_t>(ServerMsg::kStoreResult), m, f);
}

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

// The fields of `m` (declared once, TW_FIELDS) in order; an error names the message and field.
template <class M>
Status get_fields(WireReader& r, M& m, const char* name) {
  FieldReader get(r, false, name);
  m.fields(get);
  return get.status;
}

// The same, and nothing after them.
template <class M>
Result<M> get_all_fields(WireReader& r, const char* name) {
  M m;
  TW_RETURN_NOT_OK(get_fields(r, m, name));
  if (!r.done()) return data_loss(std::string("trailing bytes after ") + name);
  return m;
}

// A message of fields declared once: its type byte, checked, then exactly its fields.
template <class M>
Result<M> decode_fields(const Buffer& payload, uint8_t type, const char* expected,
                        const char* name) {
  WireReader r(payload);
  TW_RETURN_NOT_OK(expect_type(r, type, expected));
  return get_all_fields<M>(r, name);
}

}  // namespace

Result<Hello> decode_hello(const Buffer& payload) {
  WireReader r(payload);
  uint32_t magic = 0;
  TW_RETURN_NOT_OK(
      expect_type(r, static_cast<uint8_t>(ClientMsg::kHello), "a Hello message first"));
  TW_RETURN_NOT_OK(r.u32(magic));
  if (magic != kMagic) return data_loss("bad magic number: not a tensorwire client");
  return get_all_fields<Hello>(r, "Hello");
}

Result<Fetch> decode_fetch(const Buffer& payload) {
  return decode_fields<Fetch>(payload, static_cast<uint8_t>(ClientMsg::kFetch), "a Fetch message",
                              "Fetch");
}

Result<AttachSegment> decode_attach_segment(const Buffer& payload) {
  return decode_fields<AttachSegment>(payload, static_cast<uint8_t>(ClientMsg::kAttachSegment),
                                      "an AttachSegment message", "AttachSegment");
}

Result<StoreRequest> decode_store_request(const Buffer& payload) {
  return decode_fields<StoreRequest>(payload, static_cast<uint8_t>(ClientMsg::kStore),
                                     "a Store message", "Store");
}

Result<StoreReply> decode_store_reply(const Buffer& payload) {
  return decode_fields<StoreReply>(payload, static_cast<uint8_t>(ServerMsg::kStoreResult),
                                   "a StoreResult message", "StoreResult");
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
    case ServerMsg::kWelcome: TW_RETURN_NOT_OK(get_fields(r, m.welcome, "Welcome")); break;
    case ServerMsg::kRefuse: TW_RETURN_NOT_OK(get_fields(r, m.refuse, "Refuse")); break;
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
    case ServerMsg::kStatsResult:
      TW_RETURN_NOT_OK(r.u64(m.request_id));
      TW_RETURN_NOT_OK(get_fields(r, m.stats, "StatsResult"));
      break;
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
