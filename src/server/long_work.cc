#include "server/long_work.h"

#include "core/thread_pool.h"

namespace tw::server {

LongWork::LongWork(int threads) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { loop(); });
}

LongWork::~LongWork() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void LongWork::post(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_one();
}

size_t LongWork::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + running_;
}

void LongWork::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stop_) return;
      // Idle: hand back the OpenMP threads this thread's kernels started (shard.cc says why),
      // unless another long op runs (handing back waits for every parallel kernel to end).
      if (running_ == 0) {
        lock.unlock();
        release_idle_threads();
        lock.lock();
      }
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      continue;
    }
    std::function<void()> work = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    lock.unlock();
    work();
    work = nullptr;  // (what it holds goes before the next)
    lock.lock();
    --running_;
  }
}

}  // namespace tw::server
