// The server-wide memory limit (tensorwire-server --max-memory): one atomic count of the bytes
// every session holds or has reserved (tensors, graphs, transfers, frames being received), so
// that no set of sessions can take the machine past it. A reservation is one compare-and-swap
// loop on the count, taken before the memory is allocated; a release is one subtraction. Held
// outside the count and looked at on each reservation: the buffer pool's cached free blocks
// (set_pool), given back to the system rather than refuse a reservation, and exported tensors
// that only their capabilities keep alive (set_pinned).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>

#include "core/buffer.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::server {

class MemoryBudget {
 public:
  explicit MemoryBudget(uint64_t limit = UINT64_MAX) : limit_(limit) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Set before the first session opens.
  void set_limit(uint64_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }
  uint64_t limit() const { return limit_.load(std::memory_order_relaxed); }
  uint64_t used() const { return used_.load(std::memory_order_relaxed); }

  // The pool whose cached free blocks count as held beside used() (the server's:
  // BufferPool::global()); set before the first session opens. Null: none counted.
  void set_pool(BufferPool* pool) { pool_ = pool; }
  uint64_t cached() const { return pool_ ? pool_->cached_bytes() : 0; }
  // What is held outside every session's count and reservations, looked at on each
  // reservation: the bytes capabilities alone keep alive (CapabilityTable::pinned_bytes). Set
  // before the first session opens.
  void set_pinned(std::function<uint64_t()> bytes) { pinned_ = std::move(bytes); }
  uint64_t pinned() const { return pinned_ ? pinned_() : 0; }

  // Reserves `bytes`, or reserves nothing and returns false when that would pass the limit.
  // Exact under concurrency: two sessions cannot both take the last free bytes. The pool's
  // cached blocks are the one part of what is held that can be given back at once, so they are
  // freed before a reservation is refused: the pool never makes an op fail.
  bool try_reserve(uint64_t bytes) {
    const uint64_t pinned = this->pinned();
    if (try_reserve_beside(bytes, pinned + cached())) return true;
    if (cached() == 0) return false;
    pool_->release_cached();
    return try_reserve_beside(bytes, pinned + cached());
  }
  // Counts bytes already allocated, past the limit if need be (a kernel's storage larger than
  // its outputs' element bytes, which was reserved for).
  void charge(uint64_t bytes) { used_.fetch_add(bytes, std::memory_order_relaxed); }
  void release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  bool try_reserve_beside(uint64_t bytes, uint64_t cached) {
    const uint64_t limit = this->limit();
    if (bytes > limit || cached > limit - bytes) return false;
    const uint64_t room = limit - bytes - cached;
    uint64_t have = used_.load(std::memory_order_relaxed);
    do {
      if (have > room) return false;
    } while (!used_.compare_exchange_weak(have, have + bytes, std::memory_order_relaxed));
    return true;
  }

  BufferPool* pool_ = nullptr;
  std::function<uint64_t()> pinned_;
  std::atomic<uint64_t> limit_;
  std::atomic<uint64_t> used_{0};
};

// 80% of physical memory: the default --max-memory, leaving the rest to the kernel, the page
// cache and the server's own buffers (frames being received, the client-visible replies).
uint64_t default_max_memory();

}  // namespace tw::server
TW_INTERNAL_END
