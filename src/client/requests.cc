// The connection's requests with replies (reads, syncs, stats, graph registrations, exports):
// the pending-request table, its completion by the reader (on_message), and its failure.
#include <cstring>

#include "client/connection.h"
#include "ir/graph.h"

namespace tw::client {

namespace proto = protocol;

namespace {
// A Pending's promise for its kind, made in place.
template <class Variant>
Variant promise_of(int kind) {
  switch (kind) {
    case 1: return Variant(std::in_place_index<1>);
    case 2: return Variant(std::in_place_index<2>);
    case 3: return Variant(std::in_place_index<3>);
    case 4: return Variant(std::in_place_index<4>);
    case 5: return Variant(std::in_place_index<5>);
    default: return Variant(std::in_place_index<0>);
  }
}
}  // namespace

Connection::Pending::Pending(Kind k, bool direct)
    : kind(k),
      promise(promise_of<decltype(promise)>(direct ? kCapability + 1 : static_cast<int>(k))) {
  static_assert(std::variant_size_v<decltype(promise)> == kCapability + 2);
}
void Connection::Pending::reset(Kind k, bool direct) {
  kind = k;
  slot.reset();
  lease.reset();
  into = Buffer();
  promise = promise_of<decltype(promise)>(direct ? kCapability + 1 : static_cast<int>(k));
  data_out = nullptr;
  status_out = nullptr;
  done = nullptr;
}

void Connection::Pending::deliver_status(const Status& st) {
  switch (kind) {
    case kRead: deliver_data(st); return;
    case kSync:
      if (status_out) {
        *status_out = st;
      } else {
        status().set_value(st);
      }
      break;
    case kStats: stats().set_value(st); break;
    case kGraph: graph().set_value(st); break;
    case kCapability: exported().set_value(st); break;
  }
  mark_done();
}

void Connection::Pending::mark_done() {
  if (done) done->store(true, std::memory_order_release);
}

void Connection::Pending::deliver_data(Result<TensorData> data) {
  if (data_out) {
    *data_out = std::move(data);
  } else {
    this->data().set_value(std::move(data));
  }
  mark_done();
}

uint64_t Connection::add_pending_locked(Pending::Kind kind, Pending** out, std::atomic<bool>* done,
                                        bool direct) {
  uint64_t id = next_request_++;
  Pending* p;
  if (spare_pending_) {
    spare_pending_.key() = id;
    p = spare_pending_.mapped().get();
    p->reset(kind, direct);
    pending_.insert(std::move(spare_pending_));
  } else {
    auto made = std::make_unique<Pending>(kind, direct);
    p = made.get();
    pending_.emplace(id, std::move(made));
  }
  p->done = done;
  *out = p;
  // Every request with a reply is flushed at once: when the reply is in, the server has run
  // everything sent before it and is idle, so the next batches start small again.
  restart_batches_locked();
  return id;
}

Result<ir::GraphId> Connection::register_graph(const ir::Graph& graph) {
  std::future<Result<ir::GraphId>> fut;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TW_RETURN_NOT_OK(ready_locked());
    // First in its frame: whatever is queued goes first, and the graph must fit one frame.
    flush_locked();
    auto too_large = [&] {
      return resource_exhausted(
          "register_graph: the graph of " + std::to_string(graph.ops.size()) + " ops takes " +
          std::to_string(batch_.payload_size()) + " bytes on the wire, over the limit of " +
          std::to_string(frame_limit_) + " bytes per frame of the server at " + url_.str() +
          " (tensorwire-server --max-frame)");
    };
    if (welcome_.version >= proto::kRegisterGraphAsSince) {
      // Pipelined (RegisterGraphAs): the id is this client's to choose, nothing waits, and the
      // runs that follow share the frame. The graph is validated here, as the server will, so
      // a bad one is refused at the call naming the op; a refusal only the server can make
      // (its quotas, an op its backend lacks) reaches the program in the runs' outputs.
      if (Result<ir::GraphPlan> plan = ir::validate_graph(graph); !plan.ok())
        return plan.status().with_context("register_graph on " + url_.str());
      const ir::GraphId id = next_graph_++;
      batch_.add_register_graph_as(id, graph);
      if (batch_.payload_size() > frame_limit_) {
        Status st = too_large();
        batch_.remove_last();
        return st;
      }
      return id;
    }
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kGraph, &p, &done);
    fut = p->graph().get_future();
    batch_.add_register_graph(req, graph);
    if (batch_.payload_size() > frame_limit_) {
      Status st = too_large();
      batch_.remove_last();
      pending_.erase(req);
      return st;
    }
    ++counters_.round_trips;
    flush_locked();
  }
  wait(fut, &done, "register-graph");
  Result<ir::GraphId> id = fut.get();
  if (!id.ok()) return id.status().with_context("register_graph on " + url_.str());
  return id;
}

