#include "server/session.h"

#include <algorithm>
#include <sstream>

#include "backend/registry.h"

namespace tw::server {

namespace proto = protocol;

std::string human_bytes(uint64_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  std::ostringstream os;
  os.precision(u ? 1 : 0);
  os << std::fixed << v << units[u];
  return os.str();
}

Result<std::unique_ptr<Session>> Session::open(uint64_t id, const std::string& backend,
                                               uint64_t memory_quota, SessionTotals& totals,
                                               uint64_t max_graph_ops) {
  TW_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, make_backend(backend));
  std::unique_ptr<Session> s(new Session(id, std::move(b), totals, memory_quota, max_graph_ops));
  s->set_backend_limit();
  return s;
}

void Session::set_backend_limit() {
  // Quota: the backend refuses an op whose outputs would take the session past its limit.
  const uint64_t quota = memory_quota_;
  const uint64_t constants = graph_constant_bytes_;
  backend_->set_memory_limit(
      quota - std::min(quota, constants),
      [quota, constants](const ir::Op& op, uint64_t have, uint64_t need) {
        return resource_exhausted(
            ir::op_name(op) + ": session memory quota exceeded: the session holds " +
            human_bytes(have + constants) + " and this op needs " + human_bytes(need) +
            " more, over the quota of " + human_bytes(quota) +
            "; free tensors (drop them) or raise --session-memory");
      });
}

Session::~Session() {
  totals_.bytes_held.fetch_sub(static_cast<int64_t>(held_.load()));
  backend_.reset();
}

void Session::run(std::vector<proto::Task>& tasks, const Status& decoded, SessionOutput& out) {
  OpTimer timer(totals_.metrics);
  for (proto::Task& t : tasks) {
    if (t.kind != proto::TaskKind::kOp) timer.interrupt();
    proto::OutFrame f;
    switch (t.kind) {
      case proto::TaskKind::kOp:
        totals_.ops_executed.fetch_add(1, std::memory_order_relaxed);
        ops_.store(ops_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        // A failure (the quota's too) is recorded in the op's outputs; the metrics count it.
        (void)timer.run(t.op, [&] { return backend_->execute(t.op); });
        continue;
      case proto::TaskKind::kRead:
        proto::encode_read_result(t.request_id, totals_.metrics.counted_read(read_for_wire(t.id)), f);
        break;
      case proto::TaskKind::kSync: proto::encode_sync_result(t.request_id, Status::OK(), f); break;
      case proto::TaskKind::kDrop:
        for (auto id : t.ids) (void)backend_->drop(id);  // unknown ids: nothing to free
        continue;
      case proto::TaskKind::kStats:
        update_held();
        proto::encode_stats_result(t.request_id, out.server_stats(id_), f);
        break;
      case proto::TaskKind::kRegisterGraph:
        proto::encode_graph_result(t.request_id, register_graph(std::move(t.graph)), f);
        break;
      case proto::TaskKind::kRunGraph: run_graph(t); continue;
    }
    out.reply(std::move(f));
  }
  update_held();
  if (!decoded.ok()) {
    totals_.metrics.error(ErrorKind::kMalformedBatch);
    proto::OutFrame f;
    proto::encode_session_error(decoded.with_context("malformed batch (the tasks before it ran)"),
                                f);
    out.reply(std::move(f));
  }
}

// ---- graphs ----

Result<ir::GraphId> Session::register_graph(ir::Graph graph) {
  // A graph of no ops still takes a table entry: it counts as one, so the count bounds both.
  const uint64_t ops = std::max<uint64_t>(graph.ops.size(), 1);
  if (graph_ops_total_ + ops > max_graph_ops_) {
    return resource_exhausted("register_graph: the graph has " + std::to_string(graph.ops.size()) +
                              " ops and this session's graphs hold " +
                              std::to_string(graph_ops_total_) + ", over the limit of " +
                              std::to_string(max_graph_ops_) +
                              " graph ops per session (tensorwire-server --max-graph-ops)");
  }
  // Constants (FromHost ops) stay in the graph for as long as it is registered.
  uint64_t constants = 0;
  for (const ir::Op& op : graph.ops) {
    if (auto* fh = std::get_if<ir::FromHost>(&op)) constants += fh->data.data.size();
  }
  const uint64_t held = backend_->bytes_held() + graph_constant_bytes_;
  if (held + constants > memory_quota_) {
    return resource_exhausted(
        "register_graph: session memory quota exceeded: the session holds " + human_bytes(held) +
        " and the graph's constants take " + human_bytes(constants) + ", over the quota of " +
        human_bytes(memory_quota_) + "; free tensors (drop them) or raise --session-memory");
  }
  graph_constant_bytes_ += constants;
  set_backend_limit();
  Result<ir::GraphId> id = backend_->register_graph(std::move(graph));
  if (!id.ok()) {
    graph_constant_bytes_ -= constants;
    set_backend_limit();
    if (id.status().code() == StatusCode::kResourceExhausted) {
      return id.status().with_context("session memory quota of " + human_bytes(memory_quota_) +
                                      " (tensorwire-server --session-memory)");
    }
    return id.status();
  }
  graph_ops_[*id] = ops;
  graph_ops_total_ += ops;
  return id;
}

void Session::run_graph(const proto::Task& t) {
  auto g = graph_ops_.find(t.graph_id);
  if (g != graph_ops_.end()) {
    totals_.ops_executed.fetch_add(g->second, std::memory_order_relaxed);
  }
  // A failure (an unknown graph included) is recorded in the run's outputs.
  (void)backend_->run_graph(t.graph_id, t.ids, t.outputs);
}

// A tensor too large for one frame (whose length is a u32) is refused, not truncated.
Result<TensorData> Session::read_for_wire(ir::TensorId id) {
  TW_ASSIGN_OR_RETURN(TensorMeta m, backend_->meta(id));
  uint64_t bytes = static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
  constexpr uint64_t kRoom = 0xFFFFFFFFull - 4096;  // the frame's head beside the data
  if (bytes > kRoom) {
    return resource_exhausted("read: tensor " + std::to_string(id) + " holds " +
                              human_bytes(bytes) +
                              ", more than one frame can carry (4 GiB); read it in slices");
  }
  return backend_->read(id);
}

void Session::update_held() {
  // The backend's bytes include graphs' planned buffers; their constants are the session's.
  uint64_t now = backend_->bytes_held() + graph_constant_bytes_;
  uint64_t before = held_.exchange(now);
  totals_.bytes_held.fetch_add(static_cast<int64_t>(now) - static_cast<int64_t>(before));
}

}  // namespace tw::server
