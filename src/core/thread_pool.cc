#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

namespace tw {
namespace {
thread_local bool t_in_pool_task = false;

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

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain(uint64_t gen) {
  uint64_t s = claim_.load(std::memory_order_acquire);
  for (;;) {
    if ((s >> kIndexBits) != gen) return;
    const auto i = static_cast<int64_t>(s & kIndexMask);
    // n_ may already belong to a later generation; the compare-and-swap below fails then.
    if (i >= n_.load(std::memory_order_relaxed)) return;
    if (!claim_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;
    }
    // Chunk i of generation gen is ours: that run cannot end before we count it done, so fn_
    // is still its function.
    (*fn_.load(std::memory_order_relaxed))(i);
    done_.fetch_add(1, std::memory_order_acq_rel);
    done_.notify_one();  // only the run's caller waits on it
    s = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  t_in_pool_task = true;  // a kernel that runs on a worker never starts a nested run
  // From wake_'s initial value: a worker that starts after the first bump (even the
  // destructor's) sees it at once.
  uint32_t seen = 0;
  for (;;) {
    wake_.wait(seen, std::memory_order_acquire);
    seen = wake_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    drain(claim_.load(std::memory_order_acquire) >> kIndexBits);
  }
}

void ThreadPool::run_batch(int64_t n, const std::function<void(int64_t)>& fn) {
  const uint64_t gen = ++generation_ & ((uint64_t{1} << (64 - kIndexBits)) - 1);
  fn_.store(&fn, std::memory_order_relaxed);
  n_.store(n, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  claim_.store(gen << kIndexBits, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  t_in_pool_task = true;
  drain(gen);
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
