// A client's connection to one device of a compute server: handshake, batching of
// fire-and-forget tasks, and a pending-request table for the tasks that produce results. Its
// stream (net/stream.h: whatever transport the URL names) is read by one background Asio
// thread, created on connect, or by a caller waiting for a reply; frames are written from the
// calling thread (the I/O thread only finishes writes the stream could not take at once).
#pragma once
#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <variant>

#include "client/resume.h"
#include "core/tensor_data.h"
#include "net/framing.h"
#include "net/shm.h"
#include "net/stream.h"
#include "net/url.h"
#include "protocol/compress.h"
#include "protocol/content_hash.h"
#include "protocol/messages.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::client {

struct Options {
  // Flush a batch when it holds this many ops (TW_BATCH_OPS) ... After the program waited for
  // a reply (the server has then run everything sent), batches start at kFirstBatchOps ops and
  // double up to batch_ops, so the server starts on new work at once rather than idling until a
  // full batch has been built.
  uint32_t batch_ops = 512;
  static constexpr uint32_t kFirstBatchOps = 16;
  // ... or this many bytes (TW_BATCH_BYTES) ...
  uint64_t batch_bytes = 1 << 20;
  // ... or when no task was added for this long (TW_FLUSH_IDLE_US), so ops queued before the
  // program goes quiet still run promptly.
  uint32_t idle_flush_us = 500;
  // A caller waiting for a reply first polls the stream for this long (TW_SPIN_US) before it
  // blocks in the kernel: a reply that comes within it costs no wake-up. On an otherwise idle
  // machine that halves the round trip (a sleeping CPU is slow to wake); when every core is busy
  // the spin takes CPU from the server and costs ~1-2 us (docs/remote.md has both figures).
  uint32_t spin_us = 50;
  // The same-host shared-memory path (protocol 5, unix:// only; see Connection): on unless
  // TW_SHM=0, which sends every tensor through the socket.
  bool shm = true;
  // Compressed frames (protocol 9, protocol/compress.h): TW_COMPRESS=0 never, 1 whenever a
  // frame's sample pays, unset (auto) the same but only to another host over TCP or TLS.
  protocol::CompressMode compress = protocol::CompressMode::kAuto;
  // Deduplicated uploads (protocol 9, client/dedup.cc): an upload of at least kDedupMinBytes
  // first asks the server, by content hash, whether it holds the bytes; on unless TW_DEDUP=0.
  // When the client holds the bytes (a host tensor's storage, a vector handed over) the caller
  // does not wait for the answer; when they are only lent for the call (a span) it waits one
  // round trip.
  bool dedup = true;
  static constexpr uint64_t kDedupMinBytes = uint64_t{4} << 20;
  // The smallest upload that asks (TW_DEDUP_MIN_BYTES, at least 1): kDedupMinBytes by default;
  // lower it (1024) toward a server with --store so that small weights, too, are re-uploaded
  // after its restart by their hash only (each such upload costs a round trip while the server
  // waits; docs/remote.md, "One model, several servers").
  uint64_t dedup_min_bytes = kDedupMinBytes;
  // Flow control (client/flow_control.cc): a thread that queues frames while this many bytes of
  // earlier ones are still unwritten (the server stopped reading: it runs ops slower than they
  // come) blocks until half of them are out (TW_WINDOW_BYTES; 0: never blocks). Beside it only
  // the kernel's socket buffers and the server's bounded queue (session_queue_depth batches)
  // hold ops not yet run, so memory stays bounded on both sides however fast a program issues.
  uint64_t window_bytes = uint64_t{8} << 20;
  std::string credential;  // TW_CREDENTIAL
  // Resumable sessions (protocol 9, client/resume.cc): after a dropped connection, reconnect
  // (up to resume_attempts times, backoff from 5 ms doubling) and resume the session, re-sending
  // the frames the server had not received; TW_RESUME=0: a dropped connection fails every call.
  bool resume = true;
  uint32_t resume_attempts = 8;  // TW_RESUME_ATTEMPTS
  // Frames sent and not yet shown executed are kept up to this many bytes (TW_RESUME_WINDOW);
  // a resume that would need frames let go over it fails.
  uint64_t resume_window_bytes = uint64_t{64} << 20;
  // How a tls:// server is verified: tls.ca_file (TW_TLS_CA) and/or tls.fingerprint
  // (TW_TLS_FINGERPRINT); the suites offered, tls.cipher_suites (TW_TLS_CIPHERS); see
  // net::TlsOptions.
  net::TlsOptions tls;
  // How long connecting waits for the server's first answer (the TLS handshake, then the reply
  // to Hello) on every transport before it fails, naming the address (TW_HANDSHAKE_TIMEOUT_MS;
  // net::kDefaultHandshakeTimeoutMs).
  int handshake_timeout_ms = net::kDefaultHandshakeTimeoutMs;
  static Options from_env();
  // What net::dial needs: tls, with the handshake deadline.
  net::TlsOptions dial_options() const {
    net::TlsOptions t = tls;
    t.handshake_timeout_ms = handshake_timeout_ms;
    return t;
  }
};

