// A shard's thread: the loop that runs one io_context of the server's pool (server_impl.h says
// what a shard is), with the spin that keeps a busy shard from sleeping between requests.
#include <asio.hpp>
#include <chrono>
#include <thread>

#include "core/thread_pool.h"
#include "server/server_impl.h"

namespace tw::server {

namespace {

// How long a shard's thread stays idle before it hands back the OpenMP threads of its kernels.
constexpr auto kReleaseThreadsAfter = std::chrono::milliseconds(20);

}  // namespace

// A shard's thread. With a spin, once it has run a handler it keeps looking for more without
// sleeping (io_context::poll: ready handlers, and the sockets through a non-blocking
// epoll_wait) until `spin` has passed with nothing to do, then blocks again. Spinning only ever
// follows work, so an idle server costs no CPU, and each look yields the CPU to any other
// runnable thread first (sched_yield returns at once when there is none), so a loaded machine
// loses little to it. A spin that found nothing is not tried again until work arrives within
// `spin` of the last: a client that thinks for long between requests (a training loop building
// its next batch) is not spun for, one that asks again at once is.
void run_shard(asio::io_context& io, std::chrono::microseconds spin, SpinBudget& budget) {
  using Clock = std::chrono::steady_clock;
  bool spinning = true;
  bool holds_threads = false;  // ran work since it last handed its OpenMP threads back
  auto idle_since = Clock::now();
  for (;;) {
    // Idle for kReleaseThreadsAfter after work: hand back the threads its kernels started
    // (tw::release_idle_threads), then sleep until work comes.
    const size_t ran = holds_threads ? io.run_one_for(kReleaseThreadsAfter) : io.run_one();
    if (ran == 0) {
      if (io.stopped()) return;
      release_idle_threads();
      holds_threads = false;
      continue;
    }
    holds_threads = true;
    if (spin.count() <= 0) continue;
    auto now = Clock::now();
    if (!spinning && now - idle_since < spin) spinning = true;  // a spin would have caught it
    if (spinning) {
      spinning = false;
      server::SpinBudget::Hold hold(budget);  // none left: no spin (sleeps in the reactor)
      for (auto until = now + spin; hold && !io.stopped() && (now = Clock::now()) < until;) {
        if (io.poll() > 0) {
          spinning = true;
          until = Clock::now() + spin;
        } else {
          std::this_thread::yield();
        }
      }
    }
    idle_since = Clock::now();
  }
}

}  // namespace tw::server
