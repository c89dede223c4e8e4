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

namespace {

Status over_server_limit(const std::string& what, const MemoryBudget& budget, uint64_t need) {
  return resource_exhausted(what + ": server memory limit reached: the server's sessions hold " +
                            human_bytes(budget.used()) + " of its limit of " +
                            human_bytes(budget.limit()) + " and this needs " + human_bytes(need) +
                            " more; free tensors (drop them), try again later, or raise "
                            "tensorwire-server --max-memory");
}

}  // namespace

Result<std::unique_ptr<Session>> Session::open(uint64_t id, const std::string& backend,
                                               uint64_t memory_quota, SessionTotals& totals) {
  TW_ASSIGN_OR_RETURN(std::unique_ptr<Backend> b, make_backend(backend));
  std::unique_ptr<Session> s(new Session(id, std::move(b), memory_quota, totals));
  // Limit 0: the backend asks admit() about every op that allocates, so the bytes are reserved
  // in the server's budget before the kernel allocates them. The backend is the session's own,
  // so `this` outlives it.
  Session* self = s.get();
  s->backend_->set_memory_limit(0, [self](const ir::Op& op, uint64_t have, uint64_t need) {
    return self->admit(op, have, need);
  });
  return s;
}

Session::~Session() {
  backend_.reset();
  totals_.memory.release(charged_ + reserved_.load());
  totals_.bytes_held.fetch_sub(static_cast<int64_t>(held_.load()));
}

Status Session::admit(const ir::Op& op, uint64_t have, uint64_t need) {
  if (need == 0) return Status::OK();
  if (have + need > quota_) {
    return resource_exhausted(ir::op_name(op) +
                              ": session memory quota exceeded: the session holds " +
                              human_bytes(have) + " and this op needs " + human_bytes(need) +
                              " more, over the quota of " + human_bytes(quota_) +
                              "; free tensors (drop them) or raise --session-memory");
  }
  // What the buffer pool will hand out for it (settle() corrects the guess for several
  // outputs, views and other backends' storage); size_class() is for sizes that can exist.
  const uint64_t want = need < (uint64_t{1} << 60) ? BufferPool::size_class(need) : need;
  if (!totals_.memory.try_reserve(want)) {
    return over_server_limit(ir::op_name(op), totals_.memory, want);
  }
  charged_ += want;
  return Status::OK();
}

Status Session::reserve(uint64_t bytes, const std::string& what) {
  if (!totals_.memory.try_reserve(bytes)) return over_server_limit(what, totals_.memory, bytes);
  reserved_.fetch_add(bytes);
  return Status::OK();
}

void Session::release(uint64_t bytes) {
  reserved_.fetch_sub(bytes);
  totals_.memory.release(bytes);
}

void Session::settle() {
  const uint64_t now = backend_->bytes_held();
  // What the op reserved and did not use (a view, a failure), what a drop freed; or storage
  // beyond the outputs' element bytes, which is charged although it passes the limit: it exists.
  if (now > charged_) {
    totals_.memory.charge(now - charged_);
  } else if (now < charged_) {
    totals_.memory.release(charged_ - now);
  }
  charged_ = now;
  const uint64_t before = held_.load(std::memory_order_relaxed);
  if (now == before) return;
  held_.store(now);
  totals_.bytes_held.fetch_add(static_cast<int64_t>(now) - static_cast<int64_t>(before));
}

void Session::run_task(proto::Task& t, SessionOutput& out) {
  proto::OutFrame f;
  switch (t.kind) {
    case proto::TaskKind::kOp:
      totals_.ops_executed.fetch_add(1, std::memory_order_relaxed);
      // A failure (over a limit too) is recorded in the op's outputs.
      (void)backend_->execute(t.op);
      settle();
      return;
    case proto::TaskKind::kRead:
      proto::encode_read_result(t.request_id, read_for_wire(t.id), f);
      break;
    case proto::TaskKind::kSync: proto::encode_sync_result(t.request_id, Status::OK(), f); break;
    case proto::TaskKind::kDrop:
      for (auto id : t.ids) (void)backend_->drop(id);  // unknown ids: nothing to free
      settle();
      return;
    case proto::TaskKind::kStats:
      proto::encode_stats_result(t.request_id, out.server_stats(id_), f);
      break;
  }
  out.reply(std::move(f));
}

bool Session::run(Batch& batch, SessionOutput& out, Clock::time_point until) {
  while (batch.next < batch.tasks.size()) {
    run_task(batch.tasks[batch.next++], out);
    if (batch.next < batch.tasks.size() && Clock::now() >= until) return false;
  }
  if (!batch.decoded.ok()) {
    proto::OutFrame f;
    proto::encode_session_error(
        batch.decoded.with_context("malformed batch (the tasks before it ran)"), f);
    out.reply(std::move(f));
  }
  return true;
}

void Session::run(std::vector<proto::Task>& tasks, const Status& decoded, SessionOutput& out) {
  Batch batch{std::move(tasks), decoded, Buffer(), 0};
  (void)run(batch, out, Clock::time_point::max());
  tasks = std::move(batch.tasks);
}

// A tensor too large for one frame (whose length is a u32) is refused, not truncated; a
// poisoned one reports its poisoning error first, whatever its size.
Result<TensorData> Session::read_for_wire(ir::TensorId id) {
  TW_ASSIGN_OR_RETURN(TensorMeta m, backend_->meta(id));
  uint64_t bytes = static_cast<uint64_t>(numel(m.shape)) * dtype_size(m.dtype);
  constexpr uint64_t kRoom = 0xFFFFFFFFull - 4096;  // the frame's head beside the data
  if (bytes > kRoom) {
    TW_RETURN_NOT_OK(backend_->readable(id));
    return resource_exhausted("read: tensor " + std::to_string(id) + " holds " +
                              human_bytes(bytes) +
                              ", more than one frame can carry (4 GiB); read it in slices");
  }
  return backend_->read(id);
}

}  // namespace tw::server
