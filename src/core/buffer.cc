#include "core/buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "core/env.h"

namespace tw {
namespace {
constexpr size_t kAlignment = 64;              // cache line; enough for AVX-512 loads
constexpr size_t kHugePage = size_t{2} << 20;  // blocks this large ask for transparent huge pages
}  // namespace

Storage::~Storage() {
  if (!data || external) return;
  if (pool) {
    pool->give_back(data, capacity);
  } else {
    BufferPool::system_free(data, capacity);
  }
}

Buffer Buffer::allocate(size_t size) { return BufferPool::global().allocate(size); }

Buffer Buffer::zeros(size_t size) {
  Buffer b = allocate(size);
  if (size) std::memset(b.data(), 0, size);
  return b;
}

Buffer Buffer::copy_of(const void* src, size_t size) {
  Buffer b = allocate(size);
  if (size) std::memcpy(b.data(), src, size);
  return b;
}

Buffer Buffer::wrap(void* data, size_t size, std::shared_ptr<const void> keep_alive) {
  auto s = std::make_shared<Storage>();
  s->data = static_cast<std::byte*>(data);
  s->capacity = size;
  s->external = std::move(keep_alive);
  return Buffer(std::move(s), 0, size);
}

Buffer Buffer::slice(size_t offset, size_t size) const {
  if (offset > size_ || size > size_ - offset) return Buffer();
  return Buffer(storage_, offset_ + offset, size);
}

BufferPool::BufferPool(size_t max_cached_bytes) : max_cached_(max_cached_bytes) {}

BufferPool::~BufferPool() { release_cached(); }

BufferPool& BufferPool::global() {
  // Leaked on purpose: tensors held by static objects may be freed after main returns.
  static BufferPool* pool = [] {
    size_t cap = size_t{4} << 30;
    if (auto n = env_number(Env::kPOOL_CACHE_BYTES)) cap = static_cast<size_t>(*n);
    return new BufferPool(cap);
  }();
  return *pool;
}

size_t BufferPool::size_class(size_t size) {
  if (size <= 4096) {
    size_t c = 64;
    while (c < size) c *= 2;
    return c;
  }
  size_t p = 4096;
  while (p * 2 < size) p *= 2;  // p < size <= 2p
  size_t step = p / 4;
  return (size + step - 1) / step * step;
}

std::byte* BufferPool::system_alloc(size_t capacity) {
  if (capacity >= kHugePage) {
    void* p = nullptr;
    if (posix_memalign(&p, kHugePage, capacity) != 0) return nullptr;
    madvise(p, capacity, MADV_HUGEPAGE);  // best effort: ignored where THP is off
    return static_cast<std::byte*>(p);
  }
  return static_cast<std::byte*>(std::aligned_alloc(kAlignment, capacity));
}

void BufferPool::system_free(std::byte* data, size_t) { std::free(data); }

Buffer BufferPool::allocate(size_t size) {
  size_t cap = size_class(std::max<size_t>(size, 1));
  std::byte* data = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    for (auto& [c, list] : free_) {
      if (c == cap && !list.empty()) {
        data = list.back();
        list.pop_back();
        stats_.bytes_cached -= cap;
        cached_.store(stats_.bytes_cached, std::memory_order_relaxed);
        break;
      }
    }
    if (!data) ++stats_.fresh_allocations;
    stats_.bytes_in_use += cap;
  }
  if (!data) {
    data = system_alloc(cap);
    if (!data) {
      release_cached();
      data = system_alloc(cap);
    }
    if (!data) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.bytes_in_use -= cap;
      throw std::bad_alloc();
    }
  }
  auto s = std::make_shared<Storage>();
  s->data = data;
  s->capacity = cap;
  s->pool = this;
  return Buffer(std::move(s), 0, size);
}

void BufferPool::give_back(std::byte* data, size_t capacity) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use -= capacity;
    if (stats_.bytes_cached + capacity <= max_cached_) {
      stats_.bytes_cached += capacity;
      cached_.store(stats_.bytes_cached, std::memory_order_relaxed);
      for (auto& [c, list] : free_) {
        if (c == capacity) {
          list.push_back(data);
          return;
        }
      }
      free_.push_back({capacity, {data}});
      return;
    }
  }
  system_free(data, capacity);
}

PoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void BufferPool::release_cached() {
  std::vector<std::pair<size_t, std::vector<std::byte*>>> lists;
  {
    std::lock_guard<std::mutex> lock(mu_);
    lists.swap(free_);
    stats_.bytes_cached = 0;
    cached_.store(0, std::memory_order_relaxed);
  }
  for (auto& [c, list] : lists) {
    for (std::byte* p : list) system_free(p, c);
  }
}

}  // namespace tw
