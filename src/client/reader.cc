// The connection's reading side: who reads the stream (the I/O thread or a waiting caller),
// the I/O thread's parking while callers read, and a lost connection's status.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "client/connection.h"
#include "core/env.h"

namespace tw::client {

namespace proto = protocol;

static_assert(protocol::kNeedMoreBytes == net::FrameReader::kNeedMore);

// Reading. The stream is read by one thread at a time, the reader: either the I/O thread, woken
// by its watch on the stream, or a caller that waits for a reply and reads it itself. The second
// saves a thread wake-up per round trip (about a third of a small request's latency on loopback),
// so while callers keep waiting for replies the I/O thread leaves the stream to them and looks
// in once a millisecond; when they go quiet it watches the stream again (for errors the server
// sends unasked, and for the connection going away). It looks in from park_locked(), a wait on
// a condition variable, not from the reactor: the stream stays registered in the reactor's
// epoll (edge-triggered), which woke the thread for every reply a caller was reading itself,
// half a context switch per round trip onto the server's core (perf: 52,000 voluntary switches
// in 100,000 round trips).
constexpr auto kCallerReadWindow = std::chrono::milliseconds(1);

Status Connection::read_available(bool* closed, const std::function<bool()>& done) {
  *closed = false;
  while (!done()) {
    Buffer frame;
    asio::error_code err;
    uint64_t bytes = 0;
    net::FrameReader::Poll r = reader_.read_frame(*stream_, &frame, &err, &bytes);
    if (bytes) count_in(bytes, 0);
    switch (r) {
      case net::FrameReader::Poll::kFrame: {
        count_in(0, 1);
        if (resume_) resume_->received.fetch_add(1, std::memory_order_relaxed);
        on_message(frame, reader_.take_diverted());
        break;
      }
      case net::FrameReader::Poll::kWouldBlock: return Status::OK();
      case net::FrameReader::Poll::kClosed:
        *closed = true;
        return connection_lost(asio::error::eof);
      case net::FrameReader::Poll::kError: *closed = true; return connection_lost(err);
      case net::FrameReader::Poll::kTooLarge: break;  // every u32 length is within the limit
    }
  }
  return Status::OK();
}

// The watch is a read into the reader's staging space, not an edge-triggered wait: the stream
// tries a read before it waits (net/stream.h), so bytes that arrived while a caller was the
// reader are never missed.
void Connection::arm_watch_locked() {
  if (watch_armed_ || reader_busy_ || state_ != State::kConnected) return;
  watch_armed_ = true;
  if (reader_.has_frame()) {
    // A caller stopped reading once it had its reply: handle what it left first.
    asio::post(io_, [this, gen = gen_] { on_readable({}, 0, gen); });
    return;
  }
  stream_->async_read_some(
      reader_.space(),
      [this, gen = gen_](const asio::error_code& ec, size_t n) { on_readable(ec, n, gen); });
}

void Connection::on_readable(const asio::error_code& ec, size_t n, uint64_t gen) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gen != gen_) return;  // a dropped stream's watch (a resume replaced it)
    watch_armed_ = false;
    if (ec == asio::error::operation_aborted || state_ != State::kConnected) return;  // closing
    reader_busy_ = true;  // (no caller reads while the watch is armed)
    count_in(n, 0);
  }
  reader_.received(n);
  bool closed = false;
  Status st;
  if (ec) {
    closed = true;
    st = connection_lost(ec);
  } else {
    st = read_available(&closed, [] { return false; });
  }
  if (closed) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reader_busy_ = false;
      reader_cv_.notify_all();
    }
    lost(st, gen);  // resumed, or every call failed
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  reader_busy_ = false;
  if (std::chrono::steady_clock::now() - last_caller_wait_ < kCallerReadWindow) {
    // Callers are waiting for replies: leave the stream to them.
    reader_cv_.notify_all();
    park_locked(lock);
  } else {
    arm_watch_locked();
  }
}

void Connection::start_check_timer_locked() {
  if (check_timer_running_) return;
  check_timer_running_ = true;
  check_timer_->expires_after(kCallerReadWindow);
  check_timer_->async_wait([this](asio::error_code ec) {
    std::unique_lock<std::mutex> lock(mu_);
    check_timer_running_ = false;
    if (ec || state_ != State::kConnected || watch_armed_) return;
    park_locked(lock);
  });
}

void Connection::park_locked(std::unique_lock<std::mutex>& lock) {
  using Clock = std::chrono::steady_clock;
  if (io_parked_ || watch_armed_ || closing_ || state_ != State::kConnected) return;
  io_parked_ = true;
  io_kick_ = false;
  bool watch = false;
  for (;;) {
    if (io_kick_ || closing_ || state_ != State::kConnected || writer_.writing()) break;
    const auto now = Clock::now();
    if (timer_armed_ && now >= idle_deadline_) break;  // the reactor runs the idle flush
    if (!reader_busy_ && now - last_caller_wait_ >= kCallerReadWindow) {
      watch = true;
      break;
    }
    auto until = (reader_busy_ ? now : last_caller_wait_) + kCallerReadWindow;
    if (timer_armed_) until = std::min(until, idle_deadline_);
    park_cv_.wait_until(lock, until);
  }
  io_parked_ = false;
  io_kick_ = false;
  if (closing_ || state_ != State::kConnected) return;
  if (watch) {
    arm_watch_locked();
  } else {
    start_check_timer_locked();  // back here once the reactor's work is done
  }
}

