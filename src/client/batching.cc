// The connection's batching of fire-and-forget tasks (ops, drops, graph runs, moves,
// collectives): queued into one frame within the server's frame limit, sent on a count, a byte
// size, the idle timer or a flush, written from the calling thread.
#include <algorithm>

#include "client/connection.h"

namespace tw::client {

namespace proto = protocol;

Status Connection::submit_op(const ir::Op& op) {
  if (const auto* up = std::get_if<ir::FromHost>(&op);
      up && options_.dedup && up->data.data.size() >= options_.dedup_min_bytes) {
    return submit_upload(op, *up);  // client/dedup.cc
  }
  return submit_plain(op);
}

Status Connection::submit_plain(const ir::Op& op) {
  if (const auto* up = std::get_if<ir::FromHost>(&op); up && up->data.data.size() >= kShmMinBytes) {
    if (std::shared_ptr<ShmSlot> slot = staged_slot(up->data.data)) {
      return submit_from_segment(*up, *slot);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (!drops_.empty()) queue_drops_locked();
  uint64_t before = batch_.payload_size();
  batch_.add_op(op);
  if (batch_.payload_size() > frame_limit_) {
    // The op does not fit beside the tasks already queued: send those first. An op too large
    // for any frame (an upload past the server's --max-frame) is refused here, before the
    // server would have to drop the session for it.
    uint64_t alone = proto::BatchWriter::kEmptyBytes + batch_.payload_size() - before;
    batch_.remove_last();
    if (alone > frame_limit_) {
      return resource_exhausted(ir::op_name(op) + ": the op takes " + std::to_string(alone) +
                                " bytes on the wire, over the limit of " +
                                std::to_string(frame_limit_) +
                                " bytes per frame of the server at " + url_.str() +
                                " (tensorwire-server --max-frame); send the data in smaller pieces "
                                "and cat them there, or raise the server's limit");
    }
    send_batch_locked();
    batch_.add_op(op);
  }
  added_op_locked();
  return Status::OK();
}

void Connection::added_op_locked() {
  ++counters_.ops;
  ++batch_ops_;
  if (batch_ops_ >= batch_limit_ || batch_.payload_size() >= options_.batch_bytes) {
    flush_locked();
    batch_limit_ = std::min(2 * batch_limit_, options_.batch_ops);
  } else {
    arm_idle_timer_locked();
  }
}

Status Connection::run_graph(ir::GraphId graph, std::vector<ir::TensorId> inputs,
                             std::vector<ir::TensorId> outputs) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  const std::string what = "run_graph: " + std::to_string(inputs.size()) + " inputs and " +
                           std::to_string(outputs.size()) + " outputs take";
  return queue_task_locked(proto::RunGraphTask{graph, std::move(inputs), std::move(outputs)}, what);
}

Status Connection::move_in(proto::TaskKind kind, ir::TensorId id, const TensorMeta& meta,
                           const proto::TensorSource& source) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (kind == proto::TaskKind::kImport) {
    return queue_task_locked(proto::ImportTask{id, meta, source}, "move: the task takes");
  }
  return queue_task_locked(proto::MoveLocalTask{id, meta, source}, "move: the task takes");
}

Status Connection::export_as(ir::TensorId id, const std::string& ticket) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  TW_RETURN_NOT_OK(queue_task_locked(proto::ExportAsTask{id, ticket}, "export: the task takes"));
  // Sent now: the destination's pull waits at the server for it.
  flush_locked();
  return Status::OK();
}

Status Connection::submit_collective(const proto::CollectiveSpec& c) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (welcome_.version < proto::kMovesSince) {
    return unimplemented("collectives need protocol 3; the server at " + url_.str() + " speaks " +
                         std::to_string(welcome_.version));
  }
  return queue_task_locked(proto::CollectiveTask{c}, "collective: the task takes");
}

template <class Task>
Status Connection::queue_task_locked(const Task& task, const std::string& what) {
  if (!drops_.empty()) queue_drops_locked();
  const uint64_t bytes = batch_.task_bytes(task);
  if (proto::BatchWriter::kEmptyBytes + bytes > frame_limit_) {
    return resource_exhausted(what + " " + std::to_string(bytes) + " bytes, over the limit of " +
                              std::to_string(frame_limit_) + " bytes per frame of the server at " +
                              url_.str() + " (tensorwire-server --max-frame)");
  }
  make_room_locked(bytes);
  batch_.add(task);
  added_op_locked();
  return Status::OK();
}

void Connection::drop(ir::TensorId id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != State::kConnected) return;  // nothing held on a server we are not connected to
  drops_.push_back(id);
  if (drops_.size() >= options_.batch_ops)
    flush_locked();
  else
    arm_idle_timer_locked();
}

void Connection::flush_locked() {
  queue_drops_locked();
  send_batch_locked();
}

