// The wire protocol (docs/protocol.md is the specification): length-prefixed frames over a byte
// stream, each frame one message. Every integer is little-endian and written field by field.
// Message codes, task kinds (tasks.h: the tasks a batch carries) and reasons are append-only.
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
#include "protocol/fields.h"
#include "protocol/tasks.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::protocol {

inline constexpr uint32_t kMagic = 0x52495754;  // "TWIR" as little-endian bytes
// Version 2 added the graph tasks (register, run) and the graph result; version 3 the tensor
// moves (export, import, same-server move), the capability result and the peer's fetch; version 4
// the packed drop and graph-run tasks; version 5 the same-host shared-memory segments (attach,
// upload from a segment, read into a segment; docs/protocol.md §8.11); version 6 the AdamStep op
// (code 39); version 7 the Linear op (code 40); version 8 the attention ops (codes 41, 42) and
// IndexSelectBackward (43); version 9 the ops LayerNormBackward (44) and GeluBackward (45), the
// drain notice (kDraining, sent only to a client that speaks 9) and the draining refusal,
// compressed frames (kCompressed, protocol/compress.h) and deduplicated uploads (the UploadByHash
// task); version 10 the retryable pull (FetchBound and FetchDone on a peer connection, §8.9: a
// pull cut mid-transfer is tried again) and the CompressReplies task (a client asks for
// compressed replies); version 11 the resumed pull (FetchFrom, §8.9: a retry asks only for the
// bytes after those it received) and the RegisterGraphAs task (a graph registered under an id the
// client chose, without a reply: registration pipelined with the runs that follow it); version 12
// StatsResult lists the parked sessions after its counters (kParkedStatsVersion); version 13
// negative indices (kWrapsNegativeIndicesSince) and the stricter frame and output-id checks
// (kStrictChecksSince); version 14 StatsResult ends with the server's memory figures
// (kMemoryStatsVersion); version 15 the i8 dtype (code 8) and the quantization ops Quantize,
// Dequantize, PackBlocks, UnpackBlocks, LinearBlocks and LinearInt8 (codes 46-51,
// kQuantizationSince); version 16 the Welcome describes each hosted device after its session
// token (DeviceDescription: the hardware, its memory total and free, the ops it runs; the
// DeviceInfo's dtype mask then lists only what the device runs; kDeviceDescriptionVersion);
// version 17 the ExportAs task and ticket capabilities (kExportAheadSince: a move issued without
// waiting for its export). An older client never sends them, so the server still speaks 1.
inline constexpr uint16_t kProtocolVersion = 17;
// The first version whose Welcome ends with one DeviceDescription per hosted device (its
// session token is then always sent, empty when the session cannot be resumed).
inline constexpr uint16_t kDeviceDescriptionVersion = 16;
// The first versions of the features a peer checks before it sends or expects them (docs/
// protocol.md §7.2 says what each version added):
inline constexpr uint16_t kGraphsSince = 2;  // RegisterGraph, RunGraph, GraphResult
// Tensor moves (export, import, capability results), peer connections, collectives.
inline constexpr uint16_t kMovesSince = 3;
inline constexpr uint16_t kPackedIdsSince = 4;  // packed Drop and RunGraph tasks
inline constexpr uint16_t kSegmentsSince = 5;   // same-host shared-memory segments (§8.11)
// Compressed frames, deduplicated uploads (UploadByHash), resumable sessions (token, Ack).
inline constexpr uint16_t kCompressionSince = 9;
inline constexpr uint16_t kDedupSince = 9;
inline constexpr uint16_t kResumeSince = 9;
// CompressReplies (a client asks for compressed replies) and the retryable pull (FetchBound).
inline constexpr uint16_t kCompressRepliesSince = 10;
inline constexpr uint16_t kRetryablePullSince = 10;
// RegisterGraphAs (registration pipelined, no reply) and the resumed pull (FetchFrom).
inline constexpr uint16_t kRegisterGraphAsSince = 11;
inline constexpr uint16_t kResumedPullSince = 11;
// ExportAs (a tensor exported under a ticket the client chose, no reply) and the ticket
// capabilities a source server then serves, its fetches waiting for the export (§8.9).
inline constexpr uint16_t kExportAheadSince = 17;
// The first version whose servers know dtype i8 and the quantization ops (the op list's `since`
// column says 15 for each; a client never sends an i8 tensor to an older server).
inline constexpr uint16_t kQuantizationSince = 15;
// The first version whose StatsResult ends with the parked sessions (ParkedSessions).
inline constexpr uint16_t kParkedStatsVersion = 12;
// The first version whose StatsResult ends with the server's memory figures (MemoryFigures, after
// the parked sessions, which it then sends even when there are none): what tw::nn::place() reads
// to split a model by each server's free memory.
inline constexpr uint16_t kMemoryStatsVersion = 14;
// Servers from this version wrap an index in [-size, 0) of Gather, ScatterAdd, IndexSelect and
// IndexSelectBackward (docs/ops.md); older ones poison the op with "out of range". The server
// does so for every session: the op codes are unchanged, only an error became a result.
inline constexpr uint16_t kWrapsNegativeIndicesSince = 13;
// Servers from this version answer a Compressed frame announcing 0 bytes or holding another
// Compressed frame with a SessionError of code 7 and close (docs/protocol.md §1.1; older ones
// gave code 5, or ran the inner frame as a malformed batch), and poison the fresh output ids of
// an op refused for a repeated or live output id (§8.2; older ones poisoned none). Every session
// gets them: they only change how malformed input is refused.
inline constexpr uint16_t kStrictChecksSince = 13;
// Which version brought each op is the op list's `since` column (ir::op_since_protocol): an op
// appended to the list with a new version bumps kProtocolVersion with it.
#define TW_SINCE_AT_MOST_CURRENT(Name, code, since)      \
  static_assert(since >= 1 && since <= kProtocolVersion, \
                "TW_OP_LIST: op " #Name                  \
                " is declared since a protocol version this build does not speak");
