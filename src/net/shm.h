// A shared-memory segment for the same-host bulk path (unix:// URLs): an anonymous memfd the
// client creates, seals against shrinking and passes to the server over the Unix socket
// (SCM_RIGHTS), both sides mapping it. Tensor bytes then cross by one copy into or out of the
// mapping instead of through the socket (docs/protocol.md §9).
//
// Layout: a 64-byte header, then `capacity` data bytes (64-byte aligned). The header's only word
// is `consumed`, written by the server (never read there): the sequence number of the last
// upload it has copied out, which tells the client the segment may be written again.
//
// Trust: the server maps memory the client can still write. It therefore never computes on the
// mapping (an upload is copied out before it is validated and used, so no value can change under
// a kernel), never reads the header, and refuses a descriptor that is not a memfd sealed against
// shrinking (F_SEAL_SHRINK) or that is smaller than announced: a client truncating a mapped file
// would otherwise make the server's next access fault (SIGBUS).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::net {

class SharedSegment {
 public:
  static constexpr size_t kHeaderBytes = 64;

  // A new segment of `capacity` data bytes (client side): memfd, sized, sealed, mapped.
  static Result<std::shared_ptr<SharedSegment>> create(size_t capacity);
  // The peer's segment behind `fd` (server side), announced as `capacity` data bytes: checks
  // that it is a memfd sealed against shrinking and at least that large, then maps it. Takes
  // ownership of `fd` (closed on failure too).
  static Result<std::shared_ptr<SharedSegment>> adopt(int fd, size_t capacity);

  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  std::byte* data() const { return base_ + kHeaderBytes; }
  size_t capacity() const { return capacity_; }
  int fd() const { return fd_; }
  // The header word (see above). Release/acquire: the copy out happens before the store.
  std::atomic<uint64_t>& consumed() const {
    return *reinterpret_cast<std::atomic<uint64_t>*>(base_);
  }

 private:
  SharedSegment(int fd, std::byte* base, size_t capacity)
      : fd_(fd), base_(base), capacity_(capacity) {}
  int fd_;
  std::byte* base_;
  size_t capacity_;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "the header word is shared between processes");

// Copies `n` bytes: from 8 MiB in chunks on the intra-op thread pool, a small one or one of
// 128 MiB and more as one memcpy (shm.cc says why).
void parallel_copy(void* dst, const void* src, size_t n);

}  // namespace tw::net
TW_INTERNAL_END
