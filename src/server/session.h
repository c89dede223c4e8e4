// One client's session, without its transport: its tensor table (a backend instance of its
// own), its memory quota and share of the server-wide limit, and the execution of its tasks.
// The per-connection code in connection.cc decodes frames, drives a Session with the batches and
// writes what it replies; so a new kind of task, fairness between sessions or a transfer
// between servers changes this, not socket code, and a test can drive a Session with no socket.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "core/status.h"
#include "ir/cost.h"
#include "net/shm.h"
#include "protocol/messages.h"
#include "server/dedup.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/transfer.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::server {

// What every session of a server shares: the figures a stats task reports, and the
// server-wide memory budget (--max-memory).
struct SessionTotals {
  std::atomic<uint64_t> ops_executed{0};
  std::atomic<int64_t> bytes_held{0};  // tensor bytes of every session
  ServerMetrics metrics;               // latency, errors, graphs, transfers (--metrics; metrics.h)
  MemoryBudget memory;                 // no limit unless the server sets one
  CapabilityTable capabilities;        // tensors exported and not yet moved (transfer.h)
  ContentCache content;                // large uploads by content hash (dedup.h, protocol 9)
};

// Where a session's replies go, and what it asks of its server.
class SessionOutput {
 public:
  virtual ~SessionOutput() = default;
  // A reply (read and sync results, stats, session errors), in the order the tasks ran.
  virtual void reply(protocol::OutFrame frame) = 0;
  // The server's figures, as a stats task reports them to session `asking`.
  virtual protocol::ServerStats server_stats(uint64_t asking) = 0;
  // The protocol version the session's handshake settled on (what its replies may carry).
  virtual uint16_t protocol_version() const { return protocol::kProtocolVersion; }
  // The client asked for its replies compressed when they pay, or not (protocol 10).
  virtual void compress_replies(bool on) { (void)on; }
  // Starts pulling the tensor an import task names from its source server (transfer.h's
  // Puller); the session runs no further task until the server calls finish_import() with the
  // outcome. An error: the pull could not start (the session then poisons the tensor).
  virtual Status begin_import(const protocol::ImportTask& t) {
    return unimplemented("import of tensor " + std::to_string(t.source.tensor) +
                         ": this server does not pull tensors from other servers");
  }
  // Starts this session's part of a collective (collective.h) on `input`; as with an import,
  // the session runs nothing more until finish_collective().
  virtual Status begin_collective(const protocol::CollectiveTask& t, TensorData input) {
    (void)input;
    return unimplemented("collective of group " + t.collective.group +
                         ": this server does not run collectives");
  }
  // Long work (an op or a graph run estimated over OpLimits::kLongSeconds): whether this output
  // runs it off the thread that runs the session, and run_long() handing it over. The session
  // runs no further task until the server calls finish_long() on the session's thread once
  // `work` has run (with the session's cancellation flag set on its thread: core/cancel.h).
  // Without it (a Session driven by a test) long work runs in place.
  virtual bool runs_long() const { return false; }
  virtual void run_long(std::function<void()> work) { work(); }
};

// What an op may cost (issue 52; ir/cost.h): its estimated time on the session's device.
struct OpLimits {
  // Refused over this many seconds of estimated work (tensorwire-server --max-op-cost); 0: no
  // limit. A graph with such an op is refused at registration.
  double max_seconds = 0;
  ir::DeviceRate rate;  // the device's (device_rate())
  // Past this an op or a graph run goes to SessionOutput::run_long: about two fairness slices
  // (connection.h's kSlice), so the shard's other sessions wait for no op longer than that.
  static constexpr double kLongSeconds = 0.002;
};
// The rate of a backend's device, for op costs: for cpu (and torch, whose kernels run on the
// same cores) per intra-op thread, 16 GFLOP/s, 2 GB/s of memory traffic (at most 10 GB/s in
// all) and 500 M transcendental functions a second: the cpu backend's kernels on the build VM's
// AVX2 cores, rounded so that the estimate errs high (a oneDNN GEMM runs about 2x faster than
// 16 GFLOP/s a thread; attention and elementwise ops about as estimated), so that the default
// --max-op-cost of 1 s admits about one second of work (docs/remote.md, "Limits").
ir::DeviceRate device_rate(const std::string& backend);

