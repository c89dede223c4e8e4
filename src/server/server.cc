// The compute server's listening, connections and shutdown: a fixed pool of threads, each running
// its own io_context (a shard), does both the streams and the execution. A connection lives on
// one shard; it is a serial queue of received batches: the thread that finishes reading a batch
// queues it, starts reading the next, and runs the queue itself (on its Session, session.h) if
// no thread is running it yet, so tasks of one session run in submission order, sessions run in
// parallel, no thread exists per session, and a request costs no hand-off between threads: the
// thread that read it runs it and writes the reply (see docs/remote.md, "Latency").
#include "tensorwire/server.h"

#include <unistd.h>

#include <algorithm>
#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include "backend/registry.h"
#include "core/thread_pool.h"
#include "net/framing.h"
#include "net/stream.h"
#include "net/tls_stream.h"
#include "net/url.h"
#include "protocol/messages.h"
#include "server/collective.h"
#include "server/metrics.h"
#include "server/session.h"
#include "server/spin_budget.h"
#include "server/transfer.h"
#include "tensorwire/error.h"

namespace tw {

namespace proto = protocol;
using server::human_bytes;

namespace {

// The backend of each hosted device, in index order. options.backend names one backend for all
// options.devices devices, or one backend per device as a comma-separated list ("cpu,torch":
// device 0 runs on cpu, device 1 on torch), in which case options.devices must be 1 (its
// default) or the list's length. Every name must be a backend of this build.
Result<std::vector<std::string>> device_backends(const ServerOptions& opts) {
  std::vector<std::string> names;
  std::stringstream list(opts.backend);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  if (names.empty()) names.push_back(opts.backend);
  for (const std::string& name : names) TW_RETURN_NOT_OK(make_backend(name).status());
  if (names.size() == 1) return std::vector<std::string>(std::max(opts.devices, 1), names[0]);
  if (opts.devices != 1 && opts.devices != static_cast<int>(names.size())) {
    return invalid_argument("--backend " + opts.backend + " names " + std::to_string(names.size()) +
                            " devices but --devices is " + std::to_string(opts.devices) +
                            "; give one backend, or one per device");
  }
  return names;
}

// Compares without an early exit, so the time taken does not tell how much of a guess matched.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

uint32_t all_compute_dtypes() {
  uint32_t m = 0;
  for (int i = 0; i < kNumDTypes; ++i) m |= 1u << i;
  return m;
}

class Connection;

}  // namespace

struct Server::Impl {
  // Members are destroyed in reverse order, and the order matters: a Connection can outlive the
  // io loop (held by a handler that never ran, such as a write to a client that stopped
  // reading), and its destructor uses the session table and counters and its stream on `io`.
  // So the io_context (with those handlers) goes first, then what the sessions share.
  ServerOptions opts;
  std::vector<std::string> backends;  // per device index (device_backends)
  std::string server_id;
  int worker_count = 1;

  std::mutex sessions_mu;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> sessions;
  std::atomic<uint64_t> next_session{1};
  // Connections holding a session slot, within opts.max_sessions: each takes one from its
  // accept (so a peer still shaking hands counts) until it closes, or the handshake deadline
  // drops it.
  std::atomic<uint32_t> slots_taken{0};
  std::atomic<uint64_t> sessions_opened{0}, frames_in{0}, frames_out{0}, bytes_in{0}, bytes_out{0};
  server::SessionTotals totals;  // ops run, tensor bytes held
  std::atomic<int64_t> batches_in_flight{0};  // queued on a connection, not yet finished
  std::atomic<bool> stopping{false};
  // --spin-threads (server/spin_budget.h); set in start_server from the options.
  std::unique_ptr<server::SpinBudget> spin_budget;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;

  // One io_context per pool thread. A session lives on one shard (the one with the fewest
  // sessions when it connects): its stream's events, its execution and its replies all happen
  // on that shard's thread, so a request costs no hand-off between threads. A kernel still uses
  // every core through the backend's own intra-op pool.
  struct Shard {
    asio::io_context io{1};
    std::atomic<int> sessions{0};
  };
  std::vector<std::unique_ptr<Shard>> shards;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> works;
  std::vector<std::thread> threads;  // threads[i] runs shards[i]
  asio::io_context& io() { return shards.front()->io; }  // listeners and their timers
  Shard& least_loaded() {
    Shard* best = shards.front().get();
    for (auto& sh : shards)
      if (sh->sessions.load() < best->sessions.load()) best = sh.get();
    return *best;
  }
  std::vector<std::unique_ptr<net::Listener>> listeners;
  // Imports' pulls from other servers (transfer.h); after the shards, so destroyed before them:
  // its threads post their outcomes to the shards.
  std::unique_ptr<server::Puller> puller;
  // Collectives' parts (collective.h), and the rendezvous keys this server hosts for them; like
  // the puller, its threads post outcomes to the shards.
  std::unique_ptr<server::Collectives> collectives;
  server::StoreTable store;
  // "server 9f3a (tcp://127.0.0.1:5000)": how a transfer's errors name this server.
  std::string self_name() const {
    return "server " + server_id +
           (listeners.empty() ? "" : " (" + listeners.front()->url().str() + ")");
  }
  bool tls_self_signed = false;  // the tls:// listeners present a pair generated at start
  // Last: it calls view() until it is destroyed, first.
  std::unique_ptr<server::MetricsEndpoint> metrics;

  // The threads that post to the shards end first; then the shards go, with the handlers their
  // loops never ran, while the collectives table is still there: a Connection such a handler
  // holds calls collectives->forget() as it is destroyed (ASan: use after free otherwise).
  ~Impl() {
    metrics.reset();
    puller.reset();
    if (collectives) collectives->join();
    works.clear();
    shards.clear();
  }