TW_OP_LIST(TW_SINCE_AT_MOST_CURRENT)
#undef TW_SINCE_AT_MOST_CURRENT
inline constexpr uint16_t kMinProtocolVersion = 1;
// Hello's device index that asks only for the device list (tw::remote_devices).
inline constexpr uint32_t kEnumerateOnly = 0xFFFFFFFFu;
// Hello's device index that opens a peer connection (protocol 3): another server, carrying Fetch
// messages rather than batches, with no session.
inline constexpr uint32_t kPeerOnly = 0xFFFFFFFEu;
// Hello's device index that resumes a session after a dropped connection (protocol 9,
// server/resume.h): a ResumeRequest follows the Hello's fields.
inline constexpr uint32_t kResumeSession = 0xFFFFFFFDu;

enum class ClientMsg : uint8_t {
  kHello = 1,
  kBatch = 2,
  kFetch = 3,  // protocol 3, on a peer connection: a server pulling a tensor by capability
  kStore = 4,  // protocol 3, on a peer connection: a collective's rendezvous (set/get a key)
  // Protocol 5, unix:// only: a shared-memory segment (net/shm.h) whose descriptor travels with
  // the frame (SCM_RIGHTS), answered by a SyncResult of its request id.
  kAttachSegment = 5,
  // Protocol 9: another message, zstd-compressed (protocol/compress.h, docs/protocol.md §1.1).
  kCompressed = 6,
  // Protocol 9, a resumable session (docs/protocol.md §8.13): how many reply frames the client
  // has received, so the server lets go of its copies; not itself a numbered frame.
  kAck = 7,
  // Protocol 10, on a peer connection (docs/protocol.md §8.9): a Fetch whose capability is bound
  // to the pull (a random id the puller chose) rather than used up, so that the same pull may
  // fetch it again after a cut, until it says FetchDone; no other pull may.
  kFetchBound = 8,
  // Protocol 10, on a peer connection: the pull has the tensor; the capability is used up. No
  // reply.
  kFetchDone = 9,
  // Protocol 11, on a peer connection (docs/protocol.md §8.9): a FetchBound asking only for the
  // tensor's bytes from `offset` on (a retry after a cut keeps what it received), answered by a
  // ReadResult whose tensor is those bytes as a u8 vector.
  kFetchFrom = 10,
};
enum class ServerMsg : uint8_t {
  kWelcome = 1,
  kRefuse = 2,
  kReadResult = 3,
  kSyncResult = 4,
  kStatsResult = 5,
  kSessionError = 6,  // a problem not tied to a request (a malformed batch, say); session goes on
  kGraphResult = 7,   // the reply to kRegisterGraph: the graph's id or why it was refused
  kCapabilityResult = 8,      // the reply to kExport: the capability or why there is none
  kStoreResult = 9,           // the reply to a peer's kStore
  kReadResultInSegment = 10,  // protocol 5: the reply to kReadToSegment, the bytes in the segment
  kDraining = 11,             // protocol 9: the server is shutting down (SIGTERM); see Draining
  kCompressed = 12,           // protocol 9: another message, zstd-compressed (protocol/compress.h)
};
enum class RefuseReason : uint8_t {
  kBadVersion = 1,
  kBadDeviceIndex = 2,
  kUnauthorized = 3,
  kServerBusy = 4,
  kMalformed = 5,
  kCannotHost = 6,
  kDraining = 7,      // protocol 9 servers: shutting down, taking no new sessions
  kCannotResume = 8,  // protocol 9: no session of that token (expired, closed, not yours)
};
const char* refuse_reason_name(RefuseReason r);
// Any reason byte reads: one a newer server adds is still a refusal (refuse_reason_name says
// "refused").
template <>
struct WireEnum<RefuseReason> {
  static constexpr uint8_t kFirst = 0, kLast = 255;
  static constexpr const char* kWhat = "refuse reason";
};

