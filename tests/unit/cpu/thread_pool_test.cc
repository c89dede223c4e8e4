// The intra-op pool (core/thread_pool.h, on OpenMP's threads): every chunk of every run executes
// exactly once, from any number of caller threads, for pools created and destroyed in quick
// succession, for runs past 2M chunks, and when one thread is held up mid-run; a thread hands
// its OpenMP threads back with release_idle_threads. Uses only core/thread_pool.h, so it also
// builds alone (ThreadSanitizer does not see libgomp's own synchronisation):
//   g++ -std=c++20 -fopenmp -Isrc tests/unit/cpu/thread_pool_test.cc
//       src/core/thread_pool.cc -lgtest -lgtest_main -pthread
#include "core/thread_pool.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace tw {
namespace {

TEST(ThreadPool, EveryChunkRunsExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
              << "threads " << threads << " n " << n << " chunk " << i;
        }
      }
    }
  }
}

// Several threads share one pool: one of them runs on it, the others run inline; all finish
// with every chunk run once.
TEST(ThreadPool, ConcurrentCallers) {
  ThreadPool pool(3);
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 300; ++rep) {
        std::vector<std::atomic<int>> hits(37);
        pool.run(37, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
        for (auto& h : hits) bad += h.load() != 1;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// A pool destroyed right after it was made (its workers may not have started yet) or right
// after a run must not hang: a worker that starts late still sees the stop.
TEST(ThreadPool, CreatedAndDestroyedInQuickSuccession) {
  for (int rep = 0; rep < 300; ++rep) {
    auto pool = std::make_unique<ThreadPool>(2 + rep % 3);
    if (rep % 2 == 1) {
      std::atomic<int64_t> sum{0};
      pool->run(10, [&](int64_t i) { sum += i; });
      ASSERT_EQ(sum.load(), 45);
    }
    pool.reset();
  }
}

// Nested runs (a chunk that itself calls run) execute inline on the calling worker.
TEST(ThreadPool, NestedRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run(8, [&](int64_t) { pool.run(5, [&](int64_t) { inner.fetch_add(1); }); });
  EXPECT_EQ(inner.load(), 40);
}

// Many chunks in one run.
TEST(ThreadPool, RunsPastTheChunkLimit) {
  ThreadPool pool(2);
  const int64_t n = (int64_t{1} << 21) + 5;
  std::vector<uint8_t> hits(static_cast<size_t>(n), 0);
  pool.run(n, [&](int64_t i) { hits[static_cast<size_t>(i)] += 1; });
  int64_t wrong = 0;
  for (uint8_t h : hits) wrong += h != 1;
  EXPECT_EQ(wrong, 0);
}

// Each thread starts on its own contiguous share of the chunks; a thread that is held up (here:
// the first chunk a worker runs waits until every other chunk is done) has the rest of its share
// taken by the others. With a fixed split and no taking over, this run would never finish.
TEST(ThreadPool, ChunksOfAHeldUpThreadAreTakenOver) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  constexpr int64_t kChunks = 64;
  int held_runs = 0;
  for (int rep = 0; rep < 20; ++rep) {
    std::atomic<int64_t> done{0};
    std::atomic<bool> held{false}, timed_out{false};
    pool.run(kChunks, [&](int64_t) {
      if (std::this_thread::get_id() != caller && !held.exchange(true)) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (done.load() < kChunks - 1) {
          if (std::chrono::steady_clock::now() > deadline) {
            timed_out = true;
            break;
          }
          std::this_thread::yield();
        }
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      done.fetch_add(1);
    });
    ASSERT_FALSE(timed_out.load())
        << "rep " << rep << ": the held-up worker's chunks were not taken over";
    ASSERT_EQ(done.load(), kChunks);
    held_runs += held.load();
  }
  // The worker joins a run of 64 x 50 us chunks in far less than its length.
  EXPECT_GT(held_runs, 0);
}

// The ids of the process's threads (/proc/self/task).
std::set<long> process_threads() {
  std::set<long> ids;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return ids;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ids.insert(std::strtol(e->d_name, nullptr, 10));
  }
  closedir(d);
  return ids;
}

// A thread that ran parallel work holds OpenMP threads of its own until it hands them back; the
// next run on it starts them again and is still correct. The test follows the threads the run
// started by their ids, not the process's thread count: other tests of the binary may have left
// threads behind, and a thread told to exit leaves /proc a moment later (libgomp does not join
// the threads it releases), so the check waits for those ids to go, bounded.
TEST(ThreadPool, ReleaseIdleThreadsHandsTheThreadsBack) {
  ThreadPool pool(3);
  const std::set<long> before = process_threads();
  std::thread caller([&] {
    const long self = static_cast<long>(::gettid());
    std::atomic<int> sum{0};
    pool.run(64, [&](int64_t) { sum.fetch_add(1); });
    EXPECT_EQ(sum.load(), 64);
    std::set<long> started;
    for (long id : process_threads()) {
      if (id != self && !before.count(id)) started.insert(id);
    }
    EXPECT_EQ(started.size(), 2u) << "a team of three: the caller and two OpenMP threads";
    release_idle_threads();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::set<long> left = started;
    while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
      const std::set<long> now = process_threads();
      std::erase_if(left, [&](long id) { return !now.count(id); });
      if (!left.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(left.empty())
        << left.size()
        << " of the run's OpenMP threads still exist 30 s after release_idle_threads";
    sum = 0;
    pool.run(64, [&](int64_t) { sum.fetch_add(1); });
    EXPECT_EQ(sum.load(), 64);
    release_idle_threads();
  });
  caller.join();
}

}  // namespace
}  // namespace tw