void Connection::queue_drops_locked() {
  // Drops go after every op queued so far, so they never overtake the ops that use the tensors,
  // and before the next op, so the server frees the memory where the program let go of it: the
  // ops that follow reuse it while it is still in cache, as on the local device (held to the
  // end of the batch instead, a training step's intermediates all stayed live and the MLP of
  // bench/train_bench.cc ran about 10% slower remote than local). Split into as many tasks (and
  // frames) as the server's frame limit requires.
  // Packed (protocol 4), sorted ids take about a byte each.
  const uint64_t id_bytes = batch_.id_bytes_max(), drop_header = 1 + id_bytes;
  if (batch_.packed_ids()) std::sort(drops_.begin(), drops_.end());
  size_t i = 0;
  while (i < drops_.size()) {
    uint64_t used = batch_.payload_size() + drop_header;
    uint64_t room = used < frame_limit_ ? (frame_limit_ - used) / id_bytes : 0;
    if (room == 0 && !batch_.empty()) {
      send_batch_locked();
      continue;
    }
    size_t n =
        static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(room, 1), drops_.size() - i));
    if (i == 0 && n == drops_.size()) {
      batch_.add_drop(drops_);
    } else {
      batch_.add_drop(std::vector<ir::TensorId>(drops_.begin() + static_cast<ptrdiff_t>(i),
                                                drops_.begin() + static_cast<ptrdiff_t>(i + n)));
    }
    i += n;
  }
  drops_.clear();
}

void Connection::send_batch_locked() {
  if (batch_.empty()) return;
  proto::OutFrame f = batch_.take();
  if (compress_) f = proto::maybe_compress(std::move(f), proto::kCompressedClientType);
  batch_ops_ = 0;
  if (awaiting_dedup_ != 0) {
    // Behind an upload by hash not yet answered (client/dedup.cc): held, in order.
    held_bytes_ += f.payload_size();
    held_.push_back({std::move(f), 0});
  } else {
    send_frame_locked(std::move(f));
  }
  if (options_.window_bytes && writer_.queued_bytes() + held_bytes_ > options_.window_bytes)
    wait_for_window_locked();
}

void Connection::send_frame_locked(proto::OutFrame f) {
  ++counters_.frames_out;
  counters_.bytes_out += f.payload_size() + 4;
  push_frame_locked(std::move(f));
  if (!writer_.writing()) pump_locked();
}

void Connection::pump_locked() {
  switch (writer_.pump(*stream_)) {
    case net::FrameWriter::Step::kIdle: return;
    case net::FrameWriter::Step::kAsync:
      writer_.set_writing(true);
      kick_io_locked();  // the write's completions need the reactor
      stream_->async_write(writer_.pending(),
                           [this, gen = gen_](const asio::error_code& ec, size_t) {
                             std::unique_lock<std::mutex> lock(mu_);
                             if (gen != gen_)
                               return;  // a dropped stream's write (a resume replaced it)
                             if (!ec) {
                               writer_.async_done();
                               pump_locked();
                               window_cv_.notify_all();
                               return;
                             }
                             lock.unlock();
                             send_lost(send_failed(ec), gen);
                           });
      return;
    case net::FrameWriter::Step::kError: {
      // fail_all takes the lock this caller holds: finish on the I/O thread.
      Status why = send_failed(writer_.error());
      kick_io_locked();
      asio::post(io_, [this, why, gen = gen_] { send_lost(why, gen); });
      return;
    }
  }
}

void Connection::send_lost(Status why, uint64_t gen) {
  std::unique_lock<std::mutex> lock(mu_);
  if (gen != gen_ || state_ != State::kConnected) return;
  arm_watch_locked();  // somebody reads: a waiting caller, or else the I/O thread
  lock.unlock();
  auto grace = std::make_shared<asio::steady_timer>(io_);
  grace->expires_after(std::chrono::milliseconds(kSendLostGraceMs));
  grace->async_wait([this, grace, why = std::move(why), gen](const asio::error_code&) {
    lost(why, gen, /*close_stream=*/true);
  });
}

void Connection::make_room_locked(uint64_t bytes) {
  if (!batch_.empty() && batch_.payload_size() + bytes > frame_limit_) send_batch_locked();
}

// The timers are set from callers' threads as well as the I/O thread; every use of them holds
// mu_, which serialises them (Asio's own timer queue has its lock). Setting one from here costs
// a timerfd update, not a wake-up of the I/O thread.
void Connection::arm_idle_timer_locked() {
  if (timer_armed_) return;
  timer_armed_ = true;
  idle_deadline_ =
      std::chrono::steady_clock::now() + std::chrono::microseconds(options_.idle_flush_us);
  if (io_parked_) park_cv_.notify_one();  // it waits until the deadline at most
  timer_->expires_after(std::chrono::microseconds(options_.idle_flush_us));
  timer_->async_wait([this](asio::error_code) {
    std::lock_guard<std::mutex> lock(mu_);
    timer_armed_ = false;
    if (state_ == State::kConnected) flush_locked();
  });
}

}  // namespace tw::client
