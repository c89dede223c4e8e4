// The wire protocol (docs/protocol.md is the specification): length-prefixed frames over a byte
// stream, each frame one message. Every integer is little-endian and written field by field.
// Message codes, task kinds and reasons are append-only.
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

inline constexpr uint32_t kMagic = 0x52495754;  // "TWIR" as little-endian bytes
// Version 2 added the graph tasks (register, run) and the graph result; version 3 the tensor
// moves (export, import, same-server move), the capability result and the peer's fetch; version 4
// the packed drop and graph-run tasks; version 5 the same-host shared-memory segments (attach,
// upload from a segment, read into a segment; docs/protocol.md §8.11); version 6 the AdamStep op
// (code 39); version 7 the Linear op (code 40). An older client never sends them, so the server
// still speaks 1.
inline constexpr uint16_t kProtocolVersion = 7;
// Which version brought each op is the op list's `since` column (ir::op_since_protocol): an op
// appended to the list with a new version bumps kProtocolVersion with it.
#define TW_SINCE_AT_MOST_CURRENT(Name, code, since) static_assert(since >= 1 && since <= kProtocolVersion, \
  "TW_OP_LIST: op " #Name " is declared since a protocol version this build does not speak");
TW_OP_LIST(TW_SINCE_AT_MOST_CURRENT)
#undef TW_SINCE_AT_MOST_CURRENT
inline constexpr uint16_t kMinProtocolVersion = 1;
// Hello's device index that asks only for the device list (tw::remote_devices).
inline constexpr uint32_t kEnumerateOnly = 0xFFFFFFFFu;
// Hello's device index that opens a peer connection (protocol 3): another server, carrying Fetch
// messages rather than batches, with no session.
inline constexpr uint32_t kPeerOnly = 0xFFFFFFFEu;
// Strings (names, reasons, credentials) longer than this are malformed.
inline constexpr size_t kMaxStringBytes = 64 * 1024;

enum class ClientMsg : uint8_t {
  kHello = 1,
  kBatch = 2,
  kFetch = 3,  // protocol 3, on a peer connection: a server pulling a tensor by capability
  kStore = 4,  // protocol 3, on a peer connection: a collective's rendezvous (set/get a key)
  // Protocol 5, unix:// only: a shared-memory segment (net/shm.h) whose descriptor travels with
  // the frame (SCM_RIGHTS), answered by a SyncResult of its request id.
  kAttachSegment = 5,
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
};
enum class TaskKind : uint8_t {
  kOp = 1,
  kRead = 2,
  kSync = 3,
  kDrop = 4,
  kStats = 5,
  kRegisterGraph = 6,  // protocol 2
  kRunGraph = 7,       // protocol 2
  kExport = 8,         // protocol 3: a capability for one tensor of the session
  kImport = 9,         // protocol 3: pull a tensor from another server by capability
  kMoveLocal = 10,     // protocol 3: take a tensor of another session of this server
  kCollective = 11,    // protocol 3: this session's part of a collective across servers (Gloo)
  // Protocol 4: kDrop and kRunGraph with their id lists packed (a varint count, then each id as
  // the zigzag varint of its difference from the one before), decoded into kDrop and kRunGraph
  // tasks. A training step's replay and its drops take ~1 byte per id instead of 8.
  kDropPacked = 13,
  kRunGraphPacked = 14,
  // Protocol 5: a tensor made from bytes the client put in an attached segment (copied out by
  // the server before use), and a read whose bytes the server writes into a segment.
  kFromSegment = 12,
  kReadToSegment = 15,
};
enum class RefuseReason : uint8_t {
  kBadVersion = 1,
  kBadDeviceIndex = 2,
  kUnauthorized = 3,
  kServerBusy = 4,
  kMalformed = 5,
  kCannotHost = 6,
};
const char* refuse_reason_name(RefuseReason r);

struct Hello {
  uint16_t min_version = kMinProtocolVersion;
  uint16_t max_version = kProtocolVersion;
  uint32_t device_index = 0;
  std::string credential;
};