Result<proto::Exported> Connection::export_tensor(ir::TensorId id) {
  std::future<Result<proto::Exported>> fut;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TW_RETURN_NOT_OK(ready_locked());
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kCapability, &p, &done);
    fut = p->exported().get_future();
    add_task_locked(proto::ExportTask{req, id});
    ++counters_.round_trips;
    flush_locked();
  }
  wait(fut, &done, "export");
  Result<proto::Exported> r = fut.get();
  if (!r.ok()) return r.status().with_context("export from " + url_.str());
  return r;
}

std::future<Result<TensorData>> Connection::read(ir::TensorId id) { return read_impl(id, nullptr); }

std::future<Result<TensorData>> Connection::read(ir::TensorId id, uint64_t expect_bytes) {
  return read_impl(id, nullptr, expect_bytes);
}

Result<TensorData> Connection::read_wait(ir::TensorId id, uint64_t expect_bytes) {
  std::atomic<bool> done{false};
  std::optional<Result<TensorData>> out;
  (void)read_impl(id, &done, expect_bytes, &out);
  wait_until([&] { return done.load(std::memory_order_acquire); }, "read");
  return std::move(*out);
}

std::future<Result<TensorData>> Connection::read_into(ir::TensorId id, Buffer into) {
  return read_impl(id, nullptr, 0, nullptr, std::move(into));
}

Buffer Connection::divert_target(const uint8_t* payload, size_t at, size_t len) {
  // (Called only for a successful ReadResult's head: type, request id, ...; see the aligner.)
  uint64_t request = 0;
  (void)WireReader(payload + 1, 8).u64(request);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pending_.find(request);
  if (it == pending_.end() || it->second->kind != Pending::kRead ||
      it->second->into.size() != len - at) {
    return Buffer();
  }
  return it->second->into;
}

std::future<Result<TensorData>> Connection::read_impl(ir::TensorId id, std::atomic<bool>* done,
                                                      uint64_t expect_bytes,
                                                      std::optional<Result<TensorData>>* out,
                                                      Buffer into) {
  std::shared_ptr<const void> lease;
  std::shared_ptr<ShmSlot> slot;
  if (expect_bytes >= kShmMinBytes && expect_bytes <= SIZE_MAX) {
    slot = claim_segment(static_cast<size_t>(expect_bytes), &lease);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kConnected) {
    Status st = state_ == State::kDead ? dead_ : connect_locked();
    if (!st.ok()) {  // answered here, as a reply would be
      Pending failed(Pending::kRead, out != nullptr);
      failed.data_out = out;
      failed.done = done;
      std::future<Result<TensorData>> fut;
      if (!out) fut = failed.data().get_future();
      failed.deliver_data(st);
      return fut;
    }
  }
  Pending* p = nullptr;
  uint64_t req = add_pending_locked(Pending::kRead, &p, done, out != nullptr);
  std::future<Result<TensorData>> fut;
  if (out) {
    p->data_out = out;
  } else {
    fut = p->data().get_future();
  }
  p->into = std::move(into);
  if (slot) {
    // The server writes the tensor into the segment when it fits the room, else answers inline.
    add_task_locked(proto::ReadToSegmentTask{req, id, {slot->id, 0, slot->seg->capacity(), 0}});
    p->slot = std::move(slot);
    p->lease = std::move(lease);
  } else {
    add_task_locked(proto::ReadTask{req, id});
  }
  ++counters_.round_trips;
  flush_locked();
  return fut;
}

