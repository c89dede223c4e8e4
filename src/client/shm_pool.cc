// The connection's same-host shared-memory path (protocol 5; Connection::kShmMinBytes): the pool
// of segments, their attachment, staged uploads and uploads from a segment.
#include <bit>

#include "client/connection.h"

namespace tw::client {

namespace proto = protocol;

bool Connection::shm_enabled() {
  if (!options_.shm || url_.scheme != net::Url::Scheme::kUnix) return false;
  if (!ensure_connected().ok()) return false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (welcome_.version < proto::kSegmentsSince || !stream_->passes_fds()) return false;
  }
  std::lock_guard<std::mutex> shm(shm_mu_);
  return shm_refused_.ok();
}

std::shared_ptr<Connection::ShmSlot> Connection::claim_segment(size_t n,
                                                               std::shared_ptr<const void>* lease) {
  if (!shm_enabled()) return nullptr;
  std::lock_guard<std::mutex> shm(shm_mu_);
  if (!shm_refused_.ok()) return nullptr;
  // The smallest idle segment that holds n; failing that, a new one while the pool has room,
  // or the smallest idle one replaced by a larger one.
  std::shared_ptr<ShmSlot> slot, spare;
  for (const auto& s : shm_slots_) {
    if (!s->idle()) continue;
    if (s->seg->capacity() >= n && (!slot || s->seg->capacity() < slot->seg->capacity())) slot = s;
    if (!spare || s->seg->capacity() < spare->seg->capacity()) spare = s;
  }
  if (!slot) {
    if (shm_slots_.size() >= kMaxSegments && !spare) return nullptr;  // all busy: the socket
    // Powers of two, so that a transfer slightly larger than the last still finds its segment.
    auto made = net::SharedSegment::create(std::bit_ceil(std::max(n, kShmMinBytes)));
    Status st = made.ok() ? Status::OK() : made.status();
    const uint64_t id = shm_slots_.size() < kMaxSegments ? next_segment_ : spare->id;
    if (st.ok()) st = attach_segment(id, *made);
    if (!st.ok()) {
      // The server may have dropped the id being replaced: that slot is not used again.
      if (shm_slots_.size() >= kMaxSegments) std::erase(shm_slots_, spare);
      // Over a limit (the segments' allowance, --max-memory): this transfer takes the socket,
      // a later one may fit. Anything else (no memfd here, a server that refuses descriptors):
      // the socket from now on.
      if (st.code() != StatusCode::kResourceExhausted) shm_refused_ = st;
      return nullptr;
    }
    if (shm_slots_.size() < kMaxSegments) {
      slot = std::make_shared<ShmSlot>();
      slot->id = next_segment_++;
      shm_slots_.push_back(slot);
    } else {
      slot = spare;  // the server replaced the segment of that id
      slot->sent.store(0);
    }
    slot->seg = std::move(made).value();
  }
  slot->busy.store(true, std::memory_order_release);
  // The hold: released when its last copy goes (the result's Buffer, host_copy's Buffer).
  *lease = std::shared_ptr<const void>(slot->seg->data(), [slot, seg = slot->seg](const void*) {
    slot->busy.store(false, std::memory_order_release);
  });
  return slot;
}

Status Connection::attach_segment(uint64_t slot_id,
                                  const std::shared_ptr<net::SharedSegment>& seg) {
  std::future<Status> fut;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TW_RETURN_NOT_OK(ready_locked());
    flush_locked();  // (no queued task names a segment being replaced: only idle ones are)
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kSync, &p, &done);
    fut = p->status().get_future();
    proto::OutFrame f;
    proto::encode_attach_segment({req, slot_id, seg->capacity()}, f);
    // The descriptor travels with the next bytes written: this frame's, or those of a frame
    // still being written before it; either way it is held on the server when the frame is read.
    if (!stream_->queue_fd(seg->fd())) {
      pending_.erase(req);
      return unavailable("cannot pass a shared-memory segment to " + url_.str());
    }
    ++counters_.frames_out;
    ++counters_.round_trips;
    counters_.bytes_out += f.payload_size() + 4;
    push_frame_locked(std::move(f), seg);
    if (!writer_.writing()) pump_locked();
  }
  wait(fut, &done, "shm-attach");
  return fut.get();
}

Buffer Connection::host_copy(const void* data, size_t n) {
  if (Buffer b = hash_in_place(data, n); !b.empty()) return b;
  return copy_for_upload(data, n);
}

Buffer Connection::copy_for_upload(const void* data, size_t n) {
  std::shared_ptr<const void> lease;
  std::shared_ptr<ShmSlot> slot = n >= kShmMinBytes ? claim_segment(n, &lease) : nullptr;
  if (!slot) return Buffer::copy_of(data, n);
  net::parallel_copy(slot->seg->data(), data, n);
  return Buffer::wrap(slot->seg->data(), n, std::move(lease));
}

std::shared_ptr<Connection::ShmSlot> Connection::staged_slot(const Buffer& b) {
  std::lock_guard<std::mutex> shm(shm_mu_);
  for (const auto& s : shm_slots_) {
    if (s->seg->data() == b.data() && s->busy.load(std::memory_order_acquire)) return s;
  }
  return nullptr;
}

Status Connection::submit_from_segment(const ir::FromHost& op, ShmSlot& slot) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (!drops_.empty()) queue_drops_locked();
  const proto::SegmentRange range{slot.id, 0, op.data.data.size(), slot.sent.load() + 1};
  add_task_locked(proto::FromSegmentTask{op.out.id, {op.shape, op.dtype}, range});
  // Not reused until the server has copied these bytes out and says so in `consumed`.
  slot.sent.store(range.sequence);
  added_op_locked();
  return Status::OK();
}

}  // namespace tw::client
