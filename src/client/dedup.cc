// Deduplicated uploads (protocol 9; server/dedup.h keeps the bytes): a large upload first names
// its bytes by content hash, and only when the server does not hold them are they sent. The
// question costs a round trip, which is why only uploads of at least Options::kDedupMinBytes ask:
// at 10 Gbit/s 4 MiB take 3.4 ms on the wire, more than a round trip to anything but a distant
// host. The answer is waited for before anything later is queued, so no op can reach the server
// before the tensor it reads. The bytes are hashed where the caller has them (hash_in_place,
// host_copy's first step) and borrowed: on a hit they are never copied, on a miss submit_op copies
// them before it returns (so a re-upload costs the hash, ~2 cores at memory speed, and the round
// trip).
#include "client/connection.h"

namespace tw::client {

namespace proto = protocol;

Buffer Connection::hash_in_place(const void* data, size_t n) {
  if (!options_.dedup || n < Options::kDedupMinBytes) return Buffer();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kConnected && welcome_.version < 9) return Buffer();
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

Result<bool> Connection::upload_by_hash(const ir::FromHost& up, const proto::ContentHash& h) {
  Status st;
  std::atomic<bool> done{false};
  {
    std::lock_guard<std::mutex> lock(mu_);
    TW_RETURN_NOT_OK(ready_locked());
    if (welcome_.version < 9) return false;
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

}  // namespace tw::client
