// Cancelling a kernel that is running (issue 52): the server runs an op on behalf of a session
// whose client may go away; the op's thread carries that session's flag (CancelScope), and
// tensorwire's own kernels look at it between chunks (parallel_chunks, the cpu backend's
// dnnl_parallel_chunks, attention's key tiles) and stop early, leaving their outputs unfinished:
// the caller poisons them (a cancelled op's outputs are never read). A library call that cannot
// be interrupted (a oneDNN primitive) is bounded instead by the server's --max-op-cost.
#pragma once
#include <atomic>

#include "tensorwire/export.h"

TW_INTERNAL_BEGIN

namespace tw {

// The flag of the work the calling thread runs, null when none (a local program).
const std::atomic<bool>* cancel_flag();
// Whether that work has been cancelled: one relaxed load, for a kernel to ask between chunks.
inline bool cancelled(const std::atomic<bool>* flag) {
  return flag != nullptr && flag->load(std::memory_order_relaxed);
}
inline bool cancelled() { return cancelled(cancel_flag()); }

// Sets the calling thread's flag for its lifetime (the previous one back after): the server's
// thread around an op, and a kernel's worker around a chunk it runs for a flagged caller.
class CancelScope {
 public:
  explicit CancelScope(const std::atomic<bool>* flag);
  ~CancelScope();
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;

 private:
  const std::atomic<bool>* prev_;
};

// Marks the calling thread as running long work (a server's LongWork thread around an op) for
// its lifetime: meanwhile release_idle_threads() does nothing, because handing the OpenMP threads
// back waits for every parallel kernel of the process to end (libgomp's lock), which would stall
// the idle server thread that asks for the whole of a long op.
class LongWorkScope {
 public:
  LongWorkScope();
  ~LongWorkScope();
  LongWorkScope(const LongWorkScope&) = delete;
  LongWorkScope& operator=(const LongWorkScope&) = delete;
};
// How many threads are inside a LongWorkScope now.
int long_work_running();

}  // namespace tw
TW_INTERNAL_END
