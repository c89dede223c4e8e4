// The intra-op thread pool. Kernels split work into chunks whose boundaries depend only on the
// problem size (never on the thread count), so every result is bit-identical for any number of
// threads: reductions combine per-chunk partials in chunk order.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

class ThreadPool {
 public:
  // num_threads counts the caller, which takes part in every run: 1 means no other threads.
  explicit ThreadPool(int num_threads);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return threads_; }
  // Calls fn(i) for every i in [0, n) and returns when all are done. Runs inline when n <= 1,
  // when called from inside a pool task, or when another caller is using the pool.
  void run(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  // The threads are OpenMP's (libgomp, as oneDNN's kernels run on): one set of threads for
  // every parallel kernel, so that a GEMM's workers are not left spinning at their barrier on
  // the cores an elementwise kernel's own workers want (the MLP training step ran 30% faster
  // than with a pool of its own threads beside OpenMP's).
  //
  // Scheduling. A run of n chunks is cut into one contiguous range per thread (a lane: the
  // caller's is lane 0, team thread t's is lane t). Each thread runs its own lane front to back,
  // so it streams one contiguous stretch of memory (a memory-bound 16M-element f32 sum is about
  // 10% faster than with chunks handed out in turn), then takes chunks from the back of the
  // other lanes, so a thread slow to start (its core busy with another thread) delays no
  // chunk: its chunks are run by whoever is free. Which thread runs a chunk never changes a
  // result. A lane's state is one atomic word, [front | back), changed by compare-and-swap.
  struct alignas(64) Lane {
    std::atomic<uint64_t> state{0};
  };
  // Runs chunks (fn(base + chunk)): lane `own` from the front, then the others from the back.
  void drain(int own, int64_t base, const std::function<void(int64_t)>& fn);
  int threads_;
  std::unique_ptr<Lane[]> lanes_;
  std::mutex run_mu_;  // one run at a time; a second concurrent caller runs inline
};

// Hands back the OpenMP threads the calling thread has been using for its parallel kernels
// (theirs and oneDNN's; omp_pause_resource_all): the next parallel kernel on this thread starts
// them again (tens of microseconds). For threads other than the program's own that run kernels
// in bursts, such as a server's shards, once they go idle: libgomp gives each thread that starts
// parallel work a set of threads of its own, and while more such threads exist than cores, it
// makes every one sleep at once after each parallel kernel instead of spinning briefly, so a
// thread that keeps its set while idle slows every other's kernels (an MLP training step on the
// program's thread took 1.7x as long while a server shard in the process held its set).
void release_idle_threads();

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
TW_INTERNAL_END
