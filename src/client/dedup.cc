// Deduplicated uploads (protocol 9; server/dedup.h keeps the bytes): a large upload first names
// its bytes by content hash, and only when the server does not hold them are they sent. The
// question costs a round trip, which is why only uploads of at least Options::kDedupMinBytes ask:
// at 10 Gbit/s 4 MiB take 3.4 ms on the wire, more than a round trip to anything but a distant
// host. The answer is waited for before anything later is queued, so no op can reach the server
// before the tensor it reads.
#include "client/connection.h"
#include "protocol/content_hash.h"

namespace tw::client {

namespace proto = protocol;

Result<bool> Connection::upload_by_hash(const ir::FromHost& up) {
  const proto::ContentHash h = proto::content_hash(up.data.data.data(), up.data.data.size());
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
  wait_until([&] { return done.load(std::memory_order_acquire); });
  if (st.ok()) return true;
  if (st.code() == StatusCode::kNotFound) return false;
  return st;
}

}  // namespace tw::client
