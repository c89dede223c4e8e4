#include "server/session.h"

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
                                               uint64_t memory_quota, SessionTotals& totals) {
  TW_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, make_backend(backend));
  // Quota: the backend refuses an op whose outputs would take the session past its limit.
  b->set_memory_limit(memory_quota, [memory_quota](const ir::Op& op, uint64_t have, uint64_t need) {
    return resource_exhausted(ir::op_name(op) +
                              ": session memory quota exceeded: the session holds " +
                              human_bytes(have) + " and this op needs " + human_bytes(need) +
                              " more, over the quota of " + human_bytes(memory_quota) +
                              "; free tensors (drop them) or raise --session-memory");
  });
  return std::unique_ptr<Session>(new Session(id, std::move(b), totals));
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
  uint64_t now = backend_->bytes_held();
  uint64_t before = held_.exchange(now);
  totals_.bytes_held.fetch_add(static_cast<int64_t>(now) - static_cast<int64_t>(before));
}

}  // namespace tw::server
