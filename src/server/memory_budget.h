// The server-wide memory limit (tensorwire-server --max-memory): one atomic count of the bytes
// every session holds or has reserved, so that no set of sessions can take the machine past
// it. Lock-free: a reservation is one compare-and-swap loop on the count, taken before the
// memory is allocated; a release is one subtraction.
#pragma once
#include <atomic>
#include <cstdint>

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

  // Reserves `bytes`, or reserves nothing and returns false when that would pass the limit.
  // Exact under concurrency: two sessions cannot both take the last free bytes.
  bool try_reserve(uint64_t bytes) {
    const uint64_t limit = this->limit();
    uint64_t have = used_.load(std::memory_order_relaxed);
    do {
      if (bytes > limit || have > limit - bytes) return false;
    } while (!used_.compare_exchange_weak(have, have + bytes, std::memory_order_relaxed));
    return true;
  }
  // Counts bytes already allocated, past the limit if need be (a kernel's storage larger than
  // its outputs' element bytes, which was reserved for).
  void charge(uint64_t bytes) { used_.fetch_add(bytes, std::memory_order_relaxed); }
  void release(uint64_t bytes) { used_.fetch_sub(bytes, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> limit_;
  std::atomic<uint64_t> used_{0};
};

// 80% of physical memory: the default --max-memory, leaving the rest to the kernel, the page
// cache and the server's own buffers (frames being received, the client-visible replies).
uint64_t default_max_memory();

}  // namespace tw::server
