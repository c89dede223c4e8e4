// Resumable sessions (protocol 9, issue 35; docs/protocol.md §8.13): a session whose connection
// drops is kept for a grace period (tensorwire-server --resume-grace) instead of being destroyed,
// and a client that presents its token on a new connection takes it up again where it was.
//
// What makes that exactly-once: the server numbers the frames it receives on the session
// (ResumeState::received, carried over from connection to connection), so a resuming client
// re-sends only the frames after that count; and it numbers its replies and keeps each one
// (ResumeState's log) until the client has acknowledged it (an Ack message), so that the replies
// a dropped connection lost are sent again, in order, before anything new. A parked session
// keeps its tensors, so its memory still counts in the server's budget and the session quota.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/wire.h"
#include "protocol/messages.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::server {

class Session;

// 32 random bytes (OpenSSL RAND_bytes) as 64 hex digits.
Result<std::string> new_session_token();

// What a resumable session carries from one connection to the next.
class ResumeState {
 public:
  ResumeState(std::string token, std::string credential, uint32_t device)
      : token(std::move(token)), credential(std::move(credential)), device(device) {}
  const std::string token;
  const std::string credential;  // the Hello's: a resume must present the same one
  const uint32_t device;
  // Client frames received (batches, attaches; not Acks), counted by the reading thread of the
  // session's connection of the moment (one at a time).
  uint64_t received = 0;
  // The client asked for a resumable session (its first Ack), and has not said goodbye.
  bool resumable() const;
  // An Ack: lets go of the replies the client has, records kAckResumable / kAckGoodbye.
  void ack(uint64_t acked, uint32_t flags);
  // A reply about to be written (under the connection's write lock, in write order): numbered and
  // kept until acknowledged. Past kMaxLogBytes the oldest go, and a resume that needs them fails.
  void log(const OutFrame& f);
  static constexpr uint64_t kMaxLogBytes = uint64_t{256} << 20;
  // The replies after the client's `acked`, to send again on a resumed connection.
  Result<std::deque<OutFrame>> since(uint64_t acked);

 private:
  mutable std::mutex mu_;
  bool resumable_ = false, goodbye_ = false;
  uint64_t sent_ = 0;   // replies numbered so far
  uint64_t first_ = 1;  // the number of log_.front()
  uint64_t bytes_ = 0;  // held in log_
  std::deque<OutFrame> log_;
};

// A session between connections, or being handed to its next one.
struct ParkedSession {
  std::shared_ptr<ResumeState> state;
  uint64_t id = 0;
  std::unique_ptr<Session> session;
};

// The server's resumable sessions by token: live ones (held by a connection) and parked ones
// (held here until resumed or their grace ends). Thread-safe.
class ResumeRegistry {
 public:
  // `expired` is called (on the registry's thread) with each session whose grace ended, before
  // it is destroyed.
  ResumeRegistry(std::chrono::milliseconds grace, std::function<void(uint64_t id)> expired);
  ~ResumeRegistry();
  std::chrono::milliseconds grace() const { return grace_; }
  // A session that was opened resumable; `close_live` ends its connection (a resume that finds
  // the connection not yet gone closes it).
  void add(const std::shared_ptr<ResumeState>& state, std::function<void()> close_live);
  // Its connection ended: the session is parked for the grace period, or handed at once to a
  // resume that waits for it. Returns it back (for the caller to destroy) when the session is not
  // resumable (the client never asked, said goodbye) or the grace is 0.
  std::unique_ptr<Session> park(ParkedSession p);
  // A resume: `take` receives the session (now, or once its old connection has ended) or why
  // there is none; it returns false when it can no longer use it (the session is parked again).
  using Taker = std::function<bool(Result<ParkedSession>)>;
  void resume(const std::string& token, const std::string& credential, Taker take);
  size_t parked() const;
  // Every parked session: its id, the tensor bytes it holds, how long until its grace ends.
  std::vector<protocol::ParkedSessionInfo> parked_sessions() const;
  uint64_t resumed() const;

 private:
  struct Entry {
    std::shared_ptr<ResumeState> state;
    std::function<void()> close_live;
    ParkedSession parked;  // session set: parked
    std::chrono::steady_clock::time_point deadline;
    Taker waiter;  // a resume waiting for the live connection to end
  };
  void sweep_loop();
  const std::chrono::milliseconds grace_;
  std::function<void(uint64_t)> expired_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, Entry> entries_;
  uint64_t resumed_ = 0;
  bool stop_ = false;
  std::thread sweeper_;
};

}  // namespace tw::server
TW_INTERNAL_END
