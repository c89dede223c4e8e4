// Refcounted host memory. A Buffer is a (storage, offset, size) slice; slices keep their parent
// storage alive, so received bytes can become tensor storage without a copy. Storage comes from
// a caching pool (BufferPool) because fresh pages are very slow to touch on our hosts: freed
// blocks go back to a size-class free list and are handed out again.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

class BufferPool;

struct Storage {
  std::byte* data = nullptr;
  size_t capacity = 0;         // bytes usable (the size class)
  BufferPool* pool = nullptr;  // null: owned by plain allocation, freed directly
  // Set for borrowed memory (Buffer::wrap): `data` belongs to whatever this keeps alive, and is
  // neither pooled nor freed here.
  std::shared_ptr<const void> external;
  ~Storage();
};

class Buffer {
 public:
  Buffer() = default;
  // Allocates `size` bytes from the global pool (uninitialised).
  static Buffer allocate(size_t size);
  // Allocates and zero-fills.
  static Buffer zeros(size_t size);
  // Copies `size` bytes from `src`.
  static Buffer copy_of(const void* src, size_t size);
  // Borrows `size` bytes at `data` without a copy; `keep_alive` holds the memory until the last
  // slice of the buffer is gone.
  static Buffer wrap(void* data, size_t size, std::shared_ptr<const void> keep_alive);

  std::byte* data() const { return storage_ ? storage_->data + offset_ : nullptr; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // A view of bytes [offset, offset + size) sharing this storage.
  Buffer slice(size_t offset, size_t size) const;
  template <class T>
  T* as() const {
    return reinterpret_cast<T*>(data());
  }
  // Identity and size of the underlying storage (shared by all slices of it).
  const void* storage_id() const { return storage_.get(); }
  size_t storage_bytes() const { return storage_ ? storage_->capacity : 0; }
  // The pool the storage came from (null: none, or plain allocation).
  const BufferPool* pool() const { return storage_ ? storage_->pool : nullptr; }
  // A hold on the storage that keeps data() valid, pointing at data() (no allocation).
  std::shared_ptr<const void> keep_alive() const {
    return std::shared_ptr<const void>(storage_, data());
  }
  // Whether this is the only Buffer of its storage (no other slice or copy refers to it).
  bool sole_owner() const { return storage_ && storage_.use_count() == 1; }

 private:
  Buffer(std::shared_ptr<Storage> s, size_t off, size_t size)
      : storage_(std::move(s)), offset_(off), size_(size) {}
  friend class BufferPool;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  size_t size_ = 0;
};

struct PoolStats {
  size_t bytes_in_use = 0;         // handed out and not yet returned
  size_t bytes_cached = 0;         // on free lists, ready for reuse
  uint64_t allocations = 0;        // requests served
  uint64_t fresh_allocations = 0;  // requests that needed new memory from the system
};

class BufferPool {
 public:
  // Memory kept on free lists beyond this is returned to the system (default 4 GiB; env
  // TW_POOL_CACHE_BYTES). Bounds what an idle process holds.
  explicit BufferPool(size_t max_cached_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  static BufferPool& global();
  Buffer allocate(size_t size);
  PoolStats stats() const;
  // stats().bytes_cached without the pool's lock (the server's memory budget reads it on every
  // reservation).
  size_t cached_bytes() const { return cached_.load(std::memory_order_relaxed); }
  void release_cached();  // frees every cached block

  // The size class a request is rounded up to: 4 classes per power of two above 4 KiB, so at
  // most 25% of a block is slack.
  static size_t size_class(size_t size);

 private:
  friend struct Storage;
  void give_back(std::byte* data, size_t capacity);
  static std::byte* system_alloc(size_t capacity);
  static void system_free(std::byte* data, size_t capacity);

  mutable std::mutex mu_;
  size_t max_cached_;
  PoolStats stats_;
  std::atomic<size_t> cached_{0};  // stats_.bytes_cached, stored under mu_ as it changes
  // free lists by size class; small pools of blocks of equal capacity
  std::vector<std::pair<size_t, std::vector<std::byte*>>> free_;
};

}  // namespace tw
TW_INTERNAL_END
