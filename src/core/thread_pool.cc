#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <thread>

#include "core/cancel.h"
#include "core/env.h"
#include "core/tsan.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace tw {
namespace {
thread_local bool t_in_pool_task = false;
constexpr int kIndexBits = 32;
constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
constexpr uint64_t kNoChunk = ~uint64_t{0};  // ThreadPool::drain's "this lane has none left"

int default_threads() {
  if (auto n = env_number(Env::kNUM_THREADS); n && *n >= 1)
    return static_cast<int>(std::min<uint64_t>(*n, 1 << 16));
  unsigned h = std::thread::hardware_concurrency();
  return h ? static_cast<int>(h) : 1;
}

std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool = std::make_unique<ThreadPool>(default_threads());
  return pool;
}

// Marks the calling thread as running pool chunks for a scope: a kernel that runs inside a
// chunk never starts a nested run.
struct InPoolTask {
  InPoolTask() { t_in_pool_task = true; }
  ~InPoolTask() { t_in_pool_task = false; }
};
}  // namespace

ThreadPool::ThreadPool(int num_threads)
    : threads_(std::max(num_threads, 1)),
      lanes_(std::make_unique<Lane[]>(static_cast<size_t>(threads_))) {}

void ThreadPool::drain(int own, int64_t base, const std::function<void(int64_t)>& fn) {
  // Claims one chunk of `lane` (from its front or its back); kNoChunk when it has none left.
  auto claim = [&](int lane, bool front) -> uint64_t {
    std::atomic<uint64_t>& st = lanes_[static_cast<size_t>(lane)].state;
    uint64_t s = st.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t lo = s >> kIndexBits, hi = s & kIndexMask;
      if (lo >= hi) return kNoChunk;
      const uint64_t next = front ? s + (uint64_t{1} << kIndexBits) : s - 1;
      if (st.compare_exchange_weak(s, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
        return front ? lo : hi - 1;
      }
    }
  };
  for (uint64_t i; (i = claim(own, true)) != kNoChunk;) fn(base + static_cast<int64_t>(i));
  for (int k = 1; k < threads_; ++k) {
    const int victim = (own + k) % threads_;
    for (uint64_t i; (i = claim(victim, false)) != kNoChunk;) fn(base + static_cast<int64_t>(i));
  }
}

void ThreadPool::run(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (const std::atomic<bool>* flag = cancel_flag()) {
    // A caller whose work can be cancelled (a server's long op, core/cancel.h): once it is, the
    // chunks not yet started are skipped (its output is unfinished, and the caller poisons it).
    const std::function<void(int64_t)> checked = [flag, &fn](int64_t i) {
      if (!cancelled(flag)) fn(i);
    };
    const CancelScope plain(nullptr);  // (the run below takes the unchecked path)
    return run(n, checked);
  }
  std::unique_lock<std::mutex> run_lock(run_mu_, std::defer_lock);
#ifdef _OPENMP
  const bool parallel = n > 1 && threads_ > 1 && !t_in_pool_task && run_lock.try_lock();
#else
  const bool parallel = false;
#endif
  if (!parallel) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  for (int64_t base = 0; base < n; base += static_cast<int64_t>(kIndexMask)) {
    const auto count = static_cast<uint64_t>(std::min<int64_t>(n - base, kIndexMask));
    const auto lanes = static_cast<uint64_t>(threads_);
    for (uint64_t t = 0; t < lanes; ++t) {
      const uint64_t lo = count * t / lanes, hi = count * (t + 1) / lanes;
      lanes_[t].state.store((lo << kIndexBits) | hi, std::memory_order_relaxed);
    }
    // The region's start publishes the lanes to the team; its end waits for every thread.
#ifdef _OPENMP
    TsanParallelRegion region;  // (what TSan cannot see of libgomp: core/tsan.h)
#pragma omp parallel num_threads(threads_)
    {
      region.thread_begins();
      {
        InPoolTask in_task;
        drain(omp_get_thread_num(), base, fn);
      }
      region.thread_ends();
    }
#endif
  }
}

void release_idle_threads() {
#ifdef _OPENMP
  if (omp_in_parallel() || long_work_running() > 0) return;  // (core/cancel.h says why)
  (void)omp_pause_resource_all(omp_pause_soft);
#endif
}

ThreadPool& intra_op_pool() { return *pool_slot(); }

void set_num_threads(int n) { pool_slot() = std::make_unique<ThreadPool>(n < 1 ? 1 : n); }

int get_num_threads() { return intra_op_pool().num_threads(); }

}  // namespace tw