struct DeviceInfo {
  std::string name;           // "cpu:0"
  std::string backend;        // "cpu"
  uint64_t memory_bytes = 0;  // what a session on it may hold (its quota)
  uint32_t dtype_mask = 0;    // bit i set: DType i supported
};

struct Limits {
  uint64_t max_frame_bytes = 0;
  uint64_t session_memory_bytes = 0;
  uint32_t max_sessions = 0;
  uint32_t session_queue_depth = 0;  // batches queued per session before the server stops reading
};

struct Welcome {
  uint16_t version = kProtocolVersion;
  uint64_t session_id = 0;
  std::string server_id;
  uint32_t device_index = 0;
  std::vector<DeviceInfo> devices;  // every device the server hosts
  Limits limits;
};

struct Refuse {
  RefuseReason reason = RefuseReason::kMalformed;
  std::string message;
};

// Where an import (kImport) or a same-server move (kMoveLocal) takes its tensor from: a tensor
// of a session of the source server, and the capability that server signed for it.
struct TensorSource {
  uint64_t session_id = 0;
  ir::TensorId tensor = 0;
  std::string capability;   // opaque here; server/transfer.h makes and checks it
  std::string url;          // kImport: the source server's address, as the client reached it
  std::string fingerprint;  // kImport: the TLS fingerprint to pin when url is tls:// ("": CAs)
};

// A collective across sessions of several servers (kCollective; server/collective.h runs it on
// Gloo) travels as the IR describes it (ir/collective.h).
using ir::CollectiveKind;
using ir::CollectiveSpec;
using ReduceKind = ir::CollectiveReduce;
using ir::collective_name;

// Where a segment task's bytes lie (protocol 5): `length` bytes at `offset` of the data area of
// segment `segment`. kFromSegment: `sequence` is what the server stores in the segment's
// `consumed` word once it has copied them out. kReadToSegment: `length` is the room offered.
struct SegmentRange {
  uint64_t segment = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t sequence = 0;
};

// The AttachSegment message: the client's id for the segment and its data bytes (net/shm.h).
struct AttachSegment {
  uint64_t request_id = 0;
  uint64_t segment = 0;
  uint64_t capacity = 0;
};

struct Task {
  TaskKind kind = TaskKind::kOp;
  ir::Op op;                          // kOp
  uint64_t request_id = 0;            // kRead, kSync, kStats, kRegisterGraph
  ir::TensorId id = 0;                // kRead
  std::vector<ir::TensorId> ids;      // kDrop; kRunGraph: the inputs
  ir::Graph graph;                    // kRegisterGraph
  ir::GraphId graph_id = 0;           // kRunGraph
  std::vector<ir::TensorId> outputs;  // kRunGraph: the ids its outputs get
  bool packed_ids = false;            // kDrop, kRunGraph: sent packed (kDropPacked, ...)
  // kImport, kMoveLocal: the tensor made under `id`, and where it comes from. kExport names its
  // tensor in `id`.
  TensorMeta meta;
  TensorSource source;
  CollectiveSpec collective;  // kCollective
  // kFromSegment: tensor `id` of `meta` from `range`; kReadToSegment: tensor `id` (request
  // `request_id`) into `range`.
  SegmentRange range;
};

// A peer's rendezvous request (kStore): set a key, or get it (present = false while absent).
enum class StoreOp : uint8_t { kSet = 1, kGet = 2 };
struct StoreRequest {
  uint64_t request_id = 0;
  StoreOp op = StoreOp::kSet;
  std::string key;
  std::string value;  // kSet
};
struct StoreReply {
  uint64_t request_id = 0;
  Status status;
  bool present = false;
  std::string value;
};

// A peer server's request for the tensor a capability grants (protocol 3), answered with a
// ReadResult of the same request id.
struct Fetch {
  uint64_t request_id = 0;
  uint64_t session_id = 0;
  ir::TensorId tensor = 0;
  std::string capability;
};

struct ServerStats {
  uint32_t sessions = 0;
  uint64_t bytes_held = 0;          // all sessions
  uint64_t session_bytes_held = 0;  // the asking session
  uint64_t ops_executed = 0;
  uint64_t frames_in = 0, frames_out = 0, bytes_in = 0, bytes_out = 0;
  uint64_t sessions_opened = 0;
  std::vector<std::pair<uint64_t, uint64_t>> per_session_bytes;  // (session id, bytes)
};