  void accept(net::Listener& l);
  proto::ServerStats snapshot(uint64_t asking_session);
  std::vector<proto::DeviceInfo> device_infos() const {
    std::vector<proto::DeviceInfo> v;
    for (int i = 0; i < opts.devices; ++i) {
      v.push_back({backends[i] + ":" + std::to_string(i), backends[i], opts.session_memory_bytes,
                   all_compute_dtypes()});
    }
    return v;
  }
  server::ServerView view();  // what a metrics scrape reads
  void do_stop();
  void wait_for_batches() const {
    while (batches_in_flight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
};

namespace {

// One client's connection: reads its frames, shakes hands, queues its batches for its Session
// and writes the replies. Replies are written by whichever thread runs the session while
// another may be reading (a stream allows one reader and one writer at a time).
class Connection : public std::enable_shared_from_this<Connection>, private server::SessionOutput {
 public:
  Connection(Server::Impl& srv, Server::Impl::Shard& shard, std::unique_ptr<net::Stream> stream)
      : srv_(srv), shard_(shard), stream_(std::move(stream)) {
    shard_.sessions.fetch_add(1);
  }

  ~Connection() override {
    // Last reference gone (stream shut down, no task in flight): free the session's tensors.
    if (session_ && srv_.collectives) srv_.collectives->forget(id_);
    session_.reset();
    give_slot_back();
    shard_.sessions.fetch_sub(1);
    if (id_) {
      std::lock_guard<std::mutex> lock(srv_.sessions_mu);
      srv_.sessions.erase(id_);
    }
  }

  void start() {
    uint32_t taken = srv_.slots_taken.fetch_add(1);
    has_slot_ = taken < srv_.opts.max_sessions;
    if (!has_slot_) srv_.slots_taken.fetch_sub(1);  // refused as busy unless it only enumerates
    // The deadline for the handshake; on_hello() cancels it.
    handshake_timer_.expires_after(srv_.opts.handshake_timeout);
    handshake_timer_.async_wait([weak = weak_from_this()](const asio::error_code& ec) {
      auto self = weak.lock();
      if (ec || !self || self->welcomed_) return;
      self->close();
    });
    read_more();
  }
  uint64_t id() const { return id_; }
  // Call with srv_.sessions_mu held (the session is set under it).
  uint64_t held() const { return session_ ? session_->held() : 0; }
  // Call with srv_.sessions_mu held.
  server::SessionView view() const {
    return {id_, device_, held(), session_ ? session_->ops() : 0, queued_.load(std::memory_order_relaxed)};
  }

  // Closes the session once its queued replies are out, lingering (below) unless the server is
  // stopping.
  void close_when_flushed() {
    closing_ = true;
    linger_ = !srv_.stopping;
    std::lock_guard<std::mutex> lock(write_mu_);
    if (writer_.idle()) {
      shutdown_locked();
    } else {
      close_after_write_ = true;
    }
  }

 private:
  // Ends the session: both directions of the stream are shut down, so the pending read ends and
  // no more writes start; the stream itself is released with the last reference. Safe while
  // other threads have operations on the stream, which close() would not be.
  void shutdown_locked() {
    if (lingering_ && srv_.stopping) return stream_->shutdown();  // ends a lingering close now
    if (closed_.exchange(true)) return;
    if (linger_) return linger_locked();
    stream_->shutdown();
    give_slot_back();
    // A pending deadline would keep the shard's loop running; the timer belongs to the shard's
    // thread, and this may be another.
    asio::post(shard_.io, [weak = weak_from_this()] {
      if (auto self = weak.lock()) self->handshake_timer_.cancel();
    });
  }
  // A lingering close, as HTTP servers do it: the peer may still be sending (the rest of a
  // frame refused on its header, say). Closing outright would make the peer's kernel answer
  // those bytes with a reset, which discards the refusal before the peer has read it; instead
  // the sending direction is shut (the peer reads the refusal, then the end of the stream) and
  // what still arrives is read and dropped until the peer closes, kLinger passes, or kLingerBytes
  // arrive, whichever is first. The slot is free at once.
  static constexpr auto kLinger = std::chrono::seconds(1);
  static constexpr uint64_t kLingerBytes = uint64_t{1} << 30;
  void linger_locked() {
    lingering_ = true;
    stream_->shutdown_send();
    give_slot_back();
    asio::post(shard_.io, [self = shared_from_this()] {
      // (Re-arming cancels a handshake deadline still pending; its handler ignores that.)
      self->handshake_timer_.expires_after(kLinger);
      self->handshake_timer_.async_wait(
          [weak = self->weak_from_this()](const asio::error_code& ec) {
            if (auto s = weak.lock(); s && !ec) s->stream_->shutdown();
          });
    });
    if (!reading_) discard_more();  // else the read under way continues it
  }
  void discard_more() {
    if (!discard_) discard_ = std::make_unique<std::array<std::byte, 4096>>();
    reading_ = true;
    stream_->async_read_some(
        asio::buffer(*discard_), [self = shared_from_this()](const asio::error_code& ec, size_t n) {
          self->reading_ = false;
          self->lingered_ += n;
          if (ec || self->srv_.stopping || self->lingered_ >= kLingerBytes) {
            self->stream_->shutdown();
            asio::post(self->shard_.io, [self] { self->handshake_timer_.cancel(); });
            return;
          }
          self->discard_more();
        });
  }
  void give_slot_back() {
    if (has_slot_.exchange(false)) srv_.slots_taken.fetch_sub(1);
  }
  void close() {
    std::lock_guard<std::mutex> lock(write_mu_);
    shutdown_locked();
  }

  // ---- reading: one read outstanding at a time, completed on any pool thread ----
  void read_more() {
    if (reading_ || closed_ || srv_.stopping) return;
    if (read_directly()) return;
    if (reading_ || closed_ || srv_.stopping) return;  // (what it processed may have changed these)
    reading_ = true;
    auto self = shared_from_this();
    stream_->async_read_some(reader_.space(), [self](const asio::error_code& ec, size_t n) {
      self->reading_ = false;
      if (self->lingering_ && !ec) return self->discard_more();
      if (ec) return self->close();
      self->srv_.bytes_in.fetch_add(n, std::memory_order_relaxed);
      self->reader_.received(n);
      self->process();
    });
  }

  // After a reply the next request of a client that asks again at once is usually microseconds
  // away. With a spin (--spin-us) and no other connection on this shard, the thread polls this
  // stream itself (try_read) for up to the spin, and processes what comes on this thread,
  // instead of going back through the reactor: that was an epoll_wait and a handler dispatch per
  // request. It does not yield between looks, as the client's own spin does not (TW_SPIN_US): a
  // yield costs 1-3 us on the build VM and, one per look or one per 5 us, took back most of the
  // gain. It holds the thread for at most one fairness slice (kSlice), so the shard's other work
  // (a new connection, a timer, an outcome posted to it) waits no longer than a long batch would
  // make it. Returns whether it took care of reading (false: start an asynchronous read).
  bool read_directly() {
    if (in_direct_read_) {  // process() below asked for more: the loop goes on
      direct_again_ = true;
      return true;
    }
    const auto spin = std::chrono::microseconds(srv_.opts.spin_us);
    if (spin.count() <= 0 || !welcomed_ || peer_ || lingering_ ||
        shard_.sessions.load(std::memory_order_relaxed) != 1) {
      return false;
    }
    server::SpinBudget::Hold hold(*srv_.spin_budget);
    if (!hold) return false;  // as many threads spin as may: this one sleeps
    using Clock = std::chrono::steady_clock;
    in_direct_read_ = true;
    const auto slice_end = Clock::now() + kSlice;
    for (;;) {
      direct_again_ = false;
      net::IoResult r;
      r.kind = net::IoResult::kWouldBlock;
      auto now = Clock::now();
      for (const auto until = std::min(now + spin, slice_end); now < until; now = Clock::now()) {
        r = stream_->try_read(reader_.space());
        if (r.kind != net::IoResult::kWouldBlock) break;
      }
      if (r.kind != net::IoResult::kDone) break;  // nothing came, or the stream ended: async
      srv_.bytes_in.fetch_add(r.bytes, std::memory_order_relaxed);
      reader_.received(r.bytes);
      process();
      // No further read wanted (the queue paused reading, a large frame's read or a close
      // took over), or the slice is spent.
      if (!direct_again_ || reading_ || closed_ || lingering_ || srv_.stopping ||
          Clock::now() >= slice_end) {
        in_direct_read_ = false;
        return !direct_again_;
      }
    }
    in_direct_read_ = false;
    return false;
  }

  // Takes every complete frame out of what was received and queues the batches, runs the queue
  // on this thread unless another thread runs it, then starts the next read. Reading after
  // running costs nothing in overlap (the shard's one thread would run the read's completion
  // only after the batch anyway) and lets the reply go out before the receive that would only
  // find the stream empty.
  void process(bool run_here = false) {
    bool need_read = false;
    for (;;) {
      if (closing_ || closed_ || srv_.stopping) break;
      // Before the handshake only a hello is expected: a stranger cannot make the server
      // allocate more than this.
      constexpr uint64_t kMaxHelloBytes = 64 * 1024;
      uint64_t limit = srv_.opts.max_frame_bytes;
      const char* which = " bytes (tensorwire-server --max-frame)";
      if (!welcomed_ && limit > kMaxHelloBytes) {
        limit = kMaxHelloBytes;
        which = " bytes for a frame before the handshake";
      }
      Buffer frame;
      net::FrameReader::Next next = reader_.next(std::min(limit, kStagingBytes), &frame);
      if (next == net::FrameReader::Next::kTooLarge && reader_.announced() <= limit) {
        // Larger than the staging buffer, so next() would allocate it: its bytes are reserved
        // in the server's budget first (--max-memory counts frames being received), and a
        // frame that does not fit fails this session only.
        if (Status st = reserve_frame(); !st.ok()) {
          send_error(st);
          close_when_flushed();
          break;
        }
        next = reader_.next(limit, &frame);
      }
      if (next == net::FrameReader::Next::kNeedBytes) {
        need_read = true;
        break;
      }
      if (next == net::FrameReader::Next::kTooLarge) {
        // The payload cannot be read safely: answer and close this session only.
        srv_.totals.metrics.error(server::ErrorKind::kFrameTooLarge);
        send_error(resource_exhausted("frame of " + std::to_string(reader_.announced()) +
                                      " bytes exceeds the server's limit of " +
                                      std::to_string(limit) + which));
        close_when_flushed();
        break;
      }
      if (next == net::FrameReader::Next::kLarge) {
        reading_ = true;
        auto self = shared_from_this();
        stream_->async_read(reader_.rest(frame), [self, frame](const asio::error_code& ec, size_t n) {
          self->reading_ = false;
          if (self->lingering_ && !ec) return self->discard_more();
          if (ec) return self->close();
          self->srv_.bytes_in.fetch_add(n, std::memory_order_relaxed);
          self->srv_.frames_in.fetch_add(1, std::memory_order_relaxed);
          Queued q = self->on_frame(frame);
          if (q.paused) {
            if (q.run_here) self->drain();  // resumes reading once the queue drains
            return;
          }
          self->process(q.run_here);
        });
        break;
      }
      srv_.frames_in.fetch_add(1, std::memory_order_relaxed);
      Queued q = on_frame(std::move(frame));
      run_here |= q.run_here;
      // Paused: drain() resumes reading (on its thread, so this one must not touch reader_).
      if (q.paused) break;
    }
    if (run_here) drain();
    if (need_read) read_more();  // (drain may have started it already, resuming)
  }

  struct Queued {
    bool run_here = false;  // this thread is to run the session's queue
    bool paused = false;    // the queue is full: reading stops until drain() resumes it
  };

  // The announced frame's bytes (as the pool allocates them) reserved in the server's budget,
  // into frame_reserved_ until on_frame() hands them to the batch made of the frame
  // (server::Batch::reserved). Nothing to reserve before the handshake (a hello is small) or
  // on a peer connection (fetch requests).
  Status reserve_frame() {
    if (!session_ || peer_) return Status::OK();
    const uint64_t bytes = BufferPool::size_class(static_cast<size_t>(reader_.announced()));
    TW_RETURN_NOT_OK(session_->reserve(
        bytes, "a frame of " + server::human_bytes(reader_.announced()) + " being received"));
    frame_reserved_ = bytes;
    return Status::OK();
  }

  // Handles one frame: a hello, or a batch to queue.
  Queued on_frame(Buffer frame) {
    if (frame.size() == 0) {
      send_error(data_loss("empty frame"));
      return {};
    }
    if (!welcomed_) {
      on_hello(frame);
      return {};
    }
    if (peer_) {
      on_fetch(frame);
      return {};
    }
    server::Batch batch;
    if (version_ >= 5 &&
        frame.as<const uint8_t>()[0] == static_cast<uint8_t>(proto::ClientMsg::kAttachSegment)) {
      attach_segment(frame, batch);
    } else {
      batch.decoder = proto::BatchDecoder(frame);  // run() decodes it as it goes
      if (!batch.decoder.more()) batch.decoded = batch.decoder.status();
    }
    batch.frame = std::move(frame);
    batch.reserved = std::exchange(frame_reserved_, 0);
    std::lock_guard<std::mutex> lock(exec_mu_);
    exec_q_.push_back(std::move(batch));
    srv_.batches_in_flight.fetch_add(1);
    // Backpressure: past the depth, stop reading until the queue drains below it.
    Queued q;
    if (++queued_ >= srv_.opts.session_queue_depth) q.paused = read_paused_ = true;
    if (!executing_) q.run_here = executing_ = true;
    return q;
  }

  // An AttachSegment (protocol 5): its descriptor came with the frame's bytes, so it is held by
  // now; the segment is adopted here (checked and mapped, net/shm.h) and attached in order with
  // the session's tasks. A frame that does not decode is a malformed batch, as any other.
  void attach_segment(const Buffer& frame, server::Batch& batch) {
    auto m = proto::decode_attach_segment(frame);
    const int fd = stream_->take_fd();
    if (!m.ok()) {
      if (fd >= 0) ::close(fd);
      batch.decoded = m.status();
      return;
    }
    server::Batch::Attach a;
    a.msg = *m;
    auto seg = net::SharedSegment::adopt(
        fd, static_cast<size_t>(std::min<uint64_t>(m->capacity, uint64_t{1} << 62)));
    if (seg.ok()) {
      a.segment = std::move(seg).value();
    } else {
      a.adopted = seg.status();
    }
    batch.attach = std::move(a);
  }

  // Runs queued batches on this thread for one time slice, then lets the shard's other
  // sessions run before it goes on: a long batch is left where it stopped (the session
  // resumes it; ops stay in order) and the rest is queued behind whatever else is ready. A
  // batch that finishes within the slice costs no hand-off, so a small request's latency is
  // unchanged; a request of another session waits for about one op of the busy one.
  void drain() {
    const auto until = server::Session::Clock::now() + kSlice;
    for (bool first = true;; first = false) {
      server::Batch* batch;
      {
        std::lock_guard<std::mutex> lock(exec_mu_);
        if (exec_q_.empty()) {
          executing_ = false;
          return;
        }
        batch = &exec_q_.front();  // only this thread pops it; other threads push at the back
      }
      // More is queued and the slice is spent: the shard's other sessions first.
      if (!first && server::Session::Clock::now() >= until) return yield();
      if (batch->tasks.capacity() == 0) batch->tasks = std::move(spare_tasks_);  // its capacity
      if (!session_->run(*batch, *this, until)) {
        if (session_->parked()) return;  // begin_import's outcome resumes it
        return yield();
      }
      spare_tasks_ = std::move(batch->tasks);  // cleared Tasks, for the next batch to decode into
      bool resume = false;
      {
        std::lock_guard<std::mutex> lock(exec_mu_);
        exec_q_.pop_front();
        --queued_;
        if (read_paused_ && queued_ < srv_.opts.session_queue_depth) {
          read_paused_ = false;
          resume = true;
        }
      }
      srv_.batches_in_flight.fetch_sub(1);
      if (resume) process();
    }
  }

  // Continues drain() after the shard's loop has looked for ready streams once more, so that
  // another session's request received meanwhile runs first. One post would not do: the loop
  // polls its streams once per pass over its queue, and what that poll finds is queued behind
  // a continuation posted before it; the hop makes the continuation the last of the queue
  // after the poll. The queue stays marked executing, so no other thread starts it.
  void yield() {
    asio::post(shard_.io, [self = shared_from_this()] {
      asio::post(self->shard_.io, [self] { self->drain(); });
    });
  }

  void refuse(proto::RefuseReason reason, const std::string& message) {
    srv_.totals.metrics.error(server::error_kind_of(reason));
    proto::OutFrame f;
    proto::encode_refuse({reason, message}, f);
    send(std::move(f));
    close_when_flushed();
  }

  void on_hello(const Buffer& frame) {
    auto hello = proto::decode_hello(frame);
    if (!hello.ok()) return refuse(proto::RefuseReason::kMalformed, hello.status().message());
    const proto::Hello& h = *hello;
    uint16_t lo = std::max(h.min_version, proto::kMinProtocolVersion);
    uint16_t hi = std::min(h.max_version, proto::kProtocolVersion);
    if (lo > hi) {
      return refuse(proto::RefuseReason::kBadVersion,
                    "client speaks protocol versions " + std::to_string(h.min_version) + ".." +
                        std::to_string(h.max_version) + ", this server " +
                        std::to_string(proto::kMinProtocolVersion) + ".." +
                        std::to_string(proto::kProtocolVersion) + "; upgrade the older side");
    }
    if (!srv_.opts.credential.empty() && !same_secret(h.credential, srv_.opts.credential)) {
      return refuse(proto::RefuseReason::kUnauthorized, "bad or missing credential");
    }
    proto::Welcome w;
    w.version = hi;
    w.server_id = srv_.server_id;
    w.devices = srv_.device_infos();
    w.limits = {srv_.opts.max_frame_bytes, srv_.opts.session_memory_bytes, srv_.opts.max_sessions,
                srv_.opts.session_queue_depth};
    w.device_index = h.device_index;
    if (h.device_index == proto::kEnumerateOnly) {
      proto::OutFrame f;
      proto::encode_welcome(w, f);
      send(std::move(f));
      close_when_flushed();
      return;
    }
    if (h.device_index == proto::kPeerOnly && hi >= 3) return welcome_peer(w);
    if (h.device_index >= static_cast<uint32_t>(srv_.opts.devices)) {
      return refuse(proto::RefuseReason::kBadDeviceIndex,
                    "device index " + std::to_string(h.device_index) + " out of range: server " +
                        srv_.server_id + " hosts " + std::to_string(srv_.opts.devices) +
                        " device(s) (0.." + std::to_string(srv_.opts.devices - 1) + ")");
    }
    if (!has_slot_) {
      return refuse(proto::RefuseReason::kServerBusy,
                    "server has reached its limit of " + std::to_string(srv_.opts.max_sessions) +
                        " sessions (tensorwire-server --max-sessions); try again later");
    }
    {
      std::lock_guard<std::mutex> lock(srv_.sessions_mu);
      id_ = srv_.next_session.fetch_add(1);
      srv_.sessions[id_] = weak_from_this();
    }
    auto session =
        server::Session::open(id_, srv_.backends[h.device_index], srv_.opts.session_memory_bytes,
                              srv_.totals, srv_.opts.max_graph_ops);
    if (!session.ok()) return refuse(proto::RefuseReason::kCannotHost, session.status().message());
    {
      std::lock_guard<std::mutex> lock(srv_.sessions_mu);  // snapshot() reads held() under it
      session_ = std::move(session).value();
      device_ = h.device_index;
    }
    srv_.sessions_opened.fetch_add(1);
    welcomed_ = true;
    version_ = hi;
    handshake_timer_.cancel();
    w.session_id = id_;
    proto::OutFrame f;
    proto::encode_welcome(w, f);
    send(std::move(f));
  }

  // A peer connection (another server pulling tensors, transfer.h): no session, only fetches.
  void welcome_peer(proto::Welcome& w) {
    if (!has_slot_) {
      return refuse(proto::RefuseReason::kServerBusy,
                    "server has reached its limit of " + std::to_string(srv_.opts.max_sessions) +
                        " connections (tensorwire-server --max-sessions); try again later");
    }
    peer_ = true;
    welcomed_ = true;
    handshake_timer_.cancel();
    proto::OutFrame f;
    proto::encode_welcome(w, f);
    send(std::move(f));
  }

  // A peer's Fetch (a pull, transfer.h) or Store (a collective's rendezvous, collective.h).
  void on_fetch(const Buffer& frame) {
    proto::OutFrame f;
    Result<proto::ClientMsg> kind = proto::peek_client_msg(frame);
    if (kind.ok() && *kind == proto::ClientMsg::kStore) {
      server::serve_store(srv_.store, frame, f);
    } else {
      server::serve_fetch(srv_.totals.capabilities, srv_.totals.metrics, frame, f);
    }
    send(std::move(f));
  }

  // The part runs on the server's Collectives; its outcome comes back to this shard's thread, as
  // an import's does.
  Status begin_collective(const proto::CollectiveTask& t, TensorData input) override {
    srv_.collectives->start(id_, t.collective, std::move(input),
                            [self = shared_from_this()](Result<TensorData> got) {
                              asio::post(self->shard_.io, [self, got = std::move(got)]() mutable {
                                self->session_->finish_collective(std::move(got));
                                self->drain();
                              });
                            });
    return Status::OK();
  }

  // server::SessionOutput, called by session_->run() on the draining thread.
  void reply(proto::OutFrame f) override { send(std::move(f)); }
  // The pull runs on the server's Puller; its outcome comes back to this shard's thread, which
  // lands the tensor and resumes the session's queue (drain() left it marked executing).
  Status begin_import(const proto::ImportTask& t) override {
    server::PullRequest r{t.source, t.meta, srv_.opts.credential, srv_.self_name()};
    srv_.puller->start(std::move(r), [self = shared_from_this()](Result<TensorData> got) {
      asio::post(self->shard_.io, [self, got = std::move(got)]() mutable {
        self->session_->finish_import(std::move(got));
        self->drain();
      });
    });
    return Status::OK();
  }
  proto::ServerStats server_stats(uint64_t asking) override { return srv_.snapshot(asking); }

  // ---- writing: from any thread, under write_mu_ ----
  void send_error(const Status& s) {
    proto::OutFrame f;
    proto::encode_session_error(s, f);
    send(std::move(f));
  }

  void send(proto::OutFrame f) {
    std::lock_guard<std::mutex> lock(write_mu_);
    if (closed_) return;
    srv_.frames_out.fetch_add(1, std::memory_order_relaxed);
    srv_.bytes_out.fetch_add(f.payload_size() + 4, std::memory_order_relaxed);
    writer_.push(std::move(f));
    if (!writer_.writing()) pump_locked();
  }

  void pump_locked() {
    switch (writer_.pump(*stream_)) {
      case net::FrameWriter::Step::kIdle:
        if (close_after_write_) shutdown_locked();
        return;
      case net::FrameWriter::Step::kError: return shutdown_locked();
      case net::FrameWriter::Step::kAsync: {
        writer_.set_writing(true);
        auto self = shared_from_this();
        stream_->async_write(writer_.pending(), [self](const asio::error_code& ec, size_t) {
          std::lock_guard<std::mutex> lock(self->write_mu_);
          if (ec) {
            self->writer_.set_writing(false);
            return self->shutdown_locked();
          }
          self->writer_.async_done();
          self->pump_locked();
        });
        return;
      }
    }
  }

  Server::Impl& srv_;
  Server::Impl::Shard& shard_;
  std::unique_ptr<net::Stream> stream_;
  uint64_t id_ = 0;
  uint32_t device_ = 0;
  uint16_t version_ = 0;                      // the protocol version the handshake settled on
  std::unique_ptr<server::Session> session_;  // set by the handshake; run by the draining thread
  std::atomic<bool> closed_{false};
  std::atomic<bool> closing_{false};  // to close once the replies queued are out
  std::atomic<bool> has_slot_{false};              // holds one of srv_.slots_taken
  asio::steady_timer handshake_timer_{shard_.io};  // drops a peer that never completes Hello
  // reading (one read at a time)
  // Small: an idle session holds it, and larger frames are read straight into their own buffer.
  static constexpr uint64_t kStagingBytes = 8 * 1024;
  net::FrameReader reader_{kStagingBytes};
  uint64_t frame_reserved_ = 0;  // reserve_frame() for the frame being read, until on_frame()
  bool reading_ = false;  // a receive is outstanding
  // read_directly() is polling the stream, and process() asked it for more.
  bool in_direct_read_ = false, direct_again_ = false;
  // lingering close (linger_locked)
  bool linger_ = false;                 // close_when_flushed() lingers
  std::atomic<bool> lingering_{false};  // the sending side is shut; what arrives is dropped
  uint64_t lingered_ = 0;               // bytes dropped so far
  std::unique_ptr<std::array<std::byte, 4096>> discard_;  // where they go (only once lingering)
  bool welcomed_ = false;
  bool peer_ = false;  // another server's connection: fetches, no session
  // execution queue
  std::mutex exec_mu_;
  // A session's turn on its shard: long beside what a yield costs (two posts, a few
  // microseconds), so a session streaming small ops loses nothing measurable; short beside a
  // heavy op, so another session waits little more than the op under way.
  static constexpr auto kSlice = std::chrono::milliseconds(1);
  std::deque<server::Batch> exec_q_;
  std::vector<proto::Task> spare_tasks_;  // the last batch's task vector, kept for its capacity
  bool executing_ = false;
  bool read_paused_ = false;
  // Batches received and not finished; atomic only so that a metrics scrape can read it.
  std::atomic<uint32_t> queued_{0};
  // writing
  std::mutex write_mu_;
  net::FrameWriter writer_;
  bool close_after_write_ = false;
};

}  // namespace

proto::ServerStats Server::Impl::snapshot(uint64_t asking) {
  proto::ServerStats s;
  // Released after the lock: a connection whose last other reference went meanwhile is
  // destroyed here, and its destructor takes sessions_mu.
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mu);
    s.sessions = static_cast<uint32_t>(sessions.size());
    for (auto& [id, w] : sessions) {
      if (auto c = w.lock()) {
        s.per_session_bytes.emplace_back(id, c->held());
        if (id == asking) s.session_bytes_held = c->held();
        live.push_back(std::move(c));
      }
    }
  }
  s.bytes_held = static_cast<uint64_t>(std::max<int64_t>(0, totals.bytes_held.load()));
  s.ops_executed = totals.ops_executed.load();
  s.frames_in = frames_in.load();
  s.frames_out = frames_out.load();
  s.bytes_in = bytes_in.load();
  s.bytes_out = bytes_out.load();
  s.sessions_opened = sessions_opened.load();
  return s;
}

server::ServerView Server::Impl::view() {
  server::ServerView v;
  v.stats = snapshot(0);
  v.devices = device_infos();
  v.batches_queued = batches_in_flight.load(std::memory_order_relaxed);
  v.spinning_threads = spin_budget->spinning();
  v.spin_threads_max = spin_budget->max();
  v.spin_refused = spin_budget->refused();
  std::vector<std::shared_ptr<Connection>> live;  // released after the lock (as in snapshot())
  std::lock_guard<std::mutex> lock(sessions_mu);
  for (auto& [id, w] : sessions) {
    if (auto c = w.lock()) {
      v.sessions.push_back(c->view());
      live.push_back(std::move(c));
    }
  }
  return v;
}

void Server::Impl::accept(net::Listener& l) {
  Shard& shard = least_loaded();
  l.async_accept(shard.io, [this, &l, &shard](const asio::error_code& ec, std::unique_ptr<net::Stream> stream) {
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping) return;
      // Out of descriptors and similar: keep serving existing sessions, retry shortly.
      auto t = std::make_shared<asio::steady_timer>(io(), std::chrono::milliseconds(50));
      t->async_wait([this, &l, t](asio::error_code) { accept(l); });
      return;
    }
    std::make_shared<Connection>(*this, shard, std::move(stream))->start();
    accept(l);
  });
}

