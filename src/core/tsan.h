// ThreadSanitizer annotations for synchronisation TSan cannot see. Debian's libgomp is not
// instrumented, so the fork and the join of an OpenMP parallel region (its futexes and atomics)
// order nothing as far as TSan knows, and memory a region's threads touched then looks raced with
// the caller's accesses after it (tests/tsan.supp cannot name libgomp there: the racing frames are
// ours). TsanParallelRegion tells TSan what the region does: the caller's writes before it happen
// before every thread's body (begin), and every thread's body happens before the caller's code
// after it (end). No code without -fsanitize=thread.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TW_TSAN 1
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace tw {

class TsanParallelRegion {
 public:
#if defined(TW_TSAN)
  TsanParallelRegion() { __tsan_release(&fork_); }   // the caller, before the region
  ~TsanParallelRegion() { __tsan_acquire(&join_); }  // the caller, after it
  void thread_begins() { __tsan_acquire(&fork_); }   // each thread, first
  void thread_ends() { __tsan_release(&join_); }     // each thread, last
#else
  void thread_begins() {}
  void thread_ends() {}
#endif

 private:
#if defined(TW_TSAN)
  char fork_ = 0, join_ = 0;
#endif
};

}  // namespace tw