// ---- encoding: each returns the payload (without the frame header) ----
// Frames carrying large byte runs (tensor payloads) keep them out of the copied head: the writer
// records (offset, Buffer) segments that the transport sends with a gather write.
struct OutFrame {
  std::vector<uint8_t> head;
  std::vector<WireSegment> segments;  // inserted at their offsets into head
  uint64_t payload_size() const;
};

void encode_hello(const Hello& m, OutFrame& f);
void encode_welcome(const Welcome& m, OutFrame& f);
void encode_refuse(const Refuse& m, OutFrame& f);
void encode_session_error(const Status& s, OutFrame& f);
void encode_read_result(uint64_t request_id, const Result<TensorData>& r, OutFrame& f);
// Where a ReadResult's tensor bytes start in its payload, from the payload's first `n` bytes: the
// offset (type, request id, OK status, dtype, rank, dims, length), 0 when the payload is no
// successful ReadResult, kNeedMoreBytes when `n` bytes are too few to tell. A receiver lands that
// offset aligned (net::FrameReader's aligner), so the tensor can keep the bytes where they arrived.
inline constexpr size_t kNeedMoreBytes = ~size_t{0};
size_t read_result_data_offset(const uint8_t* payload, size_t n);
void encode_sync_result(uint64_t request_id, const Status& s, OutFrame& f);
void encode_stats_result(uint64_t request_id, const ServerStats& s, OutFrame& f);
void encode_graph_result(uint64_t request_id, const Result<ir::GraphId>& r, OutFrame& f);
// An exported tensor's capability and what it holds.
struct Exported {
  std::string capability;
  TensorMeta meta;
};
void encode_capability_result(uint64_t request_id, const Result<Exported>& r, OutFrame& f);
void encode_fetch(const Fetch& m, OutFrame& f);
void encode_attach_segment(const AttachSegment& m, OutFrame& f);
Result<AttachSegment> decode_attach_segment(const Buffer& payload);
// The reply to kReadToSegment whose bytes the server wrote into the segment (a tensor that does
// not fit the room offered, or an error, is answered by a plain ReadResult instead).
void encode_read_result_in_segment(uint64_t request_id, const TensorMeta& meta, OutFrame& f);
void encode_store_request(const StoreRequest& m, OutFrame& f);
void encode_store_reply(const StoreReply& m, OutFrame& f);
Result<StoreRequest> decode_store_request(const Buffer& payload);
Result<StoreReply> decode_store_reply(const Buffer& payload);

// Batches are built incrementally by the client.
class BatchWriter {
 public:
  BatchWriter();
  // From protocol 4 on, drops and graph runs are written packed (kDropPacked, kRunGraphPacked).
  void set_packed_ids(bool on) { packed_ids_ = on; }
  bool packed_ids() const { return packed_ids_; }
  // The most bytes one id takes in an id list: a packed id's varint is at most 10.
  uint64_t id_bytes_max() const { return packed_ids_ ? 10 : 8; }
  void add_op(const ir::Op& op);
  void add_read(uint64_t request_id, ir::TensorId id);
  void add_sync(uint64_t request_id);
  void add_drop(const std::vector<ir::TensorId>& ids);
  void add_stats(uint64_t request_id);
  void add_register_graph(uint64_t request_id, const ir::Graph& graph);
  void add_run_graph(ir::GraphId graph, const std::vector<ir::TensorId>& inputs,
                     const std::vector<ir::TensorId>& outputs);
  void add_export(uint64_t request_id, ir::TensorId id);
  // kImport or kMoveLocal: tensor `id` (of `meta`) made from `source`.
  void add_move(TaskKind kind, ir::TensorId id, const TensorMeta& meta, const TensorSource& source);
  void add_collective(const CollectiveSpec& c);
  // Protocol 5: tensor `id` of `meta` from a segment; a read of tensor `id` into a segment.
  void add_from_segment(ir::TensorId id, const TensorMeta& meta, const SegmentRange& range);
  void add_read_to_segment(uint64_t request_id, ir::TensorId id, const SegmentRange& range);
  uint32_t task_count() const { return count_; }
  uint64_t payload_size() const { return frame_.payload_size(); }
  bool empty() const { return count_ == 0; }
  // The finished frame payload; the writer is reset for the next batch.
  OutFrame take();
  // Takes the task added last back out (the client does when it would push the frame past the
  // server's size limit). Only the last task can be removed, once.
  void remove_last();
  // Bytes of a batch that holds no task yet: message type and task count.
  static constexpr uint64_t kEmptyBytes = 5;