void Server::Impl::do_stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    if (stopped || stopping.exchange(true)) return;
  }
  // 1. Stop accepting and reading (the flag stops each session's read loop). Closing a listener
  //    removes its Unix socket's file. The metrics endpoint closes too.
  if (metrics) metrics->stop();
  // Pulls under way end now (their imports fail and the sessions go on), not at their timeout.
  if (puller) puller->abort();
  if (collectives) collectives->stop();
  asio::post(io(), [this] {
    for (auto& l : listeners) l->close();
  });
  // 2. Let queued work finish (a read under way when the flag was set may still deliver one
  //    more batch per session; it runs too). The pool keeps running: see step 4.
  wait_for_batches();
  // 3. Flush pending replies and close every session.
  asio::post(io(), [this] {
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard<std::mutex> lock(sessions_mu);
      for (auto& [id, w] : sessions)
        if (auto c = w.lock()) live.push_back(c);
    }
    for (auto& c : live) c->close_when_flushed();
  });
  works.clear();
  // The loops end by themselves once every stream is closed; a client that never reads its
  // replies gets 2 seconds before the loops are stopped regardless.
  auto all_stopped = [this] {
    for (auto& sh : shards)
      if (!sh->io.stopped()) return false;
    return true;
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (!all_stopped() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (auto& sh : shards) sh->io.stop();
  // 4. The pool's threads end (a batch being run finishes first). Handlers the loop never ran
  //    are destroyed with the shards, before the session table (see the members' order).
  for (std::thread& t : threads) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
  {
    std::lock_guard<std::mutex> lock(stop_mu);
    stopped = true;
  }
  stop_cv.notify_all();
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() { stop(); }

std::vector<std::string> Server::urls() const {
  std::vector<std::string> v;
  for (auto& l : impl_->listeners) v.push_back(l->url().str());
  return v;
}

std::string Server::tls_fingerprint() const {
  for (auto& l : impl_->listeners)
    if (!l->tls_fingerprint().empty()) return l->tls_fingerprint();
  return {};
}

bool Server::tls_self_signed() const { return impl_->tls_self_signed; }

std::string Server::limits_summary() const {
  const ServerOptions& o = impl_->opts;
  std::ostringstream os;
  os << "devices=" << o.devices << " (" << o.backend << ") workers=" << impl_->worker_count
     << " max-sessions=" << o.max_sessions << " max-frame=" << human_bytes(o.max_frame_bytes)
     << " session-memory=" << human_bytes(o.session_memory_bytes)
     << " max-memory=" << human_bytes(impl_->totals.memory.limit())
     << " queue-depth=" << o.session_queue_depth << " max-graph-ops=" << o.max_graph_ops
     << " handshake-timeout=" << o.handshake_timeout.count() / 1000.0 << "s";
  return os.str();
}

ServerStatsSnapshot Server::stats() const {
  proto::ServerStats s = impl_->snapshot(0);
  return {s.sessions, s.sessions_opened, s.bytes_held, s.ops_executed, s.frames_in, s.frames_out,
          s.bytes_in, s.bytes_out};
}

std::string Server::metrics_url() const { return impl_->metrics ? impl_->metrics->url() : ""; }

void Server::stop() { impl_->do_stop(); }

void Server::wait() {
  std::unique_lock<std::mutex> lock(impl_->stop_mu);
  impl_->stop_cv.wait(lock, [&] { return impl_->stopped; });
}

namespace {

// Where Gloo listens for the other participants of a collective: the option, else the host of
// the first tcp:// or tls:// listener unless that is a wildcard, else loopback.
std::string collective_host(const ServerOptions& opts,
                            const std::vector<std::unique_ptr<net::Listener>>& listeners) {
  if (!opts.collective_host.empty()) return opts.collective_host;
  for (const auto& l : listeners) {
    const net::Url& u = l->url();
    if (u.scheme == net::Url::Scheme::kUnix) continue;
    if (u.host == "0.0.0.0" || u.host == "::" || u.host == "[::]" || u.host.empty()) break;
    return u.host;
  }
  return "127.0.0.1";
}

// How long a shard's thread stays idle before it hands back the OpenMP threads of its kernels.
constexpr auto kReleaseThreadsAfter = std::chrono::milliseconds(20);

// A shard's thread. With a spin, once it has run a handler it keeps looking for more without
// sleeping (io_context::poll: ready handlers, and the sockets through a non-blocking
// epoll_wait) until `spin` has passed with nothing to do, then blocks again. Spinning only ever
// follows work, so an idle server costs no CPU, and each look yields the CPU to any other
// runnable thread first (sched_yield returns at once when there is none), so a loaded machine
// loses little to it. A spin that found nothing is not tried again until work arrives within
// `spin` of the last: a client that thinks for long between requests (a training loop building
// its next batch) is not spun for, one that asks again at once is.
void run_shard(asio::io_context& io, std::chrono::microseconds spin, server::SpinBudget& budget) {
  using Clock = std::chrono::steady_clock;
  bool spinning = true;
  bool holds_threads = false;  // ran work since it last handed its OpenMP threads back
  auto idle_since = Clock::now();
  for (;;) {
    // Idle for kReleaseThreadsAfter after work: hand back the threads its kernels started
    // (tw::release_idle_threads), then sleep until work comes.
    const size_t ran = holds_threads ? io.run_one_for(kReleaseThreadsAfter) : io.run_one();
    if (ran == 0) {
      if (io.stopped()) return;
      release_idle_threads();
      holds_threads = false;
      continue;
    }
    holds_threads = true;
    if (spin.count() <= 0) continue;
    auto now = Clock::now();
    if (!spinning && now - idle_since < spin) spinning = true;  // a spin would have caught it
    if (spinning) {
      spinning = false;
      server::SpinBudget::Hold hold(budget);  // none left: no spin (sleeps in the reactor)
      for (auto until = now + spin; hold && !io.stopped() && (now = Clock::now()) < until;) {
        if (io.poll() > 0) {
          spinning = true;
          until = Clock::now() + spin;
        } else {
          std::this_thread::yield();
        }
      }
    }
    idle_since = Clock::now();
  }
}

// The identity of the tls:// listeners: the PEM files given, else a self-signed pair made now
// (`generated` says so) when some address is tls://.
Result<net::TlsOptions> server_tls(const ServerOptions& opts, bool& generated) {
  net::TlsOptions tls;
  tls.cert_file = opts.tls_cert_file;
  tls.key_file = opts.tls_key_file;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return invalid_argument("a TLS certificate and its key go together (--tls-cert and --tls-key)");
  }
  bool any_tls = std::any_of(opts.listen.begin(), opts.listen.end(),
                             [](const std::string& u) { return u.rfind("tls://", 0) == 0; });
  if (!tls.cert_file.empty() && !any_tls) {
    return invalid_argument("a TLS certificate was given, but no address is tls://");
  }
  if (any_tls && tls.cert_file.empty()) {
    TW_ASSIGN_OR_RETURN(net::TlsIdentity id, net::generate_self_signed("tensorwire-server"));
    tls.cert_pem = std::move(id.cert_pem);
    tls.key_pem = std::move(id.key_pem);
    generated = true;
  }
  return tls;
}

Result<std::unique_ptr<Server>> start_server(ServerOptions opts) {
  if (opts.devices < 1) return invalid_argument("a server hosts at least 1 device, got " + std::to_string(opts.devices));
  if (opts.listen.empty()) return invalid_argument("no address to listen on");
  if (opts.session_queue_depth < 1) return invalid_argument("session queue depth must be >= 1");
  if (opts.max_frame_bytes < 1024) return invalid_argument("max frame size must be >= 1024 bytes");
  if (opts.handshake_timeout.count() <= 0)
    return invalid_argument("the handshake timeout must be > 0");
  TW_ASSIGN_OR_RETURN(std::vector<std::string> backends, device_backends(opts));
  opts.devices = static_cast<int>(backends.size());
  auto impl = std::make_unique<Server::Impl>();
  impl->opts = opts;
  impl->backends = std::move(backends);
  impl->totals.memory.set_limit(opts.max_memory_bytes ? opts.max_memory_bytes
                                                      : server::default_max_memory());
  impl->totals.memory.set_pool(&BufferPool::global());
  impl->totals.memory.set_pinned(
      [caps = &impl->totals.capabilities] { return caps->pinned_bytes(); });
  std::random_device rd;
  std::ostringstream id;
  id << std::hex << (uint64_t{rd()} << 32 | rd());
  impl->server_id = id.str();
  impl->totals.capabilities.configure(impl->server_id, opts.capability_ttl);
  impl->worker_count = opts.worker_threads > 0 ? opts.worker_threads
                                               : std::max(1u, std::thread::hardware_concurrency());
  impl->spin_budget = std::make_unique<server::SpinBudget>(
      opts.spin_threads > 0 ? static_cast<int>(std::min<uint32_t>(opts.spin_threads, 4096))
                            : static_cast<int>(std::thread::hardware_concurrency()) - 1);
  try {
    for (int i = 0; i < impl->worker_count; ++i) impl->shards.push_back(std::make_unique<Server::Impl::Shard>());
    TW_ASSIGN_OR_RETURN(net::TlsOptions tls, server_tls(opts, impl->tls_self_signed));
    for (const std::string& text : opts.listen) {
      TW_ASSIGN_OR_RETURN(net::Url url, net::parse_url(text));
      bool has_credential = !opts.credential.empty();
      TW_RETURN_NOT_OK(net::check_exposure(url, has_credential, opts.insecure));
      TW_ASSIGN_OR_RETURN(std::unique_ptr<net::Listener> l, net::listen(url, impl->io(), tls));
      if (!net::check_exposure(url, has_credential, false).ok()) {
        std::fprintf(
            stderr,
            "\n*** INSECURE (--insecure): listening on %s, which other hosts can reach, "
            "without %s. Anyone on the network can %s. ***\n\n",
            l->url().str().c_str(), url.scheme == net::Url::Scheme::kTls ? "a credential" : "TLS",
            has_credential ? "read the traffic, the credential included, and then run ops here"
                           : "run ops on this machine and read what it computes");
      }
      impl->listeners.push_back(std::move(l));
    }
    if (!opts.metrics.empty()) {
      Server::Impl* srv = impl.get();
      TW_ASSIGN_OR_RETURN(impl->metrics, server::MetricsEndpoint::start(opts.metrics, srv->totals.metrics,
                                                                      [srv] { return srv->view(); }));
      impl->totals.metrics.enable_timing();
    }
    impl->puller =
        std::make_unique<server::Puller>(server::Puller::kThreads, opts.transfer_timeout);
    impl->collectives = std::make_unique<server::Collectives>(
        opts.credential, collective_host(opts, impl->listeners), impl->self_name());
    for (auto& l : impl->listeners) impl->accept(*l);
    for (auto& sh : impl->shards) impl->works.push_back(asio::make_work_guard(sh->io));
    for (auto& sh : impl->shards) {
      asio::io_context* io = &sh->io;
      const auto spin = std::chrono::microseconds(opts.spin_us);
      server::SpinBudget* budget = impl->spin_budget.get();
      impl->threads.emplace_back([io, spin, budget] { run_shard(*io, spin, *budget); });
    }
  } catch (const std::system_error& e) {
    return unavailable(std::string("cannot start the server: ") + e.what());
  }
  return std::make_unique<Server>(std::move(impl));
}

std::unique_ptr<Server> unwrap(Result<std::unique_ptr<Server>> r) {
  if (!r.ok()) throw Error(r.status().message());
  return std::move(r).value();
}

}  // namespace

std::unique_ptr<Server> serve(ServerOptions options) { return unwrap(start_server(std::move(options))); }

}  // namespace tw
