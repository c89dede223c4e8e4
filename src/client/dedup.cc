// Deduplicated uploads (protocol 9; server/dedup.h keeps the bytes): a large upload first names
// its bytes by content hash (XXH3-128), and only when the server does not hold them are they
// sent. Only uploads of at least Options::dedup_min_bytes ask (kDedupMinBytes unless
// TW_DEDUP_MIN_BYTES says otherwise): at 10 Gbit/s 4 MiB take 3.4 ms on the wire, more than a
// round trip to anything but a distant host.
//
// Two ways, by who holds the bytes:
// - The client holds them (a Buffer that stays valid and unchanged: a host tensor's storage in
//   `t.to(remote)`, a vector handed over by `from_vector(std::move(v), ...)`): the caller goes on
//   at once (upload_by_hash_async). The connection's hasher thread hashes the bytes and the
//   question goes when it is at the front of the line (hashed_locked). Every frame made after the
//   upload is held back (send_batch_locked) until the answer, so no op reaches the server before
//   the tensor it may read; on a hit the held frames go, on a miss the upload's own frame (made at
//   submit, so that a frame-size refusal comes then) goes first. The reader of the moment (the
//   I/O thread, or a caller waiting for a reply) acts on the answer (dedup_answered_locked).
//   Order, run-once and resumes are those of the frames: the question is an ordinary numbered
//   frame, held frames are numbered when sent. The cost is the hash and one round trip during
//   which the server idles (what follows the upload waits for the answer), against the caller's
//   wait for both before. close() sends and runs what is held first (finish_dedups).
// - The bytes are only lent for the call (from_bytes, from_vector of a span, from_blob: the
//   caller may change or free them once it returns): they are hashed where they are
//   (hash_in_place, host_copy's first step) and borrowed, and the caller waits for the answer
//   (upload_by_hash): on a hit they are never copied, on a miss submit_upload copies them before
//   it returns. Keeping them without waiting would need that copy (64 MiB: 5-10 ms of fresh
//   memory on our VMs), more than the round trip it saves on most links.
#include "client/connection.h"

namespace tw::client {

namespace proto = protocol;

Buffer Connection::hash_in_place(const void* data, size_t n) {
  if (!options_.dedup || n < options_.dedup_min_bytes) return Buffer();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kConnected && welcome_.version < proto::kDedupSince) return Buffer();
  }
  auto h = std::make_shared<const proto::ContentHash>(proto::content_hash(data, n));
  std::lock_guard<std::mutex> lock(staged_mu_);
  std::erase_if(staged_hashes_, [](const StagedHash& s) { return s.hash.expired(); });
  // Borrowed: the caller's bytes stay valid until the upload that follows (from_bytes, from_blob
  // submit it before they return), which copies them if it must send them.
  Buffer b = Buffer::wrap(const_cast<void*>(data), n, h);
  staged_hashes_.push_back({b.storage_id(), h});
  return b;
}

std::optional<proto::ContentHash> Connection::staged_hash(const Buffer& b) {
  std::lock_guard<std::mutex> lock(staged_mu_);
  for (auto it = staged_hashes_.begin(); it != staged_hashes_.end(); ++it) {
    if (it->storage != b.storage_id()) continue;
    std::shared_ptr<const proto::ContentHash> h = it->hash.lock();
    staged_hashes_.erase(it);
    if (h && b.data() != nullptr) return *h;
    return std::nullopt;
  }
  return std::nullopt;
}

Status Connection::submit_upload(const ir::Op& op, const ir::FromHost& up) {
  const Buffer& bytes = up.data.data;
  if (const std::optional<proto::ContentHash> staged = staged_hash(bytes)) {
    TW_ASSIGN_OR_RETURN(bool made, upload_by_hash(up, *staged));
    if (made) return Status::OK();
    // The bytes are still the caller's (hash_in_place): copy them now, as host_copy would have.
    ir::Op copied = op;
    std::get<ir::FromHost>(copied).data.data = copy_for_upload(bytes.data(), bytes.size());
    return submit_plain(copied);
  }
  TW_ASSIGN_OR_RETURN(bool queued, upload_by_hash_async(up));
  return queued ? Status::OK() : submit_plain(op);
}

Result<bool> Connection::upload_by_hash(const ir::FromHost& up, const proto::ContentHash& h) {
  Status st;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TW_RETURN_NOT_OK(ready_locked());
    if (welcome_.version < proto::kDedupSince) return false;
    if (!drops_.empty()) queue_drops_locked();
    Pending* p = nullptr;
    uint64_t req = add_pending_locked(Pending::kSync, &p, &done, /*direct=*/true);
    p->status_out = &st;
    add_task_locked(proto::UploadByHashTask{req, up.out.id, {up.shape, up.dtype}, h.lo, h.hi});
    ++counters_.ops;
    ++counters_.round_trips;
    flush_locked();
  }
  wait_until([&] { return done.load(std::memory_order_acquire); }, "upload-by-hash");
  if (st.ok()) return true;
  if (st.code() == StatusCode::kNotFound) return false;
  return st;
}

