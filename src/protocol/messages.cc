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
    case RefuseReason::kDraining: return "server draining";
    case RefuseReason::kCannotResume: return "cannot resume the session";
  }
  return "refused";
}

namespace {

// A message of fields declared once (TW_FIELDS) after its type byte; large tensor bytes become
// the frame's segments.
template <class M>
void encode_fields(ServerMsg type, const M& m, OutFrame& f) {
  WireWriter w(f.head, &f.segments);
  w.u8(static_cast<uint8_t>(type));
  m.fields(FieldWriter{w});
}
template <class M>
void encode_fields(ClientMsg type, const M& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(type));
  m.fields(FieldWriter{w});
}

}  // namespace

void encode_hello(const Hello& m, OutFrame& f) {
  WireWriter w(f.head);
  w.u8(static_cast<uint8_t>(ClientMsg::kHello));
  w.u32(kMagic);
  m.fields(FieldWriter{w});
  if (m.device_index == kResumeSession) m.resume.fields(FieldWriter{w});
}

void encode_welcome(const Welcome& m, OutFrame& f) {
  encode_fields(ServerMsg::kWelcome, m, f);
  const bool described = m.version >= kDeviceDescriptionVersion;
  if (m.session.token.empty() && !described) return;
  WireWriter w(f.head);
  m.session.fields(FieldWriter{w});
  if (described) FieldWriter{w}.put(m.descriptions);
}

void encode_ack(const Ack& m, OutFrame& f) { encode_fields(ClientMsg::kAck, m, f); }

void encode_refuse(const Refuse& m, OutFrame& f) { encode_fields(ServerMsg::kRefuse, m, f); }

void encode_session_error(const Status& s, OutFrame& f) {
  encode_fields(ServerMsg::kSessionError, SessionError{s}, f);
}

void encode_draining(const Draining& m, OutFrame& f) { encode_fields(ServerMsg::kDraining, m, f); }

void encode_read_result(uint64_t request_id, Result<TensorData> r, OutFrame& f) {
  encode_fields(ServerMsg::kReadResult, ReadResult{request_id, std::move(r)}, f);
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
  encode_fields(ServerMsg::kSyncResult, SyncResult{request_id, s}, f);
}

void encode_stats_result(uint64_t request_id, const ServerStats& s, uint16_t version, OutFrame& f) {
  encode_fields(ServerMsg::kStatsResult, StatsResult{request_id, s}, f);
  // Before kMemoryStatsVersion, only a list with sessions in it: none parked is the same bytes
  // as from an older server. From it, the list always, then the memory figures.
  if (version < kParkedStatsVersion) return;
  if (version < kMemoryStatsVersion && s.parked.sessions.empty()) return;
  WireWriter w(f.head);
  s.parked.fields(FieldWriter{w});
  if (version >= kMemoryStatsVersion) s.memory.fields(FieldWriter{w});
}

void encode_graph_result(uint64_t request_id, const Result<ir::GraphId>& r, OutFrame& f) {
  encode_fields(ServerMsg::kGraphResult, GraphResult{request_id, r}, f);
}

void encode_capability_result(uint64_t request_id, const Result<Exported>& r, OutFrame& f) {
  encode_fields(ServerMsg::kCapabilityResult, CapabilityResult{request_id, r}, f);
}

void encode_fetch(const Fetch& m, OutFrame& f) { encode_fields(ClientMsg::kFetch, m, f); }

void encode_fetch_bound(const FetchBound& m, OutFrame& f) {
  encode_fields(ClientMsg::kFetchBound, m, f);
}

void encode_fetch_done(const FetchDone& m, OutFrame& f) {
  encode_fields(ClientMsg::kFetchDone, m, f);
}

void encode_fetch_from(const FetchFrom& m, OutFrame& f) {
  encode_fields(ClientMsg::kFetchFrom, m, f);
}

void encode_attach_segment(const AttachSegment& m, OutFrame& f) {
  encode_fields(ClientMsg::kAttachSegment, m, f);
}

void encode_read_result_in_segment(uint64_t request_id, const TensorMeta& meta, OutFrame& f) {
  encode_fields(ServerMsg::kReadResultInSegment, ReadResultInSegment{request_id, InSegment{meta}},
                f);
}

void encode_store_request(const StoreRequest& m, OutFrame& f) {
  encode_fields(ClientMsg::kStore, m, f);
}

void encode_store_reply(const StoreReply& m, OutFrame& f) {
  encode_fields(ServerMsg::kStoreResult, m, f);
}