// Each message below lists its wire fields once (TW_FIELDS, in wire order, after the message's
// type byte; fields.h gives each field's form) and its encoder and decoder walk that list.

struct Hello {
  uint16_t min_version = kMinProtocolVersion;
  uint16_t max_version = kProtocolVersion;
  uint32_t device_index = 0;
  std::string credential;
  TW_FIELDS(min_version, max_version, device_index, credential)  // after the type and kMagic
  // Follows the fields above when device_index is kResumeSession (not one of TW_FIELDS).
  struct Resume {
    std::string token;   // the Welcome's SessionToken::token
    uint64_t acked = 0;  // reply frames received so far on the session
    TW_FIELDS(token, acked)
  } resume{};
};

struct DeviceInfo {
  std::string name;           // "cpu:0"
  std::string backend;        // "cpu"
  uint64_t memory_bytes = 0;  // what a session on it may hold (its quota)
  uint32_t dtype_mask = 0;    // bit i set: DType i supported
  TW_FIELDS(name, backend, memory_bytes, dtype_mask)
};

struct Limits {
  uint64_t max_frame_bytes = 0;
  uint64_t session_memory_bytes = 0;
  uint32_t max_sessions = 0;
  uint32_t session_queue_depth = 0;  // batches queued per session before the server stops reading
  TW_FIELDS(max_frame_bytes, session_memory_bytes, max_sessions, session_queue_depth)
};

// Protocol >= kDeviceDescriptionVersion: what a hosted device is (Backend::Description), one per
// Welcome::devices entry, in the same order.
struct DeviceDescription {
  std::string model;          // "AMD EPYC 7B13 64-Core Processor (2 threads)", a GPU's name
  uint64_t memory_total = 0;  // bytes of the memory its tensors live in
  uint64_t memory_free = 0;   // of which free when the Welcome was sent
  bool host_memory = true;    // in host RAM (the server's --max-memory covers it)
  std::vector<uint16_t> ops;  // the op codes it runs, ascending
  TW_FIELDS(model, memory_total, memory_free, host_memory, ops)
};

struct Welcome {
  uint16_t version = kProtocolVersion;
  uint64_t session_id = 0;
  std::string server_id;
  uint32_t device_index = 0;
  std::vector<DeviceInfo> devices;  // every device the server hosts
  Limits limits;
  TW_FIELDS(version, session_id, server_id, device_index, devices, limits)
  // Protocol 9: follows the fields above when its token is not empty (a session the client may
  // resume; not one of TW_FIELDS).
  struct SessionToken {
    std::string token;      // 64 hex digits (RAND_bytes), bound to the Hello's credential
    uint64_t received = 0;  // frames of the session the server had received (a resume's)
    TW_FIELDS(token, received)
  } session{};
  // Protocol >= kDeviceDescriptionVersion: after the session token (always sent then), one per
  // device (not one of TW_FIELDS).
  std::vector<DeviceDescription> descriptions;
};

// kAck (protocol 9): reply frames received so far on the session; flags kAckResumable (the first
// Ack after the Welcome: keep the session over a dropped connection) and kAckGoodbye (the client
// closes: let the session go at once).
struct Ack {
  uint64_t acked = 0;
  uint32_t flags = 0;
  TW_FIELDS(acked, flags)
};
inline constexpr uint32_t kAckResumable = 1, kAckGoodbye = 2;

