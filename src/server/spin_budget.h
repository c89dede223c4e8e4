// How many of a server's threads may spin (poll for work without sleeping, --spin-us) at once:
// --spin-threads, by default one fewer than the machine's cores. A spinning thread holds a core;
// with every core held, whatever else must run (the client on the same machine, a thread of
// the server woken for another session) waits for the scheduler's time slice, milliseconds. A
// thread that finds the budget spent does not spin: it sleeps at once, as with --spin-us 0.
#pragma once
#include <atomic>
#include <cstdint>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw::server {

class SpinBudget {
 public:
  explicit SpinBudget(int max_threads) : max_(max_threads < 1 ? 1 : max_threads) {}
  SpinBudget(const SpinBudget&) = delete;
  SpinBudget& operator=(const SpinBudget&) = delete;

  // A thread's hold on the budget, for as long as it spins; a thread already holding it (a
  // direct poll in a handler the shard's spin runs) holds it once.
  class Hold {
   public:
    explicit Hold(SpinBudget& b) : b_(b), held_(b.take()) {}
    ~Hold() {
      if (held_) b_.give();
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    explicit operator bool() const { return held_; }

   private:
    SpinBudget& b_;
    const bool held_;
  };

  int spinning() const { return spinning_.load(std::memory_order_relaxed); }
  int max() const { return max_; }
  // Times a thread would have spun and found the budget spent (tensorwire_spin_refused_total).
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  bool take() {
    if (depth_ > 0) {
      ++depth_;
      return true;
    }
    for (int n = spinning_.load(std::memory_order_relaxed); n < max_;) {
      if (spinning_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) {
        depth_ = 1;
        return true;
      }
    }
    refused_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  void give() {
    if (--depth_ == 0) spinning_.fetch_sub(1, std::memory_order_relaxed);
  }

  // Holds of this thread (on whichever budget: a thread serves one server).
  static inline thread_local int depth_ = 0;
  std::atomic<int> spinning_{0};
  std::atomic<uint64_t> refused_{0};
  const int max_;
};

}  // namespace tw::server
TW_INTERNAL_END
