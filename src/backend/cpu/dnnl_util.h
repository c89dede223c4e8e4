// oneDNN plumbing shared by the MatMul and Conv2d kernels: one engine and one stream per process,
// an LRU cache of created primitives keyed by problem shape (creating a primitive costs far more
// than running a small one), pooled scratchpads, and control of oneDNN's thread count.
//
// Debian's oneDNN runs on OpenMP. Its thread count is a per-thread OpenMP setting, so every call
// into oneDNN first sets it on the calling thread to tw's intra-op count (dnnl_sync_threads).
// Primitives are immutable once created and may run on several threads at once; the scratchpad
// is owned by each call (scratchpad_mode::user) rather than by the library, which keeps
// concurrent execution safe and lets the buffer pool recycle it.
#pragma once
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::cpu {

dnnl::engine& dnnl_engine();
dnnl::stream& dnnl_stream();

// Sets oneDNN's thread count on the calling thread to get_num_threads() and returns it.
int dnnl_sync_threads();

// Multiply-adds below which a oneDNN problem runs on the calling thread alone. Such a problem
// takes tens of microseconds on one core, about what waking OpenMP's threads and meeting them
// at the barrier costs; on a loaded machine (more runnable threads than cores) the wait is far
// longer, as the spinning threads take turns with the ones that have work: perf on the digits
// CNN's training step showed 85% of its CPU time in libgomp's spin loop.
constexpr int64_t kDnnlSerialMacs = int64_t{1} << 23;

// The thread count for a problem of `macs` multiply-adds, set on the calling thread while
// alive: 1 below kDnnlSerialMacs (the count it found is put back at the end, as OpenMP's setting
// is per thread and the torch backend, in the same process, reads it too), else
// dnnl_sync_threads()'s. A primitive made while it lives is made for threads(); key caches on it.
class DnnlThreadsFor {
 public:
  explicit DnnlThreadsFor(int64_t macs);
  ~DnnlThreadsFor();
  DnnlThreadsFor(const DnnlThreadsFor&) = delete;
  DnnlThreadsFor& operator=(const DnnlThreadsFor&) = delete;
  int threads() const { return threads_; }

 private:
  int threads_ = 1;
  int saved_ = 0;  // 0: nothing to put back
};

// A primitive attribute with a user-owned scratchpad; every primitive tw creates uses it.
dnnl::primitive_attr dnnl_attr();

// Turns an exception from oneDNN into a Status naming the op.
Status dnnl_status(const char* op, const std::exception& e);

// Runs `prim` on the process stream with a scratchpad of `scratchpad` (from the buffer pool)
// added to `args`. The caller has called dnnl_sync_threads on this thread.
Status dnnl_run(const char* op, const dnnl::primitive& prim, const dnnl::memory::desc& scratchpad,
                std::unordered_map<int, dnnl::memory> args);

// A reorder primitive between two layouts, with its scratchpad.
struct DnnlReorder {
  dnnl::reorder prim;
  dnnl::memory::desc scratchpad;
};
DnnlReorder dnnl_reorder(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

// Runs `r` from `from` into `to` (dnnl_run's contract).
Status dnnl_run_reorder(const char* op, const DnnlReorder& r, const dnnl::memory& from,
                        const dnnl::memory& to);

// While alive, oneDNN on the calling thread sees one thread. A primitive created under it runs
// its whole problem on whichever single thread executes it, so primitives that reduce across
// threads (the convolution weight gradient) can be run per fixed chunk of work on
// dnnl_parallel_for's threads and give the same bytes for every thread count.
class DnnlSingleThread {
 public:
  DnnlSingleThread();
  ~DnnlSingleThread();
  DnnlSingleThread(const DnnlSingleThread&) = delete;
  DnnlSingleThread& operator=(const DnnlSingleThread&) = delete;

 private:
  int saved_ = 1;
};

// Runs task(i) for every i in [0, n) on oneDNN's OpenMP threads (as many as the last
// dnnl_sync_threads or the live DnnlThreadsFor on this thread set, the caller included), split
// statically. Meant for work on a oneDNN result right after the call
// that made it: those threads are still awake then, where tw's own pool would compete with them.
void dnnl_parallel_for(int64_t n, const std::function<void(int64_t)>& task);

// Runs chunk(i) for every i in [0, n) as dnnl_parallel_for does, each on one thread; an
// exception becomes dnnl_status(op, ...). The first failure in index order is returned.
Status dnnl_parallel_chunks(const char* op, int64_t n, const std::function<Status(int64_t)>& chunk);

// A batch of `n` images cut into `count` chunks of `images` each but the last, of `last`.
struct ImageChunks {
  int64_t images, count, last;
  static ImageChunks of(int64_t n, int64_t images) {
    const int64_t count = (n + images - 1) / images;
    return {images, count, n - (count - 1) * images};
  }
  int64_t size(int64_t i) const { return i + 1 == count ? last : images; }
};

struct DnnlKeyHash {
  size_t operator()(const std::vector<int64_t>& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// Whether bf16 products run on oneDNN's bf16 kernels: the CPU has AVX512_BF16 (checked once).
// Elsewhere tensorwire computes bf16 through f32 (matmul.cc): the same products, slower.
bool bf16_native();
// Whether the CPU has VNNI (AVX512_VNNI or AVX_VNNI), whose int8 dot products oneDNN's u8 x s8
// kernels use; elsewhere (AVX2) they pair vpmaddubsw and vpmaddwd (LinearInt8, quantize.cc).
bool int8_native();

// Created primitives by key, least recently used dropped first. Entries are shared_ptr so a
// primitive evicted while another thread runs it stays alive until that run ends. `make` runs
// outside the lock (two threads may both create the same entry; one copy wins).
template <class T>
class DnnlCache {
 public:
  // Bounds the memory a server fed many distinct shapes spends on primitives (each holds
  // generated code, tens of KiB); real models use far fewer shapes than this.
  static constexpr size_t kCapacity = 256;

  Result<std::shared_ptr<const T>> get(const std::vector<int64_t>& key, const char* op,
                                       const std::function<T()>& make) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = index_.find(key);
      if (it != index_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        return it->second->second;
      }
    }
    std::shared_ptr<const T> made;
    try {
      made = std::make_shared<const T>(make());
    } catch (const std::exception& e) {
      return dnnl_status(op, e);
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) return it->second->second;
    lru_.emplace_front(key, made);
    index_[key] = lru_.begin();
    if (lru_.size() > kCapacity) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return made;
  }

 private:
  using Entry = std::pair<std::vector<int64_t>, std::shared_ptr<const T>>;
  std::mutex mu_;
  std::list<Entry> lru_;
  std::unordered_map<std::vector<int64_t>, typename std::list<Entry>::iterator, DnnlKeyHash> index_;
};

}  // namespace tw::cpu
TW_INTERNAL_END