Result<bool> Connection::upload_by_hash_async(const ir::FromHost& up) {
  std::lock_guard<std::mutex> lock(mu_);
  TW_RETURN_NOT_OK(ready_locked());
  if (welcome_.version < proto::kDedupSince) return false;
  // The frame that uploads the bytes on a miss, made now: an upload no frame can carry is
  // refused here (by submit_plain, which says why), not when the answer comes.
  proto::BatchWriter alone;
  alone.set_packed_ids(batch_.packed_ids());
  alone.add_op(up);
  if (alone.payload_size() > frame_limit_) return false;
  if (!hasher_.joinable()) {
    try {
      hasher_ = std::thread([this] { hash_loop(); });
      ::pthread_setname_np(hasher_.native_handle(), "tw-client-hash");
    } catch (const std::system_error&) {
      return false;  // no thread: hashed and asked as lent bytes are (upload_by_hash)
    }
  }
  // What was queued before goes first (sent, or held behind an earlier question).
  flush_locked();
  // Not a Pending: the answer is taken by on_message (awaiting_dedup_), and a failed connection
  // lets go of it in fail_all.
  const uint64_t req = next_request_++;
  restart_batches_locked();  // the server idles until the answer: start small after it
  ++counters_.ops;
  dedups_.push_back(
      {req, proto::UploadByHashTask{0, up.out.id, {up.shape, up.dtype}, 0, 0}, alone.take()});
  dedups_.back().ask.request_id = req;
  if (awaiting_dedup_ == 0) {
    awaiting_dedup_ = req;  // asked once hashed; what follows is held from now on
  } else {
    held_.push_back({proto::OutFrame(), req});  // its place in line
  }
  hash_jobs_.emplace_back(req, up.data.data);
  hash_cv_.notify_one();
  return true;
}

void Connection::hash_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    hash_cv_.wait(lock, [&] { return hasher_stop_ || !hash_jobs_.empty() || !to_free_.empty(); });
    if (hasher_stop_) return;
    if (!to_free_.empty()) {
      std::vector<proto::OutFrame> going;
      going.swap(to_free_);
      lock.unlock();
      going.clear();
      lock.lock();
      continue;
    }
    auto [req, bytes] = std::move(hash_jobs_.front());
    hash_jobs_.pop_front();
    lock.unlock();
    const proto::ContentHash h = proto::content_hash(bytes.data(), bytes.size());
    bytes = Buffer();
    lock.lock();
    hashed_locked(req, h);
  }
}

void Connection::hashed_locked(uint64_t request, const proto::ContentHash& h) {
  for (DedupInFlight& d : dedups_) {
    if (d.request != request) continue;
    d.ask.hash_lo = h.lo;
    d.ask.hash_hi = h.hi;
    d.hashed = true;
    if (awaiting_dedup_ == request && state_ == State::kConnected) ask_front_locked();
    return;
  }  // (none: the connection failed meanwhile)
}

void Connection::ask_front_locked() {
  proto::BatchWriter w;
  w.set_packed_ids(batch_.packed_ids());
  w.add(dedups_.front().ask);
  send_frame_locked(w.take());
}

void Connection::dedup_answered_locked(bool hit) {
  DedupInFlight d = std::move(dedups_.front());
  dedups_.pop_front();
  awaiting_dedup_ = 0;
  if (!hit) {
    if (compress_)
      d.upload = proto::maybe_compress(std::move(d.upload), proto::kCompressedClientType);
    send_frame_locked(std::move(d.upload));
  } else if (!hasher_stop_) {
    to_free_.push_back(std::move(d.upload));
    hash_cv_.notify_one();
  }
  while (!held_.empty() && awaiting_dedup_ == 0) {
    HeldFrame f = std::move(held_.front());
    held_.pop_front();
    if (f.dedup != 0) {
      awaiting_dedup_ = f.dedup;  // dedups_.front()'s
      if (dedups_.front().hashed) ask_front_locked();
      break;
    }
    held_bytes_ -= f.frame.payload_size();
    send_frame_locked(std::move(f.frame));
  }
  window_cv_.notify_all();
}

void Connection::drop_dedups_locked() {
  dedups_.clear();
  held_.clear();
  held_bytes_ = 0;
  awaiting_dedup_ = 0;
  hash_jobs_.clear();
  to_free_.clear();
}

void Connection::finish_dedups() {
  bool outstanding;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outstanding = state_ == State::kConnected && awaiting_dedup_ != 0;
  }
  // The frames held behind an answer are the program's work: sent and run before the session
  // ends, as every frame queued before a close is.
  if (outstanding) (void)sync();
  {
    std::lock_guard<std::mutex> lock(mu_);
    hasher_stop_ = true;
    hash_cv_.notify_all();
  }
  if (hasher_.joinable()) hasher_.join();
}

}  // namespace tw::client