struct Counters {
  uint64_t frames_out = 0, bytes_out = 0, frames_in = 0, bytes_in = 0;
  uint64_t ops = 0, round_trips = 0;
  uint64_t wait_ns = 0;  // callers blocked waiting for a reply, summed over threads (tw::profile)
  // Callers that read the stream for their reply, and those of them that spun first (Options::
  // spin_us; none after waits that keep outlasting it, wait_until).
  uint64_t reading_waits = 0, spun_waits = 0;
  // Times a thread waited for the flow-control window (Options::window_bytes), and how long.
  uint64_t window_waits = 0, window_wait_ns = 0;
  // Sessions resumed after a dropped connection, and how long each resume took.
  uint64_t resumes = 0;
  std::vector<double> resume_seconds;
};

class Connection {
 public:
  // The same-host shared-memory path (protocol 5; net/shm.h, docs/protocol.md §8.11): over a
  // unix:// URL, an upload or read of at least kShmMinBytes goes through a memfd segment both
  // sides map (the client copies in, the server copies out; the server writes a read there and
  // the result is the mapping itself) instead of through the socket. The threshold keeps small
  // transfers, where either way costs about a round trip, from claiming pooled segments (each at
  // least this large); at it the path already pays: an upload and read of 1 MiB took 205 us
  // against 439 us through the socket (best of 200, 2-core VM under load; 8 MiB: 1.7 against
  // 3.2 ms). It is not a measured crossover: smaller sizes were not tried. bench-remote row s
  // measures 256 MiB.
  static constexpr size_t kShmMinBytes = size_t{1} << 20;
  // Segments a connection keeps and reuses (fresh pages are slow to touch the first time, so a
  // transfer never gets a new one when a pooled one is free): an upload not yet copied out, a
  // read landing, and read results the program still holds. When all are busy a transfer goes
  // through the socket. Within the server's per-session bound (server::Session::kMaxSegments).
  static constexpr size_t kMaxSegments = 4;

  Connection(net::Url url, uint32_t device_index, Options options);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects and shakes hands if not done yet. Thread-safe; after a failure or a lost
  // connection every call returns the same error at once.
  Status ensure_connected();
  const protocol::Welcome& welcome() const { return welcome_; }
  const net::Url& url() const { return url_; }
  const Options& options() const { return options_; }
  uint32_t device_index() const { return device_index_; }

