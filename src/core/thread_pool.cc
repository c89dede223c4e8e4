#include "core/thread_pool.h"

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
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::drain() {
  int64_t i;
  while ((i = next_.fetch_add(1, std::memory_order_relaxed)) < n_) {
    (*fn_)(i);
    done_.fetch_add(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_workers_;
    }
    t_in_pool_task = true;
    drain();
    t_in_pool_task = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      --active_workers_;
    }
    done_cv_.notify_all();
  }
}

void ThreadPool::run(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  std::unique_lock<std::mutex> run_lock(run_mu_, std::defer_lock);
  if (n == 1 || workers_.empty() || t_in_pool_task || !run_lock.try_lock()) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    next_.store(0);
    done_.store(0);
    ++generation_;
  }
  wake_.notify_all();
  t_in_pool_task = true;
  drain();
  t_in_pool_task = false;
  std::unique_lock<std::mutex> lock(mu_);
  // Wait until every chunk finished and no worker still touches fn_ (it may be about to read
  // next_ for this generation).
  done_cv_.wait(lock, [&] { return done_.load() >= n_ && active_workers_ == 0; });
  fn_ = nullptr;
}

ThreadPool& intra_op_pool() { return *pool_slot(); }

void set_num_threads(int n) { pool_slot() = std::make_unique<ThreadPool>(n < 1 ? 1 : n); }

int get_num_threads() { return intra_op_pool().num_threads(); }

}  // namespace tw