Result<ClientMsg> peek_client_msg(const Buffer& payload) {
  if (payload.size() == 0) return data_loss("empty frame");
  uint8_t k = payload.as<const uint8_t>()[0];
  if (k != static_cast<uint8_t>(ClientMsg::kHello) &&
      k != static_cast<uint8_t>(ClientMsg::kBatch) &&
      k != static_cast<uint8_t>(ClientMsg::kFetch) &&
      k != static_cast<uint8_t>(ClientMsg::kStore) &&
      k != static_cast<uint8_t>(ClientMsg::kAttachSegment) &&
      k != static_cast<uint8_t>(ClientMsg::kAck) &&
      k != static_cast<uint8_t>(ClientMsg::kFetchBound) &&
      k != static_cast<uint8_t>(ClientMsg::kFetchDone) &&
      k != static_cast<uint8_t>(ClientMsg::kFetchFrom)) {
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
  Hello h;
  TW_RETURN_NOT_OK(get_fields(r, h, "Hello"));
  if (h.device_index == kResumeSession) TW_RETURN_NOT_OK(get_fields(r, h.resume, "Hello resume"));
  if (!r.done()) return data_loss("trailing bytes after Hello");
  return h;
}

Result<Ack> decode_ack(const Buffer& payload) {
  return decode_fields<Ack>(payload, static_cast<uint8_t>(ClientMsg::kAck), "an Ack message",
                            "Ack");
}

Result<Fetch> decode_fetch(const Buffer& payload) {
  return decode_fields<Fetch>(payload, static_cast<uint8_t>(ClientMsg::kFetch), "a Fetch message",
                              "Fetch");
}

Result<FetchBound> decode_fetch_bound(const Buffer& payload) {
  return decode_fields<FetchBound>(payload, static_cast<uint8_t>(ClientMsg::kFetchBound),
                                   "a FetchBound message", "FetchBound");
}

Result<FetchDone> decode_fetch_done(const Buffer& payload) {
  return decode_fields<FetchDone>(payload, static_cast<uint8_t>(ClientMsg::kFetchDone),
                                  "a FetchDone message", "FetchDone");
}

Result<FetchFrom> decode_fetch_from(const Buffer& payload) {
  return decode_fields<FetchFrom>(payload, static_cast<uint8_t>(ClientMsg::kFetchFrom),
                                  "a FetchFrom message", "FetchFrom");
}

Result<AttachSegment> decode_attach_segment(const Buffer& payload) {
  return decode_fields<AttachSegment>(payload, static_cast<uint8_t>(ClientMsg::kAttachSegment),
                                      "an AttachSegment message", "AttachSegment");
}

Result<ReadResultHead> decode_read_result_head(const Buffer& head) {
  return decode_fields<ReadResultHead>(head, static_cast<uint8_t>(ServerMsg::kReadResult),
                                       "a ReadResult", "ReadResult");
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
  switch (m.kind) {
    case ServerMsg::kWelcome:
      TW_RETURN_NOT_OK(get_fields(r, m.welcome, "Welcome"));
      m.welcome.session = {};
      m.welcome.descriptions.clear();
      if (m.welcome.version >= kDeviceDescriptionVersion) {
        TW_RETURN_NOT_OK(get_fields(r, m.welcome.session, "Welcome session token"));
        TW_RETURN_NOT_OK(FieldReader{r}.get(m.welcome.descriptions));
        if (m.welcome.descriptions.size() != m.welcome.devices.size()) {
          return data_loss("Welcome describes " + std::to_string(m.welcome.descriptions.size()) +
                           " devices but lists " + std::to_string(m.welcome.devices.size()));
        }
      } else if (!r.done()) {
        TW_RETURN_NOT_OK(get_fields(r, m.welcome.session, "Welcome session token"));
        // Sent only when there is a token (encode_welcome): an empty one is not a Welcome's.
        if (m.welcome.session.token.empty()) return data_loss("Welcome session token is empty");
      }
      break;
    case ServerMsg::kRefuse: TW_RETURN_NOT_OK(get_fields(r, m.refuse, "Refuse")); break;
    case ServerMsg::kReadResult: TW_RETURN_NOT_OK(get_fields(r, m.read, "ReadResult")); break;
    case ServerMsg::kSyncResult: TW_RETURN_NOT_OK(get_fields(r, m.sync, "SyncResult")); break;
    case ServerMsg::kStatsResult:
      TW_RETURN_NOT_OK(get_fields(r, m.stats, "StatsResult"));
      m.stats.stats.parked = {};
      m.stats.stats.memory = {};
      m.stats_version = kParkedStatsVersion - 1;
      // From a server that speaks kParkedStatsVersion: the parked sessions; from one that speaks
      // kMemoryStatsVersion, then its memory figures.
      if (!r.done()) {
        TW_RETURN_NOT_OK(get_fields(r, m.stats.stats.parked, "StatsResult parked"));
        m.stats_version = kMemoryStatsVersion - 1;
        if (!r.done()) {
          TW_RETURN_NOT_OK(get_fields(r, m.stats.stats.memory, "StatsResult memory"));
          m.stats_version = kMemoryStatsVersion;
        } else if (m.stats.stats.parked.sessions.empty()) {
          // Without the memory figures, sent only when some are parked: an empty list alone is
          // not a server's.
          return data_loss("StatsResult parked sessions: an empty list");
        }
      }
      break;
    case ServerMsg::kSessionError: TW_RETURN_NOT_OK(get_fields(r, m.error, "SessionError")); break;
    case ServerMsg::kGraphResult: TW_RETURN_NOT_OK(get_fields(r, m.graph, "GraphResult")); break;
    case ServerMsg::kCapabilityResult:
      TW_RETURN_NOT_OK(get_fields(r, m.capability, "CapabilityResult"));
      break;
    case ServerMsg::kReadResultInSegment:
      TW_RETURN_NOT_OK(get_fields(r, m.in_segment, "ReadResultInSegment"));
      break;
    case ServerMsg::kDraining: TW_RETURN_NOT_OK(get_fields(r, m.draining, "Draining")); break;
    default: return data_loss("unknown server message type " + std::to_string(kind));
  }
  if (!r.done()) return data_loss("trailing bytes after server message");
  return Status::OK();
}

void encode_server_message(const ServerMessage& m, OutFrame& f) {
  switch (m.kind) {
    case ServerMsg::kWelcome: return encode_welcome(m.welcome, f);
    case ServerMsg::kRefuse: return encode_fields(m.kind, m.refuse, f);
    case ServerMsg::kReadResult: return encode_fields(m.kind, m.read, f);
    case ServerMsg::kSyncResult: return encode_fields(m.kind, m.sync, f);
    case ServerMsg::kStatsResult:
      return encode_stats_result(m.stats.request_id, m.stats.stats, m.stats_version, f);
    case ServerMsg::kSessionError: return encode_fields(m.kind, m.error, f);
    case ServerMsg::kGraphResult: return encode_fields(m.kind, m.graph, f);
    case ServerMsg::kCapabilityResult: return encode_fields(m.kind, m.capability, f);
    case ServerMsg::kReadResultInSegment: return encode_fields(m.kind, m.in_segment, f);
    case ServerMsg::kDraining: return encode_fields(m.kind, m.draining, f);
    case ServerMsg::kStoreResult:
    case ServerMsg::kCompressed: break;  // (a wrapper: protocol/compress.h)
  }
  f.head.push_back(static_cast<uint8_t>(m.kind));  // no such message: its type byte alone
}

uint64_t ServerMessage::request_id() const {
  switch (kind) {
    case ServerMsg::kReadResult: return read.request_id;
    case ServerMsg::kSyncResult: return sync.request_id;
    case ServerMsg::kStatsResult: return stats.request_id;
    case ServerMsg::kGraphResult: return graph.request_id;
    case ServerMsg::kCapabilityResult: return capability.request_id;
    case ServerMsg::kReadResultInSegment: return in_segment.request_id;
    default: return 0;
  }
}

const Status& ServerMessage::status() const {
  static const Status ok;
  switch (kind) {
    case ServerMsg::kReadResult: return read.result.status();
    case ServerMsg::kSyncResult: return sync.status;
    case ServerMsg::kSessionError: return error.status;
    case ServerMsg::kGraphResult: return graph.result.status();
    case ServerMsg::kCapabilityResult: return capability.result.status();
    default: return ok;
  }
}

}  // namespace tw::protocol

