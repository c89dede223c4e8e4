// The tasks a batch carries (docs/protocol.md §8): each kind is one struct that declares its wire
// fields once (TW_FIELDS, in wire order), and a Task is a std::variant of them. Encoding
// (BatchWriter), decoding (BatchDecoder) and a task's size on the wire (BatchWriter::task_bytes)
// are generated from those declarations by the field codec (fields.h). Task kinds are
// append-only: never renumber.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/status.h"
#include "core/tensor_data.h"
#include "core/wire.h"
#include "ir/collective.h"
#include "ir/graph.h"
#include "ir/ops.h"
#include "protocol/fields.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::protocol {

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
  // Protocol 4: kDrop and kRunGraph with their id lists packed (fields.h's IdList), decoded
  // into a DropTask and a RunGraphTask with packed_ids set.
  kDropPacked = 13,
  kRunGraphPacked = 14,
  // Protocol 5: a tensor made from bytes the client put in an attached segment (copied out by
  // the server before use), and a read whose bytes the server writes into a segment.
  kFromSegment = 12,
  kReadToSegment = 15,
  // Protocol 9: a tensor made from bytes the server holds already (a deduplicated upload).
  kUploadByHash = 16,
  // Protocol 10: the client asks for its replies compressed (or not) from here on.
  kCompressReplies = 17,
  // Protocol 11: a graph registered under an id the client chose, with no reply (pipelined).
  kRegisterGraphAs = 18,
  // Protocol 17: a tensor exported under a ticket the client chose, with no reply (a move issued
  // without waiting for the source: transfer.h's tickets).
  kExportAs = 19,
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

// ---- the task kinds: kKind is the wire code, TW_FIELDS the fields after it in wire order ----
struct OpTask {
  static constexpr TaskKind kKind = TaskKind::kOp;
  ir::Op op;
  TW_FIELDS(op)
};
struct ReadTask {
  static constexpr TaskKind kKind = TaskKind::kRead;
  uint64_t request_id = 0;
  ir::TensorId id = 0;
  TW_FIELDS(request_id, id)
};
struct SyncTask {
  static constexpr TaskKind kKind = TaskKind::kSync;
  uint64_t request_id = 0;
  TW_FIELDS(request_id)
};
// kPackedKind: the code of the same task with its id lists packed (protocol 4), which
// BatchWriter writes when set_packed_ids(true).
struct DropTask {
  static constexpr TaskKind kKind = TaskKind::kDrop, kPackedKind = TaskKind::kDropPacked;
  IdList ids;
  bool packed_ids = false;  // as decoded: it came as kDropPacked
  TW_FIELDS(ids)
};
struct StatsTask {
  static constexpr TaskKind kKind = TaskKind::kStats;
  uint64_t request_id = 0;
  TW_FIELDS(request_id)
};
struct RegisterGraphTask {
  static constexpr TaskKind kKind = TaskKind::kRegisterGraph;
  uint64_t request_id = 0;
  ir::Graph graph;
  TW_FIELDS(request_id, graph)
};
// A graph registered under `graph_id`, chosen by the client (nonzero, not in use in the session):
// no reply, so a step's first run follows its registration with no round trip between. A
// refusal is kept under the id, and a RunGraph naming it poisons its outputs with the reason.
struct RegisterGraphAsTask {
  static constexpr TaskKind kKind = TaskKind::kRegisterGraphAs;
  ir::GraphId graph_id = 0;
  ir::Graph graph;
  TW_FIELDS(graph_id, graph)
};
struct RunGraphTask {
  static constexpr TaskKind kKind = TaskKind::kRunGraph, kPackedKind = TaskKind::kRunGraphPacked;
  ir::GraphId graph_id = 0;
  IdList inputs;
  IdList outputs;  // the ids its outputs get
  bool packed_ids = false;
  TW_FIELDS(graph_id, inputs, outputs)
};
struct ExportTask {  // a capability for tensor `id`
  static constexpr TaskKind kKind = TaskKind::kExport;
  uint64_t request_id = 0;
  ir::TensorId id = 0;
  TW_FIELDS(request_id, id)
};
// Tensor `id` exported under `ticket` (protocol 17, kTicketBytes random bytes the client drew):
// no reply. A peer's fetch of the capability the client makes of it (ticket_capability()) waits
// at this server until the task has run, then gets the tensor, or the error that kept it from
// being exported.
struct ExportAsTask {
  static constexpr TaskKind kKind = TaskKind::kExportAs;
  ir::TensorId id = 0;
  std::string ticket;
  TW_FIELDS(id, ticket)
};
// Tensor `id` of `meta` made from `source`.
struct ImportTask {
  static constexpr TaskKind kKind = TaskKind::kImport;
  ir::TensorId id = 0;
  TensorMeta meta;
  TensorSource source;
  TW_FIELDS(id, meta, source.session_id, source.tensor, source.capability, source.url,
            source.fingerprint)
};
struct MoveLocalTask {  // as ImportTask, from this server: source.url and fingerprint unused
  static constexpr TaskKind kKind = TaskKind::kMoveLocal;
  ir::TensorId id = 0;
  TensorMeta meta;
  TensorSource source;
  TW_FIELDS(id, meta, source.session_id, source.tensor, source.capability)
};
struct CollectiveTask {
  static constexpr TaskKind kKind = TaskKind::kCollective;
  CollectiveSpec collective;
  TW_FIELDS(collective.kind, collective.reduce, collective.rank, collective.size, collective.root,
            collective.group, collective.store_url, collective.fingerprint, collective.timeout_ms,
            collective.input, collective.output, collective.out_meta)
};
struct FromSegmentTask {  // tensor `id` of `meta` from `range`
  static constexpr TaskKind kKind = TaskKind::kFromSegment;
  ir::TensorId id = 0;
  TensorMeta meta;
  SegmentRange range;
  TW_FIELDS(id, meta, range.segment, range.offset, range.length, range.sequence)
};
struct ReadToSegmentTask {  // tensor `id` into `range` (range.sequence unused)
  static constexpr TaskKind kKind = TaskKind::kReadToSegment;
  uint64_t request_id = 0;
  ir::TensorId id = 0;
  SegmentRange range;
  TW_FIELDS(request_id, id, range.segment, range.offset, range.length)
};