  Status submit_op(const ir::Op& op);
  void drop(ir::TensorId id);
  std::future<Result<TensorData>> read(ir::TensorId id);
  // read(id), waited for; the waiting thread reads the reply itself when it can.
  Result<TensorData> read_wait(ir::TensorId id);
  // Reads of a tensor the caller expects to hold `expect_bytes`: at least kShmMinBytes over the
  // shared-memory path, into a segment; the result's bytes are then the segment's mapping, which
  // no transfer reuses until the result's last Buffer is gone.
  std::future<Result<TensorData>> read(ir::TensorId id, uint64_t expect_bytes);
  Result<TensorData> read_wait(ir::TensorId id, uint64_t expect_bytes);
  // A read whose values land in `into`, which must be exactly the tensor's size: a reply too
  // large for the reader's staging buffer is received straight there (net::FrameReader's
  // divert: one copy, from the kernel to `into`), a smaller or compressed one is copied there.
  // The result's bytes are `into` (or it is the failure); the caller leaves `into` alone until
  // the result is in. Never over shared memory (a segment would add a copy).
  std::future<Result<TensorData>> read_into(ir::TensorId id, Buffer into);
  // A copy of `n` bytes for an upload (a FromHost op submitted next): at least kShmMinBytes over
  // the shared-memory path, straight into a segment, so that submit_op sends the op as an upload
  // from the segment; otherwise a plain copy.
  Buffer host_copy(const void* data, size_t n);
  // Whether transfers may take the shared-memory path now (unix://, protocol 5, TW_SHM not 0,
  // no attach refused). Connects first.
  bool shm_enabled();
  // Waits for a future from read(), reading replies on this thread when nobody else does.
  Result<TensorData> wait_read(std::future<Result<TensorData>>& fut);
  Status sync();
  Result<protocol::ServerStats> stats();
  // Registers a graph on the session's device (the server validates and plans it; a refusal
  // names the op). Tasks queued before it are sent first. From protocol 11 the id is the
  // client's and nothing waits (RegisterGraphAs): a refusal poisons the outputs of the runs
  // that name the graph, so the program reads it at its next read. Before 11, waits for the
  // server's id or refusal (one round trip).
  Result<ir::GraphId> register_graph(const ir::Graph& graph);
  // Queues a run of a registered graph like an op (one small task whatever the op count); its
  // failure is recorded in the outputs on the server.
  Status run_graph(ir::GraphId graph, std::vector<ir::TensorId> inputs,
                   std::vector<ir::TensorId> outputs);
  // Moves (protocol 3): a capability for tensor `id` of this session, signed by the server once
  // the tasks queued before it have run (so it waits for them); a poisoned tensor's error.
  Result<protocol::Exported> export_tensor(ir::TensorId id);
  // Protocol 17: queues the export of tensor `id` under `ticket` (no reply) and sends the batch.
  Status export_as(ir::TensorId id, const std::string& ticket);
  // Queues an import (kImport: the server pulls from source.url) or a same-server move
  // (kMoveLocal) that makes tensor `id` of `meta` from `source`; like an op, its failure is
  // recorded in the tensor on the server.
  Status move_in(protocol::TaskKind kind, ir::TensorId id, const TensorMeta& meta,
                 const protocol::TensorSource& source);
  // Queues this session's part of a collective (protocol 3; server/collective.h); like an op,
  // its failure is recorded in its output on the server.
  Status submit_collective(const protocol::CollectiveSpec& c);
  void flush();
  void close();
  Counters counters() const;

