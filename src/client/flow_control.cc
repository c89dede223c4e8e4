// Flow control (issue 34): back-pressure on a program that issues ops faster than the server runs
// them. The server stops reading a session whose queue is full (session_queue_depth batches);
// the socket's buffers then fill, and the frames the program goes on making would pile up in the
// connection's writer without bound. Past Options::window_bytes of them the producing thread
// waits here for the writes to drain to half the window (hysteresis: one wake-up per half
// window, not one per frame). Frames held behind an upload by hash not yet answered
// (client/dedup.cc) count as unwritten.
#include <cstdio>
#include <cstdlib>

#include "client/connection.h"
#include "core/env.h"

namespace tw::client {

void Connection::wait_for_window_locked() {
  // The I/O thread completes the writes (and flushes on the idle timer): it must never wait.
  if (std::this_thread::get_id() == io_thread_.get_id()) return;
  const uint64_t resume_at = options_.window_bytes / 2;
  ++counters_.window_waits;
  const auto t0 = std::chrono::steady_clock::now();
  window_cv_.wait(mu_, [&] {
    return writer_.queued_bytes() + held_bytes_ <= resume_at || state_ != State::kConnected ||
           closing_;
  });
  const auto waited = std::chrono::steady_clock::now() - t0;
  counters_.window_wait_ns +=
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count());
  if (env_flag(Env::kDEBUG_WAITS).value_or(false)) {
    std::fprintf(stderr, "tw wait: window %.2f ms (%s)\n",
                 std::chrono::duration<double>(waited).count() * 1e3, url_.str().c_str());
  }
}

}  // namespace tw::client