// Tensor `id` of `meta` from bytes the server holds whose XXH3-128 hash is (hash_hi, hash_lo)
// (protocol 9, server/dedup.h), answered by a SyncResult: OK, the tensor is made (as an upload of
// those bytes would make it); kNotFound, the server does not hold them and nothing was made (the
// client then uploads the bytes).
struct UploadByHashTask {
  static constexpr TaskKind kKind = TaskKind::kUploadByHash;
  uint64_t request_id = 0;
  ir::TensorId id = 0;
  TensorMeta meta;
  uint64_t hash_lo = 0, hash_hi = 0;
  TW_FIELDS(request_id, id, meta, hash_lo, hash_hi)
};

// From here on the server compresses this session's replies when they pay (`on` 1) or never
// (`on` 0) (protocol 10, protocol/compress.h): the client, which knows whether its link is slow
// enough (TW_COMPRESS, its auto rule), says so in its first batch. No reply. A server started with
// TW_COMPRESS=0 or 1 keeps to that instead.
struct CompressRepliesTask {
  static constexpr TaskKind kKind = TaskKind::kCompressReplies;
  bool on = true;
  TW_FIELDS(on)
};

// One task of a batch. A kind is added by appending a struct above and its type here.
using Task = std::variant<OpTask, ReadTask, SyncTask, DropTask, StatsTask, RegisterGraphTask,
                          RunGraphTask, ExportTask, ImportTask, MoveLocalTask, CollectiveTask,
                          FromSegmentTask, ReadToSegmentTask, UploadByHashTask, CompressRepliesTask,
                          RegisterGraphAsTask, ExportAsTask>;

// A task's kind (kDrop and kRunGraph for packed ones too: see their packed_ids).
inline TaskKind task_kind(const Task& t) {
  return std::visit([](const auto& k) { return std::decay_t<decltype(k)>::kKind; }, t);
}

template <class T>
concept HasPackedKind = requires {
  T::kPackedKind;
};

// Batches are built incrementally by the client.
class BatchWriter {
 public:
  BatchWriter();
  // From protocol 4 on, drops and graph runs are written packed (kDropPacked, kRunGraphPacked).
  void set_packed_ids(bool on) { packed_ids_ = on; }
  bool packed_ids() const { return packed_ids_; }
  // The most bytes one id takes in an id list: a packed id's varint is at most 10.
  uint64_t id_bytes_max() const { return packed_ids_ ? 10 : 8; }