struct Refuse {
  RefuseReason reason = RefuseReason::kMalformed;
  std::string message;
  TW_FIELDS(reason, message)
};

// The AttachSegment message: the client's id for the segment and its data bytes (net/shm.h).
struct AttachSegment {
  uint64_t request_id = 0;
  uint64_t segment = 0;
  uint64_t capacity = 0;
  TW_FIELDS(request_id, segment, capacity)
};

// A peer's rendezvous request (kStore): set a key, or get it (present = false while absent).
enum class StoreOp : uint8_t { kSet = 1, kGet = 2 };
template <>
struct WireEnum<StoreOp> {
  static constexpr uint8_t kFirst = 1, kLast = 2;
  static constexpr const char* kWhat = "store operation";
};
struct StoreRequest {
  uint64_t request_id = 0;
  StoreOp op = StoreOp::kSet;
  std::string key;
  std::string value;  // kSet
  TW_FIELDS(request_id, op, key, value)
};
struct StoreReply {
  uint64_t request_id = 0;
  Status status;
  bool present = false;
  std::string value;
  TW_FIELDS(request_id, status, present, value)
};

// A peer server's request for the tensor a capability grants (protocol 3), answered with a
// ReadResult of the same request id.
struct Fetch {
  uint64_t request_id = 0;
  uint64_t session_id = 0;
  ir::TensorId tensor = 0;
  std::string capability;
  TW_FIELDS(request_id, session_id, tensor, capability)
};
// A ticket capability (protocol 17, docs/protocol.md §8.9): what a client that sent an ExportAs
// task hands the destination instead of a capability the source signed. It names the same fields
// as a signed one (format 2: u8 format, str server_id, u64 session, u64 tensor, u8 dtype, u32
// rank, i64 dims, then the ticket's kTicketBytes); the ticket's randomness, known only to the
// client that registered it with its own session, is what authorises, as the signature does.
inline constexpr size_t kTicketBytes = 16;
inline constexpr uint8_t kTicketCapabilityFormat = 2;
struct TicketCapability {
  std::string server_id;
  uint64_t session_id = 0;
  ir::TensorId tensor = 0;
  TensorMeta meta;
  std::string ticket;
};
// The tensor a capability names, as both formats (a signed token, server/transfer.cc; a ticket,
// above) write it after their format byte: the holder's id, session and tensor id, then the
// tensor's dtype and shape. read_tensor_ref refuses an unknown dtype or an invalid shape.
void write_tensor_ref(WireWriter& w, const std::string& server_id, uint64_t session,
                      uint64_t tensor, const TensorMeta& meta);
Status read_tensor_ref(WireReader& r, std::string& server_id, uint64_t& session, uint64_t& tensor,
                       TensorMeta& meta);
std::string encode_ticket_capability(const TicketCapability& c);
// The fields of `token` when it is a ticket capability (false: another format, or malformed).
bool decode_ticket_capability(const std::string& token, TicketCapability& c);

// kFetchBound (protocol 10): a Fetch bound to `pull`; kFetchDone: that pull has the tensor.
inline constexpr size_t kPullIdBytes = 16;
struct FetchBound {
  uint64_t request_id = 0;
  uint64_t session_id = 0;
  ir::TensorId tensor = 0;
  std::string capability;
  std::string pull;  // kPullIdBytes random bytes, the same on every try of one pull
  TW_FIELDS(request_id, session_id, tensor, capability, pull)
};
struct FetchDone {
  std::string capability;
  std::string pull;
  TW_FIELDS(capability, pull)
};
// kFetchFrom (protocol 11): a FetchBound for the bytes [offset, end) of the tensor; the source
// refuses an offset past the tensor's byte size.
struct FetchFrom {
  uint64_t request_id = 0;
  uint64_t session_id = 0;
  ir::TensorId tensor = 0;
  std::string capability;
  std::string pull;
  uint64_t offset = 0;
  TW_FIELDS(request_id, session_id, tensor, capability, pull, offset)
};

