// A connection's life apart from its handshake (handshake.cc): closing it (lingering when the
// peer may still be sending), reading frames (asynchronously, or polled directly after a reply),
// queueing the batches and running them on the reading thread in fair slices, and writing the
// replies from whichever thread produces them.
#include "server/connection.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "core/buffer.h"
#include "core/cancel.h"
#include "net/shm.h"
#include "protocol/compress.h"

namespace tw::server {

namespace proto = protocol;

Connection::Connection(Server::Impl& srv, Server::Impl::Shard& shard,
                       std::unique_ptr<net::Stream> stream)
    : srv_(srv), shard_(shard), stream_(std::move(stream)) {
  shard_.sessions.fetch_add(1);
}

Connection::~Connection() {
  // Last reference gone (stream shut down, no task in flight): free the session's tensors,
  // unless it is kept for its client to resume (resume_connection.cc).
  if (id_) {
    std::lock_guard<std::mutex> lock(srv_.sessions_mu);
    srv_.sessions.erase(id_);
  }
  // The batches not run go with a session parked for resume (its next connection runs them),
  // or are dropped with it.
  srv_.batches_in_flight.fetch_sub(static_cast<int64_t>(exec_q_.size()));
  if (session_ && !exec_q_.empty()) session_->stash_queue(std::move(exec_q_));
  if (!park_session()) {
    if (session_ && srv_.collectives) srv_.collectives->forget(id_);
    session_.reset();
  }
  give_slot_back();
  shard_.sessions.fetch_sub(1);
}

void Connection::start() {
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

// Closes the session once its queued replies are out, lingering (below) unless the server is
// stopping.
void Connection::close_when_flushed() {
  closing_ = true;
  std::lock_guard<std::mutex> lock(write_mu_);
  // (Under the lock: shutdown_locked() reads it, and a read's failure may run that on another
  // shard's thread at the same time; make tsan found the race.)
  linger_ = !srv_.stopping;
  if (writer_.idle()) {
    shutdown_locked();
  } else {
    close_after_write_ = true;
  }
}

// ---- closing ----

// Ends the session: both directions of the stream are shut down, so the pending read ends and
// no more writes start; the stream itself is released with the last reference. Safe while
// other threads have operations on the stream, which close() would not be.
void Connection::shutdown_locked() {
  if (lingering_ && srv_.stopping) return stream_->shutdown();  // ends a lingering close now
  if (closed_.exchange(true)) return;
  // A session that will not be resumed ends: its long work under way is abandoned.
  if (!(resume_ && srv_.resume && resume_->resumable())) cancel_.store(true);
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
void Connection::linger_locked() {
  lingering_ = true;
  stream_->shutdown_send();
  give_slot_back();
  asio::post(shard_.io, [self = shared_from_this()] {
    // (Re-arming cancels a handshake deadline still pending; its handler ignores that.)
    self->handshake_timer_.expires_after(kLinger);
    self->handshake_timer_.async_wait([weak = self->weak_from_this()](const asio::error_code& ec) {
      if (auto s = weak.lock(); s && !ec) s->stream_->shutdown();
    });
  });
  if (!reading_) discard_more();  // else the read under way continues it
}

void Connection::discard_more() {
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

void Connection::give_slot_back() {
  if (has_slot_.exchange(false)) srv_.slots_taken.fetch_sub(1);
}

void Connection::close() {
  std::lock_guard<std::mutex> lock(write_mu_);
  shutdown_locked();
}

// ---- reading: one read outstanding at a time, completed on any pool thread ----

void Connection::read_more() {
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
bool Connection::read_directly() {
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
void Connection::process(bool run_here) {
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

// The announced frame's bytes (as the pool allocates them) reserved in the server's budget,
// into frame_reserved_ until on_frame() hands them to the batch made of the frame
// (server::Batch::reserved). Nothing to reserve before the handshake (a hello is small) or
// on a peer connection (fetch requests).
Status Connection::reserve_frame() {
  if (!session_ || peer_) return Status::OK();
  const uint64_t bytes = BufferPool::size_class(static_cast<size_t>(reader_.announced()));
  TW_RETURN_NOT_OK(session_->reserve(
      bytes, "a frame of " + server::human_bytes(reader_.announced()) + " being received"));
  frame_reserved_ = bytes;
  return Status::OK();
}

// Handles one frame: a hello, or a batch to queue.
Connection::Queued Connection::on_frame(Buffer frame) {
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
  if (version_ >= proto::kResumeSince && count_frame(frame)) return {};
  if (version_ >= proto::kCompressionSince &&
      proto::is_compressed(frame, proto::kCompressedClientType)) {
    Status st = decompress_frame(frame);
    if (!st.ok()) {
      send_error(st);
      close_when_flushed();
      return {};
    }
  }
  server::Batch batch;
  if (version_ >= proto::kSegmentsSince &&
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

// A Compressed frame (protocol 9) becomes the frame it holds, within --max-frame, its bytes
// reserved in the server's budget as a received frame's are (in place of the compressed ones').
Status Connection::decompress_frame(Buffer& frame) {
  const uint8_t* p = frame.as<const uint8_t>();
  uint64_t raw = 0;
  for (size_t i = 0; i < 8 && 1 + i < frame.size(); ++i) raw |= uint64_t{p[1 + i]} << (8 * i);
  if (raw <= srv_.opts.max_frame_bytes && raw > 0 && session_) {
    const uint64_t bytes = BufferPool::size_class(static_cast<size_t>(raw));
    TW_RETURN_NOT_OK(session_->reserve(
        bytes, "a compressed frame of " + server::human_bytes(raw) + " being decompressed"));
    session_->release(std::exchange(frame_reserved_, bytes));
  }
  TW_ASSIGN_OR_RETURN(frame, proto::decompress(frame, srv_.opts.max_frame_bytes));
  return Status::OK();
}

// An AttachSegment (protocol 5): its descriptor came with the frame's bytes, so it is held by
// now; the segment is adopted here (checked and mapped, net/shm.h) and attached in order with
// the session's tasks. A frame that does not decode is a malformed batch, as any other.
void Connection::attach_segment(const Buffer& frame, server::Batch& batch) {
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

// ---- the execution queue ----

// Runs queued batches on this thread for one time slice, then lets the shard's other
// sessions run before it goes on: a long batch is left where it stopped (the session
// resumes it; ops stay in order) and the rest is queued behind whatever else is ready. A
// batch that finishes within the slice costs no hand-off, so a small request's latency is
// unchanged; a request of another session waits for about one op of the busy one.
void Connection::drain() {
  const auto until = server::Session::Clock::now() + kSlice;
  for (bool first = true;; first = false) {
    server::Batch* batch;
    {
      std::lock_guard<std::mutex> lock(exec_mu_);
      // A closed connection runs nothing more: its session is parked for a resume with what is
      // queued, or ends and drops it (~Connection).
      if (exec_q_.empty() || (closed_ && !srv_.stopping)) {
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
void Connection::yield() {
  asio::post(shard_.io, [self = shared_from_this()] {
    asio::post(self->shard_.io, [self] { self->drain(); });
  });
}

// ---- SessionOutput ----

// The part runs on the server's Collectives; its outcome comes back to this shard's thread, as
// an import's does.
Status Connection::begin_collective(const proto::CollectiveTask& t, TensorData input) {
  srv_.collectives->start(id_, t.collective, std::move(input),
                          [self = shared_from_this()](Result<TensorData> got) {
                            asio::post(self->shard_.io, [self, got = std::move(got)]() mutable {
                              self->session_->finish_collective(std::move(got));
                              self->drain();
                            });
                          });
  return Status::OK();
}

void Connection::reply(proto::OutFrame f) { send(std::move(f)); }

// The pull runs on the server's Puller; its outcome comes back to this shard's thread, which
// lands the tensor and resumes the session's queue (drain() left it marked executing).
Status Connection::begin_import(const proto::ImportTask& t) {
  server::PullRequest r{t.source, t.meta, srv_.opts.credential, srv_.self_name()};
  srv_.puller->start(std::move(r), [self = shared_from_this()](Result<TensorData> got) {
    asio::post(self->shard_.io, [self, got = std::move(got)]() mutable {
      self->session_->finish_import(std::move(got));
      self->drain();
    });
  });
  return Status::OK();
}

proto::ServerStats Connection::server_stats(uint64_t asking) { return srv_.snapshot(asking); }

// On the server's LongWork threads, with this connection's cancellation flag; the session (parked
// meanwhile, so nothing else runs it) resumes on this shard's thread once the work has run.
void Connection::run_long(std::function<void()> work) {
  srv_.long_work->post([self = shared_from_this(), work = std::move(work)] {
    {
      const LongWorkScope long_work;
      const CancelScope scope(&self->cancel_);
      work();
    }
    asio::post(self->shard_.io, [self] {
      self->session_->finish_long();
      self->drain();
    });
  });
}

// ---- writing ----

void Connection::send_error(const Status& s) {
  proto::OutFrame f;
  proto::encode_session_error(s, f);
  send(std::move(f));
}

void Connection::send(proto::OutFrame f) {
  // Replies go compressed (when a frame's sample pays, protocol/compress.h) where the client asked
  // for it (protocol 10, CompressRepliesTask: whether the link is slow enough to pay is the
  // client's to know, by its TW_COMPRESS and its auto rule). The server's own TW_COMPRESS
  // overrides: 0 never, 1 to every client that can decode them (protocol 9 on).
  static const proto::CompressMode server_mode = proto::compress_mode_from_env();
  const bool compress =
      server_mode == proto::CompressMode::kAuto
          ? compress_replies_.load(std::memory_order_relaxed)
          : server_mode == proto::CompressMode::kMeasure && version_ >= proto::kCompressionSince;
  if (compress && f.payload_size() >= proto::kCompressMinBytes)
    f = proto::maybe_compress(std::move(f), proto::kCompressedServerType);
  std::lock_guard<std::mutex> lock(write_mu_);
  if (resume_) resume_->log(f);  // (also once closed: a resumed connection sends it)
  if (closed_) return;
  srv_.frames_out.fetch_add(1, std::memory_order_relaxed);
  srv_.bytes_out.fetch_add(f.payload_size() + 4, std::memory_order_relaxed);
  writer_.push(std::move(f));
  if (!writer_.writing()) pump_locked();
}

void Connection::pump_locked() {
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

}  // namespace tw::server