  // Appends a task of any kind.
  template <class T>
  void add(const T& task) {
    std::apply([this](const auto&... f) { this->template add_fields<T>(f...); }, task.tie());
  }
  // The bytes `task` takes in a batch (kind and fields) as this writer would write it now.
  template <class T>
  uint64_t task_bytes(const T& task) const {
    FieldSize size{packed_ids_};
    task.fields(size);
    return 1 + size.bytes;
  }
  // add() of a task made of these fields, without making it (an op, say, is not copied).
  void add_op(const ir::Op& op) { add_fields<OpTask>(op); }
  void add_read(uint64_t request_id, ir::TensorId id) { add_fields<ReadTask>(request_id, id); }
  void add_sync(uint64_t request_id) { add_fields<SyncTask>(request_id); }
  void add_drop(const IdList& ids) { add_fields<DropTask>(ids); }
  void add_stats(uint64_t request_id) { add_fields<StatsTask>(request_id); }
  void add_register_graph(uint64_t request_id, const ir::Graph& graph) {
    add_fields<RegisterGraphTask>(request_id, graph);
  }
  void add_register_graph_as(ir::GraphId graph_id, const ir::Graph& graph) {
    add_fields<RegisterGraphAsTask>(graph_id, graph);
  }
  void add_run_graph(ir::GraphId graph, const IdList& inputs, const IdList& outputs) {
    add_fields<RunGraphTask>(graph, inputs, outputs);
  }
  void add_export(uint64_t request_id, ir::TensorId id) { add_fields<ExportTask>(request_id, id); }
  // kImport or kMoveLocal: tensor `id` (of `meta`) made from `source`.
  void add_move(TaskKind kind, ir::TensorId id, const TensorMeta& meta, const TensorSource& source);
  void add_collective(const CollectiveSpec& c) { add(CollectiveTask{c}); }
  // Protocol 5: tensor `id` of `meta` from a segment; a read of tensor `id` into a segment.
  void add_from_segment(ir::TensorId id, const TensorMeta& meta, const SegmentRange& range) {
    add(FromSegmentTask{id, meta, range});
  }
  void add_read_to_segment(uint64_t request_id, ir::TensorId id, const SegmentRange& range) {
    add(ReadToSegmentTask{request_id, id, range});
  }

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
  // Writes a task of kind T whose fields are `fields`, which must be T's, in T's order.
  template <class T, class... A>
  void add_fields(const A&... fields) {
    static_assert(std::is_same_v<decltype(std::declval<const T&>().tie()), std::tuple<const A&...>>,
                  "the fields given are not the task's, in its TW_FIELDS order");
    begin_task();
    WireWriter w(frame_.head, &frame_.segments);
    TaskKind kind = T::kKind;
    if constexpr (HasPackedKind<T>) {
      if (packed_ids_) kind = T::kPackedKind;
    }
    w.u8(static_cast<uint8_t>(kind));
    FieldWriter put{w, packed_ids_};
    (put.put(fields), ...);
    patch_count();
  }
  void begin_task();
  void patch_count();
  OutFrame frame_;
  uint32_t count_ = 0;
  bool packed_ids_ = false;
  size_t last_head_ = 0, last_segments_ = 0;  // where the last task began
};

// ---- decoding (payload only, the frame header already stripped) ----
// Decodes a batch's tasks; on a malformed task the tasks before it are returned in `tasks` and
// the error names the task's position.
Status decode_batch(const Buffer& payload, std::vector<Task>& tasks);

// Puts a Task back to its kind's defaults, for a decoder to decode the next task into it
// (BatchDecoder::next_reusing); what it held (an op's upload bytes, a graph) is let go now, its
// id lists are emptied and keep their capacity (up to a bound).
void clear_task(Task& t);

// Decodes a batch a few tasks at a time, so that a server holds decoded (a Task is a few hundred
// bytes) only the tasks it is about to run, whatever number the frame carries (a frame of a
// million one-byte syncs would otherwise decode into hundreds of MiB nobody reserved).
class BatchDecoder {
 public:
  BatchDecoder() = default;                      // an empty batch
  explicit BatchDecoder(const Buffer& payload);  // reads the batch's header
  // Appends up to `max` of the next tasks to `tasks`; false (nothing appended) once every task
  // is decoded or decoding failed.
  bool next(std::vector<Task>& tasks, size_t max);
  // As next(), decoding into tasks[0, n) and returning n: the Tasks there are reused (they must
  // be as clear_task() leaves them), the vector grows only past its size. A server decodes
  // window after window into the same Tasks: a Task made and destroyed per task was a third of
  // the decoding's work for a small op. A Task that held the kind decoded into it is decoded
  // into in place; one that held another kind hands its id lists' capacity to the new kind.
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

}  // namespace tw::protocol
TW_INTERNAL_END
