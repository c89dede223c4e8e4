#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace tw {
namespace {
thread_local bool t_in_pool_task = false;
constexpr uint64_t kNoChunk = ~uint64_t{0};  // ThreadPool::drain's "this lane has none left"

int default_threads() {
  if (const char* e = std::getenv("TW_NUM_THREADS")) {
    int n = std::atoi(e);
    if (n >= 1) return n;
  }
  unsigned h = std::thread::hardware_concurrency();
  return h ? static_cast<int>(h) : 1;
}

std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool = std::make_unique<ThreadPool>(default_threads());
  return pool;
}
}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : lanes_(std::make_unique<Lane[]>(static_cast<size_t>(std::max(num_threads, 1)))) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunk(int64_t i) {
  // Chunk i was claimed by a compare-and-swap on a state of this run: the run cannot end before
  // we count it done, so fn_ is still its function.
  (*fn_.load(std::memory_order_relaxed))(i);
  done_.fetch_add(1, std::memory_order_acq_rel);
  done_.notify_one();  // only the run's caller waits on it
}

void ThreadPool::drain(int own, uint64_t gen) {
  const int lanes = num_threads();
  // Claims one chunk of `lane` (from its front or its back); kNoChunk when it has none left.
  auto claim = [&](int lane, bool front) -> uint64_t {
    std::atomic<uint64_t>& st = lanes_[static_cast<size_t>(lane)].state;
    uint64_t s = st.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t lo = (s >> kIndexBits) & kIndexMask, hi = s & kIndexMask;
      if ((s >> (2 * kIndexBits)) != gen || lo >= hi) return kNoChunk;
      const uint64_t next = front ? s + (uint64_t{1} << kIndexBits) : s - 1;
      if (st.compare_exchange_weak(s, next, std::memory_order_acq_rel,
                                   std::memory_order_acquire)) {
        return front ? lo : hi - 1;
      }
    }
  };
  for (uint64_t i; (i = claim(own, true)) != kNoChunk;) run_chunk(static_cast<int64_t>(i));
  for (int k = 1; k < lanes; ++k) {
    const int victim = (own + k) % lanes;
    for (uint64_t i; (i = claim(victim, false)) != kNoChunk;) run_chunk(static_cast<int64_t>(i));
  }
}

void ThreadPool::worker_loop(int lane) {
  t_in_pool_task = true;  // a kernel that runs on a worker never starts a nested run
  // From wake_'s initial value: a worker that starts after the first bump (even the
  // destructor's) sees it at once.
  uint32_t seen = 0;
  for (;;) {
    wake_.wait(seen, std::memory_order_acquire);
    seen = wake_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    drain(lane, published_.load(std::memory_order_acquire));
  }
}

void ThreadPool::run_batch(int64_t n, const std::function<void(int64_t)>& fn) {
  const uint64_t gen = ++generation_ & ((uint64_t{1} << kGenBits) - 1);
  fn_.store(&fn, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  const auto lanes = static_cast<uint64_t>(num_threads());
  const auto un = static_cast<uint64_t>(n);
  for (uint64_t t = 0; t < lanes; ++t) {
    const uint64_t lo = un * t / lanes, hi = un * (t + 1) / lanes;
    lanes_[t].state.store((gen << (2 * kIndexBits)) | (lo << kIndexBits) | hi,
                          std::memory_order_release);
  }
  published_.store(gen, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  t_in_pool_task = true;
  drain(0, gen);
  t_in_pool_task = false;
  // Every chunk is claimed; wait for those still running on workers.
  for (int64_t d; (d = done_.load(std::memory_order_acquire)) < n;) {
    done_.wait(d, std::memory_order_acquire);
  }
}

void ThreadPool::run(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  std::unique_lock<std::mutex> run_lock(run_mu_, std::defer_lock);
  if (n == 1 || workers_.empty() || t_in_pool_task || !run_lock.try_lock()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  constexpr auto kMax = static_cast<int64_t>(kIndexMask);
  if (n <= kMax) {
    run_batch(n, fn);
    return;
  }
  for (int64_t base = 0; base < n; base += kMax) {
    const std::function<void(int64_t)> part = [&](int64_t i) { fn(base + i); };
    run_batch(std::min(kMax, n - base), part);
  }
}

ThreadPool& intra_op_pool() { return *pool_slot(); }

void set_num_threads(int n) { pool_slot() = std::make_unique<ThreadPool>(n < 1 ? 1 : n); }

int get_num_threads() { return intra_op_pool().num_threads(); }

}  // namespace tw