// A received batch and how far it has run: a session runs a long batch in slices (run()),
// decoding it a window of tasks at a time, so that what it holds decoded is bounded whatever the
// frame carries and the queue behind it holds frames (a few bytes a task), not decoded tasks.
struct Batch {
  static constexpr size_t kWindow = 64;  // tasks decoded at a time
  // The decoded tasks, tasks[0, count), not yet all run (run() refills them from `decoder`), or,
  // for a batch made in process (Session::run of a task vector), all of them. Tasks past
  // `count` are cleared ones (protocol::clear_task), kept for the next window to decode into.
  std::vector<protocol::Task> tasks;
  size_t count = 0;
  // How decoding ended once `decoder` is exhausted: not OK, the tasks before the malformed one
  // ran, and the session reports the error after them.
  Status decoded;
  protocol::BatchDecoder decoder;  // the rest of `frame`'s tasks
  Buffer frame;                    // its bytes may back uploaded tensors until they are dropped
  size_t next = 0;                 // the first task of `tasks` not yet run
  // An AttachSegment message (protocol 5) rather than a batch: queued like one, so that it takes
  // effect in order with the tasks around it. The segment was adopted when the frame arrived
  // (its descriptor comes with the frame's bytes), or `adopted` says why not.
  struct Attach {
    protocol::AttachSegment msg;
    std::shared_ptr<net::SharedSegment> segment;
    Status adopted;
  };
  std::optional<Attach> attach;
  // Bytes of the server's budget reserved for the frame before it was read (Session::reserve):
  // the uploads it carries (FromHost ops, graphs' constants) take their bytes from here rather
  // than reserve them twice, and what is left is released once the batch has run.
  uint64_t reserved = 0;

  // Whether a task is left to run, decoding the next window when `tasks` is spent (into the
  // same Tasks, cleared: what the spent ones held goes now).
  bool refill() {
    if (next < count) return true;
    for (size_t i = 0; i < count; ++i) protocol::clear_task(tasks[i]);
    count = next = 0;
    if (!decoder.more()) return false;
    count = decoder.next_reusing(tasks, kWindow);
    if (!decoder.more()) decoded = decoder.status();
    return count > 0;
  }
};

class Session {
 public:
  using Clock = std::chrono::steady_clock;