// A session parked for a resume (its client's connection dropped): what it holds, and how long
// it is kept before it is freed.
struct ParkedSessionInfo {
  uint64_t session_id = 0;
  uint64_t bytes = 0;
  uint64_t ms_left = 0;
  TW_FIELDS(session_id, bytes, ms_left)
};
struct ParkedSessions {
  std::vector<ParkedSessionInfo> sessions;
  TW_FIELDS(sessions)
};

// Protocol >= kMemoryStatsVersion: the server's --max-memory and what all sessions hold of it
// (with the bytes that only capabilities keep alive).
struct MemoryFigures {
  uint64_t max_memory_bytes = 0;
  uint64_t used_bytes = 0;
  TW_FIELDS(max_memory_bytes, used_bytes)
};

struct ServerStats {
  uint32_t sessions = 0;
  uint64_t bytes_held = 0;          // all sessions
  uint64_t session_bytes_held = 0;  // the asking session
  uint64_t ops_executed = 0;
  uint64_t frames_in = 0, frames_out = 0, bytes_in = 0, bytes_out = 0;
  uint64_t sessions_opened = 0;
  std::vector<std::pair<uint64_t, uint64_t>> per_session_bytes;  // (session id, bytes)
  // After the StatsResult's type byte and request id.
  TW_FIELDS(sessions, bytes_held, session_bytes_held, ops_executed, frames_in, frames_out, bytes_in,
            bytes_out, sessions_opened, per_session_bytes)
  // Protocol >= kParkedStatsVersion: after the fields above (encode_stats_result).
  ParkedSessions parked;
  // Protocol >= kMemoryStatsVersion: after the parked sessions (encode_stats_result); absent
  // (zeros) from older servers.
  MemoryFigures memory;
};

// ---- the replies, each after its type byte (a request id first where it answers a request) ----
// A Result field is an outcome: its status, then its value only when OK.

struct ReadResult {  // kReadResult: the tensor a read (or a peer's Fetch) asked for
  uint64_t request_id = 0;
  Result<TensorData> result{TensorData{}};
  TW_FIELDS(request_id, result)
};
struct SyncResult {
  uint64_t request_id = 0;
  Status status;
  TW_FIELDS(request_id, status)
};
struct StatsResult {
  uint64_t request_id = 0;
  ServerStats stats;
  TW_FIELDS(request_id, stats)
};
struct SessionError {  // a problem not tied to a request (a malformed batch, say)
  Status status;
  TW_FIELDS(status)
};
struct GraphResult {  // the reply to kRegisterGraph: the graph's id or why it was refused
  uint64_t request_id = 0;
  Result<ir::GraphId> result{ir::GraphId{0}};
  TW_FIELDS(request_id, result)
};
// An exported tensor's capability and what it holds.
struct Exported {
  std::string capability;
  TensorMeta meta;
  TW_FIELDS(capability, meta)
};
struct CapabilityResult {  // the reply to kExport
  uint64_t request_id = 0;
  Result<Exported> result{Exported{}};
  TW_FIELDS(request_id, result)
};
// The reply to kReadToSegment whose bytes the server wrote into the segment (a tensor that does
// not fit the room offered, or an error, is answered by a plain ReadResult instead).
struct ReadResultInSegment {
  uint64_t request_id = 0;
  InSegment tensor;
  TW_FIELDS(request_id, tensor)
};

// kDraining (protocol 9): the server stopped taking sessions and will close this one once the
// work it already received has run, or after `timeout_ms` at most. The client fails every
// waiter and every later call at once with `message` (which says "server draining"), so that
// failover can start; the session's tensors are lost with the server.
struct Draining {
  uint32_t timeout_ms = 0;
  std::string message;
  TW_FIELDS(timeout_ms, message)
};
inline constexpr uint16_t kDrainingSince = 9;