Status Connection::sync() {
  Status st;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDead) return dead_;
    if (state_ == State::kIdle) return Status::OK();  // nothing was ever sent
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kSync, &p, &done, /*direct=*/true);
    p->status_out = &st;
    add_task_locked(proto::SyncTask{req});
    ++counters_.round_trips;
    flush_locked();
  }
  wait_until([&] { return done.load(std::memory_order_acquire); }, "sync");
  if (!st.ok()) return st;
  std::lock_guard<std::mutex> lock(mu_);
  if (!session_errors_.empty()) {
    Status first = session_errors_.front();
    session_errors_.clear();
    return first.with_context("server " + url_.str() + " reported");
  }
  return Status::OK();
}

Result<proto::ServerStats> Connection::stats() {
  std::future<Result<proto::ServerStats>> fut;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kConnected) {
      if (state_ == State::kDead) return dead_;
      TW_RETURN_NOT_OK(connect_locked());
    }
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kStats, &p, &done);
    fut = p->stats().get_future();
    add_task_locked(proto::StatsTask{req});
    ++counters_.round_trips;
    flush_locked();
  }
  wait(fut, &done, "stats");
  return fut.get();
}

Result<TensorData> Connection::read_wait(ir::TensorId id) { return read_wait(id, 0); }

Result<TensorData> Connection::wait_read(std::future<Result<TensorData>>& fut) {
  wait(fut, nullptr, "read-async");
  return fut.get();
}

void Connection::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == State::kConnected) flush_locked();
}

void Connection::fail_all(const Status& why) {
  std::unordered_map<uint64_t, std::unique_ptr<Pending>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kDead) {
      state_ = State::kDead;
      dead_ = why;
    }
    pending.swap(pending_);
    drop_dedups_locked();
    kick_io_locked();
    window_cv_.notify_all();
  }
  for (auto& [id, p] : pending) p->deliver_status(dead_);
  std::lock_guard<std::mutex> lock(mu_);
  reader_cv_.notify_all();
}

