// Resuming a session after its connection dropped (protocol 9; client/resume.h, server/resume.h,
// docs/protocol.md §8.13). Frames sent are numbered and kept until a reply shows the server ran
// them; when the stream fails, the connection (holding its lock, so no call interleaves) dials
// again with backoff, presents the session's token and the count of replies it has, learns how
// many frames the server had received, and re-sends only the frames after those. The server
// sends again the replies the client had not received. Every op thus runs once and every pending
// reply arrives once; a resume that cannot be made (TW_RESUME=0, the grace period over, frames
// let go over the window) fails every pending and later call as a dropped connection always did.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#include <tuple>

#include "client/connection.h"

namespace tw::client {

namespace proto = protocol;

namespace {

// The chunks windows have let go, for the next to reuse (FrameArena).
struct ChunkPool {
  std::mutex mu;
  std::vector<FrameArena::Chunk> free;
  static ChunkPool& get() {
    static ChunkPool* p = new ChunkPool;  // (never destroyed: windows may outlive statics)
    return *p;
  }
  FrameArena::Chunk take(size_t n) {
    if (n <= FrameArena::kChunkBytes) {
      std::lock_guard<std::mutex> lock(mu);
      if (!free.empty()) {
        FrameArena::Chunk c = free.back();
        free.pop_back();
        return c;
      }
    }
    FrameArena::Chunk c;
    c.size = std::max(FrameArena::kChunkBytes, n);
    void* m = ::mmap(nullptr, c.size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return {};
    c.base = static_cast<uint8_t*>(m);
    return c;
  }
  void give(FrameArena::Chunk c) {
    if (c.size == FrameArena::kChunkBytes) {
      std::lock_guard<std::mutex> lock(mu);
      if (free.size() * FrameArena::kChunkBytes < FrameArena::kPoolBytes) {
        free.push_back({c.base, c.size, 0, 0});
        return;
      }
    }
    ::munmap(c.base, c.size);
  }
};

}  // namespace

FrameArena::~FrameArena() {
  for (Chunk& c : chunks_) ChunkPool::get().give(c);
}

std::pair<uint8_t*, FrameArena::Chunk*> FrameArena::put(const uint8_t* data, size_t n) {
  if (chunks_.empty() || chunks_.back().size - chunks_.back().used < n) {
    Chunk c = ChunkPool::get().take(n);
    if (!c.base) return {nullptr, nullptr};
    chunks_.push_back(c);
  }
  Chunk& c = chunks_.back();
  uint8_t* at = c.base + c.used;
  std::memcpy(at, data, n);
  c.used += n;
  ++c.live;
  return {at, &c};
}

void FrameArena::release(Chunk* c) {
  --c->live;
  // Frames go in order: the chunks before the one being filled empty from the front.
  while (chunks_.size() > 1 && chunks_.front().live == 0) {
    ChunkPool::get().give(chunks_.front());
    chunks_.pop_front();
  }
  if (chunks_.size() == 1 && chunks_.front().live == 0) chunks_.front().used = 0;
}

OutFrame ResumeWindow::Sent::copy() const {
  OutFrame f = frame;
  if (head) f.head.assign(head, head + head_bytes);
  return f;
}

void ResumeWindow::on_sent(const OutFrame& f, uint64_t last_request,
                           std::shared_ptr<net::SharedSegment> segment) {
  Sent s{next_seq++, OutFrame{{}, f.segments}, nullptr,      0,
         nullptr,    f.payload_size(),         last_request, std::move(segment)};
  if (!f.head.empty()) std::tie(s.head, s.chunk) = arena_.put(f.head.data(), f.head.size());
  if (s.head) {
    s.head_bytes = f.head.size();
  } else {
    s.frame.head = f.head;
  }
  bytes += s.bytes;
  sent.push_back(std::move(s));
  while (bytes > max_bytes && !sent.empty()) {
    let_go_through = sent.front().seq;
    pop_front();
  }
}

void ResumeWindow::pop_front() {
  bytes -= sent.front().bytes;
  if (sent.front().chunk) arena_.release(sent.front().chunk);
  sent.pop_front();
}

void ResumeWindow::on_reply(uint64_t request) {
  if (request == 0) return;
  // Frames before the one that carried `request` ran, and that one: the first whose
  // last_request reaches it.
  while (!sent.empty() && sent.front().last_request < request) pop_front();
  if (!sent.empty()) pop_front();
}

void ResumeWindow::drop_through(uint64_t seq) {
  while (!sent.empty() && sent.front().seq <= seq) pop_front();
}

Result<std::vector<ResumeWindow::Sent>> ResumeWindow::after(uint64_t received) {
  if (received >= next_seq) {
    return data_loss("the server says it received " + std::to_string(received) +
                     " frames of a session that sent " + std::to_string(next_seq - 1));
  }
  if (received < let_go_through) {
    return resource_exhausted(
        "frames the server had not received were let go (over the resume window of " +
        std::to_string(max_bytes) + " bytes, TW_RESUME_WINDOW)");
  }
  std::vector<Sent> out;
  for (const Sent& s : sent) {
    if (s.seq > received) {
      Sent c = s;
      c.frame = s.copy();
      c.head = nullptr;
      c.chunk = nullptr;
      out.push_back(std::move(c));
    }
  }
  return out;
}

void Connection::start_resume_locked() {
  if (!options_.resume || welcome_.version < proto::kResumeSince || welcome_.session.token.empty())
    return;
  if (!resume_) resume_ = std::make_unique<ResumeWindow>();
  resume_->token = welcome_.session.token;
  resume_->max_bytes = options_.resume_window_bytes;
  push_ack_locked(proto::kAckResumable);
  if (!writer_.writing()) pump_locked();
}

void Connection::push_ack_locked(uint32_t flags) {
  const uint64_t got = resume_->received.load(std::memory_order_relaxed);
  proto::OutFrame f;
  proto::encode_ack({got, flags}, f);
  resume_->acked = got;
  resume_->acked_bytes_in = bytes_in_.load(std::memory_order_relaxed);
  writer_.push(std::move(f));  // (not numbered: an Ack is not part of the session's work)
}

void Connection::push_frame_locked(OutFrame f, std::shared_ptr<net::SharedSegment> segment) {
  if (resume_ && !resume_->token.empty()) {
    // An Ack when the replies received since the last one are many or large, so the server lets
    // go of its copies; it rides with this frame (one write).
    constexpr uint64_t kAckEveryFrames = 32, kAckEveryBytes = uint64_t{4} << 20;
    if (resume_->received.load(std::memory_order_relaxed) >= resume_->acked + kAckEveryFrames ||
        bytes_in_.load(std::memory_order_relaxed) >= resume_->acked_bytes_in + kAckEveryBytes)
      push_ack_locked(0);
    resume_->on_sent(f, next_request_ - 1, std::move(segment));
  }
  writer_.push(std::move(f));
}

void Connection::lost(const Status& why, uint64_t gen, bool close_stream) {
  std::unique_lock<std::mutex> lock(mu_);
  if (gen != gen_ || state_ != State::kConnected) return;  // resumed already, or failed
  Status st = why;
  // A link dead past the dead-peer deadline (TW_DEAD_PEER_MS, "timed out") is given up: it has
  // been silent far longer than a resume would wait.
  if (resume_ && !resume_->token.empty() && !closing_ &&
      why.message().find("timed out") == std::string::npos) {
    Status r = resume_locked(lock, why);
    if (r.ok()) return;
    st = r;
  }
  if (close_stream && stream_) stream_->close();
  lock.unlock();
  fail_all(st);
  lock.lock();
  timer_->cancel();
  check_timer_->cancel();
}

Status Connection::resume_locked(std::unique_lock<std::mutex>& lock, const Status& why) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  // The stream is nobody's to read while it is replaced: a caller reading it finds it dead too.
  reader_cv_.wait(lock, [&] { return !reader_busy_; });
  if (state_ != State::kConnected || closing_) return why;
  ++gen_;  // handlers of the old stream's operations now do nothing
  stream_->close();
  resume_->retired.push_back(std::move(stream_));
  writer_ = net::FrameWriter();
  reader_.reset();
  watch_armed_ = false;
  Status last = why;
  auto backoff = std::chrono::milliseconds(5);
  for (uint32_t attempt = 0; attempt < options_.resume_attempts; ++attempt) {
    if (attempt > 0) {
      // (With the lock held: no other thread may touch the connection while it has no stream.)
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
    }
    auto dialed = net::dial(url_, io_, options_.dial_options());
    if (!dialed.ok()) {
      last = dialed.status();
      // Nobody listens there: the server process is gone, and its sessions with it.
      const std::string& m = last.message();
      if (m.find("onnection refused") != std::string::npos ||
          m.find("No such file") != std::string::npos)
        break;
      continue;
    }
    std::unique_ptr<net::Stream> s = std::move(dialed).value();
    const proto::Hello::Resume ask{resume_->token, resume_->received.load()};
    auto w = handshake(*s, url_, device_index_, options_, &ask);
    if (!w.ok()) {
      last = w.status();
      // A refusal (the session is gone, the server drains) is final; a link that failed again,
      // or a server busy for now, is tried again.
      if (last.code() == StatusCode::kUnavailable || last.code() == StatusCode::kResourceExhausted)
        continue;
      break;
    }
    Result<std::vector<ResumeWindow::Sent>> again = resume_->after(w->session.received);
    // An attachment the server had not received passes its segment's descriptor again (it
    // travels with the bytes written first on the new stream, ahead of or with its frame).
    if (again.ok()) {
      for (const ResumeWindow::Sent& a : *again) {
        if (a.segment && !s->queue_fd(a.segment->fd())) {
          again = unavailable("cannot pass shared-memory segment " +
                              std::to_string(a.segment->fd()) + " again on the new connection");
          break;
        }
      }
    }
    if (!again.ok()) {
      s->close();
      resume_->retired.push_back(std::move(s));
      last = again.status();
      break;
    }
    stream_ = std::move(s);
    const uint64_t received = w->session.received;
    resume_->drop_through(received);
    for (ResumeWindow::Sent& f : *again) writer_.push(std::move(f.frame));
    if (!writer_.idle()) pump_locked();
    arm_watch_locked();
    reader_cv_.notify_all();
    window_cv_.notify_all();
    ++counters_.resumes;
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    counters_.resume_seconds.push_back(secs);
    return Status::OK();
  }
  // The calls that follow fail with the status; the dropped stream stays the stream meanwhile.
  stream_ = std::move(resume_->retired.back());
  resume_->retired.pop_back();
  return unavailable(why.message() + "; resuming the session failed: " + last.message());
}

}  // namespace tw::client