void Connection::request_park_locked() {
  if (io_parked_ || park_posted_ || watch_armed_ || closing_ || writer_.writing() ||
      state_ != State::kConnected) {
    return;
  }
  park_posted_ = true;
  asio::post(io_, [this] {
    std::unique_lock<std::mutex> lock(mu_);
    park_posted_ = false;
    park_locked(lock);
  });
}

void Connection::kick_io_locked() {
  if (!io_parked_) return;
  io_kick_ = true;
  park_cv_.notify_one();
}

void Connection::wait_until(const std::function<bool()>& ready, const char* kind) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ready()) return;
  // The caller adds nothing while it waits: send what it queued after its request now (an
  // asynchronous read's program goes on issuing ops and then waits for an earlier reply), so the
  // server works on it meanwhile instead of after the idle flush (Options::idle_flush_us).
  if (state_ == State::kConnected && (batch_ops_ > 0 || !drops_.empty())) flush_locked();
  const auto wait_start = std::chrono::steady_clock::now();
  while (!ready()) {
    last_caller_wait_ = std::chrono::steady_clock::now();
    if (state_ != State::kConnected || reader_busy_ || watch_armed_) {
      // Someone else reads (or the connection is gone and fail_all fulfils every promise).
      // Counted first, then the reply looked for once more: on_message() notifies only when
      // it sees a waiter after handing a reply over, so one of the two sees the other.
      reader_waiters_.fetch_add(1);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!ready()) reader_cv_.wait(lock);
      reader_waiters_.fetch_sub(1);
      continue;
    }
    reader_busy_ = true;
    const uint64_t gen = gen_;
    // No spin after two waits in a row that outlasted it: replies that take that long (a graph's
    // training step, a large kernel) are not caught by it, and on a machine the server shares
    // it takes a core from the server's kernels (a remote CNN step 0.95-0.96 of local eager
    // without the spin, 1.02-1.08 with it). Every kProbeEvery-th wait spins anyway, and a wait
    // within the spin turns it back on (a sleeping caller's own wake-up may outlast the spin).
    const bool skip = long_waits_ >= kLongWaitsBeforeNoSpin && ++skipped_spins_ % kProbeEvery != 0;
    const uint32_t spin_us = skip ? 0 : options_.spin_us;
    ++counters_.reading_waits;
    if (spin_us > 0) ++counters_.spun_waits;
    lock.unlock();
    bool closed = false;
    Status st;
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
    while (!ready()) {
      // Wait first (the reply to what was just sent cannot be here yet), unless an earlier
      // reader left frames behind or the spin (Options::spin_us) has time left: then the read
      // below polls the stream instead.
      if (!reader_.has_frame() &&
          (spin_us == 0 || std::chrono::steady_clock::now() >= spin_until)) {
        stream_->wait_readable();
      }
      st = read_available(&closed, ready);
      if (closed) break;
    }
    lock.lock();
    reader_busy_ = false;
    reader_cv_.notify_all();  // another waiter may take over reading
    if (closed) {
      lock.unlock();
      lost(st, gen);  // resumed (the loop reads the new stream), or every call failed
      lock.lock();
    } else {
      // The I/O thread waits aside while callers read, and arms the watch once they go quiet.
      request_park_locked();
    }
  }
  const auto waited = std::chrono::steady_clock::now() - wait_start;
  counters_.wait_ns +=
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
  static const bool debug_waits = env_flag(Env::kDEBUG_WAITS).value_or(false);
  if (debug_waits && waited >= std::chrono::milliseconds(1)) {
    std::fprintf(stderr, "tw wait: %s %.2f ms (%s)\n", kind,
                 std::chrono::duration<double>(waited).count() * 1e3, url_.str().c_str());
  }
  if (waited > std::chrono::microseconds(options_.spin_us)) {
    long_waits_ = std::min<uint32_t>(long_waits_ + 1, kLongWaitsBeforeNoSpin);
  } else {
    long_waits_ = 0;
  }
}

// As connection_lost, for a write that failed (the server closed or reset the connection).
Status Connection::send_failed(const asio::error_code& ec) const {
  return unavailable("the server at " + url_.str() +
                     " closed the connection while this client was sending (" + ec.message() +
                     "); tensors on it are lost");
}

// The status every pending and later call gets once the server has gone. A server that drops
// a session says why first (a frame over its limit, say): that reason is kept.
Status Connection::connection_lost(const asio::error_code& ec) {
  std::string why = "the server at " + url_.str() + " closed the connection (" + ec.message() + ")";
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!session_errors_.empty()) why += " after reporting: " + session_errors_.back().message();
  }
  return unavailable(why + "; tensors on it are lost");
}

}  // namespace tw::client