 private:
  void begin_task();
  void patch_count();
  void put_ids(WireWriter& w, const std::vector<ir::TensorId>& ids) const;
  OutFrame frame_;
  uint32_t count_ = 0;
  bool packed_ids_ = false;
  size_t last_head_ = 0, last_segments_ = 0;  // where the last task began
};

// ---- decoding (payload only, the frame header already stripped) ----
Result<ClientMsg> peek_client_msg(const Buffer& payload);
Result<Hello> decode_hello(const Buffer& payload);
Result<Fetch> decode_fetch(const Buffer& payload);
// Decodes a batch's tasks; on a malformed task the tasks before it are returned in `tasks` and
// the error names the task's position.
Status decode_batch(const Buffer& payload, std::vector<Task>& tasks);

// Decodes a batch a few tasks at a time, so that a server holds decoded (a Task is a few hundred
// bytes) only the tasks it is about to run, whatever number the frame carries (a frame of a
// million one-byte syncs would otherwise decode into hundreds of MiB nobody reserved).
// Puts a Task back to its default, keeping the capacity of its id lists, for a decoder to decode
// the next task into it (BatchDecoder::next_reusing); what it held (an op's upload bytes, a
// graph) is let go now.
void clear_task(Task& t);

class BatchDecoder {
 public:
  BatchDecoder() = default;                      // an empty batch
  explicit BatchDecoder(const Buffer& payload);  // reads the batch's header
  // Appends up to `max` of the next tasks to `tasks`; false (nothing appended) once every task
  // is decoded or decoding failed.
  bool next(std::vector<Task>& tasks, size_t max);
  // As next(), decoding into tasks[0, n) and returning n: the Tasks there are reused (they must
  // be as clear_task() leaves them), the vector grows only past its size. A server decodes
  // window after window into the same Tasks: a Task (664 bytes, a dozen members) made and
  // destroyed per task was a third of the decoding's work for a small op.
  size_t next_reusing(std::vector<Task>& tasks, size_t max);
  // Whether next() may append more.
  bool more() const { return status_.ok() && index_ < count_; }
  // OK, or why decoding stopped (the tasks before the malformed one were decoded).
  const Status& status() const { return status_; }

 private:
  // Decodes the next task into t, keeping the count and, on a failure, why (status_).
  bool decode_one(Task& t);
  WireReader r_{nullptr, 0};
  uint32_t index_ = 0, count_ = 0;
  Status status_;
};

struct ServerMessage {
  ServerMsg kind = ServerMsg::kSessionError;
  Welcome welcome;
  Refuse refuse;
  uint64_t request_id = 0;
  Status status;             // read/sync/graph results, session errors
  ir::GraphId graph_id = 0;  // graph results that are OK
  TensorData data;           // read results
  ServerStats stats;
  Exported exported;  // capability results that are OK
  // kReadResultInSegment: data.meta is set, data.bytes empty (they lie in the segment), and
  // in_segment_bytes says how many.
  uint64_t in_segment_bytes = 0;
};
Result<ServerMessage> decode_server_message(const Buffer& payload);
// The same into `m`, which may hold an earlier message: what a message of the decoded kind does
// not set is reset (kind, request id, status, graph id, data, segment bytes), so one message
// can be reused for every reply a reader takes (the client's round trip built, moved and
// destroyed a whole ServerMessage per reply). On failure `m` holds part of the message.
Status decode_server_message(const Buffer& payload, ServerMessage& m);

}  // namespace tw::protocol
