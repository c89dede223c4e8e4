// The intra-op thread pool. Kernels split work into chunks whose boundaries depend only on the
// problem size (never on the thread count), so every result is bit-identical for any number of
// threads: reductions combine per-chunk partials in chunk order.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tw {

class ThreadPool {
 public:
  // num_threads counts the caller, which takes part in every run: 1 means no worker threads.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(i) for every i in [0, n) and returns when all are done. Runs inline when n <= 1,
  // when called from inside a pool task, or when another caller is using the pool.
  void run(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();
  void drain();

  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one run at a time; a second concurrent caller runs inline
  std::mutex mu_;
  std::condition_variable wake_, done_cv_;
  uint64_t generation_ = 0;
  bool stop_ = false;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int64_t> done_{0};
  int active_workers_ = 0;
};

// The process-wide intra-op pool. Size: TW_NUM_THREADS, else the hardware's thread count.
ThreadPool& intra_op_pool();
// Replaces the intra-op pool with one of n threads (n >= 1). Not safe while kernels run.
void set_num_threads(int n);
int get_num_threads();

// Splits [0, total) into chunks of `grain` items (the last may be shorter) and calls
// fn(chunk_index, begin, end) for each, in parallel. Chunk boundaries depend on total and grain
// only. Small problems (one chunk) run inline.
template <class F>
void parallel_chunks(int64_t total, int64_t grain, F&& fn) {
  if (total <= 0) return;
  if (grain < 1) grain = 1;
  int64_t chunks = (total + grain - 1) / grain;
  if (chunks == 1) {
    fn(int64_t{0}, int64_t{0}, total);
    return;
  }
  std::function<void(int64_t)> body = [&](int64_t c) {
    int64_t b = c * grain;
    int64_t e = b + grain < total ? b + grain : total;
    fn(c, b, e);
  };
  intra_op_pool().run(chunks, body);
}

}  // namespace tw