// ---- encoding: each appends the payload (without the frame header) to an OutFrame ----
using tw::OutFrame;  // (core/wire.h)
void encode_hello(const Hello& m, OutFrame& f);
void encode_welcome(const Welcome& m, OutFrame& f);
void encode_refuse(const Refuse& m, OutFrame& f);
void encode_session_error(const Status& s, OutFrame& f);
void encode_draining(const Draining& m, OutFrame& f);
void encode_ack(const Ack& m, OutFrame& f);
Result<Ack> decode_ack(const Buffer& payload);
// Large tensor bytes become segments of the frame (sent by a gather write, not copied).
void encode_read_result(uint64_t request_id, Result<TensorData> r, OutFrame& f);
// Where a ReadResult's tensor bytes start in its payload, from the payload's first `n` bytes: the
// offset (type, request id, OK status, dtype, rank, dims, length), 0 when the payload is no
// successful ReadResult, kNeedMoreBytes when `n` bytes are too few to tell. A receiver lands that
// offset aligned (net::FrameReader's aligner), so the tensor can keep the bytes where they arrived.
inline constexpr size_t kNeedMoreBytes = ~size_t{0};
size_t read_result_data_offset(const uint8_t* payload, size_t n);
// A ReadResult's head: the payload up to where its tensor bytes start (read_result_data_offset),
// for a reply whose bytes a receiver landed elsewhere (net::FrameReader's divert). The same wire
// form as ReadResult's fields without the bytes, the byte count checked against the meta.
struct ReadResultHead {
  uint64_t request_id = 0;
  Result<InSegment> tensor{InSegment{}};
  TW_FIELDS(request_id, tensor)
};
Result<ReadResultHead> decode_read_result_head(const Buffer& head);
void encode_sync_result(uint64_t request_id, const Status& s, OutFrame& f);
// `version`: the session's protocol; from kParkedStatsVersion the parked sessions follow (when
// there are any: an empty list is not sent).
void encode_stats_result(uint64_t request_id, const ServerStats& s, uint16_t version, OutFrame& f);
void encode_graph_result(uint64_t request_id, const Result<ir::GraphId>& r, OutFrame& f);
void encode_capability_result(uint64_t request_id, const Result<Exported>& r, OutFrame& f);
void encode_fetch(const Fetch& m, OutFrame& f);
void encode_fetch_bound(const FetchBound& m, OutFrame& f);
void encode_fetch_done(const FetchDone& m, OutFrame& f);
void encode_fetch_from(const FetchFrom& m, OutFrame& f);
void encode_attach_segment(const AttachSegment& m, OutFrame& f);
Result<AttachSegment> decode_attach_segment(const Buffer& payload);
void encode_read_result_in_segment(uint64_t request_id, const TensorMeta& meta, OutFrame& f);
void encode_store_request(const StoreRequest& m, OutFrame& f);
void encode_store_reply(const StoreReply& m, OutFrame& f);
Result<StoreRequest> decode_store_request(const Buffer& payload);
Result<StoreReply> decode_store_reply(const Buffer& payload);

// ---- decoding (payload only, the frame header already stripped) ----
Result<ClientMsg> peek_client_msg(const Buffer& payload);
Result<Hello> decode_hello(const Buffer& payload);
Result<Fetch> decode_fetch(const Buffer& payload);
Result<FetchBound> decode_fetch_bound(const Buffer& payload);
Result<FetchDone> decode_fetch_done(const Buffer& payload);
Result<FetchFrom> decode_fetch_from(const Buffer& payload);
// Any message a server sends a client: `kind` says which member holds it (the others keep
// whatever an earlier message left there).
struct ServerMessage {
  ServerMsg kind = ServerMsg::kSessionError;
  Welcome welcome;
  Refuse refuse;
  ReadResult read;
  SyncResult sync;
  StatsResult stats;
  SessionError error;
  GraphResult graph;
  CapabilityResult capability;
  ReadResultInSegment in_segment;
  Draining draining;
  // The version a StatsResult's trailers belong to, as decoded (no trailer: before
  // kParkedStatsVersion; the parked list alone: before kMemoryStatsVersion); the generic encoder
  // writes the same trailers back.
  uint16_t stats_version = kProtocolVersion;
  // The request it answers; 0 for Welcome, Refuse and SessionError.
  uint64_t request_id() const;
  // The status a result or a session error carries; OK for the other kinds.
  const Status& status() const;
};
Result<ServerMessage> decode_server_message(const Buffer& payload);
// The same into `m`, which may hold an earlier message: the member of the decoded kind is read
// in place, so one message can be reused for every reply a reader takes (it keeps its
// allocations; the client's round trip built, moved and destroyed a whole ServerMessage per
// reply). On failure `m` holds part of the message.
Status decode_server_message(const Buffer& payload, ServerMessage& m);
// The member `kind` names, encoded as its encoder above would (a kind decode_server_message does
// not take, such as kStoreResult, gives its type byte alone).
void encode_server_message(const ServerMessage& m, OutFrame& f);

}  // namespace tw::protocol
TW_INTERNAL_END