void Connection::on_message(const Buffer& payload, Buffer diverted) {
  // Decoded into the one message kept for it: a single reader at a time calls this. Whatever
  // bytes the reply carried and nobody took (an unknown id, a failure) are let go on the way
  // out, not held until the next reply (they may be a large result or a segment's lease).
  if (welcome_.version >= proto::kCompressionSince &&
      proto::is_compressed(payload, proto::kCompressedServerType)) {
    Result<Buffer> raw = proto::decompress(payload, ~uint64_t{0}, proto::read_result_data_offset);
    if (raw.ok()) return on_message(*raw);
    fail_all(raw.status().with_context("malformed message from " + url_.str()));
    stream_->shutdown();
    return;
  }
  proto::ServerMessage& m = reply_;
  struct LetGo {
    proto::ServerMessage& m;
    ~LetGo() {
      if (m.read.result.ok()) m.read.result->bytes = Buffer();
    }
  } let_go{m};
  Status decoded;
  if (diverted.size()) {
    // A ReadResult's head; its bytes are in `diverted` (exactly as many as the frame held).
    Result<proto::ReadResultHead> head = proto::decode_read_result_head(payload);
    if (!head.ok()) {
      decoded = head.status();
    } else if (!head->tensor.ok() || head->tensor->bytes() != diverted.size()) {
      decoded = data_loss("a ReadResult's byte count disagrees with its frame");
    } else {
      m.kind = proto::ServerMsg::kReadResult;
      m.read.request_id = head->request_id;
      m.read.result = TensorData{std::move(head->tensor->meta), std::move(diverted)};
    }
  } else {
    decoded = proto::decode_server_message(payload, m);
  }
  if (!decoded.ok()) {
    fail_all(decoded.with_context("malformed message from " + url_.str()));
    stream_->shutdown();  // safe from a reading caller's thread
    return;
  }
  if (m.kind == proto::ServerMsg::kDraining) {
    // The server is going away (protocol 9): every waiter and every later call fails now, so
    // that the program can move elsewhere (tw::run_with_failover) without waiting for it.
    fail_all(unavailable(m.draining.message));
    return;
  }
  if (m.kind == proto::ServerMsg::kSessionError) {
    // Not tied to a request; surfaced by the next sync().
    std::lock_guard<std::mutex> lock(mu_);
    session_errors_.push_back(m.error.status);
    return;
  }
  PendingMap::node_type node;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (reader_spare_ && !spare_pending_) spare_pending_ = std::move(reader_spare_);
    if (resume_) resume_->on_reply(m.request_id());  // the frames up to its request have run
    if (awaiting_dedup_ != 0 && m.request_id() == awaiting_dedup_) {
      // An upload by hash not waited for (client/dedup.cc): anything but a made tensor sends
      // the bytes (the upload then records any failure in the tensor, as uploads do).
      dedup_answered_locked(m.kind == proto::ServerMsg::kSyncResult && m.status().ok());
      return;
    }
    auto it = pending_.find(m.request_id());
    if (it == pending_.end()) return;  // unknown id: a reply to a request already failed
    node = pending_.extract(it);
  }
  Pending* const p = node.mapped().get();
  Status status = m.status();
  const bool answers = [&] {  // a reply of this kind can answer what the request waits for
    switch (p->kind) {
      case Pending::kRead:
        return m.kind == proto::ServerMsg::kReadResult ||
               m.kind == proto::ServerMsg::kReadResultInSegment;
      case Pending::kSync: return m.kind == proto::ServerMsg::kSyncResult;
      case Pending::kStats: return m.kind == proto::ServerMsg::kStatsResult;
      case Pending::kGraph: return m.kind == proto::ServerMsg::kGraphResult;
      case Pending::kCapability: return m.kind == proto::ServerMsg::kCapabilityResult;
    }
    return false;
  }();
  if (!answers) {
    status = data_loss("the server at " + url_.str() + " answered request " +
                       std::to_string(m.request_id()) + " with a reply of another kind (" +
                       std::to_string(static_cast<int>(m.kind)) + ")");
  } else if (m.kind == proto::ServerMsg::kReadResultInSegment) {
    // The bytes are in the segment the read offered; the result holds it until dropped.
    proto::InSegment& in = m.in_segment.tensor;
    const uint64_t n = in.bytes();
    if (p->slot && n <= p->slot->seg->capacity()) {
      m.read.result = TensorData{
          std::move(in.meta), Buffer::wrap(p->slot->seg->data(), static_cast<size_t>(n), p->lease)};
    } else {
      status = data_loss("a read result in a segment from " + url_.str() +
                         " answers a request that offered none, or overflows it");
    }
  }
  if (!status.ok()) {
    p->deliver_status(status);
  } else {
    switch (p->kind) {
      case Pending::kRead: {
        TensorData& d = *m.read.result;
        if (p->into.size() && d.bytes.data() != p->into.data()) {
          // A read_into() answered by bytes received elsewhere (a small or compressed reply).
          if (d.bytes.size() != p->into.size()) {
            p->deliver_status(data_loss("the server at " + url_.str() + " answered a read of " +
                                        std::to_string(p->into.size()) + " bytes with " +
                                        std::to_string(d.bytes.size())));
            break;
          }
          std::memcpy(p->into.data(), d.bytes.data(), d.bytes.size());
          d.bytes = p->into;
        }
        p->deliver_data(std::move(d));
        break;
      }
      case Pending::kSync: p->deliver_status(status); break;
      case Pending::kStats:
        p->stats().set_value(std::move(m.stats.stats));
        p->mark_done();
        break;
      case Pending::kGraph:
        p->graph().set_value(*m.graph.result);
        p->mark_done();
        break;
      case Pending::kCapability:
        p->exported().set_value(std::move(*m.capability.result));
        p->mark_done();
        break;
    }
  }
  p->reset(Pending::kRead, /*direct=*/true);  // its segment and promise go now
  reader_spare_ = std::move(node);
  // A caller waiting for another thread to read (wait_until) is woken; the usual reader is the
  // caller itself, and then there is nobody to wake and no lock to take.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (reader_waiters_.load() == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  reader_cv_.notify_all();
}

}  // namespace tw::client