  // A session on a new instance of the backend named `backend` that may hold at most
  // `memory_quota` tensor bytes (graphs' planned buffers and constants included), within
  // totals.memory, and graphs of at most `max_graph_ops` ops together. `totals` outlives the
  // session.
  static Result<std::unique_ptr<Session>> open(uint64_t id, const std::string& backend,
                                               uint64_t memory_quota, SessionTotals& totals,
                                               uint64_t max_graph_ops = uint64_t{1} << 18,
                                               OpLimits op_limits = {});
  // Frees the session's tensors and graphs and returns what it had reserved to the server's
  // budget.
  ~Session();
  // For a device with memory of its own (Backend::Description::host_memory false: a GPU), the
  // budget of that device, which its tensors (and graphs' planned buffers) are then reserved in
  // instead of totals.memory; frames being received stay in totals.memory, the host's. Called
  // once, before the first batch; `budget` outlives the session.
  void use_device_memory(MemoryBudget* budget, std::string device) {
    device_memory_ = budget;
    device_name_ = std::move(device);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs `batch`'s tasks in order from batch.next, replying to `out`, until every task has run
  // or `until` has passed (looked at after each task, so each call runs at least one): the
  // connection then lets other sessions of its thread run before calling again, so that a long
  // batch delays them by about one task, not the whole batch. True once the batch is finished
  // (its decoding error, if any, reported). Not thread-safe: one run() at a time.
  bool run(Batch& batch, SessionOutput& out, Clock::time_point until);
  // Runs a whole batch at once (up to an import that parks the session).
  void run(std::vector<protocol::Task>& tasks, const Status& decoded, SessionOutput& out);

  // ---- moves (protocol 3; transfer.h) ----
  // True between an import task that started a pull and finish_import(): run() returns false
  // at once, and the connection resumes it once the pull is over, without holding a thread.
  bool parked() const { return parked_.has_value() || long_; }
  // The outcome of the parked import: the tensor lands under its id, or the error poisons it.
  void finish_import(Result<TensorData> got);
  // The outcome of the parked collective part: its output lands, or the error poisons it.
  void finish_collective(Result<TensorData> got);
  // The long work handed to SessionOutput::run_long has run: the session may go on.
  void finish_long();

  // ---- a dropped connection's queue (issue 52) ----
  // The batches its connection had received and not run, kept with a session parked for resume
  // (none runs while it is parked) and given to the connection that resumes it, which runs
  // them first; dropped with the session when it ends.
  void stash_queue(std::deque<Batch> q) { stashed_ = std::move(q); }
  std::deque<Batch> take_queue() { return std::exchange(stashed_, {}); }

  // Memory this session's work holds outside its tensor table (a graph registration, a
  // transfer being received), counted in the server-wide budget beside its tensors so that
  // --max-memory bounds it too. reserve() takes the bytes before they are allocated, or
  // reserves nothing and returns an error naming `what` and the server's limit; release()
  // gives back what a reserve() took once it is freed. Whatever is still reserved when the
  // session ends is released then. Any thread.
  Status reserve(uint64_t bytes, const std::string& what);
  void release(uint64_t bytes);

  uint64_t id() const { return id_; }
  // Tensor bytes held after the last task run (graphs' planned buffers and constants included);
  // any thread.
  uint64_t held() const { return held_.load(); }
  // Ops run so far; any thread.
  uint64_t ops() const { return ops_.load(std::memory_order_relaxed); }
  // Whether the client asked for compressed replies (protocol 10; a resumed connection keeps it).
  bool compress_replies() const { return compress_replies_; }

  // ---- shared-memory segments (protocol 5; net/shm.h) ----
  // Segments attached and the data bytes they map together. Not thread-safe, like run().
  size_t segment_count() const { return segments_.size(); }
  uint64_t segment_bytes() const { return segment_bytes_; }
  // Why a session holds a bounded number of segments: each is a mapping and a descriptor; the
  // reference client keeps at most 4 (client/connection.h).
  static constexpr size_t kMaxSegments = 16;

  // ---- graphs (protocol 2): this session's graph table ----
  // Graphs registered and the ops they hold together. Not thread-safe, like run().
  size_t graph_count() const { return graph_ops_.size(); }
  uint64_t graph_ops() const { return graph_ops_total_; }
  // A registered graph's planned buffers and what its runs took from them.
  Result<Backend::GraphMemory> graph_memory(ir::GraphId id) const {
    return backend_->graph_memory(id);
  }

 private:
  Session(uint64_t id, std::unique_ptr<Backend> backend, SessionTotals& totals,
          uint64_t memory_quota, uint64_t max_graph_ops, OpLimits op_limits)
      : id_(id),
        backend_(std::move(backend)),
        totals_(totals),
        memory_quota_(memory_quota),
        max_graph_ops_(max_graph_ops),
        limits_(op_limits) {}
  void run_task(protocol::Task& t, SessionOutput& out, OpTimer& timer);
  // An op task: inferred, its cost estimated and checked against the limit (refused over it),
  // then run here, or handed to out.run_long() when it is long.
  Status run_op(ir::Op& op, SessionOutput& out, OpTimer& timer);
  // The refusal of an op over --max-op-cost, its outputs poisoned with it (an op that fails for
  // another reason first, bad output ids or a poisoned input, reports that instead).
  Status refuse_op(const ir::Op& op, const ir::OpCost& cost, double seconds);
  std::string over_cost(const std::string& what, const ir::OpCost& cost, double seconds) const;
  // On the long-work thread: the op run; its outputs poisoned when the session was cancelled.
  void run_long_op(ir::Op& op, std::vector<TensorMeta> metas);
  // A registered graph's run, estimated (0: an unknown graph, whose run fails at once).
  double graph_seconds(ir::GraphId id) const;
  // The backend's question before an op that needs `need` bytes more while the session's
  // backend holds `have`: OK once the bytes are reserved, or the error that poisons the op's
  // outputs. The quota counts graphs' constants beside `have`.
  Status admit(const ir::Op& op, uint64_t have, uint64_t need);
  // Whether `need` more bytes fit in the session's quota beside `holds` (the backend's bytes and
  // the graphs' constants) and the tensors it exported and has dropped since, which only their
  // capabilities keep alive until moved or expired: otherwise the error, "<what>: session memory
  // quota exceeded: the session holds ... and <taking> ...".
  Status within_quota(const std::string& what, uint64_t holds, const char* taking, uint64_t need,
                      const char* more = "") const;
  // The backend asks admit() about an op that would take it past `bytes`: 0 between graph
  // registrations, so that it asks about every op that allocates.
  void set_backend_limit(uint64_t bytes);
  // Brings the budget and the held figures to what the backend holds now.
  void settle();
  // Reserves `bytes` in the server's budget (expired capabilities swept first if they are in
  // the way); false, reserving nothing, over the limit.
  bool try_reserve(uint64_t bytes);
  // Up to `bytes` taken from the running batch's frame reservation (0 outside a batch): bytes
  // an upload already holds in the frame (a FromHost viewing it, a graph's constants decoded
  // from it), so they are not reserved again.
  uint64_t take_frame_credit(uint64_t bytes);
  // Gives back what take_frame_credit() took, when what it was taken for failed.
  void give_frame_credit(uint64_t bytes);
  Result<TensorData> read_for_wire(ir::TensorId id);
  // Segments: an attach (a segment id already attached is replaced), counted in the server's
  // budget and bounded by an allowance the size of the quota; an upload copied out of a segment
  // before anything reads it; a read written into one (or answered inline when it does not fit the
  // room offered).
  Status attach_segment(Batch::Attach& a);
  void from_segment(const protocol::FromSegmentTask& t);
  Status upload_by_hash(const protocol::UploadByHashTask& t);  // protocol 9 (dedup.h)
  void read_to_segment(const protocol::ReadToSegmentTask& t, protocol::OutFrame& f);
  // The segment a task names and its range checked against it, or the error.
  Result<net::SharedSegment*> segment_range(const protocol::SegmentRange& r, const char* what);
  // Graph tasks: registration checks the session's graph quotas, then the backend validates
  // and plans the graph; a run's failure is recorded in its outputs, as an op's is.
  Result<ir::GraphId> register_graph(ir::Graph graph);
  // Protocol 11: a registration under the client's id, no reply (a refusal is kept for the
  // runs that name it); a session error when the id is 0 or in use, or the session registered
  // graphs by RegisterGraph before (the two kinds of id are not mixed).
  void register_graph_as(protocol::RegisterGraphAsTask& t, SessionOutput& out);
  void run_graph(const protocol::RunGraphTask& t);
  // Moves: a capability for a tensor of this session; a tensor made from what a capability
  // granted (or poisoned with why there is none); an import's quota check and pull.
  Result<protocol::Exported> export_tensor(ir::TensorId id);
  void export_as(const protocol::ExportAsTask& t);
  void land(ir::TensorId id, const TensorMeta& meta, Result<TensorData> got);
  void start_import(const protocol::ImportTask& t, SessionOutput& out);
  void start_collective(const protocol::CollectiveTask& t, SessionOutput& out);
  // Ends a park: its reservation released, the outcome landed.
  void unpark(Result<TensorData> got);

  const uint64_t id_;
  std::unique_ptr<Backend> backend_;
  SessionTotals& totals_;
  // Bytes of tensor_memory() this session's backend accounts for (tensors, graphs' planned
  // buffers): what it held at the last settle() plus what admit() reserved since. Run thread
  // only. Graphs' constants are reserved by reserve(), in reserved_.
  uint64_t charged_ = 0;
  std::atomic<uint64_t> reserved_{0};  // by reserve(), not yet released
  // Where charged_ is counted: the device's own budget (use_device_memory), else the host's.
  MemoryBudget* device_memory_ = nullptr;
  std::string device_name_;
  MemoryBudget& tensor_memory() const { return device_memory_ ? *device_memory_ : totals_.memory; }
  // The batch run() is running, else null: its frame and what is left of its reservation.
  Batch* running_ = nullptr;
  std::atomic<uint64_t> held_{0};
  const uint64_t memory_quota_;

  // ---- graphs ----
  const uint64_t max_graph_ops_;
  struct GraphEntry {
    uint64_t ops = 0;    // what it counts for in graph_ops_total_
    double seconds = 0;  // a run's estimated time (ir/cost.h), its ops' together
  };
  std::unordered_map<ir::GraphId, GraphEntry> graph_ops_;
  uint64_t graph_ops_total_ = 0;
  // Who names this session's graphs: the server (RegisterGraph's replies) or, from protocol 11,
  // the client (RegisterGraphAs). The first registration decides.
  enum class GraphNames : uint8_t { kUnset, kServer, kClient };
  GraphNames graph_names_ = GraphNames::kUnset;
  std::unordered_map<ir::GraphId, ir::GraphId> client_graphs_;  // client's id -> backend's
  // Refused RegisterGraphAs ids and why, for the runs that name them (at most kMaxRefusals;
  // beyond, the oldest are forgotten and a run naming one reads "unknown graph").
  static constexpr size_t kMaxRefusals = 1024;
  std::unordered_map<ir::GraphId, Status> refused_graphs_;
  bool compress_replies_ = false;  // CompressRepliesTask (protocol 10)
  const OpLimits limits_;
  bool long_ = false;  // long work handed to SessionOutput::run_long, not yet finished
  // The inputs' metas of the op run_op() is inferring, found once for inference and the cost.
  std::vector<std::pair<ir::TensorId, TensorMeta>> op_inputs_;
  std::deque<Batch> stashed_;  // stash_queue()
  // Tensors whose UploadByHash missed: the client's upload of their bytes that follows is kept
  // (ContentCache::remember, whatever its size), at most kMaxMissed outstanding.
  std::unordered_set<ir::TensorId> missed_;
  static constexpr size_t kMaxMissed = 4096;
  uint64_t graph_constant_bytes_ = 0;  // FromHost payloads of registered graphs, reserved
  std::atomic<uint64_t> ops_{0};       // written by run() only
  server::OpSampling sampling_;        // which fast ops run() times (--metrics)

  // ---- segments ----
  std::unordered_map<uint64_t, std::shared_ptr<net::SharedSegment>> segments_;
  // Their capacities: reserved in the server's budget (in reserved_), at most the quota.
  uint64_t segment_bytes_ = 0;

  // ---- moves ----
  struct Parked {
    ir::TensorId id = 0;
    TensorMeta meta;
    uint64_t reserved = 0;  // by reserve() for the bytes being received
  };
  std::optional<Parked> parked_;
};

// 1536 -> "1.5KiB": sizes in messages and the limits summary.
std::string human_bytes(uint64_t b);

}  // namespace tw::server
TW_INTERNAL_END
