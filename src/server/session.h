// One client's session, without its transport: its tensor table (a backend instance of its
// own), its memory quota and the execution of its tasks. The per-connection code in server.cc
// decodes frames, drives a Session with the tasks and writes what it replies; so a new kind of
// task, fairness between sessions or a transfer between servers changes this, not socket code,
// and a test can drive a Session with no socket at all.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "protocol/messages.h"
#include "server/metrics.h"

namespace tw::server {

// Server-wide figures every session adds to (what a stats task reports).
struct SessionTotals {
  std::atomic<uint64_t> ops_executed{0};
  std::atomic<int64_t> bytes_held{0};  // tensor bytes of every session
  ServerMetrics metrics;  // latency, errors, graphs, transfers (--metrics; metrics.h)
};

// Where a session's replies go, and what it asks of its server.
class SessionOutput {
 public:
  virtual ~SessionOutput() = default;
  // A reply (read and sync results, stats, session errors), in the order the tasks ran.
  virtual void reply(protocol::OutFrame frame) = 0;
  // The server's figures, as a stats task reports them to session `asking`.
  virtual protocol::ServerStats server_stats(uint64_t asking) = 0;
};

class Session {
 public:
  // A session on a new instance of the backend named `backend` that may hold at most
  // `memory_quota` tensor bytes. `totals` outlives the session.
  static Result<std::unique_ptr<Session>> open(uint64_t id, const std::string& backend,
                                               uint64_t memory_quota, SessionTotals& totals);
  // Frees the session's tensors.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs one batch's tasks in order, replying to `out`. `decoded` is how decoding the batch
  // ended: not OK, the tasks are those before the malformed one, and the session reports the
  // error after running them. Not thread-safe: one run() at a time.
  void run(std::vector<protocol::Task>& tasks, const Status& decoded, SessionOutput& out);

  uint64_t id() const { return id_; }
  // Tensor bytes held after the last task run; any thread.
  uint64_t held() const { return held_.load(); }
  // Ops run so far; any thread.
  uint64_t ops() const { return ops_.load(std::memory_order_relaxed); }

 private:
  Session(uint64_t id, std::unique_ptr<Backend> backend, SessionTotals& totals)
      : id_(id), backend_(std::move(backend)), totals_(totals) {}
  Result<TensorData> read_for_wire(ir::TensorId id);
  void update_held();

  const uint64_t id_;
  std::unique_ptr<Backend> backend_;
  SessionTotals& totals_;
  std::atomic<uint64_t> held_{0};
  std::atomic<uint64_t> ops_{0};  // written by run() only
};

// 1536 -> "1.5KiB": sizes in messages and the limits summary.
std::string human_bytes(uint64_t b);

}  // namespace tw::server