 private:
  // A pooled segment. busy: held by staged upload bytes (host_copy's Buffer), or by a read
  // landing in it and then its result; `sent` the sequence of the last upload queued from it,
  // which the server stores in its `consumed` word once copied out. Idle: neither.
  struct ShmSlot {
    uint64_t id = 0;
    std::shared_ptr<net::SharedSegment> seg;
    std::atomic<uint64_t> sent{0};
    std::atomic<bool> busy{false};
    bool idle() const {
      return !busy.load(std::memory_order_acquire) &&
             seg->consumed().load(std::memory_order_acquire) >= sent.load();
    }
  };
  struct Pending {
    enum Kind { kRead, kSync, kStats, kGraph, kCapability } kind = kRead;
    // A read into a segment: the slot, and the hold on it that the result's bytes take over.
    std::shared_ptr<ShmSlot> slot;
    std::shared_ptr<const void> lease;
    // A read_into()'s destination: where the reply's bytes are received or copied.
    Buffer into;
    // The promise of its kind only (alternatives in Kind's order): a std::promise allocates its
    // shared state when made, so one of each kind cost eight needless allocations per request.
    // None (monostate) when the reply goes to data_out or status_out instead.
    std::variant<std::promise<Result<TensorData>>, std::promise<Status>,
                 std::promise<Result<protocol::ServerStats>>, std::promise<Result<ir::GraphId>>,
                 std::promise<Result<protocol::Exported>>, std::monostate>
        promise;
    // Where a caller that waits in wait() for this reply takes it (a read's or a sync's), instead
    // of through a promise: libstdc++ fulfils a std::promise under call_once, and glibc's
    // pthread_once ends with an unconditional futex wake, a system call on every round trip.
    // Written before *done is set.
    std::optional<Result<TensorData>>* data_out = nullptr;
    Status* status_out = nullptr;
    explicit Pending(Kind k, bool direct = false);
    // As made anew by Pending(k, direct), in place: lets go of the segment, lease and promise.
    void reset(Kind k, bool direct);
    // Hands the reply (or failure) `st` / `data` to whoever waits: the out slot or the promise.
    void deliver_status(const Status& st);
    void deliver_data(Result<TensorData> data);
    // Sets *done (when given), after the reply is handed over.
    void mark_done();
    std::promise<Result<TensorData>>& data() { return std::get<kRead>(promise); }
    std::promise<Status>& status() { return std::get<kSync>(promise); }
    std::promise<Result<protocol::ServerStats>>& stats() { return std::get<kStats>(promise); }
    std::promise<Result<ir::GraphId>>& graph() { return std::get<kGraph>(promise); }
    std::promise<Result<protocol::Exported>>& exported() { return std::get<kCapability>(promise); }
    // Set (after the promise) when the reply is in, for a caller waiting in wait(): checking it
    // is cheaper than polling the future, which makes the promise's fulfilment a futex wake.
    std::atomic<bool>* done = nullptr;
  };
  Status connect_locked();
  // Flow control: blocks (mu_ held, released while waiting) while the unwritten frames exceed
  // Options::window_bytes; never on the I/O thread, which completes the writes.
  void wait_for_window_locked();
  // Deduplicated upload (client/dedup.cc): true when the server made the tensor from bytes it
  // holds (named by `h`, their content hash); false when the bytes must be sent.
  Result<bool> upload_by_hash(const ir::FromHost& up, const protocol::ContentHash& h);
  // submit_op() of an upload of at least Options::dedup_min_bytes (dedup on): by hash, answered
  // later or waited for (see Options::dedup), else as a plain upload.
  Status submit_upload(const ir::Op& op, const ir::FromHost& up);
  // The upload by hash of bytes the client holds (`up`'s Buffer), not waited for: hashed on the
  // connection's hasher thread, asked once hashed, and the frames queued after it held until the
  // answer (dedup_answered_locked), so nothing reaches the server before the tensor it may read.
  // False (nothing queued) when the server cannot take it.
  Result<bool> upload_by_hash_async(const ir::FromHost& up);
  // The hasher thread's loop (hash_jobs_ in order), and what it does with each hash.
  void hash_loop();
  void hashed_locked(uint64_t request, const protocol::ContentHash& h);
  // Sends the question of dedups_.front() (hashed, at the front of the line).
  void ask_front_locked();
  // The server answered the upload by hash awaited (awaiting_dedup_): on a miss its bytes go
  // now; then the held frames, up to the next upload by hash among them.
  void dedup_answered_locked(bool hit);
  // close(): the held frames sent and run first, then the hasher stopped.
  void finish_dedups();
  // Counts and sends one frame of the session (send_batch_locked's, or a held one).
  void send_frame_locked(protocol::OutFrame f);
  // fail_all(): lets go of the uploads by hash in flight and the frames held behind them.
  void drop_dedups_locked();
  // host_copy() of an upload that may be deduplicated: the caller's bytes hashed where they are
  // and borrowed, not copied (the upload that follows at once, submit_op, copies them only when
  // the server does not hold them). Empty when dedup does not apply.
  Buffer hash_in_place(const void* data, size_t n);
  // The hash hash_in_place() took of `b`'s bytes (b borrowed, not yet copied), or none.
  std::optional<protocol::ContentHash> staged_hash(const Buffer& b);
  // host_copy() proper: into a shared-memory segment when the path applies, else a plain copy.
  Buffer copy_for_upload(const void* data, size_t n);
  // submit_op() after deduplication.
  Status submit_plain(const ir::Op& op);
  // Connects unless connected; the error of a dead connection.
  Status ready_locked();
  // After a task was added to the batch: counts it as an op and flushes as submit_op does.
  void added_op_locked();
  uint64_t add_pending_locked(Pending::Kind kind, Pending** out, std::atomic<bool>* done = nullptr,
                              bool direct = false);
  // A read whose reply lands in the returned future, or in *out (then the future is invalid).
  std::future<Result<TensorData>> read_impl(ir::TensorId id, std::atomic<bool>* done,
                                            uint64_t expect_bytes = 0,
                                            std::optional<Result<TensorData>>* out = nullptr,
                                            Buffer into = Buffer());
  // The reader's divert hook (net::FrameReader::Divert): the destination of the read_into()
  // that a large ReadResult answers, or nothing.
  Buffer divert_target(const uint8_t* payload, size_t at, size_t len);
  // Shared memory: a segment of at least `n` bytes, claimed (busy), with the hold that releases
  // it; null when the path does not apply or every segment is busy (then: the socket).
  std::shared_ptr<ShmSlot> claim_segment(size_t n, std::shared_ptr<const void>* lease);
  // Sends the segment to the server as `slot_id` and waits for its answer (shm_mu_ held).
  Status attach_segment(uint64_t slot_id, const std::shared_ptr<net::SharedSegment>& seg);
  // The slot whose staged bytes `b` are (host_copy's), or null.
  std::shared_ptr<ShmSlot> staged_slot(const Buffer& b);
  Status submit_from_segment(const ir::FromHost& op, ShmSlot& slot);
  // Moves the queued drops into the batch, then sends it.
  void flush_locked();
  // Moves the queued drops into the batch (as drop tasks after the tasks queued so far).
  void queue_drops_locked();
  // The server will be idle once the reply to the request just added arrives: start small
  // again (called by add_pending_locked).
  void restart_batches_locked() {
    batch_limit_ = std::min(Options::kFirstBatchOps, options_.batch_ops);
  }
  // Sends the queued tasks as one frame (pending drops stay queued).
  void send_batch_locked();
  // Sends the queued tasks first if `bytes` more would take the frame past the server's limit.
  void make_room_locked(uint64_t bytes);
  // Queues `task` like an op (after the queued drops; counted and flushed as submit_op does),
  // sending what is queued first when the task would take the frame past the server's limit. A
  // task no frame can carry is refused, the error beginning with `what` ("... takes").
  template <class Task>
  Status queue_task_locked(const Task& task, const std::string& what);
  // Adds `task` (a read, a sync, ...) to the batch, sending what is queued first when it would
  // take the frame past the server's limit.
  template <class Task>
  void add_task_locked(const Task& task) {
    make_room_locked(batch_.task_bytes(task));
    batch_.add(task);
  }
  Status connection_lost(const asio::error_code& ec);
  // The stream of generation `gen` failed with `why` (client/resume.cc): resumes the session on a
  // new connection when it can, else fails every pending and later call. `close_stream`: the
  // write side saw it, close the stream (the read side may not know yet).
  void lost(const Status& why, uint64_t gen, bool close_stream = false);
  Status resume_locked(std::unique_lock<std::mutex>& lock, const Status& why);
  // Queues a frame of the session: numbered and kept for a resume (an Ack first when due).
  // `segment`: the frame is an AttachSegment passing that segment's descriptor (a resume passes
  // it again with the frame).
  void push_frame_locked(OutFrame f, std::shared_ptr<net::SharedSegment> segment = nullptr);
  void push_ack_locked(uint32_t flags);
  // After the handshake: the session is resumable (a token came and Options::resume).
  void start_resume_locked();
  Status send_failed(const asio::error_code& ec) const;
  // A write of generation `gen` failed (the server closed or reset the connection): lost() a
  // moment later (kSendLostGraceMs), after the read side had the chance to take what the server
  // said before it closed (a Draining notice, a session error), so that its reason wins over a
  // broken pipe. The read side that meets the close meanwhile calls lost() itself.
  void send_lost(Status why, uint64_t gen);
  static constexpr int kSendLostGraceMs = 50;
  void arm_idle_timer_locked();
  void fail_all(const Status& why);
  // Reading (see reader.cc): by the I/O thread or by a waiting caller, one at a time.
  // Until fut is ready (or *done, when given), reading replies when nobody else does.
  template <typename T>
  void wait(std::future<T>& fut, const std::atomic<bool>* done = nullptr,
            const char* kind = "reply");
  // `kind` names the wait for TW_DEBUG_WAITS=1, which prints every wait of 1 ms or more (its
  // kind and length) on stderr: what in a program blocks on the link.
  void wait_until(const std::function<bool()>& ready, const char* kind = "reply");
  // The reader: handles frames received so far until done() holds or none is left.
  Status read_available(bool* closed, const std::function<bool()>& done);
  void arm_watch_locked();
  void on_readable(const asio::error_code& ec, size_t n, uint64_t gen);
  // The I/O thread's look-in while callers read (see reader.cc): a timer whose handler
  // parks the thread (park_locked) or arms the watch.
  void start_check_timer_locked();
  // On the I/O thread, in a handler: while callers read the stream, waits on park_cv_ instead
  // of in the reactor, whose epoll would wake it for every reply that arrives (the stream stays
  // registered there). Returns to the reactor, arming the watch, once callers go quiet, or
  // without it (the check timer looks in again) when the reactor has work: a write the stream
  // did not take at once, the idle flush's timer, a failure, a close.
  void park_locked(std::unique_lock<std::mutex>& lock);
  // From a caller that read: parks the I/O thread unless it is parked or watching already.
  void request_park_locked();
  // Sends a parked I/O thread back to the reactor (work was handed to it).
  void kick_io_locked();
  // `diverted`: the tensor bytes of a ReadResult whose head `payload` is, received apart
  // (divert_target's destination).
  void on_message(const Buffer& payload, Buffer diverted = Buffer());
  // Counts what the reader received: bytes_in_ and frames_in_ have one writer at a time (the
  // reader, handed over under mu_), so a plain add does, without a lock or a locked add per frame.
  void count_in(uint64_t bytes, uint64_t frames) {
    bytes_in_.store(bytes_in_.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
    frames_in_.store(frames_in_.load(std::memory_order_relaxed) + frames,
                     std::memory_order_relaxed);
  }
  std::atomic<uint64_t> bytes_in_{0}, frames_in_{0};  // counters() reads them into its Counters
  // The reply on_message() decodes into, reused (by the reader of the moment only).
  protocol::ServerMessage reply_;
  // Writes what the writer holds from the calling thread; what the stream does not take at
  // once goes out by an async write whose handler continues.
  void pump_locked();

  const net::Url url_;
  const uint32_t device_index_;
  const Options options_;

  mutable std::mutex mu_;
  enum class State { kIdle, kConnected, kDead } state_ = State::kIdle;
  Status dead_;
  protocol::Welcome welcome_;
  protocol::BatchWriter batch_;
  // The largest frame payload the server accepts (its --max-frame, at most what the u32 length
  // prefix can express); no batch is allowed to grow past it.
  uint64_t frame_limit_ = 0xFFFFFFFFu;
  bool compress_ = false;  // send frames compressed when they pay (Options::compress, protocol 9)
  std::vector<ir::TensorId> drops_;
  uint64_t next_request_ = 1;
  ir::GraphId next_graph_ = 1;  // RegisterGraphAs's ids (protocol 11)
  using PendingMap = std::unordered_map<uint64_t, std::unique_ptr<Pending>>;
  PendingMap pending_;
  // A node of pending_, its Pending in it, kept for the next request (mu_), so that a request
  // with a reply allocates neither; and the node the reader took out last, which it hands over
  // the next time it holds mu_ (the reader's only).
  PendingMap::node_type spare_pending_, reader_spare_;
  bool timer_armed_ = false;
  uint32_t batch_limit_ = 0;  // ops in the batch being built that send it (see Options)
  uint32_t batch_ops_ = 0;    // ops in the batch being built
  Counters counters_;
  std::vector<Status> session_errors_;  // unsolicited errors, reported by the next sync()
  net::FrameWriter writer_;
  std::condition_variable_any window_cv_;  // writes completed, or the connection ended

  asio::io_context io_;
  std::unique_ptr<net::Stream> stream_;
  // The stream's generation: a resume replaces the stream, and handlers of an older one's
  // operations find their generation gone and do nothing.
  uint64_t gen_ = 0;
  std::unique_ptr<ResumeWindow> resume_;  // null: not resumable
  std::optional<asio::steady_timer> timer_;
  std::thread io_thread_;
  // A ReadResult's tensor bytes land 64-byte aligned, so the tensor keeps them where they arrived.
  net::FrameReader reader_{net::FrameReader::kStagingBytes, protocol::read_result_data_offset};
  bool reader_busy_ = false;  // a thread is reading
  bool watch_armed_ = false;  // the I/O thread waits for the stream to become readable
  bool check_timer_running_ = false;
  bool io_parked_ = false;    // the I/O thread waits in park_locked()
  bool park_posted_ = false;  // a park_locked() is posted to the I/O thread
  bool io_kick_ = false;      // the parked I/O thread is to go back to the reactor
  bool closing_ = false;      // close() began: the I/O thread is not to park again
  std::chrono::steady_clock::time_point idle_deadline_;  // the armed idle flush timer's expiry
  std::condition_variable park_cv_;                      // park_locked()'s wait
  std::chrono::steady_clock::time_point last_caller_wait_;
  // Waits in a row that outlasted the spin (wait_until): from kLongWaitsBeforeNoSpin on, a
  // waiting caller sleeps at once ...
  static constexpr uint32_t kLongWaitsBeforeNoSpin = 2;
  static constexpr uint32_t kProbeEvery = 16;  // ... but every 16th spins, to find out again
  uint32_t long_waits_ = 0;
  uint32_t skipped_spins_ = 0;
  std::condition_variable reader_cv_;   // reader_busy_ cleared, or a reply arrived
  std::atomic<int> reader_waiters_{0};  // callers waiting on reader_cv_
  std::optional<asio::steady_timer> check_timer_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work_;

  // Shared memory (see kShmMinBytes). shm_mu_ guards the pool and is taken before mu_, never
  // under it (an attach waits for its reply holding it).
  std::mutex shm_mu_;
  std::vector<std::shared_ptr<ShmSlot>> shm_slots_;
  uint64_t next_segment_ = 1;
  // An attach refused for a reason other than a limit: the path is off for this connection.
  Status shm_refused_;

  // hash_in_place()'s borrowed buffers not yet submitted: storage identity and the hash (the
  // weak pointer expires with the buffer, so a reused address never matches).
  struct StagedHash {
    const void* storage = nullptr;
    std::weak_ptr<const protocol::ContentHash> hash;
  };
  std::mutex staged_mu_;
  std::vector<StagedHash> staged_hashes_;

  // Uploads by hash not waited for (upload_by_hash_async; mu_), in order: the question (its
  // hash filled in by the hasher), and the frame that uploads the bytes should the server not
  // hold them (it holds the client's Buffer). The first is at the front of the line
  // (awaiting_dedup_: asked once hashed); each other one has its place among the held frames.
  struct DedupInFlight {
    uint64_t request = 0;
    protocol::UploadByHashTask ask;
    protocol::OutFrame upload;
    bool hashed = false;
  };
  std::deque<DedupInFlight> dedups_;
  uint64_t awaiting_dedup_ = 0;  // the request whose answer holds later frames back; 0: none
  // Frames made while an answer is awaited, in order; or (`dedup` not 0) the place of that
  // upload's question, made once it is hashed.
  struct HeldFrame {
    protocol::OutFrame frame;
    uint64_t dedup = 0;
  };
  std::deque<HeldFrame> held_;
  uint64_t held_bytes_ = 0;  // of held_, counted in the flow-control window
  // The hasher: one thread, started on the first upload by hash not waited for, hashing the
  // uploads' bytes in order (each on two threads, protocol::content_hash) while the caller goes on.
  std::thread hasher_;
  std::deque<std::pair<uint64_t, Buffer>> hash_jobs_;  // (request, bytes); mu_
  // Hits' upload frames, let go by the hasher: the last hold on bytes handed over (64 MiB take
  // milliseconds to give back), not to be freed by the reader under mu_.
  std::vector<protocol::OutFrame> to_free_;
  std::condition_variable hash_cv_;
  bool hasher_stop_ = false;
};

// Connects only to list the devices a server hosts.
Result<protocol::Welcome> enumerate(const net::Url& url, const Options& options);

template <typename T>
void Connection::wait(std::future<T>& fut, const std::atomic<bool>* done, const char* kind) {
  wait_until(
      [&] {
        if (done) return done->load(std::memory_order_acquire);
        return fut.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
      },
      kind);
}

}  // namespace tw::client
TW_INTERNAL_END
