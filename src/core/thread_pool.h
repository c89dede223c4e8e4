// The intra-op thread pool. Kernels split work into chunks whose boundaries depend only on the
// problem size (never on the thread count), so every result is bit-identical for any number of
// threads: reductions combine per-chunk partials in chunk order.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
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
  // Scheduling. A run of n chunks is cut into one contiguous range per thread (a lane: the
  // caller's is lane 0, worker w's is lane w + 1). Each thread runs its own lane front to back,
  // so it streams one contiguous stretch of memory (a memory-bound 16M-element f32 sum is about
  // 10% faster than with chunks handed out in turn), then takes chunks from the back of the
  // other lanes, so a worker slow to wake (its core busy with another thread) delays nothing:
  // its chunks are run by whoever is free. Which thread runs a chunk never changes a result.
  //
  // A lane's state is one atomic word, [generation | front | back), changed by
  // compare-and-swap: a thread that claims a chunk has claimed it for the run it read, and a
  // worker that wakes after its run is over finds the lanes empty or of a later generation and
  // touches nothing.
  static constexpr int kIndexBits = 20;  // at most 1M chunks a run (run() splits larger)
  static constexpr int kGenBits = 64 - 2 * kIndexBits;
  static constexpr uint64_t kIndexMask = (uint64_t{1} << kIndexBits) - 1;
  struct alignas(64) Lane {
    std::atomic<uint64_t> state{0};
  };
  void worker_loop(int lane);
  void run_batch(int64_t n, const std::function<void(int64_t)>& fn);
  // Runs the chunks of generation `gen`: lane `own` from the front, then the others from the back.
  void drain(int own, uint64_t gen);
  void run_chunk(int64_t i);
  std::vector<std::thread> workers_;
  std::unique_ptr<Lane[]> lanes_;
  std::mutex run_mu_;  // one run at a time; a second concurrent caller runs inline
  uint64_t generation_ = 0;  // the last published generation (under run_mu_)
  std::atomic<uint64_t> published_{0};  // generation_, for workers
  std::atomic<const std::function<void(int64_t)>*> fn_{nullptr};
  std::atomic<int64_t> done_{0};  // chunks of the current generation finished
  std::atomic<uint32_t> wake_{0};  // bumped for every run; idle workers wait on it
  std::atomic<bool> stop_{false};
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