namespace tw::protocol {

void write_tensor_ref(WireWriter& w, const std::string& server_id, uint64_t session,
                      uint64_t tensor, const TensorMeta& meta) {
  w.str(server_id);
  w.u64(session);
  w.u64(tensor);
  w.u8(static_cast<uint8_t>(meta.dtype));
  w.u32(static_cast<uint32_t>(meta.shape.size()));
  for (int64_t x : meta.shape) w.i64(x);
}

Status read_tensor_ref(WireReader& r, std::string& server_id, uint64_t& session, uint64_t& tensor,
                       TensorMeta& meta) {
  uint8_t dt = 0;
  uint32_t rank = 0;
  TW_RETURN_NOT_OK(r.str(server_id, 256));
  TW_RETURN_NOT_OK(r.u64(session));
  TW_RETURN_NOT_OK(r.u64(tensor));
  TW_RETURN_NOT_OK(r.u8(dt));
  if (!dtype_valid(dt)) return data_loss("unknown dtype code " + std::to_string(dt));
  meta.dtype = static_cast<DType>(dt);
  TW_RETURN_NOT_OK(r.count(rank, 8));
  meta.shape.resize(rank);
  for (auto& x : meta.shape) TW_RETURN_NOT_OK(r.i64(x));
  return validate_shape(meta.shape);
}

std::string encode_ticket_capability(const TicketCapability& c) {
  std::vector<uint8_t> out;
  WireWriter w(out);
  w.u8(kTicketCapabilityFormat);
  write_tensor_ref(w, c.server_id, c.session_id, c.tensor, c.meta);
  w.raw(c.ticket.data(), c.ticket.size());
  return std::string(out.begin(), out.end());
}

bool decode_ticket_capability(const std::string& token, TicketCapability& c) {
  WireReader r(reinterpret_cast<const uint8_t*>(token.data()), token.size());
  uint8_t format = 0;
  if (!r.u8(format).ok() || format != kTicketCapabilityFormat) return false;
  if (!read_tensor_ref(r, c.server_id, c.session_id, c.tensor, c.meta).ok()) return false;
  if (r.remaining() != kTicketBytes) return false;
  c.ticket = token.substr(token.size() - kTicketBytes);
  return true;
}

}  // namespace tw::protocol
