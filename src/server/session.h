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
#include <unordered_map>
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
  // `memory_quota` tensor bytes (graphs' planned buffers and constants included) and graphs of
  // at most `max_graph_ops` ops together. `totals` outlives the session.
  static Result<std::unique_ptr<Session>> open(uint64_t id, const std::string& backend,
                                               uint64_t memory_quota, SessionTotals& totals,
                                               uint64_t max_graph_ops = uint64_t{1} << 18);
  // Frees the session's tensors and graphs.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs one batch's tasks in order, replying to `out`. `decoded` is how decoding the batch
  // ended: not OK, the tasks are those before the malformed one, and the session reports the
  // error after running them. Not thread-safe: one run() at a time.
  void run(std::vector<protocol::Task>& tasks, const Status& decoded, SessionOutput& out);

  uint64_t id() const { return id_; }
  // Tensor bytes held after the last task run (graphs' planned buffers and constants included);
  // any thread.
  uint64_t held() const { return held_.load(); }
  // Ops run so far; any thread.
  uint64_t ops() const { return ops_.load(std::memory_order_relaxed); }

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
          uint64_t memory_quota, uint64_t max_graph_ops)
      : id_(id),
        backend_(std::move(backend)),
        totals_(totals),
        memory_quota_(memory_quota),
        max_graph_ops_(max_graph_ops) {}
  Result<TensorData> read_for_wire(ir::TensorId id);
  void update_held();
  // The backend refuses what would take the session past its quota, less what graphs' constants
  // (FromHost ops kept in the table) hold.
  void set_backend_limit();
  // Graph tasks: registration checks the session's graph quotas, then the backend validates
  // and plans the graph; a run's failure is recorded in its outputs, as an op's is.
  Result<ir::GraphId> register_graph(ir::Graph graph);
  void run_graph(const protocol::Task& t);

  const uint64_t id_;
  std::unique_ptr<Backend> backend_;
  SessionTotals& totals_;
  std::atomic<uint64_t> held_{0};
  const uint64_t memory_quota_;

  // ---- graphs ----
  const uint64_t max_graph_ops_;
  std::unordered_map<ir::GraphId, uint64_t> graph_ops_;  // graph -> ops it counts for
  uint64_t graph_ops_total_ = 0;
  uint64_t graph_constant_bytes_ = 0;  // FromHost payloads of registered graphs
  std::atomic<uint64_t> ops_{0};  // written by run() only
};

// 1536 -> "1.5KiB": sizes in messages and the limits summary.
std::string human_bytes(uint64_t b);

}  // namespace tw::server
